"""ShareFetchResponse v1 encoding that leaves record data as file regions (as
wire/fetch.py does for Fetch): the acquired records go out as the log's own batches."""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field

from gregor.wire.fetch import Region
from gregor.wire.leader_hints import NodeEndpoint
from gregor.wire.varint import encode_uvarint

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACQUIRED = struct.Struct(">qqhB")  # first offset, last offset, delivery count, no tags
_LEADER = struct.Struct(">iiB")  # leader id, leader epoch, no tags


@dataclass(slots=True)
class SharePartitionData:
    index: int
    error_code: int = 0
    acknowledge_error_code: int = 0
    current_leader: tuple[int, int] = (-1, -1)
    records: bytes | Region = b""
    acquired: list[tuple[int, int, int]] = field(default_factory=list)


def _string(value: str | None) -> bytes:
    if value is None:
        return b"\x00"
    encoded = value.encode()
    return encode_uvarint(len(encoded) + 1) + encoded


def encode_share_fetch_response(
    topics: list[tuple[uuid.UUID, list[SharePartitionData]]],
    *,
    error_code: int = 0,
    acquisition_lock_timeout_ms: int = 0,
    node_endpoints: list[NodeEndpoint] | None = None,
) -> tuple[list[bytes | Region], int]:
    """Encode a ShareFetchResponse v1 body; return (parts, total size). The throttle time
    is its first four bytes."""
    parts: list[bytes | Region] = []
    head = bytearray(_I32.pack(0) + _I16.pack(error_code) + b"\x00")
    head += _I32.pack(acquisition_lock_timeout_ms) + encode_uvarint(len(topics) + 1)
    total = 0
    for topic_id, partitions in topics:
        head += topic_id.bytes + encode_uvarint(len(partitions) + 1)
        for p in partitions:
            head += _I32.pack(p.index) + _I16.pack(p.error_code) + b"\x00"
            head += _I16.pack(p.acknowledge_error_code) + b"\x00"
            head += _LEADER.pack(*p.current_leader, 0)
            records = p.records
            size = len(records) if isinstance(records, bytes) else records.size
            head += encode_uvarint(size + 1)
            if size:
                parts.append(bytes(head))
                total += len(head)
                parts.append(records)
                total += size
                head = bytearray()
            head += encode_uvarint(len(p.acquired) + 1)
            for first, last, count in p.acquired:
                head += _ACQUIRED.pack(first, last, count, 0)
            head += b"\x00"  # partition tagged fields
        head += b"\x00"  # topic tagged fields
    nodes = sorted(node_endpoints or [])
    head += encode_uvarint(len(nodes) + 1)
    for node_id, host, port, rack in nodes:
        head += _I32.pack(node_id) + _string(host) + _I32.pack(port) + _string(rack) + b"\x00"
    head += b"\x00"  # response tagged fields
    parts.append(bytes(head))
    total += len(head)
    return parts, total
