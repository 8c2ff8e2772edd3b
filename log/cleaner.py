"""One cleaning pass over one log (Kafka's Cleaner), run in a cleaner worker process.

The pass maps every key of the dirty section [first dirty, first uncleanable) to its latest
offset (within the bounded OffsetMap, a fixed table of log.cleaner.dedupe.buffer.size /
threads bytes: a full map ends the section early, after the last batch mapped whole; a
batch with more keys than the whole map is mapped as far as it fits and the section ends
inside it), then recopies each group of segments below the map's end into one
`<base>.log.cleaned` segment (with its `.index.cleaned`, `.timeindex.cleaned` and, if it
keeps an aborted transaction, `.txnindex.cleaned`), keeping a record when no later record
has its key, and a tombstone until the delete horizon of its batch (stamped now +
delete.retention.ms the first time a pass keeps it, KIP-534). Batches keep their base
offset, offset range, leader epoch, codec and producer id/epoch/sequence; a rewritten batch
gets its record count, base and max timestamp, length and CRC recomputed.

Transactions (the first uncleanable offset is at most the last stable offset, so each one
met is decided; log.cleaner_txns follows them through the pass): control batches and the
data of aborted transactions are never mapped, so an aborted write never shadows a
committed value; aborted data goes whole. A marker stays while batches of its transaction
are left (an ABORT marker then keeps its entry in the cleaned `.txnindex`, the only entries
that index holds); after that it is discardable and goes as a tombstone does: the first
pass stamps its delete horizon, a pass after the horizon drops it.

An emptied batch is dropped, except (as an empty header) the last batch of an active
producer, whose sequence the producer state needs, the marker holding the epoch of an
active producer that wrote no data in it, and the batch ending right at the first
uncleanable offset.

The worker only writes `.cleaned` files; the broker swaps them in (Log.replace_segments).
Its memory is the offset map plus a constant: segments are read through mmap, and the pages
it has walked are dropped from its mapping as it goes (they stay in the page cache), so a
pass over gigabytes of log does not count them all in the worker's resident set.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import pickle
import signal
import struct
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from crc32c import crc32c

from gregor.log.cleaner_txns import CleanedTransactions
from gregor.log.offset_map import OffsetMap, new_offset_map
from gregor.log.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogSegment,
)
from gregor.log.txn_index import CONTROL_KEY, AbortedTxn
from gregor.wire.compression import NONE, compress
from gregor.wire.records import (
    BATCH_HEADER_SIZE,
    CONTROL_MASK,
    DELETE_HORIZON_MASK,
    LOG_APPEND_TIME,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    CorruptRecordError,
    parse_header,
    records_section,
    split_batches,
)
from gregor.wire.varint import VarintError, encode_varint, read_varint, read_varlong

CLEANED_SUFFIX = ".cleaned"
# The log renamed last; a `.txnindex` only exists when the segments merged had one.
SEGMENT_FILE_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, LOG_SUFFIX)
_HEADER = struct.Struct(">qiibIhiqqqhii")  # as wire.records lays out a batch header
_CRC = struct.Struct(">I")
_CRC_AT = 17
_HEADER_FIELDS_AT = 21  # attributes onward: what the CRC covers
_WRITE_CHUNK = 1 << 20
# Segment pages walked are dropped from the worker's mapping every this many bytes.
_RELEASE_EVERY = 8 << 20
# A test hook: the named moment of a pass kills the broker (SIGKILL), as a crash would.
CRASH_ENV = "GREGOR_CLEANER_CRASH_AT"


@dataclass(frozen=True, slots=True)
class SegmentFile:
    base_offset: int
    size: int
    index_bytes: int
    time_index_bytes: int
    mtime_ns: int


@dataclass(frozen=True, slots=True)
class CleanTask:
    directory: str
    # The log's segments below the first uncleanable offset, first to last.
    segments: tuple[SegmentFile, ...]
    first_dirty: int
    first_uncleanable: int
    now_ms: int
    delete_retention_ms: int
    segment_bytes: int
    segment_index_bytes: int
    index_interval_bytes: int
    map_slots: int  # the offset map's 24-byte entries (log.offset_map.map_slots)
    map_capacity: int  # the keys it takes (map_slots x log.cleaner.io.buffer.load.factor)
    # producer id -> offset of its last data batch, for producers the log still tracks
    producer_last_offsets: dict[int, int]
    # producer id -> epoch, for tracked producers with no data batch in that epoch (a marker
    # bumped it): their last marker of that epoch stays, as the epoch's only record
    producer_marker_epochs: dict[int, int]
    # The aborted transactions with data in [the log start, first_uncleanable).
    aborted_txns: tuple[AbortedTxn, ...]
    io_bytes_per_second: float
    broker_pid: int


@dataclass(slots=True)
class CleanResult:
    end_offset: int  # the next pass's first dirty offset
    groups: list[tuple[int, ...]]  # base offsets of the segments each `.cleaned` replaces
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    dirty_bytes: int = 0
    map_entries: int = 0
    cpu_s: float = 0.0
    elapsed_s: float = 0.0
    map_slots: int = 0
    peak_rss: int = 0  # the worker process's peak resident set (VmHWM), bytes
    errors: list[str] = field(default_factory=list)


def crash_point(name: str, broker_pid: int | None = None) -> None:
    """Test hook: SIGKILL the broker (by default this process) when GREGOR_CLEANER_CRASH_AT
    names this moment of a pass."""
    if os.environ.get(CRASH_ENV) == name:
        os.kill(os.getpid() if broker_pid is None else broker_pid, signal.SIGKILL)
        time.sleep(60)  # the broker's death takes this worker with it (PDEATHSIG)


class Throttler:
    """log.cleaner.io.max.bytes.per.second: sleep whenever the I/O so far ran faster."""

    def __init__(self, bytes_per_second: float) -> None:
        self.rate = bytes_per_second
        self.start = time.monotonic()
        self.bytes = 0

    def __call__(self, nbytes: int) -> None:
        self.bytes += nbytes
        ahead = self.bytes / self.rate - (time.monotonic() - self.start)
        if ahead > 0.01:
            time.sleep(ahead)


# -- the records of one batch ------------------------------------------------------------------
Fields = tuple[int, int, int, int, int, int, bytes | None, bool]


def iter_records(data: bytes, count: int) -> list[Fields]:
    """(start, body start, end, timestamp-delta end, timestamp delta, offset delta, key, has
    value) of each record of a batch's (uncompressed) records section. One-byte varints (and
    two-byte record lengths) are decoded inline: nearly every field is one."""
    out = []
    pos = 0
    try:
        for _ in range(count):
            byte = data[pos]
            if byte < 0x80:
                length, body = (byte >> 1) ^ -(byte & 1), pos + 1
            elif data[pos + 1] < 0x80:
                raw = (byte & 0x7F) | (data[pos + 1] << 7)
                length, body = (raw >> 1) ^ -(raw & 1), pos + 2
            else:
                length, body = read_varint(data, pos)
            end = body + length
            p = body + 1  # after the attributes byte
            byte = data[p]
            if byte < 0x80:
                ts_delta, p = (byte >> 1) ^ -(byte & 1), p + 1
            else:
                ts_delta, p = read_varlong(data, p)
            ts_end = p
            byte = data[p]
            if byte < 0x80:
                offset_delta, p = (byte >> 1) ^ -(byte & 1), p + 1
            else:
                offset_delta, p = read_varint(data, p)
            byte = data[p]
            if byte < 0x80:
                key_len, p = (byte >> 1) ^ -(byte & 1), p + 1
            else:
                key_len, p = read_varint(data, p)
            if key_len < 0:
                key = None
            else:
                key = data[p : p + key_len]
                p += key_len
            if length < 0 or p >= end:
                raise CorruptRecordError("record fields run past its length")
            # data[p] is the value's length: zigzag -1 (0x01) is a null value
            out.append((pos, body, end, ts_end, ts_delta, offset_delta, key, data[p] != 1))
            pos = end
    except IndexError:
        raise CorruptRecordError("record runs past the end of its batch") from None
    except VarintError as e:
        raise CorruptRecordError(str(e)) from None
    if pos != len(data):
        raise CorruptRecordError("record batch has bytes after its last record")
    return out


def _section(buf: mmap.mmap | bytes, h: BatchHeader) -> bytes:
    return bytes(records_section(buf, h))


# -- building the offset map -------------------------------------------------------------------
def _headers(mm: mmap.mmap | bytes, size: int) -> Iterator[BatchHeader]:
    """The batches of a segment, first to last. The caller is done with a batch when it asks
    for the next: the mapped pages behind it are dropped every _RELEASE_EVERY bytes, and all
    of them at the end, so walking a segment costs the worker a few MB of resident memory
    whatever its size."""
    pos = released = 0
    mapped = mm if isinstance(mm, mmap.mmap) else None  # an empty segment is b""
    while pos + BATCH_HEADER_SIZE <= size:
        h = parse_header(mm, pos)
        if pos + h.size > size:
            raise CorruptRecordError(f"batch at position {pos} runs past the segment end")
        yield h
        pos += h.size
        if mapped is not None and pos - released >= _RELEASE_EVERY:
            upto = pos - pos % mmap.PAGESIZE
            mapped.madvise(mmap.MADV_DONTNEED, released, upto - released)
            released = upto
    if mapped is not None and size:
        mapped.madvise(mmap.MADV_DONTNEED)


def control_type(records: list[Fields]) -> int | None:
    """The type (ABORT, COMMIT, ...) of a control batch's record; None when it has none,
    -1 when its key is too short to say."""
    if not records:
        return None
    key = records[0][6]
    if key is None or len(key) < CONTROL_KEY.size:
        return -1
    kind: int = CONTROL_KEY.unpack_from(key)[1]
    return kind


def build_offset_map(
    segments: list[tuple[mmap.mmap | bytes, SegmentFile]],
    first_dirty: int,
    first_uncleanable: int,
    offset_map: OffsetMap,
    aborted_txns: tuple[AbortedTxn, ...],
    throttle: Throttler | None = None,
) -> int:
    """Map the keys of [first_dirty, first_uncleanable) until the map is full, leaving out
    control batches and aborted transactions' data; returns the dirty bytes mapped.
    `segments` are the dirty ones, with the bases of the next ones.

    A batch is mapped whole or not at all (the map then ends before it), except one with
    more keys than an empty map takes: it is mapped up to the first record that does not
    fit, and the map (so the pass) ends at the record before, so every pass moves on."""
    mapped = 0
    # Those whose marker lies before first_dirty are over before the walk starts.
    txns = CleanedTransactions(t for t in aborted_txns if t.last_offset >= first_dirty)
    bounds = [s.base_offset for _, s in segments[1:]] + [first_uncleanable]
    for (mm, seg), next_base in zip(segments, bounds, strict=True):
        for h in _headers(mm, seg.size):
            if h.last_offset < first_dirty:
                continue
            if h.is_control:
                records = iter_records(_section(mm, h), h.record_count)
                txns.on_marker(h, control_type(records))  # an ABORT ends its transaction
                unmapped = True
            else:
                unmapped = txns.on_data_batch(h)
            if unmapped:
                offset_map.latest_offset = h.last_offset
                mapped += h.size
                if throttle is not None:
                    throttle(h.size)
                continue
            if not offset_map.has_room_for(h.record_count):
                return mapped
            try:  # in C: the records are walked and their keys hashed without a Python object
                stopped = offset_map.put_records(
                    _section(mm, h), h.record_count, h.base_offset, first_dirty
                )
            except ValueError as exc:
                raise CorruptRecordError(str(exc)) from None
            if stopped >= 0:
                # Only when the map was empty: its first put fits, so this is past it.
                offset_map.latest_offset = stopped - 1
                return mapped + h.size
            offset_map.latest_offset = h.last_offset
            mapped += h.size
            if throttle is not None:
                throttle(h.size)
        offset_map.latest_offset = max(offset_map.latest_offset, next_base - 1)
    return mapped


# -- filtering one batch -----------------------------------------------------------------------
def _empty_batch(h: BatchHeader) -> bytes:
    """Kafka's empty batch header: the offsets, producer and sequence kept, no records."""
    attributes = h.attributes & (TIMESTAMP_TYPE_MASK | TRANSACTIONAL_MASK | CONTROL_MASK)
    return _pack(h, attributes, h.max_timestamp, h.max_timestamp, 0, b"")


