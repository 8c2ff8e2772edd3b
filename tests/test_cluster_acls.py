"""ACLs on a cluster: CreateAcls and DeleteAcls on any broker write Kafka's znodes
(/kafka-acl/<Type>/<name>, /kafka-acl-extended/prefixed/<Type>/<prefix>, with their JSON) and
change notifications (/kafka-acl-changes, /kafka-acl-extended-changes), and every other
broker follows within a second; a broker that starts later loads them all."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import TypeVar

import pytest
from kazoo.client import KazooClient

from compat_tests.process_pool import ProcessPool
from gregor.controller.acls.model import AclOperation as Op
from gregor.controller.acls.model import AclPermissionType as Perm
from gregor.controller.acls.model import PatternType as Pat
from gregor.controller.acls.model import ResourceType as Res
from gregor.server.harness.cluster import Cluster
from tests.kafka_wire import WireClient
from tests.test_acl_apis import Acl, allow, create, delete, deleted, described, filter_fields

OVERRIDES = {
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "super.users": "User:ANONYMOUS",
}
T = TypeVar("T")
# The bound: a change takes effect on every broker within a second.
PROPAGATION_S = 1.0


@pytest.fixture(scope="module")
def cluster(process_pool: ProcessPool) -> Cluster:
    return process_pool.cluster(OVERRIDES, brokers=3)


def on(cluster: Cluster, broker_id: int, call: Callable[[WireClient], T]) -> T:
    client = WireClient(cluster.brokers[broker_id].port)
    try:
        return call(client)
    finally:
        client.close()


def await_everywhere(cluster: Cluster, name: str, expected: set[Acl], within: float) -> None:
    """Every running broker describes exactly ``expected`` for resources named ``name``."""
    deadline = time.monotonic() + within
    for broker_id in cluster.running():
        while (found := on(cluster, broker_id, lambda c: described(c, name=name))) != expected:
            assert time.monotonic() < deadline, f"broker {broker_id} describes {found}"
            time.sleep(0.02)


def test_acls_reach_every_broker_through_kafkas_znodes(cluster: Cluster, zk: KazooClient) -> None:
    name = f"orders-{uuid.uuid4().hex[:6]}"
    literal = allow(Res.TOPIC, name, Pat.LITERAL, "User:alice", Op.READ)
    denied = (Res.TOPIC, name, Pat.LITERAL, "User:bob", "10.0.0.1", Op.WRITE, Perm.DENY)
    prefixed = allow(Res.GROUP, name, Pat.PREFIXED, "User:alice", Op.READ)
    changes_before = len(zk.get_children("/kafka-acl-changes"))
    assert on(cluster, 1, lambda c: create(c, [literal, denied, prefixed])) == [(0, None)] * 3
    await_everywhere(cluster, name, {literal, denied, prefixed}, PROPAGATION_S)

    data, _ = zk.get(f"/kafka-acl/Topic/{name}")
    assert json.loads(data) == {
        "version": 1,
        "acls": [
            {
                "principal": "User:alice",
                "permissionType": "Allow",
                "operation": "Read",
                "host": "*",
            },
            {
                "principal": "User:bob",
                "permissionType": "Deny",
                "operation": "Write",
                "host": "10.0.0.1",
            },
        ],
    }
    data, _ = zk.get(f"/kafka-acl-extended/prefixed/Group/{name}")
    assert json.loads(data)["acls"] == [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"}
    ]
    literal_changes = sorted(zk.get_children("/kafka-acl-changes"))
    assert len(literal_changes) > changes_before
    change, _ = zk.get(f"/kafka-acl-changes/{literal_changes[-1]}")
    assert change.decode() == f"TOPIC:{name}"
    assert literal_changes[-1].startswith("acl_changes_")
    extended = sorted(zk.get_children("/kafka-acl-extended-changes"))
    event, _ = zk.get(f"/kafka-acl-extended-changes/{extended[-1]}")
    assert json.loads(event) == {
        "version": 1,
        "resourceType": "GROUP",
        "name": name,
        "patternType": "PREFIXED",
    }

    # Deleted through another broker: the emptied node goes, and every broker follows.
    results = on(cluster, 2, lambda c: delete(c, [filter_fields(principal="User:alice")]))
    assert deleted(results.filter_results[0]) == {literal, prefixed}
    await_everywhere(cluster, name, {denied}, PROPAGATION_S)
    assert zk.exists(f"/kafka-acl-extended/prefixed/Group/{name}") is None
    data, _ = zk.get(f"/kafka-acl/Topic/{name}")
    assert [a["principal"] for a in json.loads(data)["acls"]] == ["User:bob"]


def test_a_restarted_broker_loads_every_acl(cluster: Cluster, zk: KazooClient) -> None:
    name = f"txn-{uuid.uuid4().hex[:6]}"
    kept = allow(Res.TRANSACTIONAL_ID, name, Pat.LITERAL, "User:carol", Op.WRITE)
    cluster.stop(3)
    try:
        assert on(cluster, 1, lambda c: create(c, [kept])) == [(0, None)]
    finally:
        cluster.restart(3)
    cluster.wait_for_brokers([1, 2, 3])
    assert on(cluster, 3, lambda c: described(c, name=name)) == {kept}
    # An ACL written to ZooKeeper by another writer (Kafka's own tools) is followed too.
    zk.create(
        f"/kafka-acl/TransactionalId/{name}-zk",
        json.dumps(
            {
                "version": 1,
                "acls": [
                    {
                        "principal": "User:dan",
                        "permissionType": "Allow",
                        "operation": "Describe",
                        "host": "*",
                    }
                ],
            }
        ).encode(),
    )
    zk.create(
        "/kafka-acl-changes/acl_changes_", f"TRANSACTIONAL_ID:{name}-zk".encode(), sequence=True
    )
    written = allow(Res.TRANSACTIONAL_ID, f"{name}-zk", Pat.LITERAL, "User:dan", Op.DESCRIBE)
    await_everywhere(cluster, f"{name}-zk", {written}, PROPAGATION_S)
