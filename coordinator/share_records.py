"""The records of share groups (KIP-932) in ``__consumer_offsets``, byte-compatible with Kafka
4.1 (group-coordinator/src/main/resources/common/message/ShareGroup*.json).

Keys and values are laid out as ``consumer_records.py`` describes (int16 record type and
classic key fields; int16 value version 0 and flexible value fields). A null value is a
tombstone.

    type  record                               key
    10    ShareGroupMemberMetadata             group id, member id
    11    ShareGroupMetadata                   group id
    12    ShareGroupTargetAssignmentMetadata   group id
    13    ShareGroupTargetAssignmentMember     group id, member id
    14    ShareGroupCurrentMemberAssignment    group id, member id
    15    ShareGroupStatePartitionMetadata     group id

Type 9 (ShareGroupPartitionMetadata) was Kafka 4.0's and is gone in 4.1 (KIP-1101 keeps a
MetadataHash in type 11 instead): like any unknown type, a log's type 9 record does not
decode. ``coordinator/records.py``'s ``decode_key`` returns these keys; ``decode_value`` here
reads the value of one. Tagged fields of later Kafka versions are skipped on read.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from gregor.coordinator.consumer_records import VALUE_VERSION
from gregor.coordinator.record_format import (
    NO_TAGS,
    Assignment,
    RecordFormatError,
    compact_string,
    compact_strings,
    encode_assignment,
    encode_string,
    read_assignment,
    read_strings,
    record_reader,
)
from gregor.wire.reader import Reader
from gregor.wire.varint import encode_uvarint

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_EPOCH_AND_HASH = struct.Struct(">iq")


# -- keys -----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ShareGroupMemberMetadataKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupMetadataKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMetadataKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMemberKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupCurrentMemberAssignmentKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupStatePartitionMetadataKey:
    group_id: str


ShareKey = (
    ShareGroupMemberMetadataKey
    | ShareGroupMetadataKey
    | ShareGroupTargetAssignmentMetadataKey
    | ShareGroupTargetAssignmentMemberKey
    | ShareGroupCurrentMemberAssignmentKey
    | ShareGroupStatePartitionMetadataKey
)

_KEY_TYPES: dict[type, int] = {
    ShareGroupMemberMetadataKey: 10,
    ShareGroupMetadataKey: 11,
    ShareGroupTargetAssignmentMetadataKey: 12,
    ShareGroupTargetAssignmentMemberKey: 13,
    ShareGroupCurrentMemberAssignmentKey: 14,
    ShareGroupStatePartitionMetadataKey: 15,
}
KEY_TYPES = frozenset(_KEY_TYPES.values())


# -- values ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ShareGroupMemberMetadataValue:
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ShareGroupMetadataValue:
    epoch: int  # the group epoch
    metadata_hash: int  # of the subscribed topics' metadata; a plain field here, not tagged


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMetadataValue:
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMemberValue:
    assignment: Assignment


@dataclass(frozen=True, slots=True)
class ShareGroupCurrentMemberAssignmentValue:
    """No partitions pending revocation: a share group's partitions move at once."""

    member_epoch: int
    previous_member_epoch: int
    state: int  # MemberState, as in consumer groups
    assigned: Assignment


@dataclass(frozen=True, slots=True)
class TopicPartitionsInfo:
    topic_id: uuid.UUID
    topic_name: str
    partitions: frozenset[int]  # written in partition order
    create_timestamp: int  # when the topic was added to the initializing set


@dataclass(frozen=True, slots=True)
class TopicInfo:
    topic_id: uuid.UUID
    topic_name: str


@dataclass(frozen=True, slots=True)
class ShareGroupStatePartitionMetadataValue:
    """The share-partitions whose state (``__share_group_state``) the group has asked the
    share coordinator to initialize, has had initialized, and is having deleted."""

    initializing_topics: tuple[TopicPartitionsInfo, ...]
    initialized_topics: tuple[TopicPartitionsInfo, ...]
    deleting_topics: tuple[TopicInfo, ...]


ShareValue = (
    ShareGroupMemberMetadataValue
    | ShareGroupMetadataValue
    | ShareGroupTargetAssignmentMetadataValue
    | ShareGroupTargetAssignmentMemberValue
    | ShareGroupCurrentMemberAssignmentValue
    | ShareGroupStatePartitionMetadataValue
)


# -- encoding -------------------------------------------------------------------------------
def encode_key(key: ShareKey) -> bytes:
    out = _I16.pack(_KEY_TYPES[type(key)]) + encode_string(key.group_id)
    if isinstance(
        key,
        ShareGroupMemberMetadataKey
        | ShareGroupTargetAssignmentMemberKey
        | ShareGroupCurrentMemberAssignmentKey,
    ):
        return out + encode_string(key.member_id)
    return out


def _topic_partitions_infos(topics: tuple[TopicPartitionsInfo, ...]) -> bytes:
    out = bytearray(encode_uvarint(len(topics) + 1))
    for topic in topics:
        partitions = sorted(topic.partitions)
        out += topic.topic_id.bytes + compact_string(topic.topic_name)
        out += encode_uvarint(len(partitions) + 1)
        out += struct.pack(f">{len(partitions)}i", *partitions)
        out += _I64.pack(topic.create_timestamp) + NO_TAGS
    return bytes(out)


