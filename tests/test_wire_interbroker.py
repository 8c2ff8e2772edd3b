"""Inter-broker schemas (wire/interbroker.py): round trips, Kafka's exact bytes, tolerance.

The expected bytes are assembled here field by field from Kafka 3.9's JSON layouts with
struct and hand-written varints, so they check the schemas independently of the encoder.
"""

import dataclasses
import struct
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from gregor.wire import interbroker as ib
from gregor.wire.interbroker_decode import DECODERS, decode_leader_and_isr_response
from gregor.wire.schema import (
    SchemaDecodeError,
    decode,
    encode,
    encode_generic,
    request_type,
    response_type,
)

TOPIC_ID = uuid.UUID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def cstr(s: str | None) -> bytes:
    """COMPACT_(NULLABLE_)STRING: length + 1 as a varint, 0 for null."""
    if s is None:
        return b"\x00"
    raw = s.encode()
    return uvarint(len(raw) + 1) + raw


def carray(items: list[bytes]) -> bytes:
    return uvarint(len(items) + 1) + b"".join(items)


def cint32s(values: list[int]) -> bytes:
    return carray([struct.pack(">i", v) for v in values])


NO_TAGS = b"\x00"


def leader_and_isr() -> ib.LeaderAndIsrRequest:
    return ib.LeaderAndIsrRequest(
        controller_id=2,
        controller_epoch=9,
        broker_epoch=4294967301,
        type=1,
        topic_states=(
            ib.LeaderAndIsrTopicState(
                topic_name="orders",
                topic_id=TOPIC_ID,
                partition_states=(
                    ib.LeaderAndIsrPartitionState(
                        partition_index=3,
                        controller_epoch=8,
                        leader=1,
                        leader_epoch=12,
                        isr=(1, 2),
                        partition_epoch=40,
                        replicas=(1, 2, 3),
                        adding_replicas=(3,),
                        removing_replicas=(),
                        is_new=True,
                        leader_recovery_state=1,
                    ),
                ),
            ),
        ),
        live_leaders=(ib.LeaderAndIsrLiveLeader(broker_id=1, host_name="h1", port=9092),),
    )


def update_metadata() -> ib.UpdateMetadataRequest:
    return ib.UpdateMetadataRequest(
        controller_id=2,
        controller_epoch=9,
        broker_epoch=77,
        topic_states=(
            ib.UpdateMetadataTopicState(
                topic_name="t",
                topic_id=TOPIC_ID,
                partition_states=(
                    ib.UpdateMetadataPartitionState(
                        partition_index=0,
                        controller_epoch=9,
                        leader=3,
                        leader_epoch=5,
                        isr=(3,),
                        zk_version=6,
                        replicas=(3, 1),
                        offline_replicas=(1,),
                    ),
                ),
            ),
        ),
        live_brokers=(
            ib.UpdateMetadataBroker(
                id=3,
                endpoints=(
                    ib.UpdateMetadataEndpoint(
                        port=19092, host="b3", listener="PLAINTEXT", security_protocol=0
                    ),
                ),
                rack=None,
            ),
            ib.UpdateMetadataBroker(id=1, endpoints=(), rack="r1"),
        ),
    )


def test_leader_and_isr_v7_bytes_are_kafkas() -> None:
    partition = (
        struct.pack(">iiii", 3, 8, 1, 12)  # index, controller epoch, leader, leader epoch
        + cint32s([1, 2])  # Isr
        + struct.pack(">i", 40)  # PartitionEpoch
        + cint32s([1, 2, 3])  # Replicas
        + cint32s([3])  # AddingReplicas
        + cint32s([])  # RemovingReplicas
        + b"\x01"  # IsNew
        + b"\x01"  # LeaderRecoveryState
        + NO_TAGS
    )
    topic = cstr("orders") + TOPIC_ID.bytes + carray([partition]) + NO_TAGS
    live_leader = struct.pack(">i", 1) + cstr("h1") + struct.pack(">i", 9092) + NO_TAGS
    expected = (
        struct.pack(">i", 2)  # ControllerId
        + b"\x00"  # isKRaftController
        + struct.pack(">i", 9)  # ControllerEpoch
        + struct.pack(">q", 4294967301)  # BrokerEpoch
        + b"\x01"  # Type
        + carray([topic])
        + carray([live_leader])
        + NO_TAGS
    )
    assert encode(leader_and_isr()) == expected
    assert decode(ib.LeaderAndIsrRequest, expected) == leader_and_isr()


