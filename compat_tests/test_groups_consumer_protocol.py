"""Consumer groups of the consumer protocol (KIP-848, ``group.protocol=consumer``) with the
Java client (kafka-clients 4.3) and confluent-kafka (librdkafka 2.16): members split a
topic, a leaving member's and a killed member's partitions move to the others (the latter
after the broker's ``group.consumer.session.timeout.ms``), a static member comes back to its
partitions without moving anyone else's, the ``range`` server assignor, committed offsets
outlive a broker's kill -9, a regex subscription the broker resolves picks up a topic
created later, partitions added while the members consume are assigned and read, and a
group migrates online from the classic protocol to the consumer protocol and back under
continuous production, losing no record and reading none again after its commit.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator
from itertools import accumulate

import pytest
from confluent_kafka import KafkaException
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from confluent_kafka.admin import AlterConfigOpType, ResourceType
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewPartitions
from kio.schema.consumer_group_describe.v1.response import DescribedGroup

from compat_tests.broker import BrokerProcess
from compat_tests.group_checks import (
    ConfluentMember,
    balanced,
    commit_everything,
    committed,
    create_topic,
    end_offsets,
    poll_all,
    wait_until,
)
from compat_tests.matrix import compat
from compat_tests.test_admin_configs import incremental
from compat_tests.test_groups_java import JavaMember, produce
from gregor.apis.context import build
from gregor.wire import versions as v
from gregor.wire.schema import request_type
from tests.kafka_wire import WireClient

SESSION_MS = 6000
BROKER_OVERRIDES = {
    "group.consumer.min.session.timeout.ms": "1000",
    "group.consumer.session.timeout.ms": str(SESSION_MS),
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.heartbeat.interval.ms": "300",
}
PARTITIONS = 6
TIMEOUT = 30
CONSUMER_PROTOCOL = {"group.protocol": "consumer"}

# A confluent-kafka member in its own process, so that it can be killed with SIGKILL.
KILLABLE = """
import sys
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[3],
              "group.protocol": "consumer"})
c.subscribe([sys.argv[2]])
while True:
    c.poll(0.2)
"""


def describe(broker: BrokerProcess, group: str) -> DescribedGroup:
    """The group as ConsumerGroupDescribe shows it, asked of its coordinator."""
    finder = WireClient(broker.port)
    try:
        found = finder.call(
            v.FIND_COORDINATOR, 0, build(request_type(v.FIND_COORDINATOR, 0), key=group)
        )
    finally:
        finder.close()
    client = WireClient(found.port)
    try:
        body = build(
            request_type(v.CONSUMER_GROUP_DESCRIBE, 1),
            group_ids=(group,),
            include_authorized_operations=False,
        )
        groups: tuple[DescribedGroup, ...] = client.call(v.CONSUMER_GROUP_DESCRIBE, 1, body).groups
    finally:
        client.close()
    (described,) = groups
    return described


def server_assignor(broker: BrokerProcess, group: str) -> str:
    """A consumer-protocol group's assignor."""
    described = describe(broker, group)
    assert described.error_code == 0, described
    name: str = described.assignor_name
    return name


@pytest.fixture
def topic(broker: BrokerProcess, new_topic: Callable[[str], str]) -> str:
    return create_topic(broker, new_topic("kip848"), PARTITIONS)


# -- Java --------------------------------------------------------------------------------------
@pytest.fixture
def java_members() -> Iterator[list[JavaMember]]:
    started: list[JavaMember] = []
    yield started
    for m in started:
        if m.proc.poll() is None:
            m.kill()


def java(
    members: list[JavaMember], broker: BrokerProcess, topic: str, group: str, **configs: str
) -> JavaMember:
    member = JavaMember(broker, topic, group, {**CONSUMER_PROTOCOL, **configs})
    members.append(member)
    return member


def java_balanced(group: list[JavaMember], what: str) -> list[set[int]]:
    wait_until(lambda: balanced([m.snapshot() for m in group], PARTITIONS), TIMEOUT, what)
    return [m.snapshot() for m in group]


