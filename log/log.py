"""One partition's log: an ordered list of segments with appends, zero-copy reads,
roll, retention, truncation, recovery, the producer state and its transactions (the last
stable offset, the aborted-transaction indexes)."""

from __future__ import annotations

import bisect
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from gregor.log.checkpoint import DiskJob
from gregor.log.cleaner import CLEANED_SUFFIX, crash_point
from gregor.log.config import LogConfig
from gregor.log.errors import (
    InvalidRecordError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    UnexpectedAppendOffsetError,
)
from gregor.log.leader_epoch import LeaderEpochCache
from gregor.log.producer_state import CompletedTxn, ProducerAppendInfo, ProducerStateManager
from gregor.log.segment import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SEGMENT_SUFFIXES,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogSegment,
    file_stem,
)
from gregor.log.txn_index import AbortedTxn, parse_marker
from gregor.log.validator import Validated, validate
from gregor.wire.records import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    CorruptRecordError,
    assign_offsets,
    decode_records,
    parse_header,
    split_batches,
    validate_batch,
)

INT_MAX = (1 << 31) - 1
SWAP_SUFFIX = ".swap"
# Leftovers of an interrupted delete or compaction, removed when a log is opened; a `.log.swap`
# (a cleaned segment whose swap had begun) is completed instead (Kafka's recovery rule).
_LEFTOVER_SUFFIXES = (DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX, ".tmp")
_SWAP_LOG = LOG_SUFFIX + SWAP_SUFFIX
_REPLAY_CHUNK = 1 << 16


@dataclass(frozen=True, slots=True)
class AppendResult:
    first_offset: int
    last_offset: int
    log_append_time: int  # -1 for CreateTime topics
    log_start_offset: int
    record_count: int
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class ReadResult:
    """A region of one segment file to sendfile(): whole batches only. `first_offset` is the
    base offset of the first batch (the requested offset when the region is empty)."""

    segment: LogSegment
    position: int
    size: int
    first_offset: int
    log_start_offset: int
    log_end_offset: int

    @property
    def fd(self) -> int:
        """The segment's descriptor when read (-1 once closed or offline), never a stale
        number."""
        try:
            return self.segment.fd
        except KafkaStorageError:
            return -1

    @property
    def segment_base(self) -> int:
        return self.segment.base_offset


class _PendingDelete:
    __slots__ = ("segment", "due_ms")

    def __init__(self, segment: LogSegment, due_ms: int | None) -> None:
        self.segment = segment
        self.due_ms = due_ms


def _take_offline(log: Log, exc: OSError) -> None:
    log.go_offline()


