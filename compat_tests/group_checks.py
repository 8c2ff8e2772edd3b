"""Shared checks for the consumer-group tests: who owns which partition, and waiting."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence

from kafka import KafkaAdminClient, TopicPartition
from kafka.admin import NewTopic

from compat_tests.broker import BrokerProcess

SESSION_OVERRIDES = {
    # Clients may then use short session timeouts, so the expiry tests stay quick.
    "group.min.session.timeout.ms": "1000",
    "group.initial.rebalance.delay.ms": "0",
}


def wait_until(
    check: Callable[[], bool], timeout: float, what: str, step: Callable[[], object] | None = None
) -> None:
    """Call ``step`` (e.g. one poll round) until ``check`` holds; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        if step is not None:
            step()
        else:
            time.sleep(0.05)


def balanced(owned: Sequence[Iterable[int]], partitions: int) -> bool:
    """Every partition owned by exactly one member, and sizes differ by at most one."""
    sets = [set(o) for o in owned]
    flat = [p for s in sets for p in s]
    if sorted(flat) != list(range(partitions)):
        return False
    sizes = [len(s) for s in sets]
    return max(sizes) - min(sizes) <= 1


def committed(admin: KafkaAdminClient, group: str) -> dict[int, int]:
    offsets = admin.list_group_offsets(group)[group]
    return {tp.partition: meta.offset for tp, meta in offsets.items()}


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    from kafka import KafkaConsumer

    c = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        ends = c.end_offsets([TopicPartition(topic, p) for p in range(partitions)])
        return {tp.partition: o for tp, o in ends.items()}
    finally:
        c.close()


def create_topic(broker: BrokerProcess, name: str, partitions: int) -> str:
    """Create the group tests' topic with kafka-python's admin client; return its name."""
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        topic = NewTopic(name, partitions, replication_factor=broker.replication_factor)
        admin.create_topics([topic])
    finally:
        admin.close()
    return name
