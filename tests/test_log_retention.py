"""Retention by time and size, DeleteRecords, delayed file deletion."""

import os
from pathlib import Path

import pytest

from gregor.log import Log, LogConfig
from gregor.log.errors import OffsetOutOfRangeError
from gregor.wire.records import build_batch

NOW = 1_700_000_000_000
HOUR = 3_600_000


def batch(ts: int) -> bytes:
    return build_batch([(b"k", b"v" * 20, [], ts), (b"k", b"w" * 20, [], ts)])


SIZE = len(batch(0))


def filled(tmp_path: Path, timestamps: list[int], **cfg: object) -> Log:
    """One two-record batch per timestamp, two batches per segment."""
    cfg.setdefault("segment_bytes", SIZE * 2)
    log = Log.open(tmp_path / "t-0", LogConfig(**cfg), now_ms=NOW)
    for ts in timestamps:
        log.append_as_leader(batch(ts), leader_epoch=0, now_ms=NOW)
    return log


def bases(log: Log) -> list[int]:
    return [s.base_offset for s in log.segments]


def test_retention_by_time_deletes_old_segments(tmp_path: Path) -> None:
    ts = [NOW - 10 * HOUR, NOW - 9 * HOUR, NOW - 5 * HOUR, NOW - 1 * HOUR, NOW]
    log = filled(tmp_path, ts, retention_ms=6 * HOUR)
    assert bases(log) == [0, 4, 8]
    assert log.enforce_retention(NOW) == 1
    assert bases(log) == [4, 8]
    assert log.log_start_offset == 4
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, max_bytes=100, max_offset=100, min_one_batch=True)
    # segment 4 holds a batch 1h old: its max timestamp keeps it
    assert log.enforce_retention(NOW) == 0


def test_active_segment_deleted_only_after_roll_when_all_data_expired(tmp_path: Path) -> None:
    old = NOW - 100 * HOUR
    log = filled(tmp_path, [old, old, old], retention_ms=HOUR)
    assert bases(log) == [0, 4]
    assert log.enforce_retention(NOW) == 2
    assert bases(log) == [6] and log.active_segment.size == 0
    assert (log.log_start_offset, log.log_end_offset) == (6, 6)
    assert log.enforce_retention(NOW) == 0  # an empty active segment stays
    assert log.append_as_leader(batch(NOW), leader_epoch=0, now_ms=NOW).first_offset == 6


def test_retention_by_size(tmp_path: Path) -> None:
    log = filled(tmp_path, [NOW] * 7, retention_bytes=SIZE * 3)
    assert bases(log) == [0, 4, 8, 12]
    assert log.size_bytes == SIZE * 7
    assert log.enforce_retention(NOW) == 2
    assert bases(log) == [8, 12] and log.size_bytes == SIZE * 3
    assert log.log_start_offset == 8


def test_retention_never_passes_high_watermark(tmp_path: Path) -> None:
    old = NOW - 100 * HOUR
    log = filled(tmp_path, [old] * 5, retention_ms=HOUR)
    assert log.enforce_retention(NOW, high_watermark=5) == 1
    assert bases(log) == [4, 8]


def test_compact_policy_skips_time_and_size_retention(tmp_path: Path) -> None:
    old = NOW - 100 * HOUR
    log = filled(
        tmp_path, [old] * 5, retention_ms=HOUR, retention_bytes=1, cleanup_policy="compact"
    )
    assert log.enforce_retention(NOW) == 0


def test_unlimited_retention_keeps_everything(tmp_path: Path) -> None:
    log = filled(tmp_path, [0] * 5, retention_ms=-1)
    assert log.enforce_retention(NOW) == 0 and bases(log) == [0, 4, 8]


def test_advance_log_start_offset_deletes_whole_segments_below(tmp_path: Path) -> None:
    log = filled(tmp_path, [NOW] * 5)
    log.advance_log_start_offset(5)
    assert log.log_start_offset == 5 and bases(log) == [4, 8]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(4, max_bytes=100, max_offset=100, min_one_batch=True)
    # reading at the log start returns the batch that contains it
    result = log.read(5, max_bytes=1 << 20, max_offset=100, min_one_batch=True)
    assert result.first_offset == 4 and result.log_start_offset == 5
    log.advance_log_start_offset(3)  # never moves backwards
    assert log.log_start_offset == 5
    with pytest.raises(OffsetOutOfRangeError):
        log.advance_log_start_offset(11)
    log.advance_log_start_offset(10)
    assert bases(log) == [8] and log.log_start_offset == 10


def test_deleted_segments_keep_fd_until_delay_passes(tmp_path: Path) -> None:
    old = NOW - 100 * HOUR
    log = filled(tmp_path, [old, old, NOW], retention_ms=HOUR, file_delete_delay_ms=60_000)
    held = log.read(0, max_bytes=1 << 20, max_offset=100, min_one_batch=True)
    doomed = log.segments[0]
    expected = os.pread(held.fd, held.size, held.position)
    assert log.enforce_retention(NOW) == 1
    names = {p.name for p in log.directory.iterdir()}
    assert "00000000000000000000.log.deleted" in names
    assert "00000000000000000000.log" not in names
    # a response still being sent can read the region
    assert os.pread(held.fd, held.size, held.position) == expected
    assert log.delete_pending_segments(NOW + 59_999) == 0
    assert log.delete_pending_segments(NOW + 60_000) == 1
    names = {p.name for p in log.directory.iterdir()}
    assert not any(n.endswith(".deleted") for n in names)
    assert doomed.fd == -1 and not log.pending_deletes


def test_truncation_schedules_segment_deletion(tmp_path: Path) -> None:
    log = filled(tmp_path, [NOW] * 5, file_delete_delay_ms=0)
    log.truncate_to(3)
    assert bases(log) == [0] and len(log.pending_deletes) == 2
    assert log.delete_pending_segments(NOW) == 2
    assert sorted(p.name for p in log.directory.glob("*.log")) == ["00000000000000000000.log"]


def test_delete_removes_directory(tmp_path: Path) -> None:
    log = filled(tmp_path, [NOW] * 3)
    log.delete()
    assert not (tmp_path / "t-0").exists()
