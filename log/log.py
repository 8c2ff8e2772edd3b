"""One partition's log: an ordered list of segments with appends, zero-copy reads,
roll, retention, truncation, recovery and the idempotent-producer state."""

from __future__ import annotations

import bisect
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from log.checkpoint import fsync_dir
from log.config import LogConfig
from log.errors import (
    InvalidRecordError,
    InvalidTimestampError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    UnexpectedAppendOffsetError,
)
from log.leader_epoch import LeaderEpochCache
from log.producer_state import ProducerAppendInfo, ProducerStateManager
from log.segment import DELETED_SUFFIX, LOG_SUFFIX, SEGMENT_SUFFIXES, LogSegment
from log.validator import check_keys_present, needs_recompression, recompress
from wire.records import (
    BatchHeader,
    assign_offsets,
    decode_records,
    split_batches,
    validate_batch,
)

INT_MAX = (1 << 31) - 1
# Leftovers of an interrupted delete, compaction or swap, removed when a log is opened.
_LEFTOVER_SUFFIXES = (DELETED_SUFFIX, ".cleaned", ".swap", ".tmp")
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
        """The segment's descriptor when read (-1 once closed), never a stale number."""
        return self.segment.fd


class _PendingDelete:
    __slots__ = ("segment", "due_ms")

    def __init__(self, segment: LogSegment, due_ms: int | None) -> None:
        self.segment = segment
        self.due_ms = due_ms