class Log:
    """Not thread-safe: the caller serialises calls per partition, on one thread. Blocking
    disk work can be queued on a DiskJob (see flush) to run on a worker thread."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        now_ms: int,
        on_io_error: Callable[[Log, OSError], None] = _take_offline,
    ) -> None:
        self.directory = directory
        self.config = config
        self.segments: list[LogSegment] = []
        self._bases: list[int] = []
        self.log_start_offset = 0
        self.log_end_offset = 0
        self.recovery_point = 0
        # An I/O error takes the log directory offline (the LogManager's handler) or, for a
        # log on its own, this log.
        self.on_io_error = on_io_error
        self.offline = False
        # Where flush.messages sends its flushes: by default, done on the spot.
        self.request_flush: Callable[[Log], None] = Log.flush
        self.producer_state = ProducerStateManager(directory)
        self.leader_epochs = LeaderEpochCache(directory, self._io_error)
        self.pending_deletes: list[_PendingDelete] = []
        self._last_flush_ms = now_ms
        self._roll_flush_offset = 0  # flush owed up to here since a roll (done by flush_if_due)
        self._dir_dirty = False
        self._truncations = 0  # a flush only advances the recovery point if none came between
        self._unsynced_snapshots: list[tuple[int, Path]] = []  # written at rolls, not fsynced

    # -- opening ---------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        clean_shutdown: bool = False,
        now_ms: int,
        on_io_error: Callable[[Log, OSError], None] = _take_offline,
    ) -> Log:
        try:
            directory.mkdir(parents=True)
            made = True
        except FileExistsError:
            made = False
        log = cls(directory, config, now_ms, on_io_error)
        start = log._start_empty if made else log._load
        start(recovery_point, log_start_offset, clean_shutdown, now_ms)
        return log

    def _start_empty(
        self, recovery_point: int, log_start_offset: int, clean_shutdown: bool, now_ms: int
    ) -> None:
        """A directory made just now: what _load comes to for an empty directory, without
        its directory reads (a third of creating a partition's log)."""
        self._set_segments([self._new_segment(log_start_offset, now_ms, active=True)])
        self._dir_dirty = True
        self.log_start_offset = self.log_end_offset = log_start_offset
        self.recovery_point = (
            log_start_offset if clean_shutdown else min(recovery_point, log_start_offset)
        )
        self._roll_flush_offset = self.recovery_point
        self.producer_state.start_empty(log_start_offset)

    def _io_error(self, exc: OSError) -> None:
        self.on_io_error(self, exc)

    def go_offline(self) -> None:
        """Its log directory failed: every later read or write raises KafkaStorageError."""
        self.offline = True
        for segment in self.segments + [p.segment for p in self.pending_deletes]:
            segment.go_offline()

    def _new_segment(self, base_offset: int, now_ms: int, *, active: bool) -> LogSegment:
        return LogSegment(
            self.directory,
            base_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_bytes=self.config.segment_index_bytes,
            now_ms=now_ms,
            active=active,
            on_io_error=self._io_error,
        )

    def _set_segments(self, segments: list[LogSegment]) -> None:
        self.segments = segments
        self._bases = [s.base_offset for s in segments]

    def _complete_swaps(self) -> None:
        """A `<base>.log.swap` replaces the segments it covers: it takes the name `.log`, the
        segments above its base within its offsets go, and its indexes are rebuilt."""
        for swap in sorted(self.directory.glob(f"*{_SWAP_LOG}")):
            stem = swap.name.partition(".")[0]
            base = int(stem)
            end = _next_offset_of(swap, base)
            for path in list(self.directory.iterdir()):
                other, dot, suffix = path.name.partition(".")
                if not (dot and other.isdigit() and len(other) == 20):
                    continue
                kind = "." + suffix.partition(".")[0]
                if (
                    other == stem
                    and kind in SEGMENT_SUFFIXES
                    and suffix not in ("log.swap", "txnindex.swap")
                ) or (base < int(other) < end and "." + suffix in SEGMENT_SUFFIXES):
                    path.unlink(missing_ok=True)
            # Its aborted transactions, renamed before the `.log.swap`, so whole (the other
            # indexes are rebuilt).
            txn_swap = self.directory / f"{stem}{TXN_INDEX_SUFFIX}{SWAP_SUFFIX}"
            if txn_swap.exists():
                os.replace(txn_swap, self.directory / f"{stem}{TXN_INDEX_SUFFIX}")
            os.replace(swap, self.directory / f"{stem}{LOG_SUFFIX}")

    def replace_segments(self, old: list[LogSegment], now_ms: int) -> LogSegment:
        """Swap the cleaner's `<base>.*.cleaned` files in for `old` (consecutive, inactive
        segments of this log, the first one at `base`), as Kafka does: rename them `.swap`,
        rename `old` to `.deleted` (their descriptors stay valid for reads in flight until
        file.delete.delay.ms), then drop the `.swap` suffix. A crash at any point leaves a
        log that _load completes or rolls back. Readers see the old list or the new one."""
        base = old[0].base_offset
        stem = str(self.directory / file_stem(base))
        suffixes = [INDEX_SUFFIX, TIME_INDEX_SUFFIX, LOG_SUFFIX]  # the `.log` renamed last
        if os.path.exists(stem + TXN_INDEX_SUFFIX + CLEANED_SUFFIX):
            suffixes.insert(2, TXN_INDEX_SUFFIX)
        try:
            for suffix in suffixes:
                os.rename(stem + suffix + CLEANED_SUFFIX, stem + suffix + SWAP_SUFFIX)
            crash_point("swap")
            for segment in old:
                self._schedule_delete(segment, None)
                crash_point("deleted")
            for suffix in suffixes:
                os.rename(stem + suffix + SWAP_SUFFIX, stem + suffix)
            new = self._new_segment(base, now_ms, active=False)
            if not new.load():
                new.recover()
        except OSError as exc:
            raise self._storage_error(exc, "swapping in a cleaned segment") from exc
        first = self.segments.index(old[0])
        self._set_segments([*self.segments[:first], new, *self.segments[first + len(old) :]])
        self._dir_dirty = True
        return new

    @property
    def truncations(self) -> int:
        """Counts truncations: a clean planned before one must not be swapped in after it."""
        return self._truncations

    def _remove_leftovers(self) -> list[int]:
        """Delete interrupted-operation leftovers and orphan indexes; return segment bases.
        The directory is listed once (again only after completing a swap); the producer
        state takes its snapshots from the same listing."""
        names = os.listdir(self.directory)
        if any(name.endswith(_SWAP_LOG) for name in names):
            self._complete_swaps()
            names = os.listdir(self.directory)
        bases = set()
        stems_with_log = {name[: -len(LOG_SUFFIX)] for name in names if name.endswith(LOG_SUFFIX)}
        kept = []
        for name in names:
            if name.endswith(_LEFTOVER_SUFFIXES):
                (self.directory / name).unlink(missing_ok=True)
                continue
            kept.append(name)
            stem, dot, suffix = name.partition(".")
            if not (dot and stem.isdigit() and len(stem) == 20):
                continue
            if "." + suffix == LOG_SUFFIX:
                bases.add(int(stem))
            elif "." + suffix in SEGMENT_SUFFIXES and stem not in stems_with_log:
                (self.directory / name).unlink(missing_ok=True)
        self.producer_state.found_files(kept)
        return sorted(bases)

    def _load(
        self, recovery_point: int, log_start_offset: int, clean_shutdown: bool, now_ms: int
    ) -> None:
        bases = self._remove_leftovers()
        segments = [
            self._new_segment(base, now_ms, active=i == len(bases) - 1)
            for i, base in enumerate(bases)
        ]
        # Unclean: recover from the segment holding the recovery point onward.
        first_recovered = max(bisect.bisect_right(bases, recovery_point) - 1, 0)
        kept: list[LogSegment] = []
        for i, segment in enumerate(segments):
            must_recover = not clean_shutdown and i >= first_recovered
            truncated = 0
            if must_recover or not segment.load():
                truncated = segment.recover()
            kept.append(segment)
            if truncated and i + 1 < len(segments):
                # Data after a corrupt point is unreachable: drop the later segments.
                for later in segments[i + 1 :]:
                    later.delete_files()
                break
        if not kept:
            kept = [self._new_segment(log_start_offset, now_ms, active=True)]
            self._dir_dirty = True
        elif not kept[-1].active:
            kept[-1].make_active()
        self._set_segments(kept)
        self.log_end_offset = kept[-1].next_offset
        self.log_start_offset = max(log_start_offset, kept[0].base_offset)
        if self.log_start_offset > self.log_end_offset:
            self.truncate_fully_and_start_at(self.log_start_offset)
            return
        self.recovery_point = (
            self.log_end_offset if clean_shutdown else min(recovery_point, self.log_end_offset)
        )
        self._roll_flush_offset = self.recovery_point
        snapshot_limit = self.log_end_offset if clean_shutdown else self.recovery_point
        self._rebuild_producer_state(snapshot_limit)

    def _rebuild_producer_state(self, snapshot_limit: int) -> None:
        """Newest snapshot at or below `snapshot_limit`, then replay batch headers to the end
        (which also restores leader epochs the checkpoint file may have missed)."""
        state = self.producer_state
        epochs = self.leader_epochs
        epochs.truncate_from_end(self.log_end_offset)
        state.delete_snapshots_above(self.log_end_offset)
        start = state.load_latest_snapshot(snapshot_limit)
        if start is None:
            start = self.log_start_offset
        for segment in self.segments[max(bisect.bisect_right(self._bases, start) - 1, 0) :]:
            # The replay writes the aborted transactions it meets again (a recovered
            # segment's index may have lost them or hold some past a torn tail).
            segment.truncate_txn_index(start)
            _, position = segment.offset_index.lookup(start)
            for h in segment.iter_headers(position, _REPLAY_CHUNK):
                if h.last_offset < start:
                    continue
                epochs.assign(h.partition_leader_epoch, h.base_offset)
                if h.producer_id >= 0:
                    marker = None
                    if h.is_control:
                        batch = self._segment_batch(segment, h)
                        h.position = 0
                        marker = parse_marker(batch, h)
                    completed = state.apply_batch(h, marker)
                    if completed is not None:
                        self._complete_txns([completed])
        state.map_end_offset = self.log_end_offset
        state.truncate_head(self.log_start_offset)
        epochs.truncate_from_start(self.log_start_offset)

    # -- properties ------------------------------------------------------------------------
    @property
    def active_segment(self) -> LogSegment:
        if self.offline:
            raise KafkaStorageError(f"log {self.directory} is in an offline log directory")
        return self.segments[-1]

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # -- appends ---------------------------------------------------------------------------
    def append_as_leader(
        self,
        records: bytes | bytearray | memoryview,
        *,
        leader_epoch: int,
        now_ms: int,
        origin_client: bool = True,
    ) -> AppendResult:
        """Validate, assign offsets from the log end and write the batches in one call.
        ``origin_client=False`` marks batches the broker built itself (Kafka's append
        origin COORDINATOR): the checks that only guard against client input are skipped."""
        validated = validate(records, self.config, now_ms, origin_client=origin_client)
        return self.append_validated(validated, leader_epoch=leader_epoch, now_ms=now_ms)

    def append_validated(
        self, validated: Validated, *, leader_epoch: int, now_ms: int
    ) -> AppendResult:
        """Assign offsets from the log end to batches `validate` accepted, and write them.
        A retried batch of an idempotent producer returns its original offsets instead.
        Nothing changes unless the write succeeds."""
        data, headers = validated.data, validated.headers
        if not headers:
            return AppendResult(-1, -1, -1, self.log_start_offset, 0)
        append_time = now_ms if self.config.log_append_time else None
        state = self.producer_state
        infos: dict[int, ProducerAppendInfo] = {}
        next_offset = self.log_end_offset
        record_count = 0
        client = validated.origin_client
        for h in headers:
            if client and h.producer_id >= 0 and not h.is_control:
                duplicate = state.find_duplicate(
                    h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence
                )
                if duplicate is not None:
                    return AppendResult(
                        duplicate.first_offset,
                        duplicate.last_offset,
                        duplicate.timestamp if append_time is not None else -1,
                        self.log_start_offset,
                        duplicate.offset_delta + 1,
                        duplicate=True,
                    )
            assign_offsets(data, h, next_offset, leader_epoch, append_time)
            if h.producer_id >= 0:
                marker = parse_marker(data, h) if h.is_control else None
                state.stage(infos, h, validate=True, marker=marker, client=client)
            next_offset = h.next_offset
            record_count += h.record_count
        first_offset = self.log_end_offset
        self._write(data, headers, now_ms)
        self.leader_epochs.assign(leader_epoch, first_offset)
        self._complete_txns(state.commit(infos, self.log_end_offset))
        self._flush_if_too_many_messages()
        return AppendResult(
            first_offset,
            next_offset - 1,
            now_ms if append_time is not None else -1,
            self.log_start_offset,
            record_count,
        )

    def append_as_follower(self, records: bytes | memoryview) -> AppendResult:
        """Append batches whose offsets the leader assigned (replication), byte for byte."""
        headers = split_batches(records)
        if not headers:
            return AppendResult(-1, -1, -1, self.log_start_offset, 0)
        expected = self.log_end_offset
        for h in headers:
            try:
                validate_batch(records, h)
            except InvalidRecordError:
                pass  # compaction leaves record counts below the offset range
            if h.base_offset < expected:
                raise UnexpectedAppendOffsetError(
                    f"batch at offset {h.base_offset} is below the expected {expected}"
                )
            expected = h.next_offset
        state = self.producer_state
        infos: dict[int, ProducerAppendInfo] = {}
        for h in headers:
            self.leader_epochs.assign(h.partition_leader_epoch, h.base_offset)
            if h.producer_id >= 0:
                marker = parse_marker(records, h) if h.is_control else None
                state.stage(infos, h, validate=False, marker=marker)
        self._write(records, headers, None)
        self._complete_txns(state.commit(infos, self.log_end_offset))
        self._flush_if_too_many_messages()
        return AppendResult(
            headers[0].base_offset,
            headers[-1].last_offset,
            -1,
            self.log_start_offset,
            sum(h.record_count for h in headers),
        )

    def _complete_txns(self, completed: list[CompletedTxn]) -> None:
        """Index the aborted ones of transactions just ended (in the segment holding their
        marker, with the LSO right after), then count them as ended (Kafka's order)."""
        state = self.producer_state
        for txn in completed:
            if txn.aborted:
                lso = state.last_stable_offset_after(txn)
                segment = self.segments[bisect.bisect_right(self._bases, txn.last_offset) - 1]
                entry = AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, lso)
                try:
                    segment.add_aborted_txn(entry)
                except OSError as exc:
                    raise self._storage_error(exc, "indexing an aborted transaction") from exc
            state.complete(txn)

    # -- transactions ----------------------------------------------------------------------
    def last_stable_offset(self, high_watermark: int) -> int:
        """The offset below which every transaction is decided (and its marker below the
        high watermark): read_committed consumers read up to here."""
        first_unstable = self.producer_state.first_unstable_offset(high_watermark)
        if first_unstable is None:
            return high_watermark
        return min(first_unstable, high_watermark)

    def collect_aborted_transactions(self, start_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions with data in [start_offset, upper_bound), from the txn
        indexes of the segment holding ``start_offset`` onward (Kafka's
        collectAbortedTransactions)."""
        aborted: list[AbortedTxn] = []
        first = max(bisect.bisect_right(self._bases, start_offset) - 1, 0)
        for segment in self.segments[first:]:
            found, complete = segment.txn_index.collect(start_offset, upper_bound)
            aborted += found
            if complete:
                break
        return aborted

    def aborted_transactions(self, fetch_offset: int, region: ReadResult) -> list[tuple[int, int]]:
        """The aborted transactions a read_committed fetch of ``region`` (read from
        ``fetch_offset``) is answered with. The upper bound is Kafka's: the offset of the
        first offset-index entry at or after the region's end, else the next segment's
        base, else the log end."""
        if not region.size:
            return []
        segment = region.segment
        upper = segment.offset_index.upper_bound_offset(region.position + region.size)
        if upper is None:
            i = bisect.bisect_right(self._bases, segment.base_offset)
            upper = self._bases[i] if i < len(self._bases) else self.log_end_offset
        found = self.collect_aborted_transactions(fetch_offset, upper)
        return [(txn.producer_id, txn.first_offset) for txn in found]

    def _write(
        self, data: bytes | bytearray | memoryview, headers: list[BatchHeader], now_ms: int | None
    ) -> None:
        first_offset = headers[0].base_offset
        last_offset = headers[-1].last_offset
        max_ts = max(h.max_timestamp for h in headers)
        if last_offset - first_offset > INT_MAX:
            # Only a replicated append can span this much: no one segment could index it.
            raise InvalidRecordError(
                f"offsets {first_offset}-{last_offset} span more than one segment can index"
            )
        self._maybe_roll_for(len(data), first_offset, last_offset, max_ts, now_ms)
        self.active_segment.append(data, headers)
        self.log_end_offset = headers[-1].next_offset

    def _maybe_roll_for(
        self, size: int, first_offset: int, last_offset: int, max_ts: int, now_ms: int | None
    ) -> None:
        segment = self.active_segment
        config = self.config
        if segment.size == 0:
            if last_offset - segment.base_offset > INT_MAX:
                self._replace_empty_active(first_offset)
            return
        if (
            segment.size > config.segment_bytes - size
            or segment.indexes_full
            or last_offset - segment.base_offset > INT_MAX
            or (
                now_ms is not None
                and segment.time_waited_for_roll(now_ms, max_ts) > self._roll_ms(segment)
            )
        ):
            self._roll(first_offset, now_ms if now_ms is not None else segment.created_ms)

    def _roll_ms(self, segment: LogSegment) -> int:
        """segment.ms (for a compacted log at most max.compaction.lag.ms, so records become
        cleanable in time) less the segment's jitter. Kafka draws the jitter at random;
        hashing the base offset spreads rolls across partitions the same way, deterministically."""
        config = self.config
        roll_ms = config.segment_ms
        if config.compact:
            roll_ms = min(roll_ms, config.max_compaction_lag_ms)
        jitter = min(config.segment_jitter_ms, roll_ms)
        if jitter <= 0:
            return roll_ms
        return roll_ms - (segment.base_offset * 2654435761) % jitter

    def _replace_empty_active(self, base_offset: int) -> None:
        old = self.segments[-1]
        now_ms = old.created_ms
        try:
            new = self._new_segment(base_offset, now_ms, active=True)
        except OSError as exc:
            raise self._storage_error(exc, "creating a segment") from exc
        old.delete_files()
        self._set_segments([*self.segments[:-1], new])
        self._dir_dirty = True

    def _storage_error(self, exc: OSError, what: str) -> KafkaStorageError:
        self._io_error(exc)
        return KafkaStorageError(f"{what} in {self.directory} failed: {exc}")

    def _roll(self, base_offset: int, now_ms: int) -> None:
        """Close the active segment for appends and start a new one at `base_offset`; its
        fsync is owed to the next flush_if_due (a worker thread in the broker)."""
        self.active_segment.on_become_inactive()
        self.leader_epochs.write()  # the replay at load may start at the snapshot
        try:
            new = self._new_segment(base_offset, now_ms, active=True)
            self.producer_state.map_end_offset = base_offset
            snapshot = self.producer_state.take_snapshot(sync=False)
        except OSError as exc:
            raise self._storage_error(exc, "rolling a segment") from exc
        self._set_segments([*self.segments, new])
        self._dir_dirty = True
        self._unsynced_snapshots.append((base_offset, snapshot))
        self._roll_flush_offset = base_offset

    def roll(self, now_ms: int) -> None:
        """Start a new active segment now, unless the active one is empty."""
        if self.active_segment.size:
            self._roll(self.log_end_offset, now_ms)

    def maybe_roll(self, now_ms: int) -> None:
        """Time-based roll (segment.ms) of a non-empty active segment."""
        segment = self.active_segment
        if segment.size and segment.time_waited_for_roll(now_ms, now_ms) > self._roll_ms(segment):
            self._roll(self.log_end_offset, now_ms)

    # -- reads -----------------------------------------------------------------------------
    def read(
        self, offset: int, *, max_bytes: int, max_offset: int, min_one_batch: bool
    ) -> ReadResult:
        """Whole batches from the one holding `offset`, none at or past `max_offset`, within
        `max_bytes` (unless min_one_batch and the first batch alone is larger)."""
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self.log_start_offset}, {self.log_end_offset}]"
            )
        max_offset = min(max_offset, self.log_end_offset)
        if offset < max_offset:
            for segment in self.segments[max(bisect.bisect_right(self._bases, offset) - 1, 0) :]:
                header = segment.find_batch(offset)
                if header is None:
                    continue
                end = segment.region_end(
                    header, max_offset=max_offset, max_bytes=max_bytes, min_one_batch=min_one_batch
                )
                if end == header.position:
                    break
                return ReadResult(
                    segment,
                    header.position,
                    end - header.position,
                    header.base_offset,
                    self.log_start_offset,
                    self.log_end_offset,
                )
        active = self.active_segment
        return ReadResult(
            active, active.size, 0, offset, self.log_start_offset, self.log_end_offset
        )

    def _segment_batch(self, segment: LogSegment, header: BatchHeader) -> bytes:
        return os.pread(segment.fd, header.size, header.position)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after `timestamp`, or None."""
        for segment in self.segments:
            if segment.max_timestamp < timestamp:
                continue
            _, indexed_offset = segment.time_index.lookup(timestamp)
            start = max(indexed_offset, self.log_start_offset)
            _, position = segment.offset_index.lookup(start)
            for h in segment.iter_headers(position):
                if h.max_timestamp < timestamp or h.last_offset < self.log_start_offset:
                    continue
                batch = self._segment_batch(segment, h)
                h.position = 0
                for record in decode_records(batch, h):
                    if record.timestamp >= timestamp and record.offset >= self.log_start_offset:
                        return record.offset, record.timestamp
        return None

    def max_timestamp(self) -> tuple[int, int]:
        """(timestamp, offset) of the record with the largest timestamp; (-1, -1) if none."""
        best: LogSegment | None = None
        for segment in self.segments:
            if segment.max_timestamp >= 0 and (
                best is None or segment.max_timestamp > best.max_timestamp
            ):
                best = segment
        if best is None:
            return -1, -1
        header = best.find_batch(best.offset_of_max_timestamp)
        if header is None or header.max_timestamp != best.max_timestamp:
            return best.max_timestamp, best.offset_of_max_timestamp
        batch = self._segment_batch(best, header)
        header.position = 0
        for record in decode_records(batch, header):
            if record.timestamp == header.max_timestamp:
                return record.timestamp, record.offset
        return header.max_timestamp, header.last_offset

    # -- truncation and deletion -----------------------------------------------------------
    def truncate_to(self, offset: int) -> None:
        """Remove everything from the batch containing `offset` onward (follower
        truncation). The log end may land below `offset` if it falls inside a batch."""
        if offset >= self.log_end_offset:
            # Nothing to remove but leader epochs starting there, as Kafka does: a leader
            # replaced before it appended anything in its epoch keeps that epoch's entry at
            # its log end, which the new leader never had; with it, every fetch of this
            # follower would diverge at that epoch again.
            self.leader_epochs.truncate_from_end(offset)
            self.leader_epochs.write()
            return
        if offset < self.segments[0].base_offset:
            self.truncate_fully_and_start_at(offset)
            return
        self._truncations += 1
        keep = bisect.bisect_right(self._bases, offset)
        for segment in self.segments[keep:]:
            self._schedule_delete(segment, None)
        self._set_segments(self.segments[:keep])
        active = self.active_segment
        active.make_active()
        active.truncate_to(offset)
        self.log_end_offset = active.next_offset
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self._roll_flush_offset = min(self._roll_flush_offset, self.log_end_offset)
        self.log_start_offset = min(self.log_start_offset, self.log_end_offset)
        self._rebuild_producer_state(self.log_end_offset)
        self.leader_epochs.write()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment and restart the log empty at `offset`."""
        now_ms = self.active_segment.created_ms
        self._truncations += 1
        for segment in self.segments:
            self._schedule_delete(segment, None)
        self._set_segments([self._new_segment(offset, now_ms, active=True)])
        self._dir_dirty = True
        self.log_start_offset = self.log_end_offset = self.recovery_point = offset
        self._roll_flush_offset = offset
        self.producer_state.clear()
        self.producer_state.delete_snapshots_above(-1)
        self.producer_state.map_end_offset = offset
        self.leader_epochs.clear()
        self.leader_epochs.write()

    def advance_log_start_offset(self, offset: int) -> None:
        """DeleteRecords: move the log start forward and delete the segments wholly below it."""
        if offset <= self.log_start_offset:
            return
        if offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"cannot move the log start to {offset} past the log end {self.log_end_offset}"
            )
        self.log_start_offset = offset
        self._delete_segments(self._deletable(self._below_start, self.log_end_offset), None)
        self.producer_state.truncate_head(offset)
        self.leader_epochs.truncate_from_start(offset)

    def _below_start(self, segment: LogSegment, nxt: LogSegment | None) -> bool:
        return nxt is not None and nxt.base_offset <= self.log_start_offset

    def enforce_retention(self, now_ms: int, *, high_watermark: int | None = None) -> int:
        """Delete segments wholly below the log start offset, then (cleanup.policy=delete)
        those breaching retention.ms (by max timestamp) and retention.bytes, never past
        `high_watermark` (default: the log end). The active segment goes only when all of
        it breaches, after a roll. Returns the number of segments deleted."""
        upper = self.log_end_offset if high_watermark is None else high_watermark
        deleted = self._delete_segments(self._deletable(self._below_start, upper), now_ms)
        if not self.config.delete_enabled:
            return deleted
        retention_ms = self.config.retention_ms
        if retention_ms >= 0:
            deleted += self._delete_segments(
                self._deletable(
                    lambda seg, nxt: now_ms - largest_timestamp(seg) > retention_ms, upper
                ),
                now_ms,
            )
        retention_bytes = self.config.retention_bytes
        size = self.size_bytes
        if retention_bytes >= 0 and size >= retention_bytes:
            excess = size - retention_bytes

            def over_size(seg: LogSegment, nxt: LogSegment | None) -> bool:
                nonlocal excess
                if excess < seg.size:
                    return False
                excess -= seg.size
                return True

            deleted += self._delete_segments(self._deletable(over_size, upper), now_ms)
        return deleted

    def _deletable(
        self, predicate: Callable[[LogSegment, LogSegment | None], bool], upper: int
    ) -> list[LogSegment]:
        """The leading segments satisfying `predicate` whose data lies below `upper`."""
        result = []
        for i, segment in enumerate(self.segments):
            nxt = self.segments[i + 1] if i + 1 < len(self.segments) else None
            if nxt is None and segment.size == 0:
                break
            end = nxt.base_offset if nxt is not None else segment.next_offset
            if end > upper or not predicate(segment, nxt):
                break
            result.append(segment)
        return result

    def _delete_segments(self, doomed: list[LogSegment], now_ms: int | None) -> int:
        if not doomed:
            return 0
        if len(doomed) == len(self.segments):
            self._roll(self.log_end_offset, now_ms if now_ms is not None else self._last_flush_ms)
        for segment in doomed:
            due = None if now_ms is None else now_ms + self.config.file_delete_delay_ms
            self._schedule_delete(segment, due)
        self._set_segments(self.segments[len(doomed) :])
        self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
        self.producer_state.truncate_head(self.log_start_offset)
        self.leader_epochs.truncate_from_start(self.log_start_offset)
        return len(doomed)

    def _schedule_delete(self, segment: LogSegment, due_ms: int | None) -> None:
        segment.rename_for_delete()
        self.pending_deletes.append(_PendingDelete(segment, due_ms))

    def delete_pending_segments(self, now_ms: int, job: DiskJob | None = None) -> int:
        """Close and unlink (on `job`, when given) `.deleted` segments once
        file.delete.delay.ms has passed (their fds stay valid until then for responses being
        sent). Returns how many were removed."""
        remaining = []
        removed = 0
        for pending in self.pending_deletes:
            if pending.due_ms is None:
                pending.due_ms = now_ms + self.config.file_delete_delay_ms
            if now_ms >= pending.due_ms:
                pending.segment.delete_files(job)
                removed += 1
            else:
                remaining.append(pending)
        self.pending_deletes = remaining
        return removed

    def assign_epoch_start(self, epoch: int) -> None:
        """A new leader's epoch starts at its log end, before it appends anything, so that
        OffsetsForLeaderEpoch answers the end of the previous epoch right away."""
        self.leader_epochs.assign_at_log_end(epoch, self.log_end_offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch: (largest known epoch <= `epoch`, its end offset)."""
        return self.leader_epochs.end_offset_for(epoch, self.log_end_offset)

    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> None:
        self.producer_state.remove_expired(now_ms, expiration_ms)

    # -- durability ------------------------------------------------------------------------
    def flush(self, up_to: int | None = None, job: DiskJob | None = None) -> None:
        """fsync segments below `up_to` (default: everything) and advance the recovery point
        once done. With `job`, the fsyncs are queued there (to run on a worker thread) and the
        recovery point advances when it finishes; else they happen now. The only place the
        log fsyncs."""
        if self.offline:
            return
        target = self.log_end_offset if up_to is None else min(up_to, self.log_end_offset)
        run_now = job is None
        job = DiskJob() if job is None else job
        try:
            for segment in self.segments:
                if segment.base_offset < target:
                    segment.start_flush(job)
            snapshots = []
            while self._unsynced_snapshots and self._unsynced_snapshots[0][0] <= target:
                snapshots.append(self._unsynced_snapshots.pop(0))
                job.fsync_path(snapshots[-1][1])
            self.leader_epochs.start_fsync(job)
            dir_dirty, self._dir_dirty = self._dir_dirty, False
            if dir_dirty:
                job.fsync_path(self.directory)
            job.cleanup(partial(self._unless_flushed, job, snapshots, dir_dirty))
        except OSError as exc:
            if run_now:  # a job of the caller's is finished by the caller
                job.finish()
            raise self._storage_error(exc, "preparing a flush") from exc
        truncations = self._truncations

        def flushed() -> None:
            if truncations == self._truncations:
                self.recovery_point = max(self.recovery_point, min(target, self.log_end_offset))

        job.then(flushed)
        if run_now:
            job.run()
            error = job.finish()
            if error is not None:
                raise self._storage_error(error, "flush")

    def _unless_flushed(
        self, job: DiskJob, snapshots: list[tuple[int, Path]], dir_dirty: bool
    ) -> None:
        """A failed or cancelled flush job leaves its fsyncs owed."""
        if not job.succeeded:
            self._unsynced_snapshots[:0] = snapshots
            self._dir_dirty |= dir_dirty

    def has_disk_work(self, now_ms: int) -> bool:
        """Whether flush_if_due or delete_pending_segments has anything to do now: the
        flusher looks at every log each second, and most have nothing to do."""
        return (
            bool(self.pending_deletes)
            or self._roll_flush_offset > self.recovery_point
            or self._flush_interval_due(now_ms)
        )

    def _flush_interval_due(self, now_ms: int) -> bool:
        """flush.ms has passed since the last flush and something is unflushed."""
        return (
            now_ms - self._last_flush_ms >= self.config.flush_interval_ms
            and self.log_end_offset > self.recovery_point
        )

    def flush_if_due(self, now_ms: int, job: DiskJob | None = None) -> None:
        """flush.ms policy, plus the flush of rolled segments owed since the last roll."""
        if self._roll_flush_offset > self.recovery_point:
            self.flush(self._roll_flush_offset, job)
        if self._flush_interval_due(now_ms):
            self.flush(job=job)
            self._last_flush_ms = now_ms

    def _flush_if_too_many_messages(self) -> None:
        if self.log_end_offset - self.recovery_point >= self.config.flush_interval_messages:
            self.request_flush(self)

    def update_config(self, config: LogConfig) -> None:
        self.config = config
        for segment in self.segments:
            segment.index_interval_bytes = config.index_interval_bytes

    def close(self) -> None:
        """Snapshot the producer state (unless the newest snapshot holds it), trim the
        indexes, release every file; nothing is fsynced: the caller makes the whole log
        durable (the LogManager syncs each directory's filesystem once at shutdown). An
        offline log only releases its descriptors: the next start recovers it."""
        if not self.offline:
            self.leader_epochs.write()  # its lagging write, before the directory is synced
            state = self.producer_state
            state.map_end_offset = self.log_end_offset
            if not state.snapshot_current(self.log_start_offset):
                state.take_snapshot(sync=False)
            for segment in self.segments:
                segment.close()
        for segment in self.segments + [p.segment for p in self.pending_deletes]:
            segment.close_fd()
        if not self.offline:
            for pending in self.pending_deletes:
                pending.segment.delete_files()
        self.pending_deletes = []

    def rename_dir(self, directory: Path) -> None:
        """Move the partition directory (deletion marking); open fds stay valid."""
        os.rename(self.directory, directory)
        self.directory = directory
        self.producer_state.directory = directory
        self.leader_epochs.path = directory / self.leader_epochs.path.name
        for segment in self.segments + [p.segment for p in self.pending_deletes]:
            segment.log_path = directory / segment.log_path.name
            for index in (segment.offset_index, segment.time_index, segment.txn_index):
                index.path = directory / index.path.name

    def release_for_delete(self) -> None:
        """The LogManager deleted it (its directory renamed, removed later): descriptors go
        now, and the callbacks that tie it and its segments into reference cycles are cut,
        so its memory goes as soon as nothing holds it (a deleted topic of 10,000 partitions
        is tens of MB, else kept until the next full garbage collection). Its later I/O
        errors are ignored: its directory is no longer a log's."""
        self.leader_epochs.on_change = _nothing
        self.leader_epochs._on_io_error = _ignore
        for segment in self.segments + [p.segment for p in self.pending_deletes]:
            segment.release_for_delete()

    def release_files(self) -> None:
        """Close every descriptor, keeping nothing (before the directory is removed)."""
        for segment in self.segments + [p.segment for p in self.pending_deletes]:
            segment.close_fd()
        self.segments = []
        self.pending_deletes = []

    def delete(self, job: DiskJob | None = None) -> None:
        """Release every file and remove the directory (on `job`, when given)."""
        self.release_files()
        remove = partial(shutil.rmtree, self.directory, ignore_errors=True)
        if job is None:
            remove()
        else:
            job.step(remove)


def _next_offset_of(path: Path, base: int) -> int:
    """The offset after the last whole batch of a segment file (its base if it has none)."""
    end, position = base, 0
    with open(path, "rb") as f:
        fd = f.fileno()
        size = os.fstat(fd).st_size
        while position + BATCH_HEADER_SIZE <= size:
            try:
                header = parse_header(os.pread(fd, BATCH_HEADER_SIZE, position))
            except CorruptRecordError:
                break
            if position + header.size > size:
                break
            end = header.next_offset
            position += header.size
    return end


def largest_timestamp(segment: LogSegment) -> int:
    if segment.max_timestamp >= 0:
        return segment.max_timestamp
    return os.stat(segment.log_path).st_mtime_ns // 1_000_000


def _nothing() -> None:
    pass


def _ignore(_exc: OSError) -> None:
    pass
