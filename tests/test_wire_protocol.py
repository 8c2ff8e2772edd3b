"""Headers, schema lookup and the hand-written FetchResponse encoder against kio."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from gregor.apis.context import NO_THROTTLE, build, nested
from gregor.wire.fetch import FetchPartition, FetchTopic, encode_fetch_response
from gregor.wire.headers import (
    MalformedHeaderError,
    decode_request_header,
    encode_response_header,
    peek_api,
)
from gregor.wire.schema import SchemaDecodeError, decode, encode, request_type, response_type


def test_request_header_v2_with_tagged_fields() -> None:
    frame = b"\x00\x03\x00\x0c\x00\x00\x00\x07\x00\x03abc\x01\x05\x02\xaa\xbb" + b"BODY"
    header = decode_request_header(frame, flexible=True)
    assert (header.api_key, header.api_version, header.correlation_id) == (3, 12, 7)
    assert header.client_id == "abc"
    assert frame[header.body_offset :] == b"BODY"


def test_request_header_v1_null_client_id() -> None:
    header = decode_request_header(b"\x00\x12\x00\x00\x00\x00\x00\x01\xff\xffrest", False)
    assert header.client_id is None and header.body_offset == 10


@pytest.mark.parametrize(
    "frame",
    [
        b"",
        b"\x00\x03\x00",
        b"\x00\x03\x00\x01\x00\x00\x00\x01\x00\x09ab",
        b"\x00\x03\x00\x01\x00\x00\x00\x01\xff\xfe",
    ],
)
def test_malformed_headers_are_rejected(frame: bytes) -> None:
    with pytest.raises(MalformedHeaderError):
        decode_request_header(frame, flexible=True)


def test_peek_reads_only_the_fixed_prefix() -> None:
    assert peek_api(b"\x00\x01\x00\x0c\x00\x00\x01\x00") == (1, 12, 256)
    with pytest.raises(MalformedHeaderError):
        peek_api(b"\x00\x01")


def test_response_header_versions() -> None:
    assert encode_response_header(5, False) == b"\x00\x00\x00\x05"
    assert encode_response_header(5, True) == b"\x00\x00\x00\x05\x00"


def test_schema_round_trip_metadata_request() -> None:
    cls = request_type(3, 12)
    topic = nested(cls, "MetadataRequestTopic")
    request = cls(
        topics=(topic(topic_id=None, name="t"),),  # kio reads the zero UUID as None
        allow_auto_topic_creation=True,
        include_topic_authorized_operations=False,
    )
    assert decode(cls, encode(request)) == request


@dataclass
class _Region:
    data: bytes

    @property
    def size(self) -> int:
        return len(self.data)


ALPHA_ID, BETA_ID = uuid.uuid4(), uuid.uuid4()


@pytest.mark.parametrize("version", range(4, 19))
def test_fetch_encoder_matches_kio(version: int) -> None:
    records = b"R" * 70
    topics = [
        FetchTopic(
            "alpha",
            [
                FetchPartition(0, 0, 10, 10, 2, None, _Region(records)),
                FetchPartition(1, ErrorCode.offset_out_of_range, 5, 5, 0, [(7, 3)], b""),
            ],
            ALPHA_ID,
        ),
        FetchTopic("beta", [FetchPartition(3, 0, 0, 0, 0, None, None)], BETA_ID),
    ]
    endpoints = [(2, "b2.example", 9093, "rack-b"), (1, "b1", 9092, None)]
    if version >= 12:  # KIP-951 leader hints, beside a diverging epoch
        topics[0].partitions[1].error_code = ErrorCode.not_leader_or_follower
        topics[0].partitions[1].current_leader = (2, 7)
        topics[1].partitions[0].current_leader = (1, 3)
        topics[1].partitions[0].diverging_epoch = (4, 40)
    parts, size = encode_fetch_response(
        version, topics, throttle_ms=0, session_id=0, node_endpoints=endpoints
    )
    ours = b"".join(p if isinstance(p, bytes) else p.data for p in parts)
    assert len(ours) == size

    cls = response_type(1, version)
    topic_cls = nested(cls, "FetchableTopicResponse")
    part_cls = nested(cls, "PartitionData")
    aborted_cls = nested(cls, "AbortedTransaction")

    def hints(p: FetchPartition) -> dict[str, object]:
        out: dict[str, object] = {}
        if p.current_leader is not None:
            out["current_leader"] = nested(cls, "LeaderIdAndEpoch")(
                leader_id=p.current_leader[0], leader_epoch=p.current_leader[1]
            )
        if p.diverging_epoch is not None:
            out["diverging_epoch"] = nested(cls, "EpochEndOffset")(
                epoch=p.diverging_epoch[0], end_offset=p.diverging_epoch[1]
            )
        return out

    def part(p: FetchPartition, recs: bytes | None) -> object:
        aborted = (
            None
            if p.aborted is None
            else tuple(aborted_cls(producer_id=a, first_offset=b) for a, b in p.aborted)
        )
        return build(
            part_cls,
            partition_index=p.index,
            error_code=ErrorCode(p.error_code),
            high_watermark=p.high_watermark,
            last_stable_offset=p.last_stable_offset,
            log_start_offset=p.log_start_offset,
            aborted_transactions=aborted,
            preferred_read_replica=-1,
            records=recs,
            **hints(p),
        )

    expected = build(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        session_id=0,
        node_endpoints=tuple(
            build(nested(cls, "NodeEndpoint"), node_id=n, host=h, port=port, rack=r)
            for n, h, port, r in sorted(endpoints)
        )
        if version >= 16
        else (),
        responses=(
            build(
                topic_cls,
                topic="alpha",
                topic_id=ALPHA_ID,
                partitions=(
                    part(topics[0].partitions[0], records),
                    part(topics[0].partitions[1], b""),
                ),
            ),
            build(
                topic_cls,
                topic="beta",
                topic_id=BETA_ID,
                partitions=(part(topics[1].partitions[0], None),),
            ),
        ),
    )
    assert ours == encode(expected)


@pytest.mark.parametrize("version", range(4, 19))
def test_fetch_request_decoder_matches_kio(version: int) -> None:
    import datetime

    from gregor.wire.fetch import decode_fetch_request

    cls = request_type(1, version)
    t, p = nested(cls, "FetchTopic"), nested(cls, "FetchPartition")
    old_id = uuid.uuid4()
    fields = dict(
        replica_id=4,
        replica_state=nested(cls, "ReplicaState")(replica_id=4, replica_epoch=9)
        if version >= 15
        else None,
        max_wait=datetime.timedelta(milliseconds=500),
        min_bytes=1,
        max_bytes=52428800,
        isolation_level=1,
        session_id=0,
        session_epoch=-1,
        topics=(
            build(
                t,
                topic="alpha",
                topic_id=ALPHA_ID,
                partitions=tuple(
                    build(
                        p,
                        partition=i,
                        current_leader_epoch=3,
                        fetch_offset=100 + i,
                        last_fetched_epoch=2,
                        log_start_offset=7,
                        partition_max_bytes=1 << 20,
                        replica_directory_id=uuid.uuid4(),  # v17+, tagged: skipped
                        high_watermark=55,  # v18+, tagged: skipped
                    )
                    for i in range(3)
                ),
            ),
        ),
        forgotten_topics_data=(
            build(nested(cls, "ForgottenTopic"), topic="old", topic_id=old_id, partitions=(1, 2)),
        )
        if version >= 7
        else (),
        rack_id="rack-a",
    )
    data = encode(build(cls, **fields))
    request = decode_fetch_request(version, data, 0)
    assert (request.max_wait_ms, request.min_bytes, request.max_bytes) == (500, 1, 52428800)
    assert request.isolation_level == 1
    assert [
        (fp.partition, fp.fetch_offset, fp.partition_max_bytes)
        for fp in request.topics[0].partitions
    ] == [(i, 100 + i, 1 << 20) for i in range(3)]
    assert request.topics[0].partitions[0].current_leader_epoch == (3 if version >= 9 else -1)
    assert request.replica_id == 4
    if version >= 13:
        assert (request.topics[0].topic_id, request.topics[0].topic) == (ALPHA_ID, "")
        assert (request.forgotten, request.forgotten_ids) == ([], [(old_id, [1, 2])])
    else:
        assert request.topics[0].topic == "alpha"
        assert request.forgotten == ([("old", [1, 2])] if version >= 7 else [])
    assert request.rack_id == ("rack-a" if version >= 11 else "")
    for cut in range(0, len(data) - 1, 3):
        with pytest.raises(SchemaDecodeError):
            decode_fetch_request(version, data[:cut], 0)


@settings(max_examples=300, derandomize=True, database=None)
@given(version=st.integers(4, 18), seed=st.integers(0, 2**32), flips=st.integers(1, 6))
def test_fetch_request_mutations_raise_only_decode_errors(
    version: int, seed: int, flips: int
) -> None:
    import datetime
    import random

    from gregor.wire.fetch import decode_fetch_request

    cls = request_type(1, version)
    t, p = nested(cls, "FetchTopic"), nested(cls, "FetchPartition")
    data = bytearray(
        encode(
            build(
                cls,
                replica_id=-1,
                max_wait=datetime.timedelta(milliseconds=5),
                min_bytes=1,
                max_bytes=1000,
                isolation_level=0,
                session_id=0,
                session_epoch=-1,
                rack_id="",
                forgotten_topics_data=(),
                topics=(
                    build(
                        t,
                        topic="t",
                        topic_id=ALPHA_ID,
                        partitions=(build(p, partition=0, fetch_offset=1, partition_max_bytes=10),),
                    ),
                ),
            )
        )
    )
    rng = random.Random(seed)
    for _ in range(flips):
        data[rng.randrange(len(data))] = rng.randrange(256)
    try:
        decode_fetch_request(version, bytes(data), 0)
    except SchemaDecodeError:
        pass
