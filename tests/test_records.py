import struct

import pytest
from crc32c import crc32c
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from gregor.wire.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD, decompress
from gregor.wire.records import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    CorruptRecordError,
    InvalidRecordError,
    Record,
    UnsupportedCompressionError,
    assign_offsets,
    build_batch,
    decode_records,
    parse_header,
    split_batches,
    validate_batch,
)
from gregor.wire.varint import encode_varint, read_varint

CODECS = [NONE, GZIP, SNAPPY, LZ4, ZSTD]
BIG = bytes(range(256)) * 4096  # 1 MiB

RECORDS = [
    (b"key-0", b"value-0", [("trace", b"abc"), ("empty", b""), ("null", None)], 1_700_000_000_000),
    (None, b"null key", [], 1_700_000_000_005),
    (b"null value", None, [("h\u00e9", b"\x00\xff")], 1_699_999_999_990),
    (None, None, [], 1_700_000_000_002),
    (b"", b"", [], 1_700_000_000_001),
]


def _records(batch: bytes) -> list[Record]:
    return decode_records(batch, parse_header(batch))


def _refresh_crc(batch: bytearray) -> None:
    struct.pack_into(">I", batch, 17, crc32c(memoryview(batch)[21:]))


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip(codec: int) -> None:
    batch = build_batch(
        RECORDS,
        base_offset=100,
        compression=codec,
        producer_id=42,
        producer_epoch=3,
        base_sequence=17,
        is_transactional=True,
        partition_leader_epoch=9,
    )
    [header] = split_batches(batch)
    validate_batch(batch, header)
    validate_batch(batch, header, max_decompressed=1 << 20)
    assert header.position == 0
    assert header.size == len(batch)
    assert header.compression == codec
    assert (header.base_offset, header.last_offset, header.next_offset) == (100, 104, 105)
    assert header.record_count == len(RECORDS)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, 17)
    assert header.last_sequence == 21
    assert header.is_transactional and not header.is_control and not header.has_delete_horizon
    assert header.partition_leader_epoch == 9
    assert header.timestamp_type == 0
    assert header.base_timestamp == 1_700_000_000_000
    assert header.max_timestamp == 1_700_000_000_005
    assert decode_records(batch, header) == [
        Record(100 + i, ts, key, value, list(headers))
        for i, (key, value, headers, ts) in enumerate(RECORDS)
    ]


@pytest.mark.parametrize("codec", CODECS)
def test_one_megabyte_values(codec: int) -> None:
    batch = build_batch([(b"k", BIG, [], 1), (BIG, b"v", [("h", BIG)], 2)], compression=codec)
    header = parse_header(batch)
    validate_batch(batch, header)
    [first, second] = decode_records(batch, header)
    assert first.value == BIG and second.key == BIG and second.headers == [("h", BIG)]
    if codec != NONE:
        assert len(batch) < len(BIG)
    with pytest.raises(CorruptRecordError):
        decode_records(batch, header, max_decompressed=len(BIG))


def test_control_batch_flags() -> None:
    marker = struct.pack(">hh", 0, 1)
    batch = build_batch(
        [(marker, struct.pack(">hi", 0, 5), [], 7)],
        is_control=True,
        is_transactional=True,
        producer_id=8,
        producer_epoch=0,
    )
    header = parse_header(batch)
    validate_batch(batch, header)
    assert header.is_control and header.is_transactional
    assert header.last_sequence == -1
    assert _records(batch)[0].key == marker


def test_last_sequence_wraps_like_kafka() -> None:
    batch = build_batch([(None, b"v", [], 0)] * 5, producer_id=1, producer_epoch=0)
    header = parse_header(batch)
    header.base_sequence = 2**31 - 3
    assert header.last_sequence == 1
    header.base_sequence = 2**31 - 5
    assert header.last_sequence == 2**31 - 1


def test_build_rejects_empty() -> None:
    with pytest.raises(ValueError):
        build_batch([])


# --- framing and rejection -------------------------------------------------------------


def test_parse_header_rejections() -> None:
    batch = bytearray(build_batch(RECORDS))
    with pytest.raises(CorruptRecordError):
        parse_header(batch[:60])
    with pytest.raises(CorruptRecordError):
        parse_header(batch, len(batch) - 10)
    with pytest.raises(CorruptRecordError):
        parse_header(batch, -1)
    bad_magic = bytearray(batch)
    bad_magic[16] = 1
    with pytest.raises(CorruptRecordError, match="magic"):
        parse_header(bad_magic)
    short = bytearray(batch)
    struct.pack_into(">i", short, 8, 48)
    with pytest.raises(CorruptRecordError, match="length"):
        parse_header(short)


def test_split_batches_walks_consecutive_batches() -> None:
    batches = [build_batch(RECORDS[:n], base_offset=n * 10, compression=n % 5) for n in (1, 2, 3)]
    buf = b"".join(batches)
    headers = split_batches(buf)
    assert [h.position for h in headers] == [0, len(batches[0]), len(batches[0]) + len(batches[1])]
    assert [h.base_offset for h in headers] == [10, 20, 30]
    for header in headers:
        validate_batch(buf, header)
    assert split_batches(b"") == []