def test_update_metadata_v8_bytes_are_kafkas() -> None:
    partition = (
        struct.pack(">iiii", 0, 9, 3, 5)
        + cint32s([3])  # Isr
        + struct.pack(">i", 6)  # ZkVersion
        + cint32s([3, 1])  # Replicas
        + cint32s([1])  # OfflineReplicas
        + NO_TAGS
    )
    topic = cstr("t") + TOPIC_ID.bytes + carray([partition]) + NO_TAGS
    endpoint = struct.pack(">i", 19092) + cstr("b3") + cstr("PLAINTEXT") + b"\x00\x00" + NO_TAGS
    broker3 = struct.pack(">i", 3) + carray([endpoint]) + cstr(None) + NO_TAGS
    broker1 = struct.pack(">i", 1) + carray([]) + cstr("r1") + NO_TAGS
    head = struct.pack(">i", 2) + b"\x00" + struct.pack(">iq", 9, 77)
    body = head + carray([topic]) + carray([broker3, broker1])
    # Type (tag 0) keeps its default 0, so it is not written.
    assert encode(update_metadata()) == body + NO_TAGS
    assert decode(ib.UpdateMetadataRequest, body + NO_TAGS) == update_metadata()
    # Type 2 (a full snapshot) travels as tagged field 0 of size 1.
    full = body + b"\x01" + b"\x00" + b"\x01" + b"\x02"
    assert encode(dataclasses.replace(update_metadata(), type=2)) == full
    assert decode(ib.UpdateMetadataRequest, full).type == 2


ROUND_TRIPS = [
    leader_and_isr(),
    ib.LeaderAndIsrResponse(
        error_code=ErrorCode.none,
        topics=(
            ib.LeaderAndIsrTopicError(
                topic_id=TOPIC_ID,
                partition_errors=(
                    ib.LeaderAndIsrPartitionError(partition_index=0, error_code=ErrorCode.none),
                    ib.LeaderAndIsrPartitionError(
                        partition_index=7, error_code=ErrorCode.fenced_leader_epoch
                    ),
                ),
            ),
        ),
    ),
    ib.StopReplicaRequest(
        controller_id=1,
        controller_epoch=4,
        broker_epoch=1234,
        topic_states=(
            ib.StopReplicaTopicState(
                topic_name="gone",
                partition_states=(
                    ib.StopReplicaPartitionState(
                        partition_index=2, leader_epoch=-2, delete_partition=True
                    ),
                    ib.StopReplicaPartitionState(partition_index=5, delete_partition=False),
                ),
            ),
        ),
    ),
    ib.StopReplicaResponse(
        error_code=ErrorCode.stale_controller_epoch,
        partition_errors=(
            ib.StopReplicaPartitionError(
                topic_name="gone", partition_index=2, error_code=ErrorCode.kafka_storage_error
            ),
        ),
    ),
    update_metadata(),
    ib.UpdateMetadataResponse(error_code=ErrorCode.stale_controller_epoch),
    ib.ControlledShutdownRequest(broker_id=3, broker_epoch=99),
    ib.ControlledShutdownResponse(
        error_code=ErrorCode.none,
        remaining_partitions=(
            ib.RemainingPartition(topic_name="orders", partition_index=1),
            ib.RemainingPartition(topic_name="ünïcode", partition_index=0),
        ),
    ),
]


@pytest.mark.parametrize("entity", ROUND_TRIPS, ids=lambda e: type(e).__name__)
def test_round_trip(entity: object) -> None:
    assert decode(type(entity), encode(entity)) == entity


@pytest.mark.parametrize(
    ("api_key", "version", "request_cls", "response_cls"),
    [
        (4, 7, ib.LeaderAndIsrRequest, ib.LeaderAndIsrResponse),
        (5, 4, ib.StopReplicaRequest, ib.StopReplicaResponse),
        (6, 8, ib.UpdateMetadataRequest, ib.UpdateMetadataResponse),
        (7, 3, ib.ControlledShutdownRequest, ib.ControlledShutdownResponse),
    ],
)
def test_schema_lookup_finds_them(
    api_key: int, version: int, request_cls: type, response_cls: type
) -> None:
    assert request_type(api_key, version) is request_cls
    assert response_type(api_key, version) is response_cls
    assert request_cls.__flexible__ and request_cls.__api_key__ == api_key


def test_kio_schemas_still_found() -> None:
    assert request_type(3, 12).__name__ == "MetadataRequest"
    assert response_type(1, 12).__name__ == "FetchResponse"


