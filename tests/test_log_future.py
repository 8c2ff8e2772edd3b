"""Future logs of replica moves between log directories (log/future.py and the LogManager's
part): the swap keeps every record and the producer state, and start-up settles a future
log a stop left behind."""

from __future__ import annotations

from pathlib import Path

from gregor.log import LogConfig, LogManager
from gregor.log.future import copy_files, segment_files
from gregor.log.log import Log
from gregor.wire.records import build_batch, decode_records, split_batches

NOW = 1_700_000_000_000
SMALL = LogConfig(segment_bytes=400)


def records_of(log: Log) -> list[tuple[int, bytes | None]]:
    out = []
    for segment in log.segments:
        data = segment.log_path.read_bytes()
        for h in split_batches(data):
            out += [(r.offset, r.value) for r in decode_records(data, h)]
    return out


def filled(tmp_path: Path) -> tuple[LogManager, Log, list[Path]]:
    dirs = [tmp_path / "a", tmp_path / "b"]
    m = LogManager(dirs, {})
    m.startup(NOW)
    log = m.get_or_create("t", 0, SMALL)
    for i in range(20):
        batch = build_batch(
            [(b"k", b"v%d" % i, [], NOW)], producer_id=7, producer_epoch=0, base_sequence=i
        )
        log.append_as_leader(batch, leader_epoch=0, now_ms=NOW)
    assert len(log.segments) > 3
    return m, log, dirs


def test_swap_in_future_moves_everything(tmp_path: Path) -> None:
    m, log, dirs = filled(tmp_path)
    before = records_of(log)
    future = m.start_future("t", 0, dirs[1])
    copy_files([p for s in log.segments[:-1] for p in segment_files(s)], future)
    moved = m.swap_in_future("t", 0)
    assert m.log_dir_of("t", 0) == dirs[1] and m.get("t", 0) is moved
    assert moved.directory == dirs[1] / "t-0" and not (dirs[0] / "t-0").exists()
    assert records_of(moved) == before
    assert (moved.log_start_offset, moved.log_end_offset) == (0, 20)
    assert moved.producer_state.producers[7].last_seq == 19
    assert moved.leader_epochs.latest_epoch == 0
    # It keeps taking appends.
    moved.append_as_leader(build_batch([(b"k", b"x", [], NOW)]), leader_epoch=0, now_ms=NOW)
    assert moved.log_end_offset == 21
    m.shutdown({})


def test_start_up_drops_an_unfinished_move(tmp_path: Path) -> None:
    m, log, dirs = filled(tmp_path)
    future = m.start_future("t", 0, dirs[1])
    copy_files([p for s in log.segments[:-1] for p in segment_files(s)], future)
    m.shutdown({})
    again = LogManager(dirs, {})
    again.startup(NOW)
    assert again.log_dir_of("t", 0) == dirs[0] and not future.exists()
    assert again.get("t", 0).log_end_offset == 20
    again.shutdown({})


def test_start_up_promotes_a_future_log_whose_swap_was_cut_short(tmp_path: Path) -> None:
    m, log, dirs = filled(tmp_path)
    before = records_of(log)
    future = m.start_future("t", 0, dirs[1])
    for segment in log.segments:
        copy_files(segment_files(segment), future)
    m.shutdown({})
    # As if stopped between the swap's renames: the current log is marked for deletion.
    (dirs[0] / "t-0").rename(dirs[0] / "t-0.0123-delete")
    again = LogManager(dirs, {})
    again.startup(NOW)
    assert again.log_dir_of("t", 0) == dirs[1]
    assert records_of(again.get("t", 0)) == before
    again.shutdown({})


def test_deleting_a_partition_drops_its_move(tmp_path: Path) -> None:
    m, log, dirs = filled(tmp_path)
    future = m.start_future("t", 0, dirs[1])
    m.delete("t", 0)
    assert not future.exists() and m.future_of("t", 0) is None
    m.shutdown({})