@compat("java", "consumer-protocol")
def test_java_join_leave_and_kill(
    broker: BrokerProcess, topic: str, java_members: list[JavaMember]
) -> None:
    group = f"{topic}-g"
    trio = [java(java_members, broker, topic, group) for _ in range(3)]
    assert [len(s) for s in java_balanced(trio, "3 members with 2 partitions each")] == [2, 2, 2]
    trio[0].close()  # leaves with epoch -1
    assert sorted(len(s) for s in java_balanced(trio[1:], "a leave")) == [3, 3]
    fourth = java(java_members, broker, topic, group)
    java_balanced([trio[1], trio[2], fourth], "a new member")
    trio[1].kill()  # no leave: the session timeout fences it
    assert sorted(len(s) for s in java_balanced([trio[2], fourth], "the session timeout")) == [
        3,
        3,
    ]


@compat("java", "consumer-protocol")
def test_java_static_member_restarts_without_rebalance(
    broker: BrokerProcess, topic: str, java_members: list[JavaMember]
) -> None:
    group = f"{topic}-static"
    # The returning member has the session timeout to be back; a JVM starting on a loaded
    # machine took longer than the module's 6 s, so this group gets 30 s (KIP-848's config).
    incremental(
        broker,
        ResourceType.GROUP,
        group,
        [("consumer.session.timeout.ms", "30000", AlterConfigOpType.SET)],
    )
    trio = [
        java(java_members, broker, topic, group, **{"group.instance.id": f"instance-{i}"})
        for i in range(3)
    ]
    before = java_balanced(trio, "3 static members")
    quiet = [trio[1].event_count(), trio[2].event_count()]
    trio[0].close()  # leaves with epoch -2: its partitions wait for it
    back = java(java_members, broker, topic, group, **{"group.instance.id": "instance-0"})
    wait_until(lambda: back.snapshot() == before[0], TIMEOUT, "the old partitions back")
    assert [trio[1].snapshot(), trio[2].snapshot()] == before[1:]
    assert [trio[1].event_count(), trio[2].event_count()] == quiet  # no rebalance


@compat("java", "consumer-protocol")
def test_java_range_assignor(
    broker: BrokerProcess, topic: str, java_members: list[JavaMember]
) -> None:
    group = f"{topic}-range"
    pair = [
        java(java_members, broker, topic, group, **{"group.remote.assignor": "range"})
        for _ in range(2)
    ]
    owned = sorted(sorted(s) for s in java_balanced(pair, "2 members with range"))
    assert owned == [[0, 1, 2], [3, 4, 5]]
    assert server_assignor(broker, group) == "range"


@compat("java", "consumer-protocol")
def test_java_committed_offsets_survive_a_broker_kill9(
    broker: BrokerProcess, topic: str, java_members: list[JavaMember]
) -> None:
    group = f"{topic}-resume"
    produce(broker, topic, 20)
    ends = commit_everything(
        broker, topic, group, PARTITIONS, lambda: java(java_members, broker, topic, group), TIMEOUT
    )
    broker.kill()  # kill -9: the commits must have reached the log, not a clean shutdown
    broker.start()
    produce(broker, topic, 5)
    resumed = java(java_members, broker, topic, group)
    wait_until(lambda: len(resumed.first) == PARTITIONS, TIMEOUT, "records after the restart")
    assert resumed.first == ends  # exactly where the group left off


# -- confluent-kafka ---------------------------------------------------------------------------
class Member(ConfluentMember):
    defaults = CONSUMER_PROTOCOL


@pytest.fixture
def members() -> Iterator[list[Member]]:
    started: list[Member] = []
    yield started
    for m in started:
        m.consumer.close()


def confluent_balanced(group: list[Member], what: str) -> list[set[int]]:
    wait_until(
        lambda: balanced([m.owned() for m in group], PARTITIONS),
        TIMEOUT,
        what,
        lambda: poll_all(group),
    )
    return [m.owned() for m in group]


