"""The log cleaner and transactions, in process on hand-built logs (a real LogManager and Log
on disk, passes run with log.cleaner.clean_log and swapped in as the broker does): aborted
data never shadows nor outlives committed data, markers stay while their transaction has
batches, then wait out delete.retention.ms, the cleaned `.txnindex` keeps what Kafka keeps,
and an open transaction bounds the pass. Well under a second."""

from __future__ import annotations

import os
from pathlib import Path

from gregor.log.cleaner_manager import cleanable_offsets
from gregor.log.log import Log
from gregor.log.txn_index import AbortedTxn, build_marker_batch
from gregor.wire.records import build_batch
from tests.test_log_cleaner import DAY, NOW, Harness, compact_config, latest

RETENTION = DAY
COORDINATOR_EPOCH = 5


class TxnProducer:
    """A transactional producer writing into the harness's log, sequences kept."""

    def __init__(self, h: Harness, pid: int, epoch: int = 0) -> None:
        self.h, self.pid, self.epoch, self.seq = h, pid, epoch, 0

    def send(self, records: list[tuple[bytes, bytes | None]]) -> int:
        batch = build_batch(
            [(k, v, [], NOW) for k, v in records],
            producer_id=self.pid,
            producer_epoch=self.epoch,
            base_sequence=self.seq,
            is_transactional=True,
        )
        self.seq += len(records)
        return self.h.log.append_as_leader(batch, leader_epoch=0, now_ms=NOW).first_offset

    def end(self, commit: bool, *, bump_epoch: bool = False) -> int:
        """Its marker, as the coordinator writes it (an abort on timeout bumps the epoch)."""
        if bump_epoch:
            self.epoch, self.seq = self.epoch + 1, 0
        marker = build_marker_batch(self.pid, self.epoch, commit, COORDINATOR_EPOCH, NOW)
        log = self.h.log
        return log.append_as_leader(
            marker, leader_epoch=0, now_ms=NOW, origin_client=False
        ).first_offset


def dirty_pass(h: Harness, now_ms: int) -> int:
    """Something new to clean below a fresh active segment, then one pass at `now_ms`."""
    h.produce([(b"tick", b"%d" % now_ms)])
    h.roll()
    h.produce([(b"active", b"x")])
    return h.clean(now_ms)


def markers(h: Harness) -> list[tuple[int, int, bool, int | None]]:
    """(offset, producer id, has records, delete horizon) of every control batch."""
    return [
        (
            hd.base_offset,
            hd.producer_id,
            bool(rs),
            hd.base_timestamp if hd.has_delete_horizon else None,
        )
        for hd, rs in h.batches()
        if hd.is_control
    ]


def txn_index(h: Harness) -> list[AbortedTxn]:
    return [txn for segment in h.log.segments for txn in segment.txn_index.entries]


def replicate(h: Harness, tmp_path: Path) -> Log:
    """A new follower's log, fed the whole of the harness's log as a fetch would."""
    follower = Log.open(tmp_path / "follower" / "t-0", compact_config(), now_ms=NOW)
    follower.append_as_follower(b"".join(os.pread(s.fd, s.size, 0) for s in h.log.segments))
    assert follower.log_end_offset == h.log.log_end_offset
    return follower


def test_a_committed_value_survives_a_later_aborted_write_of_its_key(tmp_path: Path) -> None:
    h = Harness(tmp_path, compact_config())
    committer, aborter = TxnProducer(h, 11), TxnProducer(h, 12)
    committer.send([(b"k", b"committed"), (b"j", b"committed")])
    committer.end(commit=True)
    aborter.send([(b"k", b"aborted")])
    aborter.end(commit=False)
    assert dirty_pass(h, NOW) >= 1
    # The same in two passes: the committed value cleaned first, the abort in the next
    # dirty section (group offsets, then an aborted TxnOffsetCommit, in __consumer_offsets).
    aborter.send([(b"j", b"aborted")])
    aborter.end(commit=False)
    assert dirty_pass(h, NOW) >= 1
    values = [(key, value) for _, key, value in h.records()]
    assert (b"k", b"committed") in values and (b"j", b"committed") in values
    assert not [v for v in values if v[1] == b"aborted"]
    assert latest(h.records())[b"k"] == b"committed"


