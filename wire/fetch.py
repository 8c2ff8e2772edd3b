"""FetchResponse encoding that leaves record data as file regions.

kio can only encode records held in memory; a fetch answer must instead point at
segment file regions so the network layer can send them with sendfile. The encoder
returns the response body as a list of byte strings and opaque region objects.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field
from typing import Protocol

from gregor.wire.leader_hints import NodeEndpoint, current_leader_field, node_endpoints_field
from gregor.wire.reader import Reader
from gregor.wire.varint import encode_uvarint

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PART_HEAD = struct.Struct(">ihqq")  # partition, error, high watermark, last stable offset
_I64 = struct.Struct(">q")
_ABORTED = struct.Struct(">qq")
MAX_FETCH_VERSION = 18
_REQUEST_HEAD = struct.Struct(">iiii")  # replica id, max wait, min bytes, max bytes
_REQUEST_HEAD_V15 = struct.Struct(">iii")  # the replica id moved to a tagged field (KIP-903)
_REPLICA_STATE_TAG = 1
_SESSION = struct.Struct(">ii")  # session id, session epoch
# Partition tagged fields holding only DivergingEpoch (tag 0): count 1, tag 0, size 13,
# then epoch, end offset and its own (empty) tagged fields.
_DIVERGING = struct.Struct(">BBBiqB")
_ZERO_UUID = uuid.UUID(int=0)


class Region(Protocol):
    """Bytes that live in a file; only their size matters to the encoder."""

    @property
    def size(self) -> int: ...


@dataclass(slots=True)
class FetchPartition:
    index: int
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted: list[tuple[int, int]] | None = None  # (producer id, first offset)
    records: bytes | Region | None = None
    diverging_epoch: tuple[int, int] | None = None  # v12+: (epoch, end offset), KIP-320
    current_leader: tuple[int, int] | None = None  # v12+: (leader id, epoch), KIP-951


@dataclass(slots=True)
class FetchTopic:
    name: str
    partitions: list[FetchPartition] = field(default_factory=list)
    topic_id: uuid.UUID | None = None  # what v13+ names the topic by (KIP-516)


def encode_fetch_response(
    version: int,
    topics: list[FetchTopic],
    *,
    throttle_ms: int = 0,
    error_code: int = 0,
    session_id: int = 0,
    node_endpoints: list[NodeEndpoint] | None = None,
) -> tuple[list[bytes | Region], int]:
    """Encode a FetchResponse body (v4-v18); return (parts, total size in bytes). From v13
    topics are named by id; from v16 ``node_endpoints`` are those of the current leaders
    named (KIP-951)."""
    if not 4 <= version <= MAX_FETCH_VERSION:
        raise ValueError(f"fetch response v{version} is not encoded here")
    flexible = version >= 12

    def array_len(n: int) -> bytes:
        return encode_uvarint(n + 1) if flexible else _I32.pack(n)

    parts: list[bytes | Region] = []
    head = bytearray(_I32.pack(throttle_ms))
    if version >= 7:
        head += _I16.pack(error_code) + _I32.pack(session_id)
    head += array_len(len(topics))
    total = 0
    for topic in topics:
        if version >= 13:
            head += (topic.topic_id or _ZERO_UUID).bytes
        else:
            name = topic.name.encode()
            head += (encode_uvarint(len(name) + 1) if flexible else _I16.pack(len(name))) + name
        head += array_len(len(topic.partitions))
        for p in topic.partitions:
            head += _PART_HEAD.pack(p.index, p.error_code, p.high_watermark, p.last_stable_offset)
            if version >= 5:
                head += _I64.pack(p.log_start_offset)
            if p.aborted is None:
                head += b"\x00" if flexible else b"\xff\xff\xff\xff"
            else:
                head += array_len(len(p.aborted))
                for producer_id, first_offset in p.aborted:
                    head += _ABORTED.pack(producer_id, first_offset)
                    if flexible:
                        head += b"\x00"
            if version >= 11:
                head += b"\xff\xff\xff\xff"  # preferred read replica: none
            records = p.records
            if records is None:
                head += b"\x00" if flexible else b"\xff\xff\xff\xff"
            else:
                size = len(records) if isinstance(records, bytes) else records.size
                head += encode_uvarint(size + 1) if flexible else _I32.pack(size)
                if size:
                    parts.append(bytes(head))
                    total += len(head)
                    parts.append(records)
                    total += size
                    head = bytearray()
            if flexible:
                if p.current_leader is not None:
                    head += b"\x02" if p.diverging_epoch is not None else b"\x01"
                    if p.diverging_epoch is not None:
                        head += _DIVERGING.pack(1, 0, 13, *p.diverging_epoch, 0)[1:]
                    head += current_leader_field(1, *p.current_leader)
                elif p.diverging_epoch is None:
                    head += b"\x00"  # partition tagged fields
                else:
                    head += _DIVERGING.pack(1, 0, 13, *p.diverging_epoch, 0)
        if flexible:
            head += b"\x00"  # topic tagged fields
    if version >= 16:
        head += node_endpoints_field(node_endpoints or [])
    elif flexible:
        head += b"\x00"  # response tagged fields
    parts.append(bytes(head))
    total += len(head)
    return parts, total


@dataclass(slots=True)
class FetchPartitionRequest:
    partition: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int
    partition_max_bytes: int


@dataclass(slots=True)
class FetchTopicRequest:
    topic: str  # from v13 empty until resolved from the topic id (``resolve`` in apis)
    partitions: list[FetchPartitionRequest]
    topic_id: uuid.UUID | None = None  # v13+


@dataclass(slots=True)
class FetchRequest:
    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: int
    session_id: int
    session_epoch: int
    topics: list[FetchTopicRequest]
    forgotten: list[tuple[str, list[int]]]
    rack_id: str
    forgotten_ids: list[tuple[uuid.UUID, list[int]]] = field(default_factory=list)  # v13+


def decode_fetch_request(version: int, buf: bytes | bytearray, offset: int) -> FetchRequest:
    """Decode FetchRequest v4-v18 (every consumer poll: kept off the generic schema walk).
    Tagged fields other than v15's replica state are skipped."""
    r = Reader(buf, offset, version >= 12)
    by_id = version >= 13
    if version >= 15:
        replica_id = -1
        max_wait_ms, min_bytes, max_bytes = r.unpack(_REQUEST_HEAD_V15)
    else:
        replica_id, max_wait_ms, min_bytes, max_bytes = r.unpack(_REQUEST_HEAD)
    isolation_level = r.int8()
    session_id, session_epoch = r.unpack(_SESSION) if version >= 7 else (0, -1)
    topics = []
    for _ in range(r.count(2)):
        topic_id = r.uuid() if by_id else None
        topic = "" if by_id else r.string(nullable=False)
        partitions = []
        for _ in range(r.count(16)):
            partition = r.int32()
            leader_epoch = r.int32() if version >= 9 else -1
            fetch_offset = r.int64()
            last_fetched_epoch = r.int32() if version >= 12 else -1
            log_start_offset = r.int64() if version >= 5 else -1
            partitions.append(
                FetchPartitionRequest(
                    partition,
                    leader_epoch,
                    fetch_offset,
                    last_fetched_epoch,
                    log_start_offset,
                    r.int32(),
                )
            )
            r.tagged_fields()
        r.tagged_fields()
        # Plain str and lists where TopicName and tuples are declared: the hot path skips
        # kio's phantom checks and copies (here and in the request below).
        topics.append(FetchTopicRequest(topic, partitions, topic_id))  # type: ignore[arg-type]
    forgotten = []
    forgotten_ids = []
    if version >= 7:
        for _ in range(r.count(2)):
            if by_id:
                forgotten_id = r.uuid()
                forgotten_ids.append((forgotten_id, [r.int32() for _ in range(r.count(4))]))
            else:
                topic = r.string(nullable=False)
                forgotten.append((topic, [r.int32() for _ in range(r.count(4))]))
            r.tagged_fields()
    rack_id = r.string(nullable=False) if version >= 11 else ""
    if version >= 15:
        span = r.tagged_field_spans().get(_REPLICA_STATE_TAG)
        if span is not None:
            replica_id = Reader(buf, span[0], True).int32()
    else:
        r.tagged_fields()
    return FetchRequest(
        replica_id,
        max_wait_ms,
        min_bytes,
        max_bytes,
        isolation_level,
        session_id,
        session_epoch,
        topics,
        forgotten,  # type: ignore[arg-type]
        rack_id,  # type: ignore[arg-type]
        forgotten_ids,
    )
