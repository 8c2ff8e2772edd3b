"""The log cleaner's pass, swap and crash recovery, in process (no broker, no worker): a real
LogManager and Log on disk, cleaned with log.cleaner.clean_log and swapped in by the
LogCleaner as the broker does."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from gregor.log import LogConfig
from gregor.log.cleaner import CLEANED_SUFFIX, SegmentFile, clean_log, group_segments
from gregor.log.cleaner_manager import CleanerConfig, LogCleaner
from gregor.log.log import Log
from gregor.log.manager import LogManager
from gregor.log.offset_map import map_capacity
from gregor.log.txn_index import AbortedTxn, build_marker_batch
from gregor.wire.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD
from gregor.wire.records import (
    InvalidRecordError,
    build_batch,
    decode_records,
    split_batches,
    validate_batch,
)

NOW = 1_700_000_000_000
DAY = 86_400_000


def compact_config(**overrides: object) -> LogConfig:
    settings: dict[str, object] = {
        "cleanup_policy": "compact",
        "segment_bytes": 1024,
        "min_cleanable_dirty_ratio": 0.01,
    }
    settings.update(overrides)
    return LogConfig(**settings)  # type: ignore[arg-type]


class Harness:
    def __init__(self, tmp_path: Path, config: LogConfig, **cleaner: object) -> None:
        self.dir = tmp_path / "logs"
        self.manager = LogManager([self.dir], {})
        self.manager.startup(NOW)
        self.log = self.manager.get_or_create("t", 0, config, now_ms=NOW)
        self.cleaner = LogCleaner(self.manager, CleanerConfig(**cleaner), dict)  # type: ignore[arg-type]

    def produce(
        self,
        records: list[tuple[bytes | None, bytes | None]],
        *,
        compression: int = NONE,
        producer: tuple[int, int, int] = (-1, -1, -1),
        ts: int = NOW,
    ) -> None:
        pid, epoch, seq = producer
        batch = build_batch(
            [(k, v, [], ts) for k, v in records],
            compression=compression,
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
        )
        self.log.append_as_leader(batch, leader_epoch=0, now_ms=NOW)

    def roll(self) -> None:
        self.log._roll(self.log.log_end_offset, NOW)

    def clean(self, now_ms: int = NOW) -> int:
        """One pass; returns the groups swapped in (-1 if no log was dirty enough)."""
        ltc = self.cleaner.grab_filthiest(now_ms)
        if ltc is None:
            return -1
        result = clean_log(self.cleaner.task_for(ltc, now_ms))
        self.cleaner.in_progress.discard(ltc.tp)
        return self.cleaner.swap_in(ltc, result, now_ms)

    def batches(self, log: Log | None = None) -> list:
        """(header, records) of every batch of the log, each batch's CRC checked."""
        out = []
        for segment in (log or self.log).segments:
            data = os.pread(segment.fd, segment.size, 0)
            for h in split_batches(data):
                try:
                    validate_batch(data, h)
                except InvalidRecordError:
                    pass  # a cleaned batch's record count is below its offset range
                out.append((h, decode_records(data, h)))
        return out

    def records(self, log: Log | None = None) -> list[tuple[int, bytes | None, bytes | None]]:
        return [(r.offset, r.key, r.value) for _, rs in self.batches(log) for r in rs]

    def reopen(self) -> Log:
        self.manager.shutdown({})
        self.manager = LogManager([self.dir], {})
        self.manager.startup(NOW, config_for=lambda _t: self.log.config)
        self.log = self.manager.get("t", 0)
        return self.log


def latest(records: list[tuple[int, bytes | None, bytes | None]]) -> dict:
    result = {}
    for _, key, value in records:
        result[key] = value
    return result


@pytest.mark.parametrize("codec", [NONE, GZIP, SNAPPY, LZ4, ZSTD])
def test_clean_keeps_latest_per_key_with_offsets_and_codec(tmp_path: Path, codec: int) -> None:
    h = Harness(tmp_path, compact_config())
    for round_ in range(6):
        h.produce([(b"k%d" % i, b"v%d-%d" % (i, round_)) for i in range(5)], compression=codec)
    h.produce([(b"other", b"x")], compression=codec)  # ends the dirty section's last batch
    before = h.records()
    h.roll()
    h.produce([(b"k0", b"active")])
    assert h.clean() >= 1
    after = h.records()
    # every key's latest value, in offset order, at its original offset
    assert after[-1] == (31, b"k0", b"active")
    cleaned = after[:-1]
    assert cleaned == [r for r in before if r[0] >= 25]
    offsets = [r[0] for r in after]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    for header, _ in h.batches()[:-1]:
        assert header.compression == (codec if header.record_count else NONE)
    assert not list(h.log.directory.glob(f"*{CLEANED_SUFFIX}"))
    assert h.clean() == -1  # nothing dirty left


