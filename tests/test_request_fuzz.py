"""Fuzz every kio request type through kio's native reader and wire.tagged.

Malformed bytes may only raise the documented exception families, both decoders
must agree whenever the native reader accepts the input, and nothing may hang.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.serial import entity_reader
from kio.serial.errors import DecodeError, SerialError, UnexpectedNull
from kio.static.constants import EntityType

from gregor.wire.tagged import ArrayLengthOverrun, decode_tolerant
from tests.kio_examples import KIO_TYPES, example, kio_encode

# Everything a client can make us decode: request payloads and request headers.
TARGETS = [
    t for t in KIO_TYPES if t.__type__ is EntityType.request or t.__name__ == "RequestHeader"
]
SEEDS = [(t, kio_encode(example(t, full))) for t in TARGETS for full in (True, False)]

# What kio's native reader raises on malformed input, besides DecodeError:
# SerialError.OutOfBoundValue (negative timestamp), ValueError (bad boolean,
# unknown error code, over-long varint, negative array length, timestamp or
# duration out of range) and KeyError (unknown tagged field).
NATIVE_ERRORS = (SerialError, ValueError, KeyError)

FUZZ = settings(
    max_examples=400,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def records_as_bytes(value: Any) -> Any:
    """``value`` with the records views wire.tagged decodes as the bytes kio decodes."""
    if isinstance(value, memoryview):
        return value.tobytes()
    if isinstance(value, tuple):
        return tuple(records_as_bytes(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = dataclasses.fields(value)
        return dataclasses.replace(
            value, **{f.name: records_as_bytes(getattr(value, f.name)) for f in fields if f.init}
        )
    return value


def check(entity_type: type, data: bytes) -> None:
    """Decode with both readers and assert they fail cleanly or agree."""
    tolerant: Any
    try:
        tolerant = decode_tolerant(entity_type, data)
    except ArrayLengthOverrun:
        # The native reader would preallocate the claimed length; past a few
        # billion elements that aborts the interpreter. Never hand it this input.
        return
    except DecodeError as error:
        tolerant = error
    native: Any
    try:
        native = entity_reader(entity_type)(data, 0)
    except NATIVE_ERRORS as error:
        native = error
    if isinstance(native, tuple) and isinstance(tolerant, UnexpectedNull):
        # kio takes a null array where the schema forbids one; Kafka and we refuse it.
        assert "None" in repr(native)
    elif isinstance(native, tuple):
        # repr, because a fuzzed float64 may be NaN, which is unequal to itself.
        assert repr(records_as_bytes(tolerant)) == repr(native)
    elif not isinstance(native, KeyError):
        # Apart from unknown tags, the tolerant decoder rejects what kio rejects.
        assert isinstance(tolerant, DecodeError), (native, tolerant)


def test_every_request_type_survives_truncation_and_byte_flips() -> None:
    rng = random.Random(1234)
    for entity_type, seed in SEEDS:
        for end in range(0, len(seed), max(1, len(seed) // 24)):
            check(entity_type, seed[:end])
        for _ in range(12 if seed else 0):
            data = bytearray(seed)
            data[rng.randrange(len(data))] = rng.choice((0x00, 0x01, 0x7F, 0x80, 0xFF))
            check(entity_type, bytes(data))


@FUZZ
@given(st.sampled_from(TARGETS), st.binary(max_size=96))
def test_random_bytes(entity_type: type, data: bytes) -> None:
    check(entity_type, data)


_MUTATION = st.tuples(
    st.sampled_from(["set", "insert", "delete", "ones"]),
    st.integers(min_value=0, max_value=4096),
    st.binary(min_size=1, max_size=6),
)


@FUZZ
@given(st.sampled_from(SEEDS), st.lists(_MUTATION, min_size=1, max_size=4))
def test_mutated_valid_requests(seed: tuple[type, bytes], mutations: list) -> None:
    entity_type, encoded = seed
    data = bytearray(encoded)
    for op, index, chunk in mutations:
        at = index % (len(data) + 1)
        if op == "set":
            data[at : at + len(chunk)] = chunk
        elif op == "insert":
            data[at:at] = chunk
        elif op == "delete":
            del data[at : at + len(chunk)]
        else:  # the largest varints and lengths kio accepts
            data[at : at + 5] = b"\xff\xff\xff\xff\x7f"
    check(entity_type, bytes(data))


def test_hostile_lengths_in_every_request_type() -> None:
    # The largest compact and legacy length prefixes, planted across every seed:
    # decoding must give up at once rather than allocate or loop.
    for entity_type, seed in SEEDS:
        for at in range(0, len(seed), max(1, len(seed) // 16)):
            for prefix in (b"\xff\xff\xff\xff\x7f", b"\x7f\xff\xff\xff"):
                check(entity_type, seed[:at] + prefix + seed[at + len(prefix) :])
