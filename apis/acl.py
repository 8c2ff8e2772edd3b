"""Authorization as the handlers ask for it (Kafka's AuthHelper): a check of one operation on
one resource, the names among many a request may act on (filterByAuthorized), the KIP-679
check by resource type, and the authorized operations of KIP-430. Without an authorizer
everything is allowed and every operation the resource type supports
(AclEntry.supportedOperations) is reported, at the cost of one attribute test."""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

from kio.schema.errors import ErrorCode

from gregor.apis.context import RequestContext, Services
from gregor.controller.acls.model import (
    CLUSTER_NAME,
    AclOperation,
    ResourceType,
    java_host_address,
    operations_bitfield,
    supported_operations,
)

TOPIC_OPERATIONS = operations_bitfield(supported_operations(ResourceType.TOPIC))
GROUP_OPERATIONS = operations_bitfield(supported_operations(ResourceType.GROUP))
CLUSTER_OPERATIONS = operations_bitfield(supported_operations(ResourceType.CLUSTER))
_SUPPORTED = {
    ResourceType.TOPIC: TOPIC_OPERATIONS,
    ResourceType.GROUP: GROUP_OPERATIONS,
    ResourceType.CLUSTER: CLUSTER_OPERATIONS,
}

# ConfigResource.Type ids -> what the config APIs authorize and answer when refused.
_CONFIG_TARGETS = {
    2: (ResourceType.TOPIC, ErrorCode.topic_authorization_failed),
    4: (ResourceType.CLUSTER, ErrorCode.cluster_authorization_failed),  # BROKER
    8: (ResourceType.CLUSTER, ErrorCode.cluster_authorization_failed),  # BROKER_LOGGER
    16: (ResourceType.CLUSTER, ErrorCode.cluster_authorization_failed),  # CLIENT_METRICS
    32: (ResourceType.GROUP, ErrorCode.group_authorization_failed),
}

# The messages of Kafka's Errors, which its error responses carry where they have a message.
MESSAGES = {
    ErrorCode.topic_authorization_failed: "Topic authorization failed.",
    ErrorCode.group_authorization_failed: "Group authorization failed.",
    ErrorCode.cluster_authorization_failed: "Cluster authorization failed.",
    ErrorCode.transactional_id_authorization_failed: "Transactional Id authorization failed.",
}


def client_address(ctx: RequestContext) -> str:
    """The client's IP address in the form ACL hosts are matched against."""
    return _host_address(ctx.peer)


@lru_cache(maxsize=4096)
def _host_address(peer: str) -> str:
    # Parsing the address costs more than the check itself: each peer is parsed once.
    return java_host_address(peer.rpartition(":")[0] or peer)


def authorize(
    services: Services,
    ctx: RequestContext,
    operation: AclOperation,
    resource_type: ResourceType,
    name: str,
) -> bool:
    authorizer = services.authorizer
    if authorizer is None:
        return True
    return authorizer.authorize(ctx.principal, client_address(ctx), operation, resource_type, name)


def authorize_cluster(services: Services, ctx: RequestContext, operation: AclOperation) -> bool:
    return authorize(services, ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME)


def authorized_names(
    services: Services,
    ctx: RequestContext,
    operation: AclOperation,
    resource_type: ResourceType,
    names: Iterable[str],
) -> set[str]:
    """The distinct ``names`` the request may ``operation`` (each checked once)."""
    authorizer = services.authorizer
    if authorizer is None:
        return set(names)
    principal, host = ctx.principal, client_address(ctx)
    authorize = authorizer.authorize
    return {
        name for name in set(names) if authorize(principal, host, operation, resource_type, name)
    }


def authorize_by_resource_type(
    services: Services, ctx: RequestContext, operation: AclOperation, resource_type: ResourceType
) -> bool:
    """KIP-679: may the request ``operation`` at least one resource of the type?"""
    authorizer = services.authorizer
    if authorizer is None:
        return True
    return authorizer.authorize_by_resource_type(
        ctx.principal, client_address(ctx), operation, resource_type
    )


def authorized_operations(
    services: Services, ctx: RequestContext, resource_type: ResourceType, name: str
) -> int:
    """KIP-430's bitfield: the operations of the resource's type the request may do on it."""
    supported = _SUPPORTED[resource_type]
    authorizer = services.authorizer
    if authorizer is None:
        return supported
    return authorizer.authorized_operations(
        ctx.principal, client_address(ctx), resource_type, name, supported
    )


def config_resource_error(
    services: Services, ctx: RequestContext, operation: AclOperation, kind: int, name: str
) -> ErrorCode | None:
    """The config APIs' check of one resource (ConfigResource.Type ``kind``): ``operation``
    (DESCRIBE_CONFIGS or ALTER_CONFIGS) on the topic, the group, or the cluster for a
    broker; the error when refused, None when allowed or of another type (refused later
    as invalid)."""
    if services.authorizer is None:
        return None
    target = _CONFIG_TARGETS.get(kind)
    if target is None:
        return None
    resource_type, error = target
    if resource_type == ResourceType.CLUSTER:
        name = CLUSTER_NAME
    return None if authorize(services, ctx, operation, resource_type, name) else error


def cluster_authorized_operations(services: Services, ctx: RequestContext) -> int:
    """Metadata's and DescribeCluster's: none without DESCRIBE on the cluster."""
    if not authorize_cluster(services, ctx, AclOperation.DESCRIBE):
        return 0
    return authorized_operations(services, ctx, ResourceType.CLUSTER, CLUSTER_NAME)
