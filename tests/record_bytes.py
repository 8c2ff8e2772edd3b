"""Byte builders for record fixtures written by hand from Kafka's JSON schemas: keys'
strings carry an int16 length, flexible values' compact strings a uvarint length + 1."""

from __future__ import annotations

import struct
import uuid

NOW = 1_700_000_000_000
T0 = uuid.UUID(int=1)  # sorts before T1
T1 = uuid.UUID("f" * 32)


def i16(n: int) -> bytes:
    return struct.pack(">h", n)


def i32(*ns: int) -> bytes:
    return struct.pack(f">{len(ns)}i", *ns)


def i64(n: int) -> bytes:
    return struct.pack(">q", n)


def key_string(s: str) -> bytes:  # keys: int16 length
    return i16(len(s.encode())) + s.encode()


def compact(s: str) -> bytes:  # values: uvarint length + 1 (every fixture here is short)
    return bytes([len(s.encode()) + 1]) + s.encode()


NULL = b"\x00"  # a null compact string
NO_TAGS = b"\x00"
