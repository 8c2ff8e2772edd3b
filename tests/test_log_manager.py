"""Checkpoint files and the LogManager lifecycle."""

import ctypes
import errno
import os
from pathlib import Path

import pytest

from gregor.log import LogConfig, LogManager, checkpoint
from gregor.log.checkpoint import RECOVERY_POINT_CHECKPOINT, read_checkpoint, write_checkpoint
from gregor.log.errors import KafkaStorageError
from gregor.log.manager import CLEAN_SHUTDOWN_FILE, parse_partition_dir
from gregor.wire.records import build_batch

NOW = 1_700_000_000_000


def batch(n: int = 1) -> bytes:
    return build_batch([(b"k", b"v", [], NOW)] * n)


def test_checkpoint_format_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "replication-offset-checkpoint"
    offsets = {("orders", 0): 42, ("my-topic.v2", 11): 7}
    write_checkpoint(path, offsets)
    assert path.read_text() == "0\n2\norders 0 42\nmy-topic.v2 11 7\n"
    assert read_checkpoint(path) == offsets
    assert not (tmp_path / "replication-offset-checkpoint.tmp").exists()
    assert read_checkpoint(tmp_path / "missing") == {}
    write_checkpoint(path, {})
    assert path.read_text() == "0\n0\n"


@pytest.mark.parametrize("text", ["1\n0\n", "0\n2\nt 0 1\n", "0\n1\nt zero 1\n", ""])
def test_malformed_checkpoint_is_storage_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "cp"
    path.write_text(text)
    with pytest.raises(KafkaStorageError):
        read_checkpoint(path)


def test_partition_dir_names_split_on_last_dash() -> None:
    assert parse_partition_dir("my-topic.with-dashes-12") == ("my-topic.with-dashes", 12)
    assert parse_partition_dir("__consumer_offsets-0") == ("__consumer_offsets", 0)
    assert parse_partition_dir("nodash") is None
    assert parse_partition_dir("topic-x") is None


def manager(dirs: list[Path], **props: str) -> LogManager:
    m = LogManager(dirs, props)
    m.startup(NOW)
    return m


