"""The share-partitions this broker leads (KIP-932; Kafka's SharePartitionManager): one
in-flight window (replica/share_partition.py) per (share group, topic id, partition), made
on its first use here from the state the persister holds, and the share sessions of the
members fetching from this broker.

A window is read from the persister with the partition's leader epoch when first used;
without state (or with an uninitialized start offset) it starts where the group's
``share.auto.offset.reset`` says (latest: the high watermark, earliest: the log start)
and that state is written at once. Every change but an acquisition (whose lock a new
leader could not know anyway) is written through the persister; an acknowledgement is
answered once its write is done, and a failed write drops the window, which the next use
reads again. A window is dropped when the partition's leadership moves, and follows the log
start when retention or DeleteRecords moves it.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from gregor.controller.metadata.config_resource import GROUP, ConfigResource
from gregor.log.log import ReadResult
from gregor.replica.errors import STORAGE_ERRORS, error_code
from gregor.replica.partition import Partition
from gregor.replica.purgatory import Purgatory
from gregor.replica.share_partition import (
    AcknowledgementBatch,
    AcquiredRecords,
    SharePartition,
    StateBatch,
)
from gregor.replica.share_persister import UNINITIALIZED_OFFSET, SharePersister, ShareStateError
from gregor.replica.share_session import SharePartitionKey, ShareSessionCache

if TYPE_CHECKING:
    from gregor.replica.manager import ReplicaManager

logger = logging.getLogger(__name__)

__all__ = ["Acquisition", "ShareFetchSettings", "ShareKey", "SharePartitionManager", "ShareWindow"]

# (group id, topic id, partition)
ShareKey = tuple[str, uuid.UUID, int]


@dataclass(frozen=True, slots=True)
class ShareFetchSettings:
    """The broker's share-partition keys (Kafka's ShareGroupConfig)."""

    record_lock_duration_ms: int = 30_000  # the group's share.record.lock.duration.ms wins
    delivery_count_limit: int = 5
    max_record_locks: int = 2000
    max_share_sessions: int = 2000

    @classmethod
    def from_config(cls, config: Any) -> ShareFetchSettings:
        """From a BrokerConfig."""
        return cls(
            config["group.share.record.lock.duration.ms"],
            config["group.share.delivery.count.limit"],
            config["group.share.partition.max.record.locks"],
            config["group.share.max.share.sessions"],
        )


@dataclass(slots=True)
class Acquisition:
    """What one share-partition gave a fetch: the log's batches holding the acquired
    records (a region of a segment, sent as it is) and the acquired ranges."""

    records: bytes | ReadResult = b""
    acquired: list[AcquiredRecords] = field(default_factory=list)
    error: ErrorCode = ErrorCode.none

    @property
    def size(self) -> int:
        return len(self.records) if isinstance(self.records, bytes) else self.records.size


@dataclass(eq=False)
class ShareWindow:
    """A loaded share-partition: its window, the partition (in the leader epoch it was
    read in) and what was last written of it."""

    key: ShareKey
    partition: Partition
    leader_epoch: int
    state_epoch: int
    window: SharePartition
    written: tuple[int, list[StateBatch]]
    writing: asyncio.Lock = field(default_factory=asyncio.Lock)
    timer: asyncio.TimerHandle | None = None
    timer_ms: int | None = None

    @property
    def tp(self) -> tuple[str, int]:
        return self.partition.topic, self.partition.index


class SharePartitionManager:
    def __init__(
        self,
        replicas: ReplicaManager,
        persister: SharePersister,
        settings: ShareFetchSettings,
    ) -> None:
        self.replicas = replicas
        self.persister = persister
        self.settings = settings
        self.sessions = ShareSessionCache(settings.max_share_sessions)
        self.purgatory: Purgatory[Any] = Purgatory("ShareFetch")
        self._windows: dict[ShareKey, ShareWindow] = {}
        self._loading: dict[ShareKey, asyncio.Future[ShareWindow]] = {}
        self._by_tp: dict[tuple[str, int], set[ShareKey]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        replicas.change_listeners.append(self.on_partition_change)

    # -- group configs ---------------------------------------------------------------------
    def _group_configs(self, group_id: str) -> Mapping[str, str]:
        metadata = self.replicas.metadata
        return {} if metadata is None else metadata.dynamic_configs(ConfigResource(GROUP, group_id))

    def lock_duration_ms(self, group_id: str) -> int:
        """The group's ``share.record.lock.duration.ms``, else the broker's."""
        configs = self._group_configs(group_id)
        return int(
            configs.get("share.record.lock.duration.ms", self.settings.record_lock_duration_ms)
        )

    def read_committed(self, group_id: str) -> bool:
        return self._group_configs(group_id).get("share.isolation.level") == "read_committed"

    # -- loading ---------------------------------------------------------------------------
    def _led(self, topic_id: uuid.UUID, index: int) -> tuple[Partition | None, ErrorCode]:
        metadata = self.replicas.metadata
        topic = None if metadata is None else metadata.topic_name(topic_id)
        if topic is None:
            return None, ErrorCode.unknown_topic_id
        partition = self.replicas.get(topic, index)
        if partition is None:
            return None, self.replicas.not_hosted(topic, index)
        if partition.topic_id not in (None, topic_id):
            return None, ErrorCode.unknown_topic_id
        if not partition.is_leader:
            return None, ErrorCode.not_leader_or_follower
        return partition, ErrorCode.none

    def _current(self, key: ShareKey) -> ShareWindow | None:
        """The loaded window of ``key`` if still valid (same leader epoch, log start
        followed); a stale one is dropped."""
        window = self._windows.get(key)
        if window is None:
            return None
        partition = window.partition
        if (
            not partition.is_leader
            or partition.leader_epoch != window.leader_epoch
            or self.replicas.get(*window.tp) is not partition
        ):
            self._drop(window)
            return None
        self._follow_log_start(window)
        return window

    async def share_partition(self, key: ShareKey) -> tuple[ShareWindow | None, ErrorCode]:
        """The window of ``key`` on this leader, loaded on first use; else the error."""
        window = self._current(key)
        if window is not None:
            return window, ErrorCode.none
        partition, error = self._led(key[1], key[2])
        if partition is None:
            return None, error
        loading = self._loading.get(key)
        if loading is None:
            loading = self._loading[key] = asyncio.ensure_future(self._load(key, partition))
            loading.add_done_callback(lambda _: self._loading.pop(key, None))
        try:
            return await asyncio.shield(loading), ErrorCode.none
        except ShareStateError as e:
            return None, e.error
        except STORAGE_ERRORS as e:
            return None, error_code(e)

    async def _load(self, key: ShareKey, partition: Partition) -> ShareWindow:
        group_id, topic_id, index = key
        persister = self.persister
        leader_epoch = partition.leader_epoch
        state = await persister.read(group_id, topic_id, index, leader_epoch)
        state_epoch = 0 if state is None else state.state_epoch
        if state is None or state.start_offset == UNINITIALIZED_OFFSET:
            reset = self._group_configs(group_id).get("share.auto.offset.reset", "latest")
            log = partition.log
            start = log.log_start_offset if reset == "earliest" else partition.high_watermark
            await persister.write(group_id, topic_id, index, state_epoch, leader_epoch, start, [])
            batches: Sequence[StateBatch] = ()
        else:
            start, batches = state.start_offset, state.batches
        if partition.leader_epoch != leader_epoch or not partition.is_leader:
            raise ShareStateError(ErrorCode.not_leader_or_follower)
        try:
            window = SharePartition(
                start,
                batches,
                max_record_locks=self.settings.max_record_locks,
                delivery_count_limit=self.settings.delivery_count_limit,
                record_lock_duration_ms=self.lock_duration_ms(group_id),
            )
        except ValueError as e:  # state no leader writes (a client's WriteShareGroupState)
            logger.warning("The persisted state of share-partition %s is invalid: %s", key, e)
            raise ShareStateError(ErrorCode.unknown_server_error, str(e)) from None
        loaded = ShareWindow(key, partition, leader_epoch, state_epoch, window, window.export())
        self._windows[key] = loaded
        self._by_tp.setdefault(loaded.tp, set()).add(key)
        self._follow_log_start(loaded)
        return loaded

    def _drop(self, window: ShareWindow) -> None:
        if self._windows.get(window.key) is not window:
            return
        del self._windows[window.key]
        keys = self._by_tp.get(window.tp)
        if keys is not None:
            keys.discard(window.key)
            if not keys:
                del self._by_tp[window.tp]
        if window.timer is not None:
            window.timer.cancel()

    def _follow_log_start(self, window: ShareWindow) -> None:
        log_start = window.partition.log.log_start_offset
        if log_start > window.window.start_offset:
            window.window.move_start(log_start)
            self._write_later(window)

    # -- writes ----------------------------------------------------------------------------
    async def write(self, window: ShareWindow) -> ErrorCode:
        """Write the window's state if it changed since last written; a failure drops the
        window (the next use reads the persisted state again)."""
        async with window.writing:
            if self._windows.get(window.key) is not window:
                return ErrorCode.not_leader_or_follower
            state = window.window.export()
            if state == window.written:
                return ErrorCode.none
            group_id, topic_id, index = window.key
            try:
                await self.persister.write(
                    group_id, topic_id, index, window.state_epoch, window.leader_epoch, *state
                )
            except ShareStateError as e:
                logger.warning("Writing the state of share-partition %s failed: %s", window.key, e)
                self._drop(window)
                return e.error
            window.written = state
            return ErrorCode.none

    def _write_later(self, window: ShareWindow) -> None:
        task = asyncio.ensure_future(self.write(window))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- acknowledgements, releases, lock expiry -------------------------------------------
    async def acknowledge(
        self, key: ShareKey, member_id: str, batches: Sequence[AcknowledgementBatch]
    ) -> ErrorCode:
        """Apply a member's acknowledgements of one share-partition; answered once written."""
        window, error = await self.share_partition(key)
        if window is None:
            return error
        error = window.window.acknowledge(member_id, batches)
        if error != ErrorCode.none:
            return error
        self._arm(window)
        self.purgatory.check(window.tp)  # released records can go out again
        return await self.write(window)

    def release_member(
        self, group_id: str, member_id: str, keys: Sequence[SharePartitionKey]
    ) -> None:
        """The member's share session ended: its acquired records here are released. When
        it was the group's last session here, the group's share-partitions here are
        unloaded once written (Kafka's onGroupEmpty): while nobody reads them an admin may
        alter or delete their state (AlterShareGroupOffsets needs an Empty group), which
        the next reader then loads."""
        for topic_id, index in keys:
            window = self._current((group_id, topic_id, index))
            if window is not None and window.window.release_member(member_id):
                self._write_later(window)
                self.purgatory.check(window.tp)
        if not self.sessions.serves_group(group_id):
            for key, window in list(self._windows.items()):
                if key[0] == group_id:
                    self._unload_later(window)

    def _unload_later(self, window: ShareWindow) -> None:
        async def unload() -> None:
            await self.write(window)
            if not self.sessions.serves_group(window.key[0]):
                self._drop(window)

        task = asyncio.ensure_future(unload())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def connection_closed(self, connection: str) -> None:
        for session in self.sessions.connection_closed(connection):
            self.release_member(session.group_id, session.member_id, list(session.partitions))

    def _arm(self, window: ShareWindow) -> None:
        """Schedule the window's next lock expiry."""
        deadline = window.window.expire(self.replicas.now_ms())
        if deadline is None or deadline == window.timer_ms:
            return
        if window.timer is not None:
            window.timer.cancel()
        delay = max(deadline - self.replicas.now_ms(), 0) / 1000
        window.timer = asyncio.get_running_loop().call_later(delay, self._expire, window)
        window.timer_ms = deadline

    def _expire(self, window: ShareWindow) -> None:
        window.timer = window.timer_ms = None
        if self._windows.get(window.key) is not window:
            return
        before = window.window.export()
        self._arm(window)
        if window.window.export() != before:
            self._write_later(window)
            self.purgatory.check(window.tp)

    # -- acquisition -----------------------------------------------------------------------
    def acquire(
        self,
        window: ShareWindow,
        member_id: str,
        max_records: int,
        max_bytes: int,
        min_one_batch: bool,
    ) -> Acquisition:
        """Read the log from the window's next fetch offset and acquire for ``member_id``."""
        group_id = window.key[0]
        shared = window.window
        partition = window.partition
        if not partition.is_leader or partition.leader_epoch != window.leader_epoch:
            self._drop(window)
            return Acquisition(error=ErrorCode.not_leader_or_follower)
        self._follow_log_start(window)
        shared.record_lock_duration_ms = self.lock_duration_ms(group_id)
        read_committed = self.read_committed(group_id)
        offset = shared.next_fetch_offset()
        try:
            if offset > partition.log.log_end_offset:
                return Acquisition()
            region = partition.read(offset, max_bytes, min_one_batch, read_committed=read_committed)
            if not region.size:
                return Acquisition()
            headers = _headers(region)
            skipped = _skipped(headers, partition, offset, region, read_committed)
        except STORAGE_ERRORS as e:
            return Acquisition(error=error_code(e))
        batches = [(h.base_offset, h.last_offset) for h in headers]
        acquired = shared.acquire(
            member_id, offset, batches, max_records, self.replicas.now_ms(), skipped
        )
        self._arm(window)
        if not acquired:
            return Acquisition()
        first = next(h for h in headers if h.last_offset >= acquired[0].first_offset)
        last = next(h for h in reversed(headers) if h.base_offset <= acquired[-1].last_offset)
        records = ReadResult(
            region.segment,
            first.position,
            last.position + last.size - first.position,
            first.base_offset,
            region.log_start_offset,
            region.log_end_offset,
        )
        return Acquisition(records, acquired)

    def acquirable_bytes(self, window: ShareWindow) -> int:
        """Bytes a fetch could acquire now (an estimate: the batches from the next fetch
        offset, when the window has room or records to deliver again); -1: answer at once
        (leadership moved or the window was dropped)."""
        partition = window.partition
        if (
            self._windows.get(window.key) is not window
            or not partition.is_leader
            or partition.leader_epoch != window.leader_epoch
        ):
            return -1
        shared = window.window
        offset = shared.next_fetch_offset()
        if offset >= shared.end_offset and shared.in_flight_count() >= shared.max_record_locks:
            return 0
        end = (
            partition.last_stable_offset()
            if self.read_committed(window.key[0])
            else partition.high_watermark
        )
        if offset >= end or offset < partition.log.log_start_offset:
            return 0
        try:
            return partition.read(offset, 1 << 20, True).size
        except STORAGE_ERRORS:
            return -1

    # -- leadership and log changes --------------------------------------------------------
    def on_partition_change(self, tp: tuple[str, int]) -> None:
        """The replica manager's news of a partition (data, high watermark, leadership, log
        start): windows of a partition no longer led here in their epoch go; parked share
        fetches are checked."""
        for key in list(self._by_tp.get(tp, ())):
            self._current(key)
        self.purgatory.check(tp)

    def shutdown(self) -> None:
        for window in list(self._windows.values()):
            self._drop(window)
        self.purgatory.expire_all()
        for task in list(self._tasks):
            task.cancel()


def _headers(region: ReadResult) -> list[Any]:
    end = region.position + region.size
    headers = []
    for header in region.segment.iter_headers(region.position):
        if header.position >= end:
            break
        headers.append(header)
    return headers


def _skipped(
    headers: list[Any],
    partition: Partition,
    offset: int,
    region: ReadResult,
    read_committed: bool,
) -> list[tuple[int, int]]:
    """The offset ranges never delivered: control batches (transaction markers) and, when
    reading committed records, the batches of aborted transactions (as a read_committed
    consumer skips them: a producer's batches from its aborted transaction's first offset
    up to its abort marker)."""
    aborted = sorted(
        ((first, pid) for pid, first in partition.log.aborted_transactions(offset, region))
        if read_committed
        else ()
    )
    ongoing: set[int] = set()
    skipped = []
    i = 0
    for h in headers:
        while i < len(aborted) and aborted[i][0] <= h.last_offset:
            ongoing.add(aborted[i][1])
            i += 1
        if h.is_control:
            ongoing.discard(h.producer_id)
            skipped.append((h.base_offset, h.last_offset))
        elif h.is_transactional and h.producer_id in ongoing:
            skipped.append((h.base_offset, h.last_offset))
    return skipped
