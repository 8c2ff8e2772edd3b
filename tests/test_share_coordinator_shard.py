"""The share coordinator's decisions without a broker (coordinator/share_shard.py,
coordinator/share_batches.py): batch merging as Kafka's PersisterStateBatchCombiner, the
fencing of leader and state epochs, ShareSnapshot every N updates, and a replay of the
written records rebuilding the same state."""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from gregor.coordinator.share_batches import combine
from gregor.coordinator.share_shard import Record, ShareKey, ShareShard
from gregor.coordinator.share_state_records import (
    ShareSnapshotKey,
    ShareSnapshotValue,
    ShareUpdateKey,
    ShareUpdateValue,
    StateBatch,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

TOPIC = uuid.UUID(int=7)
KEY: ShareKey = ("g", TOPIC, 0)
AVAILABLE, ACKED, ARCHIVED = 0, 2, 4


def b(first: int, last: int, state: int, count: int) -> StateBatch:
    return StateBatch(first, last, state, count)


class Log:
    """A shard and the records it committed, each replayed as the coordinator does."""

    def __init__(self, per_snapshot: int = 3) -> None:
        self.per_snapshot = per_snapshot
        self.shard = ShareShard(per_snapshot, lambda key: key[1] == TOPIC)
        self.records: list[Record] = []

    def commit(self, outcome: ErrorCode | Record | None) -> ErrorCode | Record | None:
        if isinstance(outcome, tuple):
            key, value = outcome
            # Through the bytes, as the log holds them.
            raw = encode_key(key), None if value is None else encode_value(value)
            decoded = decode_key(raw[0])
            value = None if raw[1] is None else decode_value(decoded, raw[1])
            self.shard.replay(decoded, value, len(self.records))
            self.records.append((decoded, value))
        return outcome

    def write(self, state_epoch: int, leader_epoch: int, start: int, *batches: StateBatch) -> Any:
        return self.commit(self.shard.write(KEY, state_epoch, leader_epoch, start, batches, 1))

    def replayed(self) -> ShareShard:
        fresh = ShareShard(self.per_snapshot, lambda key: True)
        for offset, (key, value) in enumerate(self.records):
            fresh.replay(key, value, offset)
        return fresh


def test_combine_prunes_below_the_start_offset_and_cuts_a_straddling_batch() -> None:
    assert combine([b(0, 4, ACKED, 1), b(5, 9, AVAILABLE, 1)], [], 7) == (b(7, 9, AVAILABLE, 1),)
    assert combine([b(0, 4, ACKED, 1)], [], -1) == (b(0, 4, ACKED, 1),)


def test_combine_overlaps_go_to_the_higher_delivery_count_then_state() -> None:
    # A redelivery (count 2) wins over the first delivery's state whatever came first.
    assert combine([b(0, 9, AVAILABLE, 2)], [b(3, 5, ACKED, 1)], 0) == (b(0, 9, AVAILABLE, 2),)
    assert combine([b(0, 9, AVAILABLE, 1)], [b(3, 5, ACKED, 1)], 0) == (
        b(0, 2, AVAILABLE, 1),
        b(3, 5, ACKED, 1),
        b(6, 9, AVAILABLE, 1),
    )
    assert combine([b(3, 5, ARCHIVED, 1)], [b(0, 9, ACKED, 1)], 0) == (
        b(0, 2, ACKED, 1),
        b(3, 5, ARCHIVED, 1),
        b(6, 9, ACKED, 1),
    )


def test_combine_joins_neighbours_of_the_same_state_and_count() -> None:
    assert combine([b(0, 4, ACKED, 1)], [b(5, 9, ACKED, 1), b(12, 12, ACKED, 1)], 0) == (
        b(0, 9, ACKED, 1),
        b(12, 12, ACKED, 1),
    )


def test_first_write_is_a_snapshot_then_updates_then_a_snapshot_every_n() -> None:
    log = Log(per_snapshot=2)
    log.write(0, 5, 0, b(0, 9, AVAILABLE, 1))
    for offset in (0, 1, 2, 3):
        log.write(0, 5, -1, b(offset, offset, ACKED, 1))
    kinds = [type(k).__name__ for k, _ in log.records]
    assert kinds == ["ShareSnapshotKey", "ShareUpdateKey", "ShareUpdateKey"] + [
        "ShareSnapshotKey",
        "ShareUpdateKey",
    ]
    snapshot = log.records[3][1]
    assert isinstance(snapshot, ShareSnapshotValue)
    assert snapshot.snapshot_epoch == 1
    assert snapshot.state_batches == (b(0, 2, ACKED, 1), b(3, 9, AVAILABLE, 1))
    update = log.records[4][1]
    assert isinstance(update, ShareUpdateValue) and update.snapshot_epoch == 1
    state = log.shard.state(KEY)
    assert (state.state_epoch, state.leader_epoch, state.start_offset) == (0, 5, 0)
    assert state.state_batches == (b(0, 3, ACKED, 1), b(4, 9, AVAILABLE, 1))


def test_update_moving_the_start_offset_drops_what_lies_below() -> None:
    log = Log()
    log.write(0, 1, 0, b(0, 9, AVAILABLE, 1))
    log.write(0, 1, 4, b(4, 4, ACKED, 1))
    state = log.shard.state(KEY)
    assert state.start_offset == 4
    assert state.state_batches == (b(4, 4, ACKED, 1), b(5, 9, AVAILABLE, 1))


def test_replay_of_the_records_rebuilds_the_state() -> None:
    log = Log(per_snapshot=2)
    log.write(0, 1, 0, b(0, 19, AVAILABLE, 1))
    for i in range(7):
        log.write(0, 1 + i // 3, i, b(i, i + 2, ACKED if i % 2 else ARCHIVED, 1 + i % 3))
    fresh = log.replayed()
    assert fresh.states == log.shard.states
    assert fresh.leader_epochs == log.shard.leader_epochs


def test_older_leader_epoch_is_fenced_on_write_and_read() -> None:
    log = Log()
    log.write(0, 5, 0)
    assert log.write(0, 4, 0) == ErrorCode.fenced_leader_epoch
    assert log.shard.read(KEY, 4, 1) == ErrorCode.fenced_leader_epoch
    assert isinstance(log.write(0, 5, 0), tuple)
    assert isinstance(log.write(0, -1, 0), tuple)  # -1: no leader epoch to check


def test_read_by_a_newer_leader_records_its_epoch() -> None:
    log = Log()
    assert log.shard.read(KEY, -1, 1) is None  # no state, nothing to note
    assert log.commit(log.shard.read(KEY, 3, 1)) is not None
    state = log.shard.state(KEY)
    assert (state.state_epoch, state.leader_epoch, state.start_offset) == (0, 3, -1)
    assert log.shard.read(KEY, 3, 1) is None  # the same leader again: nothing to write
    assert log.write(0, 2, 0) == ErrorCode.fenced_leader_epoch


def test_initialize_starts_over_and_older_state_epochs_are_fenced() -> None:
    log = Log()
    log.write(0, 5, 0, b(0, 9, ACKED, 1))
    log.commit(log.shard.initialize(KEY, 1, 100, 2))
    state = log.shard.state(KEY)
    assert (state.snapshot_epoch, state.state_epoch, state.start_offset) == (1, 1, 100)
    assert state.state_batches == ()
    assert log.write(0, 5, 100) == ErrorCode.fenced_state_epoch
    assert log.shard.initialize(KEY, 0, 5, 3) == ErrorCode.fenced_state_epoch
    assert log.shard.leader_epochs[KEY] == 5  # initialization keeps the leader's fence
    assert isinstance(log.write(1, 5, 100, b(100, 100, ACKED, 1)), tuple)


def test_delete_writes_a_tombstone_and_forgets_the_state() -> None:
    log = Log()
    assert log.shard.delete(KEY) is None
    log.write(0, 5, 0, b(0, 0, ACKED, 1))
    record = log.commit(log.shard.delete(KEY))
    assert record == (ShareSnapshotKey("g", TOPIC, 0), None)
    assert KEY not in log.shard.states and KEY not in log.shard.leader_epochs
    assert log.replayed().states == {}


def test_summary_and_unknown_partitions() -> None:
    log = Log()
    assert log.shard.summary(KEY) == (0, -1, -1)
    log.write(2, 7, 40)
    assert log.shard.summary(KEY) == (2, 7, 40)
    other = ("g", uuid.UUID(int=8), 0)
    assert log.shard.summary(other) == ErrorCode.unknown_topic_or_partition
    assert log.shard.write(other, 0, 0, 0, (), 1) == ErrorCode.unknown_topic_or_partition
    assert log.shard.write(("g", TOPIC, -1), 0, 0, 0, (), 1) == ErrorCode.invalid_request


def test_update_key_record_type() -> None:
    log = Log()
    log.write(0, 1, 0)
    log.write(0, 1, 0)
    assert isinstance(log.records[-1][0], ShareUpdateKey)


batch_lists = st.lists(
    st.builds(
        lambda first, length, state, count: b(first, first + length, state, count),
        st.integers(0, 30),
        st.integers(0, 6),
        st.sampled_from([AVAILABLE, ACKED, ARCHIVED]),
        st.integers(1, 3),
    ),
    max_size=6,
)


@given(batch_lists, batch_lists, st.integers(-1, 20))
def test_combine_matches_the_offset_by_offset_rule(
    so_far: list[StateBatch], new: list[StateBatch], start: int
) -> None:
    expected: dict[int, tuple[int, int]] = {}
    for batch in (*so_far, *new):
        for offset in range(max(batch.first_offset, start), batch.last_offset + 1):
            info = (batch.delivery_count, batch.delivery_state)
            expected[offset] = max(expected.get(offset, info), info)
    combined = combine(so_far, new, start)
    got = {
        offset: (c.delivery_count, c.delivery_state)
        for c in combined
        for offset in range(c.first_offset, c.last_offset + 1)
    }
    assert got == expected
    for a, c in zip(combined, combined[1:], strict=False):
        assert a.last_offset < c.first_offset  # sorted, disjoint
        adjacent = a.last_offset + 1 == c.first_offset
        assert not adjacent or (a.delivery_state, a.delivery_count) != (
            c.delivery_state,
            c.delivery_count,
        )


def test_redundant_offset_is_the_oldest_last_snapshot() -> None:
    log = Log(per_snapshot=1)
    other: ShareKey = ("h", TOPIC, 0)
    assert log.shard.redundant_offset() == 0
    log.write(0, 1, 0)  # 0: snapshot of KEY
    log.commit(log.shard.write(other, 0, 1, 0, (), 1))  # 1: snapshot of other
    log.write(0, 1, 0)  # 2: update of KEY
    assert log.shard.redundant_offset() == 0
    log.write(0, 1, 0)  # 3: snapshot of KEY
    assert log.shard.redundant_offset() == 1
    log.commit(log.shard.delete(other))  # 4: tombstone of other
    assert log.shard.redundant_offset() == 3
    # What lies from there on rebuilds the same state.
    fresh = ShareShard(1, lambda key: True)
    for offset in range(3, len(log.records)):
        fresh.replay(*log.records[offset], offset)
    assert fresh.states == log.shard.states
    log.commit(log.shard.delete(KEY))  # 5
    assert log.shard.redundant_offset() == 6


def test_state_no_leader_can_load_is_refused() -> None:
    """Start offsets below -1, reversed or negative batches, delivery states that are never
    persisted (ACQUIRED) or unknown, negative delivery counts: INVALID_REQUEST, nothing
    written (a client's WriteShareGroupState once failed every later load of the state)."""
    log = Log()
    for start, batches in (
        (-(2**63), ()),
        (-2, ()),
        (0, (b(5, 2, ACKED, 1),)),
        (-1, (b(-3, 2, ACKED, 1),)),
        (0, (b(0, 2, 1, 1),)),
        (0, (b(0, 2, 127, 1),)),
        (0, (b(0, 2, ACKED, -1),)),
    ):
        assert log.write(0, 0, start, *batches) == ErrorCode.invalid_request
    assert log.shard.initialize(KEY, 0, -5, 1) == ErrorCode.invalid_request
    assert log.records == []
    assert isinstance(log.write(0, 0, 2**63 - 1, b(0, 2**63 - 1, ARCHIVED, 0)), tuple)
