"""The share-group tests (KIP-932) of every client: a share consumer runs as a process of its
own (killable with SIGKILL) that prints one JSON line per record it receives with the record's
delivery count (``GregorClient share-consume`` for Java, ``confluent_share_member.py`` for
confluent-kafka: the same options and lines), and the tests read a topic through them as a
queue: every record delivered, none twice while nothing fails, RELEASE redelivers, REJECT
does not, a record released past the delivery count limit is archived, and a consumer that
stops acknowledging (alive or killed) has its records redelivered to another.

A client's module (``test_share_groups_java.py``, ``test_share_groups_confluent.py``)
imports the tests and their fixtures, and gives its ShareClient as the fixture
``share_client``."""

from __future__ import annotations

import base64
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import pytest
from kafka import KafkaProducer
from kio.schema.share_group_describe.v1.response import DescribedGroup

from compat_tests.broker import BrokerProcess
from compat_tests.cluster import ClusterBroker
from compat_tests.group_checks import (
    create_topic,
    describe_at_coordinator,
    driver_events,
    wait_until,
)
from gregor.apis.context import build
from gregor.wire import versions as v
from gregor.wire.schema import request_type
from tests.kafka_wire import WireClient

LOCK_MS = 4000
DELIVERY_COUNT_LIMIT = 3
BROKER_OVERRIDES = {
    "group.share.enable": "true",
    "group.share.min.session.timeout.ms": "1000",
    # No test waits for a session to expire. With 6 s, a JVM consumer starved of CPU on a
    # loaded CI machine could miss its heartbeats and be fenced; its pending acknowledgements
    # then fail and its records come again (suspected in two CI runs' share failures).
    "group.share.session.timeout.ms": "30000",
    "group.share.min.heartbeat.interval.ms": "100",
    "group.share.heartbeat.interval.ms": "300",
    "group.share.min.record.lock.duration.ms": "1000",
    "group.share.record.lock.duration.ms": str(LOCK_MS),
    "group.share.delivery.count.limit": str(DELIVERY_COUNT_LIMIT),
}
TIMEOUT = 60
SHARE_KEY_TYPE = 2  # FindCoordinator's key type of a share-partition's coordinator
# Small polls, so that several consumers of one partition each get a share of it.
SMALL_POLLS = {"max.poll.records": "10"}
# How the Java client and librdkafka name NOT_LEADER_OR_FOLLOWER in a failed acknowledgement.
LEADERSHIP_ERRORS = ("NotLeaderOrFollower", "NOT_LEADER")


def failed_for_leadership(failure: dict) -> bool:
    """A member's event: acknowledgements its client failed because the leader moved."""
    return failure.get("event") == "ack-failed" and any(
        name in failure["error"] for name in LEADERSHIP_ERRORS
    )


class ShareClient(Protocol):
    """How one client's share consumer process is started, and its group made to start
    from the earliest offset."""

    name: str  # the start of its tests' topic names

    def command(self, bootstrap: str, topic: str, group: str, options: list[str]) -> list[str]: ...

    def earliest(self, broker: BrokerProcess, group: str) -> None: ...


@dataclass(frozen=True)
class Delivery:
    partition: int
    offset: int
    value: str
    delivery_count: int
    ack: str
    at: float  # time.monotonic() when the line was read


