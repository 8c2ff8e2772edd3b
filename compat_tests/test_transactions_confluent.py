"""Transactions with confluent-kafka (librdkafka): commit and abort as its read_committed and
read_uncommitted consumers see them, offsets sent to a transaction, and fencing."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.broker import BrokerProcess
from compat_tests.matrix import compat
from compat_tests.txn_checks import TXN_OVERRIDES, group_offsets, wait_for_offsets

pytestmark = compat("confluent", "transactions")

BROKER_OVERRIDES = TXN_OVERRIDES
PARTITIONS = 2
TIMEOUT = 60.0


@pytest.fixture
def topic(broker: BrokerProcess, new_topic: Callable[[str], str]) -> str:
    name = new_topic("confluent-txn")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, broker.replication_factor)])[name].result(30)
    broker.wait_for_topic(name, PARTITIONS)
    return name


def producer(broker: BrokerProcess, transactional_id: str) -> Producer:
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": transactional_id})
    p.init_transactions(TIMEOUT)
    return p


def read_records(
    broker: BrokerProcess, topic: str, isolation: str, partitions: int = PARTITIONS
) -> list[tuple[bytes | None, bytes]]:
    """Every (key, value) a consumer of that isolation level reads up to the partitions'
    ends, in partition then offset order."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )
    try:
        tps = [TopicPartition(topic, p, 0) for p in range(partitions)]
        ends = {tp.partition: consumer.get_watermark_offsets(tp, TIMEOUT)[1] for tp in tps}
        consumer.assign(tps)
        seen: list[tuple[int, int, bytes | None, bytes]] = []
        deadline = time.monotonic() + TIMEOUT
        # A partition not yet fetched has no position (OFFSET_INVALID): only empty ones are
        # done. The last records may be markers a consumer skips: its position says where it is.
        while any(
            tp.offset < ends[tp.partition] and ends[tp.partition] > 0
            for tp in consumer.position(consumer.assignment())
        ):
            assert time.monotonic() < deadline, f"not at {ends} in time"
            message = consumer.poll(0.2)
            if message is None:
                continue
            assert message.error() is None, message.error()
            seen.append((message.partition(), message.offset(), message.key(), message.value()))
        return [(key, value) for _, _, key, value in sorted(seen)]
    finally:
        consumer.close()


def read_values(broker: BrokerProcess, topic: str, isolation: str) -> list[str]:
    """Every value read_records reads, decoded."""
    return [value.decode() for _, value in read_records(broker, topic, isolation)]


def test_commit_and_abort(broker: BrokerProcess, topic: str) -> None:
    p = producer(broker, f"txn-{uuid.uuid4().hex[:8]}")
    for values, commit in ((["c1", "c2"], True), (["a1", "a2"], False), (["c3"], True)):
        p.begin_transaction()
        for i, value in enumerate(values):
            p.produce(topic, value=value.encode(), partition=i % PARTITIONS)
        if commit:
            p.commit_transaction(TIMEOUT)
        else:
            p.flush(TIMEOUT)  # the aborted records are in the log, not just in the client
            p.abort_transaction(TIMEOUT)

    assert read_values(broker, topic, "read_committed") == ["c1", "c3", "c2"]
    assert read_values(broker, topic, "read_uncommitted") == ["c1", "a1", "c3", "c2", "a2"]


def test_offsets_become_visible_on_commit_only(broker: BrokerProcess, topic: str) -> None:
    group = f"txn-group-{uuid.uuid4().hex[:8]}"
    member = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        p = producer(broker, f"txn-{uuid.uuid4().hex[:8]}")
        p.begin_transaction()
        p.produce(topic, value=b"x", partition=0)
        offsets = [TopicPartition(topic, 0, 5), TopicPartition(topic, 1, 7)]
        p.send_offsets_to_transaction(offsets, member.consumer_group_metadata(), TIMEOUT)
        assert group_offsets(broker, group) == {}
        p.commit_transaction(TIMEOUT)
        wait_for_offsets(broker, group, {0: 5, 1: 7})

        p.begin_transaction()
        offsets = [TopicPartition(topic, 0, 9)]
        p.send_offsets_to_transaction(offsets, member.consumer_group_metadata(), TIMEOUT)
        p.abort_transaction(TIMEOUT)
        assert group_offsets(broker, group) == {0: 5, 1: 7}
    finally:
        member.close()


def test_a_second_producer_fences_the_first(broker: BrokerProcess, topic: str) -> None:
    transactional_id = f"txn-{uuid.uuid4().hex[:8]}"
    first = producer(broker, transactional_id)
    first.begin_transaction()
    first.produce(topic, value=b"first-open", partition=0)
    first.flush(TIMEOUT)

    second = producer(broker, transactional_id)
    first.produce(topic, value=b"first-after-fence", partition=0)
    # The refused Produce surfaces at the flush (a fatal error) or at the commit.
    with pytest.raises(KafkaException) as raised:
        first.flush(TIMEOUT)
        first.commit_transaction(TIMEOUT)
    error = raised.value.args[0]
    if not error.fatal():
        # librdkafka takes a fenced Produce as abortable; the coordinator's answer to the
        # abort (PRODUCER_FENCED) is fatal.
        assert error.txn_requires_abort(), error
        with pytest.raises(KafkaException) as raised:
            first.abort_transaction(TIMEOUT)
        error = raised.value.args[0]
    # The caught exception's traceback holds this frame, so its producers would outlive the
    # test (and go on reconnecting to a stopped broker) until a garbage collection.
    del raised
    assert error.fatal(), error
    assert error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED), error

    second.begin_transaction()
    second.produce(topic, value=b"second", partition=1)
    second.commit_transaction(TIMEOUT)
    assert read_values(broker, topic, "read_committed") == ["second"]
    assert "first-after-fence" not in read_values(broker, topic, "read_uncommitted")
