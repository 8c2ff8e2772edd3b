"""The byte primitives every coordinator record codec shares (``records.py``,
``consumer_records.py``, ``share_records.py``, ``share_state_records.py``, ``txn_records.py``).

Keys, and values before their flexible versions, use Kafka's classic encoding: int16-length
strings (``encode_string``). Flexible values use compact strings, bytes and arrays (uvarint
length + 1) and end every struct with a tagged-field section (``NO_TAGS`` when empty). One
``Reader`` (``record_reader``) reads both: it turns flexible once the version says so.
"""

from __future__ import annotations

import struct
import uuid

from gregor.wire.reader import Reader
from gregor.wire.varint import encode_uvarint

Assignment = dict[uuid.UUID, frozenset[int]]  # topic id -> partitions; no empty sets kept

NO_TAGS = b"\x00"  # an empty tagged-field section

_I16 = struct.Struct(">h")


class RecordFormatError(ValueError):
    """A key or value of a coordinator record that does not parse."""


def record_reader(data: bytes) -> Reader:
    """A reader of one key or value; it turns flexible once the version says so."""
    return Reader(data, 0, False, RecordFormatError)


# -- classic ---------------------------------------------------------------------------------
def encode_string(value: str | None) -> bytes:
    if value is None:
        return _I16.pack(-1)
    raw = value.encode()
    return _I16.pack(len(raw)) + raw


# -- flexible --------------------------------------------------------------------------------
def compact_string(value: str | None) -> bytes:
    if value is None:
        return b"\x00"
    raw = value.encode()
    return encode_uvarint(len(raw) + 1) + raw


def compact_bytes(value: bytes) -> bytes:
    return encode_uvarint(len(value) + 1) + value


def compact_strings(values: tuple[str, ...]) -> bytes:
    return encode_uvarint(len(values) + 1) + b"".join(compact_string(v) for v in values)


def encode_assignment(assignment: Assignment) -> bytes:
    """TopicPartitions[TopicId, Partitions[]int32], in topic id and partition order."""
    topics = sorted((t, sorted(ps)) for t, ps in assignment.items() if ps)
    out = bytearray(encode_uvarint(len(topics) + 1))
    for topic_id, partitions in topics:
        out += topic_id.bytes
        out += encode_uvarint(len(partitions) + 1)
        out += struct.pack(f">{len(partitions)}i", *partitions)
        out += NO_TAGS
    return bytes(out)


def encode_tagged_fields(fields: list[tuple[int, bytes]]) -> bytes:
    """A tagged-field section: the count, then each field's tag, size and bytes by tag."""
    out = bytearray(encode_uvarint(len(fields)))
    for tag, data in fields:
        out += encode_uvarint(tag) + encode_uvarint(len(data)) + data
    return bytes(out)


def read_strings(r: Reader) -> tuple[str, ...]:
    return tuple(r.string(False) or "" for _ in range(r.count(1)))


def read_assignment(r: Reader) -> Assignment:
    assignment: Assignment = {}
    for _ in range(r.count(18)):  # topic id, partitions, tags: 18 bytes at least
        topic_id = r.uuid()
        n = r.count(4)
        partitions = r.unpack(struct.Struct(f">{n}i"))
        r.tagged_fields()
        if partitions:
            assignment[topic_id] = assignment.get(topic_id, frozenset()).union(partitions)
    return assignment


def read_tagged_fields(r: Reader) -> dict[int, Reader]:
    """The tagged fields here, each as a reader bounded by its own bytes."""
    return {
        tag: Reader(r.buf[start:end], 0, True, RecordFormatError)
        for tag, (start, end) in r.tagged_field_spans().items()
    }
