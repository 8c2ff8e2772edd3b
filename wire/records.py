"""RecordBatch v2 (magic 2): header parsing, validation, in-place offset assignment,
record decoding and building.

The broker's hot path works per batch in Python (split_batches, validate_batch,
assign_offsets); walk_records checks every record in C (wire/_recordwalk.c). decode_records
and build_batch are for tools, tests, control batches and internal topics.
"""

import mmap
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from crc32c import crc32c

from gregor.wire._recordwalk import bad_records, walk
from gregor.wire.compression import (
    NONE,
    ZSTD,
    CorruptRecordError,
    UnsupportedCompressionError,
    compress,
    decompress,
)
from gregor.wire.varint import VarintError, encode_varint, read_varint, read_varlong

__all__ = [
    "BATCH_HEADER_SIZE",
    "BatchHeader",
    "CorruptRecordError",
    "InvalidRecordError",
    "Record",
    "UnsupportedCompressionError",
    "assign_offsets",
    "build_batch",
    "decode_records",
    "parse_header",
    "rebuild_batch",
    "records_section",
    "restamp",
    "set_max_timestamp",
    "split_batches",
    "validate_batch",
    "walk_records",
]


class InvalidRecordError(ValueError):
    """Batch is well-formed but breaks a produce rule (Kafka error INVALID_RECORD)."""


BATCH_HEADER_SIZE = 61
MAGIC = 2

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
# baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordsCount
_HEADER = struct.Struct(">qiibIhiqqqhii")
_LENGTH_END = 12  # batchLength counts the bytes after baseOffset and itself
_MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - _LENGTH_END
_LEADER_EPOCH_AT = 12
_CRC_AT = 17
_ATTRIBUTES_AT = 21
_BASE_TIMESTAMP_AT = 27
_MAX_TIMESTAMP_AT = 35
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_UINT32 = struct.Struct(">I")

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

CREATE_TIME = 0
LOG_APPEND_TIME = 1

# Smallest record: length, attributes, timestampDelta, offsetDelta, keyLength,
# valueLength and header count, one byte each.
_MIN_RECORD_SIZE = 7
_INT32_MAX = 2**31 - 1
_NULL_LENGTH = b"\x01"  # zigzag varint -1


@dataclass(slots=True)
class BatchHeader:
    position: int  # byte offset of this batch inside the buffer it was parsed from
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        return self.batch_length + _LENGTH_END

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_MASK)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return self.base_sequence
        # Sequence numbers wrap from INT32_MAX back to 0, as in Kafka.
        last = self.base_sequence + self.last_offset_delta
        return last - _INT32_MAX - 1 if last > _INT32_MAX else last


