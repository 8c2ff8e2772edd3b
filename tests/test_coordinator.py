"""The group coordinator in-process, over a real ReplicaManager and log on disk."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest
from kio.schema.errors import ErrorCode

from gregor.controller.metadata.cache import PartitionInfo
from gregor.coordinator.coordinator import GroupCoordinator, Settings
from gregor.coordinator.group import GroupState
from gregor.coordinator.membership import JoinResult
from gregor.coordinator.records import OFFSETS_TOPIC, partition_for
from gregor.log import LogManager
from gregor.replica.manager import ReplicaManager
from gregor.replica.partition import FollowerState
from gregor.replica.purgatory import Purgatory
from gregor.server.config import BrokerConfig

PARTITIONS = 3
SESSION = 60_000
PROTOCOLS = [("range", b"sub-range"), ("roundrobin", b"sub-rr")]
T = TypeVar("T")


@dataclass
class Stack:
    replicas: ReplicaManager
    purgatory: Purgatory
    clock: list[int]

    def coordinator(self, **settings: int) -> GroupCoordinator:
        coordinator = GroupCoordinator(
            Settings(
                partitions=PARTITIONS,
                initial_rebalance_delay_ms=0,
                min_session_timeout_ms=10,
                **settings,
            ),
            self.replicas,
            self.purgatory,
            now_ms=lambda: self.clock[0],
        )
        for i in range(PARTITIONS):
            coordinator.on_become_leader(i)
        return coordinator


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    logs = LogManager([tmp_path], {})
    logs.startup(1_700_000_000_000)
    replicas = ReplicaManager(0, logs, {})
    for i in range(PARTITIONS):
        replicas.become_leader(
            OFFSETS_TOPIC, PartitionInfo(i, 0, 0, [0], [0]), {"cleanup.policy": "compact"}
        )
    yield Stack(replicas, replicas.produce_purgatory, [1_700_000_000_000])
    logs.shutdown(replicas.high_watermarks())


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(scenario(), 10))


async def until(check: Callable[[], bool]) -> None:
    """Let the loop run (timers, parked joins) until ``check`` holds."""
    while not check():
        await asyncio.sleep(0.005)


def join(
    c: GroupCoordinator,
    group: str,
    member: str = "",
    instance: str | None = None,
    protocols: list[tuple[str, bytes]] = PROTOCOLS,
    session: int = SESSION,
    protocol_type: str = "consumer",
) -> asyncio.Future[JoinResult]:
    return c.membership.join(
        group,
        member,
        instance,
        "client",
        "/127.0.0.1",
        protocol_type,
        protocols,
        session,
        session,
        require_known_member_id=instance is None,
    )


async def join_new(c: GroupCoordinator, group: str, **kw: object) -> JoinResult:
    """The KIP-394 dance: the first join hands out the id, the second one is parked."""
    first = await join(c, group, **kw)  # type: ignore[arg-type]
    assert first.error == ErrorCode.member_id_required and first.member_id
    return await join(c, group, first.member_id, **kw)  # type: ignore[arg-type]


async def stable_single(c: GroupCoordinator, group: str) -> JoinResult:
    joined = await join_new(c, group)
    synced = await c.membership.sync(
        group,
        joined.generation,
        joined.member_id,
        None,
        "consumer",
        "range",
        {joined.member_id: b"assignment-1"},
    )
    assert synced.error == ErrorCode.none and synced.assignment == b"assignment-1"
    return joined


def test_first_member_joins_and_syncs(stack: Stack) -> None:
    async def scenario() -> None:
        c = stack.coordinator()
        joined = await stable_single(c, "g")
        assert (joined.generation, joined.protocol_name, joined.leader_id) == (
            1,
            "range",
            joined.member_id,
        )
        assert joined.members == ((joined.member_id, None, b"sub-range"),)
        assert joined.member_id.startswith("client-")
        assert c.membership.describe("g")[1].state is GroupState.STABLE  # type: ignore[union-attr]
        assert c.membership.heartbeat("g", 1, joined.member_id, None) == ErrorCode.none

    run(scenario)


def test_second_member_rebalances_the_group(stack: Stack) -> None:
    async def scenario() -> None:
        c = stack.coordinator()
        a = await stable_single(c, "g")
        first = await join(c, "g")
        b_join = join(c, "g", first.member_id)
        assert not b_join.done()  # parked until A rejoins
        assert c.membership.heartbeat("g", 1, a.member_id, None) == ErrorCode.rebalance_in_progress
        a_sync_stale = await c.membership.sync("g", 1, a.member_id, None, None, None, {})
        assert a_sync_stale.error == ErrorCode.rebalance_in_progress
        a2 = await join(c, "g", a.member_id)
        b = await b_join
        assert a2.generation == b.generation == 2
        assert a2.leader_id == b.leader_id == a.member_id
        assert len(a2.members) == 2 and b.members == ()
        b_sync = c.membership.sync("g", 2, b.member_id, None, None, None, {})
        assert not b_sync.done()  # waits for the leader's assignment
        await c.membership.sync(
            "g", 2, a.member_id, None, None, None, {a.member_id: b"for-a", b.member_id: b"for-b"}
        )
        assert (await b_sync).assignment == b"for-b"
        assert c.membership.heartbeat("g", 1, b.member_id, None) == ErrorCode.illegal_generation
        assert c.membership.heartbeat("g", 2, "nobody", None) == ErrorCode.unknown_member_id

    run(scenario)


def test_request_errors(stack: Stack) -> None:
    async def scenario() -> None:
        c = stack.coordinator(max_session_timeout_ms=100_000)
        assert (await join(c, "g", session=5)).error == ErrorCode.invalid_session_timeout
        assert (await join(c, "g", session=200_000)).error == ErrorCode.invalid_session_timeout
        assert (await join(c, "")).error == ErrorCode.invalid_group_id
        assert (await join(c, "g", "made-up")).error == ErrorCode.unknown_member_id
        await stable_single(c, "g")
        other = await join(c, "g", protocols=[("sticky", b"")])
        assert other.error == ErrorCode.inconsistent_group_protocol
        wrong_type = await join(c, "g", protocol_type="connect")
        assert wrong_type.error == ErrorCode.inconsistent_group_protocol
        assert (await c.membership.sync("none", 1, "m", None, None, None, {})).error == (
            ErrorCode.unknown_member_id
        )

    run(scenario)


def test_session_timeout_and_leave(stack: Stack) -> None:
    async def scenario() -> None:
        c = stack.coordinator()
        a = await stable_single(c, "g")
        b_first = await join(c, "g", session=50)
        b_join = join(c, "g", b_first.member_id, session=50)
        await join(c, "g", a.member_id)
        b = await b_join
        # B never syncs nor heartbeats: it expires, and A has to rejoin alone.
        await until(
            lambda: (
                c.membership.heartbeat("g", b.generation, a.member_id, None)
                == ErrorCode.rebalance_in_progress
            )
        )
        assert b.member_id not in c.membership.describe("g")[1].members  # type: ignore[union-attr]
        a3 = await join(c, "g", a.member_id)
        assert a3.generation == 3 and len(a3.members) == 1
        error, per_member = c.membership.leave("g", [(a.member_id, None), ("ghost", None)])
        assert (error, per_member) == (
            ErrorCode.none,
            [ErrorCode.none, ErrorCode.unknown_member_id],
        )
        assert c.membership.describe("g")[1].state is GroupState.EMPTY  # type: ignore[union-attr]

    run(scenario)


def test_static_member_rejoins_without_rebalance(stack: Stack) -> None:
    async def scenario() -> None:
        c = stack.coordinator()
        a = await join(c, "g", instance="i-a")
        await c.membership.sync("g", 1, a.member_id, "i-a", None, None, {a.member_id: b"x"})
        again = await join(c, "g", instance="i-a")  # restarted: new member id, same instance
        assert again.error == ErrorCode.none and again.member_id != a.member_id
        assert again.generation == 1 and again.skip_assignment  # no new generation
        synced = await c.membership.sync("g", 1, again.member_id, "i-a", None, None, {})
        assert synced.assignment == b"x"
        assert c.membership.heartbeat("g", 1, a.member_id, "i-a") == ErrorCode.fenced_instance_id
        assert c.membership.describe("g")[1].state is GroupState.STABLE  # type: ignore[union-attr]

    run(scenario)


async def commit(
    c: GroupCoordinator,
    group: str,
    offsets: dict[tuple[str, int], int],
    generation: int = -1,
    member: str = "",
    retention_ms: int = -1,
) -> dict[tuple[str, int], ErrorCode]:
    result = c.offsets.commit_offsets(
        group,
        generation,
        member,
        None,
        [(t, p, o, 4, f"meta-{o}") for (t, p), o in offsets.items()],
        retention_ms,
    )
    return await result if isinstance(result, asyncio.Future) else result


def test_state_is_rebuilt_from_the_log(stack: Stack) -> None:
    async def scenario() -> None:
        c = stack.coordinator()
        a = await stable_single(c, "g")
        assert await commit(c, "g", {("t", 0): 10, ("t", 1): 20}, 1, a.member_id) == {
            ("t", 0): ErrorCode.none,
            ("t", 1): ErrorCode.none,
        }
        assert await commit(c, "g", {("t", 0): 11}, 1, a.member_id) == {("t", 0): ErrorCode.none}
        assert await commit(c, "simple", {("t", 2): 5}) == {("t", 2): ErrorCode.none}
        c.shutdown()

        reloaded = stack.coordinator()
        error, offsets = reloaded.offsets.fetch_offsets("g", None)
        assert error == ErrorCode.none
        assert {tp: (v.offset, v.leader_epoch, v.metadata) for tp, v in offsets.items()} == {
            ("t", 0): (11, 4, "meta-11"),
            ("t", 1): (20, 4, "meta-20"),
        }
        group = reloaded.membership.describe("g")[1]
        assert group is not None and group.state is GroupState.STABLE
        assert (group.generation, group.protocol_name, group.leader_id) == (1, "range", a.member_id)
        assert group.members[a.member_id].assignment == b"assignment-1"
        assert reloaded.membership.heartbeat("g", 1, a.member_id, None) == ErrorCode.none
        assert reloaded.offsets.fetch_offsets("simple", [("t", 2), ("t", 3)])[1][("t", 3)] is None
        reloaded.shutdown()

    run(scenario)


def test_commit_completes_only_once_replicated(stack: Stack) -> None:
    async def scenario() -> None:
        c = stack.coordinator()
        partition = stack.replicas.get(OFFSETS_TOPIC, partition_for("g", PARTITIONS))
        assert partition is not None
        partition.isr = [0, 1]  # a follower that has not caught up holds the HW back
        partition.followers[1] = FollowerState()
        pending = c.offsets.commit_offsets("g", -1, "", None, [("t", 0, 3, 4, None)])
        assert isinstance(pending, asyncio.Future) and not pending.done()
        assert c.offsets.fetch_offsets("g", [("t", 0)])[1][("t", 0)] is None
        partition.update_follower(1, partition.log.log_end_offset, 0)
        stack.purgatory.check((OFFSETS_TOPIC, partition.index))
        assert (await pending) == {("t", 0): ErrorCode.none}
        assert c.offsets.fetch_offsets("g", [("t", 0)])[1][("t", 0)].offset == 3  # type: ignore[union-attr]

    run(scenario)


def test_commit_rules(stack: Stack) -> None:
    async def scenario() -> None:
        c = stack.coordinator(max_metadata_bytes=4)
        a = await stable_single(c, "g")
        assert await commit(c, "g", {("t", 0): 1}, 1, "ghost") == {
            ("t", 0): ErrorCode.unknown_member_id
        }
        assert await commit(c, "g", {("t", 0): 1}, 7, a.member_id) == {
            ("t", 0): ErrorCode.illegal_generation
        }
        assert await commit(c, "nope", {("t", 0): 1}, 3, "m") == {
            ("t", 0): ErrorCode.illegal_generation
        }
        assert await commit(c, "g", {("t", 0): 12345}, 1, a.member_id) == {
            ("t", 0): ErrorCode.offset_metadata_too_large
        }  # "meta-12345" is over 4 bytes

    run(scenario)


def test_retention_and_group_deletion(stack: Stack) -> None:
    async def scenario() -> None:
        c = stack.coordinator(offsets_retention_ms=1000)
        await commit(c, "old", {("t", 0): 1})
        stack.clock[0] += 600
        await commit(c, "old", {("t", 1): 2})
        await commit(c, "doomed", {("t", 0): 9})
        stack.clock[0] += 600
        assert c.expire_offsets() == 1  # old's ("t", 0) only
        assert set(c.offsets.fetch_offsets("old", None)[1]) == {("t", 1)}

        a = await stable_single(c, "busy")
        deleted = await c.membership.delete_groups(["doomed", "busy", "missing"])
        assert deleted == {
            "doomed": ErrorCode.none,
            "busy": ErrorCode.non_empty_group,
            "missing": ErrorCode.group_id_not_found,
        }
        c.membership.leave("busy", [(a.member_id, None)])
        stack.clock[0] += 5000  # busy has been empty longer than retention
        c.expire_offsets()
        assert c.membership.describe("busy")[0] == ErrorCode.group_id_not_found
        c.shutdown()

        reloaded = stack.coordinator()
        assert reloaded.offsets.fetch_offsets("doomed", None)[1] == {}
        assert set(reloaded.offsets.fetch_offsets("old", None)[1]) == set()  # expired meanwhile
        assert [g.group_id for g in reloaded.membership.groups()] == []

    run(scenario)


def test_other_protocol_types_and_offset_delete(stack: Stack) -> None:
    async def scenario() -> None:
        c = stack.coordinator()
        connect = await join_new(
            c, "workers", protocol_type="connect", protocols=[("sessioned", b"worker")]
        )
        assert connect.protocol_type == "connect" and connect.protocol_name == "sessioned"

        sub = b"\x00\x00\x00\x00\x00\x01\x00\x01t\xff\xff\xff\xff"  # v0, topics ["t"]
        joined = await join_new(c, "g", protocols=[("range", sub)])
        await c.membership.sync("g", 1, joined.member_id, None, None, None, {})
        await commit(c, "g", {("t", 0): 1, ("u", 0): 2}, 1, joined.member_id)
        error, results = await c.offsets.delete_offsets("g", [("t", 0), ("u", 0)])
        assert error == ErrorCode.none
        assert results == {("t", 0): ErrorCode.group_subscribed_to_topic, ("u", 0): ErrorCode.none}
        assert set(c.offsets.fetch_offsets("g", None)[1]) == {("t", 0)}
        assert (await c.offsets.delete_offsets("ghost", []))[0] == ErrorCode.group_id_not_found

    run(scenario)


def test_not_coordinator_after_resign(stack: Stack) -> None:
    async def scenario() -> None:
        c = stack.coordinator()
        index = partition_for("g", PARTITIONS)
        first = await join(c, "g")
        parked = join(c, "g", first.member_id)
        c.on_resign(index)
        assert (await parked).error == ErrorCode.not_coordinator
        assert (await join(c, "g")).error == ErrorCode.not_coordinator
        assert c.offsets.fetch_offsets("g", None)[0] == ErrorCode.not_coordinator
        c.on_become_leader(index)
        assert (await join(c, "g")).error == ErrorCode.member_id_required

    run(scenario)


def test_deleted_topic_takes_its_offsets(stack: Stack) -> None:
    async def scenario() -> None:
        c = stack.coordinator()
        await commit(c, "g", {("t", 0): 1, ("t", 1): 2, ("u", 0): 3})
        c.on_topic_deleted("t")
        assert set(c.offsets.fetch_offsets("g", None)[1]) == {("u", 0)}
        c.shutdown()
        assert set(stack.coordinator().offsets.fetch_offsets("g", None)[1]) == {("u", 0)}

    run(scenario)


async def join_with_rebalance_timeout(
    c: GroupCoordinator, group: str, timeout_ms: int
) -> JoinResult:
    def attempt(member: str) -> asyncio.Future[JoinResult]:
        return c.membership.join(
            group,
            member,
            None,
            "client",
            "/h",
            "consumer",
            PROTOCOLS,
            SESSION,
            timeout_ms,
            require_known_member_id=True,
        )

    first = await attempt("")
    return await attempt(first.member_id)


def test_member_that_never_syncs_is_removed_after_the_rebalance_timeout(stack: Stack) -> None:
    async def scenario() -> None:
        c = stack.coordinator()
        joined = await join_with_rebalance_timeout(c, "g", 30)
        group = c.membership.describe("g")[1]
        assert group is not None and group.state is GroupState.COMPLETING_REBALANCE
        assert group.pending_sync == {joined.member_id}
        # Heartbeats keep its session alive; only the pending-sync timeout removes it.
        assert c.membership.heartbeat("g", 1, joined.member_id, None) == ErrorCode.none
        await until(lambda: not group.members)
        assert group.state is GroupState.EMPTY and group.generation == 2

    run(scenario)


def test_member_that_syncs_cancels_the_pending_sync_timeout(stack: Stack) -> None:
    async def scenario() -> None:
        c = stack.coordinator()
        joined = await join_with_rebalance_timeout(c, "g", 30)
        group = c.membership.describe("g")[1]
        assert group is not None and group.pending_sync_timer is not None
        synced = await c.membership.sync("g", 1, joined.member_id, None, None, None, {})
        assert synced.error == ErrorCode.none
        assert group.pending_sync_timer is None and not group.pending_sync
        assert group.state is GroupState.STABLE and joined.member_id in group.members

    run(scenario)


def subscription(*topics: str) -> bytes:
    """ConsumerProtocolSubscription v0 without user data."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


