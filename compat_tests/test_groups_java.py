"""Consumer groups with the official Java client (kafka-clients 4.3.0, classic protocol)."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable, Iterator

import pytest
from kafka import KafkaProducer

from compat_tests import java_client as java
from compat_tests.broker import BrokerProcess
from compat_tests.group_checks import (
    SESSION_OVERRIDES,
    balanced,
    commit_everything,
    create_topic,
    driver_events,
    wait_until,
)
from compat_tests.matrix import compat

pytestmark = compat("java", "groups")

BROKER_OVERRIDES = SESSION_OVERRIDES
PARTITIONS = 6
FAST = {"session.timeout.ms": "3000", "heartbeat.interval.ms": "300"}
COOPERATIVE = {
    "partition.assignment.strategy": "org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
}
TIMEOUT = 60


class JavaMember:
    """One group-consume driver process; tracks the partitions it owns from its events."""

    def __init__(
        self,
        broker: BrokerProcess,
        topic: str,
        group: str,
        configs: dict[str, str],
        pattern: str | None = None,  # subscribe(SubscriptionPattern) instead of the topic
    ) -> None:
        args = [
            "group-consume",
            "--bootstrap",
            broker.bootstrap,
            "--topic",
            topic,
            "--group",
            group,
        ]
        if pattern is not None:
            args += ["--pattern", pattern]
        for key, value in configs.items():
            args += ["--config", f"{key}={value}"]
        self.proc = subprocess.Popen(
            [*java.driver_command(), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.events: list[dict] = []
        self.owned: set[int] = set()
        self.first: dict[int, int] = {}
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for event in driver_events(self.proc.stdout):
            with self._lock:
                self.events.append(event)
                kind = event.get("event")
                if kind == "assigned":
                    self.owned |= set(event["partitions"])
                elif kind in ("revoked", "lost"):
                    self.owned -= set(event["partitions"])
                elif kind == "first":
                    self.first[event["partition"]] = event["offset"]

    def snapshot(self) -> set[int]:
        with self._lock:
            return set(self.owned)

    def event_count(self) -> int:
        with self._lock:
            return len(self.events)

    def close(self) -> None:
        """A clean close: the consumer leaves the group (if dynamic)."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(TIMEOUT)
        self._reader.join(TIMEOUT)
        assert any(e.get("event") == "closed" for e in self.events), self.events

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def members() -> Iterator[list[JavaMember]]:
    started: list[JavaMember] = []
    yield started
    for m in started:
        if m.proc.poll() is None:
            m.kill()


@pytest.fixture
def topic(broker: BrokerProcess, new_topic: Callable[[str], str]) -> str:
    return create_topic(broker, new_topic("java-group"), PARTITIONS)


def start(
    members: list[JavaMember],
    broker: BrokerProcess,
    topic: str,
    group: str,
    configs: dict[str, str],
) -> JavaMember:
    member = JavaMember(broker, topic, group, configs)
    members.append(member)
    return member


def wait_balanced(group: list[JavaMember], what: str) -> list[set[int]]:
    wait_until(lambda: balanced([m.snapshot() for m in group], PARTITIONS), TIMEOUT, what)
    return [m.snapshot() for m in group]


def produce(broker: BrokerProcess, topic: str, per_partition: int) -> None:
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5)
    for i in range(per_partition * PARTITIONS):
        p.send(topic, value=b"%d" % i, partition=i % PARTITIONS)
    p.flush()
    p.close()


def test_join_leave_and_session_timeout(
    broker: BrokerProcess, topic: str, members: list[JavaMember]
) -> None:
    group = f"{topic}-g"
    trio = [start(members, broker, topic, group, FAST) for _ in range(3)]
    assert [len(s) for s in wait_balanced(trio, "3 members with 2 partitions each")] == [2, 2, 2]

    fourth = start(members, broker, topic, group, FAST)
    sizes = sorted(len(s) for s in wait_balanced([*trio, fourth], "a 4th member to get some"))
    assert sizes == [1, 1, 2, 2]

    trio[0].close()
    rest = [trio[1], trio[2], fourth]
    assert [len(s) for s in wait_balanced(rest, "rebalance after a leave")] == [2, 2, 2]

    rest[0].kill()  # no LeaveGroup: the coordinator notices by the session timeout
    assert sorted(len(s) for s in wait_balanced(rest[1:], "rebalance after a kill")) == [3, 3]


def test_cooperative_sticky_moves_only_what_it_must(
    broker: BrokerProcess, topic: str, members: list[JavaMember]
) -> None:
    group = f"{topic}-coop"
    configs = {**FAST, **COOPERATIVE}
    trio = [start(members, broker, topic, group, configs) for _ in range(3)]
    before = wait_balanced(trio, "3 cooperative members")
    fourth = start(members, broker, topic, group, configs)
    after = wait_balanced([*trio, fourth], "the cooperative rebalance")
    for old, new in zip(before, after[:3], strict=True):
        assert new <= old  # nobody got a partition somebody else had
    moved = set().union(*before) - set().union(*after[:3])
    assert moved == after[3]
    assert len(moved) == 1  # 6 over 4 members: one partition has to move


def test_committed_offsets_survive_kill9(
    broker: BrokerProcess, topic: str, members: list[JavaMember]
) -> None:
    group = f"{topic}-resume"
    produce(broker, topic, 50)
    ends = commit_everything(
        broker,
        topic,
        group,
        PARTITIONS,
        lambda: start(members, broker, topic, group, FAST),
        TIMEOUT,
    )

    broker.kill()
    broker.start()
    produce(broker, topic, 10)
    resumed = start(members, broker, topic, group, FAST)
    wait_until(lambda: len(resumed.first) == PARTITIONS, TIMEOUT, "records after restart")
    assert resumed.first == ends  # exactly where the group left off


def test_static_member_restarts_without_rebalance(
    broker: BrokerProcess, topic: str, members: list[JavaMember]
) -> None:
    group = f"{topic}-static"

    def static(i: int) -> dict[str, str]:
        return {
            "group.instance.id": f"instance-{i}",
            "session.timeout.ms": "20000",
            "heartbeat.interval.ms": "300",
        }

    trio = [start(members, broker, topic, group, static(i)) for i in range(3)]
    before = wait_balanced(trio, "3 static members")
    quiet = [trio[1].event_count(), trio[2].event_count()]

    trio[0].close()  # a static member does not leave the group on close
    back = start(members, broker, topic, group, static(0))
    wait_until(lambda: back.snapshot() == before[0], TIMEOUT, "the old partitions back")
    assert [trio[1].event_count(), trio[2].event_count()] == quiet  # no rebalance