def test_tombstones_stay_until_the_delete_horizon(tmp_path: Path) -> None:
    h = Harness(tmp_path, compact_config(delete_retention_ms=DAY))
    h.produce([(b"a", b"1"), (b"b", b"1")])
    h.produce([(b"a", None)])
    h.roll()
    h.produce([(b"c", b"1")])
    h.clean(NOW)
    assert latest(h.records()) == {b"a": None, b"b": b"1", b"c": b"1"}
    tomb = [hd for hd, rs in h.batches() if any(r.value is None for r in rs)]
    assert tomb and tomb[0].has_delete_horizon and tomb[0].base_timestamp == NOW + DAY
    # the tombstone record keeps its own timestamp
    assert [r.timestamp for _, rs in h.batches() for r in rs if r.value is None] == [NOW]
    # Before the horizon a pass keeps it, after it the tombstone goes.
    h.produce([(b"d", b"1")])
    h.roll()
    h.produce([(b"e", b"1")])
    h.clean(NOW + DAY - 1)
    assert b"a" in latest(h.records())
    h.produce([(b"f", b"1")])
    h.roll()
    h.produce([(b"g", b"1")])
    h.clean(NOW + DAY)
    assert b"a" not in latest(h.records())
    assert latest(h.records())[b"b"] == b"1"


def test_idempotent_producer_state_survives_cleaning_and_restart(tmp_path: Path) -> None:
    h = Harness(tmp_path, compact_config())
    h.produce([(b"a", b"1")], producer=(7, 0, 0))
    h.produce([(b"a", b"2")], producer=(8, 0, 0))  # supersedes producer 7's only record
    h.roll()
    h.produce([(b"z", b"1")])
    h.clean()
    batches = h.batches()
    empty = [hd for hd, rs in batches if not rs]
    assert len(empty) == 1 and (empty[0].producer_id, empty[0].base_sequence) == (7, 0)
    log = h.reopen()
    assert log.producer_state.producers[7].last_seq == 0
    retry = build_batch([(b"a", b"1", [], NOW)], producer_id=7, producer_epoch=0, base_sequence=0)
    assert log.append_as_leader(retry, leader_epoch=0, now_ms=NOW).duplicate


def test_full_offset_map_cleans_in_several_passes(tmp_path: Path) -> None:
    h = Harness(tmp_path, compact_config(segment_bytes=400), dedupe_buffer_size=24 * 5)
    assert map_capacity(24 * 5, 1, 0.9) == 4
    for round_ in range(4):
        for i in range(10):
            h.produce([(b"k%d" % i, b"%d" % round_)])
    expected = latest(h.records())
    h.roll()
    h.produce([(b"tail", b"x")])
    first_end = None
    for _ in range(30):
        ltc = h.cleaner.grab_filthiest(NOW)
        if ltc is None:
            break
        result = clean_log(h.cleaner.task_for(ltc, NOW))
        h.cleaner.in_progress.discard(ltc.tp)
        h.cleaner.swap_in(ltc, result, NOW)
        first_end = first_end or result.end_offset
    assert first_end is not None and first_end < 40  # the map filled before the section end
    records = h.records()
    assert {k: v for k, v in latest(records).items() if k != b"tail"} == expected
    assert len(records) == 11


def test_min_compaction_lag_keeps_young_segments_dirty(tmp_path: Path) -> None:
    h = Harness(tmp_path, compact_config(min_compaction_lag_ms=DAY))
    h.produce([(b"a", b"1")], ts=NOW)
    h.produce([(b"a", b"2")], ts=NOW)
    h.roll()
    h.produce([(b"b", b"1")])
    assert h.clean(NOW + DAY - 1) == -1
    assert h.clean(NOW + DAY + 1) == 1
    assert h.records() == [(1, b"a", b"2"), (2, b"b", b"1")]


