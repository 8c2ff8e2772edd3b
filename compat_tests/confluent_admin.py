"""Topic set-up through confluent-kafka's AdminClient, for clients without an admin API."""

from __future__ import annotations

import time

from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.broker import BrokerProcess


def admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def create_topic(
    broker: BrokerProcess, topic: str, partitions: int, replication_factor: int | None = None
) -> None:
    """Create a topic, by default with a replica on every broker."""
    client = admin(broker)  # must outlive its futures
    replicas = replication_factor or broker.replication_factor
    futures = client.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=replicas)],
        operation_timeout=30,
    )
    futures[topic].result(timeout=60)


def delete_topic(broker: BrokerProcess, topic: str) -> None:
    """Delete and wait until metadata no longer lists the topic."""
    client = admin(broker)
    client.delete_topics([topic], operation_timeout=30)[topic].result(timeout=60)
    deadline = time.monotonic() + 30
    while topic in client.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, f"{topic} still listed after deletion"
        time.sleep(0.1)
