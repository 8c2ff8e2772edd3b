"""wire.tagged.decode_tolerant agrees with kio's native reader and skips unknown tags."""

from __future__ import annotations

import datetime
import io
from dataclasses import Field, fields
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.serial import entity_reader
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)
from kio.serial._serialize import get_field_writer
from kio.serial.errors import BufferUnderflow, DecodeError, SerialError
from kio.serial.writers import (
    write_compact_array_length,
    write_int8,
    write_int32,
    write_unsigned_varint,
)
from kio.static.constants import EntityType

from gregor.wire.tagged import ArrayLengthOverrun, MalformedData, decode_tolerant
from tests.kio_examples import KIO_TYPES, example, kio_encode, tag_default

REQUEST_TYPES = [t for t in KIO_TYPES if t.__type__ is EntityType.request]
FLEXIBLE_TYPES = [t for t in KIO_TYPES if t.__flexible__]


UNKNOWN_TAG = 10_000  # two-byte varint, above every tag in Kafka's schemas


def encode_with_unknown_tags(entity: Any, payload: bytes, nested_only: bool = False) -> bytes:
    """Encode like kio, adding tag UNKNOWN_TAG with ``payload`` to every flexible
    entity (only to entities below the top level if ``nested_only``)."""
    buffer = io.BytesIO()
    _write_entity(buffer, entity, payload, inject=not nested_only)
    return buffer.getvalue()


def _write_entity(buffer: io.BytesIO, entity: Any, payload: bytes, inject: bool = True) -> None:
    entity_type = type(entity)
    flexible = entity_type.__flexible__
    tags: list[tuple[int, bytes]] = []
    for field in fields(entity_type):
        value = getattr(entity, field.name)
        tag = get_field_tag(field)
        if tag is None:
            _write_field(buffer, entity_type, field, value, payload, tagged=False)
        elif value != tag_default(field):
            field_buffer = io.BytesIO()
            _write_field(field_buffer, entity_type, field, value, payload, tagged=True)
            tags.append((tag, field_buffer.getvalue()))
    if flexible:
        tags = sorted([*tags, (UNKNOWN_TAG, payload)] if inject else tags)
        write_unsigned_varint(buffer, len(tags))
        for tag, data in tags:
            write_unsigned_varint(buffer, tag)
            write_unsigned_varint(buffer, len(data))
            buffer.write(data)


def _write_field(
    buffer: io.BytesIO, entity_type: type, field: Field, value: Any, payload: bytes, tagged: bool
) -> None:
    kind = classify_field(field)
    flexible = entity_type.__flexible__
    if isinstance(kind, EntityField):
        if is_optional(field) and not tagged:
            write_int8(buffer, -1 if value is None else 1)
        if value is not None:
            _write_entity(buffer, value, payload)
    elif isinstance(kind, EntityTupleField):
        if flexible:
            write_compact_array_length(buffer, None if value is None else len(value))
        else:
            write_int32(buffer, -1 if value is None else len(value))
        for item in value or ():
            _write_entity(buffer, item, payload)
    else:
        header = entity_type.__name__ == "RequestHeader"
        get_field_writer(field, flexible, header, tagged)(buffer, value)


def assert_same_as_native(entity_type: type, data: bytes, expected: Any) -> None:
    native = entity_reader(entity_type)(data, 0)
    assert native == (expected, len(data))
    assert decode_tolerant(entity_type, data) == native


@pytest.mark.parametrize("full", [True, False], ids=["full", "empty"])
def test_every_entity_type_decodes_like_native(full: bool) -> None:
    for entity_type in KIO_TYPES:
        entity = example(entity_type, full)
        assert_same_as_native(entity_type, kio_encode(entity), entity)


def test_offset_and_memoryview_input() -> None:
    from kio.schema.metadata.v12.request import MetadataRequest

    entity = example(MetadataRequest, full=True)
    data = kio_encode(entity)
    framed = memoryview(b"\x01\x02\x03" + data + b"trailing")
    assert decode_tolerant(MetadataRequest, framed, 3) == (entity, len(data))
    assert entity_reader(MetadataRequest)(framed, 3) == (entity, len(data))


@settings(
    max_examples=150,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.data())
def test_generated_entities_decode_like_native(data: st.DataObject) -> None:
    entity_type = data.draw(st.sampled_from(KIO_TYPES))
    entity = data.draw(st.from_type(entity_type))
    encoded = kio_encode(entity)
    native = entity_reader(entity_type)(encoded, 0)
    assert native[1] == len(encoded)
    assert decode_tolerant(entity_type, encoded) == native


