"""The group coordinator following the leadership of ``__consumer_offsets`` partitions as
it moves between brokers, in-process over real ReplicaManagers and logs on disk.

Two brokers (0 and 1), each with its own log directory and coordinator; "replication" is
the follower appending the leader's batches byte for byte, as its fetcher does.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode
from test_coordinator import (
    PARTITIONS,
    commit,
    join,
    join_new,
    run,
    stable_single,
    until,
)

from gregor.controller.metadata.cache import PartitionInfo
from gregor.coordinator.coordinator import GroupCoordinator, Settings
from gregor.coordinator.group import GroupState
from gregor.coordinator.records import OFFSETS_TOPIC, partition_for
from gregor.log import LogManager
from gregor.replica.manager import ReplicaManager
from gregor.replica.partition import FollowerState, Partition
from gregor.replica.state import LeaderAndIsrState

NOW = 1_700_000_000_000


@dataclass
class Node:
    """One broker's replica manager and group coordinator."""

    broker_id: int
    logs: LogManager
    replicas: ReplicaManager
    coordinator: GroupCoordinator

    def partition(self, index: int) -> Partition:
        partition = self.replicas.get(OFFSETS_TOPIC, index)
        assert partition is not None
        return partition

    def lead(self, index: int, epoch: int, isr: list[int] | None = None) -> None:
        """The controller's LeaderAndIsr making this broker the leader, then the coordinator
        told, as the broker does."""
        info = PartitionInfo(index, self.broker_id, epoch, [0, 1], isr or [self.broker_id])
        self.replicas.become_leader(OFFSETS_TOPIC, info, {"cleanup.policy": "compact"})
        self.coordinator.on_become_leader(index)

    def follow(self, index: int, leader: int, epoch: int) -> None:
        """The coordinator resigns first, then the partition becomes a follower."""
        self.coordinator.on_resign(index)
        become_follower(self.replicas, index, leader, epoch)

    def fetch_from(self, leader: Node, index: int) -> None:
        """Append what the leader has beyond this log's end, byte for byte."""
        source = leader.partition(index).log
        log = self.partition(index).log
        end = source.log_end_offset
        while log.log_end_offset < end:
            region = source.read(
                log.log_end_offset, max_bytes=1 << 20, max_offset=end, min_one_batch=True
            )
            log.append_as_follower(os.pread(region.fd, region.size, region.position))


def become_follower(replicas: ReplicaManager, index: int, leader: int, epoch: int) -> None:
    """The controller's LeaderAndIsr making ``leader`` the partition's leader."""
    state = LeaderAndIsrState(
        OFFSETS_TOPIC,
        None,
        index,
        leader,
        epoch,
        [leader],
        0,
        [0, 1],
        configs={"cleanup.policy": "compact"},
    )
    errors = replicas.become_leader_or_follower(0, [state])
    assert set(errors.values()) <= {ErrorCode.none}, errors


COMMIT_TIMEOUT_MS = 200


def make_node(directory: Path, broker_id: int) -> Node:
    directory.mkdir()
    logs = LogManager([directory], {})
    logs.startup(NOW)
    replicas = ReplicaManager(broker_id, logs, {})
    coordinator = GroupCoordinator(
        Settings(
            partitions=PARTITIONS,
            initial_rebalance_delay_ms=0,
            min_session_timeout_ms=10,
            commit_timeout_ms=COMMIT_TIMEOUT_MS,
        ),
        replicas,
        replicas.produce_purgatory,
        now_ms=lambda: NOW,
    )
    return Node(broker_id, logs, replicas, coordinator)


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[tuple[Node, Node]]:
    """Broker 0 leads every partition, broker 1 follows."""
    a, b = make_node(tmp_path / "a", 0), make_node(tmp_path / "b", 1)
    for index in range(PARTITIONS):
        b.follow(index, 0, 0)
    yield a, b
    for node in (a, b):
        node.coordinator.shutdown()
        node.logs.shutdown(node.replicas.high_watermarks())


def on_partition(index: int, count: int, prefix: str = "g") -> list[str]:
    """``count`` group ids whose coordinator partition is ``index``."""
    names = (f"{prefix}{n}" for n in range(10_000))
    return [g for g in names if partition_for(g, PARTITIONS) == index][:count]


def offsets_of(c: GroupCoordinator, group: str) -> dict[tuple[str, int], int]:
    error, offsets = c.offsets.fetch_offsets(group, None)
    assert error == ErrorCode.none
    return {tp: v.offset for tp, v in offsets.items() if v is not None}


