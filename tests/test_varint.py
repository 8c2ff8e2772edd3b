"""Kafka's varints (gregor.wire.varint): encodings from Kafka's ByteUtils, limits and errors."""

import pytest

from gregor.wire.varint import (
    VarintError,
    encode_uvarint,
    encode_varint,
    read_uvarint,
    read_varint,
    read_varlong,
)


@pytest.mark.parametrize(
    "value", [0, 1, -1, 63, -64, 64, -65, 2047, 4095, 4096, 2**31 - 1, -(2**31)]
)
def test_varint_round_trip(value: int) -> None:
    encoded = encode_varint(value)
    assert read_varint(encoded + b"\x99", 0) == (value, len(encoded))
    assert read_varlong(b"\x99" + encoded, 1) == (value, len(encoded) + 1)


@pytest.mark.parametrize("value", [2**34, -(2**34) - 1, 2**63 - 1, -(2**63)])
def test_varlong_round_trip_beyond_int32(value: int) -> None:
    encoded = encode_varint(value)
    assert read_varlong(encoded, 0) == (value, len(encoded))
    with pytest.raises(VarintError, match="longer than 5 bytes"):
        read_varint(encoded, 0)


def test_known_encodings() -> None:
    assert [encode_varint(v) for v in (0, -1, 1, 300)] == [b"\x00", b"\x01", b"\x02", b"\xd8\x04"]
    assert encode_varint(-(2**63)) == b"\xff" * 9 + b"\x01"
    assert [encode_uvarint(v) for v in (0, 127, 128, 300)] == [
        b"\x00",
        b"\x7f",
        b"\x80\x01",
        b"\xac\x02",
    ]


@pytest.mark.parametrize("value", [0, 1, 127, 128, 16383, 16384, 2**31 - 1, 2**32, 2**35 - 1])
def test_uvarint_round_trip(value: int) -> None:
    encoded = encode_uvarint(value)
    assert read_uvarint(memoryview(encoded + b"\x01"), 0) == (value, len(encoded))


def test_negative_uvarint_is_refused() -> None:
    with pytest.raises(ValueError):
        encode_uvarint(-1)


@pytest.mark.parametrize("read", [read_uvarint, read_varint, read_varlong])
@pytest.mark.parametrize("data", [b"", b"\x80", b"\xff\xff"])
def test_truncated(read, data: bytes) -> None:
    with pytest.raises(VarintError, match="ends inside"):
        read(data, 0)


def test_too_long() -> None:
    with pytest.raises(VarintError, match="longer than 5 bytes"):
        read_uvarint(b"\xff" * 5 + b"\x01", 0)  # 2**35 and above: as Kafka, refused
    with pytest.raises(VarintError, match="longer than 5 bytes"):
        read_varint(b"\xff" * 6, 0)
    with pytest.raises(VarintError, match="longer than 10 bytes"):
        read_varlong(b"\xff" * 10 + b"\x01", 0)