@compat("confluent", "consumer-protocol")
def test_confluent_join_leave_and_kill(
    broker: BrokerProcess, topic: str, members: list[Member]
) -> None:
    group = f"{topic}-g"
    members += [Member(broker, topic, group) for _ in range(3)]
    assert [len(s) for s in confluent_balanced(members, "3 members")] == [2, 2, 2]
    members.pop(0).consumer.close()
    assert [len(s) for s in confluent_balanced(members, "a leave")] == [3, 3]
    killable = subprocess.Popen([sys.executable, "-c", KILLABLE, broker.bootstrap, topic, group])
    try:
        wait_until(
            lambda: sum(len(m.owned()) for m in members) == 4,
            TIMEOUT,
            "the process member to get its partitions",
            lambda: poll_all(members),
        )
    finally:
        killable.kill()
        killable.wait()
    assert [len(s) for s in confluent_balanced(members, "the session timeout")] == [3, 3]


@compat("confluent", "consumer-protocol")
def test_confluent_static_member_restart_and_range(
    broker: BrokerProcess, topic: str, members: list[Member]
) -> None:
    group = f"{topic}-static"

    def static(i: int) -> Member:
        return Member(
            broker,
            topic,
            group,
            **{"group.instance.id": f"i-{i}", "group.remote.assignor": "range"},
        )

    members += [static(i) for i in range(2)]
    before = confluent_balanced(members, "2 static members")
    assert sorted(sorted(s) for s in before) == [[0, 1, 2], [3, 4, 5]]
    assert server_assignor(broker, group) == "range"
    quiet = members[1].callbacks
    members.pop(0).consumer.close()  # leaves with epoch -2
    members.insert(0, static(0))
    after = confluent_balanced(members, "the static member back")
    assert after == before
    assert members[1].callbacks == quiet


# -- regex subscriptions (resolved by the broker) ----------------------------------------------
def java_owned(member: JavaMember) -> set[tuple[str, int]]:
    """The (topic, partition)s the member owns, from its rebalance events."""
    owned: set[tuple[str, int]] = set()
    for event in list(member.events):
        pairs = set(zip(event.get("topics", ()), event.get("partitions", ()), strict=True))
        if event["event"] == "assigned":
            owned |= pairs
        elif event["event"] in ("revoked", "lost"):
            owned -= pairs
    return owned


@compat("java", "consumer-protocol")
def test_java_subscription_pattern_picks_up_a_new_topic(
    broker: BrokerProcess, topic: str, java_members: list[JavaMember]
) -> None:
    """``subscribe(SubscriptionPattern)`` sends the regex to the broker (unlike
    ``subscribe(java.util.regex.Pattern)``, resolved by the client)."""
    prefix = f"{topic}-rx"
    first = create_topic(broker, f"{prefix}-a", 2)
    member = JavaMember(broker, topic, f"{topic}-pattern", CONSUMER_PROTOCOL, f"{prefix}-.*")
    java_members.append(member)
    wait_until(
        lambda: java_owned(member) == {(first, 0), (first, 1)}, TIMEOUT, "the matching topic"
    )
    later = create_topic(broker, f"{prefix}-b", 2)
    want = {(first, 0), (first, 1), (later, 0), (later, 1)}
    wait_until(lambda: java_owned(member) == want, TIMEOUT, "the topic created later")


@compat("confluent", "consumer-protocol")
def test_confluent_regex_subscription_picks_up_a_new_topic(
    broker: BrokerProcess, topic: str, members: list[Member]
) -> None:
    """librdkafka sends a ``^``-prefixed subscription to the broker as the regex."""
    prefix = f"{topic}-rx"
    first = create_topic(broker, f"{prefix}-a", 2)
    member = Member(broker, f"^{prefix}-.*", f"{topic}-regex")
    members.append(member)

    def owned() -> set[tuple[str, int]]:
        return {(tp.topic, tp.partition) for tp in member.consumer.assignment()}

    def poll() -> None:
        poll_all(members)

    wait_until(lambda: owned() == {(first, 0), (first, 1)}, TIMEOUT, "the matching topic", poll)
    later = create_topic(broker, f"{prefix}-b", 2)
    want = {(first, 0), (first, 1), (later, 0), (later, 1)}
    wait_until(lambda: owned() == want, TIMEOUT, "the topic created later", poll)


