"""replica/share_partition.py: Kafka's SharePartitionTest cases that fit the pure window (as
tables), and random runs of fetches, acknowledgements, lock expiry, member departures and log
start moves checked against a per-offset shadow of what each call returned."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from gregor.replica.share_partition import (
    AcknowledgementBatch,
    AcquiredRecords,
    RecordState,
    SharePartition,
    StateBatch,
)

A = "member-a"
B = "member-b"
ACCEPT, RELEASE, REJECT, GAP = 1, 2, 3, 0
AVAILABLE = RecordState.AVAILABLE
ACQUIRED = RecordState.ACQUIRED
ACKNOWLEDGED = RecordState.ACKNOWLEDGED
ARCHIVED = RecordState.ARCHIVED
LOCK_MS = 30_000


def ack(first: int, last: int, *types: int) -> AcknowledgementBatch:
    return AcknowledgementBatch(first, last, list(types))


def states(sp: SharePartition) -> list[tuple[int, int, RecordState, int, str | None]]:
    return [
        (r.first_offset, r.last_offset, r.state, r.delivery_count, r.member_id)
        for r in sp.in_flight()
    ]


def fetch(
    sp: SharePartition, member: str, batches: list[tuple[int, int]], **kw: Any
) -> list[tuple[int, int, int]]:
    """Acquire a read from next_fetch_offset(), as the share-partition manager does."""
    max_records = kw.pop("max_records", 500)
    now_ms = kw.pop("now_ms", 0)
    got = sp.acquire(member, sp.next_fetch_offset(), batches, max_records, now_ms, **kw)
    return [tuple(r) for r in got]


# --- acquire -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "batches", "max_records", "locks", "acquired", "window"),
    [
        # testAcquireSingleRecord / testAcquireMultipleRecords
        ("single batch", [(10, 14)], 500, 2000, [(10, 14, 1)], (10, 15)),
        ("several batches", [(10, 14), (15, 19), (20, 29)], 500, 2000, [(10, 29, 1)], (10, 30)),
        # testAcquireWithMaxFetchRecords: a soft limit, whole batches
        (
            "max records cut at batch end",
            [(10, 14), (15, 19), (20, 24)],
            7,
            2000,
            [(10, 19, 1)],
            (10, 20),
        ),
        ("max records at batch end", [(10, 14), (15, 19)], 5, 2000, [(10, 14, 1)], (10, 15)),
        # testAcquireWithMaxInFlightRecords...: bounded by the record locks, whole batches
        ("record locks bound", [(0, 4), (5, 9), (10, 14)], 500, 7, [(0, 9, 1)], (0, 10)),
        ("record locks exactly", [(0, 4), (5, 9), (10, 14)], 500, 10, [(0, 9, 1)], (0, 10)),
        # the read skipped offsets 0-9: not in the log, SPSO starts at the first record
        ("leading gap", [(10, 14)], 500, 2000, [(10, 14, 1)], (10, 15)),
    ],
)
def test_acquire_new_records(
    name: str,
    batches: list[tuple[int, int]],
    max_records: int,
    locks: int,
    acquired: list[tuple[int, int, int]],
    window: tuple[int, int],
) -> None:
    sp = SharePartition(batches[0][0] if name != "leading gap" else 0, max_record_locks=locks)
    assert fetch(sp, A, batches, max_records=max_records) == acquired, name
    assert (sp.start_offset, sp.end_offset) == window
    assert sp.next_fetch_offset() == window[1]


def test_acquire_nothing() -> None:
    sp = SharePartition(0)
    assert sp.acquire(A, 0, [], 500, 0) == []
    assert sp.acquire(A, 0, [(0, 4)], 0, 0) == []
    assert (sp.start_offset, sp.end_offset) == (0, 0)


def test_acquire_at_record_lock_limit_only_reacquires_inside_window() -> None:
    # testAcquireWithMaxInFlightRecordsReleaseBatchAndAcquireSubset: at the limit, released
    # records inside the window go out again, nothing past it.
    sp = SharePartition(0, max_record_locks=20)
    assert fetch(sp, A, [(0, 9), (10, 19)]) == [(0, 19, 1)]
    assert fetch(sp, A, [(20, 29)]) == []
    assert sp.acknowledge(A, [ack(5, 7, RELEASE)]) == ErrorCode.none
    assert sp.next_fetch_offset() == 5
    assert fetch(sp, B, [(0, 9), (10, 19), (20, 29)]) == [(5, 7, 2)]
    assert sp.end_offset == 20


def test_acquire_released_subset_of_batch() -> None:
    # testAcquireReleasedRecord
    sp = SharePartition(10)
    assert fetch(sp, A, [(10, 14)]) == [(10, 14, 1)]
    assert sp.acknowledge(A, [ack(12, 13, RELEASE)]) == ErrorCode.none
    assert sp.next_fetch_offset() == 12
    assert states(sp) == [
        (10, 11, ACQUIRED, 1, A),
        (12, 13, AVAILABLE, 1, None),
        (14, 14, ACQUIRED, 1, A),
    ]
    assert fetch(sp, A, [(10, 14)]) == [(12, 13, 2)]
    assert sp.next_fetch_offset() == 15


def test_acquire_released_records_across_batches_and_gap() -> None:
    # testAcquireReleasedRecordMultipleBatches: the log has no offsets 20-22.
    sp = SharePartition(10)
    for batch in [(10, 14), (15, 19), (23, 27), (28, 32)]:
        assert fetch(sp, A, [batch]) == [(batch[0], batch[1], 1)]
    assert sp.next_fetch_offset() == 33
    assert sp.acknowledge(A, [ack(12, 30, RELEASE)]) == ErrorCode.none
    assert sp.next_fetch_offset() == 12
    assert states(sp) == [
        (10, 11, ACQUIRED, 1, A),
        (12, 19, AVAILABLE, 1, None),
        (20, 22, ARCHIVED, 0, None),
        (23, 30, AVAILABLE, 1, None),
        (31, 32, ACQUIRED, 1, A),
    ]
    # Re-acquired in offset order, the missing offsets left alone.
    assert fetch(sp, B, [(10, 14), (15, 19), (23, 27), (28, 32)]) == [(12, 19, 2), (23, 30, 2)]


def test_acquire_max_records_on_released_records_cuts_at_batch_end() -> None:
    sp = SharePartition(0)
    assert fetch(sp, A, [(0, 9), (10, 19), (20, 29)]) == [(0, 29, 1)]
    assert sp.acknowledge(A, [ack(0, 29, RELEASE)]) == ErrorCode.none
    assert fetch(sp, B, [(0, 9), (10, 19), (20, 29)], max_records=12) == [(0, 19, 2)]
    assert fetch(sp, A, [(20, 29)], max_records=1) == [(20, 29, 2)]


def test_read_committed_aborted_records_are_archived() -> None:
    # testAcquireWithReadCommittedIsolationLevel: a transaction at 0-2 aborted (marker 3),
    # then a plain record at 4; the marker is delivered and reported as a gap by the client.
    sp = SharePartition(0)
    assert fetch(sp, A, [(0, 2), (3, 3), (4, 4)], aborted=[(0, 2)]) == [(3, 4, 1)]
    assert sp.start_offset == 3
    assert states(sp) == [(3, 4, ACQUIRED, 1, A)]
    # Aborted batches in the middle of a read.
    sp = SharePartition(0)
    got = fetch(sp, A, [(0, 4), (5, 9), (10, 14), (15, 19)], aborted=[(5, 9), (15, 19)])
    assert got == [(0, 4, 1), (10, 14, 1)]
    assert [s[:3] for s in states(sp)] == [
        (0, 4, ACQUIRED),
        (5, 9, ARCHIVED),
        (10, 14, ACQUIRED),
        (15, 19, ARCHIVED),
    ]
    assert sp.acknowledge(A, [ack(0, 14, ACCEPT)]) == ErrorCode.none
    assert (sp.start_offset, sp.end_offset) == (20, 20)


def test_read_skipping_released_records_archives_them() -> None:
    # Compaction removed 2-4 after they were released: the read from 2 starts at 5.
    sp = SharePartition(0)
    assert fetch(sp, A, [(0, 9)]) == [(0, 9, 1)]
    assert sp.acknowledge(A, [ack(0, 1, ACCEPT), ack(2, 4, RELEASE)]) == ErrorCode.none
    assert sp.next_fetch_offset() == 2
    assert sp.acquire(B, 2, [(5, 9)], 500, 0) == []
    assert sp.start_offset == 5
    assert states(sp) == [(5, 9, ACQUIRED, 1, A)]


# --- acknowledge ---------------------------------------------------------------------------


def three_batches() -> SharePartition:
    """5-9 and 10-14 acquired by A, 15-19 by B."""
    sp = SharePartition(5)
    assert fetch(sp, A, [(5, 9)]) == [(5, 9, 1)]
    assert fetch(sp, A, [(10, 14)]) == [(10, 14, 1)]
    assert fetch(sp, B, [(15, 19)]) == [(15, 19, 1)]
    return sp


@pytest.mark.parametrize(
    ("name", "batches", "error"),
    [
        ("accept all of A", [ack(5, 14, ACCEPT)], ErrorCode.none),
        ("per offset types", [ack(5, 9, ACCEPT, REJECT, GAP, RELEASE, ACCEPT)], ErrorCode.none),
        ("partly below SPSO", [ack(0, 9, ACCEPT)], ErrorCode.none),
        ("wholly below SPSO", [ack(0, 4, ACCEPT)], ErrorCode.none),
        # testAcknowledgeRollbackWith...: one bad batch fails them all
        (
            "records of another member",
            [ack(5, 9, RELEASE), ack(10, 19, ACCEPT)],
            ErrorCode.invalid_record_state,
        ),
        ("member not the owner", [ack(15, 19, ACCEPT)], ErrorCode.invalid_record_state),
        ("past the end", [ack(10, 20, ACCEPT)], ErrorCode.invalid_request),
        ("wholly past the end", [ack(30, 35, ACCEPT)], ErrorCode.invalid_request),
        ("overlapping", [ack(5, 9, ACCEPT), ack(9, 12, ACCEPT)], ErrorCode.invalid_request),
        ("unsorted", [ack(10, 14, ACCEPT), ack(5, 9, ACCEPT)], ErrorCode.invalid_request),
        ("types too short", [ack(5, 9, ACCEPT, ACCEPT)], ErrorCode.invalid_request),
        ("types too long", [ack(5, 6, ACCEPT, ACCEPT, ACCEPT)], ErrorCode.invalid_request),
        ("no types", [ack(5, 9)], ErrorCode.invalid_request),
        ("unknown type", [ack(5, 9, 4)], ErrorCode.invalid_request),
        ("first after last", [ack(9, 5, ACCEPT)], ErrorCode.invalid_request),
    ],
)
def test_acknowledge_errors_are_all_or_nothing(
    name: str, batches: list[AcknowledgementBatch], error: ErrorCode
) -> None:
    sp = three_batches()
    before = states(sp)
    assert sp.acknowledge(A, batches) == error, name
    if error != ErrorCode.none:
        assert states(sp) == before


@pytest.mark.parametrize(
    ("ack_type", "state", "start"),
    [
        (ACCEPT, ACKNOWLEDGED, 10),
        (REJECT, ARCHIVED, 10),
        (GAP, ARCHIVED, 10),
        (RELEASE, AVAILABLE, 5),
    ],
)
def test_acknowledge_transitions(ack_type: int, state: RecordState, start: int) -> None:
    sp = SharePartition(5)
    fetch(sp, A, [(5, 9), (10, 14)])
    assert sp.acknowledge(A, [ack(5, 9, ack_type)]) == ErrorCode.none
    assert sp.start_offset == start
    if start == 5:
        assert states(sp)[0] == (5, 9, state, 1, None)


def test_acknowledge_twice_is_invalid_record_state() -> None:
    # testAcknowledgeSameBatchAgain / testAcknowledgeMultipleSubsetBatches
    sp = SharePartition(5)
    fetch(sp, A, [(5, 9)])
    assert sp.acknowledge(A, [ack(5, 9, RELEASE)]) == ErrorCode.none
    assert sp.acknowledge(A, [ack(5, 9, ACCEPT)]) == ErrorCode.invalid_record_state
    assert fetch(sp, A, [(5, 9)]) == [(5, 9, 2)]
    assert sp.acknowledge(A, [ack(6, 8, REJECT)]) == ErrorCode.none
    assert sp.acknowledge(A, [ack(6, 8, REJECT)]) == ErrorCode.invalid_record_state
    assert states(sp) == [(5, 5, ACQUIRED, 2, A), (6, 8, ARCHIVED, 2, None), (9, 9, ACQUIRED, 2, A)]


def test_start_offset_advances_over_leading_final_records() -> None:
    # testAcknowledgeBatchAndOffsetPostLsoMovement-like: SPSO stops at the first record not
    # yet done and moves on when it is; the window empties when all are done.
    sp = SharePartition(0)
    fetch(sp, A, [(0, 9), (10, 19)])
    assert sp.acknowledge(A, [ack(10, 19, ACCEPT)]) == ErrorCode.none
    assert sp.start_offset == 0
    assert (
        sp.acknowledge(A, [ack(0, 9, ACCEPT, ACCEPT, REJECT, RELEASE, *[ACCEPT] * 6)])
        == ErrorCode.none
    )
    assert sp.start_offset == 3
    assert states(sp) == [(3, 3, AVAILABLE, 1, None), (4, 19, ACKNOWLEDGED, 1, None)]
    assert fetch(sp, B, [(0, 9)]) == [(3, 3, 2)]
    assert sp.acknowledge(B, [ack(3, 3, ACCEPT)]) == ErrorCode.none
    assert (sp.start_offset, sp.end_offset, states(sp)) == (20, 20, [])
    assert fetch(sp, A, [(20, 24)]) == [(20, 24, 1)]


# --- delivery count limit, lock expiry, members leaving ------------------------------------


def test_release_at_delivery_count_limit_archives() -> None:
    # testAcquireReleaseAcquireMaxDeliveryCount...: limit 2
    sp = SharePartition(0, delivery_count_limit=2)
    fetch(sp, A, [(0, 4), (5, 9)])
    assert sp.acknowledge(A, [ack(0, 9, RELEASE)]) == ErrorCode.none
    assert fetch(sp, A, [(0, 4), (5, 9)]) == [(0, 9, 2)]
    assert sp.acknowledge(A, [ack(0, 4, RELEASE), ack(5, 9, ACCEPT)]) == ErrorCode.none
    assert (sp.start_offset, sp.end_offset) == (10, 10)
    assert sp.next_fetch_offset() == 10


def test_lock_expiry_releases_records() -> None:
    # testAcquisitionLockOnAcquiringSingleRecord / ...MultipleRecords
    sp = SharePartition(0, record_lock_duration_ms=100)
    assert sp.expire(0) is None
    assert sp.acquire(A, 0, [(0, 4)], 500, 1000) == [AcquiredRecords(0, 4, 1)]
    assert sp.acquire(B, 5, [(5, 9)], 500, 1050) == [AcquiredRecords(5, 9, 1)]
    assert sp.expire(1099) == 1100
    assert states(sp)[0] == (0, 4, ACQUIRED, 1, A)
    assert sp.expire(1100) == 1150
    assert states(sp) == [(0, 4, AVAILABLE, 1, None), (5, 9, ACQUIRED, 1, B)]
    assert sp.next_fetch_offset() == 0
    # An acknowledgement after the lock expired is refused.
    assert sp.acknowledge(A, [ack(0, 4, ACCEPT)]) == ErrorCode.invalid_record_state
    assert sp.expire(5000) is None
    assert states(sp) == [(0, 9, AVAILABLE, 1, None)]


def test_lock_expiry_of_partly_acknowledged_batch() -> None:
    # testAcquisitionLockOnTimeoutForSubsetAcknowledgement...: only the still acquired expire
    sp = SharePartition(0, record_lock_duration_ms=100)
    sp.acquire(A, 0, [(0, 9)], 500, 0)
    assert sp.acknowledge(A, [ack(0, 1, ACCEPT), ack(4, 5, REJECT)]) == ErrorCode.none
    assert sp.start_offset == 2
    assert sp.expire(100) is None
    assert states(sp) == [
        (2, 3, AVAILABLE, 1, None),
        (4, 5, ARCHIVED, 1, None),
        (6, 9, AVAILABLE, 1, None),
    ]


def test_lock_expiry_at_delivery_count_limit_archives() -> None:
    # testAcquisitionLockTimeoutCauseMaxDeliveryCountExceed
    sp = SharePartition(0, delivery_count_limit=2, record_lock_duration_ms=100)
    sp.acquire(A, 0, [(0, 9)], 500, 0)
    assert sp.expire(100) is None
    assert sp.acquire(B, 0, [(0, 9)], 500, 200) == [AcquiredRecords(0, 9, 2)]
    assert sp.expire(300) is None
    assert (sp.start_offset, sp.end_offset, states(sp)) == (10, 10, [])


def test_release_member() -> None:
    # testReleaseSingleRecordBatch / testReleaseAcquiredRecordsPartial...
    sp = three_batches()
    assert sp.acknowledge(A, [ack(5, 6, ACCEPT)]) == ErrorCode.none
    assert sp.release_member(A) is True
    assert sp.release_member(A) is False
    assert states(sp) == [(7, 14, AVAILABLE, 1, None), (15, 19, ACQUIRED, 1, B)]
    assert sp.next_fetch_offset() == 7


def test_release_member_at_delivery_count_limit_archives() -> None:
    sp = SharePartition(0, delivery_count_limit=1)
    fetch(sp, A, [(0, 4)])
    fetch(sp, B, [(5, 9)])
    assert sp.release_member(A)
    assert sp.start_offset == 5


# --- log start moves -----------------------------------------------------------------------


def test_move_start_archives_records_before_log_start() -> None:
    # testLsoMovementOnInitialization... / testLsoMovementForArchivingBatches: the owner's
    # later acknowledgement of records now below SPSO is skipped, not an error.
    sp = SharePartition(0)
    fetch(sp, A, [(0, 9), (10, 19)])
    sp.move_start(5)
    assert sp.start_offset == 5
    sp.move_start(3)
    assert sp.start_offset == 5
    assert sp.acknowledge(A, [ack(0, 9, ACCEPT)]) == ErrorCode.none
    assert sp.start_offset == 10
    sp.move_start(30)
    assert (sp.start_offset, sp.end_offset, states(sp)) == (30, 30, [])
    assert sp.acknowledge(A, [ack(10, 19, ACCEPT)]) == ErrorCode.none


# --- initialization and export -------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "start", "batches", "window", "runs"),
    [
        # testMaybeInitialize
        (
            "acknowledged and archived behind available",
            5,
            [StateBatch(5, 10, 0, 2), StateBatch(11, 15, 4, 3)],
            (5, 16),
            [(5, 10, AVAILABLE, 2, None), (11, 15, ARCHIVED, 3, None)],
        ),
        ("no state", 7, [], (7, 7), []),
        # testMaybeInitializeWithNoOpStatePersister...: done batches at the front are passed
        (
            "leading final",
            10,
            [StateBatch(10, 14, 2, 1), StateBatch(15, 19, 0, 1)],
            (15, 20),
            [(15, 19, AVAILABLE, 1, None)],
        ),
        ("all final", 10, [StateBatch(10, 14, 2, 1), StateBatch(15, 19, 4, 5)], (20, 20), []),
        # testMaybeInitializeStateBatchesWithGapAtBeginning / ...InMiddle: unknown offsets
        # are delivered as new
        (
            "gaps",
            10,
            [StateBatch(15, 19, 2, 1), StateBatch(25, 29, 0, 3)],
            (10, 30),
            [
                (10, 14, AVAILABLE, 0, None),
                (15, 19, ACKNOWLEDGED, 1, None),
                (20, 24, AVAILABLE, 0, None),
                (25, 29, AVAILABLE, 3, None),
            ],
        ),
        (
            "batch straddling start",
            12,
            [StateBatch(10, 14, 0, 2)],
            (12, 15),
            [(12, 14, AVAILABLE, 2, None)],
        ),
        ("batch below start", 20, [StateBatch(10, 14, 0, 2)], (20, 20), []),
    ],
)
def test_initialize(
    name: str,
    start: int,
    batches: list[StateBatch],
    window: tuple[int, int],
    runs: list[tuple[int, int, RecordState, int, str | None]],
) -> None:
    sp = SharePartition(start, batches)
    assert (sp.start_offset, sp.end_offset) == window, name
    assert states(sp) == runs


@pytest.mark.parametrize(
    "batches",
    [
        [StateBatch(10, 14, 0, 1), StateBatch(12, 16, 0, 1)],
        [StateBatch(15, 19, 0, 1), StateBatch(10, 14, 0, 1)],
        [StateBatch(10, 14, 1, 1)],
        [StateBatch(10, 14, 3, 1)],
    ],
)
def test_initialize_rejects_bad_state(batches: list[StateBatch]) -> None:
    with pytest.raises(ValueError):
        SharePartition(10, batches)


def test_gap_at_initialization_is_acquired_then_delivered() -> None:
    sp = SharePartition(10, [StateBatch(15, 19, 2, 1)])
    assert sp.next_fetch_offset() == 10
    assert fetch(sp, A, [(10, 14), (15, 19), (20, 24)]) == [(10, 14, 1), (20, 24, 1)]
    assert sp.acknowledge(A, [ack(10, 14, ACCEPT)]) == ErrorCode.none
    assert sp.start_offset == 20


def test_export() -> None:
    sp = three_batches()
    types = (ACCEPT, RELEASE, REJECT, ACCEPT, ACCEPT)
    assert sp.acknowledge(A, [ack(5, 9, *types)]) == ErrorCode.none
    assert sp.export() == (
        6,
        [
            StateBatch(6, 6, 0, 1),
            StateBatch(7, 7, 4, 1),
            StateBatch(8, 9, 2, 1),
            # ACQUIRED records are persisted as available, with their delivery count.
            StateBatch(10, 19, 0, 1),
        ],
    )


# --- properties ----------------------------------------------------------------------------

LOG_END = 60
BATCH = 4  # the simulated log has batches 0-3, 4-7, ...
MEMBERS = ("m0", "m1", "m2")


@dataclass
class Shadow:
    """Per offset, what the calls' results say: owner and lock deadline, delivery count, done."""

    owner: dict[int, str] = field(default_factory=dict)
    deadline: dict[int, int] = field(default_factory=dict)
    count: dict[int, int] = field(default_factory=dict)
    done: set[int] = field(default_factory=set)

    def release(self, offset: int, limit: int) -> None:
        del self.owner[offset], self.deadline[offset]
        if self.count[offset] >= limit:
            self.done.add(offset)


