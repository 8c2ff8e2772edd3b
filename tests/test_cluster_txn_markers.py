"""WriteTxnMarkers (API 27) over the wire in a 3-broker cluster on a real ZooKeeper, sent
as another broker's transaction coordinator sends it: the leader appends a control batch
answered once the ISR has it, followers refuse, epochs fence; read_committed Fetch and
ListOffsets see the markers. An embedded node closes the connection on it."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.write_txn_markers.v1.request import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
)

from compat_tests.broker import BrokerProcess
from compat_tests.process_pool import ProcessPool
from gregor.apis.context import build, nested
from gregor.server.harness.cluster import Cluster
from gregor.wire.records import split_batches
from gregor.wire.schema import request_type
from gregor.wire.versions import FETCH, LIST_OFFSETS, WRITE_TXN_MARKERS
from tests.kafka_wire import WireClient
from tests.test_cluster import create, new_topic, produce

PID = 777_000


@pytest.fixture(scope="module")
def cluster(process_pool: ProcessPool) -> Cluster:
    return process_pool.cluster()


def call(port: int, api_key: int, version: int, request: Any) -> Any:
    client = WireClient(port)
    try:
        return client.call(api_key, version, request)
    finally:
        client.close()


def marker(
    topic: str, *, commit: bool, producer_epoch: int = 0, coordinator_epoch: int = 0
) -> WriteTxnMarkersRequest:
    return WriteTxnMarkersRequest(
        markers=(
            WritableTxnMarker(
                producer_id=PID,
                producer_epoch=producer_epoch,
                transaction_result=commit,
                topics=(WritableTxnMarkerTopic(name=topic, partition_indexes=(0, 7)),),
                coordinator_epoch=coordinator_epoch,
            ),
        )
    )


def errors(response: Any) -> list[ErrorCode]:
    return [p.error_code for m in response.markers for t in m.topics for p in t.partitions]


def fetch_committed(port: int, topic: str, offset: int) -> Any:
    cls = request_type(FETCH, 12)
    t, p = nested(cls, "FetchTopic"), nested(cls, "FetchPartition")
    request = build(
        cls,
        replica_id=-1,
        max_wait=datetime.timedelta(0),
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=1,
        session_id=0,
        session_epoch=-1,
        topics=(
            t(
                topic=topic,
                partitions=(p(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20),),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
    )
    return call(port, FETCH, 12, request).responses[0].partitions[0]


def latest_committed(port: int, topic: str) -> int:
    cls = request_type(LIST_OFFSETS, 7)
    t, p = nested(cls, "ListOffsetsTopic"), nested(cls, "ListOffsetsPartition")
    request = cls(
        replica_id=-1,
        isolation_level=1,
        topics=(t(name=topic, partitions=(p(partition_index=0, timestamp=-1),)),),
    )
    return int(call(port, LIST_OFFSETS, 7, request).topics[0].partitions[0].offset)


def test_markers_from_another_brokers_coordinator(cluster: Cluster) -> None:
    topic = new_topic("txn")
    create(cluster.bootstrap, topic, 1, 3)
    state = cluster.wait_for_leader(topic, 0)
    assert len(state.isr) == 3
    leader = cluster.brokers[state.leader].port
    follower = cluster.brokers[next(b for b in state.replicas if b != state.leader)].port
    assert all(not r.error() for r in produce(cluster.bootstrap, topic, [b"a", b"b"]))

    # Partition 7 does not exist; the follower does not lead partition 0.
    answer = call(leader, WRITE_TXN_MARKERS, 1, marker(topic, commit=False, coordinator_epoch=5))
    assert errors(answer) == [ErrorCode.none, ErrorCode.unknown_topic_or_partition]
    answer = call(follower, WRITE_TXN_MARKERS, 1, marker(topic, commit=True))
    assert errors(answer)[0] == ErrorCode.not_leader_or_follower
    # Fenced: an older coordinator epoch, then an older producer epoch.
    answer = call(leader, WRITE_TXN_MARKERS, 1, marker(topic, commit=True, coordinator_epoch=4))
    assert errors(answer)[0] == ErrorCode.transaction_coordinator_fenced
    newer = marker(topic, commit=True, producer_epoch=3, coordinator_epoch=5)
    assert errors(call(leader, WRITE_TXN_MARKERS, 1, newer))[0] == ErrorCode.none
    older = marker(topic, commit=True, producer_epoch=2, coordinator_epoch=5)
    assert errors(call(leader, WRITE_TXN_MARKERS, 1, older))[0] == ErrorCode.invalid_producer_epoch

    # Answered once the ISR has them: the high watermark covers both markers. They ended no
    # open transaction, so nothing is unstable and nothing aborted.
    part = fetch_committed(leader, topic, 0)
    assert part.error_code == ErrorCode.none
    assert part.high_watermark == part.last_stable_offset == 4
    assert part.aborted_transactions == ()
    batches = split_batches(bytes(part.records))
    assert [(h.is_control, h.producer_id) for h in batches[-2:]] == [(True, PID), (True, PID)]
    assert latest_committed(leader, topic) == 4
    # Every replica holds the same bytes, markers included.
    cluster.wait_until(
        lambda _views: (
            len({b"".join(f.values()) for f in cluster.segment_bytes(topic, 0).values()}) == 1
            or None
        ),
        "every replica holds the leader's bytes",
        30,
    )


def test_an_embedded_node_closes_the_connection(tmp_path: Any) -> None:
    broker = BrokerProcess(tmp_path / "embedded")
    broker.start()
    try:
        client = WireClient(broker.port)
        try:
            with pytest.raises(ConnectionError):
                client.call(WRITE_TXN_MARKERS, 1, marker("t", commit=True))
        finally:
            client.close()
    finally:
        broker.stop()
