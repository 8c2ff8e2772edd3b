"""Where share-partition state lives (KIP-932's persister): the seam between the share-partition
leaders (``replica/``), the group coordinator's share groups (``coordinator/``) and the share
coordinator that keeps the state durable in ``__share_group_state``.

The callers only know this protocol; the broker (``server/``) gives them one implementation
that sends each call to the share coordinator of the share-partition (its own one when this
broker leads that ``__share_group_state`` partition, another broker's through
Initialize/Read/Write/Delete/ReadShareGroupStateSummary otherwise), retrying while the
coordinator moves or loads. Kafka's Persister interface carries the same five calls.

State is keyed by share-partition: (group id, topic id, partition). A state epoch counts the
share-partition's initializations (an offset reset starts a new one); the leader epoch is
that of the partition's leader writing, so a deposed leader cannot overwrite its successor.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from kio.schema.errors import ErrorCode

from gregor.replica.share_partition import StateBatch

__all__ = ["SharePersister", "ShareState", "ShareStateError", "UNINITIALIZED_OFFSET"]

# The start offset of a share-partition initialized without one: its first leader picks it by
# share.auto.offset.reset (InitializeShareGroupState's StartOffset -1).
UNINITIALIZED_OFFSET = -1


@dataclass(frozen=True, slots=True)
class ShareState:
    """One share-partition's durable state (ReadShareGroupState's answer; the summary has
    no batches)."""

    state_epoch: int
    leader_epoch: int
    start_offset: int  # UNINITIALIZED_OFFSET: not chosen yet
    batches: tuple[StateBatch, ...] = ()


class ShareStateError(Exception):
    """A call the share coordinator refused or that could not reach it: ``error`` is Kafka's
    code (FENCED_STATE_EPOCH, FENCED_LEADER_EPOCH, COORDINATOR_NOT_AVAILABLE, ...)."""

    def __init__(self, error: ErrorCode, message: str = "") -> None:
        super().__init__(message or error.name)
        self.error = error


class SharePersister(Protocol):
    """Every call raises ShareStateError when it fails; otherwise it is durable (committed
    in ``__share_group_state``) when it returns."""

    async def initialize(
        self,
        group_id: str,
        topic_id: uuid.UUID,
        partition: int,
        state_epoch: int,
        start_offset: int,
    ) -> None:
        """Start the share-partition's state over at ``start_offset`` (UNINITIALIZED_OFFSET
        or an offset), with no batches, under the new ``state_epoch``."""

    async def read(
        self, group_id: str, topic_id: uuid.UUID, partition: int, leader_epoch: int
    ) -> ShareState | None:
        """The state (None: never initialized nor written); records ``leader_epoch`` as the
        share-partition's leader epoch, fencing writes of older leaders."""

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
        """Merge ``batches`` into the state and move its start offset (-1: unchanged); a
        share-partition without state gets one. FENCED_STATE_EPOCH if ``state_epoch`` is
        older than the state's, FENCED_LEADER_EPOCH if ``leader_epoch`` is."""

    async def delete(self, group_id: str, topic_id: uuid.UUID, partition: int) -> None:
        """Forget the state (the group or its offsets for the topic were deleted)."""

    async def read_summary(
        self, group_id: str, topic_id: uuid.UUID, partition: int
    ) -> ShareState | None:
        """The state without its batches (DescribeShareGroupOffsets), without fencing."""
