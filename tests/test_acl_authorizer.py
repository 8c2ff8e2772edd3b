"""The authorizer's semantics, as Kafka's StandardAuthorizer decides: a table of cases, then
authorized operations (KIP-430), authorize-by-resource-type (KIP-679) and updates."""

from __future__ import annotations

import pytest

from gregor.controller.acls.authorizer import AclAuthorizer
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
    operations_bitfield,
    supported_operations,
)

T, P, Op, A = ResourceType, PatternType, AclOperation, AclPermissionType
ALICE = "User:alice"
HOST = "10.0.0.1"


def acl(
    name: str,
    operation: AclOperation = Op.READ,
    permission: AclPermissionType = A.ALLOW,
    principal: str = ALICE,
    host: str = "*",
    pattern_type: PatternType = P.LITERAL,
    resource_type: ResourceType = T.TOPIC,
) -> AclBinding:
    return AclBinding(
        ResourcePattern(resource_type, name, pattern_type),
        AccessControlEntry(principal, host, operation, permission),
    )


def authorizer(*bindings: AclBinding, allow_everyone: bool = False) -> AclAuthorizer:
    auth = AclAuthorizer(["User:admin"], allow_everyone)
    auth.add(bindings)
    return auth


CASES: list[tuple[str, list[AclBinding], AclOperation, str, bool]] = [
    # (what, ACLs, operation asked on topic "orders" by alice from HOST, allowed)
    ("no ACLs, default deny", [], Op.READ, "orders", False),
    ("literal allow", [acl("orders")], Op.READ, "orders", True),
    ("literal allow of another topic", [acl("invoices")], Op.READ, "orders", False),
    ("literal name is not a prefix", [acl("ord")], Op.READ, "orders", False),
    ("other operation", [acl("orders", Op.WRITE)], Op.READ, "orders", False),
    ("ALL allows any operation", [acl("orders", Op.ALL)], Op.ALTER_CONFIGS, "orders", True),
    ("wildcard resource", [acl("*")], Op.READ, "orders", True),
    ("prefixed allow", [acl("ord", pattern_type=P.PREFIXED)], Op.READ, "orders", True),
    ("prefix = whole name", [acl("orders", pattern_type=P.PREFIXED)], Op.READ, "orders", True),
    ("longer prefix", [acl("orders-eu", pattern_type=P.PREFIXED)], Op.READ, "orders", False),
    ("prefixed '*' is no wildcard", [acl("*", pattern_type=P.PREFIXED)], Op.READ, "orders", False),
    ("other resource type", [acl("orders", resource_type=T.GROUP)], Op.READ, "orders", False),
    ("wildcard principal", [acl("orders", principal="User:*")], Op.READ, "orders", True),
    ("other principal", [acl("orders", principal="User:bob")], Op.READ, "orders", False),
    ("Group:* is no wildcard", [acl("orders", principal="Group:*")], Op.READ, "orders", False),
    ("host exact", [acl("orders", host=HOST)], Op.READ, "orders", True),
    ("other host", [acl("orders", host="10.0.0.2")], Op.READ, "orders", False),
    ("READ implies DESCRIBE", [acl("orders", Op.READ)], Op.DESCRIBE, "orders", True),
    ("WRITE implies DESCRIBE", [acl("orders", Op.WRITE)], Op.DESCRIBE, "orders", True),
    ("DELETE implies DESCRIBE", [acl("orders", Op.DELETE)], Op.DESCRIBE, "orders", True),
    ("ALTER implies DESCRIBE", [acl("orders", Op.ALTER)], Op.DESCRIBE, "orders", True),
    ("CREATE does not imply DESCRIBE", [acl("orders", Op.CREATE)], Op.DESCRIBE, "orders", False),
    ("DESCRIBE implies nothing", [acl("orders", Op.DESCRIBE)], Op.READ, "orders", False),
    (
        "ALTER_CONFIGS implies DESCRIBE_CONFIGS",
        [acl("orders", Op.ALTER_CONFIGS)],
        Op.DESCRIBE_CONFIGS,
        "orders",
        True,
    ),
    (
        "ALTER does not imply ALTER_CONFIGS",
        [acl("orders", Op.ALTER)],
        Op.ALTER_CONFIGS,
        "orders",
        False,
    ),
    ("deny wins", [acl("orders"), acl("orders", permission=A.DENY)], Op.READ, "orders", False),
    (
        "deny by prefix beats literal allow",
        [acl("orders"), acl("or", permission=A.DENY, pattern_type=P.PREFIXED)],
        Op.READ,
        "orders",
        False,
    ),
    (
        "deny by wildcard beats literal allow",
        [acl("orders"), acl("*", permission=A.DENY)],
        Op.READ,
        "orders",
        False,
    ),
    (
        "deny ALL beats allow READ",
        [acl("orders"), acl("orders", Op.ALL, A.DENY)],
        Op.READ,
        "orders",
        False,
    ),
    (
        "deny to User:* applies to alice",
        [acl("orders"), acl("orders", permission=A.DENY, principal="User:*")],
        Op.READ,
        "orders",
        False,
    ),
    (
        "deny from another host does not apply",
        [acl("orders"), acl("orders", permission=A.DENY, host="10.0.0.2")],
        Op.READ,
        "orders",
        True,
    ),
    (
        "deny READ does not deny DESCRIBE",
        [acl("orders", Op.WRITE), acl("orders", Op.READ, A.DENY)],
        Op.DESCRIBE,
        "orders",
        True,
    ),
    (
        "deny of another operation does not apply",
        [acl("orders"), acl("orders", Op.WRITE, A.DENY)],
        Op.READ,
        "orders",
        True,
    ),
    ("a deny alone denies", [acl("orders", Op.WRITE, A.DENY)], Op.READ, "orders", False),
]