def test_truncation_during_a_pass_drops_its_output(tmp_path: Path) -> None:
    h = Harness(tmp_path, compact_config())
    for i in range(4):
        h.produce([(b"a", b"%d" % i)])
    h.roll()
    h.produce([(b"b", b"1")])
    ltc = h.cleaner.grab_filthiest(NOW)
    assert ltc is not None
    result = clean_log(h.cleaner.task_for(ltc, NOW))
    h.log.truncate_to(4)
    assert h.cleaner.swap_in(ltc, result, NOW) == 0
    assert [r[0] for r in h.records()] == [0, 1, 2, 3]
    assert not list(h.log.directory.glob(f"*{CLEANED_SUFFIX}"))


def _cleaned_but_not_swapped(h: Harness) -> tuple:
    for i in range(6):
        h.produce([(b"a", b"%d" % i), (b"b%d" % i, b"x")])
        if i % 2:
            h.roll()
    h.produce([(b"tail", b"x")])
    ltc = h.cleaner.grab_filthiest(NOW)
    assert ltc is not None
    return ltc, clean_log(h.cleaner.task_for(ltc, NOW))


@pytest.mark.parametrize("stage", ["cleaned", "swap", "deleted-some", "swapped-log"])
def test_reopen_after_a_crash_at_any_swap_step(tmp_path: Path, stage: str) -> None:
    h = Harness(tmp_path, compact_config(segment_bytes=10_000))
    ltc, result = _cleaned_but_not_swapped(h)
    (bases,) = result.groups
    assert len(bases) == 3
    expected_uncleaned = h.records()
    d = h.log.directory
    stem = d / f"{bases[0]:020d}"
    suffixes = (".index", ".timeindex", ".log")
    if stage != "cleaned":
        for s in suffixes:
            os.rename(f"{stem}{s}.cleaned", f"{stem}{s}.swap")
    if stage in ("deleted-some", "swapped-log"):
        for s in suffixes:
            os.rename(f"{stem}{s}", f"{stem}{s}.deleted")
    if stage == "swapped-log":
        for s in suffixes[:2]:
            os.rename(f"{stem}{s}.swap", f"{stem}{s}")
    log = h.reopen()
    records = h.records(log)
    if stage == "cleaned":
        assert records == expected_uncleaned
    else:
        assert latest(records) == latest(expected_uncleaned)
        assert len(records) == len(latest(expected_uncleaned))
        assert log.segments[0].base_offset == 0 and len(log.segments) == 2
    assert not [p for p in d.iterdir() if p.name.endswith((".swap", ".cleaned", ".deleted"))]
    offsets = [r[0] for r in records]
    assert offsets == sorted(offsets)


def test_group_segments_respects_size_and_index_bounds() -> None:
    segs = [SegmentFile(i * 10, 100, 8, 12, 0) for i in range(5)]
    assert [len(g) for g in group_segments(segs, 250, 1000, 50)] == [2, 2, 1]
    assert [len(g) for g in group_segments(segs, 1000, 24, 50)] == [2, 2, 1]
    assert [len(g) for g in group_segments(segs, 1000, 1000, 50)] == [5]


def test_io_is_throttled(tmp_path: Path) -> None:
    h = Harness(tmp_path, compact_config(segment_bytes=20_000))
    for i in range(400):
        h.produce([(b"k%d" % (i % 50), b"v" * 200)])
    h.roll()
    h.produce([(b"tail", b"x")])
    ltc = h.cleaner.grab_filthiest(NOW)
    assert ltc is not None
    task = dataclasses.replace(h.cleaner.task_for(ltc, NOW), io_bytes_per_second=400_000)
    result = clean_log(task)
    moved = result.dirty_bytes + result.bytes_read + result.bytes_written
    # Throttling can only add time, so this lower bound holds on any machine.
    assert moved > 200_000 and result.elapsed_s >= 0.9 * moved / 400_000 - 0.02


