"""Partition-state gauges in a real 3-broker cluster on a real ZooKeeper, each broker with
its own /metrics: one active controller, under-replicated partitions on the leaders once a
follower dies, and the dead broker's partition of its own counted offline by the
controller only."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.process_pool import ProcessPool
from gregor.server.harness.cluster import Cluster
from tests.prometheus_scrape import Scrape
from tests.test_metrics_hostile import METRICS_ON_PORT_0, read_metrics_port

URP = "kafka_server_replicamanager_underreplicatedpartitions"
OFFLINE = "kafka_controller_kafkacontroller_offlinepartitionscount"
ACTIVE = "kafka_controller_kafkacontroller_activecontrollercount"
WAIT_S = 30.0


@pytest.fixture(scope="module")
def cluster(process_pool: ProcessPool) -> Cluster:
    c = process_pool.cluster(METRICS_ON_PORT_0)
    for broker in c.brokers.values():
        read_metrics_port(broker)  # bound at start-up: no port picked free beforehand
    return c


def scrapes(cluster: Cluster) -> dict[int, Scrape]:
    return {i: Scrape(cluster.brokers[i]) for i in cluster.running()}


def eventually(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, f"not within {WAIT_S}s: {what}"
        time.sleep(0.2)  # the gauges change with the cluster; nothing to wait on but scrapes


def test_under_replicated_and_offline_partitions_when_a_broker_dies(cluster: Cluster) -> None:
    controller = cluster.wait_for_controller()
    lonely = next(i for i in cluster.brokers if i != controller)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})  # outlives its futures
    futures = admin.create_topics(
        [
            NewTopic("replicated", 3, replication_factor=3),
            NewTopic("alone", 1, replica_assignment=[[lonely]]),
        ],
        operation_timeout=30,
    )
    for future in futures.values():
        future.result(timeout=60)
    cluster.wait_for_topic("replicated", 3, isr=3)
    cluster.wait_for_topic("alone", 1)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for topic in ("replicated", "alone"):
        producer.produce(topic, b"x", partition=0)
    assert producer.flush(30) == 0

    healthy = scrapes(cluster)
    assert {i: s.value(ACTIVE) for i, s in healthy.items()} == {
        i: float(i == controller) for i in healthy
    }
    assert all(s.value(URP) == 0 and s.value(OFFLINE) == 0 for s in healthy.values())
    assert sum(s.value("kafka_server_replicamanager_leadercount") for s in healthy.values()) == 4
    for i, s in healthy.items():
        assert s.value("kafka_server_replicamanager_partitioncount") == 3 + (i == lonely)
        # Every replica of the written partition holds the record (acks=all, ISR of 3).
        assert s.value("kafka_log_log_size", topic="replicated", partition="0") > 0

    cluster.kill(lonely)

    def degraded() -> bool:
        now = scrapes(cluster)
        # Every partition of "replicated" lost a replica: each is under-replicated on the
        # leader it has now; "alone" has no live leader, which only the controller counts.
        return sum(s.value(URP) for s in now.values()) == 3 and {
            i: s.value(OFFLINE) for i, s in now.items()
        } == {i: float(i == controller) for i in now}

    eventually(degraded, f"3 under-replicated partitions and 1 offline after broker {lonely} died")
