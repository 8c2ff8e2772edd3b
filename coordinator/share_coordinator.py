"""The share coordinator (KIP-932): the durable state of share-partitions, keyed (group,
topic id, partition), in the ``__share_group_state`` partitions this broker leads.

It follows those partitions' leadership as the transaction coordinator follows
``__transaction_state``'s: becoming leader loads the partition (the last ShareSnapshot of
each share-partition and the ShareUpdates after it; COORDINATOR_LOAD_IN_PROGRESS meanwhile),
resigning forgets it (NOT_COORDINATOR). The decisions are ``share_shard.py``'s; here each
record is appended and the call answered once it is committed and applied. The calls of one
share-partition run one at a time, so each decides on the state its predecessor left.

The topic's retention is infinite (as Kafka's): instead, ``prune`` deletes what lies below
the oldest last snapshot of a partition's share-partitions, every
share.coordinator.state.topic.prune.interval.ms. As in Kafka 4.1 before its cold-partition
snapshots, a share-partition that stops being written holds its partition's log back.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from gregor.coordinator.loader import PartitionLoader
from gregor.coordinator.partitions import CoordinatorPartitions
from gregor.coordinator.records import partition_for
from gregor.coordinator.share_shard import Record, ShareKey, ShareShard
from gregor.coordinator.share_state_records import (
    SHARE_GROUP_STATE_TOPIC,
    StateBatch,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from gregor.replica.manager import ReplicaManager
from gregor.replica.purgatory import Purgatory
from gregor.replica.share_partition import StateBatch as PersistedBatch
from gregor.replica.share_persister import ShareState, ShareStateError

__all__ = ["ShareCoordinator", "ShareCoordinatorSettings", "coordinator_key"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ShareCoordinatorSettings:
    partitions: int = 50
    updates_per_snapshot: int = 500
    write_timeout_ms: int = 5000
    prune_interval_ms: int = 300_000

    @classmethod
    def from_config(cls, config: Any) -> ShareCoordinatorSettings:
        """From a BrokerConfig (Kafka's ShareCoordinatorConfig keys)."""
        return cls(
            partitions=config["share.coordinator.state.topic.num.partitions"],
            updates_per_snapshot=config["share.coordinator.snapshot.update.records.per.snapshot"],
            write_timeout_ms=config["share.coordinator.write.timeout.ms"],
            prune_interval_ms=config["share.coordinator.state.topic.prune.interval.ms"],
        )


def coordinator_key(group_id: str, topic_id: uuid.UUID, partition: int) -> str:
    """Kafka's SharePartitionKey.asCoordinatorKey: "<group>:<topic id>:<partition>", the
    topic id as Kafka prints a Uuid (URL-safe base64, unpadded); FindCoordinator's key type
    2 and the partition's hash."""
    topic = base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")
    return f"{group_id}:{topic}:{partition}"


def to_persisted(batches: Sequence[StateBatch]) -> tuple[PersistedBatch, ...]:
    return tuple(
        PersistedBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
        for b in batches
    )


class ShareCoordinator:
    def __init__(
        self,
        settings: ShareCoordinatorSettings,
        replicas: ReplicaManager,
        append_purgatory: Purgatory[Any],
        now_ms: Callable[[], int],
        partition_exists: Callable[[uuid.UUID, int], bool],
    ) -> None:
        self.settings = settings
        self._replicas = replicas
        self._now = now_ms
        self._partition_exists = partition_exists
        self.log = CoordinatorPartitions(
            SHARE_GROUP_STATE_TOPIC, replicas, append_purgatory, settings.write_timeout_ms, now_ms
        )
        self._shards: dict[int, ShareShard] = {}
        # One call at a time per share-partition: (lock, callers holding or awaiting it).
        self._locks: dict[ShareKey, tuple[asyncio.Lock, list[int]]] = {}

    # -- ownership --------------------------------------------------------------------------
    def partition_for(self, group_id: str, topic_id: uuid.UUID, partition: int) -> int:
        return partition_for(
            coordinator_key(group_id, topic_id, partition), self.settings.partitions
        )

    def partition_for_key(self, key: str) -> int:
        """The partition of a FindCoordinator key (any string hashes somewhere)."""
        return partition_for(key, self.settings.partitions)

    def on_become_leader(self, index: int) -> None:
        if index in self.log.partitions():
            return
        partition = self.log.get(index)
        if partition is None:
            return
        shard = ShareShard(
            self.settings.updates_per_snapshot, lambda k: self._partition_exists(k[1], k[2])
        )

        def replay(key: bytes, value: bytes | None) -> None:
            k = decode_key(key)
            shard.replay(k, None if value is None else decode_value(k, value), loader.record_offset)

        def loaded() -> None:
            self._shards[index] = shard
            if shard.states:
                logger.info(
                    "Loaded %d share-partition state(s) from %s-%d",
                    len(shard.states),
                    SHARE_GROUP_STATE_TOPIC,
                    index,
                )

        loader = PartitionLoader(partition, replay)
        self.log.load(index, loader, loaded)

    def on_resign(self, index: int) -> None:
        self._shards.pop(index, None)
        self.log.unload(index)

    def prune(self, _now_ms: int) -> int:
        """Delete the records of the partitions led that no state needs any more (below
        the oldest of their share-partitions' last snapshots), as Kafka's coordinator does
        every share.coordinator.state.topic.prune.interval.ms; the records deleted."""
        deleted = 0
        for index, shard in list(self._shards.items()):
            partition = self.log.get(index)
            if partition is None or not partition.is_leader:
                continue
            if not partition.log.config.delete_enabled:  # an operator made it compacted
                continue
            offset = min(shard.redundant_offset(), partition.high_watermark)
            start = partition.log.log_start_offset
            if offset > start:
                partition.delete_records(offset)
                self._replicas.on_log_start_moved(partition)  # followers follow
                deleted += offset - start
        return deleted

    def shutdown(self) -> None:
        for index in self.log.partitions():
            self.on_resign(index)

    # -- the five calls (each raises ShareStateError) ----------------------------------------
    async def initialize(
        self,
        group_id: str,
        topic_id: uuid.UUID,
        partition: int,
        state_epoch: int,
        start_offset: int,
    ) -> None:
        key = (group_id, topic_id, partition)
        async with self._exclusive(key):
            index, shard = self._shard(key)
            await self._write(
                index, shard, shard.initialize(key, state_epoch, start_offset, self._now())
            )

    async def read(
        self, group_id: str, topic_id: uuid.UUID, partition: int, leader_epoch: int
    ) -> ShareState:
        key = (group_id, topic_id, partition)
        async with self._exclusive(key):
            index, shard = self._shard(key)
            outcome = shard.read(key, leader_epoch, self._now())
            if outcome is not None:
                await self._write(index, shard, outcome)
            state = shard.state(key)
            return ShareState(
                state.state_epoch,
                state.leader_epoch,
                state.start_offset,
                to_persisted(state.state_batches),
            )

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
        key = (group_id, topic_id, partition)
        async with self._exclusive(key):
            index, shard = self._shard(key)
            outcome = shard.write(
                key, state_epoch, leader_epoch, start_offset, batches, self._now()
            )
            await self._write(index, shard, outcome)

    async def delete(self, group_id: str, topic_id: uuid.UUID, partition: int) -> None:
        key = (group_id, topic_id, partition)
        async with self._exclusive(key):
            index, shard = self._shard(key)
            outcome = shard.delete(key)
            if outcome is not None:
                await self._write(index, shard, outcome)

    async def read_summary(self, group_id: str, topic_id: uuid.UUID, partition: int) -> ShareState:
        key = (group_id, topic_id, partition)
        async with self._exclusive(key):  # after the calls in flight, as Kafka's reads
            _, shard = self._shard(key)
            outcome = shard.summary(key)
            if isinstance(outcome, ErrorCode):
                raise ShareStateError(outcome)
            return ShareState(*outcome)

    # -- machinery --------------------------------------------------------------------------
    def _shard(self, key: ShareKey) -> tuple[int, ShareShard]:
        index = self.partition_for(*key)
        error = self.log.owner_error(index)
        shard = self._shards.get(index)
        if error is not None or shard is None:
            raise ShareStateError(error or ErrorCode.not_coordinator)
        return index, shard

    async def _write(self, index: int, shard: ShareShard, outcome: ErrorCode | Record) -> None:
        """Append the record; return once it is committed and applied."""
        if isinstance(outcome, ErrorCode):
            raise ShareStateError(outcome)
        key, value = outcome
        partition = self.log.get(index)
        offset = -1 if partition is None else partition.log.log_end_offset  # the record's
        answered: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()

        def done(error: ErrorCode) -> None:
            if not answered.done():
                answered.set_result(error)

        self.log.append(
            index,
            [(encode_key(key), None if value is None else encode_value(value))],
            done,
            lambda: shard.replay(key, value, offset),
        )
        error = await answered
        if error == ErrorCode.request_timed_out:
            error = ErrorCode.coordinator_not_available  # as Kafka's coordinators answer it
        if error != ErrorCode.none:
            raise ShareStateError(error)

    @asynccontextmanager
    async def _exclusive(self, key: ShareKey) -> AsyncIterator[None]:
        entry = self._locks.get(key)
        if entry is None:
            entry = self._locks[key] = (asyncio.Lock(), [0])
        lock, users = entry
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if not users[0]:
                del self._locks[key]