def test_commit_retention_time_and_unsubscribed_topics_expire(stack: Stack) -> None:
    async def scenario() -> None:
        c = stack.coordinator(offsets_retention_ms=1000)
        joined = await join_new(c, "g", protocols=[("range", subscription("t"))])
        await c.membership.sync("g", 1, joined.member_id, None, None, None, {})
        member = joined.member_id
        assert await commit(c, "g", {("t", 0): 1, ("u", 0): 2}, 1, member) == {
            ("t", 0): ErrorCode.none,
            ("u", 0): ErrorCode.none,
        }
        assert await commit(c, "g", {("u", 1): 3, ("t", 1): 3}, 1, member, retention_ms=300) == {
            ("u", 1): ErrorCode.none,
            ("t", 1): ErrorCode.none,
        }
        stack.clock[0] += 400
        # ("u", 1) asked for 300 ms; ("t", 1) too, but a stable group's subscribed topics
        # never expire; the rest is young.
        assert c.expire_offsets() == 1
        assert set(c.offsets.fetch_offsets("g", None)[1]) == {("t", 0), ("t", 1), ("u", 0)}
        stack.clock[0] += 1000
        # "u" is no longer subscribed by the stable group: it ages from its commit.
        assert c.expire_offsets() == 1
        assert set(c.offsets.fetch_offsets("g", None)[1]) == {("t", 0), ("t", 1)}
        assert await commit(c, "g", {("t", 2): 4}, 1, member, retention_ms=10_000) == {
            ("t", 2): ErrorCode.none
        }
        c.shutdown()
        reloaded = stack.coordinator()
        offsets = reloaded.offsets.fetch_offsets("g", None)[1]
        assert set(offsets) == {("t", 0), ("t", 1), ("t", 2)}
        assert offsets[("t", 2)].expire_timestamp == stack.clock[0] + 10_000  # type: ignore[union-attr]

    run(scenario)


def test_settings_from_broker_config() -> None:
    settings = Settings.from_config(
        BrokerConfig({"offsets.commit.timeout.ms": "1234", "offset.metadata.max.bytes": "99"})
    )
    assert (settings.commit_timeout_ms, settings.max_metadata_bytes) == (1234, 99)
    defaults = Settings.from_config(BrokerConfig({}))
    assert (defaults.commit_timeout_ms, defaults.max_metadata_bytes) == (5000, 4096)
