"""The records of ``__transaction_state``, byte-compatible with what Kafka writes.

Key: ``TransactionLogKey`` v0 (the transactional id). Value: ``TransactionLogValue`` v0
(what Kafka writes under transaction protocol version 1, and what we write) or v1 (flexible:
the previous and next producer ids and the client's transaction version are tagged
fields), read both. A null value is a tombstone: the transactional id expired.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from gregor.coordinator.record_format import (
    NO_TAGS,
    RecordFormatError,
    compact_string,
    encode_string,
    encode_tagged_fields,
    record_reader,
)
from gregor.wire.varint import encode_uvarint

TRANSACTION_STATE_TOPIC = "__transaction_state"

KEY_VERSION = 0
VALUE_VERSION = 0

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_VALUE_HEAD = struct.Struct(">hqhib")  # version, producer id, epoch, timeout, status
_TIMES = struct.Struct(">qq")  # last update, start


class TxnState(IntEnum):
    """Kafka's TransactionState, with its status byte in the log."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def display(self) -> str:
        """The name DescribeTransactions and ListTransactions use ("PrepareCommit")."""
        return "".join(part.capitalize() for part in self.name.split("_"))

    @classmethod
    def from_display(cls, name: str) -> TxnState | None:
        for state in cls:
            if state.display == name:
                return state
        return None


@dataclass(frozen=True, slots=True)
class TxnLogValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    # Topic -> partitions, sorted; empty outside Ongoing and PrepareX.
    partitions: tuple[tuple[str, tuple[int, ...]], ...]
    last_update_ms: int
    start_ms: int  # -1 when no transaction has started
    previous_producer_id: int = -1  # v1 only (tag 0)
    next_producer_id: int = -1  # v1 only (tag 1)
    client_transaction_version: int = 0  # v1 only (tag 2)

    def topic_partitions(self) -> set[tuple[str, int]]:
        return {(topic, p) for topic, parts in self.partitions for p in parts}


def group_partitions(
    partitions: set[tuple[str, int]],
) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The (topic, partitions) form of a set of topic partitions, sorted."""
    by_topic: dict[str, list[int]] = {}
    for topic, index in sorted(partitions):
        by_topic.setdefault(topic, []).append(index)
    return tuple((topic, tuple(parts)) for topic, parts in by_topic.items())


def encode_key(transactional_id: str) -> bytes:
    return _I16.pack(KEY_VERSION) + encode_string(transactional_id)


def decode_key(key: bytes) -> str:
    r = record_reader(key)
    version = r.int16()
    if version != 0:
        raise RecordFormatError(f"unknown __transaction_state key version {version}")
    transactional_id = r.string(True)
    if transactional_id is None:
        raise RecordFormatError("transaction log key with a null transactional id")
    return transactional_id


def encode_value(value: TxnLogValue) -> bytes:
    """Version 0 (transaction protocol version 1; the partitions array is written even when
    empty, as Kafka does), or version 1 for a transaction of protocol version 2, whose next
    producer id (an epoch rotation in flight) and client transaction version a coordinator
    that loads it needs (tagged fields, written when not at their defaults)."""
    if value.client_transaction_version >= 2:
        return _encode_value_v1(value)
    out = bytearray(
        _VALUE_HEAD.pack(
            VALUE_VERSION,
            value.producer_id,
            value.producer_epoch,
            value.timeout_ms,
            value.state,
        )
    )
    out += _I32.pack(len(value.partitions))
    for topic, parts in value.partitions:
        out += encode_string(topic)
        out += _I32.pack(len(parts))
        for index in parts:
            out += _I32.pack(index)
    out += _TIMES.pack(value.last_update_ms, value.start_ms)
    return bytes(out)


def _encode_value_v1(value: TxnLogValue) -> bytes:
    out = bytearray(
        _VALUE_HEAD.pack(1, value.producer_id, value.producer_epoch, value.timeout_ms, value.state)
    )
    out += encode_uvarint(len(value.partitions) + 1)
    for topic, parts in value.partitions:
        out += compact_string(topic)
        out += encode_uvarint(len(parts) + 1)
        for index in parts:
            out += _I32.pack(index)
        out += NO_TAGS
    out += _TIMES.pack(value.last_update_ms, value.start_ms)
    tags: list[tuple[int, bytes]] = []
    if value.previous_producer_id != -1:
        tags.append((0, _I64.pack(value.previous_producer_id)))
    if value.next_producer_id != -1:
        tags.append((1, _I64.pack(value.next_producer_id)))
    if value.client_transaction_version != 0:
        tags.append((2, _I16.pack(value.client_transaction_version)))
    out += encode_tagged_fields(tags)
    return bytes(out)


def decode_value(value: bytes) -> TxnLogValue:
    r = record_reader(value)
    version = r.int16()
    if version not in (0, 1):
        raise RecordFormatError(f"unknown transaction log value version {version}")
    r.flexible = version >= 1
    producer_id = r.int64()
    epoch = r.int16()
    timeout_ms = r.int32()
    status = r.int8()
    try:
        state = TxnState(status)
    except ValueError:
        raise RecordFormatError(f"unknown transaction status {status}") from None
    partitions = []
    for _ in range(r.count(1)):
        topic = r.string(True)
        if topic is None:
            raise RecordFormatError("transaction log value with a null topic")
        parts = tuple(r.int32() for _ in range(r.count(4)))
        r.tagged_fields()
        partitions.append((topic, parts))
    last_update_ms = r.int64()
    start_ms = r.int64()
    spans = r.tagged_field_spans() if r.flexible else {}
    tags = {tag: bytes(r.buf[start:end]) for tag, (start, end) in spans.items()}
    return TxnLogValue(
        producer_id,
        epoch,
        timeout_ms,
        state,
        tuple(partitions),
        last_update_ms,
        start_ms,
        previous_producer_id=_tagged(tags, 0, _I64, -1),
        next_producer_id=_tagged(tags, 1, _I64, -1),
        client_transaction_version=_tagged(tags, 2, _I16, 0),
    )


def _tagged(tags: dict[int, bytes], tag: int, codec: struct.Struct, default: int) -> int:
    raw = tags.get(tag)
    if raw is None:
        return default
    if len(raw) != codec.size:
        raise RecordFormatError(f"tagged field {tag} of {len(raw)} bytes")
    value: int = codec.unpack(raw)[0]
    return value
