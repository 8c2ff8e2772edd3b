"""Transactions on a 3-broker cluster (ZooKeeper, RF=3) with confluent-kafka: a
transaction spans partitions led by every broker, so most of its first writes are
verified with a coordinator on another broker (AddPartitionsToTxn v4 verify_only) and its
markers go to other brokers (WriteTxnMarkers); then the transaction coordinator's broker
is killed (-9) and the same producer's next transactions commit through the new one. And
a group coordinator verifies a TxnOffsetCommit with a transaction coordinator on another
broker."""

from __future__ import annotations

import datetime
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from compat_tests.process_pool import ProcessPool
from gregor.apis.context import nested
from gregor.coordinator.records import OFFSETS_TOPIC, partition_for
from gregor.coordinator.txn_records import TRANSACTION_STATE_TOPIC
from gregor.server.harness.cluster import Cluster
from gregor.wire import versions as v
from gregor.wire.records import build_batch
from gregor.wire.schema import request_type
from tests.kafka_wire import WireClient
from tests.test_txn_coordinator_wire import add_partitions_v5, init, req
from tests.test_txn_end_to_end import consume_all
from tests.test_txn_offsets import add_offsets_to_txn, txn_offset_commit

PARTITIONS = 3
TXN_PARTITIONS = 3


@pytest.fixture(scope="module")
def cluster(process_pool: ProcessPool) -> Cluster:
    return process_pool.cluster(
        {
            "transaction.state.log.num.partitions": str(TXN_PARTITIONS),
            "offsets.topic.num.partitions": "3",
        }
    )


def test_transactions_across_brokers_and_a_coordinator_failover(cluster: Cluster) -> None:
    topic = f"txn-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 3)])[topic].result(30)
    leaders = {i: p.leader for i, p in cluster.wait_for_topic(topic, PARTITIONS, isr=3).items()}
    assert set(leaders.values()) == {1, 2, 3}, "the partitions' leaders are spread"
    txn_id = f"cluster-{topic}"
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "transactional.id": txn_id,
            "linger.ms": 0,
        }
    )
    producer.init_transactions(60)

    def transaction(name: str, commit: bool) -> None:
        producer.begin_transaction()
        for partition in range(PARTITIONS):
            producer.produce(topic, f"{name}-{partition}".encode(), partition=partition)
        producer.flush(60)
        if commit:
            producer.commit_transaction(60)
        else:
            producer.abort_transaction(60)

    transaction("first", commit=True)
    transaction("aborted", commit=False)
    coordinator = cluster.wait_for_leader(
        TRANSACTION_STATE_TOPIC, partition_for(txn_id, TXN_PARTITIONS)
    ).leader
    cluster.kill(coordinator)
    cluster.wait_for_leader(
        TRANSACTION_STATE_TOPIC, partition_for(txn_id, TXN_PARTITIONS), not_in=[coordinator]
    )
    for i in range(PARTITIONS):
        cluster.wait_for_leader(topic, i, not_in=[coordinator])
    transaction("after-failover", commit=True)
    survivors = ",".join(b.bootstrap for i, b in cluster.brokers.items() if i != coordinator)
    seen = sorted(consume_all(survivors, topic, "read_committed", PARTITIONS))
    assert seen == sorted(
        (p, f"{name}-{p}".encode()) for name in ("first", "after-failover") for p in range(3)
    )
    everything = consume_all(survivors, topic, "read_uncommitted", PARTITIONS)
    assert sorted(v for _, v in everything if v.startswith(b"aborted")) == [
        f"aborted-{p}".encode() for p in range(PARTITIONS)
    ]


