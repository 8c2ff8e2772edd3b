"""Authorized operations (KIP-430) as Kafka reports them with no authorizer configured:
every operation the resource type supports, as a bitfield of AclOperation codes."""

from __future__ import annotations

from typing import Any

from gregor.apis.context import NO_AUTHORIZED_OPERATIONS

# org.apache.kafka.common.acl.AclOperation codes
READ = 3
WRITE = 4
CREATE = 5
DELETE = 6
ALTER = 7
DESCRIBE = 8
CLUSTER_ACTION = 9
DESCRIBE_CONFIGS = 10
ALTER_CONFIGS = 11
IDEMPOTENT_WRITE = 12


def _bits(*operations: int) -> int:
    return sum(1 << op for op in operations)


# AclEntry.supportedOperations of Kafka 4, by resource type.
TOPIC_OPERATIONS = _bits(
    READ, WRITE, CREATE, DESCRIBE, DELETE, ALTER, DESCRIBE_CONFIGS, ALTER_CONFIGS
)
GROUP_OPERATIONS = _bits(READ, DESCRIBE, DELETE, DESCRIBE_CONFIGS, ALTER_CONFIGS)
CLUSTER_OPERATIONS = _bits(
    CREATE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, ALTER, DESCRIBE
)


def authorized_operations(request: Any, flag: str, operations: int) -> int:
    """``operations`` when the request's ``flag`` asks for them, else Kafka's "not
    requested" value (Int.MinValue)."""
    return operations if getattr(request, flag, False) else NO_AUTHORIZED_OPERATIONS
