"""Transactions in one partition's log: the producer-state checks, the last stable offset,
the aborted-transaction index (`.txnindex`) and what survives a restart or a crash."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gregor.log import Log, LogConfig
from gregor.log.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    TransactionCoordinatorFencedError,
)
from gregor.log.txn_index import ENTRY_SIZE, AbortedTxn, build_marker_batch, parse_marker
from gregor.wire.records import build_batch, split_batches

NOW = 1_700_000_000_000
P1, P2, P3 = 1001, 1002, 1003


class Producer:
    """A transactional producer's batches, sequences kept."""

    def __init__(self, pid: int, epoch: int = 0) -> None:
        self.pid, self.epoch, self.seq = pid, epoch, 0

    def data(self, n: int = 1, *, transactional: bool = True) -> bytes:
        batch = build_batch(
            [(b"k", b"v", [], NOW) for _ in range(n)],
            producer_id=self.pid,
            producer_epoch=self.epoch,
            base_sequence=self.seq,
            is_transactional=transactional,
        )
        self.seq += n
        return batch

    def marker(self, commit: bool, coordinator_epoch: int = 0) -> bytes:
        return build_marker_batch(self.pid, self.epoch, commit, coordinator_epoch, NOW)


def open_log(path: Path, **kw: object) -> Log:
    return Log.open(path / "t-0", LogConfig(), now_ms=NOW, **kw)  # type: ignore[arg-type]


def leader(log: Log, data: bytes) -> int:
    return log.append_as_leader(data, leader_epoch=0, now_ms=NOW, origin_client=False).first_offset


def client(log: Log, data: bytes) -> int:
    return log.append_as_leader(data, leader_epoch=0, now_ms=NOW).first_offset


def interleaved(log: Log, roll_at: int | None = None) -> None:
    """Offsets: 0-1 P1 data, 2-3 P2 data, 4 plain, 5 P1 ABORT, 6 P3 data, 7 P2 COMMIT,
    8 P3 data, 9 P3 ABORT, 10 P1 data (open), 11 P2 data, 12 P2 ABORT, 13 plain."""
    p1, p2, p3 = Producer(P1), Producer(P2), Producer(P3)
    plain = build_batch([(None, b"plain", [], NOW)])
    steps = [
        p1.data(2), p2.data(2), plain, p1.marker(False), p3.data(), p2.marker(True),
        p3.data(), p3.marker(False), p1.data(), p2.data(), p2.marker(False), plain,
    ]  # fmt: skip
    for data in steps:
        if roll_at is not None and log.log_end_offset == roll_at:
            log.roll(NOW)
        if split_batches(data)[0].is_control:
            leader(log, data)
        else:
            client(log, data)
    assert log.log_end_offset == 14


EXPECTED_INDEX = [
    AbortedTxn(P1, 0, 5, 2),  # P2's transaction from 2 was still open
    AbortedTxn(P3, 6, 9, 10),  # nothing else open
    AbortedTxn(P2, 11, 12, 10),  # P1's transaction from 10 is open
]


def index_entries(log: Log) -> list[AbortedTxn]:
    return [txn for segment in log.segments for txn in segment.txn_index.entries]


def committed_read(log: Log, offset: int, hw: int) -> tuple[int, int, list[tuple[int, int]]]:
    """What a read_committed fetch from ``offset`` gets: (first, end) offsets of the data and
    the aborted transactions."""
    lso = log.last_stable_offset(hw)
    region = log.read(offset, max_bytes=1 << 20, max_offset=lso, min_one_batch=True)
    data = b""
    if region.size:
        data = os.pread(region.fd, region.size, region.position)
    headers = split_batches(data)
    end = headers[-1].next_offset if headers else offset
    return offset, end, log.aborted_transactions(offset, region)


