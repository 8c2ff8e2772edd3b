"""kill -9 of the broker in the middle of an acks=all stream, then restart on the same data:
every acknowledged record is still there, at the offset it was acknowledged with.

With an idempotent producer the broker must also rebuild the producer's sequence state
from its log, so the producer carries on after the restart: everything gets delivered,
exactly once."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)

from compat_tests.broker import BrokerProcess
from compat_tests.confluent_admin import create_topic
from compat_tests.matrix import compat

pytestmark = compat("confluent", "produce-consume")

TOTAL = 300
KILL_AFTER_ACKS = 100


def wait_until(condition: Callable[[], bool], poll: Callable[[], object], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        poll()


@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
def test_acked_records_survive_kill_9(
    broker: BrokerProcess, new_topic: Callable[[str], str], idempotent: bool
) -> None:
    topic = new_topic("crash")
    create_topic(broker, topic, 1)

    acked: list[tuple[int, bytes]] = []  # (offset, value) in delivery order
    failed: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is None:
            acked.append((msg.offset(), msg.value()))
        else:
            failed.append(err)

    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "acks": "all",
            "linger.ms": 0,
            "message.timeout.ms": 60_000,
            "reconnect.backoff.max.ms": 200,
            "enable.idempotence": idempotent,
        }
    )

    def send(indexes: range) -> None:
        for i in indexes:
            value = f"v{i}".encode() * 20
            producer.produce(topic, value, f"k{i}".encode(), 0, on_delivery=on_delivery)
            producer.poll(0)

    send(range(TOTAL // 2))
    wait_until(lambda: len(acked) >= KILL_AFTER_ACKS, lambda: producer.poll(0.05), 30)
    acked_before_kill = len(acked)

    broker.kill()
    send(range(TOTAL // 2, TOTAL))
    broker.restart()
    assert producer.flush(60) == 0

    assert len(acked) + len(failed) == TOTAL
    assert len(acked) >= acked_before_kill >= KILL_AFTER_ACKS
    offsets = [offset for offset, _ in acked]
    assert len(set(offsets)) == len(offsets), "an offset was acknowledged twice"

    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        assert low == 0
        assert high > max(offsets)
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        stored: dict[int, bytes] = {}
        deadline = time.monotonic() + 60
        while len(stored) < high and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=500, timeout=0.5):
                assert msg.error() is None, msg.error()
                stored[msg.offset()] = msg.value()
    finally:
        consumer.close()

    assert sorted(stored) == list(range(high))
    for offset, value in acked:
        assert stored[offset] == value, f"acknowledged offset {offset} lost or changed"
    if idempotent:
        assert not failed
        assert sorted(stored.values()) == sorted(v for _, v in acked), "lost or duplicated"
