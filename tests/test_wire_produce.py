"""The hand-coded Produce request decoder and response encoder, checked against kio."""

from __future__ import annotations

import datetime
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from apis.context import NO_THROTTLE, build, nested
from wire.produce import (
    MAX_VERSION,
    MIN_VERSION,
    PartitionResult,
    decode_produce_request,
    encode_produce_response,
)
from wire.reader import BodyDecodeError
from wire.schema import encode, request_type, response_type

VERSIONS = range(MIN_VERSION, MAX_VERSION + 1)


def kio_request(version: int, txn: str | None, topics: dict[str, list[tuple[int, bytes | None]]]):
    cls = request_type(0, version)
    t, p = nested(cls, "TopicProduceData"), nested(cls, "PartitionProduceData")
    return cls(
        transactional_id=txn,
        acks=-1,
        timeout=datetime.timedelta(milliseconds=1500),
        topic_data=tuple(
            t(name=name, partition_data=tuple(p(index=i, records=r) for i, r in parts))
            for name, parts in topics.items()
        ),
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_decoder_matches_kio_encoding(version: int) -> None:
    topics = {"a": [(0, b"x" * 300), (5, None)], "bé": [(2, b"")]}
    data = b"HEAD" + encode(kio_request(version, "txn-1", topics))
    request = decode_produce_request(version, data, 4)
    assert (request.transactional_id, request.acks, request.timeout_ms) == ("txn-1", -1, 1500)
    assert {t.name: [(p.index, p.records) for p in t.partitions] for t in request.topics} == topics


@pytest.mark.parametrize("version", VERSIONS)
def test_encoder_matches_kio(version: int) -> None:
    results = [
        ("a", [PartitionResult(0, 0, 42, -1, 0), PartitionResult(3, 6)]),
        ("b", [PartitionResult(1, 0, 7, 1_700_000_000_123, 5)]),
    ]
    cls = response_type(0, version)
    t, p = nested(cls, "TopicProduceResponse"), nested(cls, "PartitionProduceResponse")

    def when(ms: int) -> datetime.datetime | None:
        return None if ms < 0 else datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)

    expected = build(
        cls,
        throttle_time=NO_THROTTLE,
        responses=tuple(
            t(
                name=name,
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
                    )
                    for r in parts
                ),
            )
            for name, parts in results
        ),
    )
    assert encode_produce_response(version, results) == encode(expected)


@pytest.mark.parametrize("version", [3, 8, 9, 11])
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
            t(
                name="t",
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
    assert encode_produce_response(version, [("t", [failed])]) == encode(expected)
