"""The partitions of one coordinator topic (``__consumer_offsets``, ``__transaction_state``)
that this broker leads: their loads, and their writes, each applied once committed.

Becoming a partition's leader replays its log with a ``PartitionLoader`` (a chunk at a
time in a task; the coordinator answers COORDINATOR_LOAD_IN_PROGRESS meanwhile); resigning
stops the load and fails the writes in flight with NOT_COORDINATOR. A write is appended,
and once committed (the high watermark has passed it; with one broker at once) its
``apply`` runs, in log order, then its ``done``: memory and log agree, a record is applied
if and only if it is committed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from gregor.coordinator.loader import PartitionLoader
from gregor.log.errors import LogError
from gregor.replica.manager import ReplicaManager
from gregor.replica.partition import Partition
from gregor.replica.purgatory import Purgatory
from gregor.wire.records import build_batch

logger = logging.getLogger(__name__)

Records = list[tuple[bytes, bytes | None]]
Done = Callable[[ErrorCode], None]


@dataclass(eq=False, slots=True)
class _Write:
    """A write waiting for the high watermark: ``apply`` runs once it is committed, even if
    ``done`` (its answer, called once) timed out meanwhile."""

    end: int
    apply: Callable[[], None] | None
    done: Done | None


@dataclass(frozen=True, slots=True)
class Producer:
    """The producer a transactional batch is written for (TxnOffsetCommit)."""

    producer_id: int
    producer_epoch: int


class CoordinatorPartitions:
    def __init__(
        self,
        topic: str,
        replicas: ReplicaManager,
        append_purgatory: Purgatory[Any],
        commit_timeout_ms: int,
        now_ms: Callable[[], int],
    ) -> None:
        self.topic = topic
        self._replicas = replicas
        # Appends park here until committed; it is checked whenever a partition changes.
        self._append_purgatory = append_purgatory
        self._commit_timeout_ms = commit_timeout_ms
        self._now = now_ms
        self._loading: dict[int, asyncio.Task[None]] = {}
        # Partitions loaded and led, each with its writes waiting to be committed.
        self._pending: dict[int, deque[_Write]] = {}

    def owner_error(self, index: int) -> ErrorCode | None:
        """COORDINATOR_LOAD_IN_PROGRESS while the partition is being loaded, and
        NOT_COORDINATOR unless this broker leads it."""
        if index in self._pending:
            return None
        if index in self._loading:
            return ErrorCode.coordinator_load_in_progress
        return ErrorCode.not_coordinator

    def loading(self) -> bool:
        return bool(self._loading)

    def partitions(self) -> list[int]:
        """The partitions loaded or loading."""
        return [*self._pending, *self._loading]

    def get(self, index: int) -> Partition | None:
        return self._replicas.get(self.topic, index)

    def load(self, index: int, loader: PartitionLoader, loaded: Callable[[], None]) -> None:
        """Run ``loader`` over the partition (at once when it is small), then ``loaded``."""
        if index in self._pending or index in self._loading:
            return
        started = time.monotonic()
        if loader.step():  # a small partition (the usual case) is ready at once
            self._loaded(index, loaded, started)
            return
        logger.info("Loading %s-%d in the background", self.topic, index)
        self._loading[index] = asyncio.get_running_loop().create_task(
            self._load(index, loader, loaded, started)
        )

    async def _load(
        self, index: int, loader: PartitionLoader, loaded: Callable[[], None], started: float
    ) -> None:
        """Replay the rest of the partition, yielding to the event loop between chunks."""
        try:
            while True:
                await asyncio.sleep(0)
                if loader.step():
                    break
        except Exception as e:  # noqa: BLE001 - the partition must not stay "loading"
            self._loading.pop(index, None)
            logger.error("Loading %s-%d failed: %s: %s", self.topic, index, type(e).__name__, e)
            return
        self._loading.pop(index, None)
        self._loaded(index, loaded, started)

    def _loaded(self, index: int, loaded: Callable[[], None], started: float) -> None:
        self._pending[index] = deque()
        loaded()
        elapsed = time.monotonic() - started
        if elapsed > 0.1:
            logger.info("Loaded %s-%d in %.3fs", self.topic, index, elapsed)

    def unload(self, index: int) -> None:
        """Stop the partition's load, and fail its writes in flight with NOT_COORDINATOR:
        what of them the log keeps comes back with the next load."""
        task = self._loading.pop(index, None)
        if task is not None:
            task.cancel()
        pending = self._pending.pop(index, None)
        if pending:
            for write in pending:
                _answer(write, ErrorCode.not_coordinator)
            pending.clear()  # nothing of this leadership is applied any more
            # Their parked appends see they are answered and leave the purgatory.
            self._append_purgatory.check((self.topic, index))

    def append(
        self,
        index: int,
        records: Records,
        done: Done,
        apply: Callable[[], None] | None,
        producer: Producer | None = None,
    ) -> bool:
        """Append to the partition; ``apply`` runs once the records are committed, then
        ``done``. False if nothing was appended (``done`` has had the error)."""
        pending = self._pending.get(index)
        partition = self._replicas.get(self.topic, index)
        if pending is None or partition is None or not partition.is_leader:
            done(ErrorCode.not_coordinator)
            return False
        now = self._now()
        entries = [(key, value, (), now) for key, value in records]
        if producer is None:
            batch = build_batch(entries)
        else:
            batch = build_batch(
                entries,
                producer_id=producer.producer_id,
                producer_epoch=producer.producer_epoch,
                base_sequence=0,  # as Kafka's coordinators: not checked for them
                is_transactional=True,
            )
        try:
            appended = self._replicas.append(partition, batch, now, origin_client=False)
        except LogError as e:
            logger.warning("Writing to %s-%d failed: %s", self.topic, index, e)
            done(_append_error(e.code))
            return False
        self._wait(index, partition, pending, _Write(appended.last_offset + 1, apply, done))
        return True

    def apply_at(self, index: int, end: int, apply: Callable[[], None]) -> None:
        """Run ``apply`` once the high watermark reaches ``end``, in log order with the
        writes (a control batch another part of the broker appended)."""
        pending = self._pending.get(index)
        partition = self._replicas.get(self.topic, index)
        if pending is None or partition is None:
            return  # not loaded: the next load replays it
        position = len(pending)
        while position and pending[position - 1].end > end:
            position -= 1
        pending.insert(position, _Write(end, apply, None))
        if partition.is_leader:
            _apply_committed(pending, partition.high_watermark)

    def _wait(
        self, index: int, partition: Partition, pending: deque[_Write], write: _Write
    ) -> None:
        if not pending and partition.high_watermark >= write.end:  # one broker: at once
            if write.apply is not None:
                write.apply()
            _answer(write, ErrorCode.none)
            return
        pending.append(write)

        def try_complete(force: bool) -> bool | None:
            # The partition became a follower before the coordinator was told: its high
            # watermark commits nothing of this leadership; the unload will drop the writes.
            leader = partition.is_leader
            if leader:
                _apply_committed(pending, partition.high_watermark)
            if write.done is None:
                return True
            if not leader:
                _answer(write, ErrorCode.not_coordinator)
            elif force:
                _answer(write, ErrorCode.request_timed_out)
            else:
                return None
            return True

        # Earlier writes whose answers timed out may be waiting in front of this one.
        if try_complete(False) is None:
            self._append_purgatory.park(
                [(self.topic, index)], self._commit_timeout_ms, try_complete
            )


def _apply_committed(pending: deque[_Write], high_watermark: int) -> None:
    """Apply and answer the writes the high watermark has passed, in log order."""
    while pending and high_watermark >= pending[0].end:
        committed = pending.popleft()
        if committed.apply is not None:
            committed.apply()
        _answer(committed, ErrorCode.none)


def _answer(write: _Write, error: ErrorCode) -> None:
    done, write.done = write.done, None
    if done is not None:
        done(error)


def _append_error(code: ErrorCode) -> ErrorCode:
    """Kafka's mapping of a failed coordinator append to what the client sees."""
    if code in (
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
    ):
        return ErrorCode.coordinator_not_available
    if code in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return ErrorCode.not_coordinator
    if code in (
        ErrorCode.message_too_large,
        ErrorCode.record_list_too_large,
        ErrorCode.invalid_fetch_size,
    ):
        return code
    return ErrorCode.unknown_server_error
