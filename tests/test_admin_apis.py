"""DeleteRecords, DescribeTopicPartitions, DescribeProducers, AlterReplicaLogDirs and
ListOffsets v9-v10 of a real broker process, over raw sockets."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from compat_tests.broker import BrokerProcess
from gregor.apis.context import nested
from gregor.wire.records import split_batches
from gregor.wire.schema import request_type
from gregor.wire.versions import (
    ALTER_REPLICA_LOG_DIRS,
    DELETE_RECORDS,
    DESCRIBE_LOG_DIRS,
    DESCRIBE_PRODUCERS,
    DESCRIBE_TOPIC_PARTITIONS,
    INIT_PRODUCER_ID,
    LIST_OFFSETS,
)
from tests.kafka_wire import WireClient, create_topic
from tests.test_api_behaviour import TIMEOUT, fetch, produce, records


# A broker of its own (not process_pool's): the tests find its log dirs in its directory.
@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("admin")
    dirs = f"{base / 'd1'},{base / 'd2'}"
    with BrokerProcess(base, {"log.dirs": dirs}) as b:
        yield b


def delete_records(
    client: WireClient, topic: str, offset: int, partition: int = 0, version: int = 2
) -> Any:
    cls = request_type(DELETE_RECORDS, version)
    t = nested(cls, "DeleteRecordsTopic")
    p = nested(cls, "DeleteRecordsPartition")
    request = cls(
        topics=(t(name=topic, partitions=(p(partition_index=partition, offset=offset),)),),
        timeout=TIMEOUT,
    )
    return client.call(DELETE_RECORDS, version, request).topics[0].partitions[0]


def list_offset(client: WireClient, topic: str, timestamp: int, version: int = 10) -> Any:
    cls = request_type(LIST_OFFSETS, version)
    t = nested(cls, "ListOffsetsTopic")
    p = nested(cls, "ListOffsetsPartition")
    fields: dict[str, Any] = {"timeout": TIMEOUT} if version >= 10 else {}
    request = cls(
        replica_id=-1,
        isolation_level=0,
        topics=(t(name=topic, partitions=(p(partition_index=0, timestamp=timestamp),)),),
        **fields,
    )
    return client.call(LIST_OFFSETS, version, request).topics[0].partitions[0]


def test_delete_records_moves_the_log_start(client: WireClient) -> None:
    create_topic(client, "trim")
    for _ in range(4):
        produce(client, "trim", records(5))
    result = delete_records(client, "trim", 7)
    assert (result.error_code, result.low_watermark) == (ErrorCode.none, 7)
    assert list_offset(client, "trim", -2).offset == 7
    assert list_offset(client, "trim", -4).offset == 7
    below = fetch(client, "trim", 6)
    assert below.error_code == ErrorCode.offset_out_of_range
    assert below.log_start_offset == 7
    # At the log start the batch holding it is returned whole (offsets 5-9).
    assert fetch(client, "trim", 7).error_code == ErrorCode.none
    # A lower offset leaves the log start where it is.
    assert delete_records(client, "trim", 3).low_watermark == 7
    # Above the high watermark: OFFSET_OUT_OF_RANGE; -1 means the high watermark.
    assert delete_records(client, "trim", 21).error_code == ErrorCode.offset_out_of_range
    to_hw = delete_records(client, "trim", -1, version=0)
    assert (to_hw.error_code, to_hw.low_watermark) == (ErrorCode.none, 20)
    assert list_offset(client, "trim", -2).offset == 20
    assert list_offset(client, "trim", -1).offset == 20


def test_delete_records_errors(client: WireClient) -> None:
    assert delete_records(client, "no-such", 0).error_code == ErrorCode.unknown_topic_or_partition
    create_topic(client, "trim-errors", configs={"cleanup.policy": "compact"})
    assert delete_records(client, "trim-errors", 0).error_code == ErrorCode.policy_violation
    create_topic(client, "trim-one")
    assert delete_records(client, "trim-one", 0, partition=3).error_code == (
        ErrorCode.unknown_topic_or_partition
    )
    internal = delete_records(client, "__consumer_offsets", 0)
    assert internal.error_code == ErrorCode.invalid_topic_exception


def test_delete_records_survives_a_restart(broker: BrokerProcess) -> None:
    client = WireClient(broker.port)
    create_topic(client, "trim-kept")
    produce(client, "trim-kept", records(10))
    assert delete_records(client, "trim-kept", 4).error_code == ErrorCode.none
    client.close()
    broker.restart()
    client = WireClient(broker.port)
    try:
        assert list_offset(client, "trim-kept", -2).offset == 4
    finally:
        client.close()


def test_list_offsets_v9_latest_tiered_is_none_without_tiered_storage(
    client: WireClient,
) -> None:
    create_topic(client, "tiers")
    produce(client, "tiers", records(3))
    for version in (9, 10):
        tiered = list_offset(client, "tiers", -5, version=version)
        assert (tiered.error_code, tiered.offset, tiered.leader_epoch) == (ErrorCode.none, -1, -1)
        assert list_offset(client, "tiers", -1, version=version).offset == 3
        assert list_offset(client, "tiers", -3, version=version).offset == 2


def describe_partitions(
    client: WireClient, names: list[str], limit: int, cursor: tuple[str, int] | None = None
) -> Any:
    cls = request_type(DESCRIBE_TOPIC_PARTITIONS, 0)
    t = nested(cls, "TopicRequest")
    c = nested(cls, "Cursor")
    request = cls(
        topics=tuple(t(name=n) for n in names),
        response_partition_limit=limit,
        cursor=None if cursor is None else c(topic_name=cursor[0], partition_index=cursor[1]),
    )
    return client.call(DESCRIBE_TOPIC_PARTITIONS, 0, request)


def test_describe_topic_partitions_pages(client: WireClient) -> None:
    create_topic(client, "pages-b", partitions=3)
    create_topic(client, "pages-a", partitions=4)
    names = ["pages-b", "pages-a", "pages-none"]
    seen: list[tuple[str, int]] = []
    cursor = None
    pages = 0
    while True:
        response = describe_partitions(client, names, 3, cursor)
        pages += 1
        for topic in response.topics:
            if topic.name == "pages-none":
                assert topic.error_code == ErrorCode.unknown_topic_or_partition
                continue
            assert topic.error_code == ErrorCode.none and isinstance(topic.topic_id, uuid.UUID)
            for p in topic.partitions:
                assert p.leader_id == 0 and p.replica_nodes == (0,) and p.isr_nodes == (0,)
                seen.append((topic.name, p.partition_index))
        if response.next_cursor is None:
            break
        cursor = (response.next_cursor.topic_name, response.next_cursor.partition_index)
    assert seen == [("pages-a", i) for i in range(4)] + [("pages-b", i) for i in range(3)]
    assert pages == 3  # a-0..2 | a-3, b-0..1 | b-2, none
    # No topics named: every topic, from the cursor on.
    everything = describe_partitions(client, [], 2000, ("pages-b", 1))
    assert [(t.name, len(t.partitions)) for t in everything.topics][0] == ("pages-b", 2)
    # A limit below one is one.
    [first] = describe_partitions(client, ["pages-a"], 0).topics
    assert [p.partition_index for p in first.partitions] == [0]
    # A cursor naming a topic outside the request is an invalid request.
    bad = describe_partitions(client, ["pages-a"], 10, ("pages-b", 0))
    assert [t.error_code for t in bad.topics] == [ErrorCode.invalid_request]


def test_describe_producers(client: WireClient) -> None:
    create_topic(client, "producers")
    init = request_type(INIT_PRODUCER_ID, 4)
    pid = client.call(
        INIT_PRODUCER_ID, 4, init(transactional_id=None, transaction_timeout=TIMEOUT)
    ).producer_id
    produce(client, "producers", records(3, producer_id=pid, producer_epoch=0, base_sequence=0))
    produce(client, "producers", records(1))  # not idempotent: no producer state
    cls = request_type(DESCRIBE_PRODUCERS, 0)
    t = nested(cls, "TopicRequest")
    request = cls(
        topics=(
            t(name="producers", partition_indexes=(0, 1)),
            t(name="no-such", partition_indexes=(0,)),
        )
    )
    response = client.call(DESCRIBE_PRODUCERS, 0, request)
    known, missing = response.topics[0].partitions
    assert known.error_code == ErrorCode.none
    [state] = known.active_producers
    assert (state.producer_id, state.producer_epoch, state.last_sequence) == (pid, 0, 2)
    assert state.last_timestamp == 1_002 and state.current_txn_start_offset == -1
    assert missing.error_code == ErrorCode.unknown_topic_or_partition
    assert response.topics[1].partitions[0].error_code == ErrorCode.unknown_topic_or_partition


def alter_log_dir(client: WireClient, path: str, topic: str, partition: int) -> ErrorCode:
    cls = request_type(ALTER_REPLICA_LOG_DIRS, 2)
    d = nested(cls, "AlterReplicaLogDir")
    t = nested(cls, "AlterReplicaLogDirTopic")
    request = cls(dirs=(d(path=path, topics=(t(name=topic, partitions=(partition,)),)),))
    response = client.call(ALTER_REPLICA_LOG_DIRS, 2, request)
    return response.results[0].partitions[0].error_code


def fetch_all(client: WireClient, topic: str) -> bytes:
    data, offset = b"", 0
    while True:
        part = fetch(client, topic, offset)
        assert part.error_code == ErrorCode.none
        if not part.records:
            return data
        data += part.records
        offset = split_batches(part.records)[-1].next_offset


def test_alter_replica_log_dirs_moves_the_log(broker: BrokerProcess, client: WireClient) -> None:
    create_topic(client, "moving", configs={"segment.bytes": "2000"})
    for _ in range(20):
        produce(client, "moving", records(5, size=50))
    before = fetch_all(client, "moving")
    d1, d2 = (broker.tmp_dir / n for n in ("d1", "d2"))
    home, other = (d1, d2) if (d1 / "moving-0").is_dir() else (d2, d1)
    assert len(list((home / "moving-0").glob("*.log"))) > 3
    assert alter_log_dir(client, str(home), "moving", 0) == ErrorCode.none
    assert alter_log_dir(client, "/nowhere", "moving", 0) == ErrorCode.log_dir_not_found
    assert alter_log_dir(client, str(home), "moving", 7) == ErrorCode.replica_not_available
    assert alter_log_dir(client, str(other), "moving", 0) == ErrorCode.none
    deadline = time.monotonic() + 30
    while (home / "moving-0").exists() or not (other / "moving-0").is_dir():
        assert time.monotonic() < deadline, "the move did not finish in 30 s"
        time.sleep(0.05)
    assert fetch_all(client, "moving") == before
    assert produce(client, "moving", records(1)).base_offset == 100
    [result] = [r for r in describe_log_dirs(client) if any(t.name == "moving" for t in r.topics)]
    assert Path(result.log_dir) == other.absolute()
    client.close()
    broker.restart()
    again = WireClient(broker.port)
    try:
        assert len(fetch_all(again, "moving")) > len(before)
    finally:
        again.close()


def test_a_move_under_appends_loses_nothing(broker: BrokerProcess, client: WireClient) -> None:
    """The active segment keeps growing while the inactive ones are copied: the mover rolls
    it and copies again until the swap is small; every acknowledged record is there."""
    create_topic(client, "busy-move", configs={"segment.bytes": "100000"})
    d1, d2 = (broker.tmp_dir / n for n in ("d1", "d2"))
    home, other = (d1, d2) if (d1 / "busy-move-0").is_dir() else (d2, d1)
    acknowledged = 0
    stop = threading.Event()

    def keep_producing() -> None:
        nonlocal acknowledged
        producer = WireClient(broker.port)
        try:
            while not stop.is_set():
                answer = produce(producer, "busy-move", records(20, size=500))
                assert answer.error_code == ErrorCode.none
                assert answer.base_offset == acknowledged
                acknowledged += 20
        finally:
            producer.close()

    thread = threading.Thread(target=keep_producing)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while acknowledged < 2000:  # about 1 MB: some segments to copy
            assert time.monotonic() < deadline and thread.is_alive()
            time.sleep(0.01)
        assert alter_log_dir(client, str(other), "busy-move", 0) == ErrorCode.none
        while (home / "busy-move-0").exists() or not (other / "busy-move-0").is_dir():
            assert time.monotonic() < deadline, "the move did not finish in 30 s"
            assert thread.is_alive()
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join()
    offsets = [h.base_offset for h in split_batches(fetch_all(client, "busy-move"))]
    assert offsets == list(range(0, acknowledged, 20))


def describe_log_dirs(client: WireClient) -> Any:
    cls = request_type(DESCRIBE_LOG_DIRS, 4)
    return client.call(DESCRIBE_LOG_DIRS, 4, cls(topics=None)).results


def test_versions_are_advertised(client: WireClient) -> None:
    from gregor.wire.versions import API_VERSIONS

    cls = request_type(API_VERSIONS, 3)
    response = client.call(
        API_VERSIONS, 3, cls(client_software_name="t", client_software_version="1")
    )
    served = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert served[DELETE_RECORDS] == (0, 2)
    assert served[DESCRIBE_TOPIC_PARTITIONS] == (0, 0)
    assert served[DESCRIBE_PRODUCERS] == (0, 0)
    assert served[ALTER_REPLICA_LOG_DIRS] == (1, 2)
    assert served[LIST_OFFSETS] == (1, 10)
