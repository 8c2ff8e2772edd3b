"""The C record walker against a pure-Python reference of the same rules (random and mutated
batches), and the log validator's record rules on their own."""

from __future__ import annotations

import random
import struct
import threading

import pytest
from crc32c import crc32c

from gregor.log.config import LogConfig
from gregor.log.errors import InvalidRecordError, InvalidTimestampError
from gregor.log.validator import (
    Budget,
    RecordKeyError,
    RecordTimestampError,
    validate,
)
from gregor.wire.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD
from gregor.wire.records import (
    BATCH_HEADER_SIZE,
    CorruptRecordError,
    bad_records_of,
    build_batch,
    decode_records,
    parse_header,
    records_section,
    walk_records,
)

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
NOW = 1_700_000_000_000


class _Framing(Exception):
    pass


def reference_walk(
    data: bytes, count: int, base_ts: int, ts_min: int, ts_max: int, need_keys: bool
) -> int | tuple[int, int]:
    """The walker's rules in Python: the max timestamp, or (kind, record index)."""
    pos = 0

    def varint(limit: int, max_bytes: int) -> int:
        nonlocal pos
        raw = 0
        for i in range(max_bytes):
            if pos >= limit:
                raise _Framing
            b = data[pos]
            pos += 1
            raw |= (b & 0x7F) << (7 * i)
            if b < 0x80:
                bits = 32 if max_bytes == 5 else 64
                raw &= (1 << bits) - 1
                value = (raw >> 1) ^ (((1 << bits) - 1) if raw & 1 else 0)
                return value - (1 << bits) if value >= 1 << (bits - 1) else value
        raise _Framing

    def skip(limit: int) -> int:
        nonlocal pos
        n = varint(limit, 5)
        if n >= 0:
            if n > limit - pos:
                raise _Framing
            pos += n
        return n

    first: tuple[int, int] | None = None
    max_ts = -1
    i = 0
    try:
        for i in range(count):  # noqa: B007 (read in the handler)
            length = varint(len(data), 5)
            if length < 1 or length > len(data) - pos:
                raise _Framing
            end = pos + length
            pos += 1
            ts_delta = varint(end, 10)
            if varint(end, 5) != i:
                raise _Framing
            key_length = skip(end)
            skip(end)
            headers = varint(end, 5)
            if headers < 0:
                raise _Framing
            for _ in range(headers):
                n = varint(end, 5)
                if n < 0 or n > end - pos:
                    raise _Framing
                pos += n
                skip(end)
            if pos != end:
                raise _Framing
            ts = (base_ts + ts_delta + 2**63) % 2**64 - 2**63
            max_ts = max(max_ts, ts)
            if first is None:
                if need_keys and key_length < 0:
                    first = (2, i)
                elif ts != -1 and not ts_min <= ts <= ts_max:
                    first = (3, i)
    except _Framing:
        return (1, i)
    if pos != len(data):
        return (1, count)
    return first or max_ts


def random_batch(rng: random.Random, codec: int = NONE) -> bytes:
    records = []
    for i in range(rng.randint(1, 12)):
        key = None if rng.random() < 0.2 else rng.randbytes(rng.randint(0, 20))
        value = None if rng.random() < 0.1 else rng.randbytes(rng.randint(0, 300))
        headers = [(f"h{j}", rng.choice([None, b"x" * j])) for j in range(rng.randint(0, 3))]
        records.append((key, value, headers, NOW + rng.randint(-5000, 5000) + i))
    return build_batch(records, compression=codec)