def _pack(
    h: BatchHeader, attributes: int, base_ts: int, max_ts: int, count: int, payload: bytes
) -> bytes:
    out = bytearray(BATCH_HEADER_SIZE + len(payload))
    out[BATCH_HEADER_SIZE:] = payload
    _HEADER.pack_into(
        out,
        0,
        h.base_offset,
        len(out) - 12,
        h.partition_leader_epoch,
        2,
        0,
        attributes,
        h.last_offset_delta,
        base_ts,
        max_ts,
        h.producer_id,
        h.producer_epoch,
        h.base_sequence,
        count,
    )
    _CRC.pack_into(out, _CRC_AT, crc32c(memoryview(out)[_HEADER_FIELDS_AT:]))
    return bytes(out)


class BatchFilter:
    """Kafka's cleaner filter (MemoryRecords.filterTo with the cleaner's retention rules)."""

    def __init__(
        self,
        offset_map: OffsetMap,
        now_ms: int,
        delete_retention_ms: int,
        producer_last_offsets: dict[int, int],
        producer_marker_epochs: dict[int, int],
        txns: CleanedTransactions,
        upper_bound: int,
    ) -> None:
        self.map = offset_map
        self.now_ms = now_ms
        self.delete_retention_ms = delete_retention_ms
        self.producers = producer_last_offsets
        self.marker_epochs = producer_marker_epochs
        self.txns = txns
        self.upper_bound = upper_bound
        self.records_read = 0
        self.records_kept = 0

    def filter(self, buf: mmap.mmap | bytes, h: BatchHeader) -> bytes | memoryview | None:
        """The batch to write in place of `h` (itself, rebuilt, or empty), or None."""
        original = memoryview(buf)[h.position : h.position + h.size]
        data = _section(buf, h)
        records = iter_records(data, h.record_count)
        horizon = h.base_timestamp if h.has_delete_horizon else None
        if h.is_control:
            # A discardable marker waits out delete.retention.ms as a tombstone does, so a
            # consumer part way through its transaction still meets it.
            discardable = self.txns.on_marker(h, control_type(records))
            if discardable and horizon is not None and horizon <= self.now_ms:
                kept = []
            else:
                kept = records
            set_horizon = discardable and horizon is None
        elif self.txns.on_data_batch(h):
            kept, set_horizon = [], False
        else:
            kept, tombstone_kept = self._retained(h, records, horizon)
            set_horizon = tombstone_kept and horizon is None
        self.records_read += h.record_count
        self.records_kept += len(kept)
        if not kept:
            if not self._keep_empty(h):
                return None
            return original if h.record_count == 0 else _empty_batch(h)
        if len(kept) == h.record_count and not set_horizon:
            return original
        if set_horizon:
            horizon = self.now_ms + self.delete_retention_ms
        return self._rebuild(h, data, kept, horizon)

    def _retained(
        self, h: BatchHeader, records: list[Fields], horizon: int | None
    ) -> tuple[list[Fields], bool]:
        """The records of data batch `h` no later record of their key replaces, tombstones
        until the batch's delete horizon; and whether a tombstone is among them."""
        retain_tombstones = horizon is None or self.now_ms < horizon
        latest = self.map.latest_offset
        kept = []
        tombstone_kept = False
        base = h.base_offset
        for record in records:
            key = record[6]
            offset = base + record[5]
            if offset <= latest:
                if key is None or offset < self.map.get(key):
                    continue
                if not record[7]:
                    if not retain_tombstones:
                        continue
                    tombstone_kept = True
            elif not record[7]:
                tombstone_kept = True
            kept.append(record)
        return kept, tombstone_kept

    def _keep_empty(self, h: BatchHeader) -> bool:
        """An emptied batch stays (as an empty one) when it holds an active producer's last
        sequence, or its epoch when a marker is all of that epoch, or ends the pass."""
        if h.producer_id >= 0:
            if self.producers.get(h.producer_id) == h.last_offset:
                return True
            epoch = self.marker_epochs.get(h.producer_id)
            if h.is_control and epoch == h.producer_epoch:
                return True
        return h.next_offset == self.upper_bound

    def _rebuild(
        self, h: BatchHeader, data: bytes, kept: list[Fields], horizon: int | None
    ) -> bytes:
        log_append = h.timestamp_type == LOG_APPEND_TIME
        old_base = h.base_timestamp
        stamps = [h.max_timestamp if log_append else old_base + r[4] for r in kept]
        new_base = horizon if horizon is not None else stamps[0]
        parts = []
        for (start, body, end, ts_end, ts_delta, *_), stamp in zip(kept, stamps, strict=True):
            delta = stamp - new_base
            if delta == ts_delta:
                parts.append(data[start:end])
                continue
            # Only the timestamp delta changes: length, attributes, new delta, the rest.
            new_body = data[body : body + 1] + encode_varint(delta) + data[ts_end:end]
            parts.append(encode_varint(len(new_body)) + new_body)
        records = b"".join(parts)
        codec = h.compression
        payload = records if codec == NONE else compress(codec, records)
        attributes = h.attributes | (DELETE_HORIZON_MASK if horizon is not None else 0)
        max_ts = h.max_timestamp if log_append else max(stamps)
        return _pack(h, attributes, new_base, max_ts, len(kept), payload)