def _topic_infos(topics: tuple[TopicInfo, ...]) -> bytes:
    out = bytearray(encode_uvarint(len(topics) + 1))
    for topic in topics:
        out += topic.topic_id.bytes + compact_string(topic.topic_name) + NO_TAGS
    return bytes(out)


def encode_value(value: ShareValue) -> bytes:
    out = bytearray(_I16.pack(VALUE_VERSION))
    if isinstance(value, ShareGroupMemberMetadataValue):
        out += compact_string(value.rack_id)
        out += compact_string(value.client_id)
        out += compact_string(value.client_host)
        out += compact_strings(value.subscribed_topic_names)
    elif isinstance(value, ShareGroupMetadataValue):
        out += _EPOCH_AND_HASH.pack(value.epoch, value.metadata_hash)
    elif isinstance(value, ShareGroupTargetAssignmentMetadataValue):
        out += _I32.pack(value.assignment_epoch)
    elif isinstance(value, ShareGroupTargetAssignmentMemberValue):
        out += encode_assignment(value.assignment)
    elif isinstance(value, ShareGroupCurrentMemberAssignmentValue):
        out += struct.pack(">iib", value.member_epoch, value.previous_member_epoch, value.state)
        out += encode_assignment(value.assigned)
    else:
        out += _topic_partitions_infos(value.initializing_topics)
        out += _topic_partitions_infos(value.initialized_topics)
        out += _topic_infos(value.deleting_topics)
    return bytes(out + NO_TAGS)


# -- decoding -------------------------------------------------------------------------------
def read_key(record_type: int, r: Reader) -> ShareKey:
    """The key fields after the record type (one of ``KEY_TYPES``); records.py's
    ``decode_key`` calls this."""
    group_id = r.string(False) or ""
    if record_type == 11:
        return ShareGroupMetadataKey(group_id)
    if record_type == 12:
        return ShareGroupTargetAssignmentMetadataKey(group_id)
    if record_type == 15:
        return ShareGroupStatePartitionMetadataKey(group_id)
    member_id = r.string(False) or ""
    if record_type == 10:
        return ShareGroupMemberMetadataKey(group_id, member_id)
    if record_type == 13:
        return ShareGroupTargetAssignmentMemberKey(group_id, member_id)
    if record_type == 14:
        return ShareGroupCurrentMemberAssignmentKey(group_id, member_id)
    raise RecordFormatError(f"not a share group record type: {record_type}")


def _read_topic_partitions_infos(r: Reader) -> tuple[TopicPartitionsInfo, ...]:
    topics = []
    for _ in range(r.count(27)):  # id, name, partitions, timestamp, tags: 27 bytes at least
        topic_id = r.uuid()
        name = r.string(False) or ""
        n = r.count(4)
        partitions = frozenset(r.unpack(struct.Struct(f">{n}i")))
        topics.append(TopicPartitionsInfo(topic_id, name, partitions, r.int64()))
        r.tagged_fields()
    return tuple(topics)


def _read_topic_infos(r: Reader) -> tuple[TopicInfo, ...]:
    topics = []
    for _ in range(r.count(18)):  # id, name, tags: 18 bytes at least
        topics.append(TopicInfo(r.uuid(), r.string(False) or ""))
        r.tagged_fields()
    return tuple(topics)


def decode_value(key: ShareKey, value: bytes) -> ShareValue:
    """The value of a record with this key (raises RecordFormatError if it won't parse)."""
    r = record_reader(value)
    version = r.int16()
    if version != VALUE_VERSION:
        raise RecordFormatError(f"unknown {type(key).__name__} value version {version}")
    r.flexible = True
    decoded: ShareValue
    if isinstance(key, ShareGroupMemberMetadataKey):
        rack_id = r.string(True)
        client_id = r.string(False) or ""
        client_host = r.string(False) or ""
        decoded = ShareGroupMemberMetadataValue(rack_id, client_id, client_host, read_strings(r))
    elif isinstance(key, ShareGroupMetadataKey):
        decoded = ShareGroupMetadataValue(r.int32(), r.int64())
    elif isinstance(key, ShareGroupTargetAssignmentMetadataKey):
        decoded = ShareGroupTargetAssignmentMetadataValue(r.int32())
    elif isinstance(key, ShareGroupTargetAssignmentMemberKey):
        decoded = ShareGroupTargetAssignmentMemberValue(read_assignment(r))
    elif isinstance(key, ShareGroupCurrentMemberAssignmentKey):
        epochs = r.int32(), r.int32(), r.int8()
        decoded = ShareGroupCurrentMemberAssignmentValue(*epochs, read_assignment(r))
    else:
        initializing = _read_topic_partitions_infos(r)
        initialized = _read_topic_partitions_infos(r)
        decoded = ShareGroupStatePartitionMetadataValue(
            initializing, initialized, _read_topic_infos(r)
        )
    r.tagged_fields()
    return decoded
