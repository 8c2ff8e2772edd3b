"""Share group membership in-process (over a real ReplicaManager and log on disk, as
tests/test_coordinator.py): the share-partitions' state initialized and deleted through the
persister seam, partitions added and topics deleted, and the record of initialized
partitions (type 15) reloaded with the group."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from gregor.coordinator.consumer_membership import GroupTiming
from gregor.coordinator.coordinator import GroupCoordinator, Settings
from gregor.coordinator.share_membership import ShareHeartbeatRequest, ShareHeartbeatResult
from gregor.replica.share_persister import UNINITIALIZED_OFFSET, ShareState
from tests.share_memory_persister import MemoryPersister
from tests.test_coordinator import PARTITIONS, Stack, run, stack, until

__all__ = ["stack"]  # the fixture, shared with tests/test_coordinator.py

TIMING = GroupTiming(45_000, 5_000)
TOPIC_ID = uuid.UUID(int=7)


@dataclass
class Topic:
    topic_id: uuid.UUID
    partitions: range


def coordinator(stack: Stack, persister: MemoryPersister) -> GroupCoordinator:
    c = GroupCoordinator(
        Settings(partitions=PARTITIONS),
        stack.replicas,
        stack.purgatory,
        now_ms=lambda: stack.clock[0],
        share_persister=persister,
    )
    for i in range(PARTITIONS):
        c.on_become_leader(i)
    return c


async def beat(
    c: GroupCoordinator, group: str, member_id: str, epoch: int, partitions: int = 4
) -> ShareHeartbeatResult:
    result = c.share_membership.heartbeat(
        ShareHeartbeatRequest(
            group, member_id, epoch, None, ("t",) if epoch == 0 else None, "", ""
        ),
        TIMING,
        {"t": Topic(TOPIC_ID, range(partitions))},
    )
    if not isinstance(result, ShareHeartbeatResult):
        result = await result
    assert result.error == ErrorCode.none, result
    return result


def initialized(c: GroupCoordinator, group: str) -> set[int]:
    share_group = c.share_membership.get(group)
    assert share_group is not None
    info = share_group.initialized.get(TOPIC_ID)
    return set() if info is None else set(info.partitions)


def test_new_partitions_are_initialized_and_recorded(stack: Stack) -> None:
    persister = MemoryPersister()

    async def scenario() -> None:
        c = coordinator(stack, persister)
        joined = await beat(c, "g", "m1", 0)
        assert joined.assignment == {TOPIC_ID: frozenset(range(4))}  # assignment does not wait
        await until(lambda: initialized(c, "g") == set(range(4)))
        assert sorted(persister.initialized) == [
            ("g", TOPIC_ID, p, 0, UNINITIALIZED_OFFSET) for p in range(4)
        ]
        # Two partitions added: a new epoch assigns and initializes them.
        grown = await beat(c, "g", "m1", joined.member_epoch, partitions=6)
        assert grown.member_epoch == joined.member_epoch + 1
        assert grown.assignment == {TOPIC_ID: frozenset(range(6))}
        await until(lambda: initialized(c, "g") == set(range(6)))
        assert len(persister.initialized) == 6
        # The record of them comes back with the group.
        for i in range(PARTITIONS):
            c.on_resign(i)
        reloaded = coordinator(stack, persister)
        await until(lambda: reloaded.share_membership.get("g") is not None)
        assert initialized(reloaded, "g") == set(range(6))
        c.shutdown()
        reloaded.shutdown()

    run(scenario)


def test_existing_state_is_kept_and_failures_are_retried(stack: Stack) -> None:
    persister = MemoryPersister(failing={1})
    persister.states["g", TOPIC_ID, 0] = ShareState(0, 3, 42)  # its leader was first

    async def scenario() -> None:
        c = coordinator(stack, persister)
        joined = await beat(c, "g", "m1", 0)
        await until(lambda: initialized(c, "g") == {0, 2, 3})
        assert persister.states["g", TOPIC_ID, 0].start_offset == 42
        share_group = c.share_membership.get("g")
        assert share_group is not None and not share_group.initializing
        persister.failing.clear()
        await beat(c, "g", "m1", joined.member_epoch)
        await until(lambda: initialized(c, "g") == set(range(4)))
        c.shutdown()

    run(scenario)


def test_deletion_of_the_group_and_of_its_topic(stack: Stack) -> None:
    persister = MemoryPersister()

    async def scenario() -> None:
        c = coordinator(stack, persister)
        joined = await beat(c, "g", "m1", 0)
        await beat(c, "h", "m1", 0)
        await until(lambda: initialized(c, "g") == initialized(c, "h") == set(range(4)))
        await beat(c, "g", "m1", -1)
        share_group = c.share_membership.get("g")
        assert share_group is not None and joined.member_epoch > 0
        assert await c.share_membership.delete(share_group) == ErrorCode.none
        assert sorted(persister.deleted) == [("g", TOPIC_ID, p) for p in range(4)]
        assert c.share_membership.get("g") is None
        # A deleted topic leaves the record of initialized share-partitions.
        c.on_topic_deleted("t")
        assert initialized(c, "h") == set()
        c.shutdown()

    run(scenario)
