"""Fast decoding of the controller's big requests, LeaderAndIsr v7 and UpdateMetadata v8,
and of LeaderAndIsr's answer (an error per partition).

A new controller tells every broker the state of every partition: 50,000 partition states
took the schema walk half a second per request on an idle core, and more when a failover
keeps both cores busy. A state whose arrays' lengths each take one byte and that carries
no tagged fields (everything a Gregor controller sends) is read here in one struct call
once those lengths are peeked; any other is handed to the schema walk, as is everything
around the topic states. The result equals ``gregor.wire.schema.decode``'s, and so do the
errors (SchemaDecodeError) of malformed input.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from kio.schema.errors import ErrorCode
from kio.serial.errors import SerialError

from gregor.wire.interbroker import (
    LEADER_AND_ISR,
    TOPIC_STATES_AT,
    UPDATE_METADATA,
    LeaderAndIsrPartitionError,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    LeaderAndIsrTopicError,
    LeaderAndIsrTopicState,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
    UpdateMetadataTopicState,
    partition_errors_struct,
)
from gregor.wire.reader import Reader
from gregor.wire.schema import SchemaDecodeError, decode
from gregor.wire.tagged import decode_tolerant

_EMPTY_ARRAY = b"\x01"  # a compact array of no elements


@lru_cache(maxsize=256)
def _layout(lengths: tuple[int, ...], tail: str) -> struct.Struct:
    """A state's struct: four int32s (index, controller epoch, leader, leader epoch), then
    per array its one-byte length and elements, an int32 after the first array (the
    partition epoch), ``tail`` and the empty tagged-field count. Cached per lengths:
    hostile input only evicts."""
    arrays = "".join(f"B{n}i" + ("i" if i == 0 else "") for i, n in enumerate(lengths))
    return struct.Struct(f">iiii{arrays}{tail}B")


def _peek_lengths(buf: bytes, pos: int, arrays: int) -> tuple[int, ...] | None:
    """The lengths of a state's int32 arrays (the first after 16 bytes, an int32 after
    it), or None if one is null, takes more than a byte or lies beyond the buffer."""
    lengths = []
    at = pos + 16
    limit = len(buf)
    for i in range(arrays):
        if at >= limit:
            return None
        n = buf[at] - 1
        if not 0 <= n < 0x7F:
            return None
        lengths.append(n)
        at += 1 + 4 * n + (4 if i == 0 else 0)
    return tuple(lengths)


def _leader_and_isr_state(v: tuple[Any, ...], lengths: tuple[int, ...]) -> Any:
    isr_end = 5 + lengths[0]
    replicas_end = isr_end + 2 + lengths[1]
    adding_end = replicas_end + 1 + lengths[2]
    removing_end = adding_end + 1 + lengths[3]
    if v[removing_end] > 1:  # is_new: a boolean byte is 0 or 1
        return None
    return LeaderAndIsrPartitionState(
        partition_index=v[0],
        controller_epoch=v[1],
        leader=v[2],
        leader_epoch=v[3],
        isr=v[5:isr_end],
        partition_epoch=v[isr_end],
        replicas=v[isr_end + 2 : replicas_end],
        adding_replicas=v[replicas_end + 1 : adding_end],
        removing_replicas=v[adding_end + 1 : removing_end],
        is_new=v[removing_end] == 1,
        leader_recovery_state=v[removing_end + 1],
    )


def _update_metadata_state(v: tuple[Any, ...], lengths: tuple[int, ...]) -> Any:
    isr_end = 5 + lengths[0]
    replicas_end = isr_end + 2 + lengths[1]
    offline_end = replicas_end + 1 + lengths[2]
    return UpdateMetadataPartitionState(
        partition_index=v[0],
        controller_epoch=v[1],
        leader=v[2],
        leader_epoch=v[3],
        isr=v[5:isr_end],
        zk_version=v[isr_end],
        replicas=v[isr_end + 2 : replicas_end],
        offline_replicas=v[replicas_end + 1 : offline_end],
    )


def _states_reader(
    entity_type: type[Any],
    arrays: int,
    tail: str,
    build: Callable[[tuple[Any, ...], tuple[int, ...]], Any],
) -> Callable[[bytes, int, int], tuple[list[Any], int]]:
    """A reader of `count` partition states: each whose `arrays` int32 arrays' lengths
    take a byte, that has no tagged fields and that `build` accepts, in one unpack; any
    other by the schema walk."""

    def read(buf: bytes, pos: int, count: int) -> tuple[list[Any], int]:
        states = []
        for _ in range(count):
            lengths = _peek_lengths(buf, pos, arrays)
            if lengths is not None:
                codec = _layout(lengths, tail)
                end = pos + codec.size
                if end <= len(buf) and buf[end - 1] == 0:  # no tagged fields
                    state = build(codec.unpack_from(buf, pos), lengths)
                    if state is not None:
                        states.append(state)
                        pos = end
                        continue
            state, pos = _generic(entity_type, buf, pos)
            states.append(state)
        return states, pos

    return read


def _generic(entity_type: type[Any], buf: bytes, pos: int) -> tuple[Any, int]:
    """One entity by the schema walk, and where it ends."""
    entity: Any
    try:
        entity, size = decode_tolerant(entity_type, buf, pos)
    except (SerialError, ValueError) as e:
        raise SchemaDecodeError(f"{type(e).__name__}: {e}") from e
    return entity, pos + size


def _decoder(
    request_type: type[Any],
    topic_type: type[Any],
    read_states: Callable[[bytes, int, int], tuple[list[Any], int]],
) -> Callable[[int, bytes | bytearray, int], Any]:
    def decode_request(version: int, buf: bytes | bytearray, offset: int) -> Any:
        data = bytes(buf) if isinstance(buf, bytearray) else buf
        if version != request_type.__version__:
            return decode(request_type, data, offset)
        at = offset + TOPIC_STATES_AT[request_type]
        r = Reader(data, at, flexible=True)
        topics = []
        for _ in range(r.count(1 + 16 + 1 + 1)):
            name = r.string(nullable=False)
            topic_id = r.uuid()
            count = r.count(4 * 4 + 4 + 1)
            states, r.pos = read_states(data, r.pos, count)
            r.tagged_fields()
            topics.append(
                topic_type(
                    topic_name=name,
                    topic_id=topic_id if topic_id.int else None,
                    partition_states=tuple(states),
                )
            )
        # The fields around the topics by the schema walk, the topics left out.
        rest = decode(request_type, data[offset:at] + _EMPTY_ARRAY + data[r.pos :])
        return dataclasses.replace(rest, topic_states=tuple(topics))

    return decode_request


DECODERS: dict[int, Callable[[int, bytes | bytearray, int], Any]] = {
    LEADER_AND_ISR: _decoder(
        LeaderAndIsrRequest,
        LeaderAndIsrTopicState,
        _states_reader(LeaderAndIsrPartitionState, 4, "Bb", _leader_and_isr_state),
    ),
    UPDATE_METADATA: _decoder(
        UpdateMetadataRequest,
        UpdateMetadataTopicState,
        _states_reader(UpdateMetadataPartitionState, 3, "", _update_metadata_state),
    ),
}


_ERROR_CODES: dict[int, ErrorCode] = {int(code.value): code for code in ErrorCode}


def decode_leader_and_isr_response(buf: bytes | bytearray | memoryview, pos: int) -> Any:
    """A LeaderAndIsr answer (v7) at ``pos``: one error per partition of the request, read
    in one struct call per topic; anything else (tagged fields, an unknown error code) by
    the schema walk, which also raises what malformed input raises."""
    data = bytes(buf)
    r = Reader(data, pos, flexible=True)
    try:
        top = _ERROR_CODES[r.int16()]
        topics = []
        for _ in range(r.count(16 + 1 + 1)):
            topic_id = r.uuid()
            count = r.count(7)
            codec = partition_errors_struct(count)
            start = r.pos
            r.pos += codec.size
            if r.pos >= len(data):
                raise KeyError("short")
            v = codec.unpack_from(data, start)
            if any(v[2::3]) or data[r.pos]:  # tagged fields: the schema walk reads them
                raise KeyError("tagged")
            r.pos += 1
            errors = tuple(
                LeaderAndIsrPartitionError(partition_index=index, error_code=_ERROR_CODES[code])
                for index, code in zip(v[0::3], v[1::3], strict=True)
            )
            topics.append(
                LeaderAndIsrTopicError(
                    topic_id=topic_id if topic_id.int else None, partition_errors=errors
                )
            )
        if data[r.pos : r.pos + 1] != b"\0":
            raise KeyError("tagged")
    except (KeyError, SchemaDecodeError, struct.error):
        return decode(LeaderAndIsrResponse, data, pos)
    return LeaderAndIsrResponse(error_code=top, topics=tuple(topics))


RESPONSE_DECODERS: dict[tuple[int, int], Callable[[bytes | bytearray | memoryview, int], Any]] = {
    (LEADER_AND_ISR, LeaderAndIsrResponse.__version__): decode_leader_and_isr_response,
}