@pytest.mark.parametrize(("what", "bindings", "operation", "name", "allowed"), CASES)
def test_semantics(
    what: str, bindings: list[AclBinding], operation: AclOperation, name: str, allowed: bool
) -> None:
    auth = authorizer(*bindings)
    assert auth.authorize(ALICE, HOST, operation, T.TOPIC, name) is allowed, what


def test_super_users_are_allowed_everything() -> None:
    auth = authorizer(acl("*", Op.ALL, A.DENY, principal="User:*"))
    assert auth.authorize("User:admin", HOST, Op.CLUSTER_ACTION, T.CLUSTER, "kafka-cluster")
    assert auth.authorize("User:admin", HOST, Op.READ, T.TOPIC, "orders")
    assert not auth.authorize(ALICE, HOST, Op.READ, T.TOPIC, "orders")
    # Super users are named with their type: "admin" alone is no super user.
    assert not authorizer().authorize("Group:admin", HOST, Op.READ, T.TOPIC, "orders")


def test_allow_everyone_if_no_acl_found() -> None:
    auth = authorizer(acl("orders", principal="User:bob"), allow_everyone=True)
    # No ACL applies to "invoices": allowed to anyone.
    assert auth.authorize(ALICE, HOST, Op.WRITE, T.TOPIC, "invoices")
    assert auth.authorize("User:ANONYMOUS", HOST, Op.ALTER, T.CLUSTER, "kafka-cluster")
    # An ACL for bob applies to "orders": alice, without one, is refused.
    assert not auth.authorize(ALICE, HOST, Op.READ, T.TOPIC, "orders")
    assert auth.authorize("User:bob", HOST, Op.READ, T.TOPIC, "orders")
    # A prefixed or wildcard ACL applies too.
    auth.add([acl("inv", principal="User:bob", pattern_type=P.PREFIXED)])
    assert not auth.authorize(ALICE, HOST, Op.WRITE, T.TOPIC, "invoices")
    auth.add([acl("*", principal="User:bob", resource_type=T.GROUP)])
    assert not auth.authorize(ALICE, HOST, Op.READ, T.GROUP, "any-group")


def test_from_settings() -> None:
    auth = AclAuthorizer.from_settings(
        {
            "super.users": " User:admin ; User:CN=broker,O=acme;",
            "allow.everyone.if.no.acl.found": "TRUE",
        }
    )
    assert auth.super_users == {"User:admin", "User:CN=broker,O=acme"}
    assert auth.allow_everyone_if_no_acl_found
    default = AclAuthorizer.from_settings({})
    assert default.super_users == set() and not default.allow_everyone_if_no_acl_found
    with pytest.raises(ValueError, match="principalType:principalName but got admin"):
        AclAuthorizer.from_settings({"super.users": "admin"})


TOPIC_OPS = operations_bitfield(supported_operations(T.TOPIC))


def bits(*operations: AclOperation) -> int:
    return operations_bitfield(operations)


