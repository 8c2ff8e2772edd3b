"""aiokafka (asyncio client): admin, produce, consume, offsets by time."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

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

pytestmark = compat("aiokafka", "produce-consume")

PARTITIONS = 2
PER_PARTITION = 30


async def produce(bootstrap: str, topic: str, sent: list[Rec], codec: str) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        linger_ms=5,
        compression_type=None if codec == "none" else codec,
    )
    await producer.start()
    try:
        futures = [
            await producer.send(
                topic,
                value=r.value,
                key=r.key,
                partition=r.partition,
                timestamp_ms=r.timestamp,
                headers=list(r.headers),
            )
            for r in sent
        ]
        acked = await asyncio.gather(*futures)
    finally:
        await producer.stop()
    # aiokafka's metadata carries a batch-level timestamp, so check placement only.
    next_offset = dict.fromkeys(range(PARTITIONS), 0)
    for m, r in zip(acked, sent, strict=True):
        assert (m.partition, m.offset) == (r.partition, next_offset[r.partition])
        next_offset[r.partition] += 1


async def consume_and_list(bootstrap: str, topic: str, sent: list[Rec]) -> None:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        got: list[Rec] = []
        timestamp_types: set[int] = set()

        async def fill() -> None:
            while len(got) < len(sent):
                for batch in (await consumer.getmany(timeout_ms=500)).values():
                    for m in batch:
                        timestamp_types.add(m.timestamp_type)
                        got.append(
                            Rec(
                                m.partition, m.key, m.value, tuple(m.headers), m.timestamp, m.offset
                            )
                        )

        await asyncio.wait_for(fill(), 60)
        assert timestamp_types == {0}  # CreateTime
        assert_round_trip(sent, got)

        assert await consumer.beginning_offsets(tps) == {tp: 0 for tp in tps}
        assert await consumer.end_offsets(tps) == {tp: PER_PARTITION for tp in tps}
        for ts in probe_times(sent):
            answers = await consumer.offsets_for_times({tp: ts for tp in tps})
            for tp, found in answers.items():
                offset = None if found is None else found.offset
                assert offset == offset_for_time(sent, tp.partition, ts), (tp, ts)
    finally:
        await consumer.stop()


async def scenario(bootstrap: str, topic: str, codec: str, replication_factor: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(topic, num_partitions=PARTITIONS, replication_factor=replication_factor)]
        )
        # aiokafka refuses records with neither key nor value.
        sent = sample_records(PARTITIONS, PER_PARTITION, keyless_tombstones=False)
        await produce(bootstrap, topic, sent, codec)
        await consume_and_list(bootstrap, topic, sent)
        await admin.delete_topics([topic])

        async def gone() -> None:
            while topic in await admin.list_topics():
                await asyncio.sleep(0.1)

        await asyncio.wait_for(gone(), 30)
    finally:
        await admin.close()


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip(broker: BrokerProcess, new_topic: Callable[[str], str], codec: str) -> None:
    topic = new_topic(f"aiokafka-{codec}")
    asyncio.run(scenario(broker.bootstrap, topic, codec, broker.replication_factor))
