"""Where ACLs are stored: Kafka's ZooKeeper paths, znode JSON and change notifications, and
the embedded node's metadata-log form. Expected strings are the ones Kafka's docs and tests
(ZkData, AclEntry, LiteralAclStoreTest, ExtendedAclStoreTest) show."""

from __future__ import annotations

import json

import pytest

from gregor.controller.acls import metadata_format, zk_format
from gregor.controller.acls.authorizer import AclAuthorizer
from gregor.controller.acls.model import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)

T, P, Op, A = ResourceType, PatternType, AclOperation, AclPermissionType


def test_store_paths() -> None:
    assert zk_format.store_path(P.LITERAL) == "/kafka-acl"
    assert zk_format.resource_type_path(P.LITERAL, T.TOPIC) == "/kafka-acl/Topic"
    assert zk_format.store_path(P.PREFIXED) == "/kafka-acl-extended/prefixed"
    assert zk_format.resource_type_path(P.PREFIXED, T.TOPIC) == "/kafka-acl-extended/prefixed/Topic"
    assert zk_format.change_path(P.LITERAL) == "/kafka-acl-changes"
    assert zk_format.change_path(P.PREFIXED) == "/kafka-acl-extended-changes"
    with pytest.raises(ValueError, match="Invalid pattern type: MATCH"):
        zk_format.store_path(P.MATCH)


@pytest.mark.parametrize(
    ("pattern", "path"),
    [
        (ResourcePattern(T.TOPIC, "topic-1", P.LITERAL), "/kafka-acl/Topic/topic-1"),
        (
            ResourcePattern(T.CLUSTER, "kafka-cluster", P.LITERAL),
            "/kafka-acl/Cluster/kafka-cluster",
        ),
        (ResourcePattern(T.TOPIC, "*", P.LITERAL), "/kafka-acl/Topic/*"),
        (
            ResourcePattern(T.GROUP, "group-1", P.PREFIXED),
            "/kafka-acl-extended/prefixed/Group/group-1",
        ),
        (
            ResourcePattern(T.TRANSACTIONAL_ID, "txn", P.LITERAL),
            "/kafka-acl/TransactionalId/txn",
        ),
        (
            ResourcePattern(T.DELEGATION_TOKEN, "tok", P.PREFIXED),
            "/kafka-acl-extended/prefixed/DelegationToken/tok",
        ),
        (ResourcePattern(T.USER, "alice", P.LITERAL), "/kafka-acl/User/alice"),
    ],
)
def test_resource_paths(pattern: ResourcePattern, path: str) -> None:
    assert zk_format.resource_path(pattern) == path


def test_a_slash_in_a_name_is_refused() -> None:
    with pytest.raises(ValueError, match="invalid resource name: a/b"):
        zk_format.resource_path(ResourcePattern(T.TOPIC, "a/b", P.LITERAL))


def test_paths_created_at_start_up() -> None:
    paths = zk_format.paths_to_create()
    assert paths[0] == "/kafka-acl"
    assert "/kafka-acl/Topic" in paths and "/kafka-acl/User" in paths
    assert "/kafka-acl-extended/prefixed/TransactionalId" in paths
    assert paths[-2:] == ["/kafka-acl-changes", "/kafka-acl-extended-changes"]
    assert not any(p.endswith(("/Any", "/Unknown")) for p in paths)


def test_decode_kafkas_documented_json() -> None:
    # ZkData's example, with the spacing it shows.
    data = (
        b'{"version": 1, "acls": [ { "host":"host1", "permissionType": "Allow",'
        b'"operation": "Read","principal": "User:alice"}]}'
    )
    assert zk_format.decode_acls(data) == {
        AccessControlEntry("User:alice", "host1", Op.READ, A.ALLOW)
    }
    # Names are read in any case (SecurityUtils), an unknown one as UNKNOWN.
    data = (
        b'{"version":1,"acls":[{"host":"*","permissionType":"DENY","operation":"READ",'
        b'"principal":"User:bob"},{"host":"*","permissionType":"Allow",'
        b'"operation":"DescribeConfigs","principal":"User:*"},{"host":"*",'
        b'"permissionType":"Allow","operation":"Teleport","principal":"User:bob"}]}'
    )
    assert zk_format.decode_acls(data) == {
        AccessControlEntry("User:bob", "*", Op.READ, A.DENY),
        AccessControlEntry("User:*", "*", Op.DESCRIBE_CONFIGS, A.ALLOW),
        AccessControlEntry("User:bob", "*", Op.UNKNOWN, A.ALLOW),
    }
    assert zk_format.decode_acls(b"") == frozenset()
    assert zk_format.decode_acls(None) == frozenset()


@pytest.mark.parametrize(
    "data",
    [
        b'{"version":2,"acls":[]}',
        b'{"acls":[]}',
        b'{"version":1}',
        b'{"version":1,"acls":[{"host":"*","permissionType":"Allow","operation":"Read",'
        b'"principal":"alice"}]}',
        b'{"version":1,"acls":[{"permissionType":"Allow","operation":"Read",'
        b'"principal":"User:a"}]}',
    ],
)
def test_bad_json_is_refused(data: bytes) -> None:
    with pytest.raises(ValueError):
        zk_format.decode_acls(data)


