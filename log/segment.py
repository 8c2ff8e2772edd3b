"""One log segment: `<base>.log` plus its `.index`, `.timeindex` and `.txnindex`.

Reads hand out (fd, position, size) of the `.log` so the network layer can sendfile() the
bytes without them entering Python. The descriptor is opened on first use and closed again
when the segment goes cold (log.open_files caps how many segments stay open), except while
an fsync of a worker thread holds it (pinned).
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

from gregor.log.checkpoint import DiskJob
from gregor.log.errors import KafkaStorageError
from gregor.log.index import CorruptIndexError, OffsetIndex, TimeIndex
from gregor.log.open_files import OPEN_SEGMENTS
from gregor.log.txn_index import AbortedTxn, TransactionIndex
from gregor.wire.records import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    CorruptRecordError,
    InvalidRecordError,
    UnsupportedCompressionError,
    parse_header,
    validate_batch,
)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
DELETED_SUFFIX = ".deleted"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)

_INT_MAX = (1 << 31) - 1
_SCAN_CHUNK = 4096  # read-ahead when walking a few headers on the fetch path


def file_stem(offset: int) -> str:
    return f"{offset:020d}"


def _ignore_io_error(exc: OSError) -> None:
    pass


class LogSegment:
    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_bytes: int,
        now_ms: int,
        active: bool,
        on_io_error: Callable[[OSError], None] = _ignore_io_error,
        file_suffix: str = "",
    ) -> None:
        """`file_suffix` names a segment being built by the cleaner (`.cleaned`)."""
        stem = str(directory / file_stem(base_offset))
        self.base_offset = base_offset
        self.log_path = Path(stem + LOG_SUFFIX + file_suffix)
        self._on_io_error = on_io_error
        self._fd = -1
        self.pins = 0  # fsyncs in flight on worker threads
        self._gone = False  # closed for good (deleted or closed): never reopened
        self.offline = False  # its log directory failed
        try:
            self.size = os.stat(self.log_path).st_size
        except FileNotFoundError:
            self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
            self.size = 0
            OPEN_SEGMENTS.touch(self)
        self.index_interval_bytes = index_interval_bytes
        self.offset_index = OffsetIndex(
            Path(stem + INDEX_SUFFIX + file_suffix),
            base_offset,
            max_index_bytes,
            self._indexes_loaded,
        )
        self.time_index = TimeIndex(
            Path(stem + TIME_INDEX_SUFFIX + file_suffix),
            base_offset,
            max_index_bytes,
            self._indexes_loaded,
        )
        self.txn_index = TransactionIndex(Path(stem + TXN_INDEX_SUFFIX + file_suffix), base_offset)
        self.active = False
        self.bytes_since_last_index_entry = 0
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1  # last offset of the batch holding max_timestamp
        self.next_offset = base_offset
        self.created_ms = now_ms
        self._first_batch_timestamp: int | None = None
        self.unflushed = False
        # (offset, position) of the batch boundary where the last read ended: consumers
        # usually fetch from exactly there next, which then needs no index lookup or scan.
        self._read_hint: tuple[int, int] | None = None
        if active:
            self.make_active()

    # -- descriptor and residency ----------------------------------------------------------
    @property
    def fd(self) -> int:
        """The `.log` descriptor, reopened if the segment went cold; -1 once deleted."""
        if self.offline:
            raise KafkaStorageError(f"{self.log_path} is in an offline log directory")
        fd = self._fd
        if fd < 0:
            if self._gone:
                return -1
            try:
                fd = self._fd = os.open(self.log_path, os.O_RDWR)
            except OSError as exc:
                raise KafkaStorageError(f"cannot open {self.log_path}: {exc}") from exc
        OPEN_SEGMENTS.touch(self)
        return fd

    @property
    def pinned(self) -> bool:
        return self.pins > 0

    def _indexes_loaded(self) -> None:
        OPEN_SEGMENTS.touch(self)

    def go_cold(self) -> None:
        """Write out pending index entries, drop them from memory, close the descriptor."""
        try:
            for index in (self.offset_index, self.time_index):
                index.write_pending()
                index.unload()
        except OSError as exc:
            self._on_io_error(exc)
        self._release_fd()

    def _release_fd(self) -> None:
        if self._fd >= 0 and not self.pins:
            os.close(self._fd)
            self._fd = -1
        if self._fd < 0:
            OPEN_SEGMENTS.forget(self)

    def _storage_error(self, exc: OSError, what: str) -> KafkaStorageError:
        self._on_io_error(exc)
        return KafkaStorageError(f"{what} {self.log_path} failed: {exc}")

    # -- loading and recovery --------------------------------------------------------------
    def load(self) -> bool:
        """Check the indexes and find the segment's end; False if a recovery is needed."""
        if self.size and (self.offset_index.was_missing or self.time_index.was_missing):
            return False
        try:
            self.offset_index.sanity_check(self.size)
        except CorruptIndexError:
            return False
        last_offset, position = self.offset_index.last_entry()
        if self.time_index.entries:
            self.max_timestamp, self.offset_of_max_timestamp = self.time_index.last_entry()
        end = position
        for header in self.iter_headers(position):
            self._track_timestamp(header)
            self.next_offset = header.next_offset
            end = header.position + header.size
        if end != self.size or (self.offset_index.entries and self.next_offset <= last_offset):
            return False
        try:
            self.time_index.sanity_check(self.next_offset)
        except CorruptIndexError:
            return False
        return True

    def recover(self) -> int:
        """Validate every batch, truncate at the first bad one, rebuild both indexes.
        Returns the number of bytes truncated."""
        for index in (self.offset_index, self.time_index):
            index.reset()
        self.bytes_since_last_index_entry = 0
        self.max_timestamp = self.offset_of_max_timestamp = -1
        self.next_offset = self.base_offset
        self._first_batch_timestamp = None
        valid = 0
        if self.size:
            with mmap.mmap(self.fd, self.size, prot=mmap.PROT_READ) as mm:
                valid = self._rebuild_from(mm)
        truncated = self.size - valid
        if truncated:
            os.ftruncate(self.fd, valid)
            self.size = valid
            self.unflushed = True
        if not self.active:
            self.offset_index.trim()
            self.time_index.trim()
        return truncated

    def _rebuild_from(self, mm: mmap.mmap) -> int:
        pos = 0
        prev_next = self.base_offset
        with memoryview(mm) as view:
            while pos < self.size:
                try:
                    header = parse_header(view, pos)
                    if header.size > self.size - pos:
                        break
                    validate_batch(view, header)
                except InvalidRecordError:
                    pass  # compacted batches legitimately break the produce-side count rule
                except (CorruptRecordError, UnsupportedCompressionError):
                    break
                if (
                    header.base_offset < prev_next
                    or header.last_offset - self.base_offset > _INT_MAX
                ):
                    break  # offsets must increase and stay within the segment's range
                self._index_batch(header.position, header)
                prev_next = self.next_offset = header.next_offset
                pos += header.size
        return pos

    # -- appends ---------------------------------------------------------------------------
    def _track_timestamp(self, header: BatchHeader) -> None:
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.offset_of_max_timestamp = header.last_offset

    def _index_batch(self, position: int, header: BatchHeader) -> None:
        """Kafka's indexing rule: an entry once more than index.interval.bytes accumulated."""
        self._track_timestamp(header)
        if self._first_batch_timestamp is None and position == 0:
            self._first_batch_timestamp = header.max_timestamp
        # A full index only skips entries: the next append rolls the segment.
        if self.bytes_since_last_index_entry > self.index_interval_bytes and not self.indexes_full:
            self.offset_index.append(header.last_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += header.size

    def append(self, data: bytes | bytearray | memoryview, headers: list[BatchHeader]) -> None:
        """Write `data` (whole batches, described by `headers` positioned within it) at the
        end in one system call, then index it. No fsync."""
        start = self.size
        view = memoryview(data)
        written = 0
        fd = self.fd
        try:
            while written < len(view):
                written += os.pwrite(fd, view[written:], start + written)
        except OSError as exc:
            # Leave no partial batch behind (best effort), and report a storage failure.
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)
            raise self._storage_error(exc, "write to") from exc
        self.size += written
        for header in headers:
            self._index_batch(start + header.position, header)
        self.next_offset = headers[-1].next_offset
        self.unflushed = True

    def add_aborted_txn(self, txn: AbortedTxn) -> None:
        self.txn_index.append(txn)
        self.unflushed = True

    def truncate_txn_index(self, offset: int) -> None:
        """Drop the aborted transactions whose marker is at or after ``offset``."""
        if self.txn_index.truncate_to(offset):
            self.unflushed = True

    @property
    def indexes_full(self) -> bool:
        return self.offset_index.is_full or self.time_index.is_full

    def first_batch_timestamp(self) -> int:
        """Max timestamp of the first batch (Kafka's base for time-based rolling); -1 if empty."""
        if self._first_batch_timestamp is None:
            header = self.read_header(0)
            self._first_batch_timestamp = header.max_timestamp if header else -1
        return self._first_batch_timestamp

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        first = self.first_batch_timestamp() if self.size else -1
        if first >= 0:
            return message_timestamp - first
        return now_ms - self.created_ms

    # -- reads -----------------------------------------------------------------------------
    def read_header(self, position: int) -> BatchHeader | None:
        if position + BATCH_HEADER_SIZE > self.size:
            return None
        header = parse_header(os.pread(self.fd, BATCH_HEADER_SIZE, position))
        header.position = position
        return header

    def iter_headers(self, position: int = 0, chunk: int = _SCAN_CHUNK) -> Iterator[BatchHeader]:
        """Headers of the batches from `position` (a batch start) to the end of the segment,
        reading ahead `chunk` bytes at a time. Stops quietly at a torn tail."""
        buf = b""
        buf_start = 0
        while position + BATCH_HEADER_SIZE <= self.size:
            if not buf_start <= position <= buf_start + len(buf) - BATCH_HEADER_SIZE:
                buf = os.pread(self.fd, max(chunk, BATCH_HEADER_SIZE), position)
                buf_start = position
            try:
                header = parse_header(buf, position - buf_start)
            except CorruptRecordError:
                return
            header.position = position
            if position + header.size > self.size:
                return
            yield header
            position += header.size

    def find_batch(self, offset: int) -> BatchHeader | None:
        """The first batch whose last offset is >= `offset`, or None if past this segment."""
        hint = self._read_hint
        if hint is not None and hint[0] == offset:
            if hint[1] >= self.size:
                return None
            header = self.read_header(hint[1])
            if header is not None and header.base_offset == offset:
                return header
        _, position = self.offset_index.lookup(offset)
        for header in self.iter_headers(position):
            if header.last_offset >= offset:
                return header
        return None

    def region_end(
        self, first: BatchHeader, *, max_offset: int, max_bytes: int, min_one_batch: bool
    ) -> int:
        """End position of the run of whole batches from `first` that start below
        `max_offset` and fit in `max_bytes` (the first alone if min_one_batch and too big)."""
        start = first.position
        if first.base_offset >= max_offset:
            return start
        limit = start + max_bytes
        first_end = start + first.size
        if first_end > limit:
            return first_end if min_one_batch else start
        # Every batch before an index entry within both limits qualifies: jump there.
        position = max(first_end, self.offset_index.last_position_within(limit, max_offset))
        end = position
        next_offset = first.next_offset if position == first_end else None
        for header in self.iter_headers(position):
            header_end = header.position + header.size
            if header.base_offset >= max_offset or header_end > limit:
                break
            end = header_end
            next_offset = header.next_offset
        if next_offset is not None:
            self._read_hint = (next_offset, end)
        return end

    # -- maintenance -----------------------------------------------------------------------
    def truncate_to(self, offset: int) -> int:
        """Drop the batch containing `offset` and everything after; returns bytes removed."""
        header = self.find_batch(offset)
        if header is None:
            return 0
        removed = self.size - header.position
        self._read_hint = None
        os.ftruncate(self.fd, header.position)
        self.size = header.position
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self._restore_tail_state()
        self.bytes_since_last_index_entry = 0
        if self.size == 0:
            self._first_batch_timestamp = None
        self.unflushed = True
        return removed

    def _restore_tail_state(self) -> None:
        """Max timestamp and next offset from the last index entries plus a short scan."""
        if self.time_index.entries:
            self.max_timestamp, self.offset_of_max_timestamp = self.time_index.last_entry()
        else:
            self.max_timestamp = self.offset_of_max_timestamp = -1
        _, position = self.offset_index.last_entry()
        self.next_offset = self.base_offset
        for header in self.iter_headers(position):
            self._track_timestamp(header)
            self.next_offset = header.next_offset

    def on_become_inactive(self) -> None:
        """Record the final max timestamp and trim the indexes (on roll)."""
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(
                self.max_timestamp, self.offset_of_max_timestamp, skip_full_check=True
            )
        self.active = False
        try:
            self.offset_index.trim()
            self.time_index.trim()
        except OSError as exc:
            raise self._storage_error(exc, "trimming the indexes of") from exc
        self.unflushed = True  # the trimmed indexes are owed an fsync with the log

    def make_active(self) -> None:
        try:
            self.offset_index.reserve()
            self.time_index.reserve()
        except OSError as exc:
            raise self._storage_error(exc, "sizing the indexes of") from exc
        self.active = True

    def start_flush(self, job: DiskJob) -> None:
        """Queue the fsync of the log and its indexes (written out here) on `job`; the log's
        descriptor stays open (pinned) until the job finishes."""
        if not self.unflushed:
            return
        job.fsync(self.fd)
        self.pins += 1
        job.cleanup(partial(self._unpin, job))
        for index in (self.offset_index, self.time_index):
            index.write_pending()
            job.fsync_path(index.path)
        if self.txn_index.unflushed:
            self.txn_index.unflushed = False
            job.fsync_path(self.txn_index.path)
        self.unflushed = False

    def _unpin(self, job: DiskJob) -> None:
        self.pins -= 1
        if not job.succeeded:
            self.unflushed = True  # still owed
            self.txn_index.unflushed = self.txn_index.path.exists()
        if self._gone or self.offline:
            self._release_fd()

    def close(self) -> None:
        if self.max_timestamp >= 0 and self.active:
            self.time_index.maybe_append(
                self.max_timestamp, self.offset_of_max_timestamp, skip_full_check=True
            )
        self.offset_index.trim()
        self.time_index.trim()
        self.close_fd()

    def go_offline(self) -> None:
        """Its directory failed: no more reads or writes; the descriptor is released."""
        self.offline = True
        self._release_fd()

    def rename_for_delete(self) -> None:
        """Rename every file to `*.deleted`; the fd stays valid for in-flight reads."""
        renamed = []
        for path in self.paths:
            target = path.with_name(path.name + DELETED_SUFFIX)
            if path.exists():
                os.rename(path, target)
            renamed.append(target)
        (
            self.log_path,
            self.offset_index.path,
            self.time_index.path,
            self.txn_index.path,
        ) = renamed

    @property
    def paths(self) -> tuple[Path, Path, Path, Path]:
        """The segment's files (the `.txnindex` may not exist)."""
        return self.log_path, self.offset_index.path, self.time_index.path, self.txn_index.path

    def release_for_delete(self) -> None:
        """Its log was deleted: the descriptor goes now, not after file.delete.delay.ms; a
        read in flight reopens the renamed file (as after going cold) until it is removed.
        The callbacks tying it to its log and its indexes to it (reference cycles) are cut,
        so it is freed once nothing holds it, not at the next full garbage collection."""
        self._release_fd()
        self._on_io_error = _ignore_io_error
        self.offset_index.forget_owner()
        self.time_index.forget_owner()

    def close_fd(self) -> None:
        """Release the descriptor for good (a pinned one when its fsync finishes)."""
        self._gone = True
        self._release_fd()

    def delete_files(self, job: DiskJob | None = None) -> None:
        """Close, then unlink the files (on `job`, when given)."""
        self.close_fd()
        for path in self.paths:
            unlink = partial(path.unlink, missing_ok=True)
            if job is None:
                unlink()
            else:
                job.step(unlink)
