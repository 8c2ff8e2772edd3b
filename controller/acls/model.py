"""Kafka's ACL model: the codes of org.apache.kafka.common.acl and .resource, resource patterns,
access control entries, bindings and their filters, CreateAcls validation, and the operations
each resource type supports (AclEntry.supportedOperations).

Construction never refuses a value (a binding decoded from the wire may hold ANY or UNKNOWN);
``validate_binding`` is the gate before a binding is stored.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum
from typing import Self, TypeVar

from kio.schema.errors import ErrorCode

from gregor.wire.errors import KafkaError

WILDCARD = "*"  # a literal resource name, or a host, matching any
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"


class _KafkaEnum(IntEnum):
    """An enum of Kafka's byte codes: an unknown code reads as UNKNOWN (Kafka's fromCode)."""

    @classmethod
    def _missing_(cls, value: object) -> Self | None:
        return cls["UNKNOWN"] if isinstance(value, int) else None

    @property
    def pascal_name(self) -> str:
        """The name Kafka prints in ZooKeeper and tools (SecurityUtils): "TransactionalId"."""
        return "".join(part.capitalize() for part in self.name.split("_"))


class ResourceType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
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
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15  # KIP-939, Kafka 4.1


class AclPermissionType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


E = TypeVar("E", bound=_KafkaEnum)


def parse_name(enum: type[E], name: str) -> E:
    """SecurityUtils' lookup: the Pascal name ("DescribeConfigs") or the enum name, tried as
    given and then upper-cased; UNKNOWN when neither matches."""
    for key in (name, name.upper()):
        for member in enum:
            if key in (member.name, member.pascal_name):
                return member
    return enum["UNKNOWN"]


def parse_upper_name(enum: type[E], name: str) -> E:
    """The enums' own fromString: the upper-cased enum name, else UNKNOWN."""
    return enum.__members__.get(name.upper(), enum["UNKNOWN"])


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    def __str__(self) -> str:  # Kafka's audit-log form, "Topic:LITERAL:foo"
        return f"{self.resource_type.pascal_name}:{self.pattern_type.name}:{self.name}"


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    principal: str  # "User:alice"
    host: str  # an IP address as Java prints it (``java_host_address``), or "*"
    operation: AclOperation
    permission: AclPermissionType


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry


@dataclass(frozen=True, slots=True)
class ResourcePatternFilter:
    """ANY fields and a None name match anything; MATCH matches the patterns that would apply
    to a resource of that name: the literal name, the literal wildcard, prefixes of it."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY

    @property
    def unknown(self) -> bool:
        unknown_type = self.resource_type == ResourceType.UNKNOWN
        return unknown_type or self.pattern_type == PatternType.UNKNOWN

    def matches(self, pattern: ResourcePattern) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != pattern.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH, pattern.pattern_type):
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        if pattern.pattern_type == PatternType.LITERAL:  # a MATCH filter from here on
            return pattern.name in (self.name, WILDCARD)
        if pattern.pattern_type == PatternType.PREFIXED:
            return self.name.startswith(pattern.name)
        raise ValueError(f"Unsupported PatternType: {pattern.pattern_type.name}")


@dataclass(frozen=True, slots=True)
class AccessControlEntryFilter:
    """None and ANY match anything; other values match exactly (no wildcard expansion)."""

    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    @property
    def unknown(self) -> bool:
        unknown_operation = self.operation == AclOperation.UNKNOWN
        return unknown_operation or self.permission == AclPermissionType.UNKNOWN

    def matches(self, entry: AccessControlEntry) -> bool:
        return (
            (self.principal is None or self.principal == entry.principal)
            and (self.host is None or self.host == entry.host)
            and self.operation in (AclOperation.ANY, entry.operation)
            and self.permission in (AclPermissionType.ANY, entry.permission)
        )


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    pattern: ResourcePatternFilter = ResourcePatternFilter()
    entry: AccessControlEntryFilter = AccessControlEntryFilter()

    def matches(self, binding: AclBinding) -> bool:
        return self.pattern.matches(binding.pattern) and self.entry.matches(binding.entry)


def _invalid(message: str) -> KafkaError:
    return KafkaError(ErrorCode.invalid_request, message)


def validate_binding(binding: AclBinding) -> None:
    """CreateAcls' checks, in Kafka's order (the broker's AclApis, then the controller's
    AclControlManager.validateNewAcl): raises KafkaError INVALID_REQUEST with Kafka's message.
    Kafka accepts any host string (matching is exact or "*") and any principal type."""
    pattern, entry = binding.pattern, binding.entry
    if pattern.resource_type == ResourceType.CLUSTER and pattern.name != CLUSTER_NAME:
        raise _invalid(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not pattern.name:
        raise _invalid("Invalid empty resource name")
    if pattern.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise _invalid(f"Invalid resourceType {pattern.resource_type.name}")
    if pattern.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise _invalid(f"Invalid patternType {pattern.pattern_type.name}")
    if entry.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        raise _invalid(f"Invalid operation {entry.operation.name}")
    if entry.permission not in (AclPermissionType.DENY, AclPermissionType.ALLOW):
        raise _invalid(f"Invalid permissionType {entry.permission.name}")
    if ":" not in entry.principal:
        raise _invalid(
            f"Could not parse principal from `{entry.principal}` (no colon is present "
            "separating the principal type from the principal name)"
        )


def validate_filter(flt: AclBindingFilter) -> None:
    """DeleteAcls' check of a filter (AclControlManager.validateFilter)."""
    if flt.pattern.unknown:
        raise _invalid("Unknown patternFilter.")
    if flt.entry.unknown:
        raise _invalid("Unknown entryFilter.")