def test_encode_writes_kafkas_names_and_round_trips() -> None:
    entries = {
        AccessControlEntry("User:alice", "*", Op.READ, A.ALLOW),
        AccessControlEntry("User:alice", "10.0.0.1", Op.IDEMPOTENT_WRITE, A.DENY),
        AccessControlEntry("User:CN=bob,O=acme", "*", Op.ALTER_CONFIGS, A.ALLOW),
    }
    data = zk_format.encode_acls(entries)
    assert json.loads(data) == {
        "version": 1,
        "acls": [
            {
                "principal": "User:CN=bob,O=acme",
                "permissionType": "Allow",
                "operation": "AlterConfigs",
                "host": "*",
            },
            {
                "principal": "User:alice",
                "permissionType": "Allow",
                "operation": "Read",
                "host": "*",
            },
            {
                "principal": "User:alice",
                "permissionType": "Deny",
                "operation": "IdempotentWrite",
                "host": "10.0.0.1",
            },
        ],
    }
    assert data.startswith(b'{"version":1,"acls":[{"principal":"User:CN=bob,O=acme",')
    assert zk_format.decode_acls(data) == entries


def test_literal_change_notification() -> None:
    pattern = ResourcePattern(T.TOPIC, "some-topic", P.LITERAL)
    path, data = zk_format.change_node(pattern)
    assert path == "/kafka-acl-changes/acl_changes_"
    assert data == b"TOPIC:some-topic"
    assert zk_format.decode_change("/kafka-acl-changes", data) == pattern
    # The name is everything after the first colon (LiteralAclStoreTest's two-part logic),
    # and an older broker's "Group" reads as GROUP.
    name = "PREFIXED:this, including the PREFIXED part, is a valid two part group name"
    assert zk_format.decode_change("/kafka-acl-changes", f"Group:{name}".encode()) == (
        ResourcePattern(T.GROUP, name, P.LITERAL)
    )
    with pytest.raises(ValueError, match="ResourceType:ResourceName"):
        zk_format.decode_change("/kafka-acl-changes", b"no-separator")


def test_extended_change_notification() -> None:
    pattern = ResourcePattern(T.TRANSACTIONAL_ID, "app-", P.PREFIXED)
    path, data = zk_format.change_node(pattern)
    assert path == "/kafka-acl-extended-changes/acl_changes_"
    assert json.loads(data) == {
        "version": 1,
        "resourceType": "TRANSACTIONAL_ID",
        "name": "app-",
        "patternType": "PREFIXED",
    }
    assert zk_format.decode_change("/kafka-acl-extended-changes", data) == pattern
    written_by_kafka = b'{"version":1,"resourceType":"GROUP","name":"a:b","patternType":"PREFIXED"}'
    assert zk_format.decode_change("/kafka-acl-extended-changes", written_by_kafka) == (
        ResourcePattern(T.GROUP, "a:b", P.PREFIXED)
    )
    too_new = b'{"version":2,"resourceType":"GROUP","name":"a","patternType":"PREFIXED"}'
    with pytest.raises(ValueError, match="unsupported version"):
        zk_format.decode_change("/kafka-acl-extended-changes", too_new)
    with pytest.raises(ValueError, match="not an ACL change path"):
        zk_format.decode_change("/config/changes", data)


def test_metadata_log_form_round_trips_through_the_authorizer() -> None:
    alice_read = AccessControlEntry("User:alice", "*", Op.READ, A.ALLOW)
    colon = ResourcePattern(T.TOPIC, "a:b:c", P.LITERAL)
    prefix = ResourcePattern(T.TRANSACTIONAL_ID, "app-", P.PREFIXED)
    change = metadata_format.acl_change(colon, [alice_read])
    assert change == {
        "op": "acl",
        "name": "Topic:LITERAL:a:b:c",
        "value": [
            {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"}
        ],
    }
    assert metadata_format.parse_pattern_key("TransactionalId:PREFIXED:app-") == prefix
    assert metadata_format.pattern_key(prefix) == "TransactionalId:PREFIXED:app-"
    assert metadata_format.acl_change(prefix, [])["value"] == []
    table = json.loads(
        json.dumps(
            {
                change["name"]: change["value"],
                metadata_format.pattern_key(prefix): metadata_format.entries_value(
                    [AccessControlEntry("User:bob", "*", Op.WRITE, A.DENY)]
                ),
            }
        )
    )
    auth = AclAuthorizer([], False)
    auth.replace(metadata_format.load_bindings(table))
    assert sorted(auth.bindings(AclBindingFilter()), key=str) == sorted(
        [
            AclBinding(colon, alice_read),
            AclBinding(prefix, AccessControlEntry("User:bob", "*", Op.WRITE, A.DENY)),
        ],
        key=str,
    )
    assert auth.authorize("User:alice", "10.0.0.1", Op.DESCRIBE, T.TOPIC, "a:b:c")
    with pytest.raises(ValueError, match="ResourceType:PatternType:name"):
        metadata_format.parse_pattern_key("Topic-orders")
