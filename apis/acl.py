"""Authorized operations (KIP-430) as Kafka reports them with no authorizer configured:
every operation the resource type supports (AclEntry.supportedOperations), as a bitfield of
AclOperation codes."""

from __future__ import annotations

from typing import Any

from gregor.apis.context import NO_AUTHORIZED_OPERATIONS
from gregor.controller.acls.model import ResourceType, operations_bitfield, supported_operations

TOPIC_OPERATIONS = operations_bitfield(supported_operations(ResourceType.TOPIC))
GROUP_OPERATIONS = operations_bitfield(supported_operations(ResourceType.GROUP))
CLUSTER_OPERATIONS = operations_bitfield(supported_operations(ResourceType.CLUSTER))


def authorized_operations(request: Any, flag: str, operations: int) -> int:
    """``operations`` when the request's ``flag`` asks for them, else Kafka's "not
    requested" value (Int.MinValue)."""
    return operations if getattr(request, flag, False) else NO_AUTHORIZED_OPERATIONS