# -- online migration between the protocols (group.consumer.migration.policy) ----------------
CLASSIC_PROTOCOL = {"group.protocol": "classic", "heartbeat.interval.ms": "300"}


class Production:
    """Records to every partition, one every few milliseconds, until stopped."""

    def __init__(self, broker: BrokerProcess, topic: str) -> None:
        self.producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5)
        self.topic, self.running = topic, threading.Event()
        self.running.set()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        i = 0
        while self.running.is_set():
            self.producer.send(self.topic, value=b"%d" % i, partition=i % PARTITIONS)
            i += 1
            time.sleep(0.005)

    def stop(self) -> None:
        self.running.clear()
        self.thread.join(TIMEOUT)
        self.producer.flush()
        self.producer.close()


class CommitWatch:
    """Samples the group's committed offsets; each partition's must never go backwards."""

    def __init__(self, broker: BrokerProcess, group: str) -> None:
        self.admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        self.group, self.latest = group, {p: 0 for p in range(PARTITIONS)}
        self.backwards: list[tuple[int, int, int]] = []
        self._lock, self._stop = threading.Lock(), threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self.sample()

    def sample(self) -> dict[int, int]:
        now = committed(self.admin, self.group)
        with self._lock:
            for p, offset in now.items():
                if offset < self.latest[p]:
                    self.backwards.append((p, self.latest[p], offset))
                self.latest[p] = max(self.latest[p], offset)
            return dict(self.latest)

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(TIMEOUT)
        self.admin.close()


def member_types(broker: BrokerProcess, group: str) -> list[int] | None:
    """ConsumerGroupDescribe's member types (0 classic, 1 consumer); None when the group is
    not a consumer group."""
    described = describe(broker, group)
    if described.error_code != 0:
        return None
    return sorted(m.member_type for m in described.members)


def reread_after_commit(reads: list[dict]) -> list[tuple[dict, int]]:
    """The driver's ``read`` events that began below the partition's committed position as
    it stood when they were read (by any member), with that position: records read again
    after their commit. (The commit times are taken after commitSync returned, so a late
    one can only hide a case, never invent one.)"""
    found: list[tuple[dict, int]] = []
    for p in {r["partition"] for r in reads}:
        on_p = [r for r in reads if r["partition"] == p]
        commits = sorted((r["committed_at"], r["to"] + 1) for r in on_p if r["committed_at"])
        times = [t for t, _ in commits]
        positions = list(accumulate((pos for _, pos in commits), max))
        for r in on_p:
            before = bisect_left(times, r["read_at"])  # commits strictly before the read
            if before and r["from"] < positions[before - 1]:
                found.append((r, positions[before - 1]))
    return found


def unread(reads: list[dict], ends: dict[int, int]) -> dict[int, list[int]]:
    """Each partition's offsets below its end that no ``read`` event covers."""
    seen: dict[int, set[int]] = {p: set() for p in ends}
    for r in reads:
        assert r["count"] == r["to"] - r["from"] + 1, r  # a batch's offsets are contiguous
        seen[r["partition"]].update(range(r["from"], r["to"] + 1))
    return {p: missing for p in ends if (missing := sorted(set(range(ends[p])) - seen[p]))}


@compat("java", "consumer-protocol")
def test_java_group_migrates_to_the_consumer_protocol_and_back(
    broker: BrokerProcess, topic: str, java_members: list[JavaMember]
) -> None:
    """Three classic members under continuous production are restarted one by one with
    ``group.protocol=consumer`` (the first upgrades the group, the others join the mixed
    group), then back to classic (the last consumer-protocol member's leave downgrades
    it). Every record is read, committed offsets never go backwards, and no record is read
    again after its commit (only a batch whose commit failed may come again)."""
    group = f"{topic}-migrate"
    production = Production(broker, topic)
    watch = CommitWatch(broker, group)
    try:
        trio = [JavaMember(broker, topic, group, CLASSIC_PROTOCOL) for _ in range(3)]
        java_members += trio
        java_balanced(trio, "3 classic members")
        for protocol, types in ((CONSUMER_PROTOCOL, [1, 1, 1]), (CLASSIC_PROTOCOL, None)):
            for i in range(3):
                trio[i].close()
                trio[i] = JavaMember(broker, topic, group, protocol)
                java_members.append(trio[i])
                java_balanced(trio, f"member {i} restarted with {protocol['group.protocol']}")
            assert member_types(broker, group) == types
    finally:
        production.stop()
        ends = end_offsets(broker.bootstrap, topic, PARTITIONS)
    try:
        wait_until(lambda: watch.sample() == ends, TIMEOUT, "every record committed")
    finally:
        watch.stop()
    assert watch.backwards == []
    for member in trio:
        member.close()
    reads = [e for m in java_members for e in m.events if e["event"] == "read"]
    assert unread(reads, ends) == {}
    assert reread_after_commit(reads) == []


