"""A specialised encoder per kio entity type, byte-for-byte kio's writer, several times faster.

kio's writer (``kio.serial.entity_writer``) calls one writer per field and one ``struct.pack``
per array item, and opens an ``io.BytesIO`` per flexible entity for its tagged fields; a
ConsumerGroupDescribe response of 1.5 MB held the event loop for 75-93 ms. This module
reads the same introspection (``kio.serial._introspect``) once per type and builds a writer
that appends to one ``bytearray``: consecutive fixed-width fields are packed by one
precompiled ``struct.Struct``, primitive arrays by one ``struct.pack`` each, and an entity
whose tagged fields are all at their defaults writes its zero count without a buffer. The
encoding decisions (legacy or compact, nullability, tagged defaults, RequestHeader.client_id's
legacy string, KIP-893's nullable-struct marker) are kio's; tests/test_wire_encoder.py holds
the output equal to kio's for every schema.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import Field, fields
from functools import cache
from operator import attrgetter
from typing import Any, TypeAlias
from uuid import UUID

from kio.serial._implicit_defaults import get_tagged_field_default
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
from kio.serial.errors import OutOfBoundValue
from kio.static.constants import uuid_zero
from kio.static.protocol import Entity

from gregor.wire.struct_codes import NUMBER_CODES
from gregor.wire.varint import encode_uvarint

__all__ = ["EncodedItems", "entity_encoder"]

# Appends one value (a field's, an array item's) to the output.
Write: TypeAlias = Callable[[bytearray, Any], None]

# The fixed-width Kafka types, as struct format characters. ErrorCode is an IntEnum, so it
# packs as its value.
_FIXED = {**NUMBER_CODES, "bool": "?"}
_INT16 = struct.Struct(">h").pack
_INT32 = struct.Struct(">i").pack
_INT64 = struct.Struct(">q").pack
_ZERO_UUID = uuid_zero.bytes
_LEGACY_NULL_ARRAY = _INT32(-1)
_INT16_MAX = 2**15 - 1


@cache
def entity_encoder(entity_type: type[Entity]) -> Callable[[Entity], bytes]:
    """The encoder of ``entity_type``: an entity in, kio's bytes for it out."""
    write = _entity_writer(entity_type, nullable=False)

    def encode(entity: Entity) -> bytes:
        out = bytearray()
        write(out, entity)
        return bytes(out)

    return encode


class EncodedItems:
    """The items of an entity array, already encoded (without the array's length): given
    as an array field's value, they are written as they are. A response answered often
    from state that rarely changes (Metadata's partitions) encodes each item once."""

    __slots__ = ("count", "data")

    def __init__(self, items: Sequence[bytes]) -> None:
        self.count = len(items)
        self.data = b"".join(items)


# --- entities -------------------------------------------------------------------------


@cache
def _entity_writer(entity_type: type[Entity], nullable: bool) -> Write:
    flexible: bool = entity_type.__flexible__
    is_request_header = entity_type.__name__ == "RequestHeader"
    # (getter, writer) pairs; a getter of several fields feeds one struct of all of them.
    steps: list[tuple[Callable[[Any], Any], Write]] = []
    run: list[tuple[str, str]] = []  # the current run of fixed-width fields: (name, format)
    tagged: list[tuple[int, Field[Any], Write]] = []

    for field in fields(entity_type):
        tag = get_field_tag(field)
        write = _field_writer(field, flexible, is_request_header, is_tag=tag is not None)
        if tag is not None:
            tagged.append((tag, field, write))
        elif (fmt := _fixed_format(field, is_request_header)) is not None:
            run.append((field.name, fmt))
        else:
            if run:
                steps.append(_fixed_run(run))
                run = []
            steps.append((attrgetter(field.name), write))
    if run:
        steps.append(_fixed_run(run))

    if tagged and not flexible:
        raise ValueError("Found tagged fields on a non-flexible model")
    if tagged:
        steps.append(_tagged_fields(tagged))

    def write_entity(out: bytearray, entity: Any) -> None:
        for get, write in steps:
            write(out, get(entity))

    def write_flexible_untagged(out: bytearray, entity: Any) -> None:
        for get, write in steps:
            write(out, get(entity))
        out.append(0)  # no tagged fields

    writer = write_flexible_untagged if flexible and not tagged else write_entity
    return _nullable_entity(writer) if nullable else writer


def _fixed_format(field: Field[Any], is_request_header: bool) -> str | None:
    """The struct format of a field that packs into a run, else None."""
    if is_request_header and field.name == "client_id":
        return None
    if not isinstance(classify_field(field), PrimitiveField) or is_optional(field):
        return None
    return _FIXED.get(get_schema_field_type(field))


