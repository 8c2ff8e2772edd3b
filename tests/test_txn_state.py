"""__transaction_state records (Kafka's byte layouts) and the transaction state machine."""

from __future__ import annotations

import struct

import pytest
from kio.schema.errors import ErrorCode

from gregor.coordinator.record_format import RecordFormatError
from gregor.coordinator.txn_records import (
    TxnLogValue,
    TxnState,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from gregor.coordinator.txn_state import (
    FenceFirst,
    InvalidTransition,
    Transition,
    TxnMetadata,
    add_partitions,
    complete_end,
    end_txn,
    init_producer,
    new_metadata,
    prepare_end,
    verify,
)

NOW = 1_700_000_000_000


def test_key_layout() -> None:
    assert encode_key("tx") == b"\x00\x00\x00\x02tx"
    assert decode_key(b"\x00\x00\x00\x02tx") == "tx"
    with pytest.raises(RecordFormatError):
        decode_key(b"\x00\x01\x00\x02tx")


def test_value_v0_layout_round_trips() -> None:
    value = TxnLogValue(7, 3, 60000, TxnState.ONGOING, (("a", (0, 2)), ("b", (1,))), NOW + 5, NOW)
    raw = encode_value(value)
    expected = (
        struct.pack(">hqhib", 0, 7, 3, 60000, 1)
        + struct.pack(">i", 2)
        + b"\x00\x01a"
        + struct.pack(">iii", 2, 0, 2)
        + b"\x00\x01b"
        + struct.pack(">ii", 1, 1)
        + struct.pack(">qq", NOW + 5, NOW)
    )
    assert raw == expected
    assert decode_value(raw) == value


def test_value_v1_flexible_with_tagged_fields() -> None:
    # Compact array of one topic (length+1), compact string, compact int32 array, tags.
    raw = (
        struct.pack(">hqhib", 1, 9, 0, 1000, 2)
        + b"\x02"
        + b"\x02t"
        + b"\x02"
        + struct.pack(">i", 4)
        + b"\x00"
        + struct.pack(">qq", NOW, NOW - 1)
        + b"\x03"
        + b"\x00\x08"
        + struct.pack(">q", 5)
        + b"\x01\x08"
        + struct.pack(">q", 11)
        + b"\x02\x02"
        + struct.pack(">h", 2)
    )
    value = decode_value(raw)
    assert value.state == TxnState.PREPARE_COMMIT
    assert value.partitions == (("t", (4,)),)
    assert (value.previous_producer_id, value.next_producer_id) == (5, 11)
    assert value.client_transaction_version == 2
    assert (value.last_update_ms, value.start_ms) == (NOW, NOW - 1)


def test_bad_status_and_truncation_are_format_errors() -> None:
    raw = encode_value(TxnLogValue(1, 0, 1, TxnState.EMPTY, (), NOW, -1))
    with pytest.raises(RecordFormatError):
        decode_value(raw[:-3])
    with pytest.raises(RecordFormatError):
        decode_value(raw[:16] + b"\x09" + raw[17:])


def test_state_display_names() -> None:
    assert TxnState.PREPARE_EPOCH_FENCE.display == "PrepareEpochFence"
    assert TxnState.from_display("CompleteAbort") == TxnState.COMPLETE_ABORT
    assert TxnState.from_display("Bogus") is None


def _apply(meta: TxnMetadata, outcome: object) -> None:
    assert isinstance(outcome, Transition), outcome
    meta.begin(outcome)
    meta.complete()


def _ongoing() -> TxnMetadata:
    meta = new_metadata("tx", 100, 60000, NOW)
    _apply(meta, init_producer(meta, 60000, None, 0, NOW))
    _apply(meta, add_partitions(meta, 100, 0, {("t", 0)}, NOW))
    return meta


def test_first_init_starts_at_epoch_zero_and_bumps() -> None:
    meta = new_metadata("tx", 100, 60000, NOW)
    _apply(meta, init_producer(meta, 60000, None, 0, NOW))
    assert (meta.producer_id, meta.producer_epoch, meta.state) == (100, 0, TxnState.EMPTY)
    _apply(meta, init_producer(meta, 30000, None, 0, NOW))
    assert (meta.producer_epoch, meta.value.timeout_ms) == (1, 30000)


def test_init_with_an_ongoing_transaction_fences_first() -> None:
    meta = _ongoing()
    assert isinstance(init_producer(meta, 60000, None, 0, NOW), FenceFirst)
    fence = prepare_end(meta, False, NOW, fence=True)
    _apply(meta, fence)
    assert (meta.state, meta.producer_epoch) == (TxnState.PREPARE_ABORT, 1)
    assert init_producer(meta, 60000, None, 0, NOW) == ErrorCode.concurrent_transactions
    _apply(meta, complete_end(meta, NOW))
    assert meta.state == TxnState.COMPLETE_ABORT and meta.value.partitions == ()
    _apply(meta, init_producer(meta, 60000, None, 0, NOW))
    assert meta.producer_epoch == 2


def test_kip360_bump_retry_and_fencing() -> None:
    meta = new_metadata("tx", 100, 60000, NOW)
    _apply(meta, init_producer(meta, 60000, None, 0, NOW))
    _apply(meta, init_producer(meta, 60000, (100, 0), 0, NOW))
    assert (meta.producer_epoch, meta.last_producer_epoch) == (1, 0)
    # The answer was lost: the retry names epoch 0 again and gets epoch 1 again.
    retry = init_producer(meta, 60000, (100, 0), 0, NOW)
    assert isinstance(retry, Transition) and retry.value.producer_epoch == 1
    assert init_producer(meta, 60000, (100, 7), 0, NOW) == ErrorCode.producer_fenced
    assert init_producer(meta, 60000, (55, 0), 0, NOW) == ErrorCode.producer_fenced


def test_exhausted_epoch_rotates_the_producer_id() -> None:
    meta = new_metadata("tx", 100, 60000, NOW)
    meta.value = TxnLogValue(100, 32766, 60000, TxnState.COMPLETE_COMMIT, (), NOW, -1)
    outcome = init_producer(meta, 60000, None, 200, NOW)
    assert isinstance(outcome, Transition)
    assert (outcome.value.producer_id, outcome.value.producer_epoch) == (200, 0)
    assert outcome.value.previous_producer_id == 100


def test_add_partitions_errors() -> None:
    meta = _ongoing()
    assert add_partitions(meta, 101, 0, {("t", 1)}, NOW) == ErrorCode.invalid_producer_id_mapping
    assert add_partitions(meta, 100, 1, {("t", 1)}, NOW) == ErrorCode.producer_fenced
    assert add_partitions(meta, 100, 0, {("t", 0)}, NOW) is None  # already in
    more = add_partitions(meta, 100, 0, {("u", 3)}, NOW + 1)
    assert isinstance(more, Transition)
    assert more.value.topic_partitions() == {("t", 0), ("u", 3)}
    assert more.value.start_ms == NOW  # the transaction's start stays
    meta.begin(more)
    assert add_partitions(meta, 100, 0, {("v", 0)}, NOW) == ErrorCode.concurrent_transactions
    with pytest.raises(InvalidTransition):
        meta.begin(more)


def test_end_txn_states() -> None:
    meta = new_metadata("tx", 100, 60000, NOW)
    _apply(meta, init_producer(meta, 60000, None, 0, NOW))
    assert end_txn(meta, 100, 0, True, NOW) == ErrorCode.invalid_txn_state
    _apply(meta, add_partitions(meta, 100, 0, {("t", 0)}, NOW))
    assert end_txn(meta, 100, 1, True, NOW) == ErrorCode.producer_fenced
    _apply(meta, end_txn(meta, 100, 0, True, NOW))
    assert meta.state == TxnState.PREPARE_COMMIT
    assert end_txn(meta, 100, 0, True, NOW) == ErrorCode.concurrent_transactions
    assert end_txn(meta, 100, 0, False, NOW) == ErrorCode.invalid_txn_state
    assert add_partitions(meta, 100, 0, {("t", 0)}, NOW) == ErrorCode.concurrent_transactions
    _apply(meta, complete_end(meta, NOW))
    assert meta.state == TxnState.COMPLETE_COMMIT
    assert end_txn(meta, 100, 0, True, NOW) is None  # a retry
    assert end_txn(meta, 100, 0, False, NOW) == ErrorCode.invalid_txn_state


def test_verify_only() -> None:
    meta = _ongoing()
    assert verify(meta, 100, 0, [("t", 0), ("t", 1)]) == {
        ("t", 0): ErrorCode.none,
        ("t", 1): ErrorCode.invalid_txn_state,
    }
    assert verify(meta, 100, 3, [("t", 0)]) == ErrorCode.producer_fenced
    assert verify(meta, 9, 0, [("t", 0)]) == ErrorCode.invalid_producer_id_mapping
    _apply(meta, end_txn(meta, 100, 0, False, NOW))
    assert verify(meta, 100, 0, [("t", 0)]) == ErrorCode.concurrent_transactions
