"""Consumer-group scenarios: how fast a group forms and starts reading, and how many offset
commits one consumer gets through. confluent-kafka clients in this process, defaults except
where noted."""

from __future__ import annotations

import statistics
import time
import uuid

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from .brokers import Broker
from .drivers import QUIET, DriverError

GROUP_PARTITIONS = 6
GROUP_MEMBERS = 3
JOIN_ROUNDS = 3
COMMIT_SECONDS = 3.0
_DEADLINE_S = 60.0

Measurements = dict[str, float]


def _consumer(broker: Broker, group: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **QUIET,
        }
    )


def _topic_with_records(broker: Broker, records: int) -> str:
    topic = f"bench-group-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, GROUP_PARTITIONS)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, **QUIET})
    for i in range(records):
        producer.produce(topic, b"x" * 100, partition=i % GROUP_PARTITIONS)
    if producer.flush(30):
        raise DriverError("records to read were not all acknowledged")
    return topic


def _join_once(broker: Broker, topic: str) -> float:
    group = f"bench-join-{uuid.uuid4().hex[:8]}"
    return first_reads([_consumer(broker, group) for _ in range(GROUP_MEMBERS)], topic)


def first_reads(members: list[Consumer], topic: str) -> float:
    """Seconds from subscribe() until each of ``members`` (of one new group) has read a
    record of ``topic``; the members are closed after."""
    try:
        started = time.monotonic()
        for c in members:
            c.subscribe([topic])
        waiting = set(range(len(members)))
        while waiting:
            if time.monotonic() - started > _DEADLINE_S:
                raise DriverError(f"{len(waiting)} member(s) read nothing in {_DEADLINE_S}s")
            # Everyone keeps polling: a member that has its records still has to take part
            # in the rebalances the later joiners cause.
            for i, c in enumerate(members):
                message = c.poll(0.005)
                if message is not None and message.error() is None:
                    waiting.discard(i)
        return time.monotonic() - started
    finally:
        for c in members:
            c.close()


def join_to_first_record(broker: Broker) -> Measurements:
    """Median over a few fresh groups of 3 members on a 6-partition topic."""
    topic = _topic_with_records(broker, 6000)
    times = [_join_once(broker, topic) for _ in range(JOIN_ROUNDS)]
    return {"join_first_record_s": statistics.median(times), "join_worst_s": max(times)}


def commit_throughput(broker: Broker) -> Measurements:
    """Synchronous commits, back to back, of one member's 6 partitions."""
    topic = _topic_with_records(broker, GROUP_PARTITIONS)
    consumer = _consumer(broker, f"bench-commit-{uuid.uuid4().hex[:8]}")
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + _DEADLINE_S
        while len(consumer.assignment()) < GROUP_PARTITIONS:
            if time.monotonic() > deadline:
                raise DriverError("the consumer was not assigned every partition")
            consumer.poll(0.05)
        commits = 0
        started = time.monotonic()
        while (elapsed := time.monotonic() - started) < COMMIT_SECONDS:
            offsets = [TopicPartition(topic, p, commits + 1) for p in range(GROUP_PARTITIONS)]
            try:
                consumer.commit(offsets=offsets, asynchronous=False)
            except KafkaException as e:
                raise DriverError(f"commit failed: {e}") from e
            commits += 1
        return {"commits_s": commits / elapsed}
    finally:
        consumer.close()
