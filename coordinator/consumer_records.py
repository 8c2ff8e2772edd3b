"""The records of consumer-protocol groups (KIP-848) in ``__consumer_offsets``, byte-compatible
with Kafka 4.1 (group-coordinator/src/main/resources/common/message/ConsumerGroup*.json).

A key is the int16 record type, then its fields in the classic (non-flexible) encoding; a value
is the int16 version 0, then its fields in the flexible one (compact strings and arrays, a
tagged-field section at the end of every struct). A null value is a tombstone.

    type  record                                 key
    3     ConsumerGroupMetadata                  group id
    4     ConsumerGroupPartitionMetadata         group id  (read, never written: 4.1 hashes)
    5     ConsumerGroupMemberMetadata            group id, member id
    6     ConsumerGroupTargetAssignmentMetadata  group id
    7     ConsumerGroupTargetAssignmentMember    group id, member id
    8     ConsumerGroupCurrentMemberAssignment   group id, member id
    16    ConsumerGroupRegularExpression         group id, regular expression

``coordinator/records.py``'s ``decode_key`` returns these keys; ``decode_value`` here reads the
value of one. Tagged fields of later Kafka versions (CreationTimeMs, AssignmentEpochs, ...) are
skipped on read, as Kafka skips tags it does not know.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from gregor.coordinator.record_format import (
    NO_TAGS,
    Assignment,
    RecordFormatError,
    compact_bytes,
    compact_string,
    compact_strings,
    encode_assignment,
    encode_string,
    encode_tagged_fields,
    read_assignment,
    read_strings,
    read_tagged_fields,
    record_reader,
)
from gregor.wire.reader import Reader
from gregor.wire.varint import VarintError, encode_uvarint, read_uvarint

VALUE_VERSION = 0

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_METADATA_HASH_TAG = 0  # ConsumerGroupMetadataValue.MetadataHash (KIP-1101)
_CLASSIC_MEMBER_METADATA_TAG = 0  # ConsumerGroupMemberMetadataValue.ClassicMemberMetadata


# -- keys -----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionKey:
    group_id: str
    regex: str


ConsumerKey = (
    ConsumerGroupMetadataKey
    | ConsumerGroupPartitionMetadataKey
    | ConsumerGroupMemberMetadataKey
    | ConsumerGroupTargetAssignmentMetadataKey
    | ConsumerGroupTargetAssignmentMemberKey
    | ConsumerGroupCurrentMemberAssignmentKey
    | ConsumerGroupRegularExpressionKey
)

_KEY_TYPES: dict[type, int] = {
    ConsumerGroupMetadataKey: 3,
    ConsumerGroupPartitionMetadataKey: 4,
    ConsumerGroupMemberMetadataKey: 5,
    ConsumerGroupTargetAssignmentMetadataKey: 6,
    ConsumerGroupTargetAssignmentMemberKey: 7,
    ConsumerGroupCurrentMemberAssignmentKey: 8,
    ConsumerGroupRegularExpressionKey: 16,
}
KEY_TYPES = frozenset(_KEY_TYPES.values())


# -- values ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataValue:
    epoch: int  # the group epoch
    metadata_hash: int = 0  # of the subscribed topics' metadata; tagged, absent when 0


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    topic_id: uuid.UUID
    topic_name: str
    num_partitions: int


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataValue:
    """Kafka 4.0's subscription metadata; its per-partition racks (unused since 4.0) are
    read past."""

    topics: tuple[TopicMetadata, ...]


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """A member that joined with the classic protocol (JoinGroup) into a consumer group."""

    session_timeout_ms: int
    supported_protocols: tuple[tuple[str, bytes], ...]  # (name, metadata)


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic_member_metadata: ClassicMemberMetadata | None  # tagged, absent when None


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataValue:
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberValue:
    assignment: Assignment


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int  # MemberState: STABLE 0, UNREVOKED_PARTITIONS 1, UNRELEASED_PARTITIONS 2
    assigned: Assignment
    pending_revocation: Assignment


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionValue:
    topics: tuple[str, ...]  # the topics the regex matched
    version: int  # the metadata image offset it was resolved against
    timestamp_ms: int


ConsumerValue = (
    ConsumerGroupMetadataValue
    | ConsumerGroupPartitionMetadataValue
    | ConsumerGroupMemberMetadataValue
    | ConsumerGroupTargetAssignmentMetadataValue
    | ConsumerGroupTargetAssignmentMemberValue
    | ConsumerGroupCurrentMemberAssignmentValue
    | ConsumerGroupRegularExpressionValue
)


# -- encoding -------------------------------------------------------------------------------
def encode_key(key: ConsumerKey) -> bytes:
    out = _I16.pack(_KEY_TYPES[type(key)]) + encode_string(key.group_id)
    if isinstance(key, ConsumerGroupRegularExpressionKey):
        return out + encode_string(key.regex)
    if isinstance(
        key,
        ConsumerGroupMemberMetadataKey
        | ConsumerGroupTargetAssignmentMemberKey
        | ConsumerGroupCurrentMemberAssignmentKey,
    ):
        return out + encode_string(key.member_id)
    return out


def _classic_member_metadata(value: ClassicMemberMetadata) -> bytes:
    """The nullable struct as a tagged field: a uvarint 1 (present), then the struct."""
    out = bytearray(encode_uvarint(1))
    out += _I32.pack(value.session_timeout_ms)
    out += encode_uvarint(len(value.supported_protocols) + 1)
    for name, metadata in value.supported_protocols:
        out += compact_string(name) + compact_bytes(metadata) + NO_TAGS
    out += NO_TAGS
    return bytes(out)


def encode_value(value: ConsumerValue) -> bytes:
    out = bytearray(_I16.pack(VALUE_VERSION))
    if isinstance(value, ConsumerGroupMetadataValue):
        out += _I32.pack(value.epoch)
        hashed = [(_METADATA_HASH_TAG, _I64.pack(value.metadata_hash))]
        out += encode_tagged_fields(hashed if value.metadata_hash else [])
    elif isinstance(value, ConsumerGroupMemberMetadataValue):
        out += compact_string(value.instance_id)
        out += compact_string(value.rack_id)
        out += compact_string(value.client_id)
        out += compact_string(value.client_host)
        out += compact_strings(value.subscribed_topic_names)
        out += compact_string(value.subscribed_topic_regex)
        out += _I32.pack(value.rebalance_timeout_ms)
        out += compact_string(value.server_assignor)
        classic = value.classic_member_metadata
        tag = _CLASSIC_MEMBER_METADATA_TAG
        fields = [] if classic is None else [(tag, _classic_member_metadata(classic))]
        out += encode_tagged_fields(fields)
    elif isinstance(value, ConsumerGroupTargetAssignmentMetadataValue):
        out += _I32.pack(value.assignment_epoch) + NO_TAGS
    elif isinstance(value, ConsumerGroupTargetAssignmentMemberValue):
        out += encode_assignment(value.assignment) + NO_TAGS
    elif isinstance(value, ConsumerGroupCurrentMemberAssignmentValue):
        out += struct.pack(">iib", value.member_epoch, value.previous_member_epoch, value.state)
        out += encode_assignment(value.assigned)
        out += encode_assignment(value.pending_revocation)
        out += NO_TAGS
    elif isinstance(value, ConsumerGroupRegularExpressionValue):
        out += compact_strings(value.topics)
        out += struct.pack(">qq", value.version, value.timestamp_ms)
        out += NO_TAGS
    else:  # ConsumerGroupPartitionMetadataValue: Kafka 4.1 writes none, and neither do we
        raise TypeError(f"not a value Gregor writes: {type(value).__name__}")
    return bytes(out)


# -- decoding -------------------------------------------------------------------------------
def read_key(record_type: int, r: Reader) -> ConsumerKey:
    """The key fields after the record type (one of ``KEY_TYPES``); records.py's
    ``decode_key`` calls this."""
    group_id = r.string(False) or ""
    if record_type == 3:
        return ConsumerGroupMetadataKey(group_id)
    if record_type == 4:
        return ConsumerGroupPartitionMetadataKey(group_id)
    if record_type == 6:
        return ConsumerGroupTargetAssignmentMetadataKey(group_id)
    second = r.string(False) or ""
    if record_type == 5:
        return ConsumerGroupMemberMetadataKey(group_id, second)
    if record_type == 7:
        return ConsumerGroupTargetAssignmentMemberKey(group_id, second)
    if record_type == 8:
        return ConsumerGroupCurrentMemberAssignmentKey(group_id, second)
    if record_type == 16:
        return ConsumerGroupRegularExpressionKey(group_id, second)
    raise RecordFormatError(f"not a consumer group record type: {record_type}")


def _read_classic_member_metadata(r: Reader) -> ClassicMemberMetadata | None:
    try:
        present, r.pos = read_uvarint(r.buf, r.pos)  # a nullable struct's marker: 0 is null
    except VarintError as e:
        raise RecordFormatError(str(e)) from None
    if not present:
        return None
    session_timeout_ms = r.int32()
    protocols = []
    for _ in range(r.count(3)):
        name = r.string(False) or ""
        metadata = r.blob()
        if metadata is None:
            raise RecordFormatError("classic member protocol with null metadata")
        r.tagged_fields()
        protocols.append((name, metadata))
    r.tagged_fields()
    return ClassicMemberMetadata(session_timeout_ms, tuple(protocols))


def _read_partition_metadata(r: Reader) -> ConsumerGroupPartitionMetadataValue:
    topics = []
    for _ in range(r.count(23)):  # id, name, count, racks, tags: 23 bytes at least
        topic_id = r.uuid()
        name = r.string(False) or ""
        num_partitions = r.int32()
        for _ in range(r.count(6)):  # PartitionMetadata: Partition, Racks, tags
            r.int32()
            read_strings(r)
            r.tagged_fields()
        r.tagged_fields()
        topics.append(TopicMetadata(topic_id, name, num_partitions))
    r.tagged_fields()
    return ConsumerGroupPartitionMetadataValue(tuple(topics))


def _read_member_metadata(r: Reader) -> ConsumerGroupMemberMetadataValue:
    instance_id = r.string(True)
    rack_id = r.string(True)
    client_id = r.string(False) or ""
    client_host = r.string(False) or ""
    topic_names = read_strings(r)
    topic_regex = r.string(True)
    rebalance_timeout_ms = r.int32()
    server_assignor = r.string(True)
    classic = read_tagged_fields(r).get(_CLASSIC_MEMBER_METADATA_TAG)
    return ConsumerGroupMemberMetadataValue(
        instance_id,
        rack_id,
        client_id,
        client_host,
        topic_names,
        topic_regex,
        rebalance_timeout_ms,
        server_assignor,
        None if classic is None else _read_classic_member_metadata(classic),
    )


def decode_value(key: ConsumerKey, value: bytes) -> ConsumerValue:
    """The value of a record with this key (raises RecordFormatError if it won't parse)."""
    r = record_reader(value)
    version = r.int16()
    if version != VALUE_VERSION:
        raise RecordFormatError(f"unknown {type(key).__name__} value version {version}")
    r.flexible = True
    decoded: ConsumerValue
    if isinstance(key, ConsumerGroupMetadataKey):
        epoch = r.int32()
        hashed = read_tagged_fields(r).get(_METADATA_HASH_TAG)
        return ConsumerGroupMetadataValue(epoch, 0 if hashed is None else hashed.int64())
    if isinstance(key, ConsumerGroupPartitionMetadataKey):
        return _read_partition_metadata(r)
    if isinstance(key, ConsumerGroupMemberMetadataKey):
        return _read_member_metadata(r)
    if isinstance(key, ConsumerGroupTargetAssignmentMetadataKey):
        decoded = ConsumerGroupTargetAssignmentMetadataValue(r.int32())
    elif isinstance(key, ConsumerGroupTargetAssignmentMemberKey):
        decoded = ConsumerGroupTargetAssignmentMemberValue(read_assignment(r))
    elif isinstance(key, ConsumerGroupCurrentMemberAssignmentKey):
        epochs = r.int32(), r.int32(), r.int8()
        assigned = read_assignment(r)
        decoded = ConsumerGroupCurrentMemberAssignmentValue(*epochs, assigned, read_assignment(r))
    else:
        topics = read_strings(r)
        decoded = ConsumerGroupRegularExpressionValue(topics, r.int64(), r.int64())
    r.tagged_fields()
    return decoded
