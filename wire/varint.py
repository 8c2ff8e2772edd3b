"""Kafka's variable-length integers, the one implementation every decoder and encoder uses.

Unsigned varints (compact lengths, tagged fields) and zigzag varints and varlongs (the
fields of a v2 record) are base-128, least significant group first. A reader takes the
buffer and a position and returns (value, next position); it raises VarintError, which each
caller turns into its own layer's error. A one-byte value, nearly every one met, returns
before the loop.
"""

from __future__ import annotations

import mmap

__all__ = [
    "VarintError",
    "encode_uvarint",
    "encode_varint",
    "read_uvarint",
    "read_varint",
    "read_varlong",
]

# Any buffer of bytes that indexes to ints, a mapped segment (the log cleaner's) too.
Bytes = bytes | bytearray | memoryview | mmap.mmap

_TRUNCATED = "the buffer ends inside a varint"
# The 7-bit groups after the first: five bytes for an int32 (unsigned: values below 2**35,
# as Kafka's and kio's readers take), ten for an int64.
_INT32_SHIFTS = (7, 14, 21, 28)
_INT64_SHIFTS = (7, 14, 21, 28, 35, 42, 49, 56, 63)


class VarintError(ValueError):
    """A varint cut off by the end of its buffer, or longer than its type allows."""


def read_uvarint(buf: Bytes, pos: int) -> tuple[int, int]:
    """An unsigned varint of at most five bytes."""
    try:
        byte = buf[pos]
        if byte < 0x80:
            return byte, pos + 1
        value = byte & 0x7F
        for shift in _INT32_SHIFTS:
            pos += 1
            byte = buf[pos]
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value, pos + 1
    except IndexError:
        raise VarintError(_TRUNCATED) from None
    raise VarintError("unsigned varint longer than 5 bytes")


def _read_zigzag(buf: Bytes, pos: int, shifts: tuple[int, ...]) -> tuple[int, int]:
    """A zigzag varint of more than one byte (its callers return a one-byte one)."""
    raw = buf[pos] & 0x7F
    try:
        for shift in shifts:
            pos += 1
            byte = buf[pos]
            raw |= (byte & 0x7F) << shift
            if byte < 0x80:
                return (raw >> 1) ^ -(raw & 1), pos + 1
    except IndexError:
        raise VarintError(_TRUNCATED) from None
    raise VarintError(f"varint longer than {len(shifts) + 1} bytes")


def read_varint(buf: Bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint (Kafka's int32 record fields: lengths, offset delta, counts)."""
    try:
        byte = buf[pos]
    except IndexError:
        raise VarintError(_TRUNCATED) from None
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), pos + 1
    return _read_zigzag(buf, pos, _INT32_SHIFTS)


def read_varlong(buf: Bytes, pos: int) -> tuple[int, int]:
    """A zigzag varlong (Kafka's int64 record field: the timestamp delta)."""
    try:
        byte = buf[pos]
    except IndexError:
        raise VarintError(_TRUNCATED) from None
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), pos + 1
    return _read_zigzag(buf, pos, _INT64_SHIFTS)


def encode_uvarint(n: int) -> bytes:
    """An unsigned varint (compact lengths are encoded as length + 1)."""
    if 0 <= n < 0x80:
        return _ONE_BYTE[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_ONE_BYTE = tuple(bytes((n,)) for n in range(0x80))


def _zigzag(value: int) -> bytes:
    return encode_uvarint((value << 1) ^ (value >> 63))


# Nearly every varint a record batch needs (lengths, deltas, counts) is small: looked up.
_SMALL_VARINTS = tuple(_zigzag(n) for n in range(4096))


def encode_varint(value: int) -> bytes:
    """A zigzag varint or varlong (the encoding is the same; the reader sets the limit)."""
    if 0 <= value < 4096:
        return _SMALL_VARINTS[value]
    return _zigzag(value)
