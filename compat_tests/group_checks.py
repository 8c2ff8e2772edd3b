"""Shared checks for the consumer-group tests: who owns which partition, a group as its
coordinator describes it, and waiting."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, Protocol

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from kafka import KafkaAdminClient, TopicPartition
from kafka.admin import NewTopic

from compat_tests.broker import BrokerProcess
from gregor.apis.context import build
from gregor.wire import versions as v
from gregor.wire.schema import request_type
from tests.kafka_wire import WireClient

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


def driver_events(lines: Iterable[str]) -> Iterator[dict]:
    """The events a member's driver process prints, a JSON object a line (its other lines
    are the client's own logging)."""
    for line in lines:
        if line.startswith("{"):
            yield json.loads(line)


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


def describe_at_coordinator(broker: BrokerProcess, group: str, api: int) -> Any:
    """The group as ``api`` v1 (ConsumerGroupDescribe, ShareGroupDescribe) shows it, asked
    of the group's coordinator."""
    finder = WireClient(broker.port)
    try:
        found = finder.call(
            v.FIND_COORDINATOR, 0, build(request_type(v.FIND_COORDINATOR, 0), key=group)
        )
    finally:
        finder.close()
    client = WireClient(found.port)
    try:
        body = build(request_type(api, 1), group_ids=(group,), include_authorized_operations=False)
        (described,) = client.call(api, 1, body).groups
    finally:
        client.close()
    return described


class Closable(Protocol):
    def close(self) -> None: ...


def commit_everything(
    broker: BrokerProcess,
    topic: str,
    group: str,
    partitions: int,
    consumer: Callable[[], Closable],
    timeout: float,
) -> dict[int, int]:
    """Run one consumer of the group until it has committed every partition's end offset,
    then close it; return those end offsets."""
    ends = end_offsets(broker.bootstrap, topic, partitions)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        member = consumer()
        wait_until(lambda: committed(admin, group) == ends, timeout, "everything committed")
        member.close()
    finally:
        admin.close()
    return ends


class ConfluentMember:
    """An in-process confluent-kafka consumer that counts its rebalance callbacks; a
    subclass names the configs its members start from."""

    defaults: ClassVar[Mapping[str, object]] = {}

    def __init__(self, broker: BrokerProcess, topic: str, group: str, **configs: object) -> None:
        self.consumer = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                **self.defaults,
                **configs,
            }
        )
        self.callbacks = 0
        self.consumer.subscribe([topic], on_assign=self._changed, on_revoke=self._changed)

    def _changed(self, _consumer: Consumer, _partitions: list[ConfluentTopicPartition]) -> None:
        self.callbacks += 1

    def owned(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}

    def close(self, timeout: float) -> bool:
        """Close the consumer; False if it was still closing after ``timeout``. librdkafka's
        close has no time limit, and once (a CI run, a cooperative group whose rebalance
        the test had timed out in) it never returned: a hung close fails the test instead of
        holding the whole run."""
        closer = threading.Thread(target=self.consumer.close, name="close", daemon=True)
        closer.start()
        closer.join(timeout)
        return not closer.is_alive()


def poll_all(members: Iterable[ConfluentMember]) -> None:
    """One short poll round of every member (confluent-kafka rebalances inside poll)."""
    for m in members:
        m.consumer.poll(0.05)
