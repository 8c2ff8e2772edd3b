"""The cleaner's memory is bounded by log.cleaner.dedupe.buffer.size: the offset map is one
fixed table (log/_offsetmap.c), a full map ends a pass and the next goes on from there, and
the worker drops the segment pages it has walked. The last test runs the real worker process
over a log with more keys than one pass maps and checks both its peak RSS and that the result
is Kafka's compaction."""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
from pathlib import Path

import pytest

from gregor.log import LogConfig
from gregor.log.cleaner import clean_log, iter_records, peak_rss
from gregor.log.cleaner_manager import CleanerConfig, LogCleaner
from gregor.log.manager import LogManager
from gregor.log.offset_map import OffsetMap, map_capacity, map_slots, md5, new_offset_map
from gregor.wire.records import (
    build_batch,
    decode_records,
    parse_header,
    records_section,
    split_batches,
)

NOW = 1_700_000_000_000
DAY = 86_400_000
MiB = 1 << 20


# -- the map -----------------------------------------------------------------------------------
def test_md5_is_hashlibs() -> None:
    rng = random.Random(7)
    for n in [*range(130), 1000, 4096, 65_537]:
        data = rng.randbytes(n)
        assert md5(data) == hashlib.md5(data).digest(), n
    assert md5(memoryview(b"xabc")[1:]) == hashlib.md5(b"abc").digest()


def test_the_map_holds_capacity_keys_and_no_more() -> None:
    m = OffsetMap(11, 9)
    assert (m.slots, m.capacity, len(m), m.latest_offset) == (11, 9, 0, -1)
    assert m.has_room_for(1_000)  # an empty map takes any batch (as far as it fits)
    for i in range(9):
        assert m.put(b"key-%d" % i, i)
    assert not m.has_room_for(1)
    assert not m.put(b"new", 100)  # full: a new key does not go in
    assert m.get(b"new") == -1
    assert m.put(b"key-3", 50)  # a known key still moves on
    assert m.get(b"key-3") == 50 and m.get(b"key-4") == 4 and len(m) == 9
    m.latest_offset = 99
    assert m.latest_offset == 99
    for slots, capacity in ((1, 1), (5, 5), (5, 0)):
        with pytest.raises(ValueError):
            OffsetMap(slots, capacity)


def test_short_keys_are_exact_and_long_ones_hashed() -> None:
    m = OffsetMap(101, 90)
    keys = [b"", b"a", b"a\x00", b"\x00", b"\x00a", b"x" * 15, b"x" * 16, b"x" * 17, b"\x01" * 15]
    for offset, key in enumerate(keys):
        assert m.put(key, offset)
    assert [m.get(k) for k in keys] == list(range(len(keys)))
    assert m.get(bytearray(b"a")) == 1 and m.get(memoryview(b"xa")[1:]) == 1
    with pytest.raises(TypeError):
        m.get("a")


def test_slots_and_capacity_follow_kafka() -> None:
    slots = map_slots(128 * MiB, 1)
    assert slots <= 128 * MiB // 24 and 128 * MiB // 24 - slots < 100
    assert all(slots % p for p in range(2, int(slots**0.5) + 1))  # prime
    assert map_capacity(128 * MiB, 1, 0.9) == int(slots * 0.9)
    assert map_slots(128 * MiB, 2) <= 64 * MiB // 24  # shared by log.cleaner.threads
    assert map_capacity(24 * 5, 1, 0.9) == 4 and map_capacity(1, 1, 0.9) == 1
    assert map_capacity(24 * 5, 1, 1.0) == 4  # one slot stays empty
    # A dirty section of few offsets gets a small table that still takes all of them.
    small = new_offset_map(slots, int(slots * 0.9), 1000)
    assert small.slots < 1200 and small.capacity >= 1000
    assert new_offset_map(slots, int(slots * 0.9), 10**9).slots == slots


def _batch(rng: random.Random, base: int, n: int) -> tuple[bytes, int]:
    records = []
    for _ in range(n):
        key = None if rng.random() < 0.1 else b"k%d" % rng.randrange(50) * rng.choice((1, 9))
        value = None if rng.random() < 0.2 else rng.randbytes(rng.randrange(300))
        records.append((key, value, [("h", b"v")] if rng.random() < 0.3 else [], NOW))
    return build_batch(records, base_offset=base), n


