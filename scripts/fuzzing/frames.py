"""The hostile frame families: each generator returns the frames of one connection.

A "frame" is what a client writes as one request: normally a 4-byte size prefix and
that many bytes, but a family may lie about the size or send no prefix at all.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable
from functools import cache

import zstandard

from fuzzing import admin_mega, consumer_groups, metrics_http, share_groups
from fuzzing.bodies import INT32_MAX, BodyWriter, crc32c_of
from gregor.wire.compression import GZIP, LZ4, ZSTD, compress
from gregor.wire.records import build_batch
from gregor.wire.schema import is_flexible, request_type
from gregor.wire.varint import encode_uvarint
from gregor.wire.versions import API_VERSIONS, METADATA, PRODUCE, SUPPORTED

# Topics the fuzzer names (created up front so produce reaches validation); the internal
# topics are there on purpose: a client must not be able to write or delete them.
FUZZ_TOPICS = ("fuzz-0", "fuzz-1", "__consumer_offsets", "__transaction_state", "")
FUZZ_GROUPS = ("fuzz-group", "")
# Bombs go to topics the schema family does not name, so they are never deleted under it.
BOMB_TOPICS = {
    "fuzz-bomb": {},
    "fuzz-bomb-gzip": {"compression.type": "gzip"},
    "fuzz-bomb-compact": {"cleanup.policy": "compact"},
}
API_VERSION_PAIRS = tuple((k, v) for k, (lo, hi) in SUPPORTED.items() for v in range(lo, hi + 1))
FLOOD_FRAMES = 2_000  # requests pipelined on one connection without reading a response
BURST = 8  # most frames on one connection in the schema family


def sized(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def header(api_key: int, version: int, correlation_id: int, client_id: bytes = b"fuzz") -> bytes:
    """Request header v1, or v2 (an empty tagged-field section) for flexible versions."""
    head = struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id
    return head + b"\x00" if is_flexible(api_key, version) else head


def random_bytes(rng: random.Random) -> list[bytes]:
    """Garbage, with a plausible size prefix (matching what follows) or none at all."""
    data = rng.randbytes(rng.choice((1, 3, 7, 40, 500, 4000)))
    return [sized(data) if rng.random() < 0.5 else data]


def schema_bodies(rng: random.Random) -> list[bytes]:
    """Valid headers of every served API and version: up to BURST - 1 requests with
    schema-valid bodies (which a broker answers), then one whose body is random, truncated,
    byte-flipped or schema-mutated (nulls where forbidden, lying lengths and counts)."""
    frames = []
    for i in range(rng.randrange(BURST), -1, -1):
        api_key, version = rng.choice(API_VERSION_PAIRS)
        entity_type = request_type(api_key, version)
        mode = rng.randrange(4) if i == 0 else -1
        writer = BodyWriter(rng, 0.15 if mode == 3 else 0.0, FUZZ_TOPICS, FUZZ_GROUPS)
        body = rng.randbytes(rng.randrange(64)) if mode == 0 else writer.entity(entity_type)
        if mode == 1:  # truncated
            body = body[: rng.randrange(len(body) + 1)]
        elif mode == 2:  # flipped bits
            flipped = bytearray(body)
            for _ in range(rng.randint(1, 3) if flipped else 0):
                flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
            body = bytes(flipped)
        frames.append(sized(header(api_key, version, rng.randrange(INT32_MAX)) + body))
    return frames


def lying_sizes(rng: random.Random) -> list[bytes]:
    """A size prefix that disagrees with the bytes sent, or array counts of 2^31-1."""
    api_key, version = rng.choice(API_VERSION_PAIRS)
    payload = header(api_key, version, 1) + BodyWriter(rng, 0.0, FUZZ_TOPICS).entity(
        request_type(api_key, version)
    )
    kind = rng.randrange(5)
    if kind == 0:  # announces far more than it sends (memory must not be committed for it)
        return [struct.pack(">i", rng.choice((100 << 20, INT32_MAX, len(payload) + 1))) + payload]
    if kind == 1:  # announces less: the rest is read as the next frame
        return [struct.pack(">i", rng.randrange(len(payload))) + payload]
    if kind == 2:  # negative or zero size
        return [struct.pack(">i", rng.choice((-1, -(2**31), 0))) + payload]
    if kind == 3:  # every array and length claims 2^31-1 or so
        body = BodyWriter(rng, 1.0, FUZZ_TOPICS).entity(request_type(api_key, version))
        return [sized(header(api_key, version, 1) + body)]
    # A size prefix split over two writes, then a stall mid-frame (the runner closes).
    return [struct.pack(">i", len(payload))[:2]]


def _batch_of(payload: bytes, codec: int, count: int, last_delta: int) -> bytes:
    """A v2 batch around an already compressed records section, with a correct CRC."""
    head = struct.pack(
        ">qiibIhiqqqhii",
        0,
        49 + len(payload),
        -1,
        2,
        0,
        codec,
        last_delta,
        0,
        0,
        -1,
        -1,
        -1,
        count,
    )
    batch = bytearray(head + payload)
    batch[17:21] = struct.pack(">I", crc32c_of(batch))
    return bytes(batch)


@cache
def bomb_batches() -> tuple[bytes, ...]:
    """Small batches that cost a careless broker gigabytes or seconds; built once."""
    zeros = bytes(128 << 20)
    tiny = [(None, b"x", [], 0)] * 200_000
    three = compress(ZSTD, build_batch([(None, b"v", [], 0)] * 3)[61:])
    return (
        _batch_of(_zstd_gib(zeros), ZSTD, 1, 0),  # 1 GiB of zeros in ~32 KB
        _batch_of(compress(GZIP, zeros), GZIP, 1, 0),  # 128 MiB of zeros
        _batch_of(compress(LZ4, zeros), LZ4, 1, 0),
        build_batch(tiny, compression=ZSTD),  # 200,000 valid records: CPU, not memory
        _batch_of(three, ZSTD, INT32_MAX, INT32_MAX - 1),  # claims 2^31-1 records, holds 3
        _batch_of(compress(GZIP, zeros)[:5000], GZIP, 1, 0),  # truncated gzip
    )


def _zstd_gib(zeros: bytes) -> bytes:
    """1 GiB of zeros as one zstd frame, compressed without holding the GiB in memory."""
    stream = zstandard.ZstdCompressor(level=3).compressobj()
    return b"".join(stream.compress(zeros) for _ in range(8)) + stream.flush()


def compression_bombs(rng: random.Random) -> list[bytes]:
    """One Produce carrying a compression bomb to a bomb topic, named: v3..v12 (v13 names
    topics by id)."""
    version = rng.randint(SUPPORTED[PRODUCE][0], min(SUPPORTED[PRODUCE][1], 12))
    batch = rng.choice(bomb_batches())
    topic = rng.choice(tuple(BOMB_TOPICS)).encode()
    flexible = is_flexible(PRODUCE, version)
    if flexible:
        body = (
            b"\x00"  # null transactional id
            + struct.pack(">hi", 1, 30_000)
            + b"\x02"
            + bytes([len(topic) + 1])
            + topic
            + b"\x02"
            + struct.pack(">i", 0)
            + encode_uvarint(len(batch) + 1)
            + batch
            + b"\x00\x00\x00"  # tags of the partition, the topic and the request
        )
    else:
        body = (
            struct.pack(">hhi", -1, 1, 30_000)
            + struct.pack(">ih", 1, len(topic))
            + topic
            + struct.pack(">iii", 1, 0, len(batch))
            + batch
        )
    return [sized(header(PRODUCE, version, 1) + body)]


def pipelining_flood(rng: random.Random) -> list[bytes]:
    """Thousands of cheap requests with big answers (Metadata of every topic, ApiVersions),
    written without reading a single response."""
    frames = []
    for correlation_id in range(FLOOD_FRAMES):
        if rng.random() < 0.5:
            frames.append(sized(header(METADATA, 1, correlation_id) + struct.pack(">i", -1)))
        else:
            frames.append(sized(header(API_VERSIONS, 0, correlation_id)))
    return frames


Family = Callable[[random.Random], list[bytes]]
# Family name -> (generator, share of connections).
FAMILIES: dict[str, tuple[Family, float]] = {
    "random_bytes": (random_bytes, 0.35),
    "schema_bodies": (schema_bodies, 0.45),
    "lying_sizes": (lying_sizes, 0.18),
    "compression_bombs": (compression_bombs, 0.001),
    "pipelining_flood": (pipelining_flood, 0.0004),
    consumer_groups.FAMILY: (consumer_groups.consumer_groups, 0.03),
    share_groups.FAMILY: (share_groups.share_groups, 0.03),
    metrics_http.FAMILY: (metrics_http.placeholder, 0.01),
    admin_mega.FAMILY: (admin_mega.placeholder, 0.0002),  # episodes of seconds each
}
# Run only when named (--family): they need a broker configured for them.
OPT_IN = frozenset({metrics_http.FAMILY})
