"""Record batch compression codecs, byte-compatible with what Kafka clients write and read.

Every decoder takes an optional output limit so a hostile batch cannot make the broker
allocate more than it allows (decompression bombs); codec failures surface as
CorruptRecordError and unknown codec ids as UnsupportedCompressionError.
"""

import gzip
import struct
import zlib

import lz4.frame
import snappy
import zstandard

from gregor.wire.varint import VarintError, read_uvarint

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4

CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}


class CorruptRecordError(ValueError):
    """Batch bytes are damaged or malformed (Kafka error CORRUPT_MESSAGE)."""


class DecompressedSizeError(CorruptRecordError):
    """A payload decompresses to more than the caller's limit."""


class UnsupportedCompressionError(ValueError):
    """Codec id outside 0-4 (Kafka error UNSUPPORTED_COMPRESSION_TYPE)."""


# snappy-java's SnappyOutputStream framing, which the Java client writes: magic, then
# int32 version and int32 minimum-compatible version, then [int32 length, raw block]*.
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024  # snappy-java's default block size
_INT32 = struct.Struct(">i")

_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_SKIPPABLE_MASK = 0xFFFFFFF0
_ZSTD_SKIPPABLE_MAGIC = 0x184D2A50
_ZSTD_DICT_ID_SIZES = (0, 1, 2, 4)
_ZSTD_FCS_SIZES = (0, 2, 4, 8)  # for flag 0 the size is 1 when single-segment, else 0
_UINT32_LE = struct.Struct("<I")

_READ_CHUNK = 1 << 20


