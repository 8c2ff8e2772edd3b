"""The in-flight window of one share-partition (KIP-932), kept by the partition leader per
(share group, topic-partition): which records a share group has delivered, to whom, how often,
and which are done.

The window is [start offset (SPSO), end offset (SPEO)). Records below SPSO are done
(acknowledged or archived) and no state is kept for them; records from SPEO on were never
fetched. Inside the window each record is AVAILABLE (to be delivered, again), ACQUIRED (locked
by one member until it acknowledges or the lock expires), ACKNOWLEDGED or ARCHIVED (both
final). The state is held as contiguous runs of records of one state, delivery count, owner
and lock deadline, split where an acknowledgement or a release cuts a run and merged again
when neighbours become equal: a fully acknowledged window is a handful of runs however many
records it spans, and per-record acknowledgement costs runs only where the states differ.

Pure: no I/O, no clock (time comes in as ``now_ms``). The owner (the share-partition manager)
reads the log from ``next_fetch_offset()``, hands the read's batches to ``acquire``, writes
``export()`` through the share coordinator after every change, and calls ``expire`` at the
deadline it returns. Kafka's SharePartition.java keeps the same states and transitions.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from enum import IntEnum
from functools import partial
from typing import NamedTuple

from kio.schema.errors import ErrorCode

__all__ = [
    "DEFAULT_DELIVERY_COUNT_LIMIT",
    "DEFAULT_MAX_RECORD_LOCKS",
    "DEFAULT_RECORD_LOCK_DURATION_MS",
    "AcknowledgeType",
    "AcknowledgementBatch",
    "AcquiredRecords",
    "InFlightRecords",
    "RecordState",
    "SharePartition",
    "StateBatch",
]

# Broker defaults in Kafka 4.1 (ShareGroupConfig): group.share.partition.max.record.locks,
# group.share.delivery.count.limit and group.share.record.lock.duration.ms.
DEFAULT_MAX_RECORD_LOCKS = 2000
DEFAULT_DELIVERY_COUNT_LIMIT = 5
DEFAULT_RECORD_LOCK_DURATION_MS = 30_000


class RecordState(IntEnum):
    """A record's state; the ids are the ``delivery_state`` of persisted state batches."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AcknowledgeType(IntEnum):
    """The ``acknowledge_types`` of ShareFetch/ShareAcknowledge requests."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3


class AcquiredRecords(NamedTuple):
    """A range of records acquired by one fetch, all delivered ``delivery_count`` times."""

    first_offset: int
    last_offset: int
    delivery_count: int


class AcknowledgementBatch(NamedTuple):
    """A range of offsets with one acknowledge type for the range, or one per offset."""

    first_offset: int
    last_offset: int
    acknowledge_types: Sequence[int]


class StateBatch(NamedTuple):
    """A range of records in one persisted state (0, 2 or 4), as WriteShareGroupState and
    ReadShareGroupState carry it."""

    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


class InFlightRecords(NamedTuple):
    """A run of the window: records ``first_offset``..``last_offset`` in one state."""

    first_offset: int
    last_offset: int
    state: RecordState
    delivery_count: int
    member_id: str | None
    deadline_ms: int | None


_FINAL = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)
_ACK_STATE = {
    AcknowledgeType.GAP: RecordState.ARCHIVED,
    AcknowledgeType.ACCEPT: RecordState.ACKNOWLEDGED,
    AcknowledgeType.RELEASE: RecordState.AVAILABLE,
    AcknowledgeType.REJECT: RecordState.ARCHIVED,
}


class _Run:
    """Records ``first``..``last`` (inclusive) sharing state, delivery count, owner and lock
    deadline (owner and deadline only while ACQUIRED)."""

    __slots__ = ("first", "last", "state", "count", "member_id", "deadline_ms")

    def __init__(
        self,
        first: int,
        last: int,
        state: RecordState,
        count: int,
        member_id: str | None = None,
        deadline_ms: int | None = None,
    ) -> None:
        self.first = first
        self.last = last
        self.state = state
        self.count = count
        self.member_id = member_id
        self.deadline_ms = deadline_ms

    def same_as(self, other: _Run) -> bool:
        return (
            self.state == other.state
            and self.count == other.count
            and self.member_id == other.member_id
            and self.deadline_ms == other.deadline_ms
        )


class SharePartition:
    """The in-flight window of one share group on one partition.

    ``start_offset`` is the persisted start offset or, for a share-partition without state,
    the offset ``share.auto.offset.reset`` picks (the caller reads the high watermark for
    latest, the log start offset for earliest). ``state_batches`` are the persisted batches
    (ReadShareGroupState); offsets of the window they do not cover were never delivered as
    far as the state knows, and are AVAILABLE with delivery count 0.
    """

    def __init__(
        self,
        start_offset: int,
        state_batches: Iterable[StateBatch] = (),
        *,
        max_record_locks: int = DEFAULT_MAX_RECORD_LOCKS,
        delivery_count_limit: int = DEFAULT_DELIVERY_COUNT_LIMIT,
        record_lock_duration_ms: int = DEFAULT_RECORD_LOCK_DURATION_MS,
    ) -> None:
        if start_offset < 0:
            raise ValueError(f"start offset {start_offset} is negative")
        self.max_record_locks = max_record_locks
        self.delivery_count_limit = delivery_count_limit
        self.record_lock_duration_ms = record_lock_duration_ms
        self._start = start_offset
        self._end = start_offset
        self._runs: list[_Run] = []
        self._firsts: list[int] = []  # _runs[i].first, for bisection
        self._next_deadline_ms: int | None = None  # no lock expires before it
        for batch in state_batches:
            first = max(batch.first_offset, start_offset)
            if batch.last_offset < first:
                continue  # wholly below the start offset: done
            if first < self._end:
                raise ValueError(f"state batch {batch} overlaps or precedes another")
            state = RecordState(batch.delivery_state)
            if state is RecordState.ACQUIRED:
                raise ValueError(f"state batch {batch} has a delivery state that is not persisted")
            if first > self._end:
                self._append(_Run(self._end, first - 1, RecordState.AVAILABLE, 0))
            self._append(_Run(first, batch.last_offset, state, batch.delivery_count))
        self._advance()

    @property
    def start_offset(self) -> int:
        """SPSO: every record below it is acknowledged or archived."""
        return self._start

    @property
    def end_offset(self) -> int:
        """SPEO: the first offset never fetched (exclusive end of the window)."""
        return self._end

    def in_flight_count(self) -> int:
        """Records in the window, counted against ``max_record_locks``."""
        return self._end - self._start

    def in_flight(self) -> list[InFlightRecords]:
        """The window's runs, in offset order."""
        return [
            InFlightRecords(r.first, r.last, r.state, r.count, r.member_id, r.deadline_ms)
            for r in self._runs
        ]

    def next_fetch_offset(self) -> int:
        """Where the next read of the log starts: the first AVAILABLE record (released or
        expired records go out again before new ones), else SPEO."""
        for run in self._runs:
            if run.state is RecordState.AVAILABLE:
                return run.first
        return self._end

    def acquire(
        self,
        member_id: str,
        fetch_offset: int,
        batches: Sequence[tuple[int, int]],
        max_records: int,
        now_ms: int,
        aborted: Sequence[tuple[int, int]] = (),
    ) -> list[AcquiredRecords]:
        """Lock records of a log read for ``member_id`` and return what it acquired.

        ``batches`` are the (base offset, last offset) of the record batches the read from
        ``fetch_offset`` returned, in order; offsets between ``fetch_offset`` and the first
        base offset are not in the log and are archived. Within [first base, last offset]
        AVAILABLE records of the window and new records past it are acquired, in offset
        order, until ``max_records`` records are acquired; the cut is rounded up to the end
        of the batch it falls in (the response carries whole batches, as in Kafka). New
        records are also bounded, the same way, by ``max_record_locks`` records in the
        window. ``aborted`` are the offset ranges of batches of aborted transactions
        (read_committed): those records are archived, never delivered.
        """
        if not batches or max_records <= 0:
            return []
        self._archive_missing(fetch_offset, batches[0][0])
        first = max(batches[0][0], self._start)
        last = batches[-1][1]
        if last < first:
            return []
        bases = [base for base, _ in batches]

        def cut(offset: int, records: int) -> int:
            """The last offset to acquire ``records`` from ``offset``: a batch is not split."""
            end = offset + records - 1
            i = bisect_right(bases, end) - 1
            return max(end, batches[i][1]) if i >= 0 else end

        ranges: list[tuple[int, int]] = []
        budget = max_records
        i = self._index(first) if first < self._end else len(self._runs)
        while budget > 0 and i < len(self._runs) and self._runs[i].first <= last:
            run = self._runs[i]
            if run.state is RecordState.AVAILABLE:
                lo, hi = max(run.first, first), min(run.last, last)
                if hi - lo + 1 > budget:
                    hi = min(hi, cut(lo, budget))
                ranges.append((lo, hi))
                budget -= hi - lo + 1
            i += 1
        lo = max(first, self._end)
        room = min(budget, self.max_record_locks - self.in_flight_count())
        if room > 0 and lo <= last:
            hi = last if last - lo + 1 <= room else min(last, cut(lo, room))
            self._append(_Run(lo, hi, RecordState.AVAILABLE, 0))
            ranges.append((lo, hi))

        deadline_ms = now_ms + self.record_lock_duration_ms
        acquired: list[AcquiredRecords] = []
        for lo, hi in ranges:
            for a, b, is_aborted in _split_by(lo, hi, aborted):
                if is_aborted:
                    self._update(a, b, lambda run: _finish(run, RecordState.ARCHIVED))
                else:
                    self._update(a, b, lambda run: _lock(run, member_id, deadline_ms))
                    acquired.extend(self._acquired_in(a, b))
        if acquired and (self._next_deadline_ms is None or deadline_ms < self._next_deadline_ms):
            self._next_deadline_ms = deadline_ms
        self._advance()
        return _merge_acquired(acquired)

    def acknowledge(self, member_id: str, batches: Sequence[AcknowledgementBatch]) -> ErrorCode:
        """Apply a member's acknowledgements, all or none; the partition's error code.

        INVALID_REQUEST: batches unsorted or overlapping, a types array neither of length 1
        nor one type per offset, an unknown type, or offsets past SPEO. INVALID_RECORD_STATE:
        a record of the window not ACQUIRED by ``member_id``. Offsets below SPSO are done
        already, and offsets the log does not have were never delivered: both are skipped
        (Kafka skips offsets that fall between its cached batches alike).
        """
        previous_last = -1
        for batch in batches:
            first, last, types = batch
            if first <= previous_last or last < first or last >= self._end:
                return ErrorCode.invalid_request
            if len(types) not in (1, last - first + 1):
                return ErrorCode.invalid_request
            if any(t not in _ACK_STATE for t in types):
                return ErrorCode.invalid_request
            previous_last = last
        for batch in batches:
            first = max(batch.first_offset, self._start)
            if first > batch.last_offset:
                continue
            i = self._index(first)
            while i < len(self._runs) and self._runs[i].first <= batch.last_offset:
                run = self._runs[i]
                held = run.state is RecordState.ACQUIRED and run.member_id == member_id
                if not held and not _absent(run):
                    return ErrorCode.invalid_record_state
                i += 1
        for batch in batches:
            for a, b, ack_type in _type_runs(batch):
                a = max(a, self._start)
                if a <= b:
                    self._update(a, b, partial(self._acknowledge, ack_type=ack_type))
        self._advance()
        return ErrorCode.none

    def expire(self, now_ms: int) -> int | None:
        """Release the records whose acquisition lock has run out at ``now_ms`` (as a RELEASE:
        AVAILABLE, or ARCHIVED at the delivery count limit); the next lock deadline, if any."""
        if self._next_deadline_ms is None or now_ms < self._next_deadline_ms:
            return self._next_deadline_ms
        next_deadline_ms: int | None = None
        for run in self._runs:
            if run.state is not RecordState.ACQUIRED:
                continue
            assert run.deadline_ms is not None
            if run.deadline_ms <= now_ms:
                self._settle(run, RecordState.AVAILABLE)
            elif next_deadline_ms is None or run.deadline_ms < next_deadline_ms:
                next_deadline_ms = run.deadline_ms
        self._next_deadline_ms = next_deadline_ms
        self._coalesce(0, len(self._runs))
        self._advance()
        return next_deadline_ms

    def release_member(self, member_id: str) -> bool:
        """Release every record ``member_id`` holds (it left the group or closed its share
        session), as a RELEASE; whether it held any."""
        released = False
        for run in self._runs:
            if run.state is RecordState.ACQUIRED and run.member_id == member_id:
                self._settle(run, RecordState.AVAILABLE)
                released = True
        if released:
            self._coalesce(0, len(self._runs))
            self._advance()
        return released

    def move_start(self, log_start_offset: int) -> None:
        """The log start moved (retention, DeleteRecords): records before it are gone, and
        archived whatever their state; an owner's later acknowledgement of them is skipped."""
        if log_start_offset <= self._start:
            return
        if log_start_offset >= self._end:
            self._runs.clear()
            self._firsts.clear()
            self._start = self._end = log_start_offset
            return
        self._split(log_start_offset)
        i = self._index(log_start_offset)
        del self._runs[:i], self._firsts[:i]
        self._start = log_start_offset
        self._advance()

    def export(self) -> tuple[int, list[StateBatch]]:
        """The state to persist: SPSO and the window's batches. ACQUIRED records are written
        as AVAILABLE with their delivery count: a new leader cannot know the lock."""
        batches: list[StateBatch] = []
        for run in self._runs:
            state = RecordState.AVAILABLE if run.state is RecordState.ACQUIRED else run.state
            last = batches[-1] if batches else None
            if last and (last.delivery_state, last.delivery_count) == (state, run.count):
                batches[-1] = last._replace(last_offset=run.last)
            else:
                batches.append(StateBatch(run.first, run.last, int(state), run.count))
        return self._start, batches

    def _acknowledge(self, run: _Run, ack_type: int) -> None:
        if run.state is RecordState.ACQUIRED:
            self._settle(run, _ACK_STATE[AcknowledgeType(ack_type)])

    def _settle(self, run: _Run, state: RecordState) -> None:
        """End an acquisition: ``state``, but a release at the delivery count limit archives."""
        if state is RecordState.AVAILABLE and run.count >= self.delivery_count_limit:
            state = RecordState.ARCHIVED
        _finish(run, state)

    def _archive_missing(self, fetch_offset: int, first_base: int) -> None:
        """Archive the offsets a read from ``fetch_offset`` skipped: they are not in the log
        (compacted, deleted, or never written)."""
        lo = max(min(fetch_offset, self._end), self._start)
        if first_base <= lo:
            return
        window_hi = min(first_base, self._end) - 1
        if lo <= window_hi:
            self._update(
                lo,
                window_hi,
                lambda run: (
                    _finish(run, RecordState.ARCHIVED)
                    if run.state is RecordState.AVAILABLE
                    else None
                ),
            )
        if first_base > self._end:
            self._append(_Run(self._end, first_base - 1, RecordState.ARCHIVED, 0))
        self._advance()

    def _acquired_in(self, first: int, last: int) -> list[AcquiredRecords]:
        i = self._index(first)
        out = []
        while i < len(self._runs) and self._runs[i].first <= last:
            run = self._runs[i]
            out.append(AcquiredRecords(max(run.first, first), min(run.last, last), run.count))
            i += 1
        return out

    def _index(self, offset: int) -> int:
        """The index of the run holding ``offset`` (in the window)."""
        return bisect_right(self._firsts, offset) - 1

    def _split(self, offset: int) -> None:
        """Start a run at ``offset`` (in the window)."""
        i = self._index(offset)
        run = self._runs[i]
        if run.first == offset:
            return
        tail = _Run(offset, run.last, run.state, run.count, run.member_id, run.deadline_ms)
        run.last = offset - 1
        self._runs.insert(i + 1, tail)
        self._firsts.insert(i + 1, offset)

    def _update(self, first: int, last: int, change: Callable[[_Run], object]) -> None:
        """Apply ``change`` to each run of records ``first``..``last`` (in the window), split
        out first, then merge equal neighbours again."""
        self._split(first)
        if last + 1 < self._end:
            self._split(last + 1)
        i = self._index(first)
        j = self._index(last) + 1
        for run in self._runs[i:j]:
            change(run)
        self._coalesce(i, j)

    def _coalesce(self, i: int, j: int) -> None:
        """Merge equal neighbours among runs i..j-1 and the runs either side of them."""
        lo, hi = max(i - 1, 0), min(j + 1, len(self._runs))
        merged: list[_Run] = []
        for run in self._runs[lo:hi]:
            if merged and merged[-1].same_as(run):
                merged[-1].last = run.last
            else:
                merged.append(run)
        if len(merged) != hi - lo:
            self._runs[lo:hi] = merged
            self._firsts[lo:hi] = [run.first for run in merged]

    def _append(self, run: _Run) -> None:
        self._runs.append(run)
        self._firsts.append(run.first)
        self._end = run.last + 1
        self._coalesce(len(self._runs) - 1, len(self._runs))

    def _advance(self) -> None:
        """Move SPSO past the leading acknowledged and archived records, dropping their state."""
        k = 0
        while k < len(self._runs) and self._runs[k].state in _FINAL:
            k += 1
        if k:
            self._start = self._runs[k].first if k < len(self._runs) else self._end
            del self._runs[:k], self._firsts[:k]