def test_unknown_tagged_fields_are_skipped() -> None:
    """Tags a newer Gregor might add, at the top level and inside a nested struct."""
    unknown = b"\x02" + b"\x05\x03abc" + b"\x07\x00"  # two fields: tag 5 (3 bytes), tag 7 (empty)
    request = ib.ControlledShutdownRequest(broker_id=3, broker_epoch=99)
    raw = encode(request)
    assert raw.endswith(NO_TAGS)
    assert decode(ib.ControlledShutdownRequest, raw[:-1] + unknown) == request

    response = ROUND_TRIPS[-1]
    raw = encode(response)
    first = struct.pack(">i", 1)  # end of the first RemainingPartition, before its tags
    at = raw.index(cstr("orders") + first) + len(cstr("orders") + first)
    patched = raw[:at] + unknown + raw[at + 1 :]
    assert decode(ib.ControlledShutdownResponse, patched) == response

    # A known tag next to an unknown one is still read.
    body = encode(update_metadata())[:-1]
    mixed = body + b"\x02" + b"\x00\x01\x02" + b"\x09\x02zz"
    assert decode(ib.UpdateMetadataRequest, mixed).type == 2


def test_truncated_body_is_refused() -> None:
    raw = encode(leader_and_isr())
    with pytest.raises(SchemaDecodeError):
        decode(ib.LeaderAndIsrRequest, raw[:-5])


def _varied_requests() -> list[object]:
    """LeaderAndIsr and UpdateMetadata in every shape the fast encoder distinguishes:
    several topics (over 127: a two-byte count), a null topic id, a non-ASCII name, empty
    and 127-long arrays (a two-byte compact length), each flag."""
    long_replicas = tuple(range(127))
    lai_topics = []
    um_topics = []
    for t in range(130):
        name, topic_id = (f"t{t}", uuid.UUID(int=t + 1)) if t else ("tópico", None)
        lai_states = []
        um_states = []
        for p in range(3):
            replicas = long_replicas if (t, p) == (2, 1) else (p, p + 1, p + 2)[: p + 1]
            lai_states.append(
                ib.LeaderAndIsrPartitionState(
                    partition_index=p, controller_epoch=t, leader=p - 1, leader_epoch=2**31 - 1,
                    isr=replicas[:1], partition_epoch=-7, replicas=replicas,
                    adding_replicas=(9,) if p == 1 else (), removing_replicas=(8, 7)[:p],
                    is_new=p == 2, leader_recovery_state=p % 2,
                )
            )  # fmt: skip
            um_states.append(
                ib.UpdateMetadataPartitionState(
                    partition_index=p, controller_epoch=t, leader=-2, leader_epoch=p,
                    isr=(), zk_version=2**31 - 1, replicas=replicas, offline_replicas=replicas[1:],
                )
            )  # fmt: skip
        lai_topics.append(
            ib.LeaderAndIsrTopicState(
                topic_name=name, topic_id=topic_id, partition_states=tuple(lai_states)
            )
        )
        um_topics.append(
            ib.UpdateMetadataTopicState(
                topic_name=name, topic_id=topic_id, partition_states=tuple(um_states)
            )
        )
    endpoint = ib.UpdateMetadataEndpoint(port=9092, host="h", listener="L", security_protocol=1)
    return [
        ib.LeaderAndIsrRequest(
            controller_id=3,
            controller_epoch=4,
            broker_epoch=2**40,
            type=2,
            topic_states=tuple(lai_topics),
            live_leaders=(ib.LeaderAndIsrLiveLeader(broker_id=1, host_name="h", port=9),),
        ),  # fmt: skip
        ib.LeaderAndIsrRequest(
            controller_id=3, controller_epoch=4, topic_states=(), live_leaders=()
        ),
        ib.UpdateMetadataRequest(
            controller_id=3,
            controller_epoch=4,
            broker_epoch=5,
            topic_states=tuple(um_topics),
            live_brokers=(
                ib.UpdateMetadataBroker(id=1, endpoints=(endpoint,), rack="r"),
                ib.UpdateMetadataBroker(id=2, endpoints=(), rack=None),
            ),
        ),  # fmt: skip
        ib.UpdateMetadataRequest(
            controller_id=3, controller_epoch=4, topic_states=tuple(um_topics[:1]), live_brokers=()
        ),
    ]


@pytest.mark.parametrize("index", range(4))
def test_fast_encoders_equal_the_generic_writer(index: int) -> None:
    request = _varied_requests()[index]
    assert encode(request) == encode_generic(request)
    assert decode(type(request), encode(request)) == request


def _decoded_or_refused(
    decoder: Callable[[int, bytes, int], Any] | None, request_type: type, version: int, raw: bytes
) -> Any:
    """What a decoder (None: the schema walk) makes of ``raw`` after a 3-byte prefix: the
    request, or the refusal."""
    framed = b"pre" + raw
    try:
        if decoder is None:
            return decode(request_type, framed, 3)
        return decoder(version, framed, 3)
    except SchemaDecodeError:
        return SchemaDecodeError


