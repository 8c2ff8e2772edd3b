"""wire/encoder.py writes kio's bytes exactly, for every kio schema and the inter-broker ones."""

from __future__ import annotations

import struct
from dataclasses import fields
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.static.primitive import i16, i32

from gregor.wire import interbroker
from gregor.wire.encoder import EncodedItems, entity_encoder
from gregor.wire.schema import encode_generic
from tests.kio_examples import KIO_TYPES, example, kio_encode

INTERBROKER_TYPES: list[type] = [*interbroker.REQUESTS.values(), *interbroker.RESPONSES.values()]
ALL_TYPES = KIO_TYPES + INTERBROKER_TYPES


def assert_same_as_kio(entity: Any) -> None:
    try:
        expected = kio_encode(entity)
    except Exception:  # a value kio cannot write (out of range): neither can we
        with pytest.raises(Exception):  # noqa: B017
            entity_encoder(type(entity))(entity)
        return
    assert entity_encoder(type(entity))(entity) == expected


# --- deterministic instances of every type ---------------------------------------------


@pytest.mark.parametrize("full", [True, False], ids=["full", "empty"])
def test_every_type_encodes_like_kio(full: bool) -> None:
    for entity_type in ALL_TYPES:
        entity = example(entity_type, full)
        assert entity_encoder(entity_type)(entity) == kio_encode(entity), entity_type


# --- generated instances -----------------------------------------------------------------


@settings(
    max_examples=3,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.data())
def _generated_like_kio(entity_type: type, data: st.DataObject) -> None:
    assert_same_as_kio(data.draw(st.from_type(entity_type)))


@pytest.mark.parametrize("entity_type", ALL_TYPES, ids=lambda t: f"{t.__module__}.{t.__name__}")
def test_generated_entities_encode_like_kio(entity_type: type) -> None:
    _generated_like_kio(entity_type)


# --- specific cases ----------------------------------------------------------------------


def test_tagged_fields_at_and_off_their_defaults() -> None:
    from kio.schema.fetch.v15.request import FetchRequest, ReplicaState

    at_default = example(FetchRequest, full=False)
    encoded = entity_encoder(FetchRequest)(at_default)
    assert encoded == kio_encode(at_default)
    assert encoded.endswith(b"\x00")  # no tagged fields

    # Tags 0 (cluster_id) and 1 (replica_state) set, written in tag order.
    state = ReplicaState(replica_id=i32(3), replica_epoch=7)
    with_tags = FetchRequest(
        **{f.name: getattr(at_default, f.name) for f in fields(FetchRequest)}
        | {"replica_state": state, "cluster_id": "c"}
    )
    encoded = entity_encoder(FetchRequest)(with_tags)
    assert encoded == kio_encode(with_tags)
    # Two tags: 0 (two bytes, "c"), then 1 (13 bytes: int32, int64, no tags).
    assert encoded.endswith(
        b"\x02" + b"\x00\x02\x02c" + b"\x01\x0d" + struct.pack(">iq", 3, 7) + b"\x00"
    )

    # Explicitly at its default is the same as absent.
    default_state = ReplicaState()
    same = FetchRequest(
        **{f.name: getattr(at_default, f.name) for f in fields(FetchRequest)}
        | {"replica_state": default_state}
    )
    assert entity_encoder(FetchRequest)(same) == entity_encoder(FetchRequest)(at_default)


def test_nullable_entity_marker() -> None:
    from kio.schema.consumer_group_heartbeat.v0.response import ConsumerGroupHeartbeatResponse

    absent = example(ConsumerGroupHeartbeatResponse, full=False)
    present = example(ConsumerGroupHeartbeatResponse, full=True)
    assert absent.assignment is None and present.assignment is not None
    encode = entity_encoder(ConsumerGroupHeartbeatResponse)
    for entity in (absent, present):
        assert encode(entity) == kio_encode(entity)
    # KIP-893: int8 -1 for a null struct, then the response's (empty) tagged fields.
    assert encode(absent).endswith(b"\xff\x00")
    assignment = entity_encoder(type(present.assignment))(present.assignment)
    assert encode(present).endswith(b"\x01" + assignment + b"\x00")


def test_nullable_and_empty_arrays() -> None:
    from kio.schema.metadata.v1.request import MetadataRequest as LegacyMetadata
    from kio.schema.metadata.v12.request import MetadataRequest as CompactMetadata

    assert entity_encoder(LegacyMetadata)(LegacyMetadata(topics=None)) == b"\xff\xff\xff\xff"
    assert entity_encoder(LegacyMetadata)(LegacyMetadata(topics=())) == b"\x00\x00\x00\x00"
    for topics in (None, ()):
        request = CompactMetadata(
            topics=topics,
            allow_auto_topic_creation=True,
            include_topic_authorized_operations=False,
        )
        encoded = entity_encoder(CompactMetadata)(request)
        assert encoded == kio_encode(request)
        assert encoded[0] == (0 if topics is None else 1)


@pytest.mark.parametrize("version", [0, 8, 9, 12, 13])
def test_encoded_items_are_written_as_the_items_would_be(version: int) -> None:
    """An entity array given as EncodedItems (Metadata's partitions, each encoded once)
    comes out as the same array given as entities, legacy and compact."""
    from dataclasses import replace

    from gregor.wire.schema import response_type

    response = example(response_type(3, version), True)
    topic = response.topics[0]
    partitions = [*topic.partitions, *topic.partitions]
    plain = replace(response, topics=(replace(topic, partitions=tuple(partitions)),))
    encode_partition = entity_encoder(type(partitions[0]))
    items = EncodedItems([encode_partition(p) for p in partitions])
    given = replace(response, topics=(replace(topic, partitions=items),))
    encode = entity_encoder(type(response))
    assert encode(given) == encode(plain) == kio_encode(plain)
    empty = replace(response, topics=(replace(topic, partitions=EncodedItems([])),))
    assert encode(empty) == kio_encode(replace(response, topics=(replace(topic, partitions=()),)))


def test_request_header_client_id_is_a_legacy_string() -> None:
    from kio.schema.request_header.v2.header import RequestHeader

    for client_id in ("gregor", None):
        header = RequestHeader(
            request_api_key=i16(3),
            request_api_version=i16(12),
            correlation_id=i32(5),
            client_id=client_id,
        )
        encoded = entity_encoder(RequestHeader)(header)
        assert encoded == kio_encode(header)
        length = b"\x00\x06gregor" if client_id else b"\xff\xff"
        assert encoded == b"\x00\x03\x00\x0c\x00\x00\x00\x05" + length + b"\x00"


def test_encode_generic_is_this_encoder() -> None:
    entity = example(interbroker.RESPONSES[(interbroker.LEADER_AND_ISR, 7)], full=True)
    assert encode_generic(entity) == kio_encode(entity)
