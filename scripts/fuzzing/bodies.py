"""Request bodies written straight from kio's request schemas, valid or deliberately not.

``BodyWriter`` walks a kio request entity the way ``gregor.wire.tagged`` decodes it and writes
plausible values for every field. With ``mutate`` > 0 each field is, with that
probability, replaced by something its schema forbids: a null non-nullable string or
array, a length or count of -1, 2^31-1 or past the end, a bad boolean or UTF-8, a huge
tagged-field count. The writer never builds an entity object, so it can say what kio's
own writer would refuse to.
"""

from __future__ import annotations

import random
import struct
from dataclasses import Field, fields
from functools import cache

from crc32c import crc32c
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

from gregor.wire.records import build_batch
from gregor.wire.varint import encode_uvarint  # values of 2^35 and above too: decoders refuse them

INT32_MAX = 2**31 - 1
# Lengths and counts a hostile client might claim: null, negative, huge, or just past the end.
HOSTILE_COUNTS = (-1, -2, INT32_MAX, 2**31 - 2, 1 << 20, 65_535)
_FIXED = {"int8": ">b", "int16": ">h", "int32": ">i", "int64": ">q"}
_BOUNDARY = {
    "int8": (-128, -1, 0, 127),
    "int16": (-32768, -1, 0, 32767),
    "int32": (-(2**31), -1, 0, INT32_MAX),
    "int64": (-(2**63), -1, 0, 2**63 - 1),
}


@cache
def _schema(entity_type: type) -> tuple[bool, tuple[tuple[Field, object, int | None], ...]]:
    """(flexible, [(field, kind, tag)]) of one entity type, introspected once."""
    return entity_type.__flexible__, tuple(
        (f, classify_field(f), get_field_tag(f)) for f in fields(entity_type)
    )


