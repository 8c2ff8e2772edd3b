"""The share-partition states of one ``__share_group_state`` partition, as Kafka's
ShareCoordinatorShard keeps them: pure state and decisions, no I/O.

Each operation checks the request (Kafka's order of errors) and returns the record to write;
the state changes only by ``replay`` of a committed record (or of the log, when loading).
A write is a ShareUpdate holding the request's batches, merged into the state on replay,
except the first write of a share-partition and every write after
``share.coordinator.snapshot.update.records.per.snapshot`` updates, which are ShareSnapshots
of the whole state. Initialization writes a fresh ShareSnapshot; deletion a tombstone.
A read by a newer leader records its leader epoch (a ShareSnapshot or ShareUpdate without
batches), fencing the writes of older leaders.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Sequence

from kio.schema.errors import ErrorCode

from gregor.coordinator.share_batches import combine
from gregor.coordinator.share_state_records import (
    ShareSnapshotKey,
    ShareSnapshotValue,
    ShareStateKey,
    ShareStateValue,
    ShareUpdateKey,
    ShareUpdateValue,
    StateBatch,
)

__all__ = ["NO_STATE", "Record", "ShareKey", "ShareShard"]

ShareKey = tuple[str, uuid.UUID, int]  # group id, topic id, partition
Record = tuple[ShareStateKey, ShareStateValue | None]

UNINITIALIZED = -1  # a start offset or epoch the request leaves unchanged or not chosen
# The delivery states a batch may persist: AVAILABLE, ACKNOWLEDGED, ARCHIVED (never ACQUIRED).
PERSISTED_STATES = frozenset({0, 2, 4})
# What a share-partition without state reads as (Kafka's PartitionFactory defaults).
NO_STATE = ShareSnapshotValue(0, 0, UNINITIALIZED, UNINITIALIZED, 0, 0, ())


class ShareShard:
    def __init__(self, updates_per_snapshot: int, partition_exists: Callable[[ShareKey], bool]):
        self._updates_per_snapshot = updates_per_snapshot
        self._partition_exists = partition_exists
        self.states: dict[ShareKey, ShareSnapshotValue] = {}
        # The highest leader epoch seen (an initialization writes none).
        self.leader_epochs: dict[ShareKey, int] = {}
        self._updates: dict[ShareKey, int] = {}  # ShareUpdates since the last ShareSnapshot
        # Where each share-partition's last ShareSnapshot is: the log below the lowest of
        # them is redundant (Kafka's ShareCoordinatorOffsetsManager).
        self._snapshot_offsets: dict[ShareKey, int] = {}
        self._end = 0  # the offset after the last record replayed

    # -- replay -----------------------------------------------------------------------------
    def replay(self, key: ShareStateKey, value: ShareStateValue | None, offset: int) -> None:
        """Apply the record at ``offset`` of the log."""
        self._end = max(self._end, offset + 1)
        k = (key.group_id, key.topic_id, key.partition)
        if value is None:
            if isinstance(key, ShareSnapshotKey):
                self.states.pop(k, None)
                self.leader_epochs.pop(k, None)
                self._updates.pop(k, None)
                self._snapshot_offsets.pop(k, None)
            return
        self._note_leader_epoch(k, value.leader_epoch)
        if isinstance(value, ShareSnapshotValue):
            self.states[k] = value
            self._updates[k] = 0
            self._snapshot_offsets[k] = offset
            return
        current = self.states.get(k)
        if current is None:  # an update without its snapshot: start from what it holds
            current = dataclasses.replace(NO_STATE, snapshot_epoch=value.snapshot_epoch)
            self._snapshot_offsets[k] = offset
        start = current.start_offset if value.start_offset == UNINITIALIZED else value.start_offset
        self.states[k] = dataclasses.replace(
            current,
            start_offset=start,
            leader_epoch=(
                current.leader_epoch if value.leader_epoch == UNINITIALIZED else value.leader_epoch
            ),
            state_batches=combine(current.state_batches, value.state_batches, start),
        )
        self._updates[k] = self._updates.get(k, 0) + 1

    def redundant_offset(self) -> int:
        """The offset below which the log holds nothing the state needs: the oldest of the
        share-partitions' last snapshots, else the end of what was replayed."""
        return min(self._snapshot_offsets.values(), default=self._end)

    def _note_leader_epoch(self, key: ShareKey, leader_epoch: int) -> None:
        if leader_epoch > self.leader_epochs.get(key, UNINITIALIZED):
            self.leader_epochs[key] = leader_epoch

    # -- operations -------------------------------------------------------------------------
    def write(
        self,
        key: ShareKey,
        state_epoch: int,
        leader_epoch: int,
        start_offset: int,
        batches: Sequence[StateBatch],
        now_ms: int,
    ) -> ErrorCode | Record:
        if key[2] < 0 or not _valid(start_offset, batches):
            return ErrorCode.invalid_request
        recorded = self.leader_epochs.get(key)
        if leader_epoch != UNINITIALIZED and recorded is not None and recorded > leader_epoch:
            return ErrorCode.fenced_leader_epoch
        current = self.states.get(key)
        if (
            state_epoch != UNINITIALIZED
            and current is not None
            and current.state_epoch > state_epoch
        ):
            return ErrorCode.fenced_state_epoch
        if not self._partition_exists(key):
            return ErrorCode.unknown_topic_or_partition
        return self._record(key, state_epoch, leader_epoch, start_offset, batches, now_ms)

    def read(self, key: ShareKey, leader_epoch: int, now_ms: int) -> ErrorCode | Record | None:
        """The error, or the record that notes a newer leader's epoch (None: nothing to
        write); the state to answer is ``state(key)``, read once the record is applied."""
        if key[2] < 0:
            return ErrorCode.invalid_request
        recorded = self.leader_epochs.get(key)
        if recorded is not None and recorded > leader_epoch:
            return ErrorCode.fenced_leader_epoch
        if not self._partition_exists(key):
            return ErrorCode.unknown_topic_or_partition
        if leader_epoch == UNINITIALIZED or recorded == leader_epoch:
            return None
        state = self.state(key)
        return self._record(key, state.state_epoch, leader_epoch, state.start_offset, (), now_ms)

    def initialize(
        self, key: ShareKey, state_epoch: int, start_offset: int, now_ms: int
    ) -> ErrorCode | Record:
        """A fresh ShareSnapshot: the start offset, no batches, the new state epoch."""
        if key[2] < 0 or not _valid(start_offset, ()):
            return ErrorCode.invalid_request
        current = self.states.get(key)
        if current is not None and current.state_epoch > state_epoch:
            return ErrorCode.fenced_state_epoch
        if not self._partition_exists(key):
            return ErrorCode.unknown_topic_or_partition
        snapshot_epoch = 0 if current is None else current.snapshot_epoch + 1
        value = ShareSnapshotValue(
            snapshot_epoch, state_epoch, UNINITIALIZED, start_offset, now_ms, now_ms, ()
        )
        return ShareSnapshotKey(*key), value

    def delete(self, key: ShareKey) -> ErrorCode | Record | None:
        """The tombstone (None: no state to delete)."""
        if key[2] < 0:
            return ErrorCode.invalid_request
        if key not in self.states:
            return None
        return ShareSnapshotKey(*key), None

    def summary(self, key: ShareKey) -> ErrorCode | tuple[int, int, int]:
        """(state epoch, leader epoch, start offset), unfenced."""
        if key[2] < 0:
            return ErrorCode.invalid_request
        if not self._partition_exists(key):
            return ErrorCode.unknown_topic_or_partition
        state = self.state(key)
        return state.state_epoch, self.leader_epochs.get(key, UNINITIALIZED), state.start_offset

    def state(self, key: ShareKey) -> ShareSnapshotValue:
        return self.states.get(key, NO_STATE)

    # -- records ----------------------------------------------------------------------------
    def _record(
        self,
        key: ShareKey,
        state_epoch: int,
        leader_epoch: int,
        start_offset: int,
        batches: Sequence[StateBatch],
        now_ms: int,
    ) -> Record:
        current = self.states.get(key)
        if current is None:
            value: ShareStateValue = ShareSnapshotValue(
                0,
                state_epoch,
                leader_epoch,
                start_offset,
                now_ms,
                now_ms,
                combine((), batches, start_offset),
            )
            return ShareSnapshotKey(*key), value
        if self._updates.get(key, 0) >= self._updates_per_snapshot:
            start = current.start_offset if start_offset == UNINITIALIZED else start_offset
            value = ShareSnapshotValue(
                current.snapshot_epoch + 1,
                current.state_epoch if state_epoch == UNINITIALIZED else state_epoch,
                current.leader_epoch if leader_epoch == UNINITIALIZED else leader_epoch,
                start,
                current.create_timestamp,
                now_ms,
                combine(current.state_batches, batches, start),
            )
            return ShareSnapshotKey(*key), value
        value = ShareUpdateValue(
            current.snapshot_epoch, leader_epoch, start_offset, combine((), batches, start_offset)
        )
        return ShareUpdateKey(*key), value


def _valid(start_offset: int, batches: Sequence[StateBatch]) -> bool:
    """A start offset and batches a share-partition leader can load (a client may send any):
    anything else is refused with INVALID_REQUEST rather than persisted."""
    return start_offset >= UNINITIALIZED and all(
        0 <= b.first_offset <= b.last_offset
        and b.delivery_state in PERSISTED_STATES
        and b.delivery_count >= 0
        for b in batches
    )