# -- a partition added while the members consume ------------------------------------------------
GROWN = PARTITIONS + 2


def add_partitions(broker: BrokerProcess, topic: str, total: int) -> None:
    """CreatePartitions up to ``total``; wait until every broker knows them."""
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_partitions({topic: NewPartitions(total_count=total)})
    finally:
        admin.close()
    broker.wait_for_topic(topic, total)


def produce_to(broker: BrokerProcess, topic: str, partitions: range, per_partition: int) -> None:
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5)
    for p in partitions:
        for i in range(per_partition):
            producer.send(topic, value=b"%d" % i, partition=p)
    producer.flush()
    producer.close()


@compat("java", "consumer-protocol")
def test_java_new_partition_is_assigned_and_read(
    broker: BrokerProcess, topic: str, java_members: list[JavaMember]
) -> None:
    group = f"{topic}-grow"
    pair = [java(java_members, broker, topic, group) for _ in range(2)]
    produce(broker, topic, 3)
    java_balanced(pair, "2 members")
    wait_until(lambda: sum(len(m.first) for m in pair) == PARTITIONS, TIMEOUT, "the first records")
    add_partitions(broker, topic, GROWN)
    wait_until(lambda: balanced([m.snapshot() for m in pair], GROWN), TIMEOUT, "the new partitions")
    produce_to(broker, topic, range(PARTITIONS, GROWN), 3)
    wait_until(
        lambda: all(any(p in m.first for m in pair) for p in range(PARTITIONS, GROWN)),
        TIMEOUT,
        "records of the new partitions",
    )
    for p in range(PARTITIONS, GROWN):
        assert [m.first[p] for m in pair if p in m.first] == [0]  # read from the start


class Reader(Member):
    """A member that keeps what it consumed, (partition, offset) in order, and commits it
    after every batch."""

    def __init__(self, broker: BrokerProcess, topic: str, group: str, **configs: object) -> None:
        super().__init__(broker, topic, group, **configs)
        self.read: list[tuple[int, int]] = []

    def step(self) -> list[tuple[int, int]]:
        """One batch, committed; the (partition, offset)s whose commit failed."""
        batch = [m for m in self.consumer.consume(100, 0.05) if m.error() is None]
        self.read += [(m.partition(), m.offset()) for m in batch]
        if not batch:
            return []
        positions = {(m.topic(), m.partition()): m.offset() + 1 for m in batch}
        try:
            self.consumer.commit(
                offsets=[ConfluentTopicPartition(t, p, o) for (t, p), o in positions.items()],
                asynchronous=False,
            )
        except KafkaException:  # a rebalance moved on meanwhile: the batch may come again
            return [(m.partition(), m.offset()) for m in batch]
        return []


def read_all(readers: list[Reader]) -> None:
    for r in readers:
        r.step()