class Log:
    """Not thread-safe: the caller serialises calls per partition."""

    def __init__(self, directory: Path, config: LogConfig, now_ms: int) -> None:
        self.directory = directory
        self.config = config
        self.segments: list[LogSegment] = []
        self._bases: list[int] = []
        self.log_start_offset = 0
        self.log_end_offset = 0
        self.recovery_point = 0
        self.producer_state = ProducerStateManager(directory)
        self.leader_epochs = LeaderEpochCache(directory)
        self.pending_deletes: list[_PendingDelete] = []
        self._last_flush_ms = now_ms
        self._roll_flush_offset = 0  # flush owed up to here since a roll (done by flush_if_due)
        self._dir_dirty = False

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
    ) -> Log:
        directory.mkdir(parents=True, exist_ok=True)
        log = cls(directory, config, now_ms)
        log._load(recovery_point, log_start_offset, clean_shutdown, now_ms)
        return log

    def _new_segment(self, base_offset: int, now_ms: int, *, active: bool) -> LogSegment:
        return LogSegment(
            self.directory,
            base_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_bytes=self.config.segment_index_bytes,
            now_ms=now_ms,
            active=active,
        )

    def _set_segments(self, segments: list[LogSegment]) -> None:
        self.segments = segments
        self._bases = [s.base_offset for s in segments]

    def _remove_leftovers(self) -> list[int]:
        """Delete interrupted-operation leftovers and orphan indexes; return segment bases."""
        bases = set()
        stems_with_log = {p.stem for p in self.directory.glob(f"*{LOG_SUFFIX}")}
        for path in self.directory.iterdir():
            name = path.name
            if name.endswith(_LEFTOVER_SUFFIXES):
                path.unlink(missing_ok=True)
                continue
            stem, dot, suffix = name.partition(".")
            if not (dot and stem.isdigit() and len(stem) == 20):
                continue
            if "." + suffix == LOG_SUFFIX:
                bases.add(int(stem))
            elif "." + suffix in SEGMENT_SUFFIXES and stem not in stems_with_log:
                path.unlink(missing_ok=True)
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
        elif not kept[-1].offset_index.writable:
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
            _, position = segment.offset_index.lookup(start)
            for h in segment.iter_headers(position, _REPLAY_CHUNK):
                if h.last_offset < start:
                    continue
                epochs.assign(h.partition_leader_epoch, h.base_offset)
                if h.producer_id >= 0:
                    state.apply_batch(h)
        state.map_end_offset = self.log_end_offset
        state.truncate_head(self.log_start_offset)
        epochs.truncate_from_start(self.log_start_offset)

    # -- properties ------------------------------------------------------------------------
    @property
    def active_segment(self) -> LogSegment:
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
        A retried batch of an idempotent producer returns its original offsets instead.
        ``origin_client=False`` marks batches the broker built itself (Kafka's append
        origin COORDINATOR): the checks that only guard against client input are skipped."""
        config = self.config
        # Broker-owned fields are patched in place: in the request's own buffer when it is
        # writable (a large frame, received in place), else in the one copy made here.
        if isinstance(records, memoryview) and not records.readonly:
            data: bytearray | memoryview = records
        else:
            data = bytearray(records)
        headers = split_batches(data)
        if not headers:
            return AppendResult(-1, -1, -1, self.log_start_offset, 0)
        for h in headers:
            self._check_size(h)
            validate_batch(data, h)
            if not origin_client:
                continue
            if h.is_control:
                raise InvalidRecordError("clients may not produce control batches")
            if not config.log_append_time:
                self._check_timestamps(h, now_ms)
        if config.compact and origin_client:
            check_keys_present(data, headers)
        if needs_recompression(config.compression_type, headers):
            data, headers = recompress(data, headers, config.compression_type)
            for h in headers:
                self._check_size(h)
        append_time = now_ms if config.log_append_time else None
        state = self.producer_state
        infos: dict[int, ProducerAppendInfo] = {}
        next_offset = self.log_end_offset
        record_count = 0
        for h in headers:
            if h.producer_id >= 0:
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
                state.stage(infos, h, validate=True)
            next_offset = h.next_offset
            record_count += h.record_count
        first_offset = self.log_end_offset
        self.leader_epochs.assign(leader_epoch, first_offset)
        self._write(data, headers, now_ms)
        state.commit(infos, self.log_end_offset)
        self._flush_if_too_many_messages()
        return AppendResult(
            first_offset,
            next_offset - 1,
            now_ms if append_time is not None else -1,
            self.log_start_offset,
            record_count,
        )

    def _check_size(self, h: BatchHeader) -> None:
        if h.size > self.config.max_message_bytes:
            raise RecordTooLargeError(
                f"batch of {h.size} bytes exceeds max.message.bytes {self.config.max_message_bytes}"
            )

    def _check_timestamps(self, h: BatchHeader, now_ms: int) -> None:
        # Per batch: the first and the largest timestamp stand in for every record's.
        before = self.config.message_timestamp_before_max_ms
        after = self.config.message_timestamp_after_max_ms
        for ts in (h.base_timestamp, h.max_timestamp):
            if ts >= 0 and (now_ms - ts > before or ts - now_ms > after):
                raise InvalidTimestampError(
                    f"timestamp {ts} is out of range for now={now_ms} "
                    f"(before.max.ms={before}, after.max.ms={after})"
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
                state.stage(infos, h, validate=False)
        self._write(records, headers, None)
        state.commit(infos, self.log_end_offset)
        self._flush_if_too_many_messages()
        return AppendResult(
            headers[0].base_offset,
            headers[-1].last_offset,
            -1,
            self.log_start_offset,
            sum(h.record_count for h in headers),
        )

    def _write(
        self, data: bytes | bytearray | memoryview, headers: list[BatchHeader], now_ms: int | None
    ) -> None:
        first_offset = headers[0].base_offset
        last_offset = headers[-1].last_offset
        max_ts = max(h.max_timestamp for h in headers)
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
        """segment.ms less the segment's jitter. Kafka draws the jitter at random; hashing the
        base offset spreads rolls across partitions the same way, deterministically."""
        jitter = min(self.config.segment_jitter_ms, self.config.segment_ms)
        if jitter <= 0:
            return self.config.segment_ms
        return self.config.segment_ms - (segment.base_offset * 2654435761) % jitter

    def _replace_empty_active(self, base_offset: int) -> None:
        old = self.segments[-1]
        now_ms = old.created_ms
        old.delete_files()
        self._set_segments(
            [*self.segments[:-1], self._new_segment(base_offset, now_ms, active=True)]
        )
        self._dir_dirty = True

    def _roll(self, base_offset: int, now_ms: int) -> None:
        self.active_segment.on_become_inactive()
        self._set_segments([*self.segments, self._new_segment(base_offset, now_ms, active=True)])
        self._dir_dirty = True
        self.producer_state.map_end_offset = base_offset
        self.producer_state.take_snapshot(sync=False)
        self._roll_flush_offset = base_offset

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
            return
        if offset < self.segments[0].base_offset:
            self.truncate_fully_and_start_at(offset)
            return
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

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment and restart the log empty at `offset`."""
        now_ms = self.active_segment.created_ms
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
                    lambda seg, nxt: now_ms - _largest_timestamp(seg) > retention_ms, upper
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

    def delete_pending_segments(self, now_ms: int) -> int:
        """Close and unlink `.deleted` segments once file.delete.delay.ms has passed (their fds
        stay valid until then for responses being sent). Returns how many were removed."""
        remaining = []
        removed = 0
        for pending in self.pending_deletes:
            if pending.due_ms is None:
                pending.due_ms = now_ms + self.config.file_delete_delay_ms
            if now_ms >= pending.due_ms:
                pending.segment.delete_files()
                removed += 1
            else:
                remaining.append(pending)
        self.pending_deletes = remaining
        return removed

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch: (largest known epoch <= `epoch`, its end offset)."""
        return self.leader_epochs.end_offset_for(epoch, self.log_end_offset)

    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> None:
        self.producer_state.remove_expired(now_ms, expiration_ms)

    # -- durability ------------------------------------------------------------------------
    def flush(self, up_to: int | None = None) -> None:
        """fsync segments below `up_to` (default: everything) and advance the recovery point.
        The only place the log fsyncs."""
        target = self.log_end_offset if up_to is None else min(up_to, self.log_end_offset)
        for segment in self.segments:
            if segment.base_offset < target:
                segment.flush()
        self.leader_epochs.fsync()
        if self._dir_dirty:
            fsync_dir(self.directory)
            self._dir_dirty = False
        self.recovery_point = max(self.recovery_point, target)

    def flush_if_due(self, now_ms: int) -> None:
        """flush.ms policy, plus the flush of rolled segments owed since the last roll."""
        if self._roll_flush_offset > self.recovery_point:
            self.flush(self._roll_flush_offset)
        if (
            now_ms - self._last_flush_ms >= self.config.flush_interval_ms
            and self.log_end_offset > self.recovery_point
        ):
            self.flush()
            self._last_flush_ms = now_ms

    def _flush_if_too_many_messages(self) -> None:
        if self.log_end_offset - self.recovery_point >= self.config.flush_interval_messages:
            self.flush()

    def update_config(self, config: LogConfig) -> None:
        self.config = config
        for segment in self.segments:
            segment.index_interval_bytes = config.index_interval_bytes

    def close(self) -> None:
        """Snapshot the producer state (fsynced), trim indexes, release every file."""
        self.producer_state.map_end_offset = self.log_end_offset
        self.producer_state.take_snapshot(sync=True)
        self.leader_epochs.fsync()
        for segment in self.segments:
            segment.close()
        for pending in self.pending_deletes:
            pending.segment.delete_files()
        self.pending_deletes = []

    def rename_dir(self, directory: Path) -> None:
        """Move the partition directory (deletion marking); open fds stay valid."""
        os.rename(self.directory, directory)
        self.directory = directory
        self.producer_state.directory = directory
        for segment in self.segments + [p.segment for p in self.pending_deletes]:
            segment.log_path = directory / segment.log_path.name
            for index in (segment.offset_index, segment.time_index):
                index.path = directory / index.path.name

    def delete(self) -> None:
        """Release every file and remove the directory."""
        for segment in self.segments + [p.segment for p in self.pending_deletes]:
            segment.close_fd()
        self.segments = []
        self.pending_deletes = []
        shutil.rmtree(self.directory, ignore_errors=True)


def _largest_timestamp(segment: LogSegment) -> int:
    if segment.max_timestamp >= 0:
        return segment.max_timestamp
    return os.fstat(segment.fd).st_mtime_ns // 1_000_000
