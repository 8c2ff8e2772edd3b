"""Schema-driven decoder for kio entities that skips unknown tagged fields.

kio's native reader raises ``KeyError`` on a tagged field its schema does not
know, while Kafka ignores such fields (KIP-482): newer clients may send tags
this broker has never heard of. This module walks the same kio dataclass
schemas in Python and decodes exactly what the native reader decodes, except
that unknown tags are skipped, a null array is refused where the schema
does not allow null (kio lets it through as None), and a records field is a
memoryview of the input (equal to kio's bytes, without the copy). One reader
per entity type is built once and cached; consecutive fixed-width numbers,
and arrays of them (a partition's replicas, its ISR), are unpacked in one
struct call each: controllers and clients exchange tens of thousands of
partitions in one message.

Malformed input raises only ``kio.serial.errors.DecodeError`` subclasses
(``MalformedData`` is also a ``ValueError``). Every length prefix is checked
against the bytes that remain before anything is allocated or looped over,
which the native reader does not do for arrays (see ``ArrayLengthOverrun``).
"""

from __future__ import annotations

import datetime
import struct
import uuid
from collections.abc import Callable
from dataclasses import MISSING, Field, fields
from functools import cache, lru_cache
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode
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
from kio.serial.errors import (
    BufferUnderflow,
    DecodeError,
    InvalidUnicode,
    NegativeByteLength,
    SchemaError,
    UnexpectedNull,
)
from kio.static.protocol import Entity

from gregor.wire.struct_codes import NUMBER_CODES
from gregor.wire.varint import VarintError, read_uvarint

__all__ = ("ArrayLengthOverrun", "MalformedData", "decode_tolerant")

E = TypeVar("E", bound=Entity)

# A reader takes the whole buffer and a position and returns (value, next position).
_Reader = Callable[[memoryview, int], tuple[Any, int]]

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_NULL_ENTITY_MARKER = -1


class MalformedData(DecodeError, ValueError):
    """The bytes violate the wire format (bad varint, enum value, array length, ...)."""


class ArrayLengthOverrun(BufferUnderflow):
    """An array length prefix claims more elements than the remaining bytes can hold.

    Raised before any allocation. kio's native reader preallocates the declared
    length instead, which aborts the process when the allocation fails.
    """


def _need(data: memoryview, pos: int, size: int) -> int:
    end = pos + size
    if end > len(data):
        raise BufferUnderflow(f"need {size} bytes at {pos}, buffer has {len(data)}")
    return end


# --- primitives -------------------------------------------------------------


def _fixed(fmt: str) -> _Reader:
    codec = struct.Struct(fmt)
    size = codec.size

    def read(data: memoryview, pos: int) -> tuple[Any, int]:
        end = _need(data, pos, size)
        return codec.unpack_from(data, pos)[0], end

    return read


_read_int8 = _fixed(">b")
_read_int16 = _fixed(">h")
_read_int32 = _fixed(">i")
_read_int64 = _fixed(">q")


def _read_bool(data: memoryview, pos: int) -> tuple[bool, int]:
    end = _need(data, pos, 1)
    value = data[pos]
    if value > 1:
        raise MalformedData(f"invalid boolean byte {value}")
    return value == 1, end


def _read_uuid(data: memoryview, pos: int) -> tuple[uuid.UUID | None, int]:
    end = _need(data, pos, 16)
    value = int.from_bytes(data[pos:end], "big")
    # kio models the all-zero UUID as None.
    return (uuid.UUID(int=value) if value else None), end


def _error_code(value: int) -> ErrorCode:
    try:
        return ErrorCode(value)
    except ValueError:
        raise MalformedData(f"unknown error code {value}") from None


def _read_error_code(data: memoryview, pos: int) -> tuple[ErrorCode, int]:
    value, end = _read_int16(data, pos)
    return _error_code(value), end


def _read_timedelta_i32(data: memoryview, pos: int) -> tuple[datetime.timedelta, int]:
    millis, end = _read_int32(data, pos)
    return datetime.timedelta(milliseconds=millis), end


