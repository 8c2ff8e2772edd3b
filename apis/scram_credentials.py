"""DescribeUserScramCredentials (key 50) and AlterUserScramCredentials (51), KIP-554, as Kafka
4.1 answers them.

DescribeUserScramCredentials needs DESCRIBE on the cluster and answers from this broker's
credential cache (Kafka's ScramImage.describe): each user's mechanisms and iterations, never
a salt or key; a named user without credentials is RESOURCE_NOT_FOUND, a user named twice
DUPLICATE_RESOURCE; no names (null or empty) describes every user. AlterUserScramCredentials
needs ALTER on the cluster (else every user named is CLUSTER_AUTHORIZATION_FAILED); the
request is checked as Kafka's ScramControlManager checks it (controller/scram_alterations.py)
and the controller stores the valid changes, answering each user once.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from kio.schema.errors import ErrorCode

from gregor.apis.acl import authorize
from gregor.apis.acls import CLUSTER_REFUSED
from gregor.apis.context import NO_THROTTLE, RequestContext, Services, build, later, nested
from gregor.controller.acls.model import CLUSTER_NAME, AclOperation, ResourceType
from gregor.controller.scram_alterations import MECHANISM_CODES, Upsertion, alterations
from gregor.controller.scram_cache import CredentialCache
from gregor.wire.errors import KafkaError
from gregor.wire.schema import response_type
from gregor.wire.versions import ALTER_USER_SCRAM_CREDENTIALS, DESCRIBE_USER_SCRAM_CREDENTIALS

# ScramImage's messages, the user's name after each.
DUPLICATE_USER = "Cannot describe SCRAM credentials for the same user twice in a single request: "
UNKNOWN_USER = "Attempt to describe a user credential that does not exist: "


def handle_describe(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(DESCRIBE_USER_SCRAM_CREDENTIALS, ctx.api_version)
    result = nested(cls, "DescribeUserScramCredentialsResult")
    names = [u.name for u in request.users or ()]
    if not authorize(services, ctx, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        error = CLUSTER_REFUSED
        results = [
            result(user=n, error_code=error.code, error_message=error.message, credential_infos=())
            for n in names
        ]
        return build(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=error.code,
            error_message=error.message,
            results=tuple(results),
        )
    cache = services.controller.credential_cache
    counts = Counter(names)
    users = list(counts) if names else list(cache.users())
    return build(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        results=tuple(_described(cls, cache, u, counts[u] > 1) for u in users),
    )


def _described(cls: type, cache: CredentialCache, user: str, duplicate: bool) -> Any:
    result = nested(cls, "DescribeUserScramCredentialsResult")
    info = nested(cls, "CredentialInfo")
    iterations = cache.iterations(user)
    if duplicate:
        code, message = ErrorCode.duplicate_resource, DUPLICATE_USER + user
    elif not iterations:
        code, message = ErrorCode.resource_not_found, UNKNOWN_USER + user
    else:
        code, message = ErrorCode.none, None
    infos = () if code != ErrorCode.none else iterations.items()
    return result(
        user=user,
        error_code=code,
        error_message=message,
        credential_infos=tuple(
            info(mechanism=MECHANISM_CODES[m], iterations=n) for m, n in sorted(infos)
        ),
    )


def handle_alter(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(ALTER_USER_SCRAM_CREDENTIALS, ctx.api_version)
    named = [d.name for d in request.deletions] + [u.name for u in request.upsertions]
    if not authorize(services, ctx, AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        refused: dict[str, KafkaError | None] = dict.fromkeys(sorted(set(named)), CLUSTER_REFUSED)
        return _altered(cls, refused)
    valid, errors = alterations(
        [(d.name, d.mechanism) for d in request.deletions],
        [
            Upsertion(u.name, u.mechanism, u.iterations, u.salt, u.salted_password)
            for u in request.upsertions
        ],
    )

    async def alter() -> Any:
        done = await services.controller.alter_scram_credentials(valid) if valid else {}
        outcome = {**done, **errors}
        return _altered(cls, {user: outcome[user] for user in dict.fromkeys(named)})

    return later(alter())


def _altered(cls: type, outcome: dict[str, KafkaError | None]) -> Any:
    result = nested(cls, "AlterUserScramCredentialsResult")
    return build(
        cls,
        throttle_time=NO_THROTTLE,
        results=tuple(
            result(
                user=user,
                error_code=ErrorCode.none if error is None else error.code,
                error_message=None if error is None else error.message,
            )
            for user, error in outcome.items()
        ),
    )