# -- the pass ----------------------------------------------------------------------------------
def group_segments(
    segments: list[SegmentFile], max_size: int, max_index_size: int, first_uncleanable: int
) -> list[list[SegmentFile]]:
    """Kafka's groupSegmentsBySize: consecutive segments whose log and index sizes fit one
    segment and whose offsets one index can address."""
    groups = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        log_size = segments[i].size
        index_size = segments[i].index_bytes
        time_size = segments[i].time_index_bytes
        i += 1
        while i < len(segments):
            nxt = segments[i]
            last = (segments[i + 1].base_offset if i + 1 < len(segments) else first_uncleanable) - 1
            if not (
                log_size + nxt.size <= max_size
                and index_size + nxt.index_bytes <= max_index_size
                and time_size + nxt.time_index_bytes <= max_index_size
                and (nxt.size == 0 or last - group[0].base_offset <= (1 << 31) - 1)
            ):
                break
            group.append(nxt)
            log_size += nxt.size
            index_size += nxt.index_bytes
            time_size += nxt.time_index_bytes
            i += 1
        groups.append(group)
    return groups


def cleaned_paths(directory: Path, base_offset: int) -> list[Path]:
    stem = f"{base_offset:020d}"
    return [directory / f"{stem}{suffix}{CLEANED_SUFFIX}" for suffix in SEGMENT_FILE_SUFFIXES]