class BodyWriter:
    """Writes one random request body per ``entity()`` call from the given ``rng``."""

    def __init__(
        self,
        rng: random.Random,
        mutate: float = 0.0,
        topics: tuple[str, ...] = ("fuzz",),
        groups: tuple[str, ...] = ("fuzz-group",),
    ) -> None:
        self.rng = rng
        self.mutate = mutate
        self.topics = topics
        self.groups = groups

    def _hostile(self) -> bool:
        return self.mutate > 0 and self.rng.random() < self.mutate

    def entity(self, entity_type: type) -> bytes:
        flexible, schema = _schema(entity_type)
        out = []
        for field, kind, tag in schema:
            if tag is None:  # tagged fields keep their defaults: none are written
                out.append(self._field(field, kind, flexible))
        if flexible:
            out.append(self._tagged_fields())
        return b"".join(out)

    def _tagged_fields(self) -> bytes:
        if not self._hostile():
            return b"\x00"
        # An unknown tag whose size runs past the end, or a count of billions.
        rng = self.rng
        if rng.random() < 0.5:
            return (
                encode_uvarint(1)
                + encode_uvarint(rng.randrange(1 << 14))
                + encode_uvarint(rng.choice((1 << 30, 9)))
            )
        return encode_uvarint(rng.choice((INT32_MAX, 1 << 34)))

    def _field(self, field: Field, kind: object, flexible: bool) -> bytes:
        if isinstance(kind, PrimitiveField):
            return self._primitive(get_schema_field_type(field), field.name, flexible)
        if isinstance(kind, PrimitiveTupleField):
            kafka_type = get_schema_field_type(field)
            count, items = self._count()
            body = b"".join(self._primitive(kafka_type, field.name, flexible) for _ in range(items))
            return self._length(count, flexible, array=True) + body
        if isinstance(kind, EntityField):
            marker = b""
            if is_optional(field):  # KIP-893 nullable struct: int8 marker, -1 for null
                if self.rng.random() < 0.2:
                    return b"\xff"
                marker = b"\x01"
            return marker + self.entity(kind.type_)
        if isinstance(kind, EntityTupleField):
            count, items = self._count()
            body = b"".join(self.entity(kind.type_) for _ in range(items))
            return self._length(count, flexible, array=True) + body
        raise TypeError(f"unsupported field {field.name}")

    def _count(self) -> tuple[int, int]:
        """(claimed count, items actually written); they differ only when hostile."""
        items = self.rng.choice((0, 1, 1, 2, 3))
        if self._hostile():
            return self.rng.choice((*HOSTILE_COUNTS, items + 1, items + 50)), items
        return items, items

    def _length(self, value: int, flexible: bool, array: bool = False, text: bool = False) -> bytes:
        """A length or count prefix; compact ones are stored plus one (0 means null)."""
        if flexible:
            return encode_uvarint(max(value + 1, 0) & 0xFFFFFFFF)
        if text:
            return struct.pack(">h", max(min(value, 32767), -32768))
        return struct.pack(">i", value)

    def _primitive(self, kafka_type: str, name: str, flexible: bool) -> bytes:
        rng = self.rng
        hostile = self._hostile()
        if kafka_type in _FIXED:
            fmt = _FIXED[kafka_type]
            value = rng.choice(_BOUNDARY[kafka_type]) if hostile else rng.choice((0, 0, 1, 2, -1))
            return struct.pack(fmt, value)
        if kafka_type in ("timedelta_i32", "timedelta_i64"):
            fmt = ">i" if kafka_type == "timedelta_i32" else ">q"
            value = rng.choice(_BOUNDARY["int32"]) if hostile else rng.choice((0, 10, 100))
            return struct.pack(fmt, value)
        if kafka_type == "float64":  # quota values: hostile ones are not finite or not > 0
            hostile_values = (float("nan"), float("inf"), float("-inf"), -1.0, 0.0, 1e308)
            return struct.pack(">d", rng.choice(hostile_values if hostile else (1.0, 1024.0)))
        if kafka_type == "bool":
            return bytes([rng.randrange(2, 256) if hostile else rng.randrange(2)])
        if kafka_type == "uuid":
            return rng.randbytes(16) if hostile or rng.random() < 0.3 else bytes(16)
        if kafka_type == "string":
            return self._string(name, flexible, hostile)
        if kafka_type in ("bytes", "records"):
            return self._bytes(kafka_type, flexible, hostile)
        raise TypeError(f"no writer for kafka_type {kafka_type!r}")

    def _string(self, name: str, flexible: bool, hostile: bool) -> bytes:
        rng = self.rng
        if hostile:
            choice = rng.randrange(3)
            if choice == 0:  # null, also where the schema forbids it
                return self._length(-1, flexible, text=True)
            if choice == 1:  # a length past the end
                return self._length(rng.choice((32767, 1000)), flexible, text=True) + b"ab"
            return self._length(2, flexible, text=True) + b"\xc3\x28"  # invalid UTF-8
        if "topic" in name or name == "name":
            value = rng.choice(self.topics)
        elif "group" in name:
            value = rng.choice(self.groups)
        else:
            value = "".join(rng.choices("abcxyz-._", k=rng.randrange(8)))
        data = value.encode()
        return self._length(len(data), flexible, text=True) + data

    def _bytes(self, kafka_type: str, flexible: bool, hostile: bool) -> bytes:
        rng = self.rng
        if hostile:
            return self._length(rng.choice(HOSTILE_COUNTS), flexible) + rng.randbytes(4)
        if kafka_type == "records" and rng.random() < 0.5:
            data = self.batch()
        else:
            data = rng.randbytes(rng.randrange(24))
        return self._length(len(data), flexible) + data

    def batch(self) -> bytes:
        """A record batch with a valid CRC; its records are sometimes garbage."""
        rng = self.rng
        records = [
            (None, rng.randbytes(rng.randrange(16)), [], 0) for _ in range(rng.randint(1, 3))
        ]
        batch = bytearray(build_batch(records))
        if rng.random() < 0.5:  # corrupt the records, then fix the CRC so only a walk finds it
            for _ in range(rng.randint(1, 4)):
                batch[rng.randrange(61, len(batch))] = rng.randrange(256)
            batch[17:21] = struct.pack(">I", crc32c_of(batch))
        return bytes(batch)


def crc32c_of(batch: bytes | bytearray) -> int:
    """The CRC a v2 record batch carries: CRC-32C of everything after the CRC field."""
    return crc32c(bytes(batch[21:]))