def parse_principal(value: str) -> str:
    """SecurityUtils.parseKafkaPrincipal's check: "Type:name", split at the first colon."""
    if ":" not in value:
        raise ValueError(f"expected a string in format principalType:principalName but got {value}")
    return value


_O = AclOperation
_SUPPORTED: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset(
        {_O.READ, _O.WRITE, _O.CREATE, _O.DESCRIBE, _O.DELETE, _O.ALTER}
        | {_O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS}
    ),
    ResourceType.GROUP: frozenset(
        {_O.READ, _O.DESCRIBE, _O.DELETE, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS}
    ),
    ResourceType.CLUSTER: frozenset(
        {_O.CREATE, _O.CLUSTER_ACTION, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS}
        | {_O.IDEMPOTENT_WRITE, _O.ALTER, _O.DESCRIBE}
    ),
    ResourceType.TRANSACTIONAL_ID: frozenset({_O.DESCRIBE, _O.WRITE, _O.TWO_PHASE_COMMIT}),
    ResourceType.DELEGATION_TOKEN: frozenset({_O.DESCRIBE}),
    ResourceType.USER: frozenset({_O.CREATE_TOKENS, _O.DESCRIBE_TOKENS}),
}


def supported_operations(resource_type: ResourceType) -> frozenset[AclOperation]:
    """AclEntry.supportedOperations: what an ACL on this type can grant (besides ALL)."""
    try:
        return _SUPPORTED[resource_type]
    except KeyError:
        raise ValueError("Not a concrete resource type") from None


def check_operation_supported(resource_type: ResourceType, operation: AclOperation) -> None:
    """kafka-acls.sh's refusal of e.g. WRITE on a GROUP (the broker itself accepts it)."""
    valid = supported_operations(resource_type) | {AclOperation.ALL}
    if operation not in valid:
        names = ",".join(op.name for op in sorted(valid))
        raise ValueError(f"ResourceType {resource_type.name} only supports operations {names}")


def operations_bitfield(operations: Iterable[AclOperation]) -> int:
    """KIP-430's authorized-operations field: bit ``code`` set for each operation."""
    bits = 0
    for op in operations:
        bits |= 1 << op
    return bits


def java_host_address(address: str) -> str:
    """The client address as Java's InetAddress.getHostAddress prints it, the form Kafka
    matches ACL hosts against: an IPv4-mapped IPv6 address is its IPv4 address, other IPv6
    addresses are eight uncompressed groups ("0:0:0:0:0:0:0:1")."""
    text, _, scope = address.partition("%")
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv4Address):
        return str(ip)
    if ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    groups = ":".join(f"{int(group, 16):x}" for group in ip.exploded.split(":"))
    return f"{groups}%{scope}" if scope else groups