def _fixed_run(run: list[tuple[str, str]]) -> tuple[Callable[[Any], Any], Write]:
    pack = struct.Struct(">" + "".join(fmt for _name, fmt in run)).pack
    if len(run) == 1:  # attrgetter of one name returns the value, not a tuple
        return attrgetter(run[0][0]), _fixed_writer(pack)

    def write_run(out: bytearray, values: tuple[Any, ...]) -> None:
        out += pack(*values)

    return attrgetter(*(name for name, _fmt in run)), write_run


def _tagged_fields(
    tagged: list[tuple[int, Field[Any], Write]],
) -> tuple[Callable[[Any], Any], Write]:
    """The tagged-field section, in tag order, skipping a field at its default as kio does."""
    tagged.sort(key=lambda t: t[0])
    # kio skips a value equal to the field's default, or to its type's implicit default when
    # it has none: get_tagged_field_default returns whichever applies.
    specs = [
        (encode_uvarint(tag), get_tagged_field_default(field), write)
        for tag, field, write in tagged
    ]

    def write_tagged(out: bytearray, values: tuple[Any, ...]) -> None:
        present: list[bytes] = []
        for (tag, default, write), value in zip(specs, values, strict=True):
            if value == default:
                continue
            body = bytearray()
            write(body, value)
            present.append(tag + encode_uvarint(len(body)) + body)
        out += encode_uvarint(len(present))
        for part in present:
            out += part

    return _tuple_getter([field.name for _tag, field, _write in tagged]), write_tagged


def _tuple_getter(names: list[str]) -> Callable[[Any], tuple[Any, ...]]:
    """The values of the named attributes, as a tuple however many there are."""
    if len(names) > 1:
        return attrgetter(*names)
    get_one = attrgetter(names[0])

    def get(entity: Any) -> tuple[Any, ...]:
        return (get_one(entity),)

    return get


def _nullable_entity(write_entity: Write) -> Write:
    # KIP-893: an int8 marker, -1 for null, 1 before a present struct.
    def write_nullable(out: bytearray, entity: Any) -> None:
        if entity is None:
            out.append(0xFF)
        else:
            out.append(1)
            write_entity(out, entity)

    return write_nullable


# --- fields ---------------------------------------------------------------------------


def _field_writer(
    field: Field[Any], flexible: bool, is_request_header: bool, is_tag: bool
) -> Write:
    # Kafka's RequestHeader.json encodes client_id as a legacy string in every version.
    if is_request_header and field.name == "client_id":
        return _nullable_legacy_string
    # A tagged field's absence is its null, so its value is written as non-nullable.
    optional = False if is_tag else is_optional(field)
    kind = classify_field(field)
    match kind:
        case PrimitiveField():
            return _primitive_writer(get_schema_field_type(field), flexible, optional)
        case PrimitiveTupleField():
            return _primitive_array(get_schema_field_type(field), flexible)
        case EntityField(entity_type):
            return _entity_writer(entity_type, nullable=optional)
        case EntityTupleField(entity_type):
            return _entity_array(_entity_writer(entity_type, nullable=False), flexible)


def _primitive_writer(kafka_type: str, flexible: bool, optional: bool) -> Write:  # noqa: C901
    """The writer of one primitive value; the same cases as kio's ``get_writer``."""
    match (kafka_type, flexible, optional):
        case (fixed, _, False) if fixed in _FIXED:
            return _fixed_writer(struct.Struct(">" + _FIXED[fixed]).pack)
        case ("string" | "bytes" | "records", True, False):
            return _compact_string
        case ("string" | "bytes" | "records", True, True):
            return _nullable_compact_string
        case ("string", False, False):
            return _legacy_string
        case ("string", False, True):
            return _nullable_legacy_string
        case ("bytes" | "records", False, False):
            return _legacy_bytes
        case ("bytes" | "records", False, True):
            return _nullable_legacy_bytes
        case ("uuid", _, _):
            return _uuid
        case ("timedelta_i32", _, False):
            return _timedelta_i32
        case ("timedelta_i64", _, False):
            return _timedelta_i64
        case ("datetime_i64", _, False):
            return _datetime_i64
        case ("datetime_i64", _, True):
            return _nullable_datetime_i64
    raise NotImplementedError(
        f"Failed identifying writer for {kafka_type!r} field {flexible=} {optional=}"
    )


def _fixed_writer(pack: Callable[[Any], bytes]) -> Write:
    def write(out: bytearray, value: Any) -> None:
        out += pack(value)

    return write


