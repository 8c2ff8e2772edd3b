"""DescribeAcls (key 29), CreateAcls (30) and DeleteAcls (31), as Kafka 4.1's AclApis answers
them.

Each request first needs DESCRIBE (DescribeAcls) or ALTER (the others) on the cluster;
without an authorizer every one answers SECURITY_DISABLED. DescribeAcls reads this broker's
authorizer (every ACL is there); the changes go through the controller, which stores them
(the embedded node's metadata log, or ZooKeeper) and applies them to this broker's
authorizer before answering. A creation is validated alone and answered alone; a filter
answers every binding it deleted. Kafka's request parser refuses a request whose codes are
UNKNOWN (0) by closing the connection; Gregor answers: INVALID_REQUEST for such a creation or
deletion filter, no match for such a DescribeAcls filter.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from gregor.apis.acl import authorize
from gregor.apis.context import NO_THROTTLE, RequestContext, Services, build, later, nested
from gregor.controller.acls.api_fields import (
    binding_from_fields,
    entry_fields,
    filter_from_fields,
    pattern_fields,
)
from gregor.controller.acls.model import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclOperation,
    ResourcePattern,
    ResourceType,
    validate_binding,
    validate_filter,
)
from gregor.wire.errors import KafkaError
from gregor.wire.schema import response_type
from gregor.wire.versions import CREATE_ACLS, DELETE_ACLS, DESCRIBE_ACLS

T = TypeVar("T")
R = TypeVar("R")

SECURITY_DISABLED = KafkaError(ErrorCode.security_disabled, "No Authorizer is configured.")
# Errors.CLUSTER_AUTHORIZATION_FAILED's own message.
CLUSTER_REFUSED = KafkaError(
    ErrorCode.cluster_authorization_failed, "Cluster authorization failed."
)


def _refusal(services: Services, ctx: RequestContext, operation: AclOperation) -> KafkaError | None:
    """Why the request is refused as a whole, if it is."""
    if not authorize(services, ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME):
        return CLUSTER_REFUSED
    if services.authorizer is None:
        return SECURITY_DISABLED
    return None


def _error(validate: Callable[[T], None], item: T) -> KafkaError | None:
    try:
        validate(item)
    except KafkaError as e:
        return e
    return None


def _through_controller(
    items: list[T],
    validate: Callable[[T], None],
    apply: Callable[[list[T]], Awaitable[list[R]]],
    answer: Callable[[list[KafkaError | R]], Any],
) -> Any:
    """The controller applies the valid items; each item is answered alone: its own
    validation error, or what the controller made of it."""
    errors = [_error(validate, item) for item in items]
    valid = [item for item, e in zip(items, errors, strict=True) if e is None]

    async def run() -> Any:
        done = iter(await apply(valid) if valid else [])
        return answer([next(done) if e is None else e for e in errors])

    return later(run())


# -- DescribeAcls -------------------------------------------------------------------------
def handle_describe(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(DESCRIBE_ACLS, ctx.api_version)
    refusal = _refusal(services, ctx, AclOperation.DESCRIBE)
    if refusal is not None:
        return build(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=refusal.code,
            error_message=refusal.message,
            resources=(),
        )
    assert services.authorizer is not None
    by_pattern: defaultdict[ResourcePattern, list[AccessControlEntry]] = defaultdict(list)
    for binding in services.authorizer.bindings(filter_from_fields(request)):
        by_pattern[binding.pattern].append(binding.entry)
    resource = nested(cls, "DescribeAclsResource")
    description = nested(cls, "AclDescription")
    resources = [
        build(
            resource,
            **pattern_fields(pattern),
            acls=tuple(build(description, **entry_fields(e)) for e in entries),
        )
        for pattern, entries in by_pattern.items()
    ]
    return build(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        resources=tuple(resources),
    )


# -- CreateAcls ---------------------------------------------------------------------------
def handle_create(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(CREATE_ACLS, ctx.api_version)
    result = nested(cls, "AclCreationResult")

    def answer(errors: list[KafkaError | None]) -> Any:
        results = tuple(
            build(
                result,
                error_code=ErrorCode.none if e is None else e.code,
                error_message=None if e is None else e.message,
            )
            for e in errors
        )
        return build(cls, throttle_time=NO_THROTTLE, results=results)

    refusal = _refusal(services, ctx, AclOperation.ALTER)
    if refusal is not None:
        return answer([refusal for _ in request.creations])
    bindings = [binding_from_fields(c, c, c.resource_pattern_type) for c in request.creations]
    return _through_controller(bindings, validate_binding, services.controller.create_acls, answer)


# -- DeleteAcls ---------------------------------------------------------------------------
def handle_delete(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(DELETE_ACLS, ctx.api_version)
    filter_result = nested(cls, "DeleteAclsFilterResult")
    matching = nested(cls, "DeleteAclsMatchingAcl")

    def matched(binding: AclBinding, error: KafkaError | None) -> Any:
        return build(
            matching,
            error_code=ErrorCode.none if error is None else error.code,
            error_message=None if error is None else error.message,
            **pattern_fields(binding.pattern),
            **entry_fields(binding.entry),
        )

    def answer(results: list[KafkaError | list[tuple[AclBinding, KafkaError | None]]]) -> Any:
        filter_results = tuple(
            build(filter_result, error_code=r.code, error_message=r.message, matching_acls=())
            if isinstance(r, KafkaError)
            else build(
                filter_result,
                error_code=ErrorCode.none,
                error_message=None,
                matching_acls=tuple(matched(b, e) for b, e in r),
            )
            for r in results
        )
        return build(cls, throttle_time=NO_THROTTLE, filter_results=filter_results)

    refusal = _refusal(services, ctx, AclOperation.ALTER)
    if refusal is not None:
        return answer([refusal for _ in request.filters])
    filters = [filter_from_fields(f) for f in request.filters]
    return _through_controller(filters, validate_filter, services.controller.delete_acls, answer)