def _absent(run: _Run) -> bool:
    """Archived without ever being delivered: offsets a read found missing from the log, or
    records of aborted transactions."""
    return run.state is RecordState.ARCHIVED and run.count == 0


def _lock(run: _Run, member_id: str, deadline_ms: int) -> None:
    run.state = RecordState.ACQUIRED
    run.count += 1
    run.member_id = member_id
    run.deadline_ms = deadline_ms


def _finish(run: _Run, state: RecordState) -> None:
    run.state = state
    run.member_id = None
    run.deadline_ms = None


def _split_by(
    first: int, last: int, ranges: Sequence[tuple[int, int]]
) -> list[tuple[int, int, bool]]:
    """``first``..``last`` cut into pieces inside or outside ``ranges``, in order."""
    cuts = sorted((max(a, first), min(b, last)) for a, b in ranges if a <= last and b >= first)
    pieces: list[tuple[int, int, bool]] = []
    position = first
    for a, b in cuts:
        if b < position:
            continue
        a = max(a, position)
        if a > position:
            pieces.append((position, a - 1, False))
        pieces.append((a, b, True))
        position = b + 1
    if position <= last:
        pieces.append((position, last, False))
    return pieces


def _type_runs(batch: AcknowledgementBatch) -> list[tuple[int, int, int]]:
    """An acknowledgement batch as (first, last, type) ranges of one type each."""
    first, last, types = batch
    if len(types) == 1:
        return [(first, last, types[0])]
    out: list[tuple[int, int, int]] = []
    start = first
    for offset in range(first + 1, last + 2):
        if offset > last or types[offset - first] != types[start - first]:
            out.append((start, offset - 1, types[start - first]))
            start = offset
    return out


def _merge_acquired(acquired: list[AcquiredRecords]) -> list[AcquiredRecords]:
    """Join adjacent acquired ranges of one delivery count."""
    merged: list[AcquiredRecords] = []
    for records in acquired:
        previous = merged[-1] if merged else None
        if (
            previous is not None
            and previous.last_offset + 1 == records.first_offset
            and previous.delivery_count == records.delivery_count
        ):
            merged[-1] = previous._replace(last_offset=records.last_offset)
        else:
            merged.append(records)
    return merged