def mutate(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        choice = rng.random()
        if choice < 0.5 and out:
            out[rng.randrange(len(out))] = rng.randrange(256)
        elif choice < 0.7 and out:
            del out[rng.randrange(len(out)) :]
        elif choice < 0.85:
            out[rng.randint(0, len(out)) : 0] = rng.randbytes(rng.randint(1, 5))
        elif out:
            del out[rng.randrange(len(out))]
    return bytes(out)


@pytest.mark.parametrize("seed", range(4))
def test_walker_matches_the_reference_on_random_and_mutated_records(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(1500):
        batch = random_batch(rng)
        header = parse_header(batch)
        section = bytes(records_section(batch, header))
        if rng.random() < 0.8:
            section = mutate(rng, section)
        count = header.record_count + rng.choice([0, 0, 0, -1, 1])
        ts_min, ts_max = rng.choice([(INT64_MIN, INT64_MAX), (NOW - 1000, NOW + 1000)])
        need_keys = rng.random() < 0.3
        expected = reference_walk(section, count, header.base_timestamp, ts_min, ts_max, need_keys)
        header.record_count = count
        got = walk_records(section, header, ts_min, ts_max, need_keys)
        assert (got if isinstance(got, int) else got[:2]) == expected


@pytest.mark.parametrize("seed", range(2))
def test_bad_records_lists_what_decoding_each_record_finds(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(500):
        batch = random_batch(rng)
        header = parse_header(batch)
        section = records_section(batch, header)
        ts_min, ts_max = rng.choice([(INT64_MIN, INT64_MAX), (NOW - 1000, NOW + 1000)])
        need_keys = rng.random() < 0.5
        expected = [
            (i, None if need_keys and r.key is None else r.timestamp)
            for i, r in enumerate(decode_records(batch, header))
            if (need_keys and r.key is None) or not ts_min <= r.timestamp <= ts_max
        ]
        assert bad_records_of(section, header, ts_min, ts_max, need_keys) == expected
    with pytest.raises(ValueError, match="record 0"):
        bad_records_of(b"\x00", header, INT64_MIN, INT64_MAX, False)


def test_walker_accepts_what_build_batch_writes_and_returns_the_max_timestamp() -> None:
    rng = random.Random(7)
    for _ in range(200):
        batch = random_batch(rng)
        header = parse_header(batch)
        got = walk_records(records_section(batch, header), header, INT64_MIN, INT64_MAX, False)
        assert got == header.max_timestamp


def config(**overrides: object) -> LogConfig:
    return LogConfig(**overrides)  # type: ignore[arg-type]


def batch(n: int = 3, *, codec: int = NONE, key: bytes | None = b"k", ts: int = NOW, **kw) -> bytes:
    return build_batch([(key, b"v%d" % i, [], ts + i) for i in range(n)], compression=codec, **kw)


def with_header(data: bytes, fmt: str, at: int, value: int) -> bytes:
    """Patch a header field and fix the CRC, as a hostile client would."""
    out = bytearray(data)
    struct.pack_into(fmt, out, at, value)
    struct.pack_into(">I", out, 17, crc32c(memoryview(out)[21:]))
    return bytes(out)


@pytest.mark.parametrize("codec", [NONE, GZIP, SNAPPY, LZ4, ZSTD])
def test_a_count_claiming_more_records_than_the_batch_holds_is_invalid(codec: int) -> None:
    claimed = with_header(with_header(batch(codec=codec), ">i", 57, 2**31 - 1), ">i", 23, 2**31 - 2)
    # Uncompressed, the header check already sees too few bytes for the count (CORRUPT_MESSAGE).
    with pytest.raises((InvalidRecordError, CorruptRecordError)):
        validate(claimed, config(), NOW)


def test_wrong_offset_deltas_and_trailing_bytes_are_invalid() -> None:
    good = batch(2)
    section = bytearray(records_section(good, parse_header(good)))
    second = 1 + section[0] // 2  # the first record: a 1-byte length varint, then its body
    assert section[second + 3] == 2  # zigzag(1): the second record's offset delta
    section[second + 3] = 0
    zero_deltas = with_header(good[:BATCH_HEADER_SIZE] + bytes(section), ">h", 21, 0)
    with pytest.raises(InvalidRecordError, match="offset delta"):
        validate(zero_deltas, config(), NOW)
    trailing = with_header(good + b"\x00", ">i", 8, len(good) + 1 - 12)
    with pytest.raises(InvalidRecordError, match="after the last record"):
        validate(trailing, config(), NOW)


def test_client_rules_on_producer_fields() -> None:
    with pytest.raises(InvalidRecordError, match="sequence"):
        validate(batch(producer_id=5, producer_epoch=0, base_sequence=-1), config(), NOW)
    # A transactional batch passes: whether it belongs to a transaction is the producer
    # state's and the produce handler's question.
    validate(
        batch(producer_id=5, producer_epoch=0, base_sequence=0, is_transactional=True),
        config(),
        NOW,
    )
    with pytest.raises(InvalidRecordError, match="control"):
        validate(batch(is_control=True), config(), NOW)
    # The broker's own batches (origin_client=False) skip the client rules.
    validate(batch(is_control=True), config(), NOW, origin_client=False)


def test_keys_and_timestamps_name_the_record() -> None:
    records = [(b"k", b"v", [], NOW), (None, b"v", [], NOW), (b"k", b"v", [], NOW)]
    with pytest.raises(RecordKeyError) as key_error:
        validate(build_batch(records, compression=LZ4), config(cleanup_policy="compact"), NOW)
    assert [i for i, _ in key_error.value.record_errors] == [1]
    late = [(b"k", b"v", [], NOW), (b"k", b"v", [], NOW - 10_000)]
    with pytest.raises(RecordTimestampError) as ts_error:
        validate(build_batch(late), config(message_timestamp_before_max_ms=5_000), NOW)
    assert [i for i, _ in ts_error.value.record_errors] == [1]
    assert isinstance(ts_error.value, InvalidTimestampError)


def test_every_bad_record_of_a_batch_is_named() -> None:
    """KIP-467: 100 records, every tenth keyless, on a compacted topic: ten record errors;
    a bad timestamp among them makes the batch's error INVALID_TIMESTAMP, with both kinds."""
    keyless = [(None if i % 10 == 3 else b"k", b"v", [], NOW) for i in range(100)]
    with pytest.raises(RecordKeyError) as key_error:
        validate(build_batch(keyless, compression=LZ4), config(cleanup_policy="compact"), NOW)
    errors = key_error.value.record_errors
    assert [i for i, _ in errors] == list(range(3, 100, 10))
    assert all("without key" in message for _, message in errors)
    assert "10 record errors" in str(key_error.value)
    mixed = [(None, b"v", [], NOW), (b"k", b"v", [], NOW - 10_000), (b"k", b"v", [], NOW)]
    with pytest.raises(RecordTimestampError) as mixed_error:
        validate(
            build_batch(mixed),
            config(cleanup_policy="compact", message_timestamp_before_max_ms=5_000),
            NOW,
        )
    assert [i for i, _ in mixed_error.value.record_errors] == [0, 1]


def test_a_wrong_max_timestamp_is_rewritten() -> None:
    lying = with_header(batch(3), ">q", 35, NOW + 10**9)
    validated = validate(lying, config(), NOW)
    [header] = validated.headers
    assert header.max_timestamp == NOW + 2
    assert parse_header(validated.data).max_timestamp == NOW + 2
    assert [r.timestamp for r in decode_records(validated.data, header)] == [NOW, NOW + 1, NOW + 2]


def test_a_compression_bomb_is_refused_within_the_request_budget() -> None:
    bomb = build_batch([(b"k", bytes(70 << 20), [], NOW)], compression=ZSTD)
    assert len(bomb) < 64 << 10
    with pytest.raises(CorruptRecordError, match="at most"):
        validate(bomb, config(), NOW)


def test_one_request_at_a_time_decompresses_past_the_shared_allowance() -> None:
    big = build_batch([(b"k", bytes(9 << 20), [], NOW)], compression=ZSTD)  # over 8 MiB
    small = build_batch([(b"k", bytes(1 << 20), [], NOW)], compression=ZSTD)
    done = threading.Event()
    second = threading.Thread(target=lambda: (validate(big, config(), NOW), done.set()))
    with Budget() as first:
        validate(big, config(), NOW, budget=first)
        assert first.large
        validate(small, config(), NOW)  # small ones go on side by side
        second.start()
        assert not done.wait(0.5), "a second big decompression ran beside the first"
    assert done.wait(30)
    second.join()


@pytest.mark.parametrize("target", ["uncompressed", "gzip", "snappy", "lz4", "zstd"])
def test_recompression_keeps_every_record_field(target: str) -> None:
    source = build_batch(
        [(b"k1", b"v1", [("h", b"x")], NOW), (None, b"v2" * 100, [], NOW + 7)],
        compression=SNAPPY if target != "snappy" else GZIP,
        producer_id=9,
        producer_epoch=2,
        base_sequence=5,
    )
    validated = validate(source, config(compression_type=target), NOW)
    [before], [after] = [parse_header(source)], validated.headers
    assert (
        after.compression
        == {"uncompressed": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}[target]
    )
    assert (after.producer_id, after.producer_epoch, after.base_sequence, after.record_count) == (
        before.producer_id,
        before.producer_epoch,
        before.base_sequence,
        before.record_count,
    )
    assert decode_records(validated.data, after) == decode_records(source, before)
    validate(bytes(validated.data), config(), NOW)  # CRC and records check out
