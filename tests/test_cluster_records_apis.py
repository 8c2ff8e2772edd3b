"""Record APIs in a 3-broker cluster on a real ZooKeeper. DeleteRecords: the leader moves
its log start, answers once every in-sync follower has moved its own (they learn it from
fetch answers), and a new leader after a failover keeps it. KIP-951: Produce and Fetch
sent to a broker that does not lead the partition name the leader and its endpoint."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from compat_tests.process_pool import ProcessPool
from gregor.apis.context import nested
from gregor.server.harness.cluster import Cluster
from gregor.wire.schema import request_type
from gregor.wire.versions import LIST_OFFSETS, PRODUCE
from tests.kafka_wire import WireClient
from tests.test_admin_apis import delete_records
from tests.test_api_behaviour import TIMEOUT, records
from tests.test_cluster import create, new_topic, produce
from tests.test_topic_ids_and_sessions import fetch, topic_id

FAILOVER_TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def cluster(process_pool: ProcessPool) -> Cluster:
    return process_pool.cluster()


def earliest(port: int, topic: str) -> Any:
    cls = request_type(LIST_OFFSETS, 10)
    t, p = nested(cls, "ListOffsetsTopic"), nested(cls, "ListOffsetsPartition")
    request = cls(
        replica_id=-1,
        isolation_level=0,
        topics=(t(name=topic, partitions=(p(partition_index=0, timestamp=-2),)),),
        timeout=datetime.timedelta(seconds=5),
    )
    client = WireClient(port)
    try:
        return client.call(LIST_OFFSETS, 10, request).topics[0].partitions[0]
    finally:
        client.close()


def test_delete_records_reaches_every_replica(cluster: Cluster) -> None:
    topic = new_topic("trim")
    create(cluster.bootstrap, topic, 1, 3)
    produce(cluster.bootstrap, topic, [b"v%d" % i for i in range(10)])
    state = cluster.wait_for_topic(topic, 1, isr=3)[0]
    leader = state.leader
    follower = next(b for b in state.replicas if b != leader)

    on_follower = WireClient(cluster.brokers[follower].port)
    try:
        refused = delete_records(on_follower, topic, 6)
    finally:
        on_follower.close()
    assert refused.error_code == ErrorCode.not_leader_or_follower

    on_leader = WireClient(cluster.brokers[leader].port)
    try:
        # The low watermark is the smallest log start of the in-sync replicas: answered
        # once both followers moved theirs (within the request's 5 s timeout).
        deleted = delete_records(on_leader, topic, 6)
    finally:
        on_leader.close()
    assert (deleted.error_code, deleted.low_watermark) == (ErrorCode.none, 6)

    cluster.kill(leader)
    new_leader = cluster.wait_for_leader(topic, 0, not_in=[leader], timeout=FAILOVER_TIMEOUT_S)
    start = earliest(cluster.brokers[new_leader.leader].port, topic)
    assert (start.error_code, start.offset) == (ErrorCode.none, 6)


def test_a_broker_not_leading_names_the_leader(cluster: Cluster) -> None:
    topic = new_topic("hints")
    create(cluster.bootstrap, topic, 1, 2)
    state = cluster.wait_for_topic(topic, 1, isr=2)[0]
    other = next(b for b in cluster.running() if b != state.leader)
    leader_port = cluster.brokers[state.leader].port
    client = WireClient(cluster.brokers[other].port)
    try:
        cls = request_type(PRODUCE, 11)
        t, p = nested(cls, "TopicProduceData"), nested(cls, "PartitionProduceData")
        request = cls(
            transactional_id=None,
            acks=-1,
            timeout=TIMEOUT,
            topic_data=(t(name=topic, partition_data=(p(index=0, records=records(1)),)),),
        )
        produced = client.call(PRODUCE, 11, request)
        answer = produced.responses[0].partition_responses[0]
        assert answer.error_code == ErrorCode.not_leader_or_follower
        assert (answer.current_leader.leader_id, answer.current_leader.leader_epoch) == (
            state.leader,
            state.leader_epoch,
        )
        assert [(n.node_id, n.port) for n in produced.node_endpoints] == [
            (state.leader, leader_port)
        ]
        fetched = fetch(client, {topic_id(client, topic): {0: 0}}, version=17)
        part = fetched.responses[0].partitions[0]
        assert part.error_code == ErrorCode.not_leader_or_follower
        assert part.current_leader.leader_id == state.leader
        assert [(n.node_id, n.port) for n in fetched.node_endpoints] == [
            (state.leader, leader_port)
        ]
    finally:
        client.close()
