"""DescribeClientQuotas (key 48) and AlterClientQuotas (key 49), KIP-546.

Entities are (user, client-id) pairs as in Kafka, or an IP address alone (KIP-612, its
one quota ``connection_creation_rate``); a null name is the entity type's default. The
controller stores the quotas (the embedded node's metadata file, or ZooKeeper's
/config/users, /config/clients and /config/ips) and every broker enforces them at once.
Filters and errors follow Kafka's ClientQuotasImage and ClientQuotaControlManager, and for
IP entities its ZooKeeper-mode ZkAdminManager. DescribeClientQuotas needs DESCRIBE_CONFIGS
and AlterClientQuotas ALTER_CONFIGS on the cluster (CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

import logging
import math
from typing import Any

from kio.schema.errors import ErrorCode

from gregor.apis.acl import MESSAGES, authorize_cluster
from gregor.apis.context import NO_THROTTLE, RequestContext, Services, build, later, nested
from gregor.controller.acls.model import AclOperation
from gregor.controller.quota_entities import (
    DEFAULT,
    IP_QUOTA_KEYS,
    QUOTA_KEYS,
    IpEntity,
    QuotaEntity,
    desanitize,
    normalize_ip,
    sanitize,
)
from gregor.log.errors import KafkaStorageError
from gregor.wire.errors import KafkaError
from gregor.wire.schema import response_type
from gregor.wire.versions import ALTER_CLIENT_QUOTAS, DESCRIBE_CLIENT_QUOTAS

logger = logging.getLogger(__name__)

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
# Kafka knows this one; Gregor does not enforce it, so it refuses to store it rather than
# let an operator believe it is in force.
_UNSUPPORTED_KEYS = ("controller_mutation_rate",)
_INT_MAX = 2**31 - 1


class QuotaRequestError(KafkaError):
    """A client quota request refused with a Kafka error code."""


def handle_describe(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(DESCRIBE_CLIENT_QUOTAS, ctx.api_version)
    if not authorize_cluster(services, ctx, AclOperation.DESCRIBE_CONFIGS):
        refused = ErrorCode.cluster_authorization_failed
        return build(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=refused,
            error_message=MESSAGES[refused],
            entries=None,
        )
    try:
        exact, specified = _filter(request.components)
    except QuotaRequestError as e:
        return build(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=e.code,
            error_message=e.message,
            entries=None,
        )

    async def describe() -> Any:
        configs = await services.controller.client_quotas()
        entries = [
            _entry(cls, entity, values)
            for entity, values in configs.items()
            if values and _matches(_named(entity), exact, specified, request.strict)
        ]
        return build(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.none,
            error_message=None,
            entries=tuple(entries),
        )

    return later(describe())


def _filter(components: Any) -> tuple[dict[str, str | None], set[str]]:
    """The filter's exact matches (type -> name, None for the default) and the types that
    must merely be present."""
    exact: dict[str, str | None] = {}
    specified: set[str] = set()
    for c in components:
        kind = c.entity_type
        if not kind:
            raise QuotaRequestError(ErrorCode.invalid_request, "Invalid empty entity type.")
        if kind in exact or kind in specified:
            raise QuotaRequestError(
                ErrorCode.invalid_request,
                f"Entity type {kind} cannot appear more than once in the filter.",
            )
        if kind not in (USER, CLIENT_ID, IP):
            raise QuotaRequestError(
                ErrorCode.unsupported_version, f"Unsupported entity type {kind}"
            )
        if c.match_type == MATCH_EXACT:
            if c.match is None:
                raise QuotaRequestError(
                    ErrorCode.invalid_request,
                    "Request specified MATCH_TYPE_EXACT, but set match string to null.",
                )
            exact[kind] = c.match
        elif c.match_type == MATCH_DEFAULT:
            if c.match is not None:
                raise QuotaRequestError(
                    ErrorCode.invalid_request,
                    "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.",
                )
            exact[kind] = None
        elif c.match_type == MATCH_SPECIFIED:
            if c.match is not None:
                raise QuotaRequestError(
                    ErrorCode.invalid_request,
                    "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.",
                )
            specified.add(kind)
        else:
            raise QuotaRequestError(ErrorCode.invalid_request, f"Unknown match type {c.match_type}")
    kinds = exact.keys() | specified
    if IP in kinds and (USER in kinds or CLIENT_ID in kinds):
        raise QuotaRequestError(
            ErrorCode.invalid_request,
            "Invalid entity filter component combination. IP filter component should not be "
            "used with user or clientId filter component.",
        )
    return exact, specified


def _named(entity: QuotaEntity) -> dict[str, str | None]:
    """The entity as the protocol names it: type -> name, None for the default."""
    named: dict[str, str | None] = {}
    if isinstance(entity, IpEntity):
        named[IP] = None if entity.ip == DEFAULT else desanitize(entity.ip)
        return named
    for kind, name in zip((USER, CLIENT_ID), entity, strict=True):
        if name is not None:
            named[kind] = None if name == DEFAULT else desanitize(name)
    return named


def _matches(
    named: dict[str, str | None], exact: dict[str, str | None], specified: set[str], strict: bool
) -> bool:
    if strict and len(named) != len(exact) + len(specified):
        return False
    for kind, name in exact.items():
        if kind not in named or named[kind] != name:
            return False
    return all(kind in named for kind in specified)


def _entry(cls: type, entity: QuotaEntity, values: dict[str, float]) -> Any:
    return nested(cls, "EntryData")(
        entity=tuple(
            nested(cls, "EntityData")(entity_type=kind, entity_name=name)
            for kind, name in _named(entity).items()
        ),
        values=tuple(
            nested(cls, "ValueData")(key=key, value=value) for key, value in sorted(values.items())
        ),
    )


def handle_alter(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(ALTER_CLIENT_QUOTAS, ctx.api_version)
    results: list[tuple[Any, ErrorCode, str | None]] = []
    if not authorize_cluster(services, ctx, AclOperation.ALTER_CONFIGS):
        refused = ErrorCode.cluster_authorization_failed
        return build(
            cls,
            throttle_time=NO_THROTTLE,
            entries=tuple(
                nested(cls, "EntryData")(
                    error_code=refused,
                    error_message=MESSAGES[refused],
                    entity=tuple(
                        nested(cls, "EntityData")(
                            entity_type=e.entity_type, entity_name=e.entity_name
                        )
                        for e in entry.entity
                    ),
                )
                for entry in request.entries
            ),
        )
    changes: dict[QuotaEntity, dict[str, float | None]] = {}
    seen: set[QuotaEntity] = set()
    for entry in request.entries:
        try:
            entity = _entity(entry.entity)
            if entity in seen:
                raise QuotaRequestError(
                    ErrorCode.invalid_request, f"Ignoring duplicate entity {_show(entity)}"
                )
            seen.add(entity)
            ops = _ops(entity, entry.ops)
        except QuotaRequestError as e:
            results.append((entry.entity, e.code, e.message))
            continue
        changes[entity] = ops
        results.append((entry.entity, ErrorCode.none, None))

    def respond(failure: QuotaRequestError | None = None) -> Any:
        entries = []
        for entity, code, message in results:
            if failure is not None and code == ErrorCode.none:
                code, message = failure.code, failure.message
            entries.append(
                nested(cls, "EntryData")(
                    error_code=code,
                    error_message=message,
                    entity=tuple(
                        nested(cls, "EntityData")(
                            entity_type=e.entity_type, entity_name=e.entity_name
                        )
                        for e in entity
                    ),
                )
            )
        return build(cls, throttle_time=NO_THROTTLE, entries=tuple(entries))

    if request.validate_only or not changes:
        return respond()

    async def alter() -> Any:
        try:
            await services.controller.alter_client_quotas(changes)
        except KafkaStorageError as e:
            logger.error("AlterClientQuotas failed: %s", e)
            return respond(QuotaRequestError(ErrorCode.kafka_storage_error, str(e)))
        return respond()

    return later(alter())


def _entity(components: Any) -> QuotaEntity:
    """The (user, client id) an AlterClientQuotas entry names, sanitized, or its error."""
    if not components:
        raise QuotaRequestError(ErrorCode.invalid_request, "Invalid empty client quota entity")
    named: dict[str, str | None] = {}
    for c in components:
        kind, name = c.entity_type, c.entity_name
        if kind in named:
            raise QuotaRequestError(
                ErrorCode.invalid_request,
                f"Invalid empty client quota entity, duplicate entity entry {kind}",
            )
        if kind not in (USER, CLIENT_ID, IP):
            raise QuotaRequestError(
                ErrorCode.invalid_request, f"Unhandled client quota entity type: {kind}"
            )
        if name is not None and not name:
            raise QuotaRequestError(ErrorCode.invalid_request, f"Empty {kind} not supported")
        named[kind] = name

    if IP in named:
        if len(named) > 1:
            raise QuotaRequestError(
                ErrorCode.invalid_request,
                "Invalid quota entity combination, IP entity should not be used with "
                "user/client ID entity.",
            )
        name = named[IP]
        if name is None:
            return IpEntity(DEFAULT)
        ip = normalize_ip(name)
        if ip is None:  # Kafka also resolves host names; Gregor takes addresses only
            raise QuotaRequestError(
                ErrorCode.invalid_request, f"{name} is not a valid IP or resolvable host."
            )
        return IpEntity(sanitize(ip))

    def part(kind: str) -> str | None:
        if kind not in named:
            return None
        name = named[kind]
        return DEFAULT if name is None else sanitize(name)

    return part(USER), part(CLIENT_ID)


def _ops(entity: QuotaEntity, ops: Any) -> dict[str, float | None]:
    """Each key's new value (None: removed), checked as Kafka checks them."""
    out: dict[str, float | None] = {}
    for op in ops:
        key = op.key
        if key in out:
            raise QuotaRequestError(
                ErrorCode.invalid_request,
                f"Duplicate quota key {key} not updating quota for this entity {_show(entity)}",
            )
        if op.remove:
            out[key] = None
            continue
        if key in _UNSUPPORTED_KEYS:
            raise QuotaRequestError(
                ErrorCode.invalid_request, f"Quota {key} is not supported by this broker"
            )
        ip = isinstance(entity, IpEntity)
        kind = (IP_QUOTA_KEYS if ip else QUOTA_KEYS).get(key)
        if kind is None:
            raise QuotaRequestError(ErrorCode.invalid_request, f"Invalid configuration key {key}")
        value = op.value
        if not math.isfinite(value):
            raise QuotaRequestError(
                ErrorCode.invalid_request, f"Configuration {key} must be finite"
            )
        if ip and value > _INT_MAX:
            raise QuotaRequestError(
                ErrorCode.invalid_request, f"Proposed value for {key} is too large for an INT."
            )
        if kind is int and abs(round(value) - value) > 1e-6:
            raise QuotaRequestError(
                ErrorCode.invalid_request,
                f"Configuration {key} must be a {'Integer' if ip else 'Long'} value",
            )
        if ip and value >= 0:  # 0 is allowed, as in Kafka: every connection is refused
            out[key] = float(round(value))
            continue
        if value <= 0:
            # A bound of 0 would throttle forever; Gregor refuses it (a removal lifts a quota).
            raise QuotaRequestError(
                ErrorCode.invalid_request, f"Configuration {key} must be positive"
            )
        out[key] = float(round(value)) if kind is int else float(value)
    return out


def _show(entity: QuotaEntity) -> str:
    return " ".join(f"{k}={'<default>' if v is None else v}" for k, v in _named(entity).items())