@dataclass(slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


# A mapped segment too (the log cleaner reads batches in place).
Buffer = bytes | bytearray | memoryview | mmap.mmap


def parse_header(buf: Buffer, pos: int = 0) -> BatchHeader:
    """Read the fixed 61-byte header of the batch starting at `pos` (no CRC check)."""
    if pos < 0 or len(buf) - pos < BATCH_HEADER_SIZE:
        raise CorruptRecordError("record batch header is truncated")
    header = BatchHeader(pos, *_HEADER.unpack_from(buf, pos))
    if header.batch_length < _MIN_BATCH_LENGTH:
        raise CorruptRecordError(f"record batch length {header.batch_length} is too small")
    if header.magic != MAGIC:
        raise CorruptRecordError(f"unsupported record batch magic {header.magic}")
    return header


def split_batches(buf: Buffer, *, allow_partial_tail: bool = False) -> list[BatchHeader]:
    """Headers of the consecutive batches in `buf`.

    With allow_partial_tail the walk stops at the first incomplete or unparsable batch
    (log recovery truncates there); without it any such trailing bytes are an error.
    """
    headers = []
    pos = 0
    end = len(buf)
    while pos < end:
        try:
            header = parse_header(buf, pos)
            if header.size > end - pos:
                raise CorruptRecordError("record batch is truncated")
        except CorruptRecordError:
            if allow_partial_tail:
                break
            raise
        headers.append(header)
        pos += header.size
    return headers


def _batch_view(buf: Buffer, header: BatchHeader) -> memoryview:
    if header.position < 0 or header.position + header.size > len(buf):
        raise CorruptRecordError("record batch extends past the end of the buffer")
    return memoryview(buf)[header.position : header.position + header.size]


def validate_batch(
    buf: Buffer, header: BatchHeader, *, max_decompressed: int | None = None
) -> None:
    """Produce-side checks of one batch, per batch and without a loop over records.

    CRC-32C and framing problems raise CorruptRecordError, a codec id above 4
    UnsupportedCompressionError, and a record count that does not match the offset
    range (as the producer writes it) InvalidRecordError. Compressed batches are only
    decompressed when `max_decompressed` is given: then a payload that does not
    decode, exceeds that size or is too short for its record count is rejected
    (Kafka itself decompresses on produce); None keeps this check off the hot path.
    """
    batch = _batch_view(buf, header)
    if crc32c(batch[_ATTRIBUTES_AT:]) != header.crc:
        raise CorruptRecordError("record batch CRC mismatch")
    codec = header.compression
    if codec > ZSTD:
        raise UnsupportedCompressionError(f"unknown compression codec {codec}")
    if header.record_count < 1:
        raise InvalidRecordError(f"record batch has {header.record_count} records")
    if header.last_offset_delta != header.record_count - 1:
        raise InvalidRecordError(
            f"record count {header.record_count} does not match "
            f"last offset delta {header.last_offset_delta}"
        )
    if codec == NONE:
        records_size = header.size - BATCH_HEADER_SIZE
    elif max_decompressed is not None:
        records_size = len(decompress(codec, batch[BATCH_HEADER_SIZE:], max_decompressed))
    else:
        return
    if records_size < header.record_count * _MIN_RECORD_SIZE:
        raise CorruptRecordError("record batch is too short for its record count")


def records_section(
    buf: Buffer, header: BatchHeader, *, max_decompressed: int | None = None
) -> memoryview:
    """The records of one batch after its header, decompressed (within the bound) if need be."""
    payload = _batch_view(buf, header)[BATCH_HEADER_SIZE:]
    if header.compression == NONE:
        return payload
    return memoryview(decompress(header.compression, payload, max_decompressed))


def walk_records(
    section: Buffer, header: BatchHeader, ts_min: int, ts_max: int, need_keys: bool
) -> int | tuple[int, int, int, str]:
    """Walk every record of a batch's records section in C, without the GIL (Kafka's
    DefaultRecord.readFrom plus LogValidator's key and timestamp rules). Returns the
    largest record timestamp, or (kind, record index, value, reason) for the first problem:
    kind 1 the bytes are not `record_count` well-formed records with offset deltas 0..n-1,
    2 a record without a key (`need_keys`), 3 a timestamp (not -1) outside [ts_min, ts_max]."""
    return walk(section, header.record_count, header.base_timestamp, ts_min, ts_max, need_keys)


def bad_records_of(
    section: Buffer, header: BatchHeader, ts_min: int, ts_max: int, need_keys: bool
) -> list[tuple[int, int | None]]:
    """Every bad record of a batch whose records walk_records found well framed, in C:
    (record index, None) for a record without a key (``need_keys``), else (record index,
    timestamp) for a timestamp (not -1) outside [ts_min, ts_max]."""
    count, base = header.record_count, header.base_timestamp
    return bad_records(section, count, base, ts_min, ts_max, need_keys)


def rebuild_batch(
    buf: Buffer, header: BatchHeader, codec: int, records: bytes | bytearray | memoryview
) -> bytearray:
    """The batch with its (uncompressed) records section compressed by `codec` instead: the
    records' bytes do not depend on the codec, so every other field stays."""
    payload = compress(codec, records)
    out = bytearray(_batch_view(buf, header)[:BATCH_HEADER_SIZE])
    out += payload
    _INT32.pack_into(out, 8, len(out) - _LENGTH_END)
    _INT16.pack_into(out, _ATTRIBUTES_AT, (header.attributes & ~COMPRESSION_MASK) | codec)
    _UINT32.pack_into(out, _CRC_AT, crc32c(memoryview(out)[_ATTRIBUTES_AT:]))
    return out


def set_max_timestamp(buf: bytearray | memoryview, header: BatchHeader, timestamp: int) -> None:
    """Rewrite the batch's max timestamp (and so its CRC) in place."""
    _INT64.pack_into(buf, header.position + _MAX_TIMESTAMP_AT, timestamp)
    crc = crc32c(_batch_view(buf, header)[_ATTRIBUTES_AT:])
    _UINT32.pack_into(buf, header.position + _CRC_AT, crc)
    header.max_timestamp = timestamp
    header.crc = crc


def restamp(batch: bytearray, timestamp: int) -> None:
    """Give a batch whose records all share one timestamp (deltas 0, as build_batch makes
    them from equal timestamps) another one, CRC included: a performance test sends one
    built batch over and over without rebuilding its records."""
    _INT64.pack_into(batch, _BASE_TIMESTAMP_AT, timestamp)
    _INT64.pack_into(batch, _MAX_TIMESTAMP_AT, timestamp)
    _UINT32.pack_into(batch, _CRC_AT, crc32c(memoryview(batch)[_ATTRIBUTES_AT:]))


def assign_offsets(
    buf: bytearray | memoryview,
    header: BatchHeader,
    base_offset: int,
    partition_leader_epoch: int,
    log_append_time: int | None = None,
) -> None:
    """Patch the broker-owned fields of the batch in place and update `header` to match.

    Base offset and leader epoch are outside the CRC; stamping LogAppendTime changes the
    attributes and max timestamp, so the CRC is recomputed then. All other bytes stay.
    """
    pos = header.position
    _INT64.pack_into(buf, pos, base_offset)
    _INT32.pack_into(buf, pos + _LEADER_EPOCH_AT, partition_leader_epoch)
    header.base_offset = base_offset
    header.partition_leader_epoch = partition_leader_epoch
    if log_append_time is None:
        return
    attributes = header.attributes | TIMESTAMP_TYPE_MASK
    _INT16.pack_into(buf, pos + _ATTRIBUTES_AT, attributes)
    _INT64.pack_into(buf, pos + _MAX_TIMESTAMP_AT, log_append_time)
    crc = crc32c(_batch_view(buf, header)[_ATTRIBUTES_AT:])
    _UINT32.pack_into(buf, pos + _CRC_AT, crc)
    header.attributes = attributes
    header.max_timestamp = log_append_time
    header.crc = crc


def _read_bytes(data: Buffer, pos: int, end: int) -> tuple[bytes | None, int]:
    length, pos = read_varint(data, pos)
    if length == -1:
        return None, pos
    if length < 0 or length > end - pos:
        raise CorruptRecordError(f"field length {length} is out of range")
    return bytes(data[pos : pos + length]), pos + length


def decode_records(
    buf: Buffer, header: BatchHeader, *, max_decompressed: int | None = None
) -> list[Record]:
    """Decode every record of one batch, decompressing as needed (not a hot path)."""
    batch = _batch_view(buf, header)
    data = decompress(header.compression, batch[BATCH_HEADER_SIZE:], max_decompressed)
    return decode_section(data, header)


def decode_section(data: Buffer, header: BatchHeader) -> list[Record]:
    """Decode the records of a batch's (uncompressed) records section."""
    try:
        return _decode_section(data, header)
    except VarintError as e:
        raise CorruptRecordError(str(e)) from None


def _decode_section(data: Buffer, header: BatchHeader) -> list[Record]:
    log_append = header.timestamp_type == LOG_APPEND_TIME
    records = []
    pos = 0
    end = len(data)
    for _ in range(header.record_count):
        length, pos = read_varint(data, pos)
        if length < 0 or length > end - pos:
            raise CorruptRecordError(f"record length {length} is out of range")
        record_end = pos + length
        # skip the (unused) attributes byte; overruns surface in the field checks below
        timestamp_delta, pos = read_varlong(data, pos + 1)
        offset_delta, pos = read_varint(data, pos)
        key, pos = _read_bytes(data, pos, record_end)
        value, pos = _read_bytes(data, pos, record_end)
        header_count, pos = read_varint(data, pos)
        if header_count < 0 or header_count * 2 > record_end - pos:
            raise CorruptRecordError(f"record header count {header_count} is out of range")
        headers = []
        for _ in range(header_count):
            name, pos = _read_bytes(data, pos, record_end)
            if name is None:
                raise CorruptRecordError("record header key is null")
            header_value, pos = _read_bytes(data, pos, record_end)
            try:
                headers.append((name.decode(), header_value))
            except UnicodeDecodeError:
                raise CorruptRecordError("record header key is not UTF-8") from None
        if pos != record_end:
            raise CorruptRecordError("record length does not match its fields")
        timestamp = header.max_timestamp if log_append else header.base_timestamp + timestamp_delta
        records.append(Record(header.base_offset + offset_delta, timestamp, key, value, headers))
    if pos != end:
        raise CorruptRecordError("record batch has bytes after its last record")
    return records


def _length_prefixed(value: bytes | None) -> tuple[bytes, bytes]:
    return (_NULL_LENGTH, b"") if value is None else (encode_varint(len(value)), value)


def _append_record(
    out: list[bytes],
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]],
) -> None:
    parts = [
        b"\x00",  # attributes
        encode_varint(timestamp_delta),
        encode_varint(offset_delta),
        *_length_prefixed(key),
        *_length_prefixed(value),
        encode_varint(len(headers)),
    ]
    for name, header_value in headers:
        parts += (*_length_prefixed(name.encode()), *_length_prefixed(header_value))
    body = b"".join(parts)
    out += (encode_varint(len(body)), body)