def _write_group(
    task: CleanTask,
    group: list[SegmentFile],
    maps: dict[int, mmap.mmap],
    batch_filter: BatchFilter,
    throttle: Throttler,
    result: CleanResult,
) -> None:
    directory = Path(task.directory)
    for path in cleaned_paths(directory, group[0].base_offset):
        path.unlink(missing_ok=True)  # a crashed worker's
    cleaned = LogSegment(
        directory,
        group[0].base_offset,
        index_interval_bytes=task.index_interval_bytes,
        max_index_bytes=task.segment_index_bytes,
        now_ms=task.now_ms,
        active=True,
        file_suffix=CLEANED_SUFFIX,
    )
    out = bytearray()

    def write() -> None:
        if out:
            cleaned.append(out, split_batches(out))
            result.bytes_written += len(out)
            throttle(len(out))
            out.clear()

    try:
        for seg in group:
            mm = maps.get(seg.base_offset, b"")
            for h in _headers(mm, seg.size):
                kept = batch_filter.filter(mm, h)
                result.bytes_read += h.size
                throttle(h.size)
                if kept is not None:
                    out += kept
                    if len(out) >= _WRITE_CHUNK:
                        write()
        write()
        # Kafka's rule: the aborted transactions whose ABORT marker stays in this segment.
        for txn in batch_filter.txns.take_kept():
            cleaned.txn_index.append(txn)
        cleaned.on_become_inactive()
        os.fsync(cleaned.fd)
        paths = [cleaned.offset_index.path, cleaned.time_index.path]
        if cleaned.txn_index.entries:
            paths.append(cleaned.txn_index.path)
        for path in paths:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    finally:
        cleaned.close_fd()
    # Kafka keeps the newest replaced segment's modification time (time-based retention).
    os.utime(cleaned.log_path, ns=(group[-1].mtime_ns, group[-1].mtime_ns))
    result.groups.append(tuple(s.base_offset for s in group))


