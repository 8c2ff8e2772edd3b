"""Idempotent producers: duplicates, sequence and epoch rules, snapshots and rebuilds."""

import struct
from pathlib import Path

import crc32c
import pytest

from gregor.log import AppendResult, Log, LogConfig
from gregor.log.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from gregor.log.producer_state import ProducerStateManager
from gregor.wire.records import build_batch

NOW = 1_700_000_000_000
PID = 4242


def pbatch(seq: int, n: int = 1, *, epoch: int = 0, pid: int = PID, **kw: object) -> bytes:
    return build_batch(
        [(None, b"v", [], NOW) for _ in range(n)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        **kw,
    )


def open_log(path: Path, **cfg: object) -> Log:
    return Log.open(path / "t-0", LogConfig(**cfg), now_ms=NOW)


def append(log: Log, data: bytes, *, origin_client: bool = True) -> AppendResult:
    return log.append_as_leader(data, leader_epoch=0, now_ms=NOW, origin_client=origin_client)


def test_duplicate_returns_original_offsets_and_writes_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, build_batch([(None, b"x", [], NOW)]))
    first = append(log, pbatch(0, 3))
    append(log, pbatch(3, 2))
    size = log.size_bytes
    again = append(log, pbatch(0, 3))
    assert again.duplicate
    assert (again.first_offset, again.last_offset) == (first.first_offset, first.last_offset)
    assert log.size_bytes == size and log.log_end_offset == 6


