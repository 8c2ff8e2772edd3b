"""The records of ``__share_group_state``, the share coordinator's topic (KIP-932),
byte-compatible with Kafka 4.1 (share-coordinator/src/main/resources/common/message/).

This topic numbers its own record types. A key is the int16 record type, then the group id,
the topic id and the partition in the classic (non-flexible) encoding; a value is the int16
version 0, then its fields in the flexible one. A null value is a tombstone.

    type  record          value
    0     ShareSnapshot   the share-partition's whole state
    1     ShareUpdate     the batches one write changed, applied over the last snapshot

Kafka 4.0 wrote SnapshotEpoch as a uint16 and had no timestamps; 4.1 has the layout here.
Tagged fields of later versions (DeliveryCompleteCount, tag 0, 4.2) are skipped on read.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from gregor.coordinator.record_format import (
    NO_TAGS,
    RecordFormatError,
    encode_string,
    record_reader,
)
from gregor.wire.reader import Reader
from gregor.wire.varint import encode_uvarint

SHARE_GROUP_STATE_TOPIC = "__share_group_state"

VALUE_VERSION = 0

_I16 = struct.Struct(">h")
_PARTITION = struct.Struct(">i")
_SNAPSHOT_HEAD = struct.Struct(">iiiqqq")  # snapshot, state, leader epochs, start, two times
_UPDATE_HEAD = struct.Struct(">iiq")  # snapshot epoch, leader epoch, start offset
_STATE_BATCH = struct.Struct(">qqbh")  # first, last offset, delivery state, delivery count


# -- keys -----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ShareSnapshotKey:
    group_id: str
    topic_id: uuid.UUID
    partition: int


@dataclass(frozen=True, slots=True)
class ShareUpdateKey:
    group_id: str
    topic_id: uuid.UUID
    partition: int


ShareStateKey = ShareSnapshotKey | ShareUpdateKey

_KEY_TYPES: dict[type, int] = {ShareSnapshotKey: 0, ShareUpdateKey: 1}


# -- values ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class StateBatch:
    first_offset: int
    last_offset: int  # inclusive
    delivery_state: int  # 0 Available, 2 Acknowledged, 4 Archived
    delivery_count: int


@dataclass(frozen=True, slots=True)
class ShareSnapshotValue:
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    create_timestamp: int  # when the state was created
    write_timestamp: int  # when it was written or rewritten
    state_batches: tuple[StateBatch, ...]


@dataclass(frozen=True, slots=True)
class ShareUpdateValue:
    snapshot_epoch: int
    leader_epoch: int
    start_offset: int  # -1: unchanged
    state_batches: tuple[StateBatch, ...]


ShareStateValue = ShareSnapshotValue | ShareUpdateValue


# -- encoding -------------------------------------------------------------------------------
def encode_key(key: ShareStateKey) -> bytes:
    return (
        _I16.pack(_KEY_TYPES[type(key)])
        + encode_string(key.group_id)
        + key.topic_id.bytes
        + _PARTITION.pack(key.partition)
    )


def _state_batches(batches: tuple[StateBatch, ...]) -> bytes:
    out = bytearray(encode_uvarint(len(batches) + 1))
    for b in batches:
        out += _STATE_BATCH.pack(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
        out += NO_TAGS
    return bytes(out)


def encode_value(value: ShareStateValue) -> bytes:
    out = bytearray(_I16.pack(VALUE_VERSION))
    if isinstance(value, ShareSnapshotValue):
        out += _SNAPSHOT_HEAD.pack(
            value.snapshot_epoch,
            value.state_epoch,
            value.leader_epoch,
            value.start_offset,
            value.create_timestamp,
            value.write_timestamp,
        )
    else:
        out += _UPDATE_HEAD.pack(value.snapshot_epoch, value.leader_epoch, value.start_offset)
    out += _state_batches(value.state_batches)
    return bytes(out + NO_TAGS)


# -- decoding -------------------------------------------------------------------------------
def decode_key(key: bytes) -> ShareStateKey:
    r = record_reader(key)
    record_type = r.int16()
    if record_type not in (0, 1):
        raise RecordFormatError(f"unknown __share_group_state record type {record_type}")
    group_id = r.string(False) or ""
    topic_id = r.uuid()
    partition = r.int32()
    if record_type == 0:
        return ShareSnapshotKey(group_id, topic_id, partition)
    return ShareUpdateKey(group_id, topic_id, partition)


def _read_state_batches(r: Reader) -> tuple[StateBatch, ...]:
    batches = []
    for _ in range(r.count(20)):  # the four fields and tags: 20 bytes
        batches.append(StateBatch(*r.unpack(_STATE_BATCH)))
        r.tagged_fields()
    return tuple(batches)


def decode_value(key: ShareStateKey, value: bytes) -> ShareStateValue:
    """The value of a record with this key (raises RecordFormatError if it won't parse)."""
    r = record_reader(value)
    version = r.int16()
    if version != VALUE_VERSION:
        raise RecordFormatError(f"unknown {type(key).__name__} value version {version}")
    r.flexible = True
    decoded: ShareStateValue
    if isinstance(key, ShareSnapshotKey):
        snapshot_epoch, state_epoch, leader_epoch, start, created, written = r.unpack(
            _SNAPSHOT_HEAD
        )
        batches = _read_state_batches(r)
        decoded = ShareSnapshotValue(
            snapshot_epoch, state_epoch, leader_epoch, start, created, written, batches
        )
    else:
        snapshot_epoch, leader_epoch, start = r.unpack(_UPDATE_HEAD)
        decoded = ShareUpdateValue(snapshot_epoch, leader_epoch, start, _read_state_batches(r))
    r.tagged_fields()
    return decoded
