"""Every kio schema, a deterministic instance of each, and kio's own writer: what the
decoder's and the encoder's tests (test_tagged.py, test_wire_encoder.py) hold Gregor to."""

from __future__ import annotations

import datetime
import io
import uuid
from dataclasses import MISSING, Field, fields
from typing import Any

from hypothesis import strategies as st
from kio.index import load_entity_schema
from kio.schema.errors import ErrorCode
from kio.schema.index import schema_name_map
from kio.serial import entity_writer
from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)
from kio.static.primitive import Records

# kio's phantom types bring hypothesis hooks, but none for record data.
st.register_type_strategy(Records, st.binary(max_size=64).map(Records.parse))

KIO_TYPES: list[type] = sorted(
    {
        load_entity_schema(name, version, kind)
        for name, versions in schema_name_map.items()
        for version, kinds in versions.items()
        for kind in kinds  # request, response, header and data schemas
    },
    key=lambda t: (t.__module__, t.__name__),
)

_SAMPLES: dict[str, Any] = {
    "int8": -7,
    "int16": -300,
    "int32": 70_000,
    "int64": -(2**40),
    "uint8": 200,
    "uint16": 65_000,
    "uint32": 2**32 - 2,
    "uint64": 2**64 - 2,
    "float64": 2.5,
    "bool": True,
    "string": "héllo ✓",
    "bytes": b"\x00\xffdata",
    "records": b"\x00\x01records",
    "uuid": uuid.UUID(int=0x0123456789ABCDEF0123456789ABCDEF),
    "error_code": ErrorCode.not_coordinator,
    "timedelta_i32": datetime.timedelta(milliseconds=-1234),
    "timedelta_i64": datetime.timedelta(days=3, milliseconds=5),
    "datetime_i64": datetime.datetime(2024, 5, 6, 7, 8, 9, tzinfo=datetime.UTC),
}


def tag_default(field: Field[Any]) -> Any:
    return field.default if field.default is not MISSING else get_tagged_field_default(field)


def _field_value(field: Field[Any], full: bool) -> Any:
    if get_field_tag(field) is not None and not full:
        return tag_default(field)
    if not full and is_optional(field):
        return None
    kind = classify_field(field)
    if isinstance(kind, EntityTupleField):
        return tuple(example(kind.type_, full) for _ in range(3 if full else 0))
    if isinstance(kind, PrimitiveTupleField):
        item = _SAMPLES[get_schema_field_type(field)]
        return (item,) * 3 if full else ()
    if isinstance(kind, EntityField):
        return example(kind.type_, full)
    return _SAMPLES[get_schema_field_type(field)]


def example(entity_type: type, full: bool) -> Any:
    """``full`` sets every field (three-item arrays, every tag away from its default);
    otherwise nullable values are null, arrays empty and tags at their defaults."""
    return entity_type(**{f.name: _field_value(f, full) for f in fields(entity_type)})


def kio_encode(entity: Any) -> bytes:
    """kio's own writer."""
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()
