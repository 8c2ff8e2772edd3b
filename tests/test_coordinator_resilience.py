"""Hostile joins, faults in coordinator timers and slow syncs, in-process over a real log.

The broker-level versions of these are in tests/test_group_hostile.py.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
import test_coordinator
from kio.schema.errors import ErrorCode
from test_coordinator import Stack, join, join_new, run, stable_single, until

from gregor.coordinator.group import Group, GroupState, Member

stack = test_coordinator.stack  # the fixture

BAD_PROTOCOLS = [
    [("range", b"a"), ("range", b"b")],  # a name twice: the reproduction
    [],
    [("range", b"a"), ("roundrobin", b""), ("roundrobin", b"")],
]


@pytest.mark.parametrize("protocols", BAD_PROTOCOLS)
def test_bad_protocol_lists_are_inconsistent_in_an_empty_group(
    stack: Stack, protocols: list[tuple[str, bytes]]
) -> None:
    async def scenario() -> None:
        c = stack.coordinator()
        result = await join(c, "g", protocols=protocols)
        assert result.error == ErrorCode.inconsistent_group_protocol
        error, group = c.membership.describe("g")
        assert group is None or not group.members
        assert group is None or group.state is GroupState.EMPTY

    run(scenario)


@pytest.mark.parametrize("protocols", BAD_PROTOCOLS)
def test_bad_protocol_lists_leave_a_stable_group_alone(
    stack: Stack, protocols: list[tuple[str, bytes]]
) -> None:
    async def scenario() -> None:
        c = stack.coordinator()
        a = await stable_single(c, "g")
        first = await join(c, "g", protocols=protocols)
        assert first.error == ErrorCode.inconsistent_group_protocol
        # The known member may not switch to a bad list either.
        again = await join(c, "g", a.member_id, protocols=protocols)
        assert again.error == ErrorCode.inconsistent_group_protocol
        assert c.membership.describe("g")[1].state is GroupState.STABLE  # type: ignore[union-attr]
        assert c.membership.heartbeat("g", a.generation, a.member_id, None) == ErrorCode.none

    run(scenario)


def test_empty_protocol_type_is_inconsistent(stack: Stack) -> None:
    async def scenario() -> None:
        c = stack.coordinator()
        result = await join(c, "g", protocol_type="")
        assert result.error == ErrorCode.inconsistent_group_protocol

    run(scenario)


def test_select_protocol_never_raises() -> None:
    group = Group("g")
    for i, protocols in enumerate([[("a", b"")], [("b", b"")]]):
        group.add(Member(f"m{i}", None, "c", "h", 1000, 1000, "consumer", protocols))
    assert group.select_protocol() is None
    group.members["m1"].protocols = [("b", b""), ("a", b"")]
    assert group.select_protocol() == "a"


def test_a_fault_in_the_join_completion_resets_the_group(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        c = stack.coordinator()
        a = await stable_single(c, "g")
        broken = Group.select_protocol

        def select_protocol(self: Group) -> str | None:
            raise StopIteration

        monkeypatch.setattr(Group, "select_protocol", select_protocol)
        rejoin = await join(c, "g", a.member_id)
        assert rejoin.error == ErrorCode.unknown_member_id
        group = c.membership.describe("g")[1]
        assert group is not None and group.state is GroupState.EMPTY and not group.members
        monkeypatch.setattr(Group, "select_protocol", broken)
        # The group works again: a new member joins and becomes stable.
        again = await stable_single(c, "g")
        assert again.generation > a.generation

    with caplog.at_level(logging.ERROR, logger="gregor.coordinator.membership"):
        run(scenario)
    lines = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(lines) == 1 and "StopIteration" in lines[0].getMessage()
    assert lines[0].exc_info is None  # one line, no traceback


def test_a_fault_in_the_session_timer_resets_the_group(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        c = stack.coordinator()

        def remove(*args: object) -> None:
            raise RuntimeError("boom")

        monkeypatch.setattr(c.membership, "_remove_member_and_update", remove)
        a = await join_new(c, "g", session=50)
        synced = await c.membership.sync("g", a.generation, a.member_id, None, None, None, {})
        assert synced.error == ErrorCode.none
        group = c.membership.describe("g")[1]
        assert group is not None
        # The member stops heartbeating; removing it fails, and the group recovers.
        await until(lambda: group.state is GroupState.EMPTY)
        assert not group.members and group.generation == a.generation + 1

    run(scenario)


def test_a_slow_sync_rearms_the_session(stack: Stack) -> None:
    """Kafka re-schedules the session expiry when it propagates the assignment: a
    follower parked in SyncGroup past its session timeout is Stable afterwards and
    expires only if it then stops heartbeating."""

    async def scenario() -> None:
        c = stack.coordinator()
        session = 100
        a = await stable_single(c, "g")
        b_first = await join(c, "g", session=session)
        b_join = join(c, "g", b_first.member_id, session=session)
        a2 = await join(c, "g", a.member_id)
        b = await b_join
        b_sync = c.membership.sync("g", b.generation, b.member_id, None, None, None, {})
        # B waits in SyncGroup for three of its session timeouts, while its timer fires.
        await asyncio.sleep(3 * session / 1000)
        assert not b_sync.done()
        await c.membership.sync("g", a2.generation, a.member_id, None, None, None, {})
        assert (await b_sync).error == ErrorCode.none
        group = c.membership.describe("g")[1]
        assert group is not None and group.state is GroupState.STABLE
        assert b.member_id in group.members
        # B never heartbeats again: it is removed after its session timeout.
        await until(lambda: b.member_id not in group.members)

    run(scenario)
