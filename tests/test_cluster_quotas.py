"""Client quotas in cluster mode: AlterClientQuotas on any broker writes Kafka's znodes
(/config/clients, /config/users, a /config/changes notification) and every broker
enforces the change, seen by the same follower of /config/changes as topic configs; a
broker that starts later reads them."""

from __future__ import annotations

import json
import time

import pytest
from kazoo.client import KazooClient
from kio.schema.errors import ErrorCode

from compat_tests.process_pool import ProcessPool
from gregor.controller.configs import SET
from gregor.controller.metadata.config_resource import TOPIC
from gregor.server.harness.cluster import Cluster
from gregor.wire.schema import request_type
from gregor.wire.versions import METADATA
from tests.kafka_wire import WireClient
from tests.test_client_quotas import alter, call_as, describe, entries
from tests.test_cluster import create, new_topic
from tests.test_config_apis import described, errors, incremental


@pytest.fixture(scope="module")
def cluster(process_pool: ProcessPool) -> Cluster:
    return process_pool.cluster(brokers=2)


def throttled(port: int, client_id: str, attempts: int = 200) -> bool:
    """Whether Metadata requests of `client_id` get a throttle time within `attempts`."""
    request = request_type(METADATA, 12)(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )
    client = WireClient(port)
    try:
        for _ in range(attempts):
            if call_as(client, client_id, METADATA, 12, request).throttle_time:
                return True
        return False
    finally:
        client.close()


def wait_until(condition: object, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_quotas_go_through_zookeeper_to_every_broker(cluster: Cluster) -> None:
    first, second = cluster.brokers[1], cluster.brokers[2]
    topic = new_topic("quoted")
    create(cluster.bootstrap, topic, 1, 2)
    cluster.wait_for_topic(topic, 1, isr=2)  # known to both before its config changes
    one = WireClient(first.port)
    try:
        assert (
            alter(
                one,
                [
                    ({"client-id": "busy"}, {"request_percentage": 0.01}),
                    ({"user": "alice", "client-id": None}, {"producer_byte_rate": 1048576}),
                ],
            )
            == [(ErrorCode.none, None)] * 2
        )
        # A topic config change through the same broker: one writer, one follower for both.
        change = [(TOPIC, topic, [("retention.ms", SET, "60000")])]
        assert errors(incremental(one, change)) == [(0, None)]
    finally:
        one.close()
    zk = KazooClient(hosts=cluster.zookeeper.connect)
    zk.start(10)
    try:
        data, _ = zk.get("/config/clients/busy")
        assert json.loads(data) == {"version": 1, "config": {"request_percentage": "0.01"}}
        data, _ = zk.get("/config/users/alice/clients/<default>")
        assert json.loads(data) == {"version": 1, "config": {"producer_byte_rate": "1048576"}}
        notices = sorted(zk.get_children("/config/changes"))
        paths = [json.loads(zk.get(f"/config/changes/{n}")[0])["entity_path"] for n in notices]
        assert paths[-3:] == ["clients/busy", "users/alice/clients/<default>", f"topics/{topic}"]
        assert all(n.startswith("config_change_") for n in notices)
    finally:
        zk.stop()
        zk.close()
    two = WireClient(second.port)
    try:
        assert entries(describe(two, [("client-id", 0, "busy")])) == {
            frozenset({("client-id", "busy")}): {"request_percentage": 0.01}
        }
        wait_until(lambda: throttled(second.port, "busy"))
        wait_until(lambda: described(two, TOPIC, topic)["retention.ms"] == ("60000", 1))
        assert not throttled(second.port, "other", attempts=50)
        # Removed through the other broker: the first one stops throttling.
        assert alter(two, [({"client-id": "busy"}, {"request_percentage": None})]) == [
            (ErrorCode.none, None)
        ]
    finally:
        two.close()
    wait_until(lambda: not throttled(first.port, "busy", attempts=50))
    # A broker that starts afterwards reads what ZooKeeper holds.
    cluster.restart(2)
    two = WireClient(second.port)
    try:
        assert entries(describe(two, [])) == {
            frozenset({("user", "alice"), ("client-id", None)}): {"producer_byte_rate": 1048576.0}
        }
    finally:
        two.close()