@pytest.mark.parametrize("tail", [1, 12, 60, 61, 100])
def test_split_batches_partial_tail(tail: int) -> None:
    whole = build_batch(RECORDS)
    buf = whole + build_batch([(b"k", b"v" * 200, [], 0)])[:tail]
    with pytest.raises(CorruptRecordError):
        split_batches(buf)
    assert [h.position for h in split_batches(buf, allow_partial_tail=True)] == [0]


def test_split_batches_stops_at_garbage_when_recovering() -> None:
    whole = build_batch(RECORDS)
    buf = whole + whole[:16] + b"\x07" + whole[17:]  # second batch has a bad magic
    assert len(split_batches(buf, allow_partial_tail=True)) == 1
    with pytest.raises(CorruptRecordError):
        split_batches(buf)


def test_crc_mismatch_is_corrupt() -> None:
    batch = bytearray(build_batch(RECORDS))
    batch[-1] ^= 0x01
    with pytest.raises(CorruptRecordError, match="CRC"):
        validate_batch(batch, parse_header(batch))


def test_broker_owned_fields_are_outside_the_crc() -> None:
    batch = bytearray(build_batch(RECORDS))
    batch[0:8] = b"\x7f" * 8
    batch[12:16] = b"\x01" * 4
    validate_batch(batch, parse_header(batch))


def test_header_past_buffer_is_corrupt() -> None:
    batch = build_batch(RECORDS)
    header = parse_header(batch)
    with pytest.raises(CorruptRecordError):
        validate_batch(batch[:-1], header)
    with pytest.raises(CorruptRecordError):
        decode_records(batch[:-1], header)


@pytest.mark.parametrize(
    ("count", "last_delta"), [(0, -1), (0, 0), (5, 3), (5, 5), (-1, -2)], ids=str
)
def test_count_mismatch_is_invalid(count: int, last_delta: int) -> None:
    batch = bytearray(build_batch(RECORDS))
    struct.pack_into(">i", batch, 57, count)
    struct.pack_into(">i", batch, 23, last_delta)
    _refresh_crc(batch)
    with pytest.raises(InvalidRecordError):
        validate_batch(batch, parse_header(batch))


def test_unknown_codec_is_unsupported() -> None:
    batch = bytearray(build_batch(RECORDS))
    struct.pack_into(">h", batch, 21, 6)
    _refresh_crc(batch)
    header = parse_header(batch)
    with pytest.raises(UnsupportedCompressionError):
        validate_batch(batch, header)
    with pytest.raises(UnsupportedCompressionError):
        decode_records(batch, header)


def test_count_larger_than_content_is_corrupt() -> None:
    batch = bytearray(build_batch([(None, b"v", [], 0)]))
    struct.pack_into(">i", batch, 57, 1000)
    struct.pack_into(">i", batch, 23, 999)
    _refresh_crc(batch)
    header = parse_header(batch)
    with pytest.raises(CorruptRecordError):
        validate_batch(batch, header)
    with pytest.raises(CorruptRecordError):
        decode_records(batch, header)


def test_compressed_content_checked_only_when_asked() -> None:
    batch = bytearray(build_batch(RECORDS, compression=LZ4))
    batch[BATCH_HEADER_SIZE + 10 :] = b"\x00" * (len(batch) - BATCH_HEADER_SIZE - 10)
    _refresh_crc(batch)
    header = parse_header(batch)
    validate_batch(batch, header)  # hot path: not decompressed
    with pytest.raises(CorruptRecordError):
        validate_batch(batch, header, max_decompressed=1 << 20)
    with pytest.raises(CorruptRecordError):
        validate_batch(bytes(build_batch(RECORDS, compression=LZ4)), header, max_decompressed=10)


def test_trailing_bytes_after_last_record_are_corrupt() -> None:
    batch = bytearray(build_batch(RECORDS) + b"\x00")
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    _refresh_crc(batch)
    header = parse_header(batch)
    validate_batch(batch, header)
    with pytest.raises(CorruptRecordError, match="after its last record"):
        decode_records(batch, header)


def test_record_length_mismatch_is_corrupt() -> None:
    batch = bytearray(build_batch([(b"k", b"v", [], 0), (b"k", b"v", [], 0)]))
    # First record length varint: claim one byte more than the record has.
    length, _ = read_varint(batch, BATCH_HEADER_SIZE)
    batch[BATCH_HEADER_SIZE] = encode_varint(length + 1)[0]
    with pytest.raises(CorruptRecordError):
        decode_records(batch, parse_header(batch))


def test_header_key_must_be_utf8_and_not_null() -> None:
    good = build_batch([(None, None, [("k", b"v")], 0)])
    at = good.index(b"\x02k\x02v")
    bad_utf8 = bytearray(good)
    bad_utf8[at + 1] = 0xFF
    with pytest.raises(CorruptRecordError, match="UTF-8"):
        decode_records(bad_utf8, parse_header(bad_utf8))
    null_key = bytearray(good)
    null_key[at : at + 2] = b"\x01\x00"  # key length -1 followed by a filler attribute
    with pytest.raises(CorruptRecordError):
        decode_records(null_key, parse_header(null_key))


