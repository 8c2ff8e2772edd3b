import gzip
import os
import struct

import lz4.frame
import pytest
import snappy
import zstandard
from kafka import codec as kafka_codec

from gregor.wire.compression import (
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
    CorruptRecordError,
    UnsupportedCompressionError,
    compress,
    decompress,
)

CODECS = [NONE, GZIP, SNAPPY, LZ4, ZSTD]
COMPRESSED = [GZIP, SNAPPY, LZ4, ZSTD]
TEXT = b"".join(b"record %d: the quick brown fox\n" % i for i in range(40_000))


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize(
    "payload", [b"", b"x", TEXT, os.urandom(300_000)], ids=["empty", "one", "text", "random"]
)
def test_round_trip(codec: int, payload: bytes) -> None:
    packed = compress(codec, payload)
    assert decompress(codec, packed) == payload
    assert decompress(codec, memoryview(packed)) == payload
    assert decompress(codec, bytearray(packed), max_size=len(payload)) == payload


@pytest.mark.parametrize("codec", COMPRESSED)
def test_actually_compresses(codec: int) -> None:
    assert len(compress(codec, TEXT)) < len(TEXT) // 4


@pytest.mark.parametrize("codec", [5, 6, 7, -1])
def test_unknown_codec(codec: int) -> None:
    with pytest.raises(UnsupportedCompressionError):
        compress(codec, b"abc")
    with pytest.raises(UnsupportedCompressionError):
        decompress(codec, b"abc")


@pytest.mark.parametrize("codec", CODECS)
def test_size_limit(codec: int) -> None:
    packed = compress(codec, TEXT)
    assert decompress(codec, packed, max_size=len(TEXT)) == TEXT
    with pytest.raises(CorruptRecordError):
        decompress(codec, packed, max_size=len(TEXT) - 1)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_bomb_is_stopped(codec: int) -> None:
    bomb = compress(codec, bytes(64 << 20))
    assert len(bomb) < 4 << 20
    with pytest.raises(CorruptRecordError, match="limit"):
        decompress(codec, bomb, max_size=1 << 20)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_garbage_is_corrupt(codec: int) -> None:
    with pytest.raises(CorruptRecordError):
        decompress(codec, b"\x00\x01 this is not compressed at all \xff" * 3)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_truncated_is_corrupt(codec: int) -> None:
    packed = compress(codec, TEXT)
    for cut in (1, 5, len(packed) // 2):
        with pytest.raises(CorruptRecordError):
            decompress(codec, packed[:-cut])


def test_snappy_writes_xerial_framing_like_the_java_client() -> None:
    packed = compress(SNAPPY, TEXT)
    assert packed[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    (first_block,) = struct.unpack_from(">i", packed, 16)
    # 32 KiB uncompressed per block, as snappy-java's SnappyOutputStream writes.
    assert snappy.uncompress(packed[20 : 20 + first_block]) == TEXT[: 32 * 1024]
    # kafka-python implements the same framing independently: identical bytes.
    assert packed == kafka_codec.snappy_encode(TEXT)


def test_snappy_reads_raw_block_and_concatenated_streams() -> None:
    assert decompress(SNAPPY, snappy.compress(TEXT)) == TEXT
    assert decompress(SNAPPY, compress(SNAPPY, b"ab") + compress(SNAPPY, b"cd")) == b"abcd"


def test_snappy_raw_block_limit_checked_before_decoding() -> None:
    with pytest.raises(CorruptRecordError, match="limit"):
        decompress(SNAPPY, snappy.compress(TEXT), max_size=100)


def test_snappy_bad_block_length() -> None:
    header = compress(SNAPPY, b"")
    with pytest.raises(CorruptRecordError):
        decompress(SNAPPY, header + struct.pack(">i", -5) + b"abc")
    with pytest.raises(CorruptRecordError):
        decompress(SNAPPY, header + struct.pack(">i", 100) + b"abc")


def test_lz4_frame_matches_kafka_java_descriptor() -> None:
    packed = compress(LZ4, TEXT)
    assert packed[:4] == b"\x04\x22\x4d\x18"
    # FLG: version 1, independent blocks, no checksums, no content size; BD: 64 KiB.
    assert packed[4] == 0x60
    assert packed[5] == 0x40
    info = lz4.frame.get_frame_info(packed)
    assert not info["block_linked"] and info["content_size"] == 0


def test_lz4_reads_linked_blocks_and_content_size() -> None:
    # librdkafka and lz4 defaults differ from Java's; the reader accepts both.
    assert decompress(LZ4, lz4.frame.compress(TEXT)) == TEXT


def test_zstd_frame_without_content_size() -> None:
    packed = zstandard.ZstdCompressor(write_content_size=False).compress(TEXT)
    assert zstandard.frame_content_size(packed) == -1
    assert decompress(ZSTD, packed) == TEXT
    with pytest.raises(CorruptRecordError):
        decompress(ZSTD, packed, max_size=len(TEXT) - 1)
    with pytest.raises(CorruptRecordError):
        decompress(ZSTD, packed[:-3])


def test_zstd_streamed_frames_and_skippable_frames() -> None:
    streamed = zstandard.ZstdCompressor().compressobj()
    packed = (
        streamed.compress(TEXT[:100_000]) + streamed.compress(TEXT[100_000:]) + streamed.flush()
    )
    skippable = struct.pack("<II", 0x184D2A5A, 3) + b"xyz"
    assert decompress(ZSTD, packed + skippable + packed) == TEXT + TEXT
    with pytest.raises(CorruptRecordError):
        decompress(ZSTD, packed + skippable[:-1])
    with pytest.raises(CorruptRecordError):
        decompress(ZSTD, b"")


def test_gzip_concatenated_members_and_trailing_garbage() -> None:
    assert decompress(GZIP, gzip.compress(b"ab") + gzip.compress(b"cd")) == b"abcd"
    with pytest.raises(CorruptRecordError):
        decompress(GZIP, gzip.compress(b"ab") + b"junk")


@pytest.mark.parametrize(
    ("codec", "encode", "decode"),
    [
        (GZIP, kafka_codec.gzip_encode, kafka_codec.gzip_decode),
        (SNAPPY, kafka_codec.snappy_encode, kafka_codec.snappy_decode),
        (LZ4, kafka_codec.lz4_encode, kafka_codec.lz4_decode),
        (ZSTD, kafka_codec.zstd_encode, kafka_codec.zstd_decode),
    ],
)
def test_interop_with_kafka_python_codecs(codec: int, encode, decode) -> None:
    assert decompress(codec, encode(TEXT)) == TEXT
    assert decode(compress(codec, TEXT)) == TEXT