def _write_array_length(out: bytearray, length: int, flexible: bool) -> None:
    if flexible:  # length + 1, so that 0 is null
        out += encode_uvarint(length + 1)
    else:
        out += _INT32(length)


def _write_null_array(out: bytearray, flexible: bool) -> None:
    if flexible:
        out.append(0)
    else:
        out += _LEGACY_NULL_ARRAY


# Arrays shorter than this are packed with their length by one precompiled struct.
_SMALL_ARRAY = 0x7F


@cache
def _small_array_packers(fmt: str, flexible: bool) -> tuple[Callable[..., bytes], ...]:
    """Packers of (length, *items) for each array size below _SMALL_ARRAY: a compact
    array's length + 1 fits one varint byte there."""
    length = "B" if flexible else "i"
    return tuple(struct.Struct(f">{length}{n}{fmt}").pack for n in range(_SMALL_ARRAY))


def _primitive_array(kafka_type: str, flexible: bool) -> Write:
    # Array items are never null: nullability belongs to the array.
    if kafka_type in _FIXED:
        fmt = _FIXED[kafka_type]
        small = _small_array_packers(fmt, flexible)
        bias = 1 if flexible else 0  # a compact length is stored + 1

        def write_fixed(out: bytearray, items: Sequence[Any] | None) -> None:
            if items is None:
                _write_null_array(out, flexible)
                return
            n = len(items)
            if n < _SMALL_ARRAY:
                out += small[n](n + bias, *items)
            else:
                _write_array_length(out, n, flexible)
                out += struct.pack(f">{n}{fmt}", *items)

        return write_fixed
    if kafka_type == "uuid":

        def write_uuids(out: bytearray, items: Sequence[UUID | None] | None) -> None:
            if items is None:
                _write_null_array(out, flexible)
                return
            _write_array_length(out, len(items), flexible)
            out += b"".join(_ZERO_UUID if u is None else u.bytes for u in items)

        return write_uuids
    return _entity_array(_primitive_writer(kafka_type, flexible, optional=False), flexible)


def _entity_array(write_item: Write, flexible: bool) -> Write:
    def write_array(out: bytearray, items: Sequence[Any] | EncodedItems | None) -> None:
        if items is None:
            _write_null_array(out, flexible)
            return
        if isinstance(items, EncodedItems):
            _write_array_length(out, items.count, flexible)
            out += items.data
            return
        _write_array_length(out, len(items), flexible)
        for item in items:
            write_item(out, item)

    return write_array


# --- primitive values (the behaviour of kio.serial.writers) --------------------------


def _nullable_compact_string(out: bytearray, value: str | bytes | None) -> None:
    if value is None:
        out.append(0)
        return
    data = value.encode() if isinstance(value, str) else value
    out += encode_uvarint(len(data) + 1)
    out += data


def _compact_string(out: bytearray, value: str | bytes) -> None:
    if value is None:
        raise TypeError("Unexpectedly received None value")
    _nullable_compact_string(out, value)


def _nullable_legacy_string(out: bytearray, value: str | None) -> None:
    if value is None:
        out += _INT16(-1)
        return
    data = value.encode()
    if len(data) > _INT16_MAX:
        raise OutOfBoundValue(
            f"String is too long for legacy string format ({len(data)} > {_INT16_MAX})"
        )
    out += _INT16(len(data))
    out += data


def _legacy_string(out: bytearray, value: str) -> None:
    if value is None:
        raise TypeError("Unexpectedly received None value")
    _nullable_legacy_string(out, value)


def _nullable_legacy_bytes(out: bytearray, value: bytes | None) -> None:
    if value is None:
        out += _INT32(-1)
        return
    out += _INT32(len(value))
    out += value


def _legacy_bytes(out: bytearray, value: bytes) -> None:
    if value is None:
        raise TypeError("Unexpectedly received None value")
    _nullable_legacy_bytes(out, value)


def _uuid(out: bytearray, value: UUID | None) -> None:
    out += _ZERO_UUID if value is None else value.bytes


def _timedelta_i32(out: bytearray, value: Any) -> None:
    out += _INT32(round(value.total_seconds() * 1000))


def _timedelta_i64(out: bytearray, value: Any) -> None:
    out += _INT64(round(value.total_seconds() * 1000))


def _datetime_i64(out: bytearray, value: Any) -> None:
    out += _INT64(round(value.timestamp() * 1000))


def _nullable_datetime_i64(out: bytearray, value: Any) -> None:
    out += _INT64(-1) if value is None else _INT64(round(value.timestamp() * 1000))
