"""The hand-coded OffsetCommit request decoder and response encoder, checked against kio."""

from __future__ import annotations

import datetime
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from gregor.apis.context import NO_THROTTLE, build, nested
from gregor.wire import versions
from gregor.wire.offset_commit import (
    MAX_VERSION,
    MIN_VERSION,
    decode_offset_commit_request,
    encode_offset_commit_response,
)
from gregor.wire.reader import BodyDecodeError
from gregor.wire.schema import encode, request_type, response_type

VERSIONS = range(MIN_VERSION, MAX_VERSION + 1)
# (partition, offset, leader epoch, metadata) per topic
TOPICS = {"a": [(0, 42, 7, "meta"), (5, -1, -1, None)], "bé": [(2, 2**40, 3, "")]}


def kio_request(version: int, topics: dict, retention_ms: int = 86_400_000):
    cls = request_type(versions.OFFSET_COMMIT, version)
    t, p = nested(cls, "OffsetCommitRequestTopic"), nested(cls, "OffsetCommitRequestPartition")
    return build(
        cls,
        group_id="grp",
        generation_id_or_member_epoch=17,
        member_id="member-1",
        group_instance_id="inst",
        retention_time=datetime.timedelta(milliseconds=retention_ms),
        topics=tuple(
            t(
                name=name,
                partitions=tuple(
                    build(
                        p,
                        partition_index=i,
                        committed_offset=o,
                        committed_leader_epoch=e,
                        committed_metadata=m,
                    )
                    for i, o, e, m in parts
                ),
            )
            for name, parts in topics.items()
        ),
    )


def test_versions_match_the_served_range() -> None:
    assert versions.SUPPORTED[versions.OFFSET_COMMIT] == (MIN_VERSION, MAX_VERSION)


@pytest.mark.parametrize("version", VERSIONS)
def test_decoder_matches_kio_encoding(version: int) -> None:
    data = b"HEAD" + encode(kio_request(version, TOPICS))
    request = decode_offset_commit_request(version, data, 4)
    assert (request.group_id, request.generation_id_or_member_epoch, request.member_id) == (
        "grp",
        17,
        "member-1",
    )
    assert request.group_instance_id == ("inst" if version >= 7 else None)
    assert request.retention_time_ms == (86_400_000 if version <= 4 else -1)
    decoded = {t.name: t.partitions for t in request.topics}
    expected = {
        name: [(i, o, e if version >= 6 else -1, m) for i, o, e, m in parts]
        for name, parts in TOPICS.items()
    }
    assert decoded == expected


@pytest.mark.parametrize("version", [2, 4])
def test_default_retention_decodes_as_minus_one(version: int) -> None:
    request = decode_offset_commit_request(version, encode(kio_request(version, TOPICS, -1)), 0)
    assert request.retention_time_ms == -1


@pytest.mark.parametrize("version", VERSIONS)
def test_encoder_matches_kio(version: int) -> None:
    results = [("a", [(0, 0), (5, int(ErrorCode.unknown_topic_or_partition))]), ("bé", [(2, 27)])]
    cls = response_type(versions.OFFSET_COMMIT, version)
    t = nested(cls, "OffsetCommitResponseTopic")
    p = nested(cls, "OffsetCommitResponsePartition")
    expected = build(
        cls,
        throttle_time=NO_THROTTLE,
        topics=tuple(
            t(
                name=name,
                partitions=tuple(p(partition_index=i, error_code=ErrorCode(e)) for i, e in parts),
            )
            for name, parts in results
        ),
    )
    assert encode_offset_commit_response(version, results) == encode(expected)


@pytest.mark.parametrize("version", [2, 5, 6, 7, 8, 9])
def test_truncations_raise_decode_errors(version: int) -> None:
    data = encode(kio_request(version, TOPICS))
    for cut in range(len(data) - 1):
        with pytest.raises(BodyDecodeError):
            decode_offset_commit_request(version, data[:cut], 0)


@settings(
    max_examples=400, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(version=st.sampled_from(list(VERSIONS)), seed=st.integers(0, 2**32), flips=st.integers(1, 6))
def test_mutations_raise_only_decode_errors(version: int, seed: int, flips: int) -> None:
    data = bytearray(encode(kio_request(version, TOPICS)))
    rng = random.Random(seed)
    for _ in range(flips):
        data[rng.randrange(len(data))] = rng.randrange(256)
    try:
        decode_offset_commit_request(version, bytes(data), 0)
    except BodyDecodeError:
        pass