class ShareMember:
    """One share consumer process; collects the records it prints."""

    def __init__(
        self,
        client: ShareClient,
        broker: BrokerProcess,
        topic: str,
        group: str,
        *,
        ack: str = "implicit",
        release: dict[str, int] | None = None,  # value -> release while delivery count <= N
        reject: tuple[str, ...] = (),
        hold_after: int | None = None,
        configs: dict[str, str] | None = None,
    ) -> None:
        options = ["--ack", ack]
        for value, times in (release or {}).items():
            options += ["--release", f"{value}={times}"]
        for value in reject:
            options += ["--reject", value]
        if hold_after is not None:
            options += ["--hold-after", str(hold_after)]
        for key, value in (configs or {}).items():
            options += ["--config", f"{key}={value}"]
        self._stderr = tempfile.TemporaryFile()  # a pipe nobody reads could fill and block
        self.proc = subprocess.Popen(
            client.command(broker.bootstrap, topic, group, options),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        self.deliveries: list[Delivery] = []
        self.events: list[dict] = []
        self.held_at: float | None = None
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for event in driver_events(self.proc.stdout):
            now = time.monotonic()
            with self._lock:
                self.events.append(event)
                if event.get("event") == "record":
                    fields = {k: event[k] for k in ("partition", "offset", "value", "ack")}
                    self.deliveries.append(
                        Delivery(**fields, delivery_count=event["delivery_count"], at=now)
                    )
                elif event.get("event") == "holding":
                    self.held_at = now

    def received(self) -> list[Delivery]:
        with self._lock:
            return list(self.deliveries)

    def failures(self) -> list[dict]:
        """The driver's failed acknowledgements and errors."""
        with self._lock:
            return [e for e in self.events if e.get("event") == "ack-failed" or "error" in e]

    def close(self) -> None:
        """A clean close: acknowledgements are committed and the member leaves the group."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(TIMEOUT)
        self._reader.join(TIMEOUT)
        assert any(e.get("event") == "closed" for e in self.events), self.diagnosis()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def diagnosis(self) -> str:
        """What the process reported, for a failed assertion's message."""
        self._stderr.seek(0)
        stderr = self._stderr.read()[-3000:].decode(errors="replace")
        with self._lock:
            failed = [e for e in self.events if e.get("event") == "ack-failed" or "error" in e]
            return f"failures: {failed[:5]}\nlast events: {self.events[-3:]}\nstderr: {stderr}"


class Members:
    """The share consumers a test started (all killed when it ends)."""

    def __init__(self, client: ShareClient, broker: BrokerProcess, topic: str) -> None:
        self.client, self.broker, self.topic = client, broker, topic
        self.group = f"{topic}-share"
        self.started: list[ShareMember] = []
        client.earliest(broker, self.group)

    def start(self, **options: Any) -> ShareMember:
        """A member of the group; ``options`` as ShareMember's."""
        member = ShareMember(self.client, self.broker, self.topic, self.group, **options)
        self.started.append(member)
        return member

    def stop_all(self) -> None:
        for m in self.started:
            if m.proc.poll() is None:
                m.kill()


@contextmanager
def members_of(client: ShareClient, broker: BrokerProcess, topic: str) -> Iterator[Members]:
    """The test's members, killed afterwards."""
    members = Members(client, broker, topic)
    try:
        yield members
    finally:
        members.stop_all()


def produce(broker: BrokerProcess, topic: str, values: range, partitions: int) -> None:
    """Records whose values are the decimal text of ``values``, round-robin over partitions,
    a batch each (a share fetch acquires whole batches, whatever its max records)."""
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, batch_size=1)
    for i in values:
        p.send(topic, value=b"%d" % i, partition=i % partitions)
    p.flush()
    p.close()


def describe(broker: BrokerProcess, group: str) -> DescribedGroup:
    """The share group as ShareGroupDescribe shows it, asked of its coordinator."""
    described = describe_at_coordinator(broker, group, v.SHARE_GROUP_DESCRIBE)
    assert isinstance(described, DescribedGroup)
    return described


def assigned(broker: BrokerProcess, group: str, consumers: int, partitions: int) -> bool:
    """The group has ``consumers`` members, each assigned partitions, all of them covered."""
    described = describe(broker, group)
    owned = [
        {p for tp in m.assignment.topic_partitions for p in tp.partitions}
        for m in described.members
    ]
    covered = set().union(*owned) == set(range(partitions))
    return len(owned) == consumers and all(owned) and covered


def values_of(deliveries: list[Delivery]) -> Counter[str]:
    return Counter(d.value for d in deliveries)


def all_received(group: list[ShareMember], values: range) -> Callable[[], bool]:
    want = {str(i) for i in values}
    return lambda: want <= set(values_of([d for m in group for d in m.received()]))


def _failures(group: list[ShareMember]) -> str:
    return "\n".join(m.diagnosis() for m in group)


# -- the tests ---------------------------------------------------------------------------------
@pytest.fixture
def partitions() -> int:
    """The topic's partitions; a test parametrised with ``partitions`` overrides it."""
    return 1


@pytest.fixture
def members(
    share_client: ShareClient,
    broker: BrokerProcess,
    new_topic: Callable[[str], str],
    partitions: int,
) -> Iterator[Members]:
    topic = create_topic(broker, new_topic(f"{share_client.name}-share"), partitions)
    with members_of(share_client, broker, topic) as members:
        yield members


