"""Produce requests and responses, hand-coded for the hot path.

Every produce request is decoded and answered, so this pair skips the generic
schema walk (``gregor.wire.tagged``) and kio's writer. Layouts follow ProduceRequest and
ProduceResponse v3-v13 (v12 is v11; v13 names topics by id, KIP-516); tests check them
byte for byte against kio.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field

from gregor.wire.compression import ZSTD
from gregor.wire.leader_hints import NodeEndpoint, current_leader_field, node_endpoints_field
from gregor.wire.reader import Reader
from gregor.wire.records import (
    BatchHeader,
    InvalidRecordError,
    UnsupportedCompressionError,
    split_batches,
)
from gregor.wire.varint import encode_uvarint

MIN_VERSION, MAX_VERSION = 3, 13
_FLEXIBLE_FROM = 9
_TOPIC_IDS_FROM = 13
_LEADER_HINTS_FROM = 10

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")  # acks, timeout
_PARTITION_HEAD = struct.Struct(">ihqq")  # index, error, base offset, log append time
_MAGIC_AT = 16
_ZSTD_FROM = 7
_ZERO_UUID = uuid.UUID(int=0)


@dataclass(slots=True)
class PartitionData:
    index: int
    records: memoryview | None


@dataclass(slots=True)
class TopicData:
    name: str  # from v13 empty until resolved from the topic id (in apis)
    partitions: list[PartitionData]
    topic_id: uuid.UUID | None = None  # v13+


@dataclass(slots=True)
class ProduceRequest:
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topics: list[TopicData]


@dataclass(slots=True)
class PartitionResult:
    index: int
    error_code: int = 0
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    record_errors: list[tuple[int, str]] = field(default_factory=list)  # (batch index, message)
    error_message: str | None = None
    current_leader: tuple[int, int] | None = None  # v10+: (leader id, epoch), KIP-951


def check_records(version: int, records: memoryview | None) -> BatchHeader:
    """Kafka's ProduceRequest.validateRecords: exactly one magic-2 batch per partition, and
    zstd only from version 7. Returns that batch's header; raises InvalidRecordError,
    UnsupportedCompressionError or (bytes that are not a batch) CorruptRecordError."""
    if not records:
        raise InvalidRecordError(
            f"Produce requests with version {version} must have at least one record batch "
            "per partition"
        )
    if len(records) > _MAGIC_AT and records[_MAGIC_AT] != 2:
        raise InvalidRecordError(
            f"Produce requests with version {version} are only allowed to contain record "
            "batches with magic version 2"
        )
    headers = split_batches(records)
    if len(headers) != 1:
        raise InvalidRecordError(
            f"Produce requests with version {version} are only allowed to contain exactly "
            "one record batch per partition"
        )
    if headers[0].compression == ZSTD and version < _ZSTD_FROM:
        raise UnsupportedCompressionError(
            f"Produce requests with version {version} may not use zstd compression"
        )
    return headers[0]


def decode_produce_request(version: int, buf: bytes | bytearray, offset: int) -> ProduceRequest:
    r = Reader(buf, offset, version >= _FLEXIBLE_FROM)
    transactional_id = r.string(nullable=True)
    acks, timeout_ms = r.unpack(_ACKS_TIMEOUT)
    topics = []
    by_id = version >= _TOPIC_IDS_FROM
    for _ in range(r.count(2)):
        topic_id = r.uuid() if by_id else None
        name = "" if by_id else r.string(nullable=False)
        partitions = []
        for _ in range(r.count(5)):
            index = r.int32()
            partitions.append(PartitionData(index, r.records()))
            r.tagged_fields()
        r.tagged_fields()
        # A plain str where TopicName is declared: the hot path skips kio's phantom checks.
        topics.append(TopicData(name, partitions, topic_id))  # type: ignore[arg-type]
    r.tagged_fields()
    return ProduceRequest(transactional_id, acks, timeout_ms, topics)


def encode_produce_response(
    version: int,
    topics: list[tuple[TopicData, list[PartitionResult]]],
    throttle_ms: int = 0,
    node_endpoints: list[NodeEndpoint] | None = None,
) -> bytes:
    """Each topic is answered by name, or from v13 by id; from v10 ``node_endpoints`` are
    those of the current leaders named (KIP-951)."""
    flexible = version >= _FLEXIBLE_FROM
    by_id = version >= _TOPIC_IDS_FROM
    out = bytearray()

    def length(n: int) -> None:
        if flexible:
            out.extend(encode_uvarint(n + 1))
        else:
            out.extend(_I32.pack(n))

    def string(value: str | None) -> None:
        if value is None:
            out.extend(b"\x00" if flexible else b"\xff\xff")
            return
        encoded = value.encode()
        out.extend(encode_uvarint(len(encoded) + 1) if flexible else _I16.pack(len(encoded)))
        out.extend(encoded)

    length(len(topics))
    for topic, partitions in topics:
        if by_id:
            out += (topic.topic_id or _ZERO_UUID).bytes
        else:
            encoded = topic.name.encode()
            if flexible:
                out += encode_uvarint(len(encoded) + 1)
            else:
                out += _I16.pack(len(encoded))
            out += encoded
        length(len(partitions))
        for p in partitions:
            out += _PARTITION_HEAD.pack(p.index, p.error_code, p.base_offset, p.log_append_time)
            if version >= 5:
                out += p.log_start_offset.to_bytes(8, "big", signed=True)
            if version >= 8:
                length(len(p.record_errors))
                for batch_index, message in p.record_errors:
                    out += _I32.pack(batch_index)
                    string(message)
                    if flexible:
                        out += b"\x00"
                string(p.error_message)
            if p.current_leader is not None and version >= _LEADER_HINTS_FROM:
                out += b"\x01" + current_leader_field(0, *p.current_leader)
            elif flexible:
                out += b"\x00"
        if flexible:
            out += b"\x00"
    out += _I32.pack(throttle_ms)
    if version >= _LEADER_HINTS_FROM:
        out += node_endpoints_field(node_endpoints or [])
    elif flexible:
        out += b"\x00"
    return bytes(out)


def throttle_position(
    version: int, size: int, node_endpoints: list[NodeEndpoint] | None = None
) -> int:
    """Where the throttle time is in an encoded ProduceResponse of ``size`` bytes: it ends
    the body, before the tagged fields (which from v10 may hold the node endpoints)."""
    if version >= _LEADER_HINTS_FROM:
        tail = len(node_endpoints_field(node_endpoints or []))
    else:
        tail = 1 if version >= _FLEXIBLE_FROM else 0
    return size - 4 - tail