def test_index_entries_and_lso_of_interleaved_transactions(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    interleaved(log)
    assert index_entries(log) == EXPECTED_INDEX
    index_file = log.segments[0].txn_index.path
    assert index_file.name == "00000000000000000000.txnindex"
    assert index_file.stat().st_size == 3 * ENTRY_SIZE
    # P1's transaction from 10 is open; the high watermark bounds the LSO too.
    assert log.last_stable_offset(14) == 10
    assert log.last_stable_offset(8) == 8


def test_read_committed_stops_at_lso_with_kafkas_aborted_list(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    interleaved(log)
    # One segment, no offset-index entries: the upper bound is the log end, so P2's
    # aborted transaction past the LSO is named too, as Kafka does.
    assert committed_read(log, 0, 14) == (0, 10, [(P1, 0), (P3, 6), (P2, 11)])
    assert committed_read(log, 7, 14) == (7, 10, [(P3, 6), (P2, 11)])
    assert committed_read(log, 10, 14) == (10, 10, [])  # at the LSO: nothing


def test_aborted_search_stops_at_an_entry_whose_lso_reaches_the_bound(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    interleaved(log, roll_at=6)
    assert [s.base_offset for s in log.segments] == [0, 6]
    assert [t for t in log.segments[0].txn_index.entries] == EXPECTED_INDEX[:1]
    # The read ends with the first segment: bound 6. P1's entry (LSO 2) does not complete
    # the search; P3's in the next segment (LSO 10 >= 6) does, and lies past the bound.
    assert committed_read(log, 0, 14) == (0, 6, [(P1, 0)])
    assert committed_read(log, 6, 14) == (6, 10, [(P3, 6), (P2, 11)])


def test_a_marker_not_yet_replicated_holds_the_lso(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    p = Producer(P1)
    client(log, p.data())
    assert log.last_stable_offset(1) == 0
    leader(log, p.marker(True))
    assert log.last_stable_offset(1) == 0  # the COMMIT at 1 is not below the HW yet
    assert log.last_stable_offset(2) == 2
    assert log.last_stable_offset(2) == 2


def test_producer_state_checks(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    p = Producer(P1, epoch=3)
    client(log, p.data())
    with pytest.raises(InvalidTxnStateError):
        client(log, p.data(transactional=False))
    p.seq -= 1
    leader(log, p.marker(False, coordinator_epoch=5))
    # A marker from an older producer epoch, or from an older coordinator.
    old = Producer(P1, epoch=2)
    with pytest.raises(InvalidProducerEpochError):
        leader(log, old.marker(False, coordinator_epoch=5))
    with pytest.raises(TransactionCoordinatorFencedError):
        leader(log, p.marker(True, coordinator_epoch=4))
    # The transaction is over: a non-transactional write is fine now.
    client(log, p.data(transactional=False))
    assert log.log_end_offset == 3


def test_marker_round_trip() -> None:
    batch = build_marker_batch(P1, 7, True, 12, NOW)
    h = split_batches(batch)[0]
    assert h.is_control and h.is_transactional and h.base_sequence == -1
    assert (h.producer_id, h.producer_epoch) == (P1, 7)
    marker = parse_marker(batch, h)
    assert marker.commit and marker.coordinator_epoch == 12


def test_follower_builds_the_same_state(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    interleaved(log, roll_at=6)
    follower = Log.open(tmp_path / "f-0", LogConfig(), now_ms=NOW)
    region = log.read(0, max_bytes=1 << 20, max_offset=14, min_one_batch=True)
    follower.append_as_follower(os.pread(region.fd, region.size, region.position))
    region = log.read(6, max_bytes=1 << 20, max_offset=14, min_one_batch=True)
    follower.append_as_follower(os.pread(region.fd, region.size, region.position))
    assert follower.log_end_offset == 14
    assert index_entries(follower) == EXPECTED_INDEX
    assert follower.last_stable_offset(14) == 10


def test_clean_restart_keeps_open_transactions_and_index(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    interleaved(log)
    log.close()
    log = open_log(tmp_path, clean_shutdown=True, recovery_point=14)
    assert log.last_stable_offset(14) == 10
    assert committed_read(log, 0, 14) == (0, 10, [(P1, 0), (P3, 6), (P2, 11)])
    assert log.producer_state.has_ongoing_txn(P1)


@pytest.mark.parametrize("recovery_point", [0, 6])
def test_crash_recovery_rebuilds_txn_index_and_lso(tmp_path: Path, recovery_point: int) -> None:
    """A crash: no snapshot at the end. From 0: no snapshot at all and the index files
    lost. From 6: the roll's snapshot (P2's transaction open from 2) and the replay of the
    second segment, whose index lost its entries."""
    log = open_log(tmp_path)
    interleaved(log, roll_at=6)
    for segment in log.segments:
        segment.close_fd()
    directory = tmp_path / "t-0"
    if recovery_point == 0:
        for path in directory.glob("*.txnindex"):
            path.unlink()
        for path in directory.glob("*.snapshot"):
            path.unlink()
    else:
        assert [p.name for p in directory.glob("*.snapshot")] == ["00000000000000000006.snapshot"]
        (directory / "00000000000000000006.txnindex").write_bytes(b"\0" * 40)  # torn, stale
    log = open_log(tmp_path, recovery_point=recovery_point)
    assert index_entries(log) == EXPECTED_INDEX
    assert log.last_stable_offset(14) == 10
    assert committed_read(log, 6, 14) == (6, 10, [(P3, 6), (P2, 11)])


def test_truncation_drops_index_entries_past_the_new_end(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    interleaved(log)
    log.truncate_to(10)
    assert index_entries(log) == EXPECTED_INDEX[:2]
    assert log.last_stable_offset(10) == 10
    assert not log.producer_state.has_ongoing_txn(P1)


def test_retention_deletes_the_txn_index_with_its_segment(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    interleaved(log, roll_at=6)
    first = log.segments[0].txn_index.path
    assert first.exists()
    log.advance_log_start_offset(6)
    log.delete_pending_segments(NOW)  # due file.delete.delay.ms from now
    assert Path(str(first) + ".deleted").exists()
    log.delete_pending_segments(NOW + 10**9)
    assert not first.exists() and not Path(str(first) + ".deleted").exists()
    assert index_entries(log) == EXPECTED_INDEX[1:]


def test_the_brokers_own_batches_are_not_sequence_checked(tmp_path: Path) -> None:
    """TxnOffsetCommit batches are built by the coordinator, each at sequence 0 (as Kafka's):
    the log neither takes a second one for a duplicate nor refuses it as out of order, and a
    stale epoch is still refused."""
    log = open_log(tmp_path)
    p = Producer(P1, epoch=2)
    first = leader(log, p.data(2))
    p.seq = 0
    assert leader(log, p.data(2)) == first + 2  # same sequences: written, not a duplicate
    p.seq = 0
    assert leader(log, p.data(3)) == first + 4  # another count at sequence 0: in order
    with pytest.raises(InvalidProducerEpochError):
        leader(log, Producer(P1, epoch=1).data())
    leader(log, p.marker(True))
    assert log.log_end_offset == 8 and log.last_stable_offset(8) == 8
