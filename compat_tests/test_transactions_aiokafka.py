"""Transactions with aiokafka: its transactional producer commits (the transaction context)
and aborts, offsets sent to a transaction reach the group on commit only, and its
read_committed consumer skips what was aborted."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from compat_tests.broker import BrokerProcess
from compat_tests.group_checks import create_topic
from compat_tests.matrix import compat
from compat_tests.txn_checks import TXN_OVERRIDES, group_offsets, wait_for_offsets

pytestmark = compat("aiokafka", "transactions")

BROKER_OVERRIDES = TXN_OVERRIDES
PARTITIONS = 2
TIMEOUT = 60.0


@pytest.fixture
def topic(broker: BrokerProcess, new_topic: Callable[[str], str]) -> str:
    name = create_topic(broker, new_topic("aiokafka-txn"), PARTITIONS)
    broker.wait_for_topic(name, PARTITIONS)
    return name


async def producer(broker: BrokerProcess) -> AIOKafkaProducer:
    p = AIOKafkaProducer(
        bootstrap_servers=broker.bootstrap, transactional_id=f"txn-{uuid.uuid4().hex[:8]}"
    )
    await p.start()  # initialises the transactional producer id
    return p


async def read_values(broker: BrokerProcess, topic: str, isolation: str) -> list[str]:
    """Every value a consumer of that isolation level reads up to the end offsets (the LSO
    under read_committed), in partition then offset order."""
    consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, isolation_level=isolation)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        await consumer.seek_to_beginning()
        ends = await consumer.end_offsets(tps)
        seen: list[tuple[int, int, str]] = []
        async with asyncio.timeout(TIMEOUT):
            while any([await consumer.position(tp) < ends[tp] for tp in tps]):
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    seen += [(r.partition, r.offset, r.value.decode()) for r in records]
        return [value for _, _, value in sorted(seen)]
    finally:
        await consumer.stop()


def test_commit_and_abort(broker: BrokerProcess, topic: str) -> None:
    async def run() -> None:
        p = await producer(broker)
        try:
            async with p.transaction():
                await p.send_and_wait(topic, b"c1", partition=0)
                await p.send_and_wait(topic, b"c2", partition=1)
            await p.begin_transaction()
            await p.send_and_wait(topic, b"a1", partition=0)
            await p.send_and_wait(topic, b"a2", partition=1)
            await p.abort_transaction()
            async with p.transaction():
                await p.send_and_wait(topic, b"c3", partition=0)
        finally:
            await p.stop()
        assert await read_values(broker, topic, "read_committed") == ["c1", "c3", "c2"]
        uncommitted = await read_values(broker, topic, "read_uncommitted")
        assert uncommitted == ["c1", "a1", "c3", "c2", "a2"]

    asyncio.run(run())


def test_offsets_become_visible_on_commit_only(broker: BrokerProcess, topic: str) -> None:
    group = f"txn-group-{uuid.uuid4().hex[:8]}"

    async def run() -> None:
        p = await producer(broker)
        try:
            await p.begin_transaction()
            await p.send_and_wait(topic, b"x", partition=0)
            await p.send_offsets_to_transaction({TopicPartition(topic, 0): 5}, group)
            assert group_offsets(broker, group) == {}
            await p.commit_transaction()
            wait_for_offsets(broker, group, {0: 5})

            await p.begin_transaction()
            await p.send_offsets_to_transaction({TopicPartition(topic, 0): 9}, group)
            await p.abort_transaction()
            assert group_offsets(broker, group) == {0: 5}
        finally:
            await p.stop()

    asyncio.run(run())