@pytest.mark.parametrize(
    "payload", [b"", b"\xde\xad", bytes(range(200))], ids=["empty", "short", "long"]
)
def test_unknown_tags_are_skipped_at_every_level(payload: bytes) -> None:
    for entity_type in FLEXIBLE_TYPES:
        for full in (True, False):
            entity = example(entity_type, full)
            data = encode_with_unknown_tags(entity, payload)
            with pytest.raises(KeyError):
                entity_reader(entity_type)(data, 0)
            assert decode_tolerant(entity_type, data) == (entity, len(data))


def test_unknown_tags_only_in_nested_entities_are_skipped() -> None:
    from kio.schema.fetch.v17.request import FetchRequest

    entity = example(FetchRequest, full=True)
    data = encode_with_unknown_tags(entity, b"\x01\x02\x03", nested_only=True)
    assert data != kio_encode(entity)
    with pytest.raises(KeyError):
        entity_reader(FetchRequest)(data, 0)
    assert decode_tolerant(FetchRequest, data) == (entity, len(data))


def test_unknown_tags_between_known_tags_in_any_order() -> None:
    from kio.schema.fetch.v17.request import FetchRequest, ReplicaState

    entity = FetchRequest(
        cluster_id="abc",
        replica_state=ReplicaState(replica_id=3, replica_epoch=7),
        max_wait=datetime.timedelta(milliseconds=500),
        min_bytes=1,
        topics=(),
        forgotten_topics_data=(),
    )
    data = kio_encode(entity)
    body = data[: data.rindex(b"\x02\x00\x04\x04abc")]  # everything before the tag section
    replica_state = (3).to_bytes(4, "big") + (7).to_bytes(8, "big") + b"\x00"
    tags = (
        b"\x04"  # four tagged fields, unsorted, two unknown
        + b"\x01" + bytes([len(replica_state)]) + replica_state
        + b"\x07\x03xyz"
        + b"\x00\x04\x04abc"
        + b"\x80\x01\x00"
    )  # fmt: skip
    assert decode_tolerant(FetchRequest, body + tags) == (entity, len(body + tags))


def test_absent_tags_take_implicit_defaults() -> None:
    from kio.schema.update_raft_voter.v0.response import UpdateRaftVoterResponse

    entity = example(UpdateRaftVoterResponse, full=False)
    assert_same_as_native(UpdateRaftVoterResponse, kio_encode(entity), entity)


def test_known_tag_extent_is_what_its_reader_consumes() -> None:
    # kio and Kafka ignore a known tag's size prefix; so must we.
    from kio.schema.fetch.v17.request import FetchRequest

    entity = example(FetchRequest, full=False)
    body = kio_encode(entity)[:-1]
    data = body + b"\x01\x00\x09\x04abc"  # cluster_id with a wrong size prefix
    expected = entity_reader(FetchRequest)(data, 0)
    assert expected[0].cluster_id == "abc"
    assert decode_tolerant(FetchRequest, data) == expected


def test_huge_array_length_fails_fast() -> None:
    from kio.schema.describe_configs.v2.request import DescribeConfigsRequest as Legacy
    from kio.schema.describe_configs.v4.request import DescribeConfigsRequest as Compact

    with pytest.raises(ArrayLengthOverrun):
        decode_tolerant(Compact, b"\xff\xff\xff\xff\x7f\x00\x00")
    with pytest.raises(ArrayLengthOverrun):
        decode_tolerant(Legacy, b"\x7f\xff\xff\xff\x00")
    with pytest.raises(MalformedData):
        decode_tolerant(Legacy, b"\xff\xff\xff\xfe\x00")


def test_unknown_tag_size_beyond_buffer_fails() -> None:
    from kio.schema.describe_configs.v4.request import DescribeConfigsRequest

    with pytest.raises(BufferUnderflow):
        decode_tolerant(DescribeConfigsRequest, b"\x01\x00\x00\x01\x63\x7f\x00")


