"""Kafka message schemas, from the generated ``kio`` classes.

kio's native reader is fast but rejects tagged fields it does not know, which Kafka
ignores; those requests are decoded again by the tolerant reader in ``wire.tagged``.
"""

from __future__ import annotations

import io
from functools import cache
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import DecodeError


class SchemaDecodeError(ValueError):
    """A request body that does not match its schema."""


@cache
def request_type(api_key: int, version: int) -> type:
    return load_request_schema(api_key, version)


@cache
def response_type(api_key: int, version: int) -> type:
    return load_response_schema(api_key, version)


@cache
def _reader(entity_type: type) -> Any:
    return entity_reader(entity_type)


@cache
def _writer(entity_type: type) -> Any:
    return entity_writer(entity_type)


def is_flexible(api_key: int, version: int) -> bool:
    return bool(request_type(api_key, version).__flexible__)


def decode(entity_type: type, buf: bytes | memoryview, offset: int = 0) -> Any:
    """Decode one entity starting at ``offset``; trailing bytes are ignored, as Kafka does."""
    try:
        entity, _size = _reader(entity_type)(buf, offset)
    except KeyError:
        from wire.tagged import decode_tolerant  # unknown tagged field: the slow, lenient path

        try:
            entity, _size = decode_tolerant(entity_type, buf, offset)
        except (DecodeError, ValueError) as e:
            raise SchemaDecodeError(str(e)) from e
    except (DecodeError, ValueError, OverflowError, UnicodeDecodeError) as e:
        raise SchemaDecodeError(f"{type(e).__name__}: {e}") from e
    return entity


def encode(entity: Any) -> bytes:
    out = io.BytesIO()
    _writer(type(entity))(out, entity)
    return out.getvalue()