def test_put_records_walks_records_as_the_python_reader_does() -> None:
    rng = random.Random(3)
    for trial in range(200):
        data, count = _batch(rng, 1000 * trial, rng.randrange(1, 60))
        h = parse_header(data, 0)
        section = bytes(records_section(data, h))
        first_dirty = h.base_offset + rng.randrange(count)
        m = OffsetMap(211, 190)
        assert m.put_records(section, count, h.base_offset, first_dirty) == -1
        model: dict[bytes, int] = {}
        for _, _, _, _, _, delta, key, _ in iter_records(section, count):
            if key is not None and h.base_offset + delta >= first_dirty:
                model[key] = h.base_offset + delta
        assert len(m) == len(model) and all(m.get(k) == o for k, o in model.items())
        # A full map stops at the first record whose key does not fit.
        small = OffsetMap(3, 2)
        stopped = small.put_records(section, count, h.base_offset, 0)
        keyed = [h.base_offset + r[5] for r in iter_records(section, count) if r[6] is not None]
        distinct = {r[6] for r in iter_records(section, count) if r[6] is not None}
        assert (stopped == -1) == (len(distinct) <= 2)
        assert stopped == -1 or stopped in keyed
        # Malformed records are refused, never read past.
        for cut in (1, len(section) // 2, len(section) - 1):
            with pytest.raises(ValueError):
                OffsetMap(211, 190).put_records(section[:cut], count, 0, 0)
        with pytest.raises(ValueError):
            OffsetMap(211, 190).put_records(section + b"\x00", count, 0, 0)
        with pytest.raises(ValueError):
            OffsetMap(211, 190).put_records(section, count + 1, 0, 0)


# -- passes ------------------------------------------------------------------------------------
def _compacted(tmp_path: Path, **config: object) -> tuple[LogManager, LogConfig]:
    manager = LogManager([tmp_path / "logs"], {})
    manager.startup(NOW)
    settings: dict[str, object] = {
        "cleanup_policy": "compact",
        "segment_bytes": 1 * MiB,
        "min_cleanable_dirty_ratio": 0.01,
        "delete_retention_ms": DAY,
    }
    settings.update(config)
    return manager, LogConfig(**settings)  # type: ignore[arg-type]


def _records(log) -> list[tuple[int, bytes | None, bytes | None]]:  # noqa: ANN001
    out = []
    for segment in log.segments:
        data = os.pread(segment.fd, segment.size, 0)
        for h in split_batches(data):
            out.extend((r.offset, r.key, r.value) for r in decode_records(data, h))
    return out


def _latest(records: list[tuple[int, bytes | None, bytes | None]]) -> list[tuple]:
    last = {key: (offset, key, value) for offset, key, value in records}
    return sorted(last.values())


def test_a_batch_with_more_keys_than_the_map_is_cleaned_in_several_passes(
    tmp_path: Path,
) -> None:
    manager, config = _compacted(tmp_path, segment_bytes=100_000)
    log = manager.get_or_create("t", 0, config, now_ms=NOW)
    # One batch of 30 distinct keys, a map of 4: Kafka's cleaner would never get past it.
    log.append_as_leader(
        build_batch([(b"k%02d" % i, b"a", [], NOW) for i in range(30)]), leader_epoch=0, now_ms=NOW
    )
    log.append_as_leader(
        build_batch([(b"k%02d" % i, b"b", [], NOW) for i in range(0, 30, 3)]),
        leader_epoch=0,
        now_ms=NOW,
    )
    expected = _latest(_records(log))
    log._roll(log.log_end_offset, NOW)
    log.append_as_leader(build_batch([(b"tail", b"x", [], NOW)]), leader_epoch=0, now_ms=NOW)
    cleaner = LogCleaner(manager, CleanerConfig(dedupe_buffer_size=24 * 5), dict)
    ends = []
    while (ltc := cleaner.grab_filthiest(NOW)) is not None:
        result = clean_log(cleaner.task_for(ltc, NOW))
        cleaner.in_progress.discard(ltc.tp)
        cleaner.swap_in(ltc, result, NOW)
        ends.append(result.end_offset)
        assert len(ends) < 50
    assert ends[0] == 4 and ends == sorted(ends) and ends[-1] == 40  # inside the batch
    assert _records(log) == [*expected, (40, b"tail", b"x")]
    manager.shutdown({})


def _write(log, records: list[tuple[bytes, bytes | None]], batch: int = 200) -> None:  # noqa: ANN001
    for i in range(0, len(records), batch):
        log.append_as_leader(
            build_batch([(k, v, [], NOW) for k, v in records[i : i + batch]]),
            leader_epoch=0,
            now_ms=NOW,
        )


def test_worker_memory_stays_within_the_dedupe_buffer(tmp_path: Path) -> None:
    """log.cleaner.dedupe.buffer.size 2 MiB (78,643 keys a pass) over 240,000 keys and 34 MB
    of log: several passes, each ending where the map filled; the worker's peak RSS is its
    idle size plus the buffer plus a few MiB (the old dict map took ~11 MB for those keys and
    kept every page of the log it walked), and the log is compacted as Kafka's is."""
    buffer = 2 * MiB
    manager, config = _compacted(tmp_path)
    small = manager.get_or_create("small", 0, config, now_ms=NOW)
    _write(small, [(b"s%d" % (i % 10), b"v") for i in range(100)])
    small._roll(small.log_end_offset, NOW)
    _write(small, [(b"tail", b"v")])
    rng = random.Random(11)
    values = [rng.randbytes(120) for _ in range(64)]
    records: list[tuple[bytes, bytes | None]] = [
        (b"key-%07d" % i, values[i % 64]) for i in range(240_000)
    ]
    # Later records of earlier keys: new values, and tombstones.
    for i in rng.sample(range(240_000), 20_000):
        records.append((b"key-%07d" % i, None if i % 4 == 0 else b"updated-%d" % i))
    log = manager.get_or_create("big", 0, config, now_ms=NOW)
    cleaner = LogCleaner(manager, CleanerConfig(dedupe_buffer_size=buffer), dict)

    async def run() -> tuple[int, int, list[int]]:
        worker = await cleaner._start_worker()
        try:
            # An idle worker's size: a pass over a small log loads everything a pass uses.
            ltc = cleaner.grab_filthiest(NOW)
            assert ltc is not None and ltc.tp == ("small", 0)
            await cleaner._clean(worker, ltc, cleaner.task_for(ltc, NOW), lambda: NOW)
            cleaner.in_progress.discard(ltc.tp)
            idle = peak_rss(worker.pid)
            _write(log, records)
            log._roll(log.log_end_offset, NOW)
            _write(log, [(b"tail", b"x")])
            ends = []
            while (ltc := cleaner.grab_filthiest(NOW)) is not None:
                await cleaner._clean(worker, ltc, cleaner.task_for(ltc, NOW), lambda: NOW)
                cleaner.in_progress.discard(ltc.tp)
                ends.append(cleaner.checkpoints[ltc.tp])
                assert len(ends) < 20
            return idle, peak_rss(worker.pid), ends
        finally:
            cleaner.stop()
            await worker.wait()

    idle, peak, ends = asyncio.run(run())
    print(f"worker peak RSS {peak / MiB:.1f} MiB, idle {idle / MiB:.1f} MiB, passes end at {ends}")
    assert idle > 0 and peak > 0, "no /proc/<pid>/status VmHWM"
    capacity = map_capacity(buffer, 1, 0.9)
    assert len(ends) >= 3 and ends[0] <= capacity and ends[-1] == len(records)
    assert peak <= buffer + 64 * MiB
    assert peak - idle <= buffer + 8 * MiB, (idle / MiB, peak / MiB)
    # Kafka's result: each key's last record, at its offset; tombstones kept (with their
    # batch's delete horizon) until delete.retention.ms; the active segment as it was.
    offsets = list(range(len(records)))
    expected = _latest([(o, k, v) for o, (k, v) in zip(offsets, records, strict=True)])
    assert _records(log) == [*expected, (len(records), b"tail", b"x")]
    for segment in log.segments[:-1]:
        data = os.pread(segment.fd, segment.size, 0)
        for h in split_batches(data):
            if any(r.value is None for r in decode_records(data, h)):
                assert h.has_delete_horizon and h.base_timestamp == NOW + DAY
    manager.shutdown({})
