"""The hand-coded Produce request decoder and response encoder, checked against kio."""

from __future__ import annotations

import datetime
import random
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from gregor.apis.context import NO_THROTTLE, build, nested
from gregor.wire.produce import (
    MAX_VERSION,
    MIN_VERSION,
    PartitionResult,
    TopicData,
    decode_produce_request,
    encode_produce_response,
)
from gregor.wire.reader import BodyDecodeError
from gregor.wire.schema import encode, request_type, response_type

VERSIONS = range(MIN_VERSION, MAX_VERSION + 1)
# From v13 topics are named by id.
IDS = {name: uuid.uuid4() for name in ("a", "b", "bé", "t")}


def topic(name: str) -> TopicData:
    return TopicData(name, [], IDS[name])


def kio_request(version: int, txn: str | None, topics: dict[str, list[tuple[int, bytes | None]]]):
    cls = request_type(0, version)
    t, p = nested(cls, "TopicProduceData"), nested(cls, "PartitionProduceData")
    return cls(
        transactional_id=txn,
        acks=-1,
        timeout=datetime.timedelta(milliseconds=1500),
        topic_data=tuple(
            build(
                t,
                name=name,
                topic_id=IDS[name],
                partition_data=tuple(p(index=i, records=r) for i, r in parts),
            )
            for name, parts in topics.items()
        ),
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_decoder_matches_kio_encoding(version: int) -> None:
    topics = {"a": [(0, b"x" * 300), (5, None)], "bé": [(2, b"")]}
    data = b"HEAD" + encode(kio_request(version, "txn-1", topics))
    request = decode_produce_request(version, data, 4)
    assert (request.transactional_id, request.acks, request.timeout_ms) == ("txn-1", -1, 1500)
    by_id = {v: k for k, v in IDS.items()}
    decoded = {
        t.name or by_id[t.topic_id]: [(p.index, p.records) for p in t.partitions]
        for t in request.topics
    }
    assert decoded == topics
    assert all((t.topic_id is not None) == (version >= 13) for t in request.topics)


@pytest.mark.parametrize("version", VERSIONS)
def test_encoder_matches_kio(version: int) -> None:
    results = [
        (topic("a"), [PartitionResult(0, 0, 42, -1, 0), PartitionResult(3, 6)]),
        (topic("b"), [PartitionResult(1, 0, 7, 1_700_000_000_123, 5)]),
    ]
    endpoints = [(4, "b4", 9095, "r1")]
    if version >= 10:  # KIP-951: the leader of a partition led elsewhere
        results[0][1][1].error_code = ErrorCode.not_leader_or_follower
        results[0][1][1].current_leader = (4, 12)
    cls = response_type(0, version)
    t, p = nested(cls, "TopicProduceResponse"), nested(cls, "PartitionProduceResponse")

    def leader(r: PartitionResult) -> dict[str, object]:
        if r.current_leader is None:
            return {}
        return {
            "current_leader": nested(cls, "LeaderIdAndEpoch")(
                leader_id=r.current_leader[0], leader_epoch=r.current_leader[1]
            )
        }

    def when(ms: int) -> datetime.datetime | None:
        return None if ms < 0 else datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)

    expected = build(
        cls,
        throttle_time=NO_THROTTLE,
        responses=tuple(
            build(
                t,
                name=name.name,
                topic_id=name.topic_id,
                partition_responses=tuple(
                    build(
                        p,
                        index=r.index,
                        error_code=ErrorCode(r.error_code),
                        base_offset=r.base_offset,
                        log_append_time=when(r.log_append_time),
                        log_start_offset=r.log_start_offset,
                        record_errors=(),
                        error_message=None,
                        **leader(r),
                    )
                    for r in parts
                ),
            )
            for name, parts in results
        ),
        node_endpoints=tuple(
            nested(cls, "NodeEndpoint")(node_id=n, host=h, port=port, rack=r)
            for n, h, port, r in endpoints
        )
        if version >= 10
        else (),
    )
    ours = encode_produce_response(version, results, node_endpoints=endpoints)
    assert ours == encode(expected)


@pytest.mark.parametrize("version", [3, 8, 9, 11, 13])
def test_truncations_raise_decode_errors(version: int) -> None:
    data = encode(kio_request(version, None, {"t": [(0, b"r" * 50)]}))
    for cut in range(len(data) - 1):
        with pytest.raises(BodyDecodeError):
            decode_produce_request(version, data[:cut], 0)


@settings(
    max_examples=400, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(version=st.sampled_from(list(VERSIONS)), seed=st.integers(0, 2**32), flips=st.integers(1, 6))
def test_mutations_raise_only_decode_errors(version: int, seed: int, flips: int) -> None:
    data = bytearray(encode(kio_request(version, "t", {"t": [(0, b"r" * 40), (1, b"s")]})))
    rng = random.Random(seed)
    for _ in range(flips):
        data[rng.randrange(len(data))] = rng.randrange(256)
    try:
        decode_produce_request(version, bytes(data), 0)
    except BodyDecodeError:
        pass


@pytest.mark.parametrize("version", [v for v in VERSIONS if v >= 8])
def test_record_errors_and_error_message_match_kio(version: int) -> None:
    failed = PartitionResult(2, ErrorCode.invalid_timestamp)
    failed.record_errors = [(4, "timestamp 5 of record 4 is out of range")]
    failed.error_message = "timestamp 5 of record 4 is out of range"
    cls = response_type(0, version)
    t, p = nested(cls, "TopicProduceResponse"), nested(cls, "PartitionProduceResponse")
    error = nested(cls, "BatchIndexAndErrorMessage")
    expected = build(
        cls,
        throttle_time=NO_THROTTLE,
        responses=(
            build(
                t,
                name="t",
                topic_id=IDS["t"],
                partition_responses=(
                    build(
                        p,
                        index=2,
                        error_code=ErrorCode.invalid_timestamp,
                        base_offset=-1,
                        log_append_time=None,
                        log_start_offset=-1,
                        record_errors=(
                            error(batch_index=4, batch_index_error_message=failed.error_message),
                        ),
                        error_message=failed.error_message,
                    ),
                ),
            ),
        ),
    )
    assert encode_produce_response(version, [(topic("t"), [failed])]) == encode(expected)