def test_only_last_five_batches_are_remembered(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for seq in range(6):
        append(log, pbatch(seq))
    assert append(log, pbatch(1)).duplicate
    with pytest.raises(OutOfOrderSequenceError):
        append(log, pbatch(0))


def test_out_of_order_sequence_rejected(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, pbatch(0, 2))
    with pytest.raises(OutOfOrderSequenceError):
        append(log, pbatch(5))
    with pytest.raises(OutOfOrderSequenceError):  # a gap inside one request
        append(log, pbatch(2) + pbatch(4))
    assert log.log_end_offset == 2
    assert append(log, pbatch(2) + pbatch(3)).last_offset == 3


def test_fenced_epoch_and_new_epoch_rules(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, pbatch(0, epoch=3))
    with pytest.raises(InvalidProducerEpochError):
        append(log, pbatch(1, epoch=2))
    with pytest.raises(OutOfOrderSequenceError):
        append(log, pbatch(7, epoch=4))
    append(log, pbatch(0, epoch=4))
    with pytest.raises(InvalidProducerEpochError):
        append(log, pbatch(1, epoch=3))
    assert log.producer_state.producers[PID].producer_epoch == 4


def test_unknown_producer_may_start_at_any_sequence(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    assert append(log, pbatch(17, epoch=2)).first_offset == 0
    assert append(log, pbatch(18, epoch=2)).first_offset == 1


def test_sequence_wraps_at_int_max(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    int_max = (1 << 31) - 1
    append(log, pbatch(int_max - 1, 2))
    assert log.producer_state.producers[PID].last_seq == int_max
    append(log, pbatch(0))
    assert append(log, pbatch(int_max - 1, 2)).duplicate


def test_non_idempotent_batches_skip_checks(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    plain = build_batch([(None, b"v", [], NOW)])
    append(log, plain)
    assert not append(log, plain).duplicate
    assert log.log_end_offset == 2 and not log.producer_state.producers


def test_state_survives_close_and_reopen_via_snapshot(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, pbatch(0, 2, epoch=1))
    append(log, pbatch(2, 2, epoch=1))
    log.flush()
    log.close()
    assert (tmp_path / "t-0" / "00000000000000000004.snapshot").exists()
    log = Log.open(log.directory, log.config, clean_shutdown=True, now_ms=NOW)
    dup = append(log, pbatch(2, 2, epoch=1))
    assert dup.duplicate and (dup.first_offset, dup.last_offset) == (2, 3)
    with pytest.raises(OutOfOrderSequenceError):
        append(log, pbatch(9, epoch=1))
    assert append(log, pbatch(4, epoch=1)).first_offset == 4


def test_close_writes_a_snapshot_only_when_the_state_moved(tmp_path: Path) -> None:
    """As Kafka's takeSnapshot: a clean close whose newest snapshot is at the log end, or of
    a log with no records and no producers, writes nothing (20,000 renames over the old
    files held a shutdown up for 15 s); one after new appends does, and the state comes
    back either way."""
    directory = tmp_path / "t-0"
    log = open_log(tmp_path)
    log.close()
    assert not list(directory.glob("*.snapshot"))
    log = Log.open(directory, log.config, clean_shutdown=True, now_ms=NOW)
    assert not log.producer_state.producers
    append(log, pbatch(0, 2, epoch=1))
    log.close()
    snap = directory / "00000000000000000002.snapshot"
    inode = snap.stat().st_ino
    for _ in range(2):
        log = Log.open(directory, log.config, clean_shutdown=True, now_ms=NOW)
        assert log.producer_state.producers[PID].last_seq == 1
        log.close()
        assert snap.stat().st_ino == inode  # not rewritten
    log = Log.open(directory, log.config, clean_shutdown=True, now_ms=NOW)
    append(log, pbatch(2, epoch=1))
    log.close()
    assert sorted(p.name for p in directory.glob("*.snapshot")) == [
        snap.name,
        "00000000000000000003.snapshot",
    ]
    log = Log.open(directory, log.config, clean_shutdown=True, now_ms=NOW)
    assert append(log, pbatch(2, epoch=1)).duplicate


def test_state_rebuilt_from_log_without_snapshot(tmp_path: Path) -> None:
    size = len(pbatch(0, 2))
    log = open_log(tmp_path, segment_bytes=size * 2)
    for seq in range(0, 12, 2):
        append(log, pbatch(seq, 2, epoch=5))
    for segment in log.segments:
        segment.close_fd()  # crash
    for snap in (tmp_path / "t-0").glob("*.snapshot"):
        snap.unlink()
    log = Log.open(log.directory, log.config, now_ms=NOW)
    entry = log.producer_state.producers[PID]
    assert (entry.producer_epoch, entry.last_seq, entry.last_offset) == (5, 11, 11)
    assert append(log, pbatch(8, 2, epoch=5)).duplicate
    assert append(log, pbatch(12, epoch=5)).first_offset == 12


def test_rebuild_uses_snapshot_then_replays_newer_batches(tmp_path: Path) -> None:
    size = len(pbatch(0, 2))
    log = open_log(tmp_path, segment_bytes=size * 2)
    for seq in range(0, 10, 2):
        append(log, pbatch(seq, 2, epoch=1))
    append(log, pbatch(0, 1, epoch=0, pid=77))
    snapshots = sorted(p.name for p in (tmp_path / "t-0").glob("*.snapshot"))
    assert snapshots == ["00000000000000000004.snapshot", "00000000000000000008.snapshot"]
    for segment in log.segments:
        segment.close_fd()
    log = Log.open(log.directory, log.config, recovery_point=8, now_ms=NOW)
    assert log.producer_state.producers[PID].last_seq == 9
    assert log.producer_state.producers[77].last_offset == 10
    assert append(log, pbatch(10, epoch=1)).first_offset == 11


def test_corrupt_snapshot_falls_back_to_log_replay(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, pbatch(0, 3, epoch=2))
    log.close()
    snap = tmp_path / "t-0" / "00000000000000000003.snapshot"
    data = bytearray(snap.read_bytes())
    data[-1] ^= 0x55
    snap.write_bytes(bytes(data))
    log = Log.open(log.directory, log.config, clean_shutdown=True, now_ms=NOW)
    assert log.producer_state.producers[PID].last_seq == 2
    assert append(log, pbatch(0, 3, epoch=2)).duplicate


def test_snapshot_file_format(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, build_batch([(None, b"v", [], NOW)]))
    # Transactional batches come only from the broker itself until transactions exist.
    append(log, pbatch(0, 3, epoch=6, is_transactional=True), origin_client=False)
    log.close()
    data = (tmp_path / "t-0" / "00000000000000000004.snapshot").read_bytes()
    version, crc, count = struct.unpack_from(">hIi", data)
    assert (version, count) == (1, 1)
    assert crc == crc32c.crc32c(data[6:])
    entry = struct.unpack_from(">qhiqiqiq", data, 10)
    # producer id, epoch, last seq, last offset, offset delta, timestamp, coordinator epoch,
    # current transaction first offset
    assert entry == (PID, 6, 2, 3, 2, NOW, -1, 1)
    assert len(data) == 10 + 46
    (loaded,) = ProducerStateManager.read_snapshot(
        tmp_path / "t-0" / "00000000000000000004.snapshot"
    )
    assert loaded.current_txn_first_offset == 1 and loaded.batches[0].first_seq == 0


def test_producers_below_log_start_are_forgotten(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, pbatch(0, 2, pid=1))
    append(log, pbatch(0, 2, pid=2))
    log.advance_log_start_offset(2)
    assert set(log.producer_state.producers) == {2}


def test_expired_producers_are_removed(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, pbatch(0))
    log.remove_expired_producers(NOW + 1000, 5000)
    assert PID in log.producer_state.producers
    log.remove_expired_producers(NOW + 5000, 5000)
    assert PID not in log.producer_state.producers


def test_follower_append_tracks_state_without_validation(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_follower(pbatch(5, 2, epoch=1, base_offset=0))
    log.append_as_follower(pbatch(0, 1, epoch=3, base_offset=2))  # no checks on replicas
    entry = log.producer_state.producers[PID]
    assert (entry.producer_epoch, entry.last_seq, entry.last_offset) == (3, 0, 2)
