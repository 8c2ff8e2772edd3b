"""API semantics of a real broker process: errors, limits and lookups, over raw sockets."""

from __future__ import annotations

import datetime
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from compat_tests.broker import BrokerProcess
from compat_tests.process_pool import ProcessPool
from gregor.apis.context import build, nested
from gregor.wire.records import build_batch, decode_records, split_batches
from gregor.wire.schema import request_type
from gregor.wire.versions import (
    DELETE_TOPICS,
    DESCRIBE_CONFIGS,
    FETCH,
    INIT_PRODUCER_ID,
    LIST_OFFSETS,
    METADATA,
    PRODUCE,
)
from tests.kafka_wire import WireClient, create_topic, request_frame

TIMEOUT = datetime.timedelta(seconds=5)


@pytest.fixture(scope="module")
def broker(process_pool: ProcessPool) -> BrokerProcess:
    return process_pool.broker({"message.max.bytes": "20000"})


def produce(
    client: WireClient, topic: str, records: bytes, partition: int = 0, acks: int = -1
) -> Any:
    cls = request_type(PRODUCE, 11)
    t = nested(cls, "TopicProduceData")
    p = nested(cls, "PartitionProduceData")
    request = cls(
        acks=acks,
        timeout=TIMEOUT,
        topic_data=(t(name=topic, partition_data=(p(index=partition, records=records),)),),
    )
    return client.call(PRODUCE, 11, request).responses[0].partition_responses[0]


