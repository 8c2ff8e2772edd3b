"""Consumer groups with kafka-python: membership, commits across a crash, the admin API."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata

from compat_tests.broker import BrokerProcess
from compat_tests.group_checks import (
    SESSION_OVERRIDES,
    balanced,
    committed,
    create_topic,
    end_offsets,
    wait_until,
)
from compat_tests.matrix import compat

pytestmark = compat("kafka-python", "groups")

BROKER_OVERRIDES = SESSION_OVERRIDES
PARTITIONS = 6
TIMEOUT = 60
# kafka-python 3.0.12 never resumes a rejoin that a metadata change started and the poll's
# remaining time did not cover: once the leader's assignment catches up with the metadata
# it no longer "needs" the join it left in flight, so it stops heartbeating and is timed
# out of the group. A fresh consumer's first join precedes its topic metadata and the
# rejoin follows within retry.backoff.ms (100 ms); polls much longer than that start it
# with time to spare, as applications' polls do.
POLL_MS = 1000


def consumer(broker: BrokerProcess, topic: str, group: str, **configs: object) -> KafkaConsumer:
    return KafkaConsumer(
        topic,
        bootstrap_servers=broker.bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=3000,
        heartbeat_interval_ms=300,
        **configs,
    )


@pytest.fixture
def topic(broker: BrokerProcess, new_topic: Callable[[str], str]) -> str:
    return create_topic(broker, new_topic("kafka-python-group"), PARTITIONS)


@pytest.fixture
def admin(broker: BrokerProcess) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    yield client
    client.close()


class Member:
    """A consumer polling in its own thread, as applications run them."""

    def __init__(self, broker: BrokerProcess, topic: str, group: str) -> None:
        self.consumer = consumer(broker, topic, group)
        self.owned: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.consumer.poll(timeout_ms=POLL_MS)
            self.owned = {tp.partition for tp in self.consumer.assignment()}
        self.consumer.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(TIMEOUT)


@pytest.fixture
def members() -> Iterator[list[Member]]:
    started: list[Member] = []
    yield started
    for m in started:
        m.close()


def wait_balanced(group: list[Member], what: str) -> list[set[int]]:
    wait_until(lambda: balanced([m.owned for m in group], PARTITIONS), TIMEOUT, what)
    return [m.owned for m in group]


def produce(broker: BrokerProcess, topic: str, per_partition: int) -> None:
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5)
    for i in range(per_partition * PARTITIONS):
        p.send(topic, value=b"%d" % i, partition=i % PARTITIONS)
    p.flush()
    p.close()


def test_members_join_and_leave(
    broker: BrokerProcess, topic: str, members: list[Member], admin: KafkaAdminClient
) -> None:
    group = f"{topic}-g"
    members += [Member(broker, topic, group) for _ in range(3)]
    assert [len(s) for s in wait_balanced(members, "3 members")] == [2, 2, 2]

    described = admin.describe_groups([group])[group]
    assert described["group_state"] == "Stable"
    assert described["protocol_type"] == "consumer"
    assert described["protocol_data"] == "range"
    assert len(described["members"]) == 3
    assert {m["client_host"] for m in described["members"]} == {"/127.0.0.1"}
    listed = admin.list_groups(states_filter=["Stable"])
    assert {
        "group_id": group,
        "protocol_type": "consumer",
        "group_state": "Stable",
        "group_type": "classic",
    } in listed

    members.append(Member(broker, topic, group))
    assert sorted(map(len, wait_balanced(members, "4 members"))) == [1, 1, 2, 2]
    members.pop(0).close()
    assert [len(s) for s in wait_balanced(members, "after a leave")] == [2, 2, 2]


def test_commits_survive_kill9(broker: BrokerProcess, topic: str, admin: KafkaAdminClient) -> None:
    group = f"{topic}-resume"
    produce(broker, topic, 40)
    ends = end_offsets(broker.bootstrap, topic, PARTITIONS)
    c = consumer(broker, topic, group)
    seen = [0]

    def consume() -> None:
        seen[0] += sum(map(len, c.poll(timeout_ms=POLL_MS).values()))

    wait_until(lambda: seen[0] == 40 * PARTITIONS, TIMEOUT, "all records", consume)
    c.commit()
    c.close()
    assert committed(admin, group) == ends

    broker.kill()
    broker.start()
    produce(broker, topic, 3)
    c = consumer(broker, topic, group)
    try:
        first: dict[int, int] = {}

        def step() -> None:
            for records in c.poll(timeout_ms=POLL_MS).values():
                first.setdefault(records[0].partition, records[0].offset)

        wait_until(lambda: len(first) == PARTITIONS, TIMEOUT, "records after restart", step)
        assert first == ends
    finally:
        c.close()


def test_group_admin_delete(broker: BrokerProcess, topic: str, admin: KafkaAdminClient) -> None:
    group = f"{topic}-admin"
    tp = TopicPartition(topic, 3)
    admin.alter_group_offsets(group, {tp: OffsetAndMetadata(7, "meta", -1)})
    assert admin.list_group_offsets(group)[group][tp].offset == 7
    assert admin.describe_groups([group])[group]["group_state"] == "Empty"
    assert admin.delete_groups([group]) == {group: "OK"}
    assert admin.list_group_offsets(group)[group] == {}
    assert group not in {g["group_id"] for g in admin.list_groups()}
