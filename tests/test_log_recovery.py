"""Opening a log after a crash or a clean shutdown: torn tails, corrupt or missing indexes,
leftover files."""

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gregor.log import Log, LogConfig
from gregor.wire.records import build_batch, split_batches

NOW = 1_700_000_000_000


def batch(n: int = 1, ts: int = NOW, **kw: object) -> bytes:
    return build_batch([(b"k", b"value", [], ts + i) for i in range(n)], **kw)


def crash(log: Log) -> None:
    """Drop the log as a kill -9 would: no trimming, no snapshot, no flush."""
    for segment in log.segments:
        segment.close_fd()


def reopen(log: Log, *, clean: bool, recovery_point: int = 0) -> Log:
    return Log.open(
        log.directory, log.config, recovery_point=recovery_point, clean_shutdown=clean, now_ms=NOW
    )


def all_offsets(log: Log) -> list[int]:
    offsets = []
    position = log.log_start_offset
    while position < log.log_end_offset:
        result = log.read(position, max_bytes=1 << 20, max_offset=1 << 62, min_one_batch=True)
        data = os.pread(result.fd, result.size, result.position)
        headers = split_batches(data)
        offsets += [h.base_offset for h in headers]
        position = headers[-1].next_offset
    return offsets


def filled(tmp_path: Path, batches: int = 10, **cfg: object) -> Log:
    log = Log.open(tmp_path / "t-0", LogConfig(**cfg), now_ms=NOW)
    for i in range(batches):
        log.append_as_leader(batch(2, ts=NOW + i), leader_epoch=0, now_ms=NOW)
    return log


def test_torn_tail_is_truncated_to_last_good_batch(tmp_path: Path) -> None:
    log = filled(tmp_path)
    path = log.active_segment.log_path
    good_size = path.stat().st_size
    crash(log)
    with open(path, "ab") as f:
        f.write(batch(3)[:40])
    log = reopen(log, clean=False)
    assert log.log_end_offset == 20
    assert path.stat().st_size == good_size
    assert all_offsets(log) == list(range(0, 20, 2))
    assert log.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW).first_offset == 20


def test_corrupt_last_batch_is_dropped(tmp_path: Path) -> None:
    log = filled(tmp_path)
    path = log.active_segment.log_path
    size = path.stat().st_size
    crash(log)
    with open(path, "r+b") as f:
        f.seek(size - 5)
        f.write(b"\xff\xff\xff\xff\xff")
    log = reopen(log, clean=False)
    assert log.log_end_offset == 18
    assert all_offsets(log) == list(range(0, 18, 2))


def test_garbage_tail_of_zeros_is_truncated(tmp_path: Path) -> None:
    log = filled(tmp_path)
    path = log.active_segment.log_path
    crash(log)
    with open(path, "ab") as f:
        f.write(bytes(4096))
    log = reopen(log, clean=False)
    assert log.log_end_offset == 20


def test_corruption_in_older_segment_drops_later_segments(tmp_path: Path) -> None:
    size = len(batch(2))
    log = filled(tmp_path, segment_bytes=size * 3)
    assert [s.base_offset for s in log.segments] == [0, 6, 12, 18]
    second = log.segments[1].log_path
    crash(log)
    with open(second, "r+b") as f:
        f.seek(size + 70)
        f.write(b"\x00\x01\x02")
    log = reopen(log, clean=False)
    assert log.log_end_offset == 8
    assert [s.base_offset for s in log.segments] == [0, 6]
    assert not (tmp_path / "t-0" / "00000000000000000012.log").exists()
    assert log.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW).first_offset == 8


def test_crash_without_checkpoint_recovers_every_segment(tmp_path: Path) -> None:
    size = len(batch(2))
    log = filled(tmp_path, segment_bytes=size * 3, index_interval_bytes=0)
    crash(log)
    # An active segment's index that had entries written is left preallocated with zeros
    # by a crash (this one has none yet: it is sized as if it had).
    active_index = tmp_path / "t-0" / "00000000000000000018.index"
    os.truncate(active_index, LogConfig().segment_index_bytes)
    log = reopen(log, clean=False, recovery_point=0)
    assert log.log_end_offset == 20
    assert log.recovery_point == 0
    assert all_offsets(log) == list(range(0, 20, 2))
    assert log.active_segment.offset_index.entries == 0  # one batch: no entry yet
    assert log.segments[0].offset_index.entries == 2
    assert log.offset_for_timestamp(NOW + 7) == (13, NOW + 7)


def test_missing_index_files_are_rebuilt_after_clean_shutdown(tmp_path: Path) -> None:
    size = len(batch(2))
    log = filled(tmp_path, segment_bytes=size * 4, index_interval_bytes=0)
    first_index = log.segments[0].offset_index.path
    first_time_index = log.segments[0].time_index.path
    expected_index = first_index.read_bytes()
    expected_time_index = first_time_index.read_bytes()
    log.flush()
    log.close()
    first_index.unlink()
    first_time_index.unlink()
    log = reopen(log, clean=True)
    assert first_index.read_bytes() == expected_index
    assert first_time_index.read_bytes() == expected_time_index
    assert all_offsets(log) == list(range(0, 20, 2))
    assert log.recovery_point == 20