def test_offsets_and_groups_follow_the_leadership_back_and_forth(
    nodes: tuple[Node, Node],
) -> None:
    async def scenario() -> None:
        a, b = nodes
        for index in range(PARTITIONS):
            a.lead(index, 0)
        index = partition_for("g", PARTITIONS)
        member = await stable_single(a.coordinator, "g")
        assert await commit(a.coordinator, "g", {("t", 0): 10}, 1, member.member_id) == {
            ("t", 0): ErrorCode.none
        }
        assert await commit(a.coordinator, "simple", {("t", 1): 7}) == {("t", 1): ErrorCode.none}
        simple = partition_for("simple", PARTITIONS)

        # 0 -> 1: broker 1 replicated the partitions and loads them as their new leader.
        for epoch, (old, new) in enumerate([(a, b), (b, a), (a, b), (b, a)], start=1):
            for i in {index, simple}:
                new.fetch_from(old, i)
                old.follow(i, new.broker_id, epoch)
                new.lead(i, epoch)
            assert old.coordinator.offsets.fetch_offsets("g", None)[0] == (
                ErrorCode.not_coordinator
            )
            assert offsets_of(new.coordinator, "g")[("t", 0)] == 10 + epoch - 1
            assert offsets_of(new.coordinator, "simple") == {("t", 1): 7}
            group = new.coordinator.membership.describe("g")[1]
            assert group is not None and group.state is GroupState.STABLE
            assert group.members[member.member_id].assignment == b"assignment-1"
            # The member finds its new coordinator and carries on in its generation.
            assert (
                new.coordinator.membership.heartbeat("g", 1, member.member_id, None)
                == ErrorCode.none
            )
            committed = await commit(
                new.coordinator, "g", {("t", 0): 10 + epoch}, 1, member.member_id
            )
            assert committed == {("t", 0): ErrorCode.none}
            # A repeated LeaderAndIsr changes nothing; neither does resigning twice.
            new.coordinator.on_become_leader(index)
            old.coordinator.on_resign(index)
            assert new.coordinator.membership.describe("g")[1] is group
            assert offsets_of(new.coordinator, "g")[("t", 0)] == 10 + epoch
        assert offsets_of(a.coordinator, "g") == {("t", 0): 14}

    run(scenario)


def test_resigning_answers_parked_requests_and_stops_timers(nodes: tuple[Node, Node]) -> None:
    async def scenario() -> None:
        a, _ = nodes
        for index in range(PARTITIONS):
            a.lead(index, 0)
        c = a.coordinator
        index = partition_for("g", PARTITIONS)
        syncing, joining, other = on_partition(index, 2) + on_partition((index + 1) % 3, 1)

        # A follower parked in SyncGroup (its leader has not synced yet).
        leader = await stable_single(c, syncing)
        follower_id = (await join(c, syncing)).member_id
        follower_join = join(c, syncing, follower_id)
        leader_join = await join(c, syncing, leader.member_id)
        follower = await follower_join
        assert leader_join.generation == follower.generation == 2
        parked_sync = c.membership.sync(
            syncing, 2, follower.member_id, None, "consumer", "range", {}
        )
        # A member parked in JoinGroup (waiting for the others to rejoin), and one that
        # has only been handed its id (KIP-394), whose expiry timer runs.
        stable = await stable_single(c, joining)
        newcomer = await join(c, joining)
        parked_join = join(c, joining, newcomer.member_id)
        pending = await join(c, joining)
        # A group on another partition is left alone.
        elsewhere = await stable_single(c, other)

        groups = [c.membership.describe(g)[1] for g in (syncing, joining)]
        timers = [
            t
            for g in groups
            for t in (
                *(m.heartbeat_timer for m in g.members.values()),  # type: ignore[union-attr]
                *g.pending_members.values(),  # type: ignore[union-attr]
                g.pending_sync_timer,  # type: ignore[union-attr]
            )
            if t is not None
        ]
        assert len(timers) >= 5  # 4 sessions, the pending member, the pending sync
        assert not parked_sync.done() and not parked_join.done()

        a.follow(index, 1, 1)
        assert (await parked_sync).error == ErrorCode.not_coordinator
        assert (await parked_join).error == ErrorCode.not_coordinator
        assert all(t.cancelled() for t in timers)
        assert all(g is not None and g.is_(GroupState.DEAD) for g in groups)
        for group_id, member_id in [(syncing, leader.member_id), (joining, stable.member_id)]:
            assert c.membership.heartbeat(group_id, 1, member_id, None) == (
                ErrorCode.not_coordinator
            )
            assert c.membership.describe(group_id)[0] == ErrorCode.not_coordinator
        assert (await join(c, joining, pending.member_id)).error == ErrorCode.not_coordinator
        assert c.membership.heartbeat(other, 1, elsewhere.member_id, None) == ErrorCode.none
        assert [g.group_id for g in c.membership.groups()] == [other]
        assert len(c.membership._join_purgatory) == 0  # the stale delayed joins are gone

    run(scenario)


