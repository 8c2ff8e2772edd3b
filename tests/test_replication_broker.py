"""Replication's request paths on a real single broker process: min.insync.replicas on
produce, OffsetForLeaderEpoch, and the leader side of Fetch (diverging epochs, replica
ids), over raw sockets and with a real client."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from kio.schema.errors import ErrorCode

from compat_tests.broker import BrokerProcess
from compat_tests.process_pool import ProcessPool
from gregor.apis.context import nested
from gregor.wire.schema import request_type
from gregor.wire.versions import FETCH, OFFSET_FOR_LEADER_EPOCH
from tests.kafka_wire import WireClient, create_topic
from tests.test_api_behaviour import fetch, produce, records


@pytest.fixture(scope="module")
def broker(process_pool: ProcessPool) -> BrokerProcess:
    return process_pool.broker()


def log_end(client: WireClient, topic: str) -> int:
    return fetch(client, topic, 0).high_watermark


def test_acks_all_refused_below_min_insync_replicas(client: WireClient) -> None:
    assert create_topic(client, "min-isr", configs={"min.insync.replicas": "2"}).error_code == 0
    refused = produce(client, "min-isr", records(3), acks=-1)
    assert refused.error_code == ErrorCode.not_enough_replicas
    assert refused.base_offset == -1
    assert log_end(client, "min-isr") == 0  # nothing was appended
    accepted = produce(client, "min-isr", records(3), acks=1)
    assert accepted.error_code == 0 and accepted.base_offset == 0
    assert log_end(client, "min-isr") == 3


def test_acks_all_answered_once_replicated(client: WireClient) -> None:
    """One replica, the ISR is this broker: the high watermark covers the append at once."""
    assert create_topic(client, "acks-all").error_code == 0
    first = produce(client, "acks-all", records(2), acks=-1)
    second = produce(client, "acks-all", records(2), acks=-1)
    assert (first.error_code, first.base_offset) == (0, 0)
    assert (second.error_code, second.base_offset) == (0, 2)
    assert log_end(client, "acks-all") == 4


def test_confluent_producer_acks_all_gets_not_enough_replicas(
    broker: BrokerProcess, client: WireClient
) -> None:
    topic = "min-isr-client"
    assert create_topic(client, topic, configs={"min.insync.replicas": "2"}).error_code == 0

    def send(acks: str, n: int) -> list[KafkaError | None]:
        outcomes: list[KafkaError | None] = []
        producer = Producer(
            {
                "bootstrap.servers": broker.bootstrap,
                "acks": acks,
                "retries": 0,
                "enable.idempotence": False,
                "message.timeout.ms": 10_000,
            }
        )
        for i in range(n):
            producer.produce(topic, b"v%d" % i, on_delivery=lambda err, _m: outcomes.append(err))
        assert producer.flush(20) == 0
        return outcomes

    refused = send("all", 5)
    assert [e.code() if e else None for e in refused] == [KafkaError.NOT_ENOUGH_REPLICAS] * 5
    assert log_end(client, topic) == 0
    assert send("1", 5) == [None] * 5
    assert log_end(client, topic) == 5


def offsets_for_epoch(
    client: WireClient,
    topic: str,
    leader_epoch: int,
    current_leader_epoch: int = -1,
    version: int = 4,
    partition: int = 0,
) -> Any:
    cls = request_type(OFFSET_FOR_LEADER_EPOCH, version)
    t = nested(cls, "OffsetForLeaderTopic")
    p = nested(cls, "OffsetForLeaderPartition")
    fields: dict[str, Any] = {}
    if version >= 3:
        fields["replica_id"] = -1
    request = cls(
        topics=(
            t(
                topic=topic,
                partitions=(
                    p(
                        partition=partition,
                        current_leader_epoch=current_leader_epoch,
                        leader_epoch=leader_epoch,
                    ),
                ),
            ),
        ),
        **fields,
    )
    return client.call(OFFSET_FOR_LEADER_EPOCH, version, request).topics[0].partitions[0]


def test_offset_for_leader_epoch(client: WireClient) -> None:
    assert create_topic(client, "epochs").error_code == 0
    empty = offsets_for_epoch(client, "epochs", 0)
    # A new leader's epoch starts at its log end, before any append.
    assert (empty.error_code, empty.leader_epoch, empty.end_offset) == (0, 0, 0)
    assert produce(client, "epochs", records(4), acks=1).error_code == 0
    for version in (2, 3, 4):
        latest = offsets_for_epoch(client, "epochs", 0, version=version)
        assert (latest.error_code, latest.leader_epoch, latest.end_offset) == (0, 0, 4)
    unknown = offsets_for_epoch(client, "epochs", 7)
    assert (unknown.error_code, unknown.leader_epoch, unknown.end_offset) == (0, -1, -1)
    current = offsets_for_epoch(client, "epochs", 0, current_leader_epoch=0)
    assert current.error_code == 0
    ahead = offsets_for_epoch(client, "epochs", 0, current_leader_epoch=3)
    assert ahead.error_code == ErrorCode.unknown_leader_epoch
    missing = offsets_for_epoch(client, "no-such-topic", 0)
    assert missing.error_code == ErrorCode.unknown_topic_or_partition
    missing_partition = offsets_for_epoch(client, "epochs", 0, partition=9)
    assert missing_partition.error_code == ErrorCode.unknown_topic_or_partition


def fetch_v12(
    client: WireClient,
    topic: str,
    offset: int,
    *,
    replica_id: int = -1,
    last_fetched_epoch: int = -1,
    current_leader_epoch: int = -1,
) -> Any:
    cls = request_type(FETCH, 12)
    t = nested(cls, "FetchTopic")
    p = nested(cls, "FetchPartition")
    request = cls(
        replica_id=replica_id,
        max_wait=datetime.timedelta(0),
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(
            t(
                topic=topic,
                partitions=(
                    p(
                        partition=0,
                        fetch_offset=offset,
                        last_fetched_epoch=last_fetched_epoch,
                        current_leader_epoch=current_leader_epoch,
                        partition_max_bytes=1 << 20,
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
    )
    return client.call(FETCH, 12, request).responses[0].partitions[0]


def test_fetch_answers_a_diverging_epoch(client: WireClient) -> None:
    assert create_topic(client, "diverge").error_code == 0
    assert produce(client, "diverge", records(3), acks=1).error_code == 0
    # Epoch 0 ends at 3 here: a fetcher at offset 5 of epoch 0 diverged from this log.
    diverged = fetch_v12(client, "diverge", 5, last_fetched_epoch=0)
    assert diverged.error_code == 0
    assert (diverged.diverging_epoch.epoch, diverged.diverging_epoch.end_offset) == (0, 3)
    assert diverged.records in (b"", None)
    agreeing = fetch_v12(client, "diverge", 3, last_fetched_epoch=0)
    assert agreeing.error_code == 0 and agreeing.diverging_epoch.end_offset == -1
    in_range = fetch_v12(client, "diverge", 1, last_fetched_epoch=0)
    assert in_range.diverging_epoch.end_offset == -1 and in_range.records
    unknown = fetch_v12(client, "diverge", 3, last_fetched_epoch=4)
    assert unknown.error_code == ErrorCode.offset_out_of_range


def test_fetch_leader_epoch_checks_and_replica_ids(client: WireClient) -> None:
    assert create_topic(client, "fenced").error_code == 0
    assert fetch_v12(client, "fenced", 0, current_leader_epoch=0).error_code == 0
    ahead = fetch_v12(client, "fenced", 0, current_leader_epoch=2)
    assert ahead.error_code == ErrorCode.unknown_leader_epoch
    # Broker 7 is no replica of the partition: a follower fetch from it is refused.
    stranger = fetch_v12(client, "fenced", 0, replica_id=7)
    assert stranger.error_code == ErrorCode.not_leader_or_follower


def session_fetch(
    client: WireClient, replica_id: int, session_id: int, epoch: int, topic: str | None
) -> Any:
    cls = request_type(FETCH, 12)
    t = nested(cls, "FetchTopic")
    p = nested(cls, "FetchPartition")
    topics = ()
    if topic is not None:
        part = p(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
        topics = (t(topic=topic, partitions=(part,)),)
    request = cls(
        replica_id=replica_id,
        max_wait=datetime.timedelta(0),
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=session_id,
        session_epoch=epoch,
        topics=topics,
        forgotten_topics_data=(),
        rack_id="",
    )
    return client.call(FETCH, 12, request)


def test_follower_fetch_sessions(client: WireClient) -> None:
    """Consumer sessions: tests/test_topic_ids_and_sessions.py."""
    assert create_topic(client, "sessions").error_code == 0
    assert session_fetch(client, -1, 77, 1, None).error_code == (
        ErrorCode.fetch_session_id_not_found
    )
    # A follower's session (broker 7 is no replica here, so its partition answers an error,
    # named in every answer).
    first = session_fetch(client, 7, 0, 0, "sessions")
    assert first.error_code == 0 and first.session_id != 0
    assert first.responses[0].partitions[0].error_code == ErrorCode.not_leader_or_follower
    again = session_fetch(client, 7, first.session_id, 1, None)
    assert (again.error_code, again.session_id) == (0, first.session_id)
    assert again.responses[0].partitions[0].partition_index == 0
    stale = session_fetch(client, 7, first.session_id, 1, None)
    assert stale.error_code == ErrorCode.invalid_fetch_session_epoch
    other = session_fetch(client, 8, first.session_id, 2, None)
    assert other.error_code == ErrorCode.fetch_session_id_not_found
    assert session_fetch(client, 7, first.session_id, 2, None).error_code == 0