@compat("confluent", "consumer-protocol")
def test_confluent_new_partition_is_assigned_and_read(
    broker: BrokerProcess, topic: str, members: list[Member]
) -> None:
    group = f"{topic}-grow"
    pair = [Reader(broker, topic, group) for _ in range(2)]
    members += pair
    produce_to(broker, topic, range(PARTITIONS), 3)

    def read() -> set[tuple[int, int]]:
        return {r for m in pair for r in m.read}

    old = {(p, o) for p in range(PARTITIONS) for o in range(3)}
    wait_until(lambda: read() == old, TIMEOUT, "the records", lambda: read_all(pair))
    add_partitions(broker, topic, GROWN)
    wait_until(
        lambda: balanced([m.owned() for m in pair], GROWN),
        TIMEOUT,
        "the new partitions",
        lambda: read_all(pair),
    )
    produce_to(broker, topic, range(PARTITIONS, GROWN), 3)
    grown = old | {(p, o) for p in range(PARTITIONS, GROWN) for o in range(3)}
    wait_until(
        lambda: read() == grown, TIMEOUT, "the new partitions' records", lambda: read_all(pair)
    )


@compat("confluent", "consumer-protocol")
def test_confluent_committed_offsets_survive_a_broker_kill9(
    broker: BrokerProcess, topic: str, members: list[Member]
) -> None:
    group = f"{topic}-resume"
    produce_to(broker, topic, range(PARTITIONS), 20)
    ends = end_offsets(broker.bootstrap, topic, PARTITIONS)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        first = Reader(broker, topic, group)
        wait_until(
            lambda: committed(admin, group) == ends, TIMEOUT, "everything committed", first.step
        )
        first.consumer.close()
    finally:
        admin.close()
    broker.kill()  # kill -9: the commits must have reached the log, not a clean shutdown
    broker.start()
    produce_to(broker, topic, range(PARTITIONS), 5)
    resumed = Reader(broker, topic, group)
    members.append(resumed)

    def firsts() -> dict[int, int]:
        out: dict[int, int] = {}
        for p, o in resumed.read:
            out.setdefault(p, o)
        return out

    wait_until(
        lambda: len(firsts()) == PARTITIONS, TIMEOUT, "records after the restart", resumed.step
    )
    assert firsts() == ends  # exactly where the group left off


@compat("confluent", "consumer-protocol")
def test_confluent_group_migrates_to_the_consumer_protocol_and_back(
    broker: BrokerProcess, topic: str, members: list[Member]
) -> None:
    """The Java migration test's rolling restarts with librdkafka members, all polled from
    this thread, so the order of every read and commit is known: no committed record is
    read again, and every record is read."""
    group = f"{topic}-migrate"
    committed_at: dict[int, int] = {p: 0 for p in range(PARTITIONS)}  # this thread's commits
    reread: list[tuple[int, int]] = []  # read again after its commit
    everyone: list[Reader] = []

    def step(readers: list[Reader]) -> None:
        for r in readers:
            start = len(r.read)
            failed = r.step()
            done = r.read[start:]
            reread.extend((p, o) for p, o in done if o < committed_at[p])
            if not failed:
                for p, o in done:
                    committed_at[p] = max(committed_at[p], o + 1)

    def balanced_readers(readers: list[Reader], what: str) -> None:
        wait_until(
            lambda: balanced([r.owned() for r in readers], PARTITIONS),
            TIMEOUT,
            what,
            lambda: step(readers),
        )

    production = Production(broker, topic)
    try:
        trio = [Reader(broker, topic, group, **CLASSIC_PROTOCOL) for _ in range(3)]
        members += trio
        everyone += trio
        balanced_readers(trio, "3 classic members")
        for protocol, types in ((CONSUMER_PROTOCOL, [1, 1, 1]), (CLASSIC_PROTOCOL, None)):
            for i in range(3):
                trio[i].consumer.close()
                members.remove(trio[i])
                trio[i] = Reader(broker, topic, group, **protocol)
                members.append(trio[i])
                everyone.append(trio[i])
                balanced_readers(trio, f"member {i} restarted with {protocol['group.protocol']}")
            assert member_types(broker, group) == types
    finally:
        production.stop()
    ends = end_offsets(broker.bootstrap, topic, PARTITIONS)
    wait_until(lambda: committed_at == ends, TIMEOUT, "every record committed", lambda: step(trio))
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        assert committed(admin, group) == ends
    finally:
        admin.close()
    assert reread == []  # duplicates only of records whose commit had failed
    read = {(p, o) for m in everyone for p, o in m.read}
    assert read == {(p, o) for p in range(PARTITIONS) for o in range(ends[p])}  # none lost
