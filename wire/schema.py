"""Kafka message schemas, from the generated ``kio`` classes and ``gregor.wire.interbroker``.

Requests are decoded by the bounds-checked reader in ``gregor.wire.tagged``, not kio's native
reader: the native one rejects unknown tagged fields (Kafka ignores them) and aborts the
whole process when a hostile array length makes its up-front allocation fail.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial.errors import SerialError
from kio.static.protocol import Entity

from gregor.wire import interbroker
from gregor.wire.encoder import entity_encoder
from gregor.wire.tagged import decode_tolerant


class SchemaDecodeError(ValueError):
    """A request body that does not match its schema."""


# Cached, so the inter-broker check costs nothing after the first lookup of a pair.
@cache
def request_type(api_key: int, version: int) -> type:
    return interbroker.REQUESTS.get((api_key, version)) or load_request_schema(api_key, version)


@cache
def response_type(api_key: int, version: int) -> type:
    return interbroker.RESPONSES.get((api_key, version)) or load_response_schema(api_key, version)


def is_flexible(api_key: int, version: int) -> bool:
    schema: type[Entity] = request_type(api_key, version)
    return schema.__flexible__


def decode(entity_type: type[Entity], buf: bytes | memoryview, offset: int = 0) -> Any:
    """Decode one entity starting at ``offset``; trailing bytes are ignored, as Kafka does."""
    try:
        entity, _size = decode_tolerant(entity_type, buf, offset)
    except (SerialError, ValueError) as e:
        raise SchemaDecodeError(f"{type(e).__name__}: {e}") from e
    return entity


def encode_generic(entity: Entity) -> bytes:
    """Any entity, by the encoder specialised to its type (kio's bytes, built faster)."""
    return entity_encoder(type(entity))(entity)


_FAST = interbroker.fast_encoders(encode_generic)


def encode(entity: Any) -> bytes:
    fast = _FAST.get(type(entity))
    return fast(entity) if fast is not None else encode_generic(entity)