def build_batch(
    records: Sequence[tuple[bytes | None, bytes | None, Sequence[tuple[str, bytes | None]], int]],
    *,
    base_offset: int = 0,
    compression: int = NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = -1,
    timestamp_type: int = CREATE_TIME,
) -> bytes:
    """Build one batch from (key, value, headers, timestamp_ms) tuples, offsets consecutive."""
    if not records:
        raise ValueError("a record batch needs at least one record")
    base_timestamp = records[0][3]
    encoded: list[bytes] = []
    for delta, (key, value, headers, timestamp) in enumerate(records):
        _append_record(encoded, delta, timestamp - base_timestamp, key, value, headers)
    payload = compress(compression, b"".join(encoded))
    attributes = (
        compression
        | (TIMESTAMP_TYPE_MASK if timestamp_type == LOG_APPEND_TIME else 0)
        | (TRANSACTIONAL_MASK if is_transactional else 0)
        | (CONTROL_MASK if is_control else 0)
    )
    batch = bytearray(BATCH_HEADER_SIZE + len(payload))
    _HEADER.pack_into(
        batch,
        0,
        base_offset,
        len(batch) - _LENGTH_END,
        partition_leader_epoch,
        MAGIC,
        0,
        attributes,
        len(records) - 1,
        base_timestamp,
        max(record[3] for record in records),
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    )
    batch[BATCH_HEADER_SIZE:] = payload
    _UINT32.pack_into(batch, _CRC_AT, crc32c(memoryview(batch)[_ATTRIBUTES_AT:]))
    return bytes(batch)
