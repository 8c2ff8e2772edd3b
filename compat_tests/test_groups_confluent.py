"""Consumer groups with confluent-kafka (librdkafka), including a 1,000,000-record loop."""

from __future__ import annotations

import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.broker import BrokerProcess
from compat_tests.group_checks import (
    SESSION_OVERRIDES,
    ConfluentMember,
    end_offsets,
    poll_all,
    wait_until,
)
from compat_tests.matrix import compat

pytestmark = compat("confluent", "groups")
BROKER_OVERRIDES = SESSION_OVERRIDES
PARTITIONS = 6
TIMEOUT = 60
FAST = {"session.timeout.ms": 2000, "heartbeat.interval.ms": 300}
CLOSE_TIMEOUT = 60

# A member in its own process, so that it can be killed with SIGKILL.
KILLABLE = """
import sys
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[3],
              "session.timeout.ms": 2000, "heartbeat.interval.ms": 300})
c.subscribe([sys.argv[2]])
while True:
    c.poll(0.2)
"""


class Member(ConfluentMember):
    defaults = FAST


@pytest.fixture
def topic(broker: BrokerProcess, new_topic: Callable[[str], str]) -> str:
    name = new_topic("confluent-group")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, broker.replication_factor)])[name].result(30)
    return name


@pytest.fixture
def members() -> Iterator[list[Member]]:
    started: list[Member] = []
    yield started
    hung = [m for m in started if not m.close(CLOSE_TIMEOUT)]
    assert not hung, f"{len(hung)} consumer(s) still closing after {CLOSE_TIMEOUT} s"


def wait_balanced(group: list[Member], what: str, expected: int = PARTITIONS) -> list[set[int]]:
    def check() -> bool:
        owned = [m.owned() for m in group]
        return (
            sum(map(len, owned)) == expected
            and len(set().union(*owned)) == expected
            and max(map(len, owned)) - min(map(len, owned)) <= 1
        )

    wait_until(check, TIMEOUT, what, lambda: poll_all(group))
    return [m.owned() for m in group]


def test_join_leave_and_kill(broker: BrokerProcess, topic: str, members: list[Member]) -> None:
    group = f"{topic}-g"
    members += [Member(broker, topic, group) for _ in range(3)]
    assert [len(s) for s in wait_balanced(members, "3 members")] == [2, 2, 2]
    members.append(Member(broker, topic, group))
    assert sorted(map(len, wait_balanced(members, "4 members"))) == [1, 1, 2, 2]
    members.pop(0).consumer.close()
    assert [len(s) for s in wait_balanced(members, "a member left")] == [2, 2, 2]

    killable = subprocess.Popen([sys.executable, "-c", KILLABLE, broker.bootstrap, topic, group])
    try:
        # Four members: the process owns one or two partitions, the others the rest.
        def joined() -> bool:
            owned = [m.owned() for m in members]
            total = sum(map(len, owned))
            return (
                total in (4, 5)
                and len(set().union(*owned)) == total
                and all(1 <= len(o) <= 2 for o in owned)
            )

        wait_until(joined, TIMEOUT, "the process member to join", lambda: poll_all(members))
    finally:
        killable.kill()
        killable.wait()
    assert [len(s) for s in wait_balanced(members, "the killed member to expire")] == [2, 2, 2]


def test_cooperative_sticky(broker: BrokerProcess, topic: str, members: list[Member]) -> None:
    group = f"{topic}-coop"
    coop = {"partition.assignment.strategy": "cooperative-sticky"}
    members += [Member(broker, topic, group, **coop) for _ in range(3)]
    before = wait_balanced(members, "3 cooperative members")
    members.append(Member(broker, topic, group, **coop))
    after = wait_balanced(members, "the cooperative rebalance")
    for old, new in zip(before, after[:3], strict=True):
        assert new <= old
    assert set().union(*before) - set().union(*after[:3]) == after[3]
    assert len(after[3]) == 1


def test_static_member_restart(broker: BrokerProcess, topic: str, members: list[Member]) -> None:
    group = f"{topic}-static"
    static = {"session.timeout.ms": 20000}
    members += [
        Member(broker, topic, group, **{**static, "group.instance.id": f"i{i}"}) for i in range(3)
    ]
    before = wait_balanced(members, "3 static members")
    quiet = [m.callbacks for m in members[1:]]
    members.pop(0).consumer.close()
    back = Member(broker, topic, group, **{**static, "group.instance.id": "i0"})
    members.insert(0, back)
    wait_until(
        lambda: back.owned() == before[0],
        TIMEOUT,
        "i0's partitions back",
        lambda: poll_all(members),
    )
    assert [m.callbacks for m in members[1:]] == quiet


def test_commits_survive_kill9_and_resume(broker: BrokerProcess, topic: str) -> None:
    group = f"{topic}-resume"
    produce(broker, topic, 100)
    ends = end_offsets(broker.bootstrap, topic, PARTITIONS)
    consumer = Member(broker, topic, group).consumer
    seen = 0
    while seen < 100 * PARTITIONS:
        seen += len([m for m in consumer.consume(1000, 1.0) if not m.error()])
    consumer.commit(asynchronous=False)
    consumer.close()

    broker.kill()
    broker.start()
    produce(broker, topic, 5)
    consumer = Member(broker, topic, group).consumer
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        assert {tp.partition: tp.offset for tp in consumer.committed(tps, 30)} == ends
        first: dict[int, int] = {}
        wait_until(
            lambda: len(first) == PARTITIONS,
            TIMEOUT,
            "records after the restart",
            lambda: [
                first.setdefault(m.partition(), m.offset())
                for m in consumer.consume(100, 0.2)
                if not m.error()
            ],
        )
        assert first == ends
    finally:
        consumer.close()


def produce(broker: BrokerProcess, topic: str, per_partition: int) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(per_partition * PARTITIONS):
        p.produce(topic, b"%d" % i, partition=i % PARTITIONS)
    p.flush(30)


MILLION = 1_000_000


def test_million_records_with_commits(
    broker: BrokerProcess, topic: str, members: list[Member]
) -> None:
    """Three members consume-and-commit 1,000,000 records: each one arrives, none lost."""
    p = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "linger.ms": 50,
            "batch.size": 1 << 20,
            "queue.buffering.max.messages": 2 * MILLION,
            "compression.type": "lz4",
        }
    )
    for i in range(MILLION):
        p.produce(topic, b"%d" % i, partition=i % PARTITIONS)
        if i % 100_000 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    expected_crc = 0
    for i in range(MILLION):
        expected_crc ^= zlib.crc32(b"%d" % i)

    group = f"{topic}-million"
    members += [Member(broker, topic, group, **{"fetch.max.bytes": 1 << 24}) for _ in range(3)]
    seen = bytearray(MILLION)
    crc = 0
    deadline = time.monotonic() + 120
    while seen.count(0):
        assert time.monotonic() < deadline, f"{seen.count(0)} records never arrived"
        for m in members:
            batch = [msg for msg in m.consumer.consume(20_000, 0.05) if not msg.error()]
            for msg in batch:
                value = msg.value()
                index = int(value)
                if not seen[index]:
                    seen[index] = 1
                    crc ^= zlib.crc32(value)
            if batch:
                m.consumer.commit(asynchronous=False)
    assert crc == expected_crc
    committed = members[0].consumer.committed(
        [TopicPartition(topic, i) for i in range(PARTITIONS)], 30
    )
    assert sum(tp.offset for tp in committed) == MILLION
