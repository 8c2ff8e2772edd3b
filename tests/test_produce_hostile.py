"""Hostile produce requests against a real broker process (issue #10 items 1, 2, 3, 6, 11):
each is refused with Kafka's error code, stores nothing, and leaves the broker serving."""

from __future__ import annotations

import random
import select
import struct
from pathlib import Path
from typing import Any

import pytest
from crc32c import crc32c
from kio.schema.errors import ErrorCode

from compat_tests.broker import BrokerProcess
from compat_tests.process_pool import ProcessPool
from gregor.apis.context import build, nested
from gregor.wire import versions as v
from gregor.wire.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD
from gregor.wire.records import BATCH_HEADER_SIZE, build_batch, decode_records, split_batches
from gregor.wire.schema import request_type
from tests.kafka_wire import WireClient, create_topic, request_frame
from tests.test_api_behaviour import TIMEOUT, fetch, list_offset

NOW_MS = 1_700_000_000_000


@pytest.fixture(scope="module")
def broker(process_pool: ProcessPool) -> BrokerProcess:
    return process_pool.broker()


def batch(n: int = 3, codec: int = NONE, *, tag: bytes = b"v", **kw: Any) -> bytes:
    return build_batch(
        [(b"k%d" % i, tag + b"%d" % i, [], NOW_MS + i) for i in range(n)], compression=codec, **kw
    )


def patched(data: bytes, *fields: tuple[str, int, int]) -> bytes:
    """Header fields rewritten (format, position, value) with a correct CRC: a lie that
    passes the checksum, as a hostile client sends it."""
    out = bytearray(data)
    for fmt, at, value in fields:
        struct.pack_into(fmt, out, at, value)
    struct.pack_into(">I", out, 17, crc32c(memoryview(out)[21:]))
    return bytes(out)


def with_records(data: bytes, records: bytes) -> bytes:
    """The batch's header over other record bytes (length and CRC fixed)."""
    body = data[:BATCH_HEADER_SIZE] + records
    return patched(body, (">i", 8, len(body) - 12))


def produce_request(
    version: int,
    parts: dict[str, list[tuple[int, bytes | None]]],
    acks: int = -1,
    transactional_id: str | None = None,
) -> Any:
    cls = request_type(v.PRODUCE, version)
    t, p = nested(cls, "TopicProduceData"), nested(cls, "PartitionProduceData")
    return build(
        cls,
        transactional_id=transactional_id,
        acks=acks,
        timeout=TIMEOUT,
        topic_data=tuple(
            t(name=name, partition_data=tuple(p(index=i, records=r) for i, r in rs))
            for name, rs in parts.items()
        ),
    )


def produce(
    client: WireClient,
    topic: str,
    records: bytes | None,
    version: int = 11,
    transactional_id: str | None = None,
) -> Any:
    request = produce_request(version, {topic: [(0, records)]}, transactional_id=transactional_id)
    return client.call(v.PRODUCE, version, request).responses[0].partition_responses[0]


def stored(client: WireClient, topic: str) -> list[bytes | None]:
    """Every value a consumer reads from partition 0, in offset order (offsets checked dense)."""
    values: list[bytes | None] = []
    offset = 0
    end = list_offset(client, topic, -1).offset
    while offset < end:
        data = fetch(client, topic, offset).records
        for header in split_batches(data):
            for record in decode_records(data, header):
                assert record.offset == offset
                values.append(record.value)
                offset += 1
    return values


def assert_refused(client: WireClient, topic: str, records: bytes | None, code: ErrorCode) -> None:
    before = stored(client, topic)
    response = produce(client, topic, records)
    assert response.error_code == code, response
    assert response.base_offset == -1
    assert stored(client, topic) == before


def shuffled_records(data: bytes) -> bytes:
    """The records section of `data`, its second record's offset delta set to 0."""
    section = bytearray(data[BATCH_HEADER_SIZE:])
    second = 1 + section[0] // 2  # a 1-byte length varint, then the first record's body
    assert section[second + 3] == 2  # zigzag(1)
    section[second + 3] = 0
    return bytes(section)


