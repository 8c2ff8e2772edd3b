"""Leader epoch cache: assignment on append, end offsets, truncation, persistence."""

from pathlib import Path

from gregor.log import Log, LogConfig
from gregor.log.checkpoint import DiskJob
from gregor.log.leader_epoch import LEADER_EPOCH_CHECKPOINT, LeaderEpochCache
from gregor.log.manager import LogManager
from gregor.wire.records import build_batch

NOW = 1_700_000_000_000


def batch(n: int = 2, **kw: object) -> bytes:
    return build_batch([(None, b"v", [], NOW)] * n, **kw)


def test_assign_and_end_offsets(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path)
    assert cache.end_offset_for(3, 100) == (-1, -1)
    cache.assign(2, 10)
    cache.assign(2, 15)  # same epoch, later offset: no change
    cache.assign(4, 20)
    cache.assign(7, 35)
    assert cache.entries() == [(2, 10), (4, 20), (7, 35)]
    assert cache.end_offset_for(7, 50) == (7, 50)  # latest epoch: the log end
    assert cache.end_offset_for(4, 50) == (4, 35)
    assert cache.end_offset_for(5, 50) == (4, 35)  # unknown epoch: the largest below it
    assert cache.end_offset_for(1, 50) == (1, 10)  # before every epoch
    assert cache.end_offset_for(9, 50) == (-1, -1)
    assert cache.end_offset_for(-1, 50) == (-1, -1)
    assert (cache.epoch_for_offset(25), cache.epoch_for_offset(5)) == (4, -1)
    cache.assign(5, 20)  # conflicts with epochs >= 5 and starts >= 20
    assert cache.entries() == [(2, 10), (5, 20)]


def test_truncation_from_both_ends_and_file_format(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path)
    for epoch, start in [(0, 0), (1, 10), (2, 20), (3, 30)]:
        cache.assign(epoch, start)
    cache.truncate_from_end(25)
    assert cache.entries() == [(0, 0), (1, 10), (2, 20)]
    cache.truncate_from_start(15)
    assert cache.entries() == [(1, 15), (2, 20)]
    assert not (tmp_path / LEADER_EPOCH_CHECKPOINT).exists()  # the file lags the cache
    cache.write()
    assert (tmp_path / LEADER_EPOCH_CHECKPOINT).read_text() == "0\n2\n1 15\n2 20\n"
    assert LeaderEpochCache(tmp_path).entries() == [(1, 15), (2, 20)]


def test_log_records_epochs_on_leader_and_follower_appends(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(), now_ms=NOW)
    log.append_as_leader(batch(), leader_epoch=1, now_ms=NOW)
    log.append_as_leader(batch(), leader_epoch=1, now_ms=NOW)
    log.append_as_leader(batch(), leader_epoch=3, now_ms=NOW)
    assert log.leader_epochs.entries() == [(1, 0), (3, 4)]
    assert log.leader_epochs.latest_epoch == 3
    assert log.end_offset_for_epoch(1) == (1, 4)
    assert log.end_offset_for_epoch(3) == (3, 6)
    log.truncate_to(4)
    assert log.leader_epochs.entries() == [(1, 0)]
    log.append_as_follower(batch(base_offset=4, partition_leader_epoch=5))
    assert log.leader_epochs.entries() == [(1, 0), (5, 4)]
    log.advance_log_start_offset(2)
    assert log.leader_epochs.entries() == [(1, 2), (5, 4)]
    log.flush()
    log.close()
    reopened = Log.open(tmp_path / "t-0", LogConfig(), clean_shutdown=True, now_ms=NOW)
    assert reopened.leader_epochs.entries() == [(1, 2), (5, 4)]


def test_epochs_rebuilt_from_batches_when_checkpoint_lost(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(), now_ms=NOW)
    for epoch in (0, 0, 2, 2, 6):
        log.append_as_leader(batch(), leader_epoch=epoch, now_ms=NOW)
    for segment in log.segments:
        segment.close_fd()  # crash
    (tmp_path / "t-0" / LEADER_EPOCH_CHECKPOINT).unlink(missing_ok=True)
    log = Log.open(tmp_path / "t-0", LogConfig(), now_ms=NOW)
    assert log.leader_epochs.entries() == [(0, 0), (2, 4), (6, 8)]


def test_many_changes_are_written_once_on_a_job(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path)
    changes = []
    cache.on_change = lambda: changes.append(1)
    for epoch in range(1, 101):
        cache.assign(epoch, epoch * 10)
    assert len(changes) == 100 and not cache.path.exists()
    job = DiskJob()
    cache.add_write(job)
    cache.add_write(job)  # nothing changed since: nothing more to write
    assert len(job._steps) == 1
    cache.assign(101, 2000)  # while the job is pending: written by a later one
    job.run_here()
    assert LeaderEpochCache(tmp_path).entries() == [(e, e * 10) for e in range(1, 101)]
    assert len(changes) == 102  # the change made meanwhile is announced again
    later = DiskJob()
    cache.add_write(later)
    later.run_here()
    assert LeaderEpochCache(tmp_path).entries()[-1] == (101, 2000)