def test_corrupt_index_is_rebuilt(tmp_path: Path) -> None:
    log = filled(tmp_path, index_interval_bytes=0)
    log.close()
    index = tmp_path / "t-0" / "00000000000000000000.index"
    expected = index.read_bytes()
    index.write_bytes(b"\x00\x00\x00\x09\x00\x00\x00\x10" * 3 + b"\x01\x02")
    log = reopen(log, clean=True)
    for offset in range(20):
        result = log.read(offset, max_bytes=1, max_offset=100, min_one_batch=True)
        (header,) = split_batches(os.pread(result.fd, result.size, result.position))
        assert header.base_offset == offset - offset % 2
    log.close()
    assert index.read_bytes() == expected


def test_clean_reopen_keeps_state(tmp_path: Path) -> None:
    log = filled(tmp_path)
    log.flush()
    log.close()
    log = reopen(log, clean=True)
    assert (log.log_end_offset, log.recovery_point) == (20, 20)
    assert log.max_timestamp() == (NOW + 10, 19)


def test_leftover_and_orphan_files_are_removed(tmp_path: Path) -> None:
    log = filled(tmp_path, batches=2)
    log.close()
    d = tmp_path / "t-0"
    leftovers = [
        "00000000000000000000.log.deleted",
        "00000000000000000005.log.cleaned",
        # an index renamed `.swap` without its log: a swap that had not begun (a `.log.swap`
        # is completed instead, tests/test_log_cleaner.py)
        "00000000000000000005.index.swap",
        "00000000000000000099.index",
        "00000000000000000099.timeindex",
    ]
    for name in leftovers:
        (d / name).write_bytes(b"junk")
    log = reopen(log, clean=True)
    names = {p.name for p in d.iterdir()}
    assert not names & set(leftovers)
    assert log.log_end_offset == 4


def test_log_start_offset_beyond_recovered_end_restarts_log(tmp_path: Path) -> None:
    log = filled(tmp_path, batches=2)
    crash(log)
    log = Log.open(log.directory, log.config, log_start_offset=50, now_ms=NOW)
    assert (log.log_start_offset, log.log_end_offset) == (50, 50)


def test_empty_directory_opens_at_log_start_offset(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "x-3", LogConfig(), log_start_offset=7, now_ms=NOW)
    assert (log.log_start_offset, log.log_end_offset) == (7, 7)
    assert (tmp_path / "x-3" / "00000000000000000007.log").exists()


@pytest.mark.parametrize("clean", [False, True])
def test_a_new_directory_opens_as_an_existing_empty_one_does(tmp_path: Path, clean: bool) -> None:
    """A directory Log.open makes skips the directory reads of loading: the same log."""
    (tmp_path / "old-0").mkdir()
    opened = [
        Log.open(
            tmp_path / name,
            LogConfig(),
            recovery_point=3,
            log_start_offset=7,
            clean_shutdown=clean,
            now_ms=NOW,
        )
        for name in ("new-0", "old-0")
    ]
    new, old = (
        (
            log.log_start_offset,
            log.log_end_offset,
            log.recovery_point,
            log.producer_state.map_end_offset,
            [(s.base_offset, s.active) for s in log.segments],
            sorted(p.name for p in log.directory.iterdir()),
        )
        for log in opened
    )
    assert new == old
    assert new[:4] == (7, 7, 7 if clean else 3, 7)
    for log in opened:
        log.append_as_leader(batch(2), leader_epoch=0, now_ms=NOW)
        assert log.log_end_offset == 9


@settings(max_examples=60, deadline=None)
@given(cut=st.integers(0, 10_000), flip=st.one_of(st.none(), st.integers(0, 10_000)))
def test_any_torn_or_flipped_tail_recovers_to_a_batch_boundary(cut: int, flip: int | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        log = filled(Path(tmp), batches=12)
        path = log.active_segment.log_path
        ends = [0]
        for h in log.active_segment.iter_headers():
            ends.append(h.position + h.size)
        crash(log)
        data = bytearray(path.read_bytes())
        cut %= len(data) + 1
        if flip is not None:
            # base offset and leader epoch are outside the CRC: corruption there is undetectable
            in_batch = flip % len(data) - max(e for e in ends if e <= flip % len(data))
            assume(not (0 <= in_batch < 8 or 12 <= in_batch < 16))
            data[flip % len(data)] ^= 0x40
        path.write_bytes(bytes(data[:cut]))
        log = reopen(log, clean=False)
        good = max(e for e in ends if e <= cut)
        if flip is not None and flip % len(data) < good:
            good = max(e for e in ends if e <= flip % len(data))
        assert log.active_segment.size == good
        assert log.log_end_offset == 2 * ends.index(good)
        assert all_offsets(log) == list(range(0, log.log_end_offset, 2))


def test_batch_with_out_of_range_base_offset_is_truncated(tmp_path: Path) -> None:
    log = filled(tmp_path, batches=3)
    path = log.active_segment.log_path
    crash(log)
    data = bytearray(path.read_bytes())
    data[0] ^= 0x40  # base offset is not covered by the CRC
    path.write_bytes(bytes(data))
    log = reopen(log, clean=False)
    assert (log.log_end_offset, log.active_segment.size) == (0, 0)