@pytest.mark.parametrize(("consumers", "partitions"), [(2, 1), (3, 1), (3, 4)])
def test_share_consumers_read_a_topic_as_a_queue(
    members: Members, consumers: int, partitions: int
) -> None:
    """``consumers`` share consumers read ``partitions`` partitions as a queue: every record
    is delivered once (delivery count 1), and more than one consumer gets records."""
    group = [members.start(configs=SMALL_POLLS) for _ in range(consumers)]
    wait_until(
        lambda: assigned(members.broker, members.group, consumers, partitions),
        TIMEOUT,
        "every consumer in the group with partitions",
    )
    values = range(300)
    for start in range(0, len(values), 30):  # in rounds, while the consumers wait
        produce(members.broker, members.topic, values[start : start + 30], partitions)
    wait_until(all_received(group, values), TIMEOUT, "every record", None)
    for m in group:
        m.close()
    deliveries = [d for m in group for d in m.received()]
    # A partition's leader can move on a loaded machine (a broker's ZooKeeper session
    # expires): acknowledgements to the old leader then fail and Kafka delivers those
    # records again. Only they may come twice, only on such partitions.
    moved = moved_partitions(members.broker, members.topic, partitions)
    excused = {
        (f["partition"], offset)
        for m in group
        for f in m.failures()
        if f.get("partition") in moved and failed_for_leadership(f)
        for offset in f["offsets"]
    }
    again = [d for d in deliveries if d.delivery_count > 1]
    assert all((d.partition, d.offset) in excused for d in again), (
        f"delivered again: {[(d.partition, d.offset, d.delivery_count) for d in again]}, "
        f"partitions whose leader moved: {moved}\n{_failures(group)}"
    )
    once = [d for d in deliveries if (d.partition, d.offset) not in excused]
    twice = {v: n for v, n in values_of(once).items() if n > 1}
    assert twice == {}, f"delivered more than once: {twice}\n{_failures(group)}"
    assert sorted(set(values_of(deliveries))) == sorted(str(i) for i in values)
    sharing = [len(m.received()) for m in group]
    assert sum(1 for n in sharing if n) >= 2, f"one consumer got everything: {sharing}"
    unexcused = [
        f
        for m in group
        for f in m.failures()
        if not any((f.get("partition"), o) in excused for o in f.get("offsets", ()))
    ]
    assert unexcused == [], _failures(group)


def moved_partitions(broker: BrokerProcess, topic: str, partitions: int) -> set[int]:
    """The partitions of a new topic whose leader changed since it was created (leader
    epoch above 0): none on a single broker."""
    if not isinstance(broker, ClusterBroker):
        return set()
    cluster = broker.cluster
    return {p for p in range(partitions) if cluster.wait_for_leader(topic, p).leader_epoch > 0}


def test_explicit_release_redelivers_and_reject_does_not(members: Members) -> None:
    """Explicit acknowledgement: a RELEASEd record comes back with delivery count 2 (and is
    then accepted), a REJECTed one never comes back."""
    member = members.start(ack="explicit", release={"7": 1}, reject=("5",))
    produce(members.broker, members.topic, range(20), 1)
    wait_until(lambda: values_of(member.received())["7"] == 2, TIMEOUT, "the released record again")
    produce(members.broker, members.topic, range(20, 40), 1)  # later records: 5 is not among
    wait_until(all_received([member], range(40)), TIMEOUT, "the later records")
    member.close()
    got = member.received()
    sevens = [(d.delivery_count, d.ack) for d in got if d.value == "7"]
    assert sevens == [(1, "RELEASE"), (2, "ACCEPT")]
    assert [(d.delivery_count, d.ack) for d in got if d.value == "5"] == [(1, "REJECT")]
    others = [d for d in got if d.value not in ("5", "7")]
    assert sorted(values_of(others).values()) == [1] * 38
    assert member.failures() == [], member.diagnosis()


def test_a_record_released_past_the_delivery_count_limit_is_archived(
    members: Members,
) -> None:
    """A record released at every delivery is archived once delivered
    ``group.share.delivery.count.limit`` times."""
    member = members.start(ack="explicit", release={"3": 99})
    produce(members.broker, members.topic, range(10), 1)
    wait_until(
        lambda: values_of(member.received())["3"] >= DELIVERY_COUNT_LIMIT,
        TIMEOUT,
        "the limit's deliveries",
    )
    produce(members.broker, members.topic, range(10, 20), 1)
    wait_until(all_received([member], range(20)), TIMEOUT, "the later records")
    member.close()
    counts = [d.delivery_count for d in member.received() if d.value == "3"]
    assert counts == list(range(1, DELIVERY_COUNT_LIMIT + 1))
    assert member.failures() == [], member.diagnosis()


def test_held_records_are_redelivered_after_the_lock_duration(members: Members) -> None:
    """A consumer that stops polling (alive, its session open) keeps its acquired records
    only for the record lock duration; then another consumer gets them, delivery count 2
    or more (the holder's client may fetch them once more in the background before it
    stops, as a CI run on a loaded machine saw: count 3)."""
    holder = members.start(hold_after=1)
    produce(members.broker, members.topic, range(20), 1)
    wait_until(lambda: holder.held_at is not None, TIMEOUT, "a held batch")
    held = {d.value for d in holder.received()}
    other = members.start()
    wait_until(all_received([other], range(20)), TIMEOUT, "every record at the other")
    assert holder.proc.poll() is None  # still alive: only the lock let the records go
    again = [d for d in other.received() if d.value in held]
    assert again and all(d.delivery_count >= 2 for d in again), again
    assert holder.held_at is not None
    waited = min(d.at for d in again) - holder.held_at
    assert waited >= LOCK_MS / 1000 * 0.9, f"redelivered after {waited:.2f}s"
    assert sorted(values_of(other.received()).values()) == [1] * 20
    other.close()
    assert other.failures() == [], other.diagnosis()


