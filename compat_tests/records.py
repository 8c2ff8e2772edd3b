"""The record set every client round-trips, and the checks applied to what comes back."""

from __future__ import annotations

import random
import time
from collections import defaultdict
from dataclasses import dataclass, field

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
# A cluster replicates a batch whatever its codec, so it runs each client's round trip in
# these only (compat_tests/conftest.py).
CLUSTER_CODECS = ("none", "zstd")

Headers = tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True)
class Rec:
    """One record as a client sees it; offset is ignored when comparing."""

    partition: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp: int
    offset: int = field(default=-1, compare=False)


def sample_records(
    partitions: int,
    per_partition: int,
    *,
    null_header_values: bool = True,
    keyless_tombstones: bool = True,
    seed: int = 7,
) -> list[Rec]:
    """Keyed and unkeyed binary records, null values, headers, increasing CreateTimes.

    Records are interleaved across partitions; within a partition timestamps are 10 ms
    apart so each one is a distinct ListOffsets-by-time target. Some clients refuse
    headers with null values or records with neither key nor value; the flags leave those
    out for them.
    """
    rng = random.Random(seed)
    base_ts = int(time.time() * 1000) - 600_000
    out = []
    for i in range(per_partition * partitions):
        p = i % partitions
        n = i // partitions
        value = rng.randbytes(rng.randrange(0, 300))
        headers: list[tuple[str, bytes | None]] = []
        if i % 3 == 0:
            headers = [("trace", f"t{i}".encode()), ("empty", b""), ("trace", b"dup")]
        if null_header_values and i % 7 == 0:
            headers.append(("nullh", None))
        value_is_null = i % 5 == 2
        key_is_null = i % 4 == 1 and (keyless_tombstones or not value_is_null)
        out.append(
            Rec(
                partition=p,
                key=None if key_is_null else f"key-{i}".encode(),
                value=None if value_is_null else value,
                headers=tuple(headers),
                timestamp=base_ts + n * 10,
            )
        )
    return out


def by_partition(records: list[Rec]) -> dict[int, list[Rec]]:
    """Group by partition, each list in offset order (stable for unsent records)."""
    groups: dict[int, list[Rec]] = defaultdict(list)
    for r in sorted(records, key=lambda r: r.offset):
        groups[r.partition].append(r)
    return dict(groups)


def assert_round_trip(sent: list[Rec], received: list[Rec]) -> None:
    """Same records, in send order within each partition, at dense offsets from 0."""
    want = by_partition(sent)
    got = by_partition(received)
    assert sorted(got) == sorted(want), "partitions differ"
    for p, recs in want.items():
        assert [r.offset for r in got[p]] == list(range(len(recs))), f"offsets of partition {p}"
        for i, (w, g) in enumerate(zip(recs, got[p], strict=True)):
            assert g == w, f"partition {p} record {i}: sent {w!r}, got {g!r}"


def probe_times(sent: list[Rec]) -> list[int]:
    """Timestamps worth asking ListOffsets about: before all, exact hits, between two
    records, and after the last one."""
    stamps = sorted({r.timestamp for r in sent})
    mid = stamps[len(stamps) // 2]
    return [stamps[0] - 1000, stamps[0], mid, mid - 5, stamps[-1], stamps[-1] + 1]


def offset_for_time(sent: list[Rec], partition: int, timestamp: int) -> int | None:
    """Kafka's answer: the first offset whose timestamp is >= the target, if any."""
    recs = by_partition(sent).get(partition, [])
    return next((i for i, r in enumerate(recs) if r.timestamp >= timestamp), None)
