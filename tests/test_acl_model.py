"""The ACL model: Kafka's codes and names, filter matching (ANY, MATCH), CreateAcls validation,
supported operations and KIP-430 bitfields."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from gregor.apis.acl import CLUSTER_OPERATIONS, GROUP_OPERATIONS, TOPIC_OPERATIONS
from gregor.controller.acls.model import (
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
    check_operation_supported,
    java_host_address,
    operations_bitfield,
    parse_name,
    parse_principal,
    supported_operations,
    validate_binding,
    validate_filter,
)
from gregor.wire.errors import KafkaError

T, P, Op, A = ResourceType, PatternType, AclOperation, AclPermissionType


def test_codes_are_kafkas() -> None:
    assert [(t.name, int(t)) for t in ResourceType] == [
        ("UNKNOWN", 0),
        ("ANY", 1),
        ("TOPIC", 2),
        ("GROUP", 3),
        ("CLUSTER", 4),
        ("TRANSACTIONAL_ID", 5),
        ("DELEGATION_TOKEN", 6),
        ("USER", 7),
    ]
    assert [int(p) for p in (P.UNKNOWN, P.ANY, P.MATCH, P.LITERAL, P.PREFIXED)] == [0, 1, 2, 3, 4]
    assert [int(a) for a in (A.UNKNOWN, A.ANY, A.DENY, A.ALLOW)] == [0, 1, 2, 3]
    assert (Op.ALL, Op.READ, Op.DESCRIBE, Op.IDEMPOTENT_WRITE, Op.DESCRIBE_TOKENS) == (
        2,
        3,
        8,
        12,
        14,
    )
    # An unknown code reads as UNKNOWN, as Kafka's fromCode.
    assert ResourceType(99) is T.UNKNOWN
    assert AclOperation(200) is Op.UNKNOWN


def test_names_as_kafka_prints_and_parses_them() -> None:
    assert T.TRANSACTIONAL_ID.pascal_name == "TransactionalId"
    assert T.DELEGATION_TOKEN.pascal_name == "DelegationToken"
    assert Op.DESCRIBE_CONFIGS.pascal_name == "DescribeConfigs"
    assert A.ALLOW.pascal_name == "Allow"
    assert parse_name(AclOperation, "Read") is Op.READ
    assert parse_name(AclOperation, "READ") is Op.READ
    assert parse_name(AclOperation, "read") is Op.READ
    assert parse_name(AclOperation, "IdempotentWrite") is Op.IDEMPOTENT_WRITE
    assert parse_name(AclOperation, "idempotent_write") is Op.IDEMPOTENT_WRITE
    assert parse_name(AclOperation, "Fly") is Op.UNKNOWN
    assert parse_name(ResourceType, "TransactionalId") is T.TRANSACTIONAL_ID
    assert parse_name(AclPermissionType, "Deny") is A.DENY


def lit(name: str, rtype: ResourceType = T.TOPIC) -> ResourcePattern:
    return ResourcePattern(rtype, name, P.LITERAL)


def pre(name: str, rtype: ResourceType = T.TOPIC) -> ResourcePattern:
    return ResourcePattern(rtype, name, P.PREFIXED)


@pytest.mark.parametrize(
    ("flt", "pattern", "expected"),
    [
        # ANY pattern type with a name: exactly that name, either pattern type.
        (ResourcePatternFilter(T.TOPIC, "foo", P.ANY), lit("foo"), True),
        (ResourcePatternFilter(T.TOPIC, "foo", P.ANY), pre("foo"), True),
        (ResourcePatternFilter(T.TOPIC, "foo", P.ANY), lit("*"), False),
        (ResourcePatternFilter(T.TOPIC, "foo", P.ANY), pre("fo"), False),
        # A specific pattern type: only that type, exact name; "*" matches only "*".
        (ResourcePatternFilter(T.TOPIC, "foo", P.LITERAL), lit("foo"), True),
        (ResourcePatternFilter(T.TOPIC, "foo", P.LITERAL), pre("foo"), False),
        (ResourcePatternFilter(T.TOPIC, "*", P.LITERAL), lit("*"), True),
        (ResourcePatternFilter(T.TOPIC, "*", P.LITERAL), lit("foo"), False),
        (ResourcePatternFilter(T.TOPIC, "fo", P.PREFIXED), pre("fo"), True),
        (ResourcePatternFilter(T.TOPIC, "foo", P.PREFIXED), pre("fo"), False),
        # MATCH: every pattern that applies to a resource called "foobar".
        (ResourcePatternFilter(T.TOPIC, "foobar", P.MATCH), lit("foobar"), True),
        (ResourcePatternFilter(T.TOPIC, "foobar", P.MATCH), lit("*"), True),
        (ResourcePatternFilter(T.TOPIC, "foobar", P.MATCH), pre("foo"), True),
        (ResourcePatternFilter(T.TOPIC, "foobar", P.MATCH), pre("foobar"), True),
        (ResourcePatternFilter(T.TOPIC, "foobar", P.MATCH), pre("*"), False),
        (ResourcePatternFilter(T.TOPIC, "foobar", P.MATCH), lit("foo"), False),
        (ResourcePatternFilter(T.TOPIC, "foobar", P.MATCH), pre("foobarbaz"), False),
        (ResourcePatternFilter(T.TOPIC, "foobar", P.MATCH), lit("foobar", T.GROUP), False),
        # A null name matches any name; ANY resource type any type.
        (ResourcePatternFilter(T.TOPIC, None, P.MATCH), pre("x"), True),
        (ResourcePatternFilter(T.TOPIC, None, P.LITERAL), pre("x"), False),
        (ResourcePatternFilter(T.ANY, None, P.ANY), pre("x", T.GROUP), True),
        (ResourcePatternFilter(T.ANY, "x", P.ANY), lit("x", T.CLUSTER), True),
        (ResourcePatternFilter(T.GROUP, None, P.ANY), lit("x"), False),
    ],
)
def test_resource_pattern_filter(
    flt: ResourcePatternFilter, pattern: ResourcePattern, expected: bool
) -> None:
    assert flt.matches(pattern) is expected


def test_entry_filter_matches_exactly_or_anything() -> None:
    entry = AccessControlEntry("User:alice", "10.0.0.1", Op.READ, A.ALLOW)
    assert AccessControlEntryFilter().matches(entry)
    assert AccessControlEntryFilter("User:alice", "10.0.0.1", Op.READ, A.ALLOW).matches(entry)
    # No wildcard expansion in filters: "User:*" finds only ACLs naming "User:*".
    assert not AccessControlEntryFilter(principal="User:*").matches(entry)
    assert not AccessControlEntryFilter(host="*").matches(entry)
    assert not AccessControlEntryFilter(operation=Op.ALL).matches(entry)
    assert not AccessControlEntryFilter(permission=A.DENY).matches(entry)
    binding = AclBinding(lit("orders"), entry)
    assert AclBindingFilter().matches(binding)
    flt = AclBindingFilter(ResourcePatternFilter(T.TOPIC, "orders-eu", P.MATCH))
    assert not flt.matches(binding)
    flt = AclBindingFilter(ResourcePatternFilter(T.TOPIC, "orders", P.MATCH))
    assert flt.matches(binding)
    assert not AclBindingFilter(flt.pattern, AccessControlEntryFilter("User:bob")).matches(binding)


def binding(
    pattern: ResourcePattern,
    principal: str = "User:alice",
    operation: AclOperation = Op.READ,
    permission: AclPermissionType = A.ALLOW,
) -> AclBinding:
    return AclBinding(pattern, AccessControlEntry(principal, "*", operation, permission))


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (
            binding(lit("my-cluster", T.CLUSTER)),
            "The only valid name for the CLUSTER resource is kafka-cluster",
        ),
        (binding(lit("")), "Invalid empty resource name"),
        (binding(lit("x", T.ANY)), "Invalid resourceType ANY"),
        (binding(lit("x", T.UNKNOWN)), "Invalid resourceType UNKNOWN"),
        (binding(ResourcePattern(T.TOPIC, "x", P.MATCH)), "Invalid patternType MATCH"),
        (binding(ResourcePattern(T.TOPIC, "x", P.ANY)), "Invalid patternType ANY"),
        (binding(lit("x"), operation=Op.ANY), "Invalid operation ANY"),
        (binding(lit("x"), operation=Op.UNKNOWN), "Invalid operation UNKNOWN"),
        (binding(lit("x"), permission=A.ANY), "Invalid permissionType ANY"),
        (
            binding(lit("x"), principal="alice"),
            "Could not parse principal from `alice` (no colon is present separating the "
            "principal type from the principal name)",
        ),
    ],
)
def test_create_acls_validation(bad: AclBinding, message: str) -> None:
    with pytest.raises(KafkaError) as caught:
        validate_binding(bad)
    assert caught.value.code == ErrorCode.invalid_request
    assert caught.value.message == message


def test_valid_bindings_pass() -> None:
    validate_binding(binding(lit("kafka-cluster", T.CLUSTER), operation=Op.CLUSTER_ACTION))
    validate_binding(binding(pre("app-", T.GROUP), principal="Group:ops", permission=A.DENY))
    validate_binding(binding(lit("*"), principal="User:*"))
    # The broker does not refuse operations a type does not support; kafka-acls.sh does.
    validate_binding(binding(lit("g", T.GROUP), operation=Op.WRITE))
    with pytest.raises(ValueError, match="ResourceType GROUP only supports operations"):
        check_operation_supported(T.GROUP, Op.WRITE)
    check_operation_supported(T.GROUP, Op.ALL)
    check_operation_supported(T.TRANSACTIONAL_ID, Op.WRITE)


def test_delete_filter_validation() -> None:
    validate_filter(AclBindingFilter())
    for flt, message in [
        (AclBindingFilter(ResourcePatternFilter(T.UNKNOWN)), "Unknown patternFilter."),
        (AclBindingFilter(ResourcePatternFilter(pattern_type=P.UNKNOWN)), "Unknown patternFilter."),
        (
            AclBindingFilter(entry=AccessControlEntryFilter(operation=Op.UNKNOWN)),
            "Unknown entryFilter.",
        ),
    ]:
        with pytest.raises(KafkaError, match=message):
            validate_filter(flt)


def test_principal_format() -> None:
    assert parse_principal("User:CN=alice,O=acme") == "User:CN=alice,O=acme"
    with pytest.raises(ValueError, match="principalType:principalName but got alice"):
        parse_principal("alice")


def test_supported_operations_and_bitfields() -> None:
    assert supported_operations(T.TOPIC) == {
        *(Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER),
        *(Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS),
    }
    assert supported_operations(T.DELEGATION_TOKEN) == {Op.DESCRIBE}
    assert supported_operations(T.USER) == {Op.CREATE_TOKENS, Op.DESCRIBE_TOKENS}
    with pytest.raises(ValueError, match="Not a concrete resource type"):
        supported_operations(T.ANY)
    # What a Kafka 4 broker without an authorizer reports (KIP-430).
    assert TOPIC_OPERATIONS == 3576
    assert GROUP_OPERATIONS == 3400
    assert CLUSTER_OPERATIONS == 8096
    assert operations_bitfield([Op.READ, Op.DESCRIBE]) == (1 << 3) | (1 << 8)


def test_host_address_as_java_prints_it() -> None:
    assert java_host_address("10.1.2.3") == "10.1.2.3"
    assert java_host_address("::1") == "0:0:0:0:0:0:0:1"
    assert java_host_address("::ffff:10.1.2.3") == "10.1.2.3"
    assert java_host_address("fe80::1%eth0") == "fe80:0:0:0:0:0:0:1%eth0"
    assert java_host_address("2001:DB8::0A") == "2001:db8:0:0:0:0:0:a"
