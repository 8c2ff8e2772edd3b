"""Dynamic configs in cluster mode (three brokers, a real ZooKeeper): a change sent to any
broker is written under /config and announced under /config/changes, and every broker
applies it (its logs included) without a restart; a restarted broker reads them back."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import Producer

from compat_tests.process_pool import ProcessPool
from gregor.controller.configs import DELETE, SET
from gregor.controller.metadata.config_resource import BROKER, GROUP, TOPIC
from gregor.server.harness.cluster import Cluster
from tests.kafka_wire import WireClient
from tests.test_cluster import create, new_topic
from tests.test_config_apis import described, errors, incremental

# Retention runs every 200 ms so that a change shows within a poll; tiny segments.
OVERRIDES = {"log.retention.check.interval.ms": "200"}
# Generous: three brokers and ZooKeeper share a loaded 2-core machine.
DEADLINE_S = 30.0
HOUR_MS = 3_600_000


@pytest.fixture(scope="module")
def cluster(process_pool: ProcessPool) -> Cluster:
    return process_pool.cluster(OVERRIDES)


def on(cluster: Cluster, broker_id: int, call: Callable[[WireClient], object]) -> object:
    client = WireClient(cluster.brokers[broker_id].port)
    try:
        return call(client)
    finally:
        client.close()


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_topic_config_reaches_every_broker_and_its_replicas(cluster: Cluster) -> None:
    topic = new_topic("retained")
    create(cluster.bootstrap, topic, 1, 3, **{"segment.bytes": "1024"})
    cluster.wait_for_topic(topic, 1, isr=3)
    old = int(time.time() * 1000) - HOUR_MS
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(20):
        producer.produce(topic, b"x" * 200, partition=0, timestamp=old + i)
    assert producer.flush(60) == 0
    first = "00000000000000000000.log"
    assert all(first in files for files in cluster.segment_bytes(topic, 0).values())

    change = [(TOPIC, topic, [("retention.ms", SET, "60000")])]
    assert errors(on(cluster, 2, lambda c: incremental(c, change))) == [(0, None)]
    for broker_id in cluster.brokers:
        wait_for(
            lambda b=broker_id: (
                on(cluster, b, lambda c: described(c, TOPIC, topic))["retention.ms"] == ("60000", 1)
            ),
            f"broker {broker_id} to see the topic's new retention",
        )

    def first_segment_gone_everywhere() -> bool:
        replicas = cluster.segment_bytes(topic, 0)
        return len(replicas) == 3 and all(first not in files for files in replicas.values())

    wait_for(first_segment_gone_everywhere, "every replica to apply the new retention")


def test_broker_configs_per_broker_and_default_survive_a_restart(cluster: Cluster) -> None:
    default = [(BROKER, "", [("log.retention.ms", SET, "7200000")])]
    own = [(BROKER, "3", [("log.retention.ms", SET, "3600000")])]
    assert errors(on(cluster, 1, lambda c: incremental(c, default))) == [(0, None)]
    assert errors(on(cluster, 3, lambda c: incremental(c, own))) == [(0, None)]
    # Another broker's id is refused: clients send a broker's configs to that broker.
    refused = on(cluster, 1, lambda c: incremental(c, own))
    assert [e[0] for e in errors(refused)] == [42]  # INVALID_REQUEST

    expected = {1: ("7200000", 3), 2: ("7200000", 3), 3: ("3600000", 2)}

    def seen(broker_id: int) -> tuple[str, int]:
        configs = on(cluster, broker_id, lambda c: described(c, BROKER, str(broker_id)))
        return configs["log.retention.ms"]

    for broker_id, value in expected.items():
        wait_for(lambda b=broker_id, v=value: seen(b) == v, f"broker {broker_id}'s configs")

    cluster.restart(2)
    cluster.restart(3)
    cluster.wait_for_brokers([1, 2, 3])
    assert {b: seen(b) for b in (2, 3)} == {2: expected[2], 3: expected[3]}


def test_group_configs_are_shared_and_read_back_at_start(cluster: Cluster) -> None:
    group = "shared/group"  # a '/' is URL-encoded in its znode's name
    change = [(GROUP, group, [("consumer.session.timeout.ms", SET, "50000")])]
    assert errors(on(cluster, 1, lambda c: incremental(c, change))) == [(0, None)]

    def seen(broker_id: int) -> tuple[str, int]:
        configs = on(cluster, broker_id, lambda c: described(c, GROUP, group))
        return configs["consumer.session.timeout.ms"]

    wait_for(lambda: seen(2) == ("50000", 8), "broker 2 to see the group config")
    cluster.restart(3)
    cluster.wait_for_brokers([1, 2, 3])
    assert seen(3) == ("50000", 8)


def test_num_replica_fetchers_resizes_every_brokers_fetchers(cluster: Cluster) -> None:
    """The cluster default reaches every broker (ZooKeeper notification) and each spreads
    its followed partitions over the new number of fetchers; a per-broker value overrides
    it; replication goes on throughout."""
    topic = new_topic("fetched")
    create(cluster.bootstrap, topic, 6, 3)
    cluster.wait_for_topic(topic, 6, isr=3)

    def resized(broker_id: int, count: int) -> bool:
        text = cluster.brokers[broker_id].log_path.read_text(errors="replace")
        return f"Resized the replica fetchers to {count} per source broker" in text

    def fetchers(broker_id: int) -> tuple[str, int]:
        configs = on(cluster, broker_id, lambda c: described(c, BROKER, str(broker_id)))
        return configs["num.replica.fetchers"]

    default = [(BROKER, "", [("num.replica.fetchers", SET, "2")])]
    own = [(BROKER, "3", [("num.replica.fetchers", SET, "4")])]
    try:
        assert errors(on(cluster, 1, lambda c: incremental(c, default))) == [(0, None)]
        for broker_id in cluster.brokers:
            wait_for(lambda b=broker_id: resized(b, 2), f"broker {broker_id}'s fetchers")
            wait_for(lambda b=broker_id: fetchers(b) == ("2", 3), f"broker {broker_id}'s config")
        assert errors(on(cluster, 3, lambda c: incremental(c, own))) == [(0, None)]
        wait_for(lambda: resized(3, 4), "broker 3's fetchers")
        assert fetchers(3) == ("4", 2)

        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        for i in range(60):
            producer.produce(topic, b"x" * 100, partition=i % 6)
        assert producer.flush(60) == 0

        def replicated() -> bool:
            for partition in range(6):
                sizes = cluster.segment_bytes(topic, partition)
                if len(sizes) != 3 or len({tuple(sorted(s.items())) for s in sizes.values()}) != 1:
                    return False
            return True

        wait_for(replicated, "every replica to catch up")
    finally:
        delete_own = [(BROKER, "3", [("num.replica.fetchers", DELETE, None)])]
        delete_default = [(BROKER, "", [("num.replica.fetchers", DELETE, None)])]
        on(cluster, 3, lambda c: incremental(c, delete_own))
        on(cluster, 1, lambda c: incremental(c, delete_default))
