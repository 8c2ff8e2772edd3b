"""OffsetCommit requests and responses, hand-coded for the hot path.

A consumer that commits synchronously sends one of these per poll, so the pair skips the
generic schema walk (``gregor.wire.tagged``) and kio's writer. Layouts follow OffsetCommitRequest
and OffsetCommitResponse v2-v9; tests check them byte for byte against kio.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from gregor.wire.reader import Reader
from gregor.wire.varint import encode_uvarint

MIN_VERSION, MAX_VERSION = 2, 9
_FLEXIBLE_FROM = 8

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_OFFSET = struct.Struct(">iq")  # partition index, committed offset
_OFFSET_EPOCH = struct.Struct(">iqi")  # ... and committed leader epoch (v6+)
_RESULT = struct.Struct(">ih")  # partition index, error code


# (partition index, committed offset, committed leader epoch, committed metadata): a plain
# tuple, as a consumer commits all its partitions on every poll.
CommitPartition = tuple[int, int, int, str | None]


@dataclass(slots=True)
class CommitTopic:
    name: str
    partitions: list[CommitPartition]


@dataclass(slots=True)
class OffsetCommitRequest:
    group_id: str
    generation_id_or_member_epoch: int
    member_id: str
    group_instance_id: str | None
    retention_time_ms: int  # v2-v4 only; -1 means the broker's default
    topics: list[CommitTopic]


def decode_offset_commit_request(
    version: int, buf: bytes | bytearray, offset: int
) -> OffsetCommitRequest:
    r = Reader(buf, offset, version >= _FLEXIBLE_FROM)
    group_id = r.string(nullable=False)
    generation = r.int32()
    member_id = r.string(nullable=False)
    retention_ms = r.int64() if version <= 4 else -1
    instance_id = r.string(nullable=True) if version >= 7 else None
    with_epoch = version >= 6
    head = _OFFSET_EPOCH if with_epoch else _OFFSET
    topics = []
    for _ in range(r.count(2)):
        name = r.string(nullable=False)
        partitions: list[CommitPartition] = []
        for _ in range(r.count(head.size + 1)):
            fields = r.unpack(head)
            metadata = r.string(nullable=True)
            r.tagged_fields()
            partitions.append((*fields, metadata) if with_epoch else (*fields, -1, metadata))
        r.tagged_fields()
        # Plain str and int where the kio-style fields declare phantom types (TopicName,
        # GroupId, ...): the hot path skips their checks; the reader bounds every value.
        topics.append(CommitTopic(name, partitions))  # type: ignore[arg-type]
    r.tagged_fields()
    return OffsetCommitRequest(
        group_id,  # type: ignore[arg-type]
        generation,
        member_id,  # type: ignore[arg-type]
        instance_id,
        retention_ms,
        topics,
    )


def encode_offset_commit_response(
    version: int, topics: list[tuple[str, list[tuple[int, int]]]], throttle_ms: int = 0
) -> bytes:
    """``topics``: (name, [(partition index, error code)]) in request order."""
    flexible = version >= _FLEXIBLE_FROM
    out = bytearray()
    if version >= 3:
        out += _I32.pack(throttle_ms)
    _length(out, flexible, len(topics))
    for name, partitions in topics:
        encoded = name.encode()
        if flexible:
            out += encode_uvarint(len(encoded) + 1)
        else:
            out += _I16.pack(len(encoded))
        out += encoded
        _length(out, flexible, len(partitions))
        for index, error in partitions:
            out += _RESULT.pack(index, error)
            if flexible:
                out.append(0)
        if flexible:
            out.append(0)
    if flexible:
        out.append(0)
    return bytes(out)


def _length(out: bytearray, flexible: bool, n: int) -> None:
    if flexible:
        out += encode_uvarint(n + 1)
    else:
        out += _I32.pack(n)