def fetch(
    client: WireClient,
    topic: str,
    offset: int,
    *,
    partition: int = 0,
    max_wait_ms: int = 0,
    min_bytes: int = 1,
    partition_max: int = 1 << 20,
    max_bytes: int = 50 << 20,
) -> Any:
    cls = request_type(FETCH, 12)
    t = nested(cls, "FetchTopic")
    p = nested(cls, "FetchPartition")
    request = cls(
        max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(
            t(
                topic=topic,
                partitions=(
                    p(partition=partition, fetch_offset=offset, partition_max_bytes=partition_max),
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
    )
    return client.call(FETCH, 12, request).responses[0].partitions[0]


def list_offset(client: WireClient, topic: str, timestamp: int) -> Any:
    cls = request_type(LIST_OFFSETS, 8)
    t = nested(cls, "ListOffsetsTopic")
    p = nested(cls, "ListOffsetsPartition")
    request = cls(
        replica_id=-1,
        isolation_level=0,
        topics=(t(name=topic, partitions=(p(partition_index=0, timestamp=timestamp),)),),
    )
    return client.call(LIST_OFFSETS, 8, request).topics[0].partitions[0]


def records(n: int, start_ts: int = 1_000, size: int = 10, **kw: Any) -> bytes:
    return build_batch(
        [(b"k%d" % i, b"v" * size, [("h", b"1")], start_ts + i) for i in range(n)], **kw
    )


def test_produce_then_fetch_returns_the_same_batch(client: WireClient) -> None:
    create_topic(client, "roundtrip")
    batch = records(5)
    assert produce(client, "roundtrip", batch).error_code == ErrorCode.none
    data = fetch(client, "roundtrip", 0)
    assert data.error_code == ErrorCode.none and data.high_watermark == 5
    [header] = split_batches(data.records)
    stored = bytes(data.records)
    # Byte-identical except the fields the broker owns (base offset, leader epoch).
    assert stored[16:] == batch[16:] and stored[:8] == (0).to_bytes(8, "big")
    assert [r.key for r in decode_records(stored, header)] == [b"k%d" % i for i in range(5)]


def test_fetch_starts_at_the_batch_containing_the_offset(client: WireClient) -> None:
    create_topic(client, "whole-batches")
    for _ in range(3):
        produce(client, "whole-batches", records(4))
    data = fetch(client, "whole-batches", 6)
    headers = split_batches(data.records)
    assert [h.base_offset for h in headers] == [4, 8]


def test_fetch_limits_and_min_one_batch(client: WireClient) -> None:
    create_topic(client, "limits")
    for _ in range(4):
        produce(client, "limits", records(10, size=100))
    one = len(records(10, size=100))
    assert len(split_batches(fetch(client, "limits", 0, partition_max=2 * one + 10).records)) == 2
    # A limit smaller than one batch still returns that first whole batch.
    assert len(split_batches(fetch(client, "limits", 0, partition_max=10).records)) == 1


def test_fetch_out_of_range(client: WireClient) -> None:
    create_topic(client, "oor")
    produce(client, "oor", records(2))
    data = fetch(client, "oor", 99)
    assert data.error_code == ErrorCode.offset_out_of_range
    assert data.log_start_offset == 0 and data.high_watermark == 2


def test_fetch_long_poll_wakes_on_produce(broker: BrokerProcess, client: WireClient) -> None:
    create_topic(client, "longpoll")
    cls = request_type(FETCH, 12)
    t, p = nested(cls, "FetchTopic"), nested(cls, "FetchPartition")
    request = cls(
        max_wait=datetime.timedelta(seconds=20),
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(
            t(
                topic="longpoll",
                partitions=(p(partition=0, fetch_offset=0, partition_max_bytes=1 << 20),),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
    )
    from tests.kafka_wire import request_frame

    started = time.monotonic()
    client.send(request_frame(FETCH, 12, 900, request))
    other = WireClient(broker.port)
    produce(other, "longpoll", records(3))
    other.close()
    data = client.read_response(FETCH, 12, 900).responses[0].partitions[0]
    assert time.monotonic() - started < 10  # woken by the append, not by the 20 s deadline
    assert split_batches(data.records)[0].record_count == 3


def test_fetch_long_poll_times_out_empty(client: WireClient) -> None:
    create_topic(client, "idle")
    started = time.monotonic()
    data = fetch(client, "idle", 0, max_wait_ms=300)
    assert time.monotonic() - started >= 0.29
    assert data.error_code == ErrorCode.none and len(data.records) == 0


def test_produce_errors(client: WireClient) -> None:
    create_topic(client, "errs")
    assert produce(client, "no-such-topic-x", records(1)).error_code in (
        ErrorCode.unknown_topic_or_partition,
    )
    assert produce(client, "errs", records(1), partition=7).error_code == (
        ErrorCode.unknown_topic_or_partition
    )
    assert produce(client, "errs", records(1), acks=2).error_code == ErrorCode.invalid_required_acks
    assert produce(client, "errs", records(3, size=10_000)).error_code == (
        ErrorCode.message_too_large
    )
    corrupt = bytearray(records(2))
    corrupt[-1] ^= 0xFF
    assert produce(client, "errs", bytes(corrupt)).error_code == ErrorCode.corrupt_message
    # Nothing of the failed requests reached the log.
    assert list_offset(client, "errs", -1).offset == 0


def test_log_append_time_topic(client: WireClient) -> None:
    create_topic(client, "lat", configs={"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    response = produce(client, "lat", records(2, start_ts=5))
    assert response.log_append_time is not None
    assert response.log_append_time.timestamp() * 1000 >= before - 1
    [header] = split_batches(fetch(client, "lat", 0).records)
    assert header.timestamp_type == 1 and header.max_timestamp >= before - 1


def test_list_offsets_lookups(client: WireClient) -> None:
    create_topic(client, "times")
    produce(client, "times", records(5, start_ts=1_000))
    produce(client, "times", records(5, start_ts=2_000))
    assert list_offset(client, "times", -2).offset == 0
    assert list_offset(client, "times", -1).offset == 10
    by_time = list_offset(client, "times", 2_002)
    assert (by_time.offset, by_time.timestamp) == (7, 2_002)
    assert list_offset(client, "times", 1_003).offset == 3
    assert list_offset(client, "times", 9_999).offset == -1
    latest_ts = list_offset(client, "times", -3)
    assert (latest_ts.offset, latest_ts.timestamp) == (9, 2_004)


def test_idempotent_producer_duplicates_and_gaps(client: WireClient) -> None:
    create_topic(client, "idem")
    init = request_type(INIT_PRODUCER_ID, 4)
    pid = client.call(
        INIT_PRODUCER_ID, 4, init(transactional_id=None, transaction_timeout=TIMEOUT)
    ).producer_id
    assert pid >= 0
    first = records(3, producer_id=pid, producer_epoch=0, base_sequence=0)
    assert produce(client, "idem", first).base_offset == 0
    # A retry of the same batch is acknowledged with its original offset, not stored again.
    again = produce(client, "idem", first)
    assert again.error_code == ErrorCode.none and again.base_offset == 0
    gap = records(1, producer_id=pid, producer_epoch=0, base_sequence=9)
    assert produce(client, "idem", gap).error_code == ErrorCode.out_of_order_sequence_number
    nxt = records(2, producer_id=pid, producer_epoch=0, base_sequence=3)
    assert produce(client, "idem", nxt).base_offset == 3
    assert list_offset(client, "idem", -1).offset == 5


def test_create_topic_errors(client: WireClient) -> None:
    create_topic(client, "dupe")
    assert create_topic(client, "dupe").error_code == ErrorCode.topic_already_exists
    assert create_topic(client, "bad/name").error_code == ErrorCode.invalid_topic_exception
    assert create_topic(client, "x" * 250).error_code == ErrorCode.invalid_topic_exception
    assert create_topic(client, "zero", partitions=0).error_code == ErrorCode.invalid_partitions
    assert (
        create_topic(client, "rf", replication_factor=3).error_code
        == ErrorCode.invalid_replication_factor
    )
    bad = create_topic(client, "badcfg", configs={"retention.ms": "soon"})
    assert bad.error_code == ErrorCode.invalid_config and "retention.ms" in bad.error_message
    assert create_topic(client, "unknowncfg", configs={"no.such": "1"}).error_code == (
        ErrorCode.invalid_config
    )
    checked = create_topic(client, "dry", partitions=4, validate_only=True)
    assert checked.error_code == ErrorCode.none and checked.num_partitions == 4
    assert create_topic(client, "dry").error_code == ErrorCode.none  # validate_only created nothing


def test_delete_topic(client: WireClient) -> None:
    create_topic(client, "doomed")
    produce(client, "doomed", records(1))
    cls = request_type(DELETE_TOPICS, 6)
    state = nested(cls, "DeleteTopicState")
    result = client.call(
        DELETE_TOPICS,
        6,
        cls(
            timeout=TIMEOUT,
            topics=(state(name="doomed", topic_id=None), state(name="never-was", topic_id=None)),
        ),
    ).responses
    assert [r.error_code for r in result] == [ErrorCode.none, ErrorCode.unknown_topic_or_partition]
    assert produce(client, "doomed", records(1)).error_code == ErrorCode.unknown_topic_or_partition


def test_describe_configs_sources(client: WireClient) -> None:
    create_topic(client, "cfg", configs={"retention.ms": "1234"})
    cls = request_type(DESCRIBE_CONFIGS, 4)
    resource = nested(cls, "DescribeConfigsResource")
    response = client.call(
        DESCRIBE_CONFIGS,
        4,
        cls(
            include_synonyms=True,
            include_documentation=False,
            resources=(
                resource(resource_type=2, resource_name="cfg", configuration_keys=None),
                resource(
                    resource_type=4,
                    resource_name="0",
                    configuration_keys=("message.max.bytes", "num.io.threads"),
                ),
            ),
        ),
    )
    topic, broker = response.results
    entries = {c.name: c for c in topic.configs}
    assert (entries["retention.ms"].value, entries["retention.ms"].config_source) == ("1234", 1)
    assert (entries["max.message.bytes"].value, entries["max.message.bytes"].config_source) == (
        "20000",
        4,
    )  # from the broker's message.max.bytes
    assert entries["segment.bytes"].config_source == 5
    assert {c.name: (c.value, c.config_source) for c in broker.configs} == {
        "message.max.bytes": ("20000", 4),
        "num.io.threads": ("8", 5),
    }


def test_broker_fetch_max_bytes_caps_the_response(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path, {"fetch.max.bytes": "3000"}) as b:
        c = WireClient(b.port)
        create_topic(c, "capped")
        for _ in range(5):
            produce(c, "capped", records(10, size=100))
        one = len(records(10, size=100))
        data = fetch(c, "capped", 0, max_bytes=1 << 20)
        assert len(split_batches(data.records)) == 3000 // one
        c.close()


def test_metadata_topic_by_id_only_from_v12(broker: BrokerProcess) -> None:
    """v10-11 responses cannot carry a null topic name, so a request naming a topic by id
    alone is refused (connection closed, one log line); v12 answers UNKNOWN_TOPIC_ID."""
    cls = request_type(METADATA, 12)
    unknown = uuid.uuid4()
    request = build(
        cls,
        topics=(nested(cls, "MetadataRequestTopic")(topic_id=unknown, name=None),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
        include_cluster_authorized_operations=False,
    )
    client = WireClient(broker.port)
    (topic,) = client.call(METADATA, 12, request).topics
    assert (topic.error_code, topic.name, topic.topic_id) == (
        ErrorCode.unknown_topic_id,
        None,
        unknown,
    )
    for version in (10, 11):
        old = request_type(METADATA, version)
        client.send(
            request_frame(
                METADATA,
                version,
                1,
                build(
                    old,
                    topics=(nested(old, "MetadataRequestTopic")(topic_id=unknown, name=None),),
                    allow_auto_topic_creation=False,
                    include_topic_authorized_operations=False,
                    include_cluster_authorized_operations=False,
                ),
            )
        )
        assert client.is_closed_by_peer()
        client.close()
        client = WireClient(broker.port)
    assert client.call(METADATA, 12, request).topics[0].error_code == ErrorCode.unknown_topic_id
    # An empty name and an id (what Java's forTopicIds sends) is a name before v12.
    for version in (10, 11):
        old = request_type(METADATA, version)
        empty = build(
            old,
            topics=(nested(old, "MetadataRequestTopic")(topic_id=unknown, name=""),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
            include_cluster_authorized_operations=False,
        )
        (topic,) = client.call(METADATA, version, empty).topics
        assert (topic.error_code, topic.name) == (ErrorCode.invalid_topic_exception, "")
    client.close()
    assert "Traceback" not in broker.log_path.read_text(errors="replace")
