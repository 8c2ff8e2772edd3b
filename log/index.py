"""Sparse per-segment indexes, memory-mapped like Kafka's.

`.index`: 8-byte entries (relative offset int32, file position int32), one per
index.interval.bytes of log, pointing at a batch start and keyed by that batch's last offset.
`.timeindex`: 12-byte entries (timestamp int64, relative offset int32), appended when the
segment's max timestamp grows. The active segment's files are preallocated to
segment.index.bytes and trimmed to their entries when the segment is rolled or closed.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Callable
from pathlib import Path


class CorruptIndexError(Exception):
    pass


class _Index:
    """Shared mmap bookkeeping; subclasses define the entry layout and the key orders."""

    ENTRY: struct.Struct

    def __init__(self, path: Path, base_offset: int, max_index_bytes: int, *, writable: bool):
        self.path = path
        self.base_offset = base_offset
        self._entry_size = self.ENTRY.size
        self._max_entries = max(max_index_bytes // self._entry_size, 1)
        self.was_missing = not path.exists()
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            length = os.fstat(fd).st_size
            self.entries = length // self._entry_size
            self._corrupt_length = length % self._entry_size != 0
            self._map: mmap.mmap | bytes = b""
            self.writable = False
            if writable:
                self._map_writable(fd)
            elif length:
                self._map = mmap.mmap(fd, length, prot=mmap.PROT_READ)
        finally:
            os.close(fd)

    def _map_writable(self, fd: int) -> None:
        size = self._max_entries * self._entry_size
        self._max_entries = max(self._max_entries, self.entries)
        size = max(size, self.entries * self._entry_size)
        os.ftruncate(fd, size)
        self._map = mmap.mmap(fd, size)
        self.writable = True

    @property
    def is_full(self) -> bool:
        return self.entries >= self._max_entries

    @property
    def size_bytes(self) -> int:
        return self.entries * self._entry_size

    def entry(self, n: int) -> tuple[int, ...]:
        return self.ENTRY.unpack_from(self._map, n * self._entry_size)

    def _append_raw(self, *values: int) -> None:
        if not self.writable:
            raise ValueError(f"index {self.path} is not writable")
        if self.is_full:
            raise ValueError(f"index {self.path} is full")
        self.ENTRY.pack_into(self._map, self.entries * self._entry_size, *values)
        self.entries += 1

    def _last_index_where(self, pred_true_prefix: Callable[[tuple[int, ...]], bool]) -> int:
        """Index of the last entry satisfying a predicate that holds on a prefix; -1 if none."""
        lo, hi = 0, self.entries
        while lo < hi:
            mid = (lo + hi) // 2
            if pred_true_prefix(self.entry(mid)):
                lo = mid + 1
            else:
                hi = mid
        return lo - 1

    def _truncate_entries(self, keep: int) -> None:
        self.entries = min(self.entries, keep)

    def reset(self) -> None:
        """Drop every entry (before a rebuild)."""
        self.entries = 0

    def flush(self) -> None:
        if isinstance(self._map, mmap.mmap) and self.writable:
            self._map.flush()

    def make_read_only(self) -> None:
        """Trim the file to its entries and remap read-only (on roll)."""
        self.close()
        fd = os.open(self.path, os.O_RDONLY)
        try:
            if self.entries:
                self._map = mmap.mmap(fd, self.size_bytes, prot=mmap.PROT_READ)
        finally:
            os.close(fd)

    def make_writable(self) -> None:
        """Remap preallocated for appends (a segment becomes active again after truncation)."""
        if self.writable:
            return
        self.release()
        fd = os.open(self.path, os.O_RDWR)
        try:
            self._map_writable(fd)
        finally:
            os.close(fd)

    def release(self) -> None:
        if isinstance(self._map, mmap.mmap):
            if self.writable:
                self._map.flush()
            self._map.close()
        self._map = b""
        self.writable = False

    def close(self) -> None:
        """Flush, unmap, and trim the file to the valid entries."""
        self.release()
        if self.path.exists():
            os.truncate(self.path, self.size_bytes)

    def fsync(self) -> None:
        self.flush()
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def rename(self, path: Path) -> None:
        os.rename(self.path, path)
        self.path = path

    def delete(self) -> None:
        self.release()
        self.path.unlink(missing_ok=True)


class OffsetIndex(_Index):
    ENTRY = struct.Struct(">ii")

    def append(self, offset: int, position: int) -> None:
        self._append_raw(offset - self.base_offset, position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry with offset <= `offset`, else (base, 0)."""
        rel = offset - self.base_offset
        n = self._last_index_where(lambda e: e[0] <= rel)
        if n < 0:
            return self.base_offset, 0
        rel_off, pos = self.entry(n)
        return self.base_offset + rel_off, pos

    def last_position_within(self, position_limit: int, offset_limit: int) -> int:
        """Position of the last entry with position <= limit and offset < offset_limit, else -1.
        Every batch before that position ends within the limit and starts below offset_limit."""
        rel_limit = offset_limit - self.base_offset
        n = self._last_index_where(lambda e: e[1] <= position_limit and e[0] < rel_limit)
        return self.entry(n)[1] if n >= 0 else -1

    def truncate_to(self, offset: int) -> None:
        """Remove entries for batches whose last offset is >= `offset`."""
        rel = offset - self.base_offset
        self._truncate_entries(self._last_index_where(lambda e: e[0] < rel) + 1)

    def last_entry(self) -> tuple[int, int]:
        if not self.entries:
            return self.base_offset, 0
        rel_off, pos = self.entry(self.entries - 1)
        return self.base_offset + rel_off, pos

    def sanity_check(self, log_size: int) -> None:
        """Raise CorruptIndexError unless entries strictly increase and point inside the log."""
        if self._corrupt_length:
            raise CorruptIndexError(f"{self.path}: length is not a multiple of 8")
        prev_off = prev_pos = -1
        for rel_off, pos in self.ENTRY.iter_unpack(self._map[: self.size_bytes]):
            if rel_off <= prev_off or pos <= prev_pos or pos >= log_size:
                raise CorruptIndexError(f"{self.path}: entry ({rel_off}, {pos}) out of order")
            prev_off, prev_pos = rel_off, pos