def _read_timedelta_i64(data: memoryview, pos: int) -> tuple[datetime.timedelta, int]:
    millis, end = _read_int64(data, pos)
    # kio converts to microseconds in an int64, so its range is 1000 times narrower.
    if not _INT64_MIN <= millis * 1000 <= _INT64_MAX:
        raise MalformedData(f"duration of {millis} ms out of range")
    return datetime.timedelta(milliseconds=millis), end


def _datetime_from_millis(millis: int) -> datetime.datetime:
    if millis < 0:
        raise MalformedData(f"negative timestamp {millis}")
    try:
        # Through float seconds, exactly as kio does (it loses microseconds far
        # in the future; matching it keeps both decoders' results identical).
        return datetime.datetime.fromtimestamp(millis / 1000, datetime.UTC)
    except (OverflowError, OSError, ValueError):
        raise MalformedData(f"timestamp {millis} out of range") from None


def _read_datetime(data: memoryview, pos: int) -> tuple[datetime.datetime, int]:
    millis, end = _read_int64(data, pos)
    return _datetime_from_millis(millis), end


def _read_nullable_datetime(data: memoryview, pos: int) -> tuple[datetime.datetime | None, int]:
    millis, end = _read_int64(data, pos)
    if millis == -1:
        return None, end
    return _datetime_from_millis(millis), end


def _blob(length_reader: _Reader, kind: str, nullable: bool) -> _Reader:
    """Strings, bytes and records: a length prefix (-1 means null) then the payload. Records
    are a view of the buffer decoded, not a copy: a follower writes a Fetch response's
    batches to its log straight from the frame they arrived in."""

    def read(data: memoryview, pos: int) -> tuple[Any, int]:
        length, pos = length_reader(data, pos)
        if length == -1:
            if nullable:
                return None, pos
            raise UnexpectedNull(f"null where a non-nullable {kind}")
        if length < 0:
            raise NegativeByteLength(f"negative byte length {length}")
        end = _need(data, pos, length)
        if kind == "records":
            return data[pos:end], end
        if kind == "bytes":
            return data[pos:end].tobytes(), end
        try:
            return str(data[pos:end], "utf-8"), end
        except UnicodeDecodeError:
            raise InvalidUnicode("string is not valid UTF-8") from None

    return read


def _read_compact_length(data: memoryview, pos: int) -> tuple[int, int]:
    # Compact lengths are stored plus one so that zero can mean null.
    raw, pos = read_uvarint(data, pos)
    return raw - 1, pos


# (reader, smallest encoding in bytes) per kafka_type; strings and bytes are built
# per (flexible, nullable) below.
_FIXED_PRIMITIVES: dict[str, tuple[_Reader, int]] = {
    "int8": (_read_int8, 1),
    "int16": (_read_int16, 2),
    "int32": (_read_int32, 4),
    "int64": (_read_int64, 8),
    "uint8": (_fixed(">B"), 1),
    "uint16": (_fixed(">H"), 2),
    "uint32": (_fixed(">I"), 4),
    "uint64": (_fixed(">Q"), 8),
    "float64": (_fixed(">d"), 8),
    "bool": (_read_bool, 1),
    "uuid": (_read_uuid, 16),
    "error_code": (_read_error_code, 2),
    "timedelta_i32": (_read_timedelta_i32, 4),
    "timedelta_i64": (_read_timedelta_i64, 8),
}


def _primitive(kafka_type: str, flexible: bool, nullable: bool) -> tuple[_Reader, int]:
    if kafka_type in _FIXED_PRIMITIVES:
        return _FIXED_PRIMITIVES[kafka_type]
    if kafka_type == "datetime_i64":
        return (_read_nullable_datetime if nullable else _read_datetime), 8
    if kafka_type in ("string", "bytes", "records"):
        if flexible:
            return _blob(_read_compact_length, kafka_type, nullable), 1
        if kafka_type == "string":
            return _blob(_read_int16, kafka_type, nullable), 2
        return _blob(_read_int32, kafka_type, nullable), 4
    raise SchemaError(f"no reader for kafka_type {kafka_type!r}")


# --- composites -------------------------------------------------------------