def test_records_are_validated_one_by_one(client: WireClient) -> None:
    create_topic(client, "walk")
    assert produce(client, "walk", batch(2, tag=b"good")).error_code == ErrorCode.none
    good = batch(3)
    cases = {
        "zero offset deltas": with_records(good, shuffled_records(good)),
        "record length past the batch": with_records(good, b"\xfe\x0f" + good[63:]),
        "random bytes as records": with_records(good, random.Random(1).randbytes(60)),
        "bytes after the last record": with_records(good, good[BATCH_HEADER_SIZE:] + b"\x00"),
        "producer id with sequence -1": batch(producer_id=7, producer_epoch=0),
        "control batch": batch(is_control=True),
    }
    for name, records in cases.items():
        response = produce(client, "walk", records)
        assert response.error_code == ErrorCode.invalid_record, name
        assert response.error_message, name
    # The transactional bit from a producer no coordinator knows: Kafka 3.6+'s verification
    # cannot reach a coordinator for the id (no __transaction_state yet) and answers the
    # retriable NOT_ENOUGH_REPLICAS; a request without a transactional id gets
    # TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
    txn = batch(producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True)
    response = produce(client, "walk", txn, transactional_id="never-begun")
    assert response.error_code == ErrorCode.not_enough_replicas
    response = produce(client, "walk", txn)
    assert response.error_code == ErrorCode.transactional_id_authorization_failed
    assert stored(client, "walk") == [b"good0", b"good1"]


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_compressed_batches_are_decompressed_and_walked(client: WireClient, codec: int) -> None:
    topic = f"codec-{codec}"
    create_topic(client, topic)
    good = batch(3, codec)
    lying_count = patched(good, (">i", 23, 2**31 - 2), (">i", 57, 2**31 - 1))
    assert_refused(client, topic, lying_count, ErrorCode.invalid_record)
    garbage = with_records(good, random.Random(codec).randbytes(200))
    assert_refused(client, topic, garbage, ErrorCode.corrupt_message)
    truncated = with_records(good, good[BATCH_HEADER_SIZE:-4])
    assert_refused(client, topic, truncated, ErrorCode.corrupt_message)
    assert produce(client, topic, good).error_code == ErrorCode.none
    assert stored(client, topic) == [b"v0", b"v1", b"v2"]


def test_a_compression_bomb_is_refused(client: WireClient) -> None:
    create_topic(client, "bomb", configs={"compression.type": "gzip"})
    bomb = build_batch([(b"k", bytes(100 << 20), [], NOW_MS)], compression=ZSTD)
    assert len(bomb) < 20_000
    assert_refused(client, "bomb", bomb, ErrorCode.corrupt_message)
    # One request's partitions share the budget: five 20 MiB batches are one bomb too.
    create_topic(client, "bomb5", partitions=5)
    piece = build_batch([(b"k", bytes(20 << 20), [], NOW_MS)], compression=ZSTD)
    request = produce_request(11, {"bomb5": [(i, piece) for i in range(5)]})
    partitions = client.call(v.PRODUCE, 11, request).responses[0].partition_responses
    assert [p.error_code for p in partitions].count(ErrorCode.corrupt_message) >= 2
    assert stored(client, "bomb") == []


def test_one_batch_per_partition_and_request_rules(client: WireClient) -> None:
    create_topic(client, "rules", partitions=2)
    assert_refused(client, "rules", b"", ErrorCode.invalid_record)
    assert_refused(client, "rules", None, ErrorCode.invalid_record)
    assert_refused(client, "rules", batch() + batch(), ErrorCode.invalid_record)
    magic1 = bytearray(batch())
    magic1[16] = 1
    assert_refused(client, "rules", bytes(magic1), ErrorCode.invalid_record)
    response = produce(client, "rules", batch(2, ZSTD), version=6)
    assert response.error_code == ErrorCode.unsupported_compression_type
    # A bad partition does not fail the other partitions of the request.
    request = produce_request(11, {"rules": [(0, batch() + batch()), (1, batch(2))]})
    bad, good = client.call(v.PRODUCE, 11, request).responses[0].partition_responses
    assert bad.error_code == ErrorCode.invalid_record
    assert (good.error_code, good.base_offset) == (ErrorCode.none, 0)
    assert stored(client, "rules") == []


def test_a_retried_batch_beside_a_new_one_is_refused(client: WireClient) -> None:
    create_topic(client, "retry")
    init = request_type(v.INIT_PRODUCER_ID, 4)
    pid = client.call(
        v.INIT_PRODUCER_ID, 4, init(transactional_id=None, transaction_timeout=TIMEOUT)
    ).producer_id
    first = batch(2, producer_id=pid, producer_epoch=0, base_sequence=0, tag=b"a")
    new = batch(2, producer_id=pid, producer_epoch=0, base_sequence=2, tag=b"b")
    assert produce(client, "retry", first).base_offset == 0
    assert_refused(client, "retry", first + new, ErrorCode.invalid_record)
    assert_refused(client, "retry", new + first, ErrorCode.invalid_record)
    assert produce(client, "retry", new).base_offset == 2
    assert stored(client, "retry") == [b"a0", b"a1", b"b0", b"b1"]


def test_keys_and_timestamps_report_the_record(client: WireClient) -> None:
    create_topic(client, "compacted", configs={"cleanup.policy": "compact"})
    records = [(b"k", b"v", [], NOW_MS), (None, b"v", [], NOW_MS)]
    response = produce(client, "compacted", build_batch(records, compression=LZ4))
    assert response.error_code == ErrorCode.invalid_record
    assert [e.batch_index for e in response.record_errors] == [1]
    create_topic(client, "recent", configs={"message.timestamp.before.max.ms": "3600000"})
    response = produce(client, "recent", build_batch([(b"k", b"v", [], 5)]))
    assert response.error_code == ErrorCode.invalid_timestamp
    assert [e.batch_index for e in response.record_errors] == [0]
    assert stored(client, "compacted") == stored(client, "recent") == []


