"""CreateAcls, DescribeAcls and DeleteAcls against real broker processes: SECURITY_DISABLED
without an authorizer; with one, per-creation validation with Kafka's messages, filters
(MATCH, ANY, prefixes, principals), deletions per filter, the ACLs kept across a restart
(the metadata log), and the CLUSTER check the requests themselves need. Through raw frames
for exact codes and messages, and through confluent-kafka's and kafka-python's admin
clients in their own styles."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka.admin as ck
import kafka.admin as kp
import pytest
from kafka.errors import NoError, SecurityDisabledError
from kio.schema.errors import ErrorCode

from compat_tests.broker import BrokerProcess
from compat_tests.process_pool import ProcessPool
from gregor.apis.context import nested
from gregor.controller.acls.model import AclOperation as Op
from gregor.controller.acls.model import AclPermissionType as Perm
from gregor.controller.acls.model import PatternType as Pat
from gregor.controller.acls.model import ResourceType as Res
from gregor.wire.schema import request_type
from gregor.wire.versions import CREATE_ACLS, DELETE_ACLS, DESCRIBE_ACLS
from tests.kafka_wire import WireClient

AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
ANONYMOUS = "User:ANONYMOUS"
ANY_PATTERN = kp.ACLResourcePatternType.ANY
# A creation: (resource type, name, pattern type, principal, host, operation, permission).
Acl = tuple[Res, str, Pat, str, str, Op, Perm]


def creation(acl: Acl, version: int = 3) -> Any:
    cls = nested(request_type(CREATE_ACLS, version), "AclCreation")
    rtype, name, pattern, principal, host, op, perm = acl
    return cls(
        resource_type=rtype,
        resource_name=name,
        resource_pattern_type=pattern,
        principal=principal,
        host=host,
        operation=op,
        permission_type=perm,
    )


def create(client: WireClient, acls: list[Acl], version: int = 3) -> list[tuple[int, Any]]:
    cls = request_type(CREATE_ACLS, version)
    answer = client.call(CREATE_ACLS, version, cls(creations=tuple(creation(a) for a in acls)))
    return [(r.error_code, r.error_message) for r in answer.results]


def filter_fields(
    rtype: Res = Res.ANY,
    name: str | None = None,
    pattern: Pat = Pat.ANY,
    principal: str | None = None,
    host: str | None = None,
    op: Op = Op.ANY,
    perm: Perm = Perm.ANY,
) -> dict[str, Any]:
    return {
        "resource_type_filter": rtype,
        "resource_name_filter": name,
        "pattern_type_filter": pattern,
        "principal_filter": principal,
        "host_filter": host,
        "operation": op,
        "permission_type": perm,
    }


def describe(client: WireClient, version: int = 3, **fields: Any) -> Any:
    cls = request_type(DESCRIBE_ACLS, version)
    return client.call(DESCRIBE_ACLS, version, cls(**filter_fields(**fields)))


def described(client: WireClient, **fields: Any) -> set[Acl]:
    answer = describe(client, **fields)
    assert answer.error_code == ErrorCode.none, answer.error_message
    return {
        (
            Res(r.resource_type),
            r.resource_name,
            Pat(r.pattern_type),
            a.principal,
            a.host,
            Op(a.operation),
            Perm(a.permission_type),
        )
        for r in answer.resources
        for a in r.acls
    }


def delete(client: WireClient, filters: list[dict[str, Any]], version: int = 3) -> Any:
    cls = request_type(DELETE_ACLS, version)
    item = nested(cls, "DeleteAclsFilter")
    return client.call(DELETE_ACLS, version, cls(filters=tuple(item(**f) for f in filters)))


def deleted(result: Any) -> set[Acl]:
    assert result.error_code == ErrorCode.none, result.error_message
    assert all(m.error_code == ErrorCode.none for m in result.matching_acls)
    return {
        (
            Res(m.resource_type),
            m.resource_name,
            Pat(m.pattern_type),
            m.principal,
            m.host,
            Op(m.operation),
            Perm(m.permission_type),
        )
        for m in result.matching_acls
    }


def allow(rtype: Res, name: str, pattern: Pat, principal: str, op: Op) -> Acl:
    return (rtype, name, pattern, principal, "*", op, Perm.ALLOW)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    overrides = {"authorizer.class.name": AUTHORIZER, "super.users": f"User:admin;{ANONYMOUS}"}
    with BrokerProcess(tmp_path_factory.mktemp("acls"), overrides) as broker:
        yield broker


@pytest.fixture
def wire(secured: BrokerProcess) -> Iterator[WireClient]:
    client = WireClient(secured.port)
    yield client
    delete(client, [filter_fields()])  # every ACL: each test starts with none
    client.close()


def test_without_an_authorizer_every_acl_api_is_security_disabled(
    process_pool: ProcessPool,
) -> None:
    broker = process_pool.broker()
    client = WireClient(broker.port)
    try:
        acl = allow(Res.TOPIC, "t", Pat.LITERAL, "User:a", Op.READ)
        message = "No Authorizer is configured."
        assert create(client, [acl, acl]) == [(ErrorCode.security_disabled, message)] * 2
        answer = describe(client, version=1)
        assert (answer.error_code, answer.error_message) == (ErrorCode.security_disabled, message)
        results = delete(client, [filter_fields()], version=2).filter_results
        assert [(r.error_code, r.error_message) for r in results] == [
            (ErrorCode.security_disabled, message)
        ]
    finally:
        client.close()
    # kafka-python raises it (confluent-kafka 2.x drops DescribeAcls' top-level error).
    admin = kp.KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        with pytest.raises(SecurityDisabledError):
            admin.describe_acls(
                kp.ACLFilter(
                    None,
                    None,
                    kp.ACLOperation.ANY,
                    kp.ACLPermissionType.ANY,
                    kp.ResourcePatternFilter(
                        kp.ResourceType.ANY, None, kp.ACLResourcePatternType.ANY
                    ),
                )
            )
    finally:
        admin.close()


def test_each_creation_is_validated_and_answered_alone(wire: WireClient) -> None:
    good = allow(Res.TOPIC, "orders", Pat.LITERAL, "User:alice", Op.READ)
    invalid = ErrorCode.invalid_request
    results = create(
        wire,
        [
            allow(Res.CLUSTER, "not-the-cluster", Pat.LITERAL, "User:a", Op.ALTER),
            good,
            allow(Res.TOPIC, "", Pat.LITERAL, "User:a", Op.READ),
            allow(Res.ANY, "t", Pat.LITERAL, "User:a", Op.READ),
            allow(Res.TOPIC, "t", Pat.MATCH, "User:a", Op.READ),
            allow(Res.TOPIC, "t", Pat.LITERAL, "User:a", Op.ANY),
            (Res.TOPIC, "t", Pat.LITERAL, "User:a", "*", Op.READ, Perm.ANY),
            allow(Res.TOPIC, "t", Pat.LITERAL, "alice", Op.READ),
            good,  # again: a success that changes nothing
        ],
    )
    assert results == [
        (invalid, "The only valid name for the CLUSTER resource is kafka-cluster"),
        (ErrorCode.none, None),
        (invalid, "Invalid empty resource name"),
        (invalid, "Invalid resourceType ANY"),
        (invalid, "Invalid patternType MATCH"),
        (invalid, "Invalid operation ANY"),
        (invalid, "Invalid permissionType ANY"),
        (
            invalid,
            "Could not parse principal from `alice` (no colon is present separating the "
            "principal type from the principal name)",
        ),
        (ErrorCode.none, None),
    ]
    assert described(wire) == {good}


def test_filters_find_literal_wildcard_and_prefixed_acls(wire: WireClient) -> None:
    literal = allow(Res.TOPIC, "orders-eu", Pat.LITERAL, "User:alice", Op.READ)
    wildcard = allow(Res.TOPIC, "*", Pat.LITERAL, "User:bob", Op.DESCRIBE)
    prefixed = allow(Res.TOPIC, "orders-", Pat.PREFIXED, "User:carol", Op.WRITE)
    other = allow(Res.TOPIC, "payments", Pat.LITERAL, "User:alice", Op.READ)
    group = (Res.GROUP, "orders-eu", Pat.LITERAL, "User:alice", "10.0.0.1", Op.READ, Perm.DENY)
    assert create(wire, [literal, wildcard, prefixed, other, group]) == [(0, None)] * 5
    everything = {literal, wildcard, prefixed, other, group}
    assert described(wire) == everything
    match = described(wire, rtype=Res.TOPIC, name="orders-eu", pattern=Pat.MATCH)
    assert match == {literal, wildcard, prefixed}
    assert described(wire, rtype=Res.TOPIC, name="orders-eu", pattern=Pat.ANY) == {literal}
    assert described(wire, name="orders-", pattern=Pat.PREFIXED) == {prefixed}
    assert described(wire, principal="User:alice") == {literal, other, group}
    assert described(wire, host="10.0.0.1", perm=Perm.DENY) == {group}
    assert described(wire, op=Op.WRITE) == {prefixed}
    # Grouped by resource pattern, as Kafka answers.
    answer = describe(wire, principal="User:alice")
    assert sorted((r.resource_name, len(r.acls)) for r in answer.resources) == [
        ("orders-eu", 1),
        ("orders-eu", 1),
        ("payments", 1),
    ]


def test_deletion_answers_per_filter(wire: WireClient) -> None:
    a = allow(Res.TOPIC, "t1", Pat.LITERAL, "User:alice", Op.READ)
    b = allow(Res.TOPIC, "t1", Pat.LITERAL, "User:bob", Op.READ)
    c = allow(Res.GROUP, "g-", Pat.PREFIXED, "User:alice", Op.READ)
    d = allow(Res.TOPIC, "t2", Pat.LITERAL, "User:dave", Op.WRITE)
    assert create(wire, [a, b, c, d]) == [(0, None)] * 4
    unknown_pattern = {**filter_fields(), "pattern_type_filter": 0}
    results = delete(
        wire,
        [
            filter_fields(principal="User:alice"),
            unknown_pattern,
            filter_fields(rtype=Res.TOPIC, name="t1", pattern=Pat.LITERAL),
            filter_fields(rtype=Res.TOPIC, name="absent", pattern=Pat.LITERAL),
        ],
    ).filter_results
    assert deleted(results[0]) == {a, c}
    assert (results[1].error_code, results[1].error_message) == (
        ErrorCode.invalid_request,
        "Unknown patternFilter.",
    )
    assert deleted(results[2]) == {a, b}  # a too: every filter answers all it matched
    assert deleted(results[3]) == set()
    assert described(wire) == {d}


def test_confluent_admin_creates_describes_and_deletes(secured: BrokerProcess) -> None:
    admin = ck.AdminClient({"bootstrap.servers": secured.bootstrap})
    read = ck.AclBinding(
        ck.ResourceType.TOPIC,
        "ck-orders",
        ck.ResourcePatternType.LITERAL,
        "User:alice",
        "*",
        ck.AclOperation.READ,
        ck.AclPermissionType.ALLOW,
    )
    wrong = ck.AclBinding(
        ck.ResourceType.BROKER,  # confluent-kafka's name of CLUSTER (4)
        "elsewhere",
        ck.ResourcePatternType.LITERAL,
        "User:alice",
        "*",
        ck.AclOperation.ALTER,
        ck.AclPermissionType.ALLOW,
    )
    futures = admin.create_acls([read, wrong], request_timeout=15)
    assert futures[read].result() is None
    with pytest.raises(ck.KafkaException, match="The only valid name for the CLUSTER"):
        futures[wrong].result()
    by_alice = ck.AclBindingFilter(
        ck.ResourceType.ANY,
        None,
        ck.ResourcePatternType.ANY,
        "User:alice",
        None,
        ck.AclOperation.ANY,
        ck.AclPermissionType.ANY,
    )
    assert admin.describe_acls(by_alice, request_timeout=15).result() == [read]
    removed = admin.delete_acls([by_alice], request_timeout=15)[by_alice].result()
    assert removed == [read]
    assert admin.describe_acls(by_alice, request_timeout=15).result() == []


def test_kafka_python_admin_creates_describes_and_deletes(secured: BrokerProcess) -> None:
    admin = kp.KafkaAdminClient(bootstrap_servers=secured.bootstrap)
    try:
        acl = kp.ACL(
            "User:bob",
            "*",
            kp.ACLOperation.WRITE,
            kp.ACLPermissionType.ALLOW,
            kp.ResourcePattern(kp.ResourceType.TOPIC, "kp-", kp.ACLResourcePatternType.PREFIXED),
        )
        outcome = admin.create_acls([acl])
        assert outcome["succeeded"] == [acl] and outcome["failed"] == []
        by_bob = kp.ACLFilter(
            "User:bob",
            None,
            kp.ACLOperation.ANY,
            kp.ACLPermissionType.ANY,
            kp.ResourcePatternFilter(kp.ResourceType.ANY, None, ANY_PATTERN),
        )
        found, error = admin.describe_acls(by_bob)
        assert (found, error) == ([acl], NoError)
        [(_, removed, _)] = admin.delete_acls([by_bob])
        assert removed == [acl]
        assert admin.describe_acls(by_bob)[0] == []
    finally:
        admin.close()


def test_acls_survive_a_restart(secured: BrokerProcess, wire: WireClient) -> None:
    kept = allow(Res.TRANSACTIONAL_ID, "tx-", Pat.PREFIXED, "User:erin", Op.WRITE)
    gone = allow(Res.TOPIC, "short-lived", Pat.LITERAL, "User:erin", Op.READ)
    assert create(wire, [kept, gone]) == [(0, None)] * 2
    assert deleted(delete(wire, [filter_fields(name="short-lived")]).filter_results[0]) == {gone}
    wire.close()
    secured.restart()
    wire.sock = WireClient(secured.port).sock
    assert described(wire) == {kept}


def test_the_acl_apis_need_alter_or_describe_on_the_cluster(tmp_path: Path) -> None:
    """Without super users and with allow.everyone.if.no.acl.found, ANONYMOUS may change
    ACLs until one denies it ALTER on the cluster from its own address."""
    overrides = {"authorizer.class.name": AUTHORIZER, "allow.everyone.if.no.acl.found": "true"}
    with BrokerProcess(tmp_path, overrides) as broker:
        client = WireClient(broker.port)
        try:
            deny_from = (Res.CLUSTER, "kafka-cluster", Pat.LITERAL, ANONYMOUS)
            everything = allow(Res.CLUSTER, "kafka-cluster", Pat.LITERAL, ANONYMOUS, Op.ALL)
            elsewhere = (*deny_from, "10.9.9.9", Op.ALTER, Perm.DENY)
            assert create(client, [everything, elsewhere]) == [(0, None)] * 2
            here = (*deny_from, "127.0.0.1", Op.ALTER, Perm.DENY)
            assert create(client, [here]) == [(0, None)]  # the DENY was for another host
            refused = (ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
            topic = allow(Res.TOPIC, "t", Pat.LITERAL, "User:x", Op.READ)
            assert create(client, [topic, topic]) == [refused] * 2
            results = delete(client, [filter_fields(), filter_fields()]).filter_results
            assert [(r.error_code, r.error_message) for r in results] == [refused] * 2
            assert all(not r.matching_acls for r in results)
            # DESCRIBE is still allowed (ALL grants it; the DENY is of ALTER alone).
            assert described(client) == {everything, elsewhere, here}
        finally:
            client.close()