def test_authorized_operations() -> None:
    auth = authorizer(
        acl("orders", Op.WRITE),
        acl("ord", Op.ALTER_CONFIGS, pattern_type=P.PREFIXED),
        acl("orders", Op.DELETE, A.DENY),
        acl("*", Op.CREATE, principal="User:*"),
    )
    got = auth.authorized_operations(ALICE, HOST, T.TOPIC, "orders", TOPIC_OPS)
    assert got == bits(Op.WRITE, Op.DESCRIBE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS, Op.CREATE)
    # Only supported bits are reported, whatever the ACLs grant.
    everything = authorizer(acl("*", Op.ALL))
    group_ops = operations_bitfield(supported_operations(T.GROUP))
    assert everything.authorized_operations(ALICE, HOST, T.GROUP, "g", group_ops) == 0
    everything.add([acl("*", Op.ALL, resource_type=T.GROUP)])
    assert everything.authorized_operations(ALICE, HOST, T.GROUP, "g", group_ops) == group_ops
    # Super users get every supported operation; so does anyone when no ACL applies and
    # allow.everyone.if.no.acl.found is set; otherwise no ACL means nothing.
    assert auth.authorized_operations("User:admin", HOST, T.TOPIC, "x", TOPIC_OPS) == TOPIC_OPS
    assert authorizer().authorized_operations(ALICE, HOST, T.TOPIC, "x", TOPIC_OPS) == 0
    open_auth = authorizer(allow_everyone=True)
    assert open_auth.authorized_operations(ALICE, HOST, T.TOPIC, "x", TOPIC_OPS) == TOPIC_OPS


BY_TYPE_CASES: list[tuple[str, list[AclBinding], bool]] = [
    # (what, ACLs, may alice WRITE some topic)
    ("nothing", [], False),
    ("a literal allow", [acl("orders", Op.WRITE)], True),
    ("a prefixed allow", [acl("ord", Op.WRITE, pattern_type=P.PREFIXED)], True),
    ("ALL counts", [acl("orders", Op.ALL)], True),
    ("no implication: READ is not WRITE", [acl("orders", Op.READ)], False),
    ("another principal's allow", [acl("orders", Op.WRITE, principal="User:bob")], False),
    ("User:* allow", [acl("orders", Op.WRITE, principal="User:*")], True),
    ("another host's allow", [acl("orders", Op.WRITE, host="10.9.9.9")], False),
    ("a group allow is no topic", [acl("orders", Op.WRITE, resource_type=T.GROUP)], False),
    (
        "literal allow denied by the same literal",
        [acl("orders", Op.WRITE), acl("orders", Op.WRITE, A.DENY)],
        False,
    ),
    (
        "literal allow denied by a prefix",
        [acl("orders", Op.WRITE), acl("ord", Op.WRITE, A.DENY, pattern_type=P.PREFIXED)],
        False,
    ),
    (
        "literal allow, deny of another literal",
        [acl("orders", Op.WRITE), acl("invoices", Op.WRITE, A.DENY)],
        True,
    ),
    (
        "prefixed allow not denied by a literal deny of the same name",
        [
            acl("ord", Op.WRITE, pattern_type=P.PREFIXED),
            acl("ord", Op.WRITE, A.DENY),
        ],
        True,
    ),
    (
        "prefixed allow denied by a shorter prefix",
        [
            acl("orders", Op.WRITE, pattern_type=P.PREFIXED),
            acl("or", Op.WRITE, A.DENY, pattern_type=P.PREFIXED),
        ],
        False,
    ),
    (
        "prefixed allow under a longer deny prefix still allows",
        [
            acl("ord", Op.WRITE, pattern_type=P.PREFIXED),
            acl("orders", Op.WRITE, A.DENY, pattern_type=P.PREFIXED),
        ],
        True,
    ),
    ("wildcard allow", [acl("*", Op.WRITE)], True),
    (
        "wildcard allow beats prefix denies",
        [acl("*", Op.WRITE), acl("o", Op.WRITE, A.DENY, pattern_type=P.PREFIXED)],
        True,
    ),
    ("wildcard deny refuses all", [acl("orders", Op.WRITE), acl("*", Op.ALL, A.DENY)], False),
    (
        "a deny of another operation does not count",
        [acl("orders", Op.WRITE), acl("orders", Op.READ, A.DENY)],
        True,
    ),
]


@pytest.mark.parametrize(("what", "bindings", "allowed"), BY_TYPE_CASES)
def test_authorize_by_resource_type(what: str, bindings: list[AclBinding], allowed: bool) -> None:
    auth = authorizer(*bindings)
    assert auth.authorize_by_resource_type(ALICE, HOST, Op.WRITE, T.TOPIC) is allowed, what