def test_aborted_data_goes_and_its_marker_follows_after_delete_retention(tmp_path: Path) -> None:
    h = Harness(tmp_path, compact_config(delete_retention_ms=RETENTION))
    p = TxnProducer(h, 21)
    p.send([(b"a", b"aborted-1")])
    p.send([(b"b", b"aborted-2")])
    abort_at = p.end(commit=False)
    p.send([(b"c", b"committed")])  # the producer's last data: this batch stays
    commit_at = p.end(commit=True)
    assert txn_index(h) == [AbortedTxn(21, 0, abort_at, abort_at + 1)]

    # Pass 1 meets the aborted batches: they go, the marker stays with its index entry.
    assert dirty_pass(h, NOW) >= 1
    assert not [r for r in h.records() if r[2] in (b"aborted-1", b"aborted-2")]
    assert markers(h) == [(abort_at, 21, True, None), (commit_at, 21, True, None)]
    assert txn_index(h) == [AbortedTxn(21, 0, abort_at, abort_at + 1)]

    # Pass 2 finds nothing of that transaction: the marker is discardable, stamped with its
    # horizon, and no index keeps the transaction any more (it has no data left).
    assert dirty_pass(h, NOW + 1) >= 1
    assert markers(h) == [(abort_at, 21, True, NOW + 1 + RETENTION), (commit_at, 21, True, None)]
    assert txn_index(h) == []
    # The stamped marker is a valid batch: a follower takes it, and finds nothing aborted.
    follower = replicate(h, tmp_path)
    assert follower.producer_state.producers[21].current_txn_first_offset == -1
    assert follower.collect_aborted_transactions(0, follower.log_end_offset) == []
    assert dirty_pass(h, NOW + RETENTION) >= 1
    assert markers(h)[0] == (abort_at, 21, True, NOW + 1 + RETENTION)
    # A pass at the horizon drops it; the COMMIT stays with its committed batch.
    assert dirty_pass(h, NOW + 1 + RETENTION) >= 1
    assert markers(h) == [(commit_at, 21, True, None)]
    assert latest(h.records())[b"c"] == b"committed"
    log = h.reopen()
    assert log.collect_aborted_transactions(0, log.log_end_offset) == []


def test_a_commit_marker_goes_once_its_transactions_batches_are_gone(tmp_path: Path) -> None:
    h = Harness(tmp_path, compact_config(delete_retention_ms=RETENTION))
    p = TxnProducer(h, 31)
    p.send([(b"k", b"1")])
    first_commit = p.end(commit=True)
    p.send([(b"other", b"1")])
    second_commit = p.end(commit=True)
    h.produce([(b"k", b"2")])  # supersedes the first transaction's only record
    assert dirty_pass(h, NOW) >= 1  # its emptied batch goes, the marker saw it: stays
    assert markers(h) == [(first_commit, 31, True, None), (second_commit, 31, True, None)]
    assert dirty_pass(h, NOW) >= 1
    assert markers(h) == [
        (first_commit, 31, True, NOW + RETENTION),
        (second_commit, 31, True, None),
    ]
    assert dirty_pass(h, NOW + RETENTION) >= 1
    assert markers(h) == [(second_commit, 31, True, None)]
    assert latest(h.records())[b"k"] == b"2"


