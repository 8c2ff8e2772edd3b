"""Sparse per-segment indexes, in Kafka's file formats.

`.index`: 8-byte entries (relative offset int32, file position int32), one per
index.interval.bytes of log, pointing at a batch start and keyed by that batch's last offset.
`.timeindex`: 12-byte entries (timestamp int64, relative offset int32), appended when the
segment's max timestamp grows.

Entries live in memory, loaded from the file on first use and dropped again when the segment
goes cold; appends reach the file with pwrite() when the segment is flushed, rolled or goes
cold. Nothing is memory-mapped: a mapped page that needs a new block of a full disk kills the
process with SIGBUS, where a failed pwrite() is an error the log can report, and every map
counts against vm.max_map_count. As in Kafka, the active segment's files are sized to
segment.index.bytes (sparse) and trimmed to their entries when the segment is rolled or closed.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from pathlib import Path


class CorruptIndexError(Exception):
    pass


class _Index:
    """Shared bookkeeping; subclasses define the entry layout and the key orders."""

    ENTRY: struct.Struct

    def __init__(
        self, path: Path, base_offset: int, max_index_bytes: int, on_load: Callable[[], None]
    ) -> None:
        self.path = path
        self._on_load = on_load
        self.base_offset = base_offset
        self._entry_size = self.ENTRY.size
        self._max_entries = max(max_index_bytes // self._entry_size, 1)
        try:
            self._file_size = path.stat().st_size
            self.was_missing = False
        except FileNotFoundError:
            self._file_size = 0
            self.was_missing = True
        self._data: bytearray | None = None  # None: not loaded
        self._entries = self._file_size // self._entry_size
        self._corrupt_length = self._file_size % self._entry_size != 0
        self._written = self._entries * self._entry_size  # bytes of _data known to be in the file
        self._reserved = 0  # file length reserved for appends (active segment), 0 if none

    # -- memory ----------------------------------------------------------------------------
    def _loaded(self) -> bytearray:
        data = self._data
        if data is None and not self._entries:  # nothing to read (most indexes at load)
            data = self._data = bytearray()
        if data is None:
            try:
                with open(self.path, "rb") as f:
                    data = bytearray(f.read(self._entries * self._entry_size))
            except FileNotFoundError:
                data = bytearray()
            self._entries = len(data) // self._entry_size
            self._written = min(self._written, len(data))
            self._data = data
            self._on_load()
        return data

    def forget_owner(self) -> None:
        """Its segment was deleted: loading no longer tells it (see release_for_delete)."""
        self._on_load = _nothing

    @property
    def loaded(self) -> bool:
        return self._data is not None

    @property
    def dirty(self) -> bool:
        """Entries (or a truncation) not yet in the file."""
        return self._written != self._entries * self._entry_size or (
            not self._reserved and self._file_size != self._written
        )

    def unload(self) -> None:
        """Drop the in-memory entries (after write_pending); they are re-read on next use."""
        if not self.dirty:
            self._data = None

    # -- files -----------------------------------------------------------------------------
    def reserve(self) -> None:
        """Reserve segment.index.bytes for the active segment's appends. The file is sized
        to it when its first entry is written: an active segment that never gets one (most
        of a large cluster's partitions) costs no resize when loaded and none when closed."""
        size = max(self._max_entries, self._entries) * self._entry_size
        self._max_entries = size // self._entry_size
        if self.was_missing:
            os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644))
            self.was_missing = False
        self._reserved = max(self._file_size, size)

    def write_pending(self) -> None:
        """pwrite() the entries not yet in the file, trimming it unless space is reserved."""
        if not self.dirty:
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            end = self._entries * self._entry_size
            if self._written < end:
                if self._file_size < self._reserved:
                    os.ftruncate(fd, self._reserved)
                    self._file_size = self._reserved
                data = self._loaded()
                os.pwrite(fd, data[self._written : end], self._written)
            if not self._reserved and self._file_size != end:
                os.ftruncate(fd, end)
                self._file_size = end
            self._written = end
        finally:
            os.close(fd)

    def trim(self) -> None:
        """Give back the reserved space (roll, close): the file holds exactly the entries."""
        self._reserved = 0
        self.write_pending()
        self.was_missing = False

    # -- entries ---------------------------------------------------------------------------
    @property
    def entries(self) -> int:
        return self._entries

    @property
    def is_full(self) -> bool:
        return self._entries >= self._max_entries

    @property
    def size_bytes(self) -> int:
        return self._entries * self._entry_size

    def entry(self, n: int) -> tuple[int, ...]:
        return self.ENTRY.unpack_from(self._loaded(), n * self._entry_size)

    def _append_raw(self, *values: int) -> None:
        if self.is_full:
            raise ValueError(f"index {self.path} is full")
        self._loaded().extend(self.ENTRY.pack(*values))
        self._entries += 1

    def _last_index_where(self, pred_true_prefix: Callable[[tuple[int, ...]], bool]) -> int:
        """Index of the last entry satisfying a predicate that holds on a prefix; -1 if none."""
        lo, hi = 0, self._entries
        while lo < hi:
            mid = (lo + hi) // 2
            if pred_true_prefix(self.entry(mid)):
                lo = mid + 1
            else:
                hi = mid
        return lo - 1

    def _truncate_entries(self, keep: int) -> None:
        if keep < self._entries:
            data = self._loaded()
            self._entries = keep
            del data[keep * self._entry_size :]
            self._written = min(self._written, len(data))

    def reset(self) -> None:
        """Drop every entry (before a rebuild)."""
        self._data = bytearray()
        self._entries = self._written = 0
        self._corrupt_length = False

    def _entry_bytes(self) -> bytes | bytearray:
        return self._loaded()[: self.size_bytes]

    def delete(self) -> None:
        self._data = None
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

    def upper_bound_offset(self, position: int) -> int | None:
        """The offset of the first entry at or after ``position`` (Kafka's
        fetchUpperBoundOffset), or None if there is none."""
        n = self._last_index_where(lambda e: e[1] < position) + 1
        if n >= self._entries:
            return None
        return self.base_offset + self.entry(n)[0]

    def truncate_to(self, offset: int) -> None:
        """Remove entries for batches whose last offset is >= `offset`."""
        rel = offset - self.base_offset
        self._truncate_entries(self._last_index_where(lambda e: e[0] < rel) + 1)

    def last_entry(self) -> tuple[int, int]:
        if not self._entries:
            return self.base_offset, 0
        rel_off, pos = self.entry(self._entries - 1)
        return self.base_offset + rel_off, pos

    def sanity_check(self, log_size: int) -> None:
        """Raise CorruptIndexError unless entries strictly increase and point inside the log."""
        if self._corrupt_length:
            raise CorruptIndexError(f"{self.path}: length is not a multiple of 8")
        prev_off = prev_pos = -1
        for rel_off, pos in self.ENTRY.iter_unpack(self._entry_bytes()):
            if rel_off <= prev_off or pos <= prev_pos or pos >= log_size:
                raise CorruptIndexError(f"{self.path}: entry ({rel_off}, {pos}) out of order")
            prev_off, prev_pos = rel_off, pos


class TimeIndex(_Index):
    ENTRY = struct.Struct(">qi")

    def maybe_append(self, timestamp: int, offset: int, *, skip_full_check: bool = False) -> None:
        """Append only if `timestamp` exceeds the last entry's (timestamps strictly increase)."""
        if self._entries and timestamp <= self.entry(self._entries - 1)[0]:
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
        if not self._entries:
            return -1, self.base_offset
        ts, rel_off = self.entry(self._entries - 1)
        return ts, self.base_offset + rel_off

    def sanity_check(self, next_offset: int) -> None:
        if self._corrupt_length:
            raise CorruptIndexError(f"{self.path}: length is not a multiple of 12")
        prev_ts, prev_off = -(1 << 63), -1
        rel_end = next_offset - self.base_offset
        for ts, rel_off in self.ENTRY.iter_unpack(self._entry_bytes()):
            if ts <= prev_ts or rel_off < prev_off or rel_off >= rel_end:
                raise CorruptIndexError(f"{self.path}: entry ({ts}, {rel_off}) out of order")
            prev_ts, prev_off = ts, rel_off


def _nothing() -> None:
    pass