def test_authorize_by_resource_type_super_user_and_allow_everyone() -> None:
    denied = authorizer(acl("*", Op.ALL, A.DENY, principal="User:*"))
    assert denied.authorize_by_resource_type("User:admin", HOST, Op.WRITE, T.TOPIC)
    # Allow-everyone counts when no ACL applies to Kafka's probe name, "hardcode".
    open_auth = authorizer(acl("orders", Op.WRITE, A.DENY), allow_everyone=True)
    assert open_auth.authorize_by_resource_type(ALICE, HOST, Op.WRITE, T.TOPIC)
    open_auth.add([acl("h", Op.WRITE, A.DENY, pattern_type=P.PREFIXED)])
    assert not open_auth.authorize_by_resource_type(ALICE, HOST, Op.WRITE, T.TOPIC)
    with pytest.raises(ValueError, match="non-filter"):
        open_auth.authorize_by_resource_type(ALICE, HOST, Op.ANY, T.TOPIC)
    with pytest.raises(ValueError, match="non-filter"):
        open_auth.authorize_by_resource_type(ALICE, HOST, Op.WRITE, T.ANY)


def test_add_remove_replace_and_list() -> None:
    auth = authorizer()
    read = acl("ord", pattern_type=P.PREFIXED)
    deny = acl("orders", permission=A.DENY, principal="User:*")
    group = acl("app", resource_type=T.GROUP)
    auth.add([read, deny, group, read])
    assert auth.count() == 3
    assert not auth.authorize(ALICE, HOST, Op.READ, T.TOPIC, "orders")
    assert auth.authorize(ALICE, HOST, Op.READ, T.TOPIC, "ord-1")
    everything = auth.bindings(AclBindingFilter())
    assert sorted(everything, key=str) == sorted([read, deny, group], key=str)
    match = AclBindingFilter(ResourcePatternFilter(T.TOPIC, "orders", P.MATCH))
    assert sorted(auth.bindings(match), key=str) == sorted([read, deny], key=str)
    denies = AclBindingFilter(entry=AccessControlEntryFilter(permission=A.DENY))
    assert auth.bindings(denies) == [deny]

    auth.remove([deny])
    assert auth.authorize(ALICE, HOST, Op.READ, T.TOPIC, "orders")
    auth.remove([read, acl("never-added")])
    assert not auth.authorize(ALICE, HOST, Op.READ, T.TOPIC, "ord-1")
    assert auth.bindings(AclBindingFilter()) == [group]
    # The prefix index forgets the removed prefix's length.
    assert auth.authorize(ALICE, HOST, Op.READ, T.GROUP, "app")

    auth.set_acls(
        read.pattern, [read.entry, AccessControlEntry("User:bob", "*", Op.WRITE, A.ALLOW)]
    )
    assert auth.count() == 3
    assert auth.authorize("User:bob", HOST, Op.WRITE, T.TOPIC, "ord-2")
    auth.set_acls(read.pattern, [])
    assert auth.count() == 1

    auth.replace([deny])
    assert auth.bindings(AclBindingFilter()) == [deny]
    assert not auth.authorize(ALICE, HOST, Op.READ, T.GROUP, "app")


def test_a_remembered_decision_is_forgotten_when_any_acl_changes() -> None:
    auth = authorizer(acl("orders"))
    for _ in range(3):
        assert auth.authorize(ALICE, HOST, Op.READ, T.TOPIC, "orders")
    assert (auth.allowed, auth.denied) == (3, 0)  # every call counts, remembered or not
    auth.add([acl("orders", permission=A.DENY, principal="User:*")])
    assert not auth.authorize(ALICE, HOST, Op.READ, T.TOPIC, "orders")
    auth.remove([acl("orders", permission=A.DENY, principal="User:*")])
    assert auth.authorize(ALICE, HOST, Op.READ, T.TOPIC, "orders")
    auth.set_acls(acl("orders").pattern, [])
    assert not auth.authorize(ALICE, HOST, Op.READ, T.TOPIC, "orders")
    auth.replace([acl("orders")])
    assert auth.authorize(ALICE, HOST, Op.READ, T.TOPIC, "orders")
    assert (auth.allowed, auth.denied) == (5, 2)


def test_only_literal_and_prefixed_patterns_are_stored() -> None:
    with pytest.raises(ValueError, match="LITERAL or PREFIXED"):
        authorizer(acl("x", pattern_type=P.MATCH))