def test_clients_cannot_append_to_internal_topics(client: WireClient) -> None:
    find = request_type(v.FIND_COORDINATOR, 0)
    assert client.call(v.FIND_COORDINATOR, 0, find(key="g")).error_code == ErrorCode.none
    response = produce(client, "__consumer_offsets", batch())
    assert response.error_code == ErrorCode.invalid_topic_exception
    assert list_offset(client, "__consumer_offsets", -1).offset == 0


def test_other_clients_are_served_while_a_heavy_batch_is_validated(
    broker: BrokerProcess, client: WireClient
) -> None:
    """About 60 MiB to decompress, walk and recompress to gzip: the validation runs in a
    thread, so a second connection's requests are all answered before the heavy one."""
    create_topic(client, "heavy", configs={"compression.type": "gzip"})
    block = random.Random(3).randbytes(1024)
    heavy = build_batch([(None, block, [], NOW_MS)] * 60_000, compression=ZSTD)
    client.send(request_frame(v.PRODUCE, 11, 1, produce_request(11, {"heavy": [(0, heavy)]})))
    other = WireClient(broker.port)
    metadata = build(
        request_type(v.METADATA, 12),
        topics=None,
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
    for _ in range(5):
        other.call(v.METADATA, 12, metadata)
        assert select.select([client.sock], [], [], 0)[0] == [], "heavy request answered first"
    other.close()
    response = client.read_response(v.PRODUCE, 11, 1).responses[0].partition_responses[0]
    assert (response.error_code, response.base_offset) == (ErrorCode.none, 0)
    [header] = split_batches(fetch(client, "heavy", 0).records)
    assert header.compression == GZIP and header.record_count == 60_000


def test_refused_overflowing_batches_then_kill_9_lose_nothing(tmp_path: Path) -> None:
    """Issue #10 case 2: three zstd batches claiming 2^31-1 records each in one request,
    then acknowledged produces, kill -9 and restart: every acknowledged record is there."""
    with BrokerProcess(tmp_path) as b:
        c = WireClient(b.port)
        create_topic(c, "acked")
        claim = patched(batch(3, ZSTD), (">i", 23, 2**31 - 2), (">i", 57, 2**31 - 1))
        assert produce(c, "acked", claim * 3).error_code == ErrorCode.invalid_record
        assert produce(c, "acked", claim).error_code == ErrorCode.invalid_record
        acked = []
        for i in range(20):
            response = produce(c, "acked", batch(5, ZSTD, tag=b"%d-" % i))
            assert (response.error_code, response.base_offset) == (ErrorCode.none, 5 * i)
            acked += [b"%d-%d" % (i, j) for j in range(5)]
        c.close()
        b.kill()
        b.start()
        c = WireClient(b.port)
        assert stored(c, "acked") == acked
        assert list_offset(c, "acked", -1).offset == 100
        c.close()


def test_acks_0_compressed_batches_validated_in_a_thread(broker: BrokerProcess) -> None:
    """acks=0 gets no answer: a good batch is stored and the connection stays usable, a bad one
    closes the connection (the only way to tell the client), as for uncompressed batches."""
    c = WireClient(broker.port)
    create_topic(c, "acks0")
    good = produce_request(11, {"acks0": [(0, batch(3, LZ4, tag=b"z"))]}, acks=0)
    c.send(request_frame(v.PRODUCE, 11, 1, good))
    assert stored(c, "acks0") == [b"z0", b"z1", b"z2"]
    bad = with_records(batch(3, LZ4), random.Random(5).randbytes(100))
    c.send(request_frame(v.PRODUCE, 11, 2, produce_request(11, {"acks0": [(0, bad)]}, acks=0)))
    with pytest.raises(ConnectionError):
        c.read_frame()
    c.close()


def _peak_rss_mib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) // 1024
    raise AssertionError("no VmHWM")


def test_refused_bombs_free_their_memory_at_once(tmp_path: Path) -> None:
    """Forty 1 GiB zstd bombs, eight connections at a time, each refused after decompressing
    up to the 64 MiB budget: what a refused bomb decompressed must go with its answer (it
    was once kept alive by the refusal's traceback until the garbage collector ran, 64 MiB
    each), so the broker's peak stays near two budgets, one per validation worker."""
    zeros = build_batch([(b"k", bytes(100 << 20), [], NOW_MS)], compression=ZSTD)
    with BrokerProcess(tmp_path) as b:
        c = WireClient(b.port)
        create_topic(c, "bombs")
        frame = request_frame(v.PRODUCE, 11, 1, produce_request(11, {"bombs": [(0, zeros)]}))
        for _ in range(5):
            clients = [WireClient(b.port) for _ in range(8)]
            for other in clients:
                other.send(frame)
            for other in clients:
                answer = other.read_response(v.PRODUCE, 11, 1).responses[0]
                assert answer.partition_responses[0].error_code == ErrorCode.corrupt_message
                other.close()
        assert stored(c, "bombs") == []
        c.close()
        assert _peak_rss_mib(b.pid) < 400