def produce_txn(
    client: WireClient, txn_id: str, topic: str, partition: int, pid: int, epoch: int
) -> ErrorCode:
    cls = request_type(v.PRODUCE, 9)
    batch = build_batch(
        [(b"k", b"v", [], 1_000)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=0,
        is_transactional=True,
    )
    request = cls(
        transactional_id=txn_id,
        acks=-1,
        timeout=datetime.timedelta(seconds=20),
        topic_data=(
            nested(cls, "TopicProduceData")(
                name=topic,
                partition_data=(
                    nested(cls, "PartitionProduceData")(index=partition, records=batch),
                ),
            ),
        ),
    )
    response = client.call(v.PRODUCE, 9, request)
    return response.responses[0].partition_responses[0].error_code


def test_a_first_write_is_verified_with_the_coordinator_on_another_broker(cluster: Cluster) -> None:
    """The leader asks the coordinator's broker (AddPartitionsToTxn v4 verify_only): a
    partition not in the transaction is INVALID_TXN_STATE, another epoch
    INVALID_PRODUCER_EPOCH, and an added partition takes the write."""
    topic = f"verify-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 3)])[topic].result(30)
    leaders = {i: p.leader for i, p in cluster.wait_for_topic(topic, PARTITIONS, isr=3).items()}
    txn_id = f"verify-{topic}"
    index = partition_for(txn_id, TXN_PARTITIONS)
    coordinator = WireClient(cluster.brokers[1].port)
    try:
        found = coordinator.call(
            v.FIND_COORDINATOR,
            4,
            req(v.FIND_COORDINATOR, 4, key_type=1, coordinator_keys=(txn_id,)),
        ).coordinators[0]
        assert found.error_code == ErrorCode.none
    finally:
        coordinator.close()
    coordinator_id = cluster.wait_for_leader(TRANSACTION_STATE_TOPIC, index).leader
    partition = next(i for i, leader in leaders.items() if leader != coordinator_id)
    coordinator = WireClient(cluster.brokers[coordinator_id].port)
    leader = WireClient(cluster.brokers[leaders[partition]].port)
    try:
        r = init(coordinator, txn_id)
        assert r.error_code == ErrorCode.none
        pid, epoch = r.producer_id, r.producer_epoch
        assert (
            produce_txn(leader, txn_id, topic, partition, pid, epoch) == ErrorCode.invalid_txn_state
        )
        add = add_partitions_v5(coordinator, txn_id, pid, epoch, [(topic, [partition])], False)
        assert add == {(topic, partition): ErrorCode.none}
        wrong_epoch = produce_txn(leader, txn_id, topic, partition, pid, epoch + 5)
        assert wrong_epoch == ErrorCode.invalid_producer_epoch
        assert produce_txn(leader, txn_id, topic, partition, pid, epoch) == ErrorCode.none
    finally:
        coordinator.close()
        leader.close()


def test_offsets_are_verified_with_the_coordinator_on_another_broker(cluster: Cluster) -> None:
    """The group's coordinator asks the transactional id's (AddPartitionsToTxn v4
    verify_only): without AddOffsetsToTxn the offsets are INVALID_TXN_STATE, with it they
    are taken."""
    topic = f"offsets-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
    cluster.wait_for_topic(topic, 1, isr=3)
    txn_id = f"offsets-{topic}"
    any_broker = WireClient(cluster.brokers[1].port)
    try:
        for key_type, key in ((1, txn_id), (0, f"group-{topic}")):
            found = any_broker.call(
                v.FIND_COORDINATOR,
                4,
                req(v.FIND_COORDINATOR, 4, key_type=key_type, coordinator_keys=(key,)),
            ).coordinators[0]
            assert found.error_code == ErrorCode.none
    finally:
        any_broker.close()
    txn_node = cluster.wait_for_leader(TRANSACTION_STATE_TOPIC, partition_for(txn_id, 3)).leader
    group_nodes = {i: cluster.wait_for_leader(OFFSETS_TOPIC, i).leader for i in range(3)}
    group_id = next(
        g
        for g in (f"group-{topic}-{n}" for n in range(100))
        if group_nodes[partition_for(g, 3)] != txn_node
    )
    coordinator = WireClient(cluster.brokers[txn_node].port)
    group = WireClient(cluster.brokers[group_nodes[partition_for(group_id, 3)]].port)
    try:
        r = init(coordinator, txn_id)
        assert r.error_code == ErrorCode.none
        pid, epoch = r.producer_id, r.producer_epoch
        add = add_partitions_v5(coordinator, txn_id, pid, epoch, [(topic, [0])], False)
        assert add == {(topic, 0): ErrorCode.none}
        refused = txn_offset_commit(group, txn_id, group_id, pid, epoch, 7, topic=topic)
        assert refused == ErrorCode.invalid_txn_state
        add_offsets_to_txn(coordinator, txn_id, group_id, pid, epoch)
        assert txn_offset_commit(group, txn_id, group_id, pid, epoch, 7, topic=topic) == 0
    finally:
        coordinator.close()
        group.close()
