"""kafka-python (pure Python client): admin, produce, consume, offsets by time."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from compat_tests.broker import BrokerProcess
from compat_tests.matrix import compat
from compat_tests.records import (
    CODECS,
    Rec,
    assert_round_trip,
    offset_for_time,
    probe_times,
    sample_records,
)

pytestmark = compat("kafka-python", "produce-consume")

PARTITIONS = 2
PER_PARTITION = 30


def consume(broker: BrokerProcess, topic: str, partitions: int, count: int) -> list[Rec]:
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        out: list[Rec] = []
        deadline = time.monotonic() + 60
        while len(out) < count and time.monotonic() < deadline:
            for batch in c.poll(timeout_ms=500).values():
                for m in batch:
                    assert m.timestamp_type == 0  # CreateTime
                    out.append(
                        Rec(m.partition, m.key, m.value, tuple(m.headers), m.timestamp, m.offset)
                    )
        return out
    finally:
        c.close()


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip(broker: BrokerProcess, new_topic: Callable[[str], str], codec: str) -> None:
    topic = new_topic(f"kafka-python-{codec}")
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics(
            [
                NewTopic(
                    topic,
                    num_partitions=PARTITIONS,
                    replication_factor=broker.replication_factor,
                )
            ]
        )

        # kafka-python rejects null header values and records with neither key nor value.
        sent = sample_records(
            PARTITIONS, PER_PARTITION, null_header_values=False, keyless_tombstones=False
        )
        producer = KafkaProducer(
            bootstrap_servers=broker.bootstrap,
            acks="all",
            linger_ms=5,
            compression_type=None if codec == "none" else codec,
        )
        futures = [
            producer.send(
                topic,
                value=r.value,
                key=r.key,
                headers=list(r.headers),
                partition=r.partition,
                timestamp_ms=r.timestamp,
            )
            for r in sent
        ]
        producer.flush(30)
        acked = [f.get(timeout=30) for f in futures]
        producer.close()
        assert [(m.partition, m.timestamp) for m in acked] == [
            (r.partition, r.timestamp) for r in sent
        ]

        got = consume(broker, topic, PARTITIONS, len(sent))
        assert_round_trip(sent, got)

        c = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
        try:
            tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
            assert c.beginning_offsets(tps) == {tp: 0 for tp in tps}
            assert c.end_offsets(tps) == {tp: PER_PARTITION for tp in tps}
            for ts in probe_times(sent):
                for tp, found in c.offsets_for_times({tp: ts for tp in tps}).items():
                    offset = None if found is None else found.offset
                    assert offset == offset_for_time(sent, tp.partition, ts), (tp, ts)
        finally:
            c.close()

        admin.delete_topics([topic])
        deadline = time.monotonic() + 30
        while topic in admin.list_topics():
            assert time.monotonic() < deadline, f"{topic} still listed after deletion"
            time.sleep(0.1)
    finally:
        admin.close()