def clean_log(task: CleanTask) -> CleanResult:
    """Map the dirty section and write the `.cleaned` segments; the broker swaps them in."""
    start, cpu_start = time.monotonic(), time.process_time()
    directory = Path(task.directory)
    throttle = Throttler(task.io_bytes_per_second)
    maps: dict[int, mmap.mmap] = {}
    try:
        for seg in task.segments:
            if seg.size:
                with open(directory / f"{seg.base_offset:020d}.log", "rb") as f:
                    maps[seg.base_offset] = mmap.mmap(f.fileno(), seg.size, prot=mmap.PROT_READ)
        # The dirty section holds no more keys than offsets: a small one gets a small map.
        offset_map = new_offset_map(
            task.map_slots, task.map_capacity, task.first_uncleanable - task.first_dirty
        )
        dirty = [
            (maps.get(s.base_offset, b""), s)
            for i, s in enumerate(task.segments)
            if i + 1 == len(task.segments) or task.segments[i + 1].base_offset > task.first_dirty
        ]
        dirty_bytes = build_offset_map(
            dirty,
            task.first_dirty,
            task.first_uncleanable,
            offset_map,
            task.aborted_txns,
            throttle,
        )
        end_offset = offset_map.latest_offset + 1
        result = CleanResult(
            end_offset,
            [],
            dirty_bytes=dirty_bytes,
            map_entries=len(offset_map),
            map_slots=offset_map.slots,
        )
        crash_point("mapped", task.broker_pid)
        batch_filter = BatchFilter(
            offset_map,
            task.now_ms,
            task.delete_retention_ms,
            task.producer_last_offsets,
            task.producer_marker_epochs,
            CleanedTransactions(task.aborted_txns),
            task.first_uncleanable,
        )
        below_end = [s for s in task.segments if s.base_offset < end_offset]
        for group in group_segments(
            below_end, task.segment_bytes, task.segment_index_bytes, task.first_uncleanable
        ):
            _write_group(task, group, maps, batch_filter, throttle, result)
            crash_point("cleaned", task.broker_pid)
        result.records_read = batch_filter.records_read
        result.records_kept = batch_filter.records_kept
    finally:
        for mm in maps.values():
            mm.close()
    result.cpu_s = time.process_time() - cpu_start
    result.elapsed_s = time.monotonic() - start
    return result


