"""Request and response headers (RequestHeader v1/v2, ResponseHeader v0/v1).

Parsed by hand rather than through kio: the header must be readable even when the
API key or version is one we do not serve, so that the error can be answered with
the client's correlation id.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from gregor.wire.reader import Reader

_HEAD = struct.Struct(">hhih")
_PEEK = struct.Struct(">hhi")
_CORRELATION = struct.Struct(">i")


class MalformedHeaderError(ValueError):
    """The frame is too short or its header fields are inconsistent."""


@dataclass(slots=True, frozen=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int  # where the request body starts inside the frame


def skip_tagged_fields(buf: bytes | bytearray, pos: int) -> int:
    """The position after the tagged-field section at ``pos``."""
    reader = Reader(buf, pos, True, MalformedHeaderError)
    reader.tagged_fields()
    return reader.pos


def decode_request_header(frame: bytes | bytearray, flexible: bool) -> RequestHeader:
    """Decode header v1 (``flexible`` false) or v2 (``flexible`` true)."""
    if len(frame) < _HEAD.size:
        raise MalformedHeaderError(f"request header needs {_HEAD.size} bytes, got {len(frame)}")
    api_key, api_version, correlation_id, client_len = _HEAD.unpack_from(frame, 0)
    pos = _HEAD.size
    client_id = None
    if client_len >= 0:
        end = pos + client_len
        if end > len(frame):
            raise MalformedHeaderError("truncated client id")
        try:
            client_id = bytes(frame[pos:end]).decode()
        except UnicodeDecodeError as e:
            raise MalformedHeaderError("client id is not UTF-8") from e
        pos = end
    elif client_len != -1:
        raise MalformedHeaderError(f"negative client id length {client_len}")
    if flexible:
        pos = skip_tagged_fields(frame, pos)
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos)


def peek_api(frame: bytes | bytearray | memoryview) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) from the fixed start of any request header."""
    if len(frame) < 8:
        raise MalformedHeaderError(f"request header needs 8 bytes, got {len(frame)}")
    return _PEEK.unpack_from(frame, 0)


def encode_response_header(correlation_id: int, flexible: bool) -> bytes:
    """Header v1 (with an empty tagged-field section) for flexible responses, else v0."""
    head = _CORRELATION.pack(correlation_id)
    return head + b"\x00" if flexible else head
