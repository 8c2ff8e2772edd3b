"""The SharePersister contract (replica/share_persister.py) in memory, for the in-process
tests of its callers: the group coordinator (initialize, read_summary, delete) and the
share-partition manager (read, write)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from gregor.replica.share_partition import StateBatch
from gregor.replica.share_persister import ShareState, ShareStateError


@dataclass
class MemoryPersister:
    """Each share-partition's state, fencing writes of older leader epochs; what was
    initialized and deleted, and how many writes succeeded. Initializing a ``failing``
    partition answers COORDINATOR_NOT_AVAILABLE; while ``fail`` is set, every write fails
    with that error."""

    states: dict[tuple[str, uuid.UUID, int], ShareState] = field(default_factory=dict)
    initialized: list[tuple[str, uuid.UUID, int, int, int]] = field(default_factory=list)
    deleted: list[tuple[str, uuid.UUID, int]] = field(default_factory=list)
    writes: int = 0
    failing: set[int] = field(default_factory=set)
    fail: ErrorCode | None = None

    async def initialize(
        self,
        group_id: str,
        topic_id: uuid.UUID,
        partition: int,
        state_epoch: int,
        start_offset: int,
    ) -> None:
        if partition in self.failing:
            raise ShareStateError(ErrorCode.coordinator_not_available)
        self.initialized.append((group_id, topic_id, partition, state_epoch, start_offset))
        self.states[group_id, topic_id, partition] = ShareState(state_epoch, -1, start_offset)

    async def read(
        self, group_id: str, topic_id: uuid.UUID, partition: int, leader_epoch: int
    ) -> ShareState | None:
        key = (group_id, topic_id, partition)
        state = self.states.get(key)
        if state is not None:
            state = self.states[key] = ShareState(
                state.state_epoch, leader_epoch, state.start_offset, state.batches
            )
        return state

    async def write(
        self,
        group_id: str,
        topic_id: uuid.UUID,
        partition: int,
        state_epoch: int,
        leader_epoch: int,
        start_offset: int,
        batches: Sequence[StateBatch],
    ) -> None:
        await asyncio.sleep(0)  # as a real persister's, a write lets other tasks run
        if self.fail is not None:
            raise ShareStateError(self.fail)
        key = (group_id, topic_id, partition)
        state = self.states.get(key)
        if state is not None and leader_epoch < state.leader_epoch:
            raise ShareStateError(ErrorCode.fenced_leader_epoch)
        self.writes += 1
        self.states[key] = ShareState(state_epoch, leader_epoch, start_offset, tuple(batches))

    async def delete(self, group_id: str, topic_id: uuid.UUID, partition: int) -> None:
        self.deleted.append((group_id, topic_id, partition))
        self.states.pop((group_id, topic_id, partition), None)

    async def read_summary(
        self, group_id: str, topic_id: uuid.UUID, partition: int
    ) -> ShareState | None:
        return self.states.get((group_id, topic_id, partition))
