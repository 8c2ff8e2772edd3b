"""Bounded open segments, flushes that run elsewhere and complete later, and I/O errors that
take a log directory offline instead of the process."""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gregor.log import Log, LogConfig, LogManager
from gregor.log.checkpoint import DiskJob
from gregor.log.errors import KafkaStorageError
from gregor.log.open_files import OPEN_SEGMENTS
from gregor.log.segment import LogSegment
from gregor.wire.records import build_batch, split_batches

NOW = 1_700_000_000_000


def batch(n: int = 1, value: bytes = b"v") -> bytes:
    return build_batch([(b"k", value, [], NOW + i) for i in range(n)])


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.fixture
def cap_of_three() -> Iterator[None]:
    old = OPEN_SEGMENTS.cap
    OPEN_SEGMENTS.cap = 3
    try:
        yield
    finally:
        OPEN_SEGMENTS.cap = old


def test_open_segments_stay_under_the_cap_and_reopen_on_use(
    tmp_path: Path, cap_of_three: None
) -> None:
    before = open_fds()
    logs = [Log.open(tmp_path / f"t-{p}", LogConfig(), now_ms=NOW) for p in range(10)]
    for p, log in enumerate(logs):
        log.append_as_leader(batch(p + 1), leader_epoch=0, now_ms=NOW)
    assert len(open_fds() - before) <= 3
    for p, log in enumerate(logs):  # every log still reads and appends correctly
        result = log.read(0, max_bytes=1 << 20, max_offset=100, min_one_batch=True)
        (header,) = split_batches(os.pread(result.fd, result.size, result.position))
        assert header.record_count == p + 1
        log.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW)
        assert log.log_end_offset == p + 2
    assert len(open_fds() - before) <= 3
    for log in logs:
        log.close()
    assert open_fds() <= before


def test_cold_segments_write_their_index_entries(tmp_path: Path, cap_of_three: None) -> None:
    config = LogConfig(index_interval_bytes=0)
    log = Log.open(tmp_path / "t-0", config, now_ms=NOW)
    for _ in range(5):
        log.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW)
    segment = log.active_segment
    others = [Log.open(tmp_path / f"o-{p}", config, now_ms=NOW) for p in range(4)]
    assert not segment.offset_index.loaded  # evicted by the others
    entries = segment.offset_index.path.read_bytes()[: 4 * 8]
    assert [int.from_bytes(entries[i : i + 4], "big") for i in range(0, 32, 8)] == [1, 2, 3, 4]
    assert segment.offset_index.lookup(3)[0] == 3  # reloaded from the file
    for other in [log, *others]:
        other.close()


def test_flush_job_fsyncs_on_its_thread_and_then_advances_the_recovery_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fsync_threads = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        fsync_threads.append(threading.get_ident())
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=len(batch(3)) * 2), now_ms=NOW)
    for _ in range(3):  # two segments and a roll
        log.append_as_leader(batch(3), leader_epoch=0, now_ms=NOW)
    job = DiskJob()
    log.flush_if_due(NOW, job)  # the flush owed by the roll
    assert log.recovery_point == 0 and log.segments[0].pinned
    worker = threading.Thread(target=job.run)
    worker.start()
    worker.join()
    assert fsync_threads and set(fsync_threads) == {worker.ident}
    assert log.recovery_point == 0
    assert job.finish() is None
    assert log.recovery_point == 6 and not log.segments[0].pinned


def test_truncation_during_a_flush_keeps_the_recovery_point(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(), now_ms=NOW)
    log.append_as_leader(batch(3), leader_epoch=0, now_ms=NOW)
    log.append_as_leader(batch(3), leader_epoch=0, now_ms=NOW)
    job = DiskJob()
    log.flush(job=job)
    log.truncate_to(3)
    log.append_as_leader(batch(3), leader_epoch=0, now_ms=NOW)  # unflushed, same offsets
    job.run()
    job.finish()
    assert log.recovery_point == 0


def test_closing_a_pinned_segment_waits_for_its_fsync(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(), now_ms=NOW)
    log.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW)
    segment = log.active_segment
    job = DiskJob()
    log.flush(job=job)
    segment.close_fd()
    fd = segment._fd
    assert fd >= 0  # still open: the fsync below uses it
    job.run()
    assert job.error is None
    job.finish()
    assert segment._fd == -1 and segment.fd == -1


def test_flush_messages_is_queued_for_the_managers_flusher(tmp_path: Path) -> None:
    woken = []
    m = LogManager([tmp_path], {})
    m.startup(NOW)
    m.wake_flusher = lambda: woken.append(True)
    log = m.get_or_create("t", 0, LogConfig(flush_interval_messages=2))
    log.append_as_leader(batch(2), leader_epoch=0, now_ms=NOW)
    assert woken and log.recovery_point == 0
    jobs = m.prepare_flush(NOW)
    for job in jobs.values():
        job.run()
    m.finish_jobs(jobs)
    assert log.recovery_point == 2
    m.shutdown({})


def test_io_error_takes_the_directory_offline(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    m = LogManager(dirs, {})
    m.startup(NOW)
    broken = m.get_or_create("t", 0, LogConfig())
    healthy = m.get_or_create("t", 1, LogConfig())
    sibling = m.get_or_create("t", 2, LogConfig())
    assert m.log_dir_of("t", 0) == m.log_dir_of("t", 2) == dirs[0]
    healthy.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW)
    segment: LogSegment = broken.active_segment
    segment._on_io_error(OSError(errno.ENOSPC, "No space left on device"))
    assert m.offline_dirs == {dirs[0]} and m.is_offline("t", 2)
    for log in (broken, sibling):
        with pytest.raises(KafkaStorageError):
            log.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW)
        with pytest.raises(KafkaStorageError):
            log.read(0, max_bytes=100, max_offset=1, min_one_batch=True)
    m.get_or_create("t", 4, LogConfig())  # new partitions go to the live directory
    assert m.log_dir_of("t", 4) == dirs[1]
    healthy.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW)
    m.shutdown({})
    assert not (dirs[0] / ".kafka_cleanshutdown").exists()
    assert (dirs[1] / ".kafka_cleanshutdown").exists()


def test_a_cancelled_flush_job_leaves_its_fsyncs_owed(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(), now_ms=NOW)
    log.append_as_leader(batch(3), leader_epoch=0, now_ms=NOW)
    job = DiskJob()
    log.flush(job=job)
    assert job.finish() is None  # never ran (the broker shut down first)
    assert log.recovery_point == 0 and log.active_segment.unflushed
    log.flush()
    assert log.recovery_point == 3 and not log.active_segment.unflushed