@pytest.mark.parametrize("index", range(4))
def test_fast_decoders_equal_the_schema_walk(index: int) -> None:
    request: Any = _varied_requests()[index]
    fast = DECODERS[request.__api_key__]
    raw = encode(request)
    for framed in (b"pre" + raw, bytearray(b"pre" + raw)):
        assert fast(request.__version__, framed, 3) == request


@pytest.mark.parametrize("make", [leader_and_isr, update_metadata])
def test_fast_decoders_refuse_and_accept_what_the_schema_walk_does(make: Callable[[], Any]) -> None:
    """Every byte of a request set to values that break a length, a boolean, the tags or
    nothing, and every truncation: the fast decoder decodes the same request or refuses
    as the schema walk does (a state it cannot read at once goes to the walk)."""
    request = make()
    kind, version = type(request), request.__version__
    fast = DECODERS[request.__api_key__]
    raw = encode(request)
    variants = [raw[:cut] for cut in range(len(raw))]
    for at in range(len(raw)):
        for value in (0, 1, 2, 0x7F, 0x80, 0xFF):
            variants.append(raw[:at] + bytes([value]) + raw[at + 1 :])
    for variant in variants:
        expected = _decoded_or_refused(None, kind, version, variant)
        assert _decoded_or_refused(fast, kind, version, variant) == expected, variant


def test_fast_decoders_skip_tags_in_states_and_topics() -> None:
    """A state or a topic with tagged fields (a newer controller's) is read whole."""
    unknown = b"\x01\x05\x02zz"  # one field, tag 5, two bytes
    for request in (leader_and_isr(), update_metadata()):
        fast = DECODERS[request.__api_key__]
        raw = encode(request)
        # The one topic: its name, id and one state, then its own (empty) tags.
        topic = request.topic_states[0]
        head = cstr(topic.topic_name) + topic.topic_id.bytes + b"\x02"
        start = raw.index(head) + len(head)
        state = encode(topic.partition_states[0])
        end = start + len(state)
        assert raw[start:end] == state and raw[end : end + 1] == NO_TAGS
        tagged_state = raw[:start] + state[:-1] + unknown + raw[end:]
        assert fast(request.__version__, tagged_state, 0) == request
        tagged_topic = raw[:end] + unknown + raw[end + 1 :]
        assert fast(request.__version__, tagged_topic, 0) == request


def _leader_and_isr_responses() -> list[ib.LeaderAndIsrResponse]:
    """Answers in every shape the fast codec distinguishes: no topic, a null topic id, no
    partition, over 127 topics and partitions (two-byte counts), errors other than none."""

    def topic(t: int, count: int) -> ib.LeaderAndIsrTopicError:
        return ib.LeaderAndIsrTopicError(
            topic_id=uuid.UUID(int=t) if t else None,
            partition_errors=tuple(
                ib.LeaderAndIsrPartitionError(
                    partition_index=p,
                    error_code=ErrorCode.stale_controller_epoch if p % 3 else ErrorCode.none,
                )
                for p in range(count)
            ),
        )

    return [
        ib.LeaderAndIsrResponse(error_code=ErrorCode.none, topics=()),
        ib.LeaderAndIsrResponse(
            error_code=ErrorCode.none, topics=tuple(topic(t, t % 5) for t in range(130))
        ),
        ib.LeaderAndIsrResponse(error_code=ErrorCode.none, topics=(topic(7, 1000),)),
        ib.LeaderAndIsrResponse(error_code=ErrorCode.cluster_authorization_failed, topics=()),
    ]


@pytest.mark.parametrize("index", range(4))
def test_leader_and_isr_response_codec_equals_the_schema_walk(index: int) -> None:
    response = _leader_and_isr_responses()[index]
    raw = encode(response)
    assert raw == encode_generic(response)
    for framed in (b"pre" + raw, bytearray(b"pre" + raw), memoryview(b"pre" + raw)):
        assert decode_leader_and_isr_response(framed, 3) == response


def test_leader_and_isr_response_decoder_refuses_and_accepts_what_the_schema_walk_does() -> None:
    whole = _leader_and_isr_responses()[1]
    raw = encode(dataclasses.replace(whole, topics=whole.topics[:4]))  # 0-3 partitions each
    variants = [raw[:cut] for cut in range(len(raw))]
    for at in range(len(raw)):
        for value in (0, 1, 2, 0x7F, 0x80, 0xFF):
            variants.append(raw[:at] + bytes([value]) + raw[at + 1 :])
    for variant in variants:
        try:
            expected = decode(ib.LeaderAndIsrResponse, variant)
        except SchemaDecodeError:
            expected = SchemaDecodeError
        try:
            fast = decode_leader_and_isr_response(variant, 0)
        except SchemaDecodeError:
            fast = SchemaDecodeError
        assert fast == expected, variant