def test_load_in_progress_until_the_log_is_replayed(nodes: tuple[Node, Node]) -> None:
    async def scenario() -> None:
        a, b = nodes
        index = partition_for("g", PARTITIONS)
        a.lead(index, 0)
        # Some 60 KB of commits: several loading steps (16 KB each).
        for n in range(150):
            result = a.coordinator.offsets.commit_offsets(
                "g", -1, "", None, [("t", n % 5, n, -1, "x" * 300)]
            )
            assert result == {("t", n % 5): ErrorCode.none}
        b.fetch_from(a, index)
        a.follow(index, 1, 1)

        c = b.coordinator
        b.lead(index, 1)
        assert c.loading()
        assert c.offsets.fetch_offsets("g", None)[0] == ErrorCode.coordinator_load_in_progress
        assert (await commit(c, "g", {("t", 0): 1})) == {
            ("t", 0): ErrorCode.coordinator_load_in_progress
        }
        assert (await join(c, "g")).error == ErrorCode.coordinator_load_in_progress
        assert c.membership.describe("g")[0] == ErrorCode.coordinator_load_in_progress
        # As Kafka: a heartbeat is answered blindly while loading.
        assert c.membership.heartbeat("g", 1, "m", None) == ErrorCode.none

        # Resigning mid-load stops it; leading again loads from the start.
        c.on_resign(index)
        assert not c.loading()
        assert c.offsets.fetch_offsets("g", None)[0] == ErrorCode.not_coordinator
        c.on_become_leader(index)
        assert c.loading()
        await until(lambda: not c.loading())
        assert offsets_of(c, "g") == {("t", n): 145 + n for n in range(5)}

    run(scenario)


