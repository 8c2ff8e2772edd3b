"""The records of ``__consumer_offsets``, byte-compatible with what Kafka writes.

Keys: offset commit (version 0/1: group, topic, partition) and group metadata (version 2:
group). Values: offset commit v0-v4 (we write v3) and group metadata v0-v4 (we write v3).
A null value is a tombstone. Versions 4 of both values are "flexible" (compact strings
and tagged fields); we read them so a log written by a newer Kafka still loads. The records
of consumer-protocol groups (key versions, that is record types, 3-8 and 16) are in
``consumer_records.py``, those of share groups (10-15) in ``share_records.py``;
``decode_key`` returns their keys too.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import lru_cache

from gregor.coordinator import consumer_records, share_records
from gregor.coordinator.record_format import RecordFormatError, encode_string, record_reader

OFFSETS_TOPIC = "__consumer_offsets"

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_OFFSET_V3_HEAD = struct.Struct(">hqih")  # version, offset, leader epoch, metadata length
_OFFSET_V1_HEAD = struct.Struct(">hq")  # version, offset
_TWO_I64 = struct.Struct(">qq")


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


@dataclass(slots=True)  # not frozen: made for every committed offset, and frozen costs 4x
class OffsetValue:
    offset: int
    leader_epoch: int  # -1 when unknown
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1  # only value v1 carries one


@dataclass(frozen=True, slots=True)
class MemberValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    state_timestamp: int  # -1 when unknown
    members: tuple[MemberValue, ...]


@lru_cache(maxsize=65536)  # asked on every request of a group
def partition_for(group_id: str, partitions: int) -> int:
    """Kafka's choice: ``Utils.abs(groupId.hashCode) % partitions`` with Java's String hash."""
    h = 0
    data = group_id.encode("utf-16-be", "surrogatepass")
    for (unit,) in struct.iter_unpack(">H", data):
        h = (31 * h + unit) & 0xFFFFFFFF
    if h >= 0x80000000:
        h -= 1 << 32
    return (0 if h == -(1 << 31) else abs(h)) % partitions


# -- encoding ---------------------------------------------------------------------------
def _bytes(value: bytes) -> bytes:
    return _I32.pack(len(value)) + value


@lru_cache(maxsize=65536)  # the same few keys on every commit of a consumer
def encode_offset_key(group: str, topic: str, partition: int) -> bytes:
    return (
        _I16.pack(OFFSET_KEY_VERSION)
        + encode_string(group)
        + encode_string(topic)
        + _I32.pack(partition)
    )


def encode_group_key(group: str) -> bytes:
    return _I16.pack(GROUP_KEY_VERSION) + encode_string(group)


def encode_offset_value(value: OffsetValue) -> bytes:
    """Version 3, or version 1 when the commit asked for its own retention (only v1 has
    an expire timestamp), as Kafka does."""
    if value.expire_timestamp >= 0:
        return (
            _OFFSET_V1_HEAD.pack(1, value.offset)
            + encode_string(value.metadata)
            + _TWO_I64.pack(value.commit_timestamp, value.expire_timestamp)
        )
    metadata = value.metadata.encode()
    return (
        _OFFSET_V3_HEAD.pack(OFFSET_VALUE_VERSION, value.offset, value.leader_epoch, len(metadata))
        + metadata
        + _I64.pack(value.commit_timestamp)
    )


def encode_group_value(value: GroupValue) -> bytes:
    out = bytearray(_I16.pack(GROUP_VALUE_VERSION))
    out += encode_string(value.protocol_type)
    out += _I32.pack(value.generation)
    out += encode_string(value.protocol)
    out += encode_string(value.leader)
    out += _I64.pack(value.state_timestamp)
    out += _I32.pack(len(value.members))
    for m in value.members:
        out += encode_string(m.member_id)
        out += encode_string(m.group_instance_id)
        out += encode_string(m.client_id)
        out += encode_string(m.client_host)
        out += _I32.pack(m.rebalance_timeout_ms)
        out += _I32.pack(m.session_timeout_ms)
        out += _bytes(m.subscription)
        out += _bytes(m.assignment)
    return bytes(out)


# -- decoding ---------------------------------------------------------------------------
def decode_key(
    key: bytes,
) -> OffsetKey | GroupKey | consumer_records.ConsumerKey | share_records.ShareKey:
    """The key of any record; its int16 version is the record type (0-2 classic, 3-8 and
    16 consumer-protocol groups: ``consumer_records.py``, 10-15 share groups:
    ``share_records.py``)."""
    r = record_reader(key)
    version = r.int16()
    if version in (0, 1):
        group, topic = r.string(True), r.string(True)
        if group is None or topic is None:
            raise RecordFormatError("offset key with a null group or topic")
        return OffsetKey(group, topic, r.int32())
    if version == 2:
        group = r.string(True)
        if group is None:
            raise RecordFormatError("group key with a null group")
        return GroupKey(group)
    if version in consumer_records.KEY_TYPES:
        return consumer_records.read_key(version, r)
    if version in share_records.KEY_TYPES:
        return share_records.read_key(version, r)
    raise RecordFormatError(f"unknown __consumer_offsets key version {version}")


def decode_offset_value(value: bytes) -> OffsetValue:
    r = record_reader(value)
    version = r.int16()
    if not 0 <= version <= 4:
        raise RecordFormatError(f"unknown offset commit value version {version}")
    r.flexible = version >= 4
    offset = r.int64()
    epoch = r.int32() if version >= 3 else -1
    metadata = r.string(True) or ""
    timestamp = r.int64()
    expire = r.int64() if version == 1 else -1
    r.tagged_fields()
    return OffsetValue(offset, epoch, metadata, timestamp, expire)


def decode_group_value(value: bytes) -> GroupValue:
    r = record_reader(value)
    version = r.int16()
    if not 0 <= version <= 4:
        raise RecordFormatError(f"unknown group metadata value version {version}")
    r.flexible = version >= 4
    protocol_type = r.string(True) or ""
    generation = r.int32()
    protocol = r.string(True)
    leader = r.string(True)
    state_timestamp = r.int64() if version >= 2 else -1
    members = []
    for _ in range(r.count(1)):
        member_id = r.string(True) or ""
        instance_id = r.string(True) if version >= 3 else None
        client_id = r.string(True) or ""
        client_host = r.string(True) or ""
        session_timeout = r.int32()
        rebalance_timeout = session_timeout
        if version >= 1:
            rebalance_timeout, session_timeout = session_timeout, r.int32()
        subscription = r.blob() or b""
        assignment = r.blob() or b""
        r.tagged_fields()
        members.append(
            MemberValue(
                member_id,
                instance_id,
                client_id,
                client_host,
                rebalance_timeout,
                session_timeout,
                subscription,
                assignment,
            )
        )
    r.tagged_fields()
    return GroupValue(protocol_type, generation, protocol, leader, state_timestamp, tuple(members))
