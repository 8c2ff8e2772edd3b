"""The share groups' offsets, as the admin APIs see them (KIP-932): the start offset of each
share-partition (DescribeShareGroupOffsets), set anew (AlterShareGroupOffsets) or forgotten
(DeleteShareGroupOffsets).

Kafka 4.1's GroupCoordinatorService is the model. The state itself is the share
coordinator's, reached through the persister: describing reads its summaries; altering
initializes the share-partitions again at the new start offset under a new state epoch (so a
leader still holding the old state is fenced on its next write) and records them as
initialized (record type 15); deleting deletes their state and drops the topics from that
record. Altering and deleting need an Empty group (NON_EMPTY_GROUP otherwise). Altering
the offsets of a group id no group has creates an empty share group, as Kafka 4.2's
GroupMetadataManager.alterShareGroupOffsets does (getOrMaybeCreateShareGroup): it is
persisted by its share-partitions' record, so ListGroups lists it and it outlives a restart.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from gregor.coordinator.runtime import CoordinatorRuntime
from gregor.coordinator.share_group import ShareGroup, record
from gregor.coordinator.share_membership import ShareMembership
from gregor.coordinator.share_records import (
    ShareGroupStatePartitionMetadataKey,
    TopicInfo,
    TopicPartitionsInfo,
)
from gregor.replica.share_persister import SharePersister, ShareState, ShareStateError

__all__ = ["ShareOffsets", "ShareOffsetsResult"]

SharePartition = tuple[uuid.UUID, int]


@dataclass(slots=True)
class ShareOffsetsResult:
    """A group-level error (with its message), else the outcome per share-partition (or per
    topic: partition -1): the state read (describe) or the error (alter, delete)."""

    error: ErrorCode = ErrorCode.none
    message: str | None = None
    states: dict[SharePartition, ShareState | None] = field(default_factory=dict)
    errors: dict[SharePartition, ErrorCode] = field(default_factory=dict)


class ShareOffsets:
    def __init__(
        self,
        membership: ShareMembership,
        runtime: CoordinatorRuntime,
        persister: SharePersister | None,
        now_ms: Callable[[], int],
    ) -> None:
        self._membership = membership
        self._now = now_ms
        self._runtime = runtime
        self._persister = persister

    async def describe(
        self, group_id: str, partitions: Mapping[uuid.UUID, frozenset[int]] | None
    ) -> ShareOffsetsResult:
        """The state summary of each share-partition (None: it has none); ``partitions``
        None: those the group has initialized, which needs the group to exist."""
        error = self._runtime.owner_error(group_id)
        if error is not None:
            return ShareOffsetsResult(error)
        if partitions is None:
            error, message, group = self._membership.describe(group_id)
            if group is None:
                return ShareOffsetsResult(error, message)
            partitions = {t: info.partitions for t, info in group.initialized.items()}
        persister = self._require_persister()
        result = ShareOffsetsResult()
        try:
            for topic, parts in partitions.items():
                for p in sorted(parts):
                    result.states[topic, p] = await persister.read_summary(group_id, topic, p)
        except ShareStateError as e:
            return ShareOffsetsResult(e.error, str(e))
        return result

    async def alter(
        self, group_id: str, offsets: Mapping[uuid.UUID, tuple[str, Mapping[int, int]]]
    ) -> ShareOffsetsResult:
        """``offsets``: by topic id, its name and the new start offset of each partition."""
        group, result = self._empty_group(group_id)
        created = False
        if group is None:
            if result.error != ErrorCode.group_id_not_found or not self._membership.unused(
                group_id
            ):
                return result
            if not offsets:  # nothing to initialize, so no record to make a group of
                return ShareOffsetsResult()
            group, created, result = self._membership.create(group_id), True, ShareOffsetsResult()
        persister = self._require_persister()
        done: dict[uuid.UUID, set[int]] = {}
        for topic, (_, starts) in offsets.items():
            for p, start in sorted(starts.items()):
                try:
                    summary = await persister.read_summary(group_id, topic, p)
                    # Past the epoch 0 the group's own initialization uses, which may
                    # still be under way: that one is fenced rather than undoing this.
                    epoch = 1 if summary is None else summary.state_epoch + 1
                    await persister.initialize(group_id, topic, p, epoch, start)
                except ShareStateError as e:
                    result.errors[topic, p] = e.error
                    continue
                result.errors[topic, p] = ErrorCode.none
                done.setdefault(topic, set()).add(p)
        if not self._still(group):
            return ShareOffsetsResult(ErrorCode.coordinator_not_available)
        if created and not done:  # never written: gone, unless a member joined meanwhile
            if group.is_empty():
                self._membership.forget(group)
            return result
        now = self._now()
        for topic, parts in done.items():
            before = group.initialized.get(topic)
            initializing = group.initializing.pop(topic, None)
            if initializing is not None and initializing.partitions - parts:
                group.initializing[topic] = TopicPartitionsInfo(
                    topic,
                    initializing.topic_name,
                    initializing.partitions - parts,
                    initializing.create_timestamp,
                )
            group.initialized[topic] = TopicPartitionsInfo(
                topic,
                offsets[topic][0],
                frozenset(parts) | (before.partitions if before else frozenset()),
                before.create_timestamp if before else now,
            )
        if done:
            error = await self._write_state_partitions(group)
            if error != ErrorCode.none:
                return ShareOffsetsResult(error)
        return result

    async def delete(self, group_id: str, topics: Mapping[uuid.UUID, str]) -> ShareOffsetsResult:
        """Forget the state of the topics' share-partitions (errors by topic, partition -1):
        a topic the group has no state for is UNKNOWN_TOPIC_OR_PARTITION. The topics are
        recorded as being deleted first, so a coordinator taking over knows of them."""
        group, result = self._empty_group(group_id)
        if group is None:
            return result
        persister = self._require_persister()
        doomed: dict[uuid.UUID, frozenset[int]] = {}
        for topic, name in topics.items():
            parts = frozenset(p for t, p in group.known_partitions() if t == topic)
            if not parts:
                result.errors[topic, -1] = ErrorCode.unknown_topic_or_partition
                continue
            doomed[topic] = parts
            group.initializing.pop(topic, None)
            group.initialized.pop(topic, None)
            group.deleting[topic] = TopicInfo(topic, name)
        if not doomed:
            return result
        error = await self._write_state_partitions(group)
        if error != ErrorCode.none:
            return ShareOffsetsResult(error)
        for topic, parts in doomed.items():
            try:
                for p in sorted(parts):
                    await persister.delete(group_id, topic, p)
            except ShareStateError as e:
                result.errors[topic, -1] = e.error
                continue
            result.errors[topic, -1] = ErrorCode.none
            group.deleting.pop(topic, None)
        if not self._still(group):
            return ShareOffsetsResult(ErrorCode.coordinator_not_available)
        error = await self._write_state_partitions(group)
        if error != ErrorCode.none:
            return ShareOffsetsResult(error)
        return result

    def _empty_group(self, group_id: str) -> tuple[ShareGroup | None, ShareOffsetsResult]:
        error, message, group = self._membership.describe(group_id)
        if group is None:
            return None, ShareOffsetsResult(error, message)
        if not group.is_empty():
            return None, ShareOffsetsResult(
                ErrorCode.non_empty_group, f"The share group {group_id} is not empty."
            )
        return group, ShareOffsetsResult()

    def _still(self, group: ShareGroup) -> bool:
        """The group is still this coordinator's (its partition may have moved meanwhile)."""
        return self._membership.get(group.group_id) is group

    def _require_persister(self) -> SharePersister:
        assert self._persister is not None, "share groups run with a persister"
        return self._persister

    def _write_state_partitions(self, group: ShareGroup) -> asyncio.Future[ErrorCode]:
        future: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()

        def done(error: ErrorCode) -> None:
            if not future.done():
                future.set_result(error)

        self._runtime.write_records(
            group.group_id,
            [record(ShareGroupStatePartitionMetadataKey(group.group_id), group.state_partitions())],
            done,
        )
        return future