def test_a_write_in_flight_when_resigning_fails_with_not_coordinator(
    nodes: tuple[Node, Node], caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        a, _ = nodes
        index = partition_for("g", PARTITIONS)
        syncing, committing = on_partition(index, 2)
        a.lead(index, 0)
        c = a.coordinator
        joined = await join_new(c, syncing)
        assert await commit(c, committing, {("t", 0): 1}) == {("t", 0): ErrorCode.none}
        # A follower joins the ISR and has not caught up: writes wait for it.
        partition = a.partition(index)
        partition.isr = [0, 1]
        sync = c.membership.sync(syncing, 1, joined.member_id, None, None, None, {})
        pending = c.offsets.commit_offsets(committing, -1, "", None, [("t", 0, 2, 4, None)])
        assert isinstance(pending, asyncio.Future)
        assert not sync.done() and not pending.done()
        assert len(a.replicas.produce_purgatory) == 2

        a.coordinator.on_resign(index)
        assert (await sync).error == ErrorCode.not_coordinator
        assert (await pending) == {("t", 0): ErrorCode.not_coordinator}
        assert len(a.replicas.produce_purgatory) == 0
        # The follower catches up afterwards: nothing more happens here.
        partition.followers.setdefault(
            1, FollowerState()
        ).log_end_offset = partition.log.log_end_offset
        partition.maybe_advance_high_watermark()
        a.replicas.produce_purgatory.check((OFFSETS_TOPIC, index))
        assert c.offsets.fetch_offsets(committing, None)[0] == ErrorCode.not_coordinator

        # Led again, the partition's log is what counts: both writes are in it.
        a.lead(index, 1)
        assert offsets_of(c, committing) == {("t", 0): 2}
        group = c.membership.describe(syncing)[1]
        assert group is not None and group.state is GroupState.STABLE

    with caplog.at_level(logging.WARNING):
        run(scenario)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_write_in_flight_when_the_partition_becomes_a_follower_first(
    nodes: tuple[Node, Node],
) -> None:
    """LeaderAndIsr reaches the replica manager before the coordinator resigns."""

    async def scenario() -> None:
        a, _ = nodes
        index = partition_for("g", PARTITIONS)
        a.lead(index, 0)
        c = a.coordinator
        a.partition(index).isr = [0, 1]
        pending = c.offsets.commit_offsets("g", -1, "", None, [("t", 0, 2, 4, None)])
        assert isinstance(pending, asyncio.Future) and not pending.done()
        become_follower(a.replicas, index, 1, 1)
        assert (await pending) == {("t", 0): ErrorCode.not_coordinator}
        c.on_resign(index)
        assert c.offsets.fetch_offsets("g", None)[0] == ErrorCode.not_coordinator

    run(scenario)


def test_writes_apply_in_log_order_live_as_at_load(nodes: tuple[Node, Node]) -> None:
    """A commit written before the group's deletion, both committed together: the commit's
    offset outlives the deletion (which did not know it), live and after a load alike."""

    async def scenario() -> None:
        a, b = nodes
        index = partition_for("g", PARTITIONS)
        a.lead(index, 0)
        c = a.coordinator
        assert await commit(c, "g", {("t", 0): 1}) == {("t", 0): ErrorCode.none}
        partition = a.partition(index)
        partition.isr = [0, 1]  # a follower that has not caught up holds the HW back
        committed = c.offsets.commit_offsets("g", -1, "", None, [("t", 1, 5, -1, None)])
        deleted = c.membership.delete_groups(["g"])
        assert isinstance(committed, asyncio.Future)
        assert not committed.done() and not deleted.done()
        assert c.membership.describe("g")[0] == ErrorCode.group_id_not_found  # Dead
        partition.followers.setdefault(
            1, FollowerState()
        ).log_end_offset = partition.log.log_end_offset
        partition.maybe_advance_high_watermark()
        a.replicas.produce_purgatory.check((OFFSETS_TOPIC, index))
        assert (await committed) == {("t", 1): ErrorCode.none}
        assert (await deleted) == {"g": ErrorCode.none}
        assert offsets_of(c, "g") == {("t", 1): 5}

        b.fetch_from(a, index)
        a.follow(index, 1, 1)
        b.lead(index, 1)
        assert offsets_of(b.coordinator, "g") == {("t", 1): 5}

    run(scenario)


def test_a_write_whose_answer_timed_out_is_applied_once_committed(
    nodes: tuple[Node, Node],
) -> None:
    """REQUEST_TIMED_OUT does not mean "not written": once the high watermark passes the
    records they are applied (before any later write of the partition), as a load would."""

    async def scenario() -> None:
        a, b = nodes
        index = partition_for("g", PARTITIONS)
        a.lead(index, 0)
        c = a.coordinator
        partition = a.partition(index)
        partition.isr = [0, 1]
        late = c.offsets.commit_offsets("g", -1, "", None, [("t", 0, 1, -1, None)])
        assert isinstance(late, asyncio.Future)
        assert (await late) == {("t", 0): ErrorCode.request_timed_out}  # after 200 ms
        assert offsets_of(c, "g") == {}
        partition.followers.setdefault(
            1, FollowerState()
        ).log_end_offset = partition.log.log_end_offset
        partition.maybe_advance_high_watermark()
        next_one = c.offsets.commit_offsets("g", -1, "", None, [("t", 1, 2, -1, None)])
        assert isinstance(next_one, asyncio.Future)
        assert offsets_of(c, "g") == {("t", 0): 1}
        partition.followers.setdefault(
            1, FollowerState()
        ).log_end_offset = partition.log.log_end_offset
        partition.maybe_advance_high_watermark()
        a.replicas.produce_purgatory.check((OFFSETS_TOPIC, index))
        assert (await next_one) == {("t", 1): ErrorCode.none}
        assert offsets_of(c, "g") == {("t", 0): 1, ("t", 1): 2}

        b.fetch_from(a, index)
        a.follow(index, 1, 1)
        b.lead(index, 1)
        assert offsets_of(b.coordinator, "g") == {("t", 0): 1, ("t", 1): 2}

    run(scenario)


def test_session_of_a_loaded_member_runs_from_the_load(nodes: tuple[Node, Node]) -> None:
    async def scenario() -> None:
        a, b = nodes
        index = partition_for("g", PARTITIONS)
        a.lead(index, 0)
        first = await join(a.coordinator, "g", session=50)
        joined = await join(a.coordinator, "g", first.member_id, session=50)
        synced = await a.coordinator.membership.sync("g", 1, joined.member_id, None, None, None, {})
        assert synced.error == ErrorCode.none
        b.fetch_from(a, index)
        a.follow(index, 1, 1)
        b.lead(index, 1)
        group = b.coordinator.membership.describe("g")[1]
        assert group is not None and joined.member_id in group.members
        # It never heartbeats to its new coordinator: it leaves the group.
        await until(lambda: group.state is GroupState.EMPTY)
        assert not group.members

    run(scenario)