def test_max_compaction_lag_forces_a_pass_below_the_dirty_ratio(tmp_path: Path) -> None:
    config = compact_config(min_cleanable_dirty_ratio=0.5, max_compaction_lag_ms=DAY)
    h = Harness(tmp_path, config)
    h.produce([(b"k%d" % i, b"x" * 50) for i in range(40)], ts=NOW)  # the clean section
    h.roll()
    h.produce([(b"b", b"1")])
    assert h.clean(NOW) == 1
    h.produce([(b"a", b"1")], ts=NOW)
    h.produce([(b"a", b"2")], ts=NOW)
    h.roll()
    h.produce([(b"c", b"1")])
    assert h.clean(NOW + DAY - 1) == -1  # dirty ratio about 0.1
    assert h.clean(NOW + DAY + 1) >= 1
    assert [r for r in h.records() if r[1] == b"a"] == [(42, b"a", b"2")]
    # and a compacted log's active segment rolls after max.compaction.lag.ms
    h.log.maybe_roll(NOW + DAY + 1)
    assert h.log.active_segment.size == 0


def test_a_follower_appends_the_cleaned_batches_as_they_are(tmp_path: Path) -> None:
    h = Harness(tmp_path, compact_config())
    h.produce([(b"a", b"1"), (b"b", b"1")], compression=LZ4, producer=(7, 0, 0))
    h.produce([(b"a", b"2"), (b"b", None)], producer=(8, 0, 0))
    h.produce([(b"a", b"3")], producer=(8, 0, 2))
    h.roll()
    h.produce([(b"z", b"1")])
    h.clean()
    data = b"".join(os.pread(s.fd, s.size, 0) for s in h.log.segments)
    follower = Log.open(tmp_path / "follower" / "t-0", compact_config(), now_ms=NOW)
    follower.append_as_follower(data)
    assert h.records(follower) == h.records()
    assert follower.log_end_offset == h.log.log_end_offset
    assert follower.producer_state.producers[7].last_seq == 1
    assert follower.producer_state.producers[8].last_seq == 2


def _transactions(h: Harness) -> None:
    """An aborted transaction in the first segment, a committed one in the second."""
    for pid, commit in ((11, False), (12, True)):
        data = build_batch(
            [(b"k", b"%d" % pid, [], NOW)],
            producer_id=pid,
            producer_epoch=0,
            base_sequence=0,
            is_transactional=True,
        )
        h.log.append_as_leader(data, leader_epoch=0, now_ms=NOW)
        marker = build_marker_batch(pid, 0, commit, 0, NOW)
        h.log.append_as_leader(marker, leader_epoch=0, now_ms=NOW, origin_client=False)
        h.roll()
    h.produce([(b"k", b"plain")])
    h.roll()
    h.produce([(b"z", b"1")])


def test_markers_stay_with_the_batches_of_their_active_producers(tmp_path: Path) -> None:
    """Each producer's only data batch is its last (kept, emptied, for its sequence), so
    both markers met their transaction's batch: they stay, the abort indexed."""
    h = Harness(tmp_path, compact_config())
    _transactions(h)
    assert [t for s in h.log.segments for t in s.txn_index.entries] == [AbortedTxn(11, 0, 1, 2)]
    assert h.clean() >= 1
    assert [hd.is_control for hd, _ in h.batches()].count(True) == 2
    assert [t for s in h.log.segments for t in s.txn_index.entries] == [AbortedTxn(11, 0, 1, 2)]
    assert [r for r in h.records() if r[2] == b"11"] == []  # the aborted record
    log = h.reopen()
    assert [t for s in log.segments for t in s.txn_index.entries] == [AbortedTxn(11, 0, 1, 2)]
    assert log.collect_aborted_transactions(0, log.log_end_offset) == [AbortedTxn(11, 0, 1, 2)]


def test_a_swap_interrupted_by_a_crash_keeps_the_cleaned_txn_index(tmp_path: Path) -> None:
    h = Harness(tmp_path, compact_config())
    _transactions(h)
    ltc = h.cleaner.grab_filthiest(NOW)
    assert ltc is not None
    result = clean_log(h.cleaner.task_for(ltc, NOW))
    bases = result.groups[0]
    stem = h.log.directory / f"{bases[0]:020d}"
    for s in (".index", ".timeindex", ".txnindex", ".log"):
        os.rename(f"{stem}{s}.cleaned", f"{stem}{s}.swap")
    log = h.reopen()
    assert [t for s in log.segments for t in s.txn_index.entries] == [AbortedTxn(11, 0, 1, 2)]