# -- the worker process ------------------------------------------------------------------------
_FRAME = struct.Struct(">I")


def peak_rss(pid: int | str = "self") -> int:
    """A process's peak resident set size (VmHWM), in bytes; 0 where /proc does not say."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def frame(value: object) -> bytes:
    """A task or answer as the broker and its workers exchange them: length, then pickle."""
    payload = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    return _FRAME.pack(len(payload)) + payload


def serve(broker_pid: int) -> None:
    """The worker: read a CleanTask per frame on stdin, answer a CleanResult (or an error
    message) per frame on stdout. It dies with the broker (PDEATHSIG), so no orphan ever
    writes `.cleaned` files next to a restarted broker's."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != broker_pid:
        return
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        head = stdin.read(_FRAME.size)
        if len(head) < _FRAME.size:
            return
        task: CleanTask = pickle.loads(stdin.read(_FRAME.unpack(head)[0]))
        try:
            result = clean_log(task)
            result.peak_rss = peak_rss()
            answer: CleanResult | str = result
        except (OSError, ValueError) as exc:  # CorruptRecordError is a ValueError
            for seg in task.segments:
                for path in cleaned_paths(Path(task.directory), seg.base_offset):
                    path.unlink(missing_ok=True)
            if isinstance(exc, FileNotFoundError):
                # Retention or a truncation took a segment meanwhile: nothing cleaned now.
                answer = CleanResult(task.first_dirty, [])
            else:
                answer = f"{type(exc).__name__}: {exc}"
        stdout.write(frame(answer))
        stdout.flush()


_PR_SET_PDEATHSIG = 1