def test_log_manager_flusher_writes_lagging_checkpoints(tmp_path: Path) -> None:
    logs = LogManager([tmp_path], {})
    logs.startup(NOW)
    created = [logs.get_or_create("t", i, LogConfig(), now_ms=NOW) for i in range(3)]
    for epoch in range(1, 4):
        for log in created:
            log.append_as_follower(batch(base_offset=2 * epoch - 2, partition_leader_epoch=epoch))
    assert not any(log.leader_epochs.path.exists() for log in created)
    logs.run_flush(NOW)
    for log in created:
        assert LeaderEpochCache(log.directory).entries() == [(1, 0), (2, 2), (3, 4)]


def test_a_leaders_new_epoch_is_written_with_the_next_flush_not_at_once(tmp_path: Path) -> None:
    """An epoch at the log end holds no record: the flusher does not replace the file for
    it (a failover changes every partition's epoch at once); the next flush of the log, its
    close or its next change writes it, and a load drops it while no record follows."""
    logs = LogManager([tmp_path], {})
    logs.startup(NOW)
    empty, written = (logs.get_or_create("t", i, LogConfig(), now_ms=NOW) for i in range(2))
    written.append_as_leader(batch(), leader_epoch=1, now_ms=NOW)
    logs.run_flush(NOW)  # an epoch of records: the flusher's next round writes it
    assert LeaderEpochCache(written.directory).entries() == [(1, 0)]
    for epoch in (2, 3):
        empty.assign_epoch_start(epoch)
        written.assign_epoch_start(epoch)
    logs.run_flush(NOW)
    assert not empty.leader_epochs.path.exists()
    assert LeaderEpochCache(written.directory).entries() == [(1, 0)]
    assert written.end_offset_for_epoch(1) == (1, 2)  # in memory at once
    written.append_as_leader(batch(), leader_epoch=3, now_ms=NOW)
    written.flush()
    assert LeaderEpochCache(written.directory).entries() == [(1, 0), (3, 2)]
    empty.close()
    assert LeaderEpochCache(empty.directory).entries() == [(3, 0)]
    reopened = Log.open(empty.directory, LogConfig(), clean_shutdown=True, now_ms=NOW)
    assert reopened.leader_epochs.entries() == []


def test_epochs_survive_a_crash_before_the_checkpoint_is_written(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(), now_ms=NOW)
    log.append_as_leader(batch(), leader_epoch=1, now_ms=NOW)
    log.flush()  # the checkpoint is written before the recovery point passes its data
    assert LeaderEpochCache(log.directory).entries() == [(1, 0)]
    log.assign_epoch_start(3)
    log.append_as_leader(batch(), leader_epoch=3, now_ms=NOW)
    log.append_as_follower(batch(base_offset=4, partition_leader_epoch=4))
    assert LeaderEpochCache(log.directory).entries() == [(1, 0)]  # lagging
    for segment in log.segments:
        segment.close_fd()  # crash
    log = Log.open(tmp_path / "t-0", LogConfig(), recovery_point=2, now_ms=NOW)
    assert log.leader_epochs.entries() == [(1, 0), (3, 2), (4, 4)]


def test_truncation_and_roll_write_the_checkpoint_at_once(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(), now_ms=NOW)
    for epoch in (1, 2, 3):
        log.append_as_leader(batch(), leader_epoch=epoch, now_ms=NOW)
    log.roll(NOW)  # its producer snapshot may be where the replay starts after a crash
    assert LeaderEpochCache(log.directory).entries() == [(1, 0), (2, 2), (3, 4)]
    log.truncate_to(4)
    assert LeaderEpochCache(log.directory).entries() == [(1, 0), (2, 2)]


def test_load_does_not_rewrite_the_checkpoint(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(), now_ms=NOW)
    log.assign_epoch_start(7)  # a leader that appended nothing
    log.close()
    before = log.leader_epochs.path.stat().st_ino
    reopened = Log.open(tmp_path / "t-0", LogConfig(), clean_shutdown=True, now_ms=NOW)
    # An epoch with no data is dropped at load (as Kafka's truncateFromEnd does), in memory:
    # the next load derives the same.
    assert reopened.leader_epochs.entries() == []
    assert reopened.leader_epochs.path.stat().st_ino == before


def test_a_queued_write_to_a_directory_gone_meanwhile_is_no_error(tmp_path: Path) -> None:
    (tmp_path / "t-0").mkdir()
    cache = LeaderEpochCache(tmp_path / "t-0")
    cache.assign(1, 0)
    job = DiskJob()
    cache.add_write(job)
    (tmp_path / "t-0").rename(tmp_path / "t-0.x-delete")  # its log was deleted meanwhile
    job.run_here()
    assert job.succeeded
