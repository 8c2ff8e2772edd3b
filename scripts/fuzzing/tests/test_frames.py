"""The frame generators produce what they claim (pure code, no broker)."""

from __future__ import annotations

import random
import struct
from collections import Counter

import pytest
from fuzzing.bodies import HOSTILE_COUNTS, BodyWriter, crc32c_of
from fuzzing.frames import (
    API_VERSION_PAIRS,
    BOMB_TOPICS,
    FLOOD_FRAMES,
    FUZZ_TOPICS,
    bomb_batches,
    compression_bombs,
    lying_sizes,
    pipelining_flood,
    random_bytes,
    schema_bodies,
)

from gregor.wire.compression import ZSTD, CorruptRecordError, decompress
from gregor.wire.headers import skip_tagged_fields
from gregor.wire.produce import decode_produce_request
from gregor.wire.records import build_batch, parse_header
from gregor.wire.schema import SchemaDecodeError, decode, is_flexible, request_type
from gregor.wire.versions import PRODUCE, SUPPORTED, is_supported

INT32_MAX = 2**31 - 1


def split(frame: bytes) -> tuple[int, int, int, bytes]:
    """(size prefix, api key, version, body) of a frame with a v1/v2 request header."""
    size, api_key, version, _correlation, client_len = struct.unpack_from(">ihhih", frame)
    pos = 14 + client_len
    if is_flexible(api_key, version):
        pos = skip_tagged_fields(frame, pos)
    return size, api_key, version, frame[pos:]


def test_every_served_api_and_version_is_fuzzed() -> None:
    expected = {(k, v) for k, (lo, hi) in SUPPORTED.items() for v in range(lo, hi + 1)}
    assert set(API_VERSION_PAIRS) == expected


@pytest.mark.parametrize("api_key, version", API_VERSION_PAIRS)
def test_unmutated_bodies_are_schema_valid(api_key: int, version: int) -> None:
    rng = random.Random(api_key * 100 + version)
    entity_type = request_type(api_key, version)
    for _ in range(20):
        decode(entity_type, BodyWriter(rng, 0.0, FUZZ_TOPICS).entity(entity_type))


def test_fully_mutated_arrays_claim_hostile_counts() -> None:
    # Metadata v1: the body is the topics array, so its first four bytes are the count.
    rng = random.Random(1)
    counts = {
        struct.unpack_from(">i", BodyWriter(rng, 1.0).entity(request_type(3, 1)))[0]
        for _ in range(200)
    }
    assert counts & set(HOSTILE_COUNTS) and -1 in counts and INT32_MAX in counts
    assert all(c in HOSTILE_COUNTS or 0 < c <= 53 for c in counts)


def test_schema_frames_have_true_sizes_and_served_headers() -> None:
    rng = random.Random(2)
    for _ in range(50):
        for frame in schema_bodies(rng):
            size, api_key, version, _body = split(frame)
            assert size == len(frame) - 4 and is_supported(api_key, version)


def test_random_bytes_are_bare_or_truly_sized() -> None:
    rng = random.Random(3)
    frames = [f for _ in range(200) for f in random_bytes(rng)]
    sized = [f for f in frames if len(f) > 4 and struct.unpack_from(">i", f)[0] == len(f) - 4]
    assert 50 < len(sized) < 150


def test_lying_frames_lie_in_every_way() -> None:
    rng = random.Random(4)
    kinds: Counter[str] = Counter()
    for _ in range(300):
        [frame] = lying_sizes(rng)
        if len(frame) < 4:
            kinds["partial prefix"] += 1
            continue
        size = struct.unpack_from(">i", frame)[0]
        if size <= 0:
            kinds["not positive"] += 1
        elif size != len(frame) - 4:
            kinds["more" if size > len(frame) - 4 else "less"] += 1
        else:  # a true size over a body whose every field is hostile
            _size, api_key, version, body = split(frame)
            try:
                decode(request_type(api_key, version), body)
                kinds["hostile but decodable"] += 1
            except SchemaDecodeError:
                kinds["hostile counts"] += 1
    lies = ("partial prefix", "not positive", "more", "less", "hostile counts")
    assert all(kinds[lie] >= 30 for lie in lies), kinds
    # The rest are bodies with nothing to lie about (ApiVersions v0, ListGroups v0...).
    assert kinds["hostile but decodable"] < kinds["hostile counts"] / 5, kinds


def test_flood_is_thousands_of_valid_small_requests() -> None:
    frames = pipelining_flood(random.Random(5))
    assert len(frames) == FLOOD_FRAMES
    for frame in frames:
        size, api_key, version, body = split(frame)
        assert size == len(frame) - 4
        decode(request_type(api_key, version), body)


@pytest.fixture(scope="module")
def bombs() -> tuple[bytes, ...]:
    return bomb_batches()


def test_bombs_have_valid_crcs_and_go_to_bomb_topics(bombs: tuple[bytes, ...]) -> None:
    for batch in bombs:
        assert struct.unpack_from(">I", batch, 17)[0] == crc32c_of(batch)
    rng = random.Random(6)
    for _ in range(30):
        [frame] = compression_bombs(rng)
        size, api_key, version, body = split(frame)
        assert size == len(frame) - 4 and api_key == PRODUCE
        [topic] = decode_produce_request(version, body, 0).topics
        assert topic.name in BOMB_TOPICS and topic.partitions[0].records in bombs


def test_bombs_decompress_far_beyond_their_size(bombs: tuple[bytes, ...]) -> None:
    for batch in bombs[:3]:  # zstd, gzip and lz4 runs of zeros
        header = parse_header(batch)
        assert len(batch) < 1 << 20
        with pytest.raises(CorruptRecordError, match="exceeds the limit"):
            decompress(header.compression, batch[61:], 64 << 20)


def test_a_bomb_claims_billions_of_records_but_holds_three(bombs: tuple[bytes, ...]) -> None:
    claims = [b for b in bombs if parse_header(b).record_count == INT32_MAX]
    assert len(claims) == 1
    three = build_batch([(None, b"v", [], 0)] * 3)
    assert decompress(ZSTD, claims[0][61:]) == three[61:]