def expand(sp: SharePartition) -> dict[int, tuple[RecordState, int, str | None]]:
    return {
        o: (r.state, r.delivery_count, r.member_id)
        for r in sp.in_flight()
        for o in range(r.first_offset, r.last_offset + 1)
    }


def log_batches(fetch_offset: int, count: int) -> list[tuple[int, int]]:
    first = fetch_offset - fetch_offset % BATCH
    return [(b, min(b + BATCH - 1, LOG_END - 1)) for b in range(first, LOG_END, BATCH)][:count]


op = st.one_of(
    st.tuples(st.just("acquire"), st.sampled_from(MEMBERS), st.integers(1, 6), st.integers(1, 30)),
    st.tuples(
        st.just("ack"),
        st.sampled_from(MEMBERS),
        st.integers(0, LOG_END),
        st.integers(0, 12),
        st.lists(st.integers(0, 3), min_size=1, max_size=13),
    ),
    st.tuples(st.just("expire"), st.sampled_from([0, 5, 10, 20])),
    st.tuples(st.just("leave"), st.sampled_from(MEMBERS)),
    st.tuples(st.just("move_start"), st.integers(0, LOG_END)),
)


@settings(max_examples=500, deadline=None)
@given(st.lists(op, max_size=60), st.integers(2, 4), st.integers(5, 30))
def test_random_operations_keep_the_invariants(
    ops: list[tuple[Any, ...]], limit: int, locks: int
) -> None:
    sp = SharePartition(
        0, delivery_count_limit=limit, max_record_locks=locks, record_lock_duration_ms=10
    )
    shadow = Shadow()
    now = 0
    for step in ops:
        before = expand(sp)
        start_before, end_before = sp.start_offset, sp.end_offset
        kind = step[0]
        if kind == "acquire":
            _, member, n_batches, max_records = step
            fetch_offset = sp.next_fetch_offset()
            got = sp.acquire(
                member, fetch_offset, log_batches(fetch_offset, n_batches), max_records, now
            )
            for first, last, count in got:
                for o in range(first, last + 1):
                    # never acquired by two members at once, nor once done
                    assert o not in shadow.owner and o not in shadow.done and o >= start_before
                    assert count == shadow.count.get(o, 0) + 1
                    shadow.owner[o], shadow.deadline[o], shadow.count[o] = member, now + 10, count
        elif kind == "ack":
            _, member, pick, length, types = step
            held = sorted(o for o, m in shadow.owner.items() if m == member)
            first = held[pick % len(held)] if held and pick % 4 else pick
            last = first + length
            types = types[:1] if len(types) != length + 1 else types
            error = sp.acknowledge(member, [ack(first, last, *types)])
            window = [o for o in range(max(first, start_before), last + 1) if o in before]
            absent = {o for o in window if before[o] == (ARCHIVED, 0, None)}
            if last >= end_before:
                assert error == ErrorCode.invalid_request
            elif all(shadow.owner.get(o) == member for o in window if o not in absent):
                assert error == ErrorCode.none
                for o in window:
                    if o in absent:
                        continue
                    if (types[0] if len(types) == 1 else types[o - first]) == RELEASE:
                        shadow.release(o, limit)
                    else:
                        del shadow.owner[o], shadow.deadline[o]
                        shadow.done.add(o)
            else:
                assert error == ErrorCode.invalid_record_state
        elif kind == "expire":
            now += step[1]
            sp.expire(now)
            for o in [o for o, d in shadow.deadline.items() if d <= now]:
                shadow.release(o, limit)
        elif kind == "leave":
            sp.release_member(step[1])
            for o in [o for o, m in shadow.owner.items() if m == step[1]]:
                shadow.release(o, limit)
        else:
            sp.move_start(step[1])
            for o in range(start_before, step[1]):
                shadow.owner.pop(o, None)
                shadow.deadline.pop(o, None)
                shadow.done.add(o)

        runs = sp.in_flight()
        # the runs cover the window exactly, and the first is not done
        bounds = [sp.start_offset] + [r.last_offset + 1 for r in runs]
        assert [r.first_offset for r in runs] == bounds[:-1]
        assert bounds[-1] == sp.end_offset
        assert not runs or runs[0].state in (AVAILABLE, ACQUIRED)
        assert sp.start_offset >= start_before
        for o, (state, count, member) in expand(sp).items():
            assert count >= before.get(o, (AVAILABLE, 0, None))[1]  # counts never decrease
            assert (state is ACQUIRED) == (o in shadow.owner)
            assert member == shadow.owner.get(o)
            assert count == shadow.count.get(o, 0)
            if o in shadow.done:
                assert state in (ACKNOWLEDGED, ARCHIVED)
        # every offset below SPSO is done: nothing below it is held
        assert all(o >= sp.start_offset for o in shadow.owner)
        assert sp.in_flight_count() <= locks + BATCH - 1  # whole batches past the bound
        # the exported state round-trips through initialization
        start, batches = sp.export()
        assert SharePartition(start, batches).export() == (start, batches)