def test_a_killed_consumers_records_are_redelivered(members: Members) -> None:
    """A consumer killed (SIGKILL) mid-batch: its acquired records go to another consumer
    with delivery count 2 or more (the victim's client keeps fetching in the background
    while it holds: on a slow machine the lock can expire and the victim acquire them again
    before the kill), every record is delivered, none twice to the survivor."""
    victim = members.start(hold_after=1)
    produce(members.broker, members.topic, range(20), 1)
    wait_until(lambda: victim.held_at is not None, TIMEOUT, "a held batch")
    held = {d.value for d in victim.received()}
    victim.kill()
    survivor = members.start()
    wait_until(all_received([survivor], range(20)), TIMEOUT, "every record at the survivor")
    survivor.close()
    got = survivor.received()
    again = [(d.value, d.delivery_count) for d in got if d.value in held]
    assert again and all(count >= 2 for _, count in again), again
    assert {d.delivery_count for d in got if d.value not in held} <= {1, 2}
    assert sorted(values_of(got).values()) == [1] * 20
    assert survivor.failures() == [], survivor.diagnosis()


def share_coordinator(broker: BrokerProcess, group: str, topic: str, partition: int) -> int:
    """The broker id of the share coordinator of ``group``'s share-partition (FindCoordinator
    key type SHARE, key ``group:topic id:partition`` with Kafka's base64 topic id)."""
    client = WireClient(broker.port)
    try:
        body = build(
            request_type(v.METADATA, 12),
            topics=None,
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        topics = client.call(v.METADATA, 12, body).topics
        (topic_id,) = [t.topic_id for t in topics if t.name == topic]
        kafka_id = base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode()
        body = build(
            request_type(v.FIND_COORDINATOR, 6),
            key_type=SHARE_KEY_TYPE,
            coordinator_keys=(f"{group}:{kafka_id}:{partition}",),
        )
        (found,) = client.call(v.FIND_COORDINATOR, 6, body).coordinators
    finally:
        client.close()
    assert found.error_code == 0, found
    node_id: int = found.node_id
    return node_id


@pytest.mark.parametrize("broker", ["cluster"], indirect=True)  # kills brokers of 3
def test_acknowledgements_survive_kill9_of_the_share_coordinator_and_the_leader(
    broker: ClusterBroker, members: Members
) -> None:
    """On 3 brokers, acknowledged records stay acknowledged through a kill -9 of the share
    coordinator of the share-partition's state, then of the share-partition's leader (each
    started again before the next): a consumer started afterwards gets only the records
    produced since (the group starts at the earliest offset, so lost state would show as the
    old records delivered again)."""
    first = members.start(ack="explicit")
    produce(members.broker, members.topic, range(20), 1)
    wait_until(all_received([first], range(20)), TIMEOUT, "the first records")
    first.close()  # its acknowledgements are committed before it leaves
    assert first.failures() == [], first.diagnosis()
    cluster = broker.cluster
    try:
        victim = share_coordinator(members.broker, members.group, members.topic, 0)
        cluster.kill(victim)
        cluster.restart(victim)
        cluster.wait_for_brokers(cluster.brokers)
        victim = cluster.wait_for_leader(members.topic, 0).leader
        cluster.kill(victim)
        cluster.restart(victim)
        cluster.wait_for_brokers(cluster.brokers)
    finally:
        cluster.restore()
    produce(members.broker, members.topic, range(20, 40), 1)
    epoch = cluster.wait_for_leader(members.topic, 0).leader_epoch
    second = members.start()
    wait_until(all_received([second], range(20, 40)), TIMEOUT, "the later records")
    second.close()
    assert sorted(values_of(second.received())) == sorted(str(i) for i in range(20, 40))
    # A new controller checks the preferred leaders 5 s after its election and may move the
    # partition's leader while the second member reads: its client then fails the
    # acknowledgements sent to the old leader, as against Kafka. Only those are excused.
    moved = cluster.wait_for_leader(members.topic, 0).leader_epoch != epoch
    unexcused = [f for f in second.failures() if not (moved and failed_for_leadership(f))]
    assert unexcused == [], second.diagnosis()