def test_the_cleaned_txn_index_keeps_the_aborts_whose_marker_stays_with_data(
    tmp_path: Path,
) -> None:
    """Two aborted transactions in segments merged into one: the first's data goes, the
    second's is its producer's last batch (kept empty, so its marker stays with it). From
    the pass after, the cleaned `.txnindex` holds only the second, restart included."""
    h = Harness(tmp_path, compact_config(segment_bytes=10_000))
    gone, stays = TxnProducer(h, 41), TxnProducer(h, 42)
    gone.send([(b"x", b"aborted")])
    gone_abort = gone.end(commit=False)
    gone.send([(b"x", b"committed")])
    gone.end(commit=True)
    h.roll()
    stays.send([(b"y", b"aborted")])
    stays_abort = stays.end(commit=False)
    assert len(txn_index(h)) == 2
    assert dirty_pass(h, NOW) == 1  # both segments merge into one
    assert len(h.log.segments) == 2 and len(txn_index(h)) == 2  # each marker met its data
    assert dirty_pass(h, NOW) >= 1
    kept = AbortedTxn(42, stays_abort - 1, stays_abort, stays_abort + 1)
    assert txn_index(h) == [kept]
    assert [o for o, *_ in markers(h)] == [gone_abort, gone_abort + 2, stays_abort]
    empty = [hd for hd, rs in h.batches() if hd.producer_id == 42 and not hd.is_control]
    assert len(empty) == 1 and empty[0].record_count == 0
    log = h.reopen()
    assert log.collect_aborted_transactions(0, log.log_end_offset) == [kept]
    assert b"aborted" not in {value for _, _, value in h.records(log)}
    assert latest(h.records(log))[b"x"] == b"committed"


def test_an_open_transaction_bounds_the_pass_at_the_last_stable_offset(tmp_path: Path) -> None:
    h = Harness(tmp_path, compact_config())
    h.produce([(b"k", b"1")])
    h.produce([(b"k", b"2")])
    h.roll()
    p = TxnProducer(h, 51)
    open_at = p.send([(b"k", b"open")])
    h.produce([(b"k", b"3")])
    h.roll()
    h.produce([(b"k", b"4")])
    h.roll()
    h.produce([(b"active", b"x")])
    first_dirty, first_uncleanable, _ = cleanable_offsets(h.log, None, NOW, h.log.log_end_offset)
    assert (first_dirty, first_uncleanable) == (0, open_at)
    assert h.log.last_stable_offset(h.log.log_end_offset) == open_at
    assert h.clean() == 1
    # Only the segment below the open transaction was cleaned.
    assert [(o, v) for o, k, v in h.records() if k == b"k"] == [
        (1, b"2"),
        (open_at, b"open"),
        (open_at + 1, b"3"),
        (open_at + 2, b"4"),
    ]
    p.end(commit=False)
    assert dirty_pass(h, NOW) >= 1
    assert [v for _, k, v in h.records() if k == b"k"] == [b"4"]


def test_a_marker_that_holds_a_bumped_epoch_stays_as_an_empty_batch(tmp_path: Path) -> None:
    """A transaction aborted on timeout: the coordinator's marker bumps the producer's
    epoch, and is then its only record of that epoch (Kafka keeps it for fencing). A
    follower replaying the cleaned log takes the epoch from it and nothing else; once the
    producer writes in that epoch, the emptied marker goes too."""
    h = Harness(tmp_path, compact_config(delete_retention_ms=RETENTION))
    p = TxnProducer(h, 61)
    p.send([(b"c", b"committed")])
    commit_at = p.end(commit=True)
    p.send([(b"k", b"aborted")])
    abort_at = p.end(commit=False, bump_epoch=True)
    assert h.log.producer_state.producers[61].producer_epoch == 1
    assert dirty_pass(h, NOW) >= 1
    assert dirty_pass(h, NOW) >= 1  # nothing of the transaction left: the horizon
    assert dirty_pass(h, NOW + RETENTION) >= 1
    control = [(hd.base_offset, hd.record_count, hd.producer_epoch) for hd, _ in h.batches()]
    assert [c for c in control if c[0] in (commit_at, abort_at)] == [
        (commit_at, 1, 0),
        (abort_at, 0, 1),
    ]
    assert not [r for r in h.records() if r[1] == b"k"]
    follower = replicate(h, tmp_path)
    entry = follower.producer_state.producers[61]
    state = (entry.producer_epoch, entry.coordinator_epoch, entry.current_txn_first_offset)
    assert state == (1, COORDINATOR_EPOCH, -1)
    assert [t for s in follower.segments for t in s.txn_index.entries] == []
    p.send([(b"k", b"new-epoch")])
    p.end(commit=True)
    assert dirty_pass(h, NOW + RETENTION) >= 1
    assert abort_at not in [hd.base_offset for hd, _ in h.batches()]
