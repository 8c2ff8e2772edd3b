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
from collections.abc import Callable
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from gregor.apis.acl import authorize
from gregor.apis.context import NO_THROTTLE, RequestContext, Services, build, later, nested
from gregor.controller.acls.model import (
    CLUSTER_NAME,
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    validate_binding,
    validate_filter,
)
from gregor.wire.errors import KafkaError
from gregor.wire.schema import response_type
from gregor.wire.versions import CREATE_ACLS, DELETE_ACLS, DESCRIBE_ACLS

T = TypeVar("T")

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


def _binding_filter(item: Any) -> AclBindingFilter:
    """A DescribeAcls request's or a DeleteAcls filter's fields, as a filter."""
    return AclBindingFilter(
        ResourcePatternFilter(
            ResourceType(item.resource_type_filter),
            item.resource_name_filter,
            PatternType(item.pattern_type_filter),
        ),
        AccessControlEntryFilter(
            item.principal_filter,
            item.host_filter,
            AclOperation(item.operation),
            AclPermissionType(item.permission_type),
        ),
    )


def _check(items: list[T], validate: Callable[[T], None]) -> list[KafkaError | None]:
    """Each item's validation error, or None."""
    errors: list[KafkaError | None] = []
    for item in items:
        try:
            validate(item)
            errors.append(None)
        except KafkaError as e:
            errors.append(e)
    return errors


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
    for binding in services.authorizer.bindings(_binding_filter(request)):
        by_pattern[binding.pattern].append(binding.entry)
    resource = nested(cls, "DescribeAclsResource")
    description = nested(cls, "AclDescription")
    resources = [
        build(
            resource,
            resource_type=pattern.resource_type,
            resource_name=pattern.name,
            pattern_type=pattern.pattern_type,
            acls=tuple(
                build(
                    description,
                    principal=e.principal,
                    host=e.host,
                    operation=e.operation,
                    permission_type=e.permission,
                )
                for e in entries
            ),
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
    bindings = [_binding(c) for c in request.creations]
    errors = _check(bindings, validate_binding)
    valid = [b for b, e in zip(bindings, errors, strict=True) if e is None]

    async def create() -> Any:
        stored = iter(await services.controller.create_acls(valid) if valid else [])
        return answer([next(stored) if e is None else e for e in errors])

    return later(create())


def _binding(creation: Any) -> AclBinding:
    return AclBinding(
        ResourcePattern(
            ResourceType(creation.resource_type),
            creation.resource_name,
            PatternType(creation.resource_pattern_type),
        ),
        AccessControlEntry(
            creation.principal,
            creation.host,
            AclOperation(creation.operation),
            AclPermissionType(creation.permission_type),
        ),
    )


# -- DeleteAcls ---------------------------------------------------------------------------
def handle_delete(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(DELETE_ACLS, ctx.api_version)
    filter_result = nested(cls, "DeleteAclsFilterResult")
    matching = nested(cls, "DeleteAclsMatchingAcl")

    def matched(binding: AclBinding, error: KafkaError | None) -> Any:
        pattern, entry = binding.pattern, binding.entry
        return build(
            matching,
            error_code=ErrorCode.none if error is None else error.code,
            error_message=None if error is None else error.message,
            resource_type=pattern.resource_type,
            resource_name=pattern.name,
            pattern_type=pattern.pattern_type,
            principal=entry.principal,
            host=entry.host,
            operation=entry.operation,
            permission_type=entry.permission,
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
    filters = [_binding_filter(f) for f in request.filters]
    invalid = _check(filters, validate_filter)
    valid = [f for f, e in zip(filters, invalid, strict=True) if e is None]

    async def delete() -> Any:
        deleted = iter(await services.controller.delete_acls(valid) if valid else [])
        return answer([next(deleted) if e is None else e for e in invalid])

    return later(delete())
