"""KIP-951 leader discovery: Produce v10+ and Fetch v16+ answers of a partition this broker
does not lead name its current leader (a partition tagged field) and that leader's
endpoint (a response tagged field), so that clients skip a Metadata round trip."""

from __future__ import annotations

import struct

from gregor.wire.varint import encode_uvarint

_LEADER = struct.Struct(">iiB")  # leader id, leader epoch, no tagged fields
_I32 = struct.Struct(">i")

# (node id, host, port, rack)
NodeEndpoint = tuple[int, str, int, str | None]


def current_leader_field(tag: int, leader_id: int, leader_epoch: int) -> bytes:
    """One tagged field holding a LeaderIdAndEpoch."""
    return (
        encode_uvarint(tag)
        + encode_uvarint(_LEADER.size)
        + _LEADER.pack(leader_id, leader_epoch, 0)
    )


def node_endpoints_field(nodes: list[NodeEndpoint]) -> bytes:
    """The response's tagged fields holding only NodeEndpoints (tag 0); none if empty."""
    if not nodes:
        return b"\x00"
    body = bytearray(encode_uvarint(len(nodes) + 1))
    for node_id, host, port, rack in sorted(nodes):
        encoded = host.encode()
        body += _I32.pack(node_id) + encode_uvarint(len(encoded) + 1) + encoded
        body += _I32.pack(port)
        if rack is None:
            body += b"\x00"
        else:
            encoded = rack.encode()
            body += encode_uvarint(len(encoded) + 1) + encoded
        body += b"\x00"
    return b"\x01" + encode_uvarint(0) + encode_uvarint(len(body)) + bytes(body)
