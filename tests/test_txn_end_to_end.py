"""Transactions end to end on one real broker with confluent-kafka's transactional
producer: commit and abort as a read_committed and a read_uncommitted consumer see them,
send_offsets_to_transaction (offsets visible once committed), fencing by a second producer
of the same transactional.id, and a kill -9 of the broker with transactions in each state,
all completing after the restart."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.broker import BrokerProcess
from compat_tests.process_pool import ProcessPool

OVERRIDES = {
    "transaction.state.log.num.partitions": "2",
    "offsets.topic.num.partitions": "2",
}


@pytest.fixture(scope="module")
def broker(process_pool: ProcessPool) -> BrokerProcess:
    return process_pool.broker(OVERRIDES)


def new_topic(broker: BrokerProcess, partitions: int = 1) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    broker.wait_for_topic(name, partitions)
    return name


def producer(broker: BrokerProcess, txn_id: str, **config: Any) -> Producer:
    p = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "transactional.id": txn_id,
            "linger.ms": 0,
            **config,
        }
    )
    p.init_transactions(30)
    return p


def consume_all(bootstrap: str, topic: str, isolation: str, partitions: int = 1) -> list:
    """Every record of the topic up to the end the consumer sees (the LSO under
    read_committed), as (partition, value)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "isolation.level": isolation,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen, at_end = [], set()
    deadline = time.monotonic() + 30
    try:
        while len(at_end) < partitions and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                at_end.add(m.partition())
                continue
            at_end.discard(m.partition())
            seen.append((m.partition(), m.value()))
    finally:
        c.close()
    assert len(at_end) == partitions, "the consumer did not reach the end"
    return seen


def test_commit_and_abort_as_consumers_see_them(broker: BrokerProcess) -> None:
    topic = new_topic(broker)
    p = producer(broker, f"e2e-{topic}")
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, f"committed-{i}".encode())
    p.commit_transaction(30)
    p.begin_transaction()
    p.produce(topic, b"aborted")
    p.flush(30)
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce(topic, b"last")
    p.commit_transaction(30)
    committed = [v for _, v in consume_all(broker.bootstrap, topic, "read_committed")]
    assert committed == [b"committed-0", b"committed-1", b"committed-2", b"last"]
    uncommitted = [v for _, v in consume_all(broker.bootstrap, topic, "read_uncommitted")]
    assert uncommitted == [b"committed-0", b"committed-1", b"committed-2", b"aborted", b"last"]


def committed_offset(broker: BrokerProcess, group: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        (tp,) = c.committed([TopicPartition(topic, 0)], timeout=30)
        return tp.offset
    finally:
        c.close()


def test_offsets_sent_to_a_transaction_apply_on_commit_only(broker: BrokerProcess) -> None:
    topic = new_topic(broker)
    group = f"copier-{topic}"
    p = producer(broker, f"offsets-{topic}")
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        metadata = c.consumer_group_metadata()
        for offset, commit in ((5, True), (9, False), (12, True), (13, True)):
            p.begin_transaction()
            p.produce(topic, str(offset).encode())
            p.send_offsets_to_transaction([TopicPartition(topic, 0, offset)], metadata, 30)
            if commit:
                p.commit_transaction(30)
            else:
                p.abort_transaction(30)
            expected = offset if commit else 5
            assert committed_offset(broker, group, topic) == expected
    finally:
        c.close()
    assert [v for _, v in consume_all(broker.bootstrap, topic, "read_committed")] == [
        b"5",
        b"12",
        b"13",
    ]


def test_a_second_producer_fences_the_first(broker: BrokerProcess) -> None:
    topic = new_topic(broker)
    txn_id = f"fence-{topic}"
    first = producer(broker, txn_id)
    first.begin_transaction()
    first.produce(topic, b"zombie")
    first.flush(30)
    second = producer(broker, txn_id)  # aborts the first's transaction, epoch bumped
    second.begin_transaction()
    second.produce(topic, b"winner")
    second.commit_transaction(30)
    with pytest.raises(KafkaException):
        first.produce(topic, b"zombie-2")
        first.commit_transaction(10)
    assert [v for _, v in consume_all(broker.bootstrap, topic, "read_committed")] == [b"winner"]


def test_transactions_in_each_state_complete_after_a_kill(broker: BrokerProcess) -> None:
    """Ongoing (left open), committed and aborted transactions, then kill -9: after the
    restart the open one is aborted (fenced by a new producer), the others are as they
    were, and new transactions commit."""
    topic = new_topic(broker, partitions=2)
    committer = producer(broker, f"kill-commit-{topic}")
    committer.begin_transaction()
    committer.produce(topic, b"committed", partition=0)
    committer.commit_transaction(30)
    aborter = producer(broker, f"kill-abort-{topic}")
    aborter.begin_transaction()
    aborter.produce(topic, b"aborted", partition=1)
    aborter.flush(30)
    aborter.abort_transaction(30)
    open_id = f"kill-open-{topic}"
    left_open = producer(broker, open_id)
    left_open.begin_transaction()
    left_open.produce(topic, b"open", partition=0)
    left_open.flush(30)
    broker.kill()
    broker.start()
    # The open transaction blocks read_committed until a new producer of its id fences it.
    successor = producer(broker, open_id)
    successor.begin_transaction()
    successor.produce(topic, b"after", partition=1)
    successor.commit_transaction(30)
    committer = producer(broker, f"kill-commit-{topic}")
    committer.begin_transaction()
    committer.produce(topic, b"committed-again", partition=0)
    committer.commit_transaction(30)
    seen = sorted(consume_all(broker.bootstrap, topic, "read_committed", partitions=2))
    assert seen == [(0, b"committed"), (0, b"committed-again"), (1, b"after")]
