"""The __consumer_offsets record formats and the group -> partition mapping."""

from __future__ import annotations

import struct

import pytest

from gregor.coordinator.group import parse_subscription_topics
from gregor.coordinator.record_format import RecordFormatError
from gregor.coordinator.records import (
    GroupKey,
    GroupValue,
    MemberValue,
    OffsetKey,
    OffsetValue,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
    partition_for,
)
from gregor.wire.records import build_batch, decode_records, split_batches, validate_batch


def java_hash(s: str) -> int:
    h = 0
    for unit in struct.unpack(
        f">{len(s.encode('utf-16-be', 'surrogatepass')) // 2}H",
        s.encode("utf-16-be", "surrogatepass"),
    ):
        h = (h * 31 + unit) % 2**32
    return h - 2**32 if h >= 2**31 else h


@pytest.mark.parametrize(
    ("group", "expected"),
    [
        ("g1", (103 * 31 + 49) % 50),  # small positive hash
        ("polygenelubricants", 0),  # hashCode is Integer.MIN_VALUE: Utils.abs gives 0
        ("console-consumer-12345", abs(java_hash("console-consumer-12345")) % 50),
        ("grüße-👋", abs(java_hash("grüße-👋")) % 50),  # non-ASCII, a surrogate pair
    ],
)
def test_partition_for_matches_kafka(group: str, expected: int) -> None:
    assert partition_for(group, 50) == expected


def test_negative_hash_uses_abs_not_mask() -> None:
    group = next(
        g
        for g in (f"group-{i}" for i in range(1000))
        if java_hash(g) < 0 and abs(java_hash(g)) % 50 != (java_hash(g) & 0x7FFFFFFF) % 50
    )
    assert partition_for(group, 50) == abs(java_hash(group)) % 50


def test_offset_commit_key_and_value_v3_bytes() -> None:
    key = encode_offset_key("g", "t", 5)
    assert key == b"\x00\x01" + b"\x00\x01g" + b"\x00\x01t" + b"\x00\x00\x00\x05"
    assert decode_key(key) == OffsetKey("g", "t", 5)
    value = OffsetValue(42, 3, "meta", 1_700_000_000_000)
    raw = encode_offset_value(value)
    assert raw == struct.pack(">hqi", 3, 42, 3) + b"\x00\x04meta" + struct.pack(
        ">q", 1_700_000_000_000
    )
    assert decode_offset_value(raw) == value


def test_older_offset_values_decode() -> None:
    v0 = struct.pack(">hq", 0, 9) + b"\x00\x00" + struct.pack(">q", 100)
    assert decode_offset_value(v0) == OffsetValue(9, -1, "", 100)
    v1 = struct.pack(">hq", 1, 9) + b"\x00\x01m" + struct.pack(">qq", 100, 500)
    assert decode_offset_value(v1) == OffsetValue(9, -1, "m", 100, 500)
    # v4: flexible, compact string, then an (empty) tagged-field section
    v4 = struct.pack(">hqi", 4, 9, 2) + b"\x02m" + struct.pack(">q", 100) + b"\x00"
    assert decode_offset_value(v4) == OffsetValue(9, 2, "m", 100)


def test_group_metadata_round_trip() -> None:
    value = GroupValue(
        "consumer",
        7,
        "range",
        "m-1",
        1_700_000_000_000,
        (
            MemberValue("m-1", None, "client", "/127.0.0.1", 300_000, 45_000, b"sub", b"asg"),
            MemberValue("m-2", "instance-2", "client", "/10.0.0.2", 300_000, 10_000, b"", b""),
        ),
    )
    raw = encode_group_value(value)
    assert raw[:2] == b"\x00\x03"
    assert decode_group_value(raw) == value
    assert decode_key(encode_group_key("grp")) == GroupKey("grp")
    assert encode_group_key("grp") == b"\x00\x02\x00\x03grp"


def test_group_metadata_v0_member_has_one_timeout() -> None:
    member = (
        b"\x00\x01m"
        + b"\x00\x01c"
        + b"\x00\x01h"
        + struct.pack(">i", 10_000)
        + struct.pack(">i", 1)
        + b"s"
        + struct.pack(">i", 1)
        + b"a"
    )
    raw = (
        struct.pack(">h", 0)
        + b"\x00\x08consumer"
        + struct.pack(">i", 2)
        + b"\x00\x05range"
        + b"\x00\x01m"
        + struct.pack(">i", 1)
        + member
    )
    assert decode_group_value(raw) == GroupValue(
        "consumer",
        2,
        "range",
        "m",
        -1,
        (MemberValue("m", None, "c", "h", 10_000, 10_000, b"s", b"a"),),
    )


@pytest.mark.parametrize("raw", [b"", b"\x00", b"\x00\x09", b"\x00\x01\x00\x05ab"])
def test_bad_keys_raise(raw: bytes) -> None:
    with pytest.raises(RecordFormatError):
        decode_key(raw)


def test_subscription_topics() -> None:
    sub = struct.pack(">hi", 1, 2) + b"\x00\x01a" + b"\x00\x02bc" + struct.pack(">i", -1)
    assert parse_subscription_topics(sub) == ["a", "bc"]
    assert parse_subscription_topics(b"\x00") is None


def test_offset_value_v1_carries_the_expire_timestamp() -> None:
    value = OffsetValue(42, -1, "m", 1000, 5000)
    raw = encode_offset_value(value)
    assert struct.unpack_from(">h", raw)[0] == 1
    assert decode_offset_value(raw) == value


def test_coordinator_records_round_trip_through_a_batch() -> None:
    records = [
        (encode_offset_key("g", "t" * 70, i), encode_offset_value(OffsetValue(i, 3, "", 7)))
        for i in range(70)
    ]
    records.append((encode_group_key("g"), None))  # a tombstone
    now = 1_700_000_000_000
    batch = build_batch([(k, v, (), now) for k, v in records])
    (header,) = split_batches(batch)
    validate_batch(batch, header)
    assert [(r.key, r.value) for r in decode_records(batch, header)] == records