class TimeIndex(_Index):
    ENTRY = struct.Struct(">qi")

    def maybe_append(self, timestamp: int, offset: int, *, skip_full_check: bool = False) -> None:
        """Append only if `timestamp` exceeds the last entry's (timestamps strictly increase)."""
        if self.entries and timestamp <= self.entry(self.entries - 1)[0]:
            return
        if self.is_full and skip_full_check:
            return
        self._append_raw(timestamp, offset - self.base_offset)

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the last entry with timestamp <= `timestamp`, else (-1, base)."""
        n = self._last_index_where(lambda e: e[0] <= timestamp)
        if n < 0:
            return -1, self.base_offset
        ts, rel_off = self.entry(n)
        return ts, self.base_offset + rel_off

    def truncate_to(self, offset: int) -> None:
        rel = offset - self.base_offset
        self._truncate_entries(self._last_index_where(lambda e: e[1] < rel) + 1)

    def last_entry(self) -> tuple[int, int]:
        if not self.entries:
            return -1, self.base_offset
        ts, rel_off = self.entry(self.entries - 1)
        return ts, self.base_offset + rel_off

    def sanity_check(self, next_offset: int) -> None:
        if self._corrupt_length:
            raise CorruptIndexError(f"{self.path}: length is not a multiple of 12")
        prev_ts, prev_off = -(1 << 63), -1
        rel_end = next_offset - self.base_offset
        for ts, rel_off in self.ENTRY.iter_unpack(self._map[: self.size_bytes]):
            if ts <= prev_ts or rel_off < prev_off or rel_off >= rel_end:
                raise CorruptIndexError(f"{self.path}: entry ({ts}, {rel_off}) out of order")
            prev_ts, prev_off = ts, rel_off