def compress(codec: int, data: bytes | bytearray | memoryview) -> bytes:
    """Compress a records section the way the Java producer does for `codec`."""
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        return gzip.compress(data, compresslevel=6, mtime=0)
    if codec == SNAPPY:
        return _xerial_compress(data)
    if codec == LZ4:
        # Kafka's LZ4 stream: 64 KiB independent blocks, no content size or checksum
        # (its reader rejects linked blocks). lz4 has no types: this declares its result's.
        framed: bytes = lz4.frame.compress(
            data,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
        return framed
    if codec == ZSTD:
        return zstandard.ZstdCompressor(level=3).compress(data)
    raise UnsupportedCompressionError(f"unknown compression codec {codec}")


def decompress(
    codec: int, data: bytes | bytearray | memoryview, max_size: int | None = None
) -> bytes | bytearray:
    """Decompress a records section; CorruptRecordError if it is damaged or exceeds max_size."""
    if codec == NONE:
        out = bytes(data)
        _check_limit(len(out), max_size)
        return out
    try:
        if codec == GZIP:
            return _gunzip(data, max_size)
        if codec == SNAPPY:
            return _unsnappy(memoryview(data), max_size)
        if codec == LZ4:
            return _unlz4(data, max_size)
        if codec == ZSTD:
            return _unzstd(memoryview(data), max_size)
    except (zlib.error, snappy.UncompressError, RuntimeError, zstandard.ZstdError) as exc:
        raise CorruptRecordError(f"{CODEC_NAMES[codec]} payload is corrupt: {exc}") from exc
    raise UnsupportedCompressionError(f"unknown compression codec {codec}")


def _check_limit(size: int, max_size: int | None) -> None:
    if max_size is not None and size > max_size:
        raise DecompressedSizeError(f"decompressed size exceeds the limit of {max_size} bytes")


def _grow(out: bytearray, chunk: bytes, max_size: int | None) -> None:
    """Append one decoded chunk, within the limit. Every decoder grows one buffer in place
    (realloc) a chunk at a time: output near the limit costs its size once, where joining
    parts (or a codec's own output blocks) at the end would cost it twice."""
    out += chunk
    _check_limit(len(out), max_size)


def _gunzip(data: bytes | bytearray | memoryview, max_size: int | None) -> bytearray:
    # Java's GZIPInputStream reads concatenated members, so we do too.
    out = bytearray()
    while True:
        member = zlib.decompressobj(16 + zlib.MAX_WBITS)
        rest = data
        while not member.eof:
            chunk = member.decompress(rest, _READ_CHUNK)
            rest = member.unconsumed_tail
            if not chunk and not rest and not member.eof:
                raise CorruptRecordError("gzip payload is truncated")
            _grow(out, chunk, max_size)
        data = member.unused_data
        if not data:
            return out


def _xerial_compress(data: bytes | bytearray | memoryview) -> bytes:
    view = memoryview(data)
    out = [_XERIAL_HEADER]
    for start in range(0, len(view), _XERIAL_BLOCK):
        block = snappy.compress(view[start : start + _XERIAL_BLOCK])
        out.append(_INT32.pack(len(block)))
        out.append(block)
    return b"".join(out)


def _snappy_length(block: memoryview) -> int:
    """Uncompressed length from a raw snappy block's preamble (an unsigned varint)."""
    try:
        return read_uvarint(block, 0)[0]
    except VarintError:
        raise CorruptRecordError("snappy block has a malformed length preamble") from None


def _unsnappy(view: memoryview, max_size: int | None) -> bytes | bytearray:
    # librdkafka may send a bare snappy block; the Java client sends xerial framing.
    if view[:8] != _XERIAL_MAGIC:
        _check_limit(_snappy_length(view), max_size)
        raw: bytes = snappy.uncompress(view)  # python-snappy has no types: declares its result's
        return raw
    out = bytearray()
    pos = 0
    end = len(view)
    while pos < end:
        if view[pos : pos + 8] == _XERIAL_MAGIC:
            # snappy-java accepts concatenated streams, each with its own header.
            if end - pos < len(_XERIAL_HEADER):
                raise CorruptRecordError("snappy stream header is truncated")
            pos += len(_XERIAL_HEADER)
            continue
        if end - pos < 4:
            raise CorruptRecordError("snappy block length is truncated")
        (length,) = _INT32.unpack_from(view, pos)
        pos += 4
        if length < 0 or length > end - pos:
            raise CorruptRecordError("snappy block length out of range")
        block = view[pos : pos + length]
        pos += length
        _check_limit(len(out) + _snappy_length(block), max_size)
        out += snappy.uncompress(block)
    return out


def _unlz4(data: bytes | bytearray | memoryview, max_size: int | None) -> bytearray:
    out = bytearray()
    while True:
        frame = lz4.frame.LZ4FrameDecompressor()
        _grow(out, frame.decompress(data, _READ_CHUNK), max_size)
        while not frame.eof and not frame.needs_input:
            _grow(out, frame.decompress(b"", _READ_CHUNK), max_size)
        if not frame.eof:
            raise CorruptRecordError("lz4 payload is truncated")
        data = frame.unused_data
        if not data:
            return out


def _check_zstd_frames(view: memoryview) -> None:
    """Walk zstd frame and block headers so a truncated payload is rejected.

    zstandard's streaming reader silently stops at the end of input, so completeness
    has to be established from the frame structure (RFC 8878) before decoding.
    """
    end = len(view)
    if end == 0:
        raise CorruptRecordError("zstd payload is empty")
    pos = 0
    while pos < end:
        if end - pos < 5:
            raise CorruptRecordError("zstd frame header is truncated")
        (magic,) = _UINT32_LE.unpack_from(view, pos)
        if magic & _ZSTD_SKIPPABLE_MASK == _ZSTD_SKIPPABLE_MAGIC:
            if end - pos < 8:
                raise CorruptRecordError("zstd skippable frame is truncated")
            pos += 8 + _UINT32_LE.unpack_from(view, pos + 4)[0]
            continue
        if magic != _ZSTD_MAGIC:
            raise CorruptRecordError("zstd frame magic is wrong")
        descriptor = view[pos + 4]
        single_segment = (descriptor >> 5) & 1
        fcs_flag = descriptor >> 6
        fcs_size = _ZSTD_FCS_SIZES[fcs_flag] or single_segment
        pos += 5 + (1 - single_segment) + _ZSTD_DICT_ID_SIZES[descriptor & 3] + fcs_size
        while True:
            if end - pos < 3:
                raise CorruptRecordError("zstd block header is truncated")
            block = view[pos] | view[pos + 1] << 8 | view[pos + 2] << 16
            block_type = (block >> 1) & 3
            if block_type == 3:
                raise CorruptRecordError("zstd block type is reserved")
            pos += 3 + (1 if block_type == 1 else block >> 3)
            if block & 1:
                break
        if (descriptor >> 2) & 1:
            pos += 4
    if pos > end:
        raise CorruptRecordError("zstd payload is truncated")


def _unzstd(view: memoryview, max_size: int | None) -> bytearray:
    # Producers stream-compress, so frames often lack a content size: decode in
    # bounded chunks rather than trusting (or needing) the header.
    _check_zstd_frames(view)
    out = bytearray()
    reader = zstandard.ZstdDecompressor().stream_reader(view, read_across_frames=True)
    with reader:
        while chunk := reader.read(_READ_CHUNK):
            _grow(out, chunk, max_size)
    return out
