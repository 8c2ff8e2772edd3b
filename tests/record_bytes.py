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

# One assignment (T0: 1; T1: 0, 2) and its bytes as every flexible record carries it:
# TopicPartitions in topic id order, partitions as written.
ASSIGNMENT = {T1: frozenset({2, 0}), T0: frozenset({1})}
ASSIGNMENT_BYTES = (
    b"\x03"  # two TopicPartitions
    + T0.bytes
    + b"\x02"
    + i32(1)
    + NO_TAGS
    + T1.bytes
    + b"\x03"
    + i32(0, 2)
    + NO_TAGS
)