def _array_length(
    read_length: _Reader, item_size: int, nullable: bool, data: memoryview, pos: int
) -> tuple[int | None, int]:
    """An array's element count (None: null), checked against the bytes left."""
    length, pos = read_length(data, pos)
    # kio reads a null array as None even where the schema forbids null; Kafka
    # rejects it, and so must we, or handlers meet None where they iterate.
    if length == -1:
        if nullable:
            return None, pos
        raise UnexpectedNull("null where a non-nullable array")
    if length < 0:
        raise MalformedData(f"negative array length {length}")
    if length * item_size > len(data) - pos:
        raise ArrayLengthOverrun(
            f"array of {length} elements cannot fit in {len(data) - pos} bytes"
        )
    return length, pos


def _array(item: _Reader, item_min_size: int, flexible: bool, nullable: bool) -> _Reader:
    if item_min_size < 1:
        raise SchemaError("array elements must encode to at least one byte")
    read_length = _read_compact_length if flexible else _read_int32

    def read(data: memoryview, pos: int) -> tuple[tuple[Any, ...] | None, int]:
        length, pos = _array_length(read_length, item_min_size, nullable, data, pos)
        if length is None:
            return None, pos
        items = []
        for _ in range(length):
            value, pos = item(data, pos)
            items.append(value)
        return tuple(items), pos

    return read


@lru_cache(maxsize=256)
def _numbers_struct(code: str, length: int) -> struct.Struct:
    return struct.Struct(f">{length}{code}")


def _number_array(code: str, flexible: bool, nullable: bool) -> _Reader:
    """An array of one fixed-width number type, unpacked in one call."""
    read_length = _read_compact_length if flexible else _read_int32
    size = struct.calcsize(">" + code)

    def read(data: memoryview, pos: int) -> tuple[tuple[Any, ...] | None, int]:
        length, pos = _array_length(read_length, size, nullable, data, pos)
        if length is None:
            return None, pos
        return _numbers_struct(code, length).unpack_from(data, pos), pos + length * size

    return read


def _number_run(codes: str, error_codes: tuple[int, ...]) -> _Reader:
    """Consecutive fixed-width fields, unpacked in one call; the values at
    ``error_codes`` become ErrorCodes."""
    codec = struct.Struct(">" + codes)
    size = codec.size

    def read(data: memoryview, pos: int) -> tuple[Any, int]:
        end = _need(data, pos, size)
        values = codec.unpack_from(data, pos)
        if error_codes:
            converted = list(values)
            for i in error_codes:
                converted[i] = _error_code(converted[i])
            return converted, end
        return values, end

    return read


def _nullable_entity(read_entity: _Reader) -> _Reader:
    # KIP-893 nullable structs: an int8 marker, -1 for null. kio reads any other
    # marker as "present", so this does too.
    def read(data: memoryview, pos: int) -> tuple[Any, int]:
        marker, pos = _read_int8(data, pos)
        if marker == _NULL_ENTITY_MARKER:
            return None, pos
        return read_entity(data, pos)

    return read


def _field_reader(
    field: Field[Any], flexible: bool, request_header: bool, tagged: bool
) -> tuple[_Reader, int]:
    # Kafka keeps RequestHeader.client_id in the legacy nullable string format
    # even in flexible header versions.
    if request_header and field.name == "client_id":
        return _primitive("string", flexible=False, nullable=True)
    # A tagged field's presence is its tag, so its value is read as non-nullable.
    nullable = not tagged and is_optional(field)
    kind = classify_field(field)
    # ... but an array is nullable exactly where the schema says (tagged or not).
    array_nullable = is_optional(field)
    if isinstance(kind, PrimitiveField):
        return _primitive(get_schema_field_type(field), flexible, nullable)
    if isinstance(kind, PrimitiveTupleField):
        kafka_type = get_schema_field_type(field)
        if kafka_type in NUMBER_CODES and kafka_type != "error_code":
            reader = _number_array(NUMBER_CODES[kafka_type], flexible, array_nullable)
            return reader, 1 if flexible else 4
        item, item_size = _primitive(kafka_type, flexible, nullable=False)
        return _array(item, item_size, flexible, array_nullable), 1 if flexible else 4
    if isinstance(kind, EntityField):
        read_entity, size = _entity(kind.type_)
        return (_nullable_entity(read_entity), 1) if nullable else (read_entity, size)
    if isinstance(kind, EntityTupleField):
        read_entity, size = _entity(kind.type_)
        return _array(read_entity, size, flexible, array_nullable), 1 if flexible else 4
    raise SchemaError(f"unsupported field {field.name}")


