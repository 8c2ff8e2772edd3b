"""Hostile input must only ever raise our three record errors, within bounded memory."""

import struct

from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gregor.wire.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD, compress, decompress
from gregor.wire.records import (
    BATCH_HEADER_SIZE,
    CorruptRecordError,
    InvalidRecordError,
    UnsupportedCompressionError,
    build_batch,
    decode_records,
    split_batches,
    validate_batch,
)

EXPECTED = (CorruptRecordError, InvalidRecordError, UnsupportedCompressionError)
LIMIT = 1 << 20
CODECS = st.sampled_from([NONE, GZIP, SNAPPY, LZ4, ZSTD])
FUZZ = settings(
    max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)

small_bytes = st.binary(max_size=40)
records = st.lists(
    st.tuples(
        st.none() | small_bytes,
        st.none() | small_bytes,
        st.lists(st.tuples(st.text(max_size=5), st.none() | small_bytes), max_size=3),
        st.integers(-(2**40), 2**40),
    ),
    min_size=1,
    max_size=6,
)


@st.composite
def valid_batches(draw: st.DrawFn) -> bytes:
    return build_batch(
        draw(records),
        base_offset=draw(st.integers(0, 2**62)),
        compression=draw(CODECS),
        producer_id=draw(st.integers(-1, 2**40)),
        base_sequence=draw(st.integers(-1, 2**31 - 1)),
        is_transactional=draw(st.booleans()),
        is_control=draw(st.booleans()),
    )


@st.composite
def mutated_batches(draw: st.DrawFn) -> bytes:
    batch = bytearray(b"".join(draw(st.lists(valid_batches(), min_size=1, max_size=3))))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "set", "truncate", "insert", "delete"]))
        at = draw(st.integers(0, len(batch)))
        if op == "flip" and at < len(batch):
            batch[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and at < len(batch):
            batch[at] = draw(st.integers(0, 255))
        elif op == "truncate":
            del batch[at:]
        elif op == "insert":
            batch[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif op == "delete":
            del batch[at : at + draw(st.integers(1, 16))]
    if draw(st.booleans()) and len(batch) >= BATCH_HEADER_SIZE:
        # Make the first batch's framing and CRC consistent again so the mutation
        # reaches the record and codec parsers instead of stopping at the CRC.
        struct.pack_into(">i", batch, 8, len(batch) - 12)
        struct.pack_into(">I", batch, 17, crc32c(memoryview(batch)[21:]))
    return bytes(batch)


def _exercise(buf: bytes) -> None:
    try:
        split_batches(buf)
    except EXPECTED:
        pass
    for header in split_batches(buf, allow_partial_tail=True):
        try:
            validate_batch(buf, header)
            validate_batch(buf, header, max_decompressed=LIMIT)
        except EXPECTED:
            pass
        try:
            records = decode_records(buf, header, max_decompressed=LIMIT)
        except EXPECTED:
            continue
        assert len(records) == header.record_count


@FUZZ
@given(st.binary(max_size=300))
def test_random_bytes(buf: bytes) -> None:
    _exercise(buf)


@FUZZ
@given(st.binary(min_size=0, max_size=200))
def test_random_bytes_behind_a_plausible_header(tail: bytes) -> None:
    # A header that parses, followed by arbitrary records/codec bytes.
    for codec in (NONE, GZIP, SNAPPY, LZ4, ZSTD, 7):
        batch = bytearray(build_batch([(None, b"x", [], 0)], compression=codec % 5))
        del batch[BATCH_HEADER_SIZE:]
        batch += tail
        struct.pack_into(">i", batch, 8, len(batch) - 12)
        struct.pack_into(">h", batch, 21, codec)
        struct.pack_into(">I", batch, 17, crc32c(memoryview(batch)[21:]))
        _exercise(bytes(batch))


@FUZZ
@given(mutated_batches())
def test_mutated_batches(buf: bytes) -> None:
    _exercise(buf)


@FUZZ
@given(valid_batches())
def test_valid_batches_pass(buf: bytes) -> None:
    [header] = split_batches(buf)
    validate_batch(buf, header, max_decompressed=LIMIT)
    assert len(decode_records(buf, header)) == header.record_count


@FUZZ
@given(CODECS, st.binary(max_size=2000), st.data())
def test_mutated_codec_streams(codec: int, payload: bytes, data: st.DataObject) -> None:
    packed = bytearray(compress(codec, payload))
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(packed)))
        if at < len(packed):
            packed[at] = data.draw(st.integers(0, 255))
        else:
            packed += data.draw(st.binary(min_size=1, max_size=8))
    try:
        out = decompress(codec, packed, max_size=4096)
    except (CorruptRecordError, UnsupportedCompressionError):
        return
    assert len(out) <= 4096
