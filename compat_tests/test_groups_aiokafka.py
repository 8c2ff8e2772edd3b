"""Consumer groups with aiokafka: membership changes, static members, commits and resume."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener

from compat_tests.broker import BrokerProcess
from compat_tests.group_checks import SESSION_OVERRIDES, balanced, create_topic, end_offsets
from compat_tests.matrix import compat

pytestmark = compat("aiokafka", "groups")

BROKER_OVERRIDES = SESSION_OVERRIDES
PARTITIONS = 6
TIMEOUT = 60


class Counting(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.calls = 0

    async def on_partitions_revoked(self, revoked: object) -> None:
        self.calls += 1

    async def on_partitions_assigned(self, assigned: object) -> None:
        self.calls += 1


@pytest.fixture
def topic(broker: BrokerProcess, new_topic: Callable[[str], str]) -> str:
    return create_topic(broker, new_topic("aiokafka-group"), PARTITIONS)


async def member(
    broker: BrokerProcess,
    topic: str,
    group: str,
    listener: Counting | None = None,
    **configs: object,
) -> AIOKafkaConsumer:
    settings: dict[str, object] = {
        "session_timeout_ms": 3000,
        "heartbeat_interval_ms": 300,
        **configs,
    }
    c = AIOKafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        **settings,
    )
    await c.start()
    c.subscribe([topic], listener=listener or Counting())
    return c


async def wait_balanced(group: list[AIOKafkaConsumer], what: str) -> list[set[int]]:
    deadline = time.monotonic() + TIMEOUT
    while True:
        owned = [{tp.partition for tp in c.assignment()} for c in group]
        if balanced(owned, PARTITIONS):
            return owned
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {owned}"
        await asyncio.gather(*(c.getmany(timeout_ms=50) for c in group))


def test_members_join_leave_static(broker: BrokerProcess, topic: str) -> None:
    async def scenario() -> None:
        group = f"{topic}-g"
        members = [await member(broker, topic, group) for _ in range(3)]
        try:
            assert [len(s) for s in await wait_balanced(members, "3 members")] == [2, 2, 2]
            members.append(await member(broker, topic, group))
            assert sorted(map(len, await wait_balanced(members, "4"))) == [1, 1, 2, 2]
            await members.pop(0).stop()
            assert [len(s) for s in await wait_balanced(members, "leave")] == [2, 2, 2]
        finally:
            for c in members:
                await c.stop()

        group = f"{topic}-static"
        listeners = [Counting() for _ in range(3)]
        members = [
            await member(
                broker,
                topic,
                group,
                listeners[i],
                group_instance_id=f"s{i}",
                session_timeout_ms=20000,
            )
            for i in range(3)
        ]
        try:
            before = await wait_balanced(members, "3 static members")
            quiet = [listeners[1].calls, listeners[2].calls]
            await members[0].stop()  # a static member does not leave
            members[0] = await member(
                broker, topic, group, group_instance_id="s0", session_timeout_ms=20000
            )
            after = await wait_balanced(members, "the static member back")
            assert after == before
            assert [listeners[1].calls, listeners[2].calls] == quiet
        finally:
            for c in members:
                await c.stop()

    asyncio.run(scenario())


def test_commit_then_resume_after_kill9(broker: BrokerProcess, topic: str) -> None:
    group = f"{topic}-resume"

    async def produce(per_partition: int) -> None:
        # acks=all (aiokafka's default is 1): acknowledged records are then below the high
        # watermark, which end offsets report; with replicas, acks=1 answers before the
        # followers have them, as Kafka does.
        p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
        await p.start()
        try:
            for i in range(per_partition * PARTITIONS):
                await p.send(topic, b"%d" % i, partition=i % PARTITIONS)
            await p.flush()
        finally:
            await p.stop()

    async def consume_all(count: int) -> None:
        c = await member(broker, topic, group)
        try:
            seen = 0
            deadline = time.monotonic() + TIMEOUT
            while seen < count:
                assert time.monotonic() < deadline
                seen += sum(map(len, (await c.getmany(timeout_ms=100)).values()))
            await c.commit()
        finally:
            await c.stop()

    async def first_offsets() -> dict[int, int]:
        c = await member(broker, topic, group)
        first: dict[int, int] = {}
        try:
            deadline = time.monotonic() + TIMEOUT
            while len(first) < PARTITIONS:
                assert time.monotonic() < deadline
                for tp, records in (await c.getmany(timeout_ms=100)).items():
                    first.setdefault(tp.partition, records[0].offset)
        finally:
            await c.stop()
        return first

    asyncio.run(produce(20))
    ends = end_offsets(broker.bootstrap, topic, PARTITIONS)
    asyncio.run(consume_all(20 * PARTITIONS))
    broker.kill()
    broker.start()
    asyncio.run(produce(2))
    assert asyncio.run(first_offsets()) == ends
