"""Transactions with kafka-python 3.x: its transactional producer commits and aborts, offsets
sent to a transaction reach the group on commit only, and its read_committed consumer skips
what was aborted."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata

from compat_tests.broker import BrokerProcess
from compat_tests.group_checks import create_topic
from compat_tests.matrix import compat
from compat_tests.txn_checks import TXN_OVERRIDES, group_offsets, wait_for_offsets

pytestmark = compat("kafka-python", "transactions")

BROKER_OVERRIDES = TXN_OVERRIDES
PARTITIONS = 2
TIMEOUT = 60.0


@pytest.fixture
def topic(broker: BrokerProcess, new_topic: Callable[[str], str]) -> str:
    name = create_topic(broker, new_topic("kafka-python-txn"), PARTITIONS)
    broker.wait_for_topic(name, PARTITIONS)
    return name


def producer(broker: BrokerProcess) -> KafkaProducer:
    p = KafkaProducer(
        bootstrap_servers=broker.bootstrap, transactional_id=f"txn-{uuid.uuid4().hex[:8]}"
    )
    p.init_transactions()
    return p


def read_values(broker: BrokerProcess, topic: str, isolation: str) -> list[str]:
    """Every value a consumer of that isolation level reads up to the end offsets (the LSO
    under read_committed), in partition then offset order."""
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, isolation_level=isolation)
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning()
        ends = consumer.end_offsets(tps)
        seen: list[tuple[int, int, str]] = []
        deadline = time.monotonic() + TIMEOUT
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, f"not at {ends} in time"
            for records in consumer.poll(timeout_ms=200).values():
                seen += [(r.partition, r.offset, r.value.decode()) for r in records]
        return [value for _, _, value in sorted(seen)]
    finally:
        consumer.close()


def test_commit_and_abort(broker: BrokerProcess, topic: str) -> None:
    p = producer(broker)
    try:
        for values, commit in ((["c1", "c2"], True), (["a1", "a2"], False), (["c3"], True)):
            p.begin_transaction()
            for i, value in enumerate(values):
                p.send(topic, value.encode(), partition=i % PARTITIONS).get(TIMEOUT)
            if commit:
                p.commit_transaction()
            else:
                p.abort_transaction()
    finally:
        p.close()

    assert read_values(broker, topic, "read_committed") == ["c1", "c3", "c2"]
    assert read_values(broker, topic, "read_uncommitted") == ["c1", "a1", "c3", "c2", "a2"]


def test_offsets_become_visible_on_commit_only(broker: BrokerProcess, topic: str) -> None:
    group = f"txn-group-{uuid.uuid4().hex[:8]}"
    p = producer(broker)
    try:
        p.begin_transaction()
        p.send(topic, b"x", partition=0).get(TIMEOUT)
        offsets = {TopicPartition(topic, 0): OffsetAndMetadata(5, "", -1)}
        p.send_offsets_to_transaction(offsets, group)
        assert group_offsets(broker, group) == {}
        p.commit_transaction()
        wait_for_offsets(broker, group, {0: 5})

        p.begin_transaction()
        p.send_offsets_to_transaction(
            {TopicPartition(topic, 0): OffsetAndMetadata(9, "", -1)}, group
        )
        p.abort_transaction()
        assert group_offsets(broker, group) == {0: 5}
    finally:
        p.close()


# kafka-python's table of what a Kafka 2.4 broker serves caps TxnOffsetCommit at v2 (the
# versions without member fields); pinning api_version makes the client use that table
# instead of asking the broker.
OLD_BROKER = (2, 4)


def test_consume_transform_produce_with_txn_offset_commit_v2(
    broker: BrokerProcess, new_topic: Callable[[str], str]
) -> None:
    """A consume-transform-produce loop whose TxnOffsetCommit is v2 commits while its own
    consumer is a live member of the group (Kafka exempts v0-v2 from the member checks;
    Gregor answered UNKNOWN_MEMBER_ID)."""
    from kafka.protocol.broker_version_data import BROKER_API_VERSIONS

    assert BROKER_API_VERSIONS[OLD_BROKER][28] == (0, 2)  # TxnOffsetCommit
    source = create_topic(broker, new_topic("kafka-python-ctp-in"), PARTITIONS)
    sink = create_topic(broker, new_topic("kafka-python-ctp-out"), PARTITIONS)
    broker.wait_for_topic(source, PARTITIONS)
    broker.wait_for_topic(sink, PARTITIONS)
    count = 20
    plain = KafkaProducer(bootstrap_servers=broker.bootstrap)
    for i in range(count):
        plain.send(source, f"v{i}".encode(), partition=i % PARTITIONS)
    plain.flush(TIMEOUT)
    plain.close()

    group = f"ctp-{uuid.uuid4().hex[:8]}"
    consumer = KafkaConsumer(
        source,
        bootstrap_servers=broker.bootstrap,
        group_id=group,
        api_version=OLD_BROKER,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
    )
    p = KafkaProducer(
        bootstrap_servers=broker.bootstrap,
        transactional_id=f"ctp-{uuid.uuid4().hex[:8]}",
        api_version=OLD_BROKER,
    )
    p.init_transactions()
    copied = 0
    try:
        deadline = time.monotonic() + TIMEOUT
        while copied < count:
            assert time.monotonic() < deadline, f"copied {copied} of {count} in time"
            polled = consumer.poll(timeout_ms=500)
            if not polled:
                continue
            assert consumer.assignment(), "the consumer is a member with partitions"
            p.begin_transaction()
            offsets = {}
            for tp, records in polled.items():
                for r in records:
                    p.send(sink, r.value.upper(), partition=r.partition)
                offsets[tp] = OffsetAndMetadata(records[-1].offset + 1, "", -1)
                copied += len(records)
            p.send_offsets_to_transaction(offsets, consumer.group_metadata())
            p.commit_transaction()
        wait_for_offsets(broker, group, {i: count // PARTITIONS for i in range(PARTITIONS)})
    finally:
        p.close()
        consumer.close()
    expected = sorted(f"V{i}" for i in range(count))
    assert sorted(read_values(broker, sink, "read_committed")) == expected