@cache
def _entity(entity_type: type[Entity]) -> tuple[_Reader, int]:
    """Build the reader for one entity type and its smallest encoded size."""
    flexible: bool = entity_type.__flexible__
    request_header = entity_type.__name__ == "RequestHeader"
    # Each untagged field in order: (name, reader); a run of fixed-width numbers is one
    # entry, (their names, one reader of them all).
    plain: list[tuple[str | tuple[str, ...], _Reader]] = []
    run: list[tuple[str, str, _Reader]] = []  # (name, kafka_type, reader) of the run under way
    tagged: dict[int, tuple[str, _Reader]] = {}
    tag_defaults: dict[str, Any] = {}
    min_size = 1 if flexible else 0  # the tagged-field count

    def end_run() -> None:
        if len(run) == 1:
            plain.append((run[0][0], run[0][2]))
        elif run:
            codes = "".join(NUMBER_CODES[kafka_type] for _, kafka_type, _ in run)
            errors = tuple(i for i, (_, t, _) in enumerate(run) if t == "error_code")
            plain.append((tuple(name for name, _, _ in run), _number_run(codes, errors)))
        run.clear()

    for field in fields(entity_type):
        tag = get_field_tag(field)
        reader, size = _field_reader(field, flexible, request_header, tag is not None)
        if tag is None:
            min_size += size
            if isinstance(classify_field(field), PrimitiveField):
                kafka_type = get_schema_field_type(field)
                if kafka_type in NUMBER_CODES:
                    run.append((field.name, kafka_type, reader))
                    continue
            end_run()
            plain.append((field.name, reader))
        else:
            tagged[tag] = (field.name, reader)
            if field.default is MISSING:
                tag_defaults[field.name] = get_tagged_field_default(field)
    end_run()
    if tagged and not flexible:
        raise SchemaError(f"{entity_type.__name__} has tagged fields but is not flexible")

    def read(data: memoryview, pos: int) -> tuple[Any, int]:
        values: dict[str, Any] = {}
        for name, reader in plain:
            value, pos = reader(data, pos)
            if isinstance(name, tuple):
                values.update(zip(name, value, strict=True))
            else:
                values[name] = value
        if flexible:
            values.update(tag_defaults)
            count, pos = read_uvarint(data, pos)
            # Each tagged field takes at least two bytes: its tag and its size.
            if count * 2 > len(data) - pos:
                raise BufferUnderflow(f"{count} tagged fields cannot fit in the buffer")
            for _ in range(count):
                tag, pos = read_uvarint(data, pos)
                size, pos = read_uvarint(data, pos)
                known = tagged.get(tag)
                if known is None:
                    pos = _need(data, pos, size)  # unknown tag: skip its payload
                else:
                    # Like kio (and Kafka), a known field's extent is what its
                    # reader consumes; the size prefix is not checked.
                    name, reader = known
                    values[name], pos = reader(data, pos)
        return entity_type(**values), pos

    return read, min_size


def decode_tolerant(
    entity_type: type[E], buf: bytes | memoryview, offset: int = 0
) -> tuple[E, int]:
    """Decode one ``entity_type`` at ``offset``; return it and the bytes consumed.

    Same result as ``kio.serial.entity_reader(entity_type)(buf, offset)`` for any
    input that reader accepts, but unknown tagged fields are skipped.
    """
    if offset < 0:
        raise MalformedData(f"negative offset {offset}")
    read, _ = _entity(entity_type)
    # Release the views on return, even via an exception whose traceback would
    # otherwise pin them (and keep a caller's bytearray from being resized).
    with memoryview(buf) as view, view.cast("B") as data:
        try:
            entity, end = read(data, offset)
        except VarintError as e:
            raise MalformedData(str(e)) from None
    return entity, end - offset