def test_get_or_create_spreads_partitions_over_dirs(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    m = manager(dirs)
    for p in range(4):
        m.get_or_create("t", p, LogConfig())
    assert m.get("t", 9) is None
    assert [m.log_dir_of("t", p) for p in range(4)] == [dirs[0], dirs[1], dirs[0], dirs[1]]
    assert m.get_or_create("t", 0, LogConfig()) is m.get("t", 0)
    assert (dirs[1] / "t-1" / "00000000000000000000.log").exists()
    assert sorted(tp for tp, _ in m.all_logs()) == [("t", 0), ("t", 1), ("t", 2), ("t", 3)]


def test_shutdown_and_restart_with_clean_marker(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    m = manager([d])
    log = m.get_or_create("my-topic.v1-x", 3, LogConfig())
    log.append_as_leader(batch(5), leader_epoch=0, now_ms=NOW)
    other = m.get_or_create("plain", 0, LogConfig())
    other.append_as_leader(batch(2), leader_epoch=0, now_ms=NOW)
    m.shutdown({("my-topic.v1-x", 3): 4, ("plain", 0): 2})
    assert (d / CLEAN_SHUTDOWN_FILE).exists()
    assert read_checkpoint(d / "recovery-point-offset-checkpoint") == {
        ("my-topic.v1-x", 3): 5,
        ("plain", 0): 2,
    }
    assert read_checkpoint(d / "log-start-offset-checkpoint") == {
        ("my-topic.v1-x", 3): 0,
        ("plain", 0): 0,
    }

    m2 = manager([d])
    assert not (d / CLEAN_SHUTDOWN_FILE).exists()
    reopened = m2.get("my-topic.v1-x", 3)
    assert reopened is not None and reopened.log_end_offset == 5
    assert reopened.recovery_point == 5
    assert m2.read_high_watermarks() == {("my-topic.v1-x", 3): 4, ("plain", 0): 2}
    assert m2.get("plain", 0).log_end_offset == 2


class SyscallLog:
    """Records the fsyncs and syncfs calls made (the paths they name) and passes them on, or
    fails syncfs with ``syncfs_error``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, syncfs_error: int = 0) -> None:
        self.fsyncs: list[str] = []
        self.synced: list[str] = []
        self._libc = checkpoint._LIBC
        self._fsync = os.fsync
        self._syncfs_error = syncfs_error
        monkeypatch.setattr(os, "fsync", self._record_fsync)
        monkeypatch.setattr(checkpoint, "_LIBC", self)

    def _record_fsync(self, fd: int) -> None:
        self.fsyncs.append(os.readlink(f"/proc/self/fd/{fd}"))
        self._fsync(fd)

    def syncfs(self, fd: int) -> int:
        self.synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        if self._syncfs_error:
            ctypes.set_errno(self._syncfs_error)
            return -1
        return self._libc.syncfs(fd)


def test_shutdown_syncs_each_directory_once_not_each_partition(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Closing a thousand partitions with an fsync per file (segment, indexes, producer
    snapshot, leader epochs, directory) took 10 s and more on a loaded machine: a clean
    shutdown now syncs each log directory's filesystem once, and fsyncs only the per-directory
    checkpoint files and marker (each file and its directory), however many partitions."""
    dirs = [tmp_path / "a", tmp_path / "b"]
    m = manager(dirs)
    partitions = 200
    for p in range(partitions):
        log = m.get_or_create("t", p, LogConfig())
        log.append_as_leader(batch(p % 3 + 1), leader_epoch=p % 2, now_ms=NOW)
    calls = SyscallLog(monkeypatch)
    m.shutdown({("t", p): p % 3 + 1 for p in range(partitions)})
    assert sorted(calls.synced) == [str(d) for d in dirs]
    assert len(calls.fsyncs) == len(dirs) * 4 * 2  # 3 checkpoints and the marker, + dirs
    # ...all in the log directories themselves, none in a partition's.
    assert {Path(p) if Path(p) in dirs else Path(p).parent for p in calls.fsyncs} == set(dirs)

    m2 = manager(dirs)
    for d in dirs:
        assert not (d / CLEAN_SHUTDOWN_FILE).exists()  # consumed: the logs were not recovered
    for p in range(partitions):
        log = m2.get("t", p)
        assert log is not None and log.log_end_offset == log.recovery_point == p % 3 + 1
        assert log.leader_epochs.entries() == [(p % 2, 0)]
        assert log.producer_state.snapshot_offsets() == [p % 3 + 1]
    m2.shutdown({})


def test_a_failed_syncfs_leaves_the_directory_to_recovery(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If the directory's writes may not have reached the disk, neither the marker nor the
    advanced recovery points are written: the next start recovers from the old ones."""
    d = tmp_path / "logs"
    m = manager([d])
    log = m.get_or_create("t", 0, LogConfig())
    log.append_as_leader(batch(2), leader_epoch=0, now_ms=NOW)
    log.flush()
    m.checkpoint({("t", 0): 2})
    log.append_as_leader(batch(3), leader_epoch=0, now_ms=NOW)
    calls = SyscallLog(monkeypatch, syncfs_error=errno.EIO)
    m.shutdown({("t", 0): 5})
    assert calls.synced == [str(d)] and m.offline_dirs == {d}
    assert not (d / CLEAN_SHUTDOWN_FILE).exists()
    assert read_checkpoint(d / RECOVERY_POINT_CHECKPOINT) == {("t", 0): 2}
    monkeypatch.undo()

    recovered = manager([d]).get("t", 0)
    assert recovered is not None
    assert (recovered.recovery_point, recovered.log_end_offset) == (2, 5)


def test_restart_after_crash_recovers_from_checkpoint(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    m = manager([d])
    log = m.get_or_create("t", 0, LogConfig())
    log.append_as_leader(batch(3), leader_epoch=0, now_ms=NOW)
    log.flush()
    m.checkpoint({("t", 0): 3})
    log.append_as_leader(batch(2), leader_epoch=0, now_ms=NOW)
    seg = log.active_segment
    with open(seg.log_path, "ab") as f:
        f.write(b"\x00" * 30)  # torn write
    for s in log.segments:
        s.close_fd()
    for fd in m._lock_fds:  # the crashed process's locks die with it
        os.close(fd)
    m2 = manager([d])
    recovered = m2.get("t", 0)
    assert recovered.log_end_offset == 5
    assert recovered.recovery_point == 3


def test_directory_lock_prevents_second_manager(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    manager([d])
    with pytest.raises(KafkaStorageError):
        manager([d])


def test_delete_renames_then_removes_after_delay(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    m = manager([d], **{"log.segment.delete.delay.ms": "1000"})
    log = m.get_or_create("t-1", 0, LogConfig(file_delete_delay_ms=1000))
    log.append_as_leader(batch(), leader_epoch=0, now_ms=NOW)
    m.delete("t-1", 0)
    assert m.get("t-1", 0) is None
    (marked,) = [p for p in d.iterdir() if p.is_dir()]
    assert marked.name.startswith("t-1-0.") and marked.name.endswith("-delete")
    m.run_flush(NOW)
    assert marked.exists()
    m.run_flush(NOW + 1000)
    assert not marked.exists()


def test_shutdown_leaves_pending_deletions_to_the_next_start(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    m = manager([d], **{"log.segment.delete.delay.ms": "60000"})
    log = m.get_or_create("t-2", 0, LogConfig(file_delete_delay_ms=60000))
    log.append_as_leader(batch(), leader_epoch=0, now_ms=NOW)
    m.delete("t-2", 0)
    m.shutdown({})
    (marked,) = [p for p in d.iterdir() if p.is_dir()]
    assert marked.name.endswith("-delete")
    restarted = manager([d])
    assert not marked.exists()
    assert list(restarted.all_logs()) == []


def test_startup_removes_dirs_marked_for_deletion_and_skips_others(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    (d / "gone-0.0123abcd-delete").mkdir(parents=True)
    (d / "not a partition").mkdir()
    m = manager([d])
    assert not (d / "gone-0.0123abcd-delete").exists()
    assert (d / "not a partition").exists()
    assert list(m.all_logs()) == []  # future logs of moves: tests/test_log_future.py


def test_run_retention_and_flush(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    m = manager([d])
    size = len(batch())
    cfg = LogConfig(
        segment_bytes=size, retention_ms=1000, file_delete_delay_ms=0, flush_interval_ms=10
    )
    log = m.get_or_create("t", 0, cfg)
    for _ in range(3):
        log.append_as_leader(batch(), leader_epoch=0, now_ms=NOW)
    assert m.run_retention(NOW + 5000, {("t", 0): 1}) == [("t", 0)]
    assert log.log_start_offset == 1
    assert m.run_retention(NOW + 5000, {("t", 0): 1}) == []
    m.run_flush(NOW + 5000)
    assert log.recovery_point == 3
    assert not list(d.glob("t-0/*.deleted"))