@pytest.mark.parametrize(
    ("kafka_type", "raw"),
    [
        ("bool", b"\x02"),
        ("error_code", b"\x03\xe7"),
        ("uvarint", b"\xff\xff\xff\xff\xff\x01"),
        ("datetime", b"\xff" * 7 + b"\xfe"),
        ("timedelta_i64", b"\x7f" + b"\xff" * 7),
    ],
)
def test_invalid_values_raise_malformed_data(kafka_type: str, raw: bytes) -> None:
    from kio.schema.alter_client_quotas.v1.response import AlterClientQuotasResponse
    from kio.schema.create_delegation_token.v2.response import CreateDelegationTokenResponse
    from kio.schema.describe_configs.v4.request import DescribeConfigsRequest
    from kio.schema.expire_delegation_token.v1.request import ExpireDelegationTokenRequest
    from kio.schema.offset_fetch.v2.response import OffsetFetchResponse

    entity_type, data = {
        "bool": (DescribeConfigsRequest, b"\x01" + raw + b"\x00\x00"),
        "error_code": (OffsetFetchResponse, b"\x00\x00\x00\x00" + raw),
        "uvarint": (AlterClientQuotasResponse, b"\x00\x00\x00\x00" + raw),
        "datetime": (CreateDelegationTokenResponse, b"\x00\x00\x02p\x02u" + raw),
        "timedelta_i64": (ExpireDelegationTokenRequest, b"\x00\x00\x00\x00" + raw),
    }[kafka_type]
    with pytest.raises(MalformedData):
        decode_tolerant(entity_type, data)
    with pytest.raises((ValueError, SerialError)):  # kio raises either
        entity_reader(entity_type)(data, 0)


def _outcome(entity_type: type, data: bytes) -> Any:
    try:
        return entity_reader(entity_type)(data, 0)
    except (ValueError, SerialError):
        return "error"


@pytest.mark.parametrize(
    "millis",
    [0, 1, 1_700_000_000_123, 160_215_742_132_725, 253_402_300_799_999, 253_402_300_800_000]
    + [2**63 - 1, -1, -2, 9_223_372_036_854_775, 9_223_372_036_854_776, -(2**63)]
    + [-9_223_372_036_854_775, -9_223_372_036_854_776],
)
def test_time_values_match_native_at_the_edges(millis: int) -> None:
    from kio.schema.create_delegation_token.v2.response import CreateDelegationTokenResponse
    from kio.schema.expire_delegation_token.v1.request import ExpireDelegationTokenRequest

    raw = millis.to_bytes(8, "big", signed=True)
    cases = [
        (ExpireDelegationTokenRequest, b"\x00\x00\x00\x00" + raw),  # timedelta_i64
        (CreateDelegationTokenResponse, b"\x00\x00\x02p\x02u" + raw * 3 + b"\x01\x01" + bytes(5)),
    ]
    for entity_type, data in cases:
        expected = _outcome(entity_type, data)
        if expected == "error":
            with pytest.raises(MalformedData):
                decode_tolerant(entity_type, data)
        else:
            assert decode_tolerant(entity_type, data) == expected


def test_caller_buffer_is_released_even_after_an_error() -> None:
    from kio.schema.metadata.v12.request import MetadataRequest

    buffer = bytearray(b"\x02")  # one topic announced, none present
    with pytest.raises(DecodeError) as caught:
        decode_tolerant(MetadataRequest, buffer)
    buffer.extend(b"more")  # fails with BufferError while a view is still exported
    assert caught.value is not None and len(buffer) == 5
    with pytest.raises(MalformedData):
        decode_tolerant(MetadataRequest, buffer, -1)


def test_runs_of_numbers_and_number_arrays_are_checked_as_one_by_one() -> None:
    """A partition of Metadata v12 starts with a run (error code, index, leader, epoch) read
    in one unpack, then int32 arrays read in one unpack each: the same checks apply."""
    from kio.schema.errors import ErrorCode
    from kio.schema.metadata.v12.response import MetadataResponsePartition as Partition

    partition = Partition(
        error_code=ErrorCode.leader_not_available,
        partition_index=7,
        leader_id=-1,
        leader_epoch=3,
        replica_nodes=(1, 2, 3),
        isr_nodes=(2,),
        offline_replicas=(),
    )
    data = kio_encode(partition)
    assert decode_tolerant(Partition, data) == (partition, len(data))
    with pytest.raises(MalformedData):  # no such error code
        decode_tolerant(Partition, b"\x03\xe7" + data[2:])
    with pytest.raises(BufferUnderflow):  # the run cut short
        decode_tolerant(Partition, data[:13])
    with pytest.raises(ArrayLengthOverrun):  # 1,000 replicas announced, 3 present
        decode_tolerant(Partition, data[:14] + b"\xe9\x07" + data[15:])
    with pytest.raises(DecodeError):  # null where the array is not nullable
        decode_tolerant(Partition, data[:14] + b"\x00" + data[27:])