# --- broker-owned fields ---------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_assign_offsets_touches_only_broker_fields(codec: int) -> None:
    first = build_batch(RECORDS[:2])
    original = build_batch(RECORDS, compression=codec, producer_id=3, producer_epoch=1)
    buf = bytearray(first + original)
    header = split_batches(buf)[1]
    assign_offsets(buf, header, base_offset=1_000_000_000_000, partition_leader_epoch=77)
    patched = buf[len(first) :]
    assert buf[: len(first)] == first
    assert patched[8:12] == original[8:12]
    assert patched[16:] == original[16:]
    assert struct.unpack_from(">qii", patched) == (1_000_000_000_000, len(original) - 12, 77)
    assert (header.base_offset, header.partition_leader_epoch) == (1_000_000_000_000, 77)
    assert parse_header(buf, header.position) == header
    validate_batch(buf, header)
    assert [r.offset for r in decode_records(buf, header)] == [
        1_000_000_000_000 + i for i in range(len(RECORDS))
    ]


@pytest.mark.parametrize("codec", CODECS)
def test_log_append_time_rewrite(codec: int) -> None:
    original = build_batch(RECORDS, compression=codec, is_transactional=True)
    buf = bytearray(original)
    header = parse_header(buf)
    assign_offsets(buf, header, 50, 2, log_append_time=1_800_000_000_000)
    assert header.timestamp_type == 1 and header.is_transactional
    assert header.compression == codec
    assert header.max_timestamp == 1_800_000_000_000
    assert header.base_timestamp == RECORDS[0][3]
    assert parse_header(buf) == header
    validate_batch(buf, header)
    # Only attributes, max timestamp and the CRC change besides base offset and epoch.
    changed = {i for i in range(len(buf)) if buf[i] != original[i]}
    assert changed <= set(range(0, 8)) | set(range(12, 16)) | set(range(17, 23)) | set(
        range(35, 43)
    )
    assert {r.timestamp for r in decode_records(buf, header)} == {1_800_000_000_000}


# --- interop with kafka-python's independent implementation ----------------------------


def _kafka_python_batch(codec: int, producer: tuple[int, int, int] = (-1, -1, -1)) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=producer[2],
        batch_size=1 << 24,
    )
    for offset, (key, value, headers, timestamp) in enumerate(RECORDS):
        builder.append(offset, timestamp=timestamp, key=key, value=value, headers=headers)
    builder.append(len(RECORDS), timestamp=5, key=b"big", value=BIG[:200_000], headers=[])
    return bytes(builder.build())


@pytest.mark.parametrize("codec", CODECS)
def test_reads_batches_written_by_kafka_python(codec: int) -> None:
    batch = _kafka_python_batch(codec, producer=(123, 4, 2**31 - 2))
    [header] = split_batches(batch)
    validate_batch(batch, header, max_decompressed=1 << 20)
    assert header.compression == codec
    assert (header.producer_id, header.producer_epoch, header.last_sequence) == (123, 4, 3)
    assert header.last_sequence == DefaultRecordBatch(bytearray(batch)).last_sequence
    records = decode_records(batch, header)
    expected = [(k, v, list(h), ts) for k, v, h, ts in RECORDS] + [(b"big", BIG[:200_000], [], 5)]
    assert [(r.key, r.value, r.headers, r.timestamp) for r in records] == expected
    assert [r.offset for r in records] == list(range(len(expected)))

    # And the offsets we assign are what kafka-python reads back.
    buf = bytearray(batch)
    assign_offsets(buf, header, 900, 1, log_append_time=12345)
    theirs = DefaultRecordBatch(buf)
    assert theirs.validate_crc()
    assert [(r.offset, r.timestamp) for r in theirs] == [(900 + i, 12345) for i in range(6)]


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_reads_batches_we_build(codec: int) -> None:
    records = RECORDS + [(b"big", BIG[:200_000], [], 5)]
    batch = build_batch(
        records, base_offset=7, compression=codec, producer_id=9, producer_epoch=2, base_sequence=5
    )
    theirs = DefaultRecordBatch(bytearray(batch))
    assert theirs.validate_crc()
    assert theirs.compression_type == codec
    assert (theirs.producer_id, theirs.producer_epoch, theirs.base_sequence) == (9, 2, 5)
    assert theirs.last_offset == 7 + len(records) - 1
    decoded = [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in theirs]
    assert decoded == [(7 + i, k, v, list(h), ts) for i, (k, v, h, ts) in enumerate(records)]


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_compressed_payload_is_the_plain_records_section(codec: int) -> None:
    plain = build_batch(RECORDS)[BATCH_HEADER_SIZE:]
    assert decompress(codec, build_batch(RECORDS, compression=codec)[BATCH_HEADER_SIZE:]) == plain


def test_batch_header_is_a_plain_dataclass() -> None:
    header = parse_header(build_batch(RECORDS))
    assert isinstance(header, BatchHeader)
    assert not hasattr(header, "__dict__")
