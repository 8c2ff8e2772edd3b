"""A 3-broker cluster on a real ZooKeeper: membership, topics, replication and failover.

Every broker is a real process (server/harness/cluster.py); clients are confluent-kafka.
Conditions are awaited by polling Metadata from every running broker with a deadline; a
failure names what was awaited and what each broker last answered.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from compat_tests import java_client
from compat_tests.broker import BrokerProcess
from compat_tests.process_pool import ProcessPool
from gregor.apis.context import nested
from gregor.server.harness.broker_process import BrokerProcessError as BrokerError
from gregor.server.harness.cluster import Cluster
from gregor.wire.interbroker import (
    ControlledShutdownRequest,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    LeaderAndIsrTopicState,
    StopReplicaPartitionState,
    StopReplicaRequest,
    StopReplicaTopicState,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
    UpdateMetadataTopicState,
)
from gregor.wire.schema import request_type
from gregor.wire.versions import (
    ALTER_PARTITION,
    CONTROLLED_SHUTDOWN,
    DESCRIBE_CONFIGS,
    LEADER_AND_ISR,
    STOP_REPLICA,
    UPDATE_METADATA,
)
from tests.kafka_wire import WireClient

# A killed broker's ZooKeeper session expires after this (TEST_DEFAULTS uses 6 s): the
# failover waits allow it twice over plus the controller's work.
FAILOVER_TIMEOUT_S = 30.0
CONSUME_TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def cluster(process_pool: ProcessPool) -> Cluster:
    return process_pool.cluster()


def new_topic(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def create(bootstrap: str, topic: str, partitions: int, rf: int, **configs: str) -> None:
    client = AdminClient({"bootstrap.servers": bootstrap})
    futures = client.create_topics(
        [NewTopic(topic, partitions, rf, config=dict(configs))], operation_timeout=30
    )
    futures[topic].result(timeout=60)


def produce(bootstrap: str, topic: str, values: list[bytes], **config: str | int) -> list[Message]:
    """Send values with acks=all and an idempotent producer; return the delivery reports of
    those acknowledged. Delivery errors are returned too (as reports whose error() is set)."""
    reports: list[Message] = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 60000,
            **config,
        }
    )
    for value in values:
        producer.produce(topic, value=value, on_delivery=lambda _e, m: reports.append(m))
        producer.poll(0)
    remaining = producer.flush(90)
    assert remaining == 0, f"{remaining} record(s) neither acknowledged nor failed in 90s"
    return reports


def acknowledged(reports: list[Message]) -> list[Message]:
    failed = [(m.value(), m.error()) for m in reports if m.error() is not None]
    assert not failed, f"{len(failed)} record(s) failed, first: {failed[:3]}"
    return reports


def consume_all(bootstrap: str, topic: str, expected: int) -> list[Message]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": new_topic("g"),
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    got: list[Message] = []
    deadline = time.monotonic() + CONSUME_TIMEOUT_S
    try:
        while len(got) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                continue
            got.append(msg)
    finally:
        consumer.close()
    assert len(got) >= expected, (
        f"awaited {expected} records of {topic} for {CONSUME_TIMEOUT_S:.0f}s, got {len(got)}"
    )
    return got


def wait_for_identical_replicas(
    cluster: Cluster, topic: str, partition: int, on: list[int] | None = None
) -> None:
    """The segment files of the partition on every broker (or those ``on``) hold the same
    bytes (followers fetch continuously, so this is awaited)."""
    wanted = set(cluster.brokers if on is None else on)
    deadline = time.monotonic() + FAILOVER_TIMEOUT_S
    while True:
        files = {b: f for b, f in cluster.segment_bytes(topic, partition).items() if b in wanted}
        contents = {tuple(sorted(f.items())) for f in files.values()}
        if set(files) == wanted and len(contents) == 1:
            return
        if time.monotonic() > deadline:
            sizes = {b: {name: len(data) for name, data in f.items()} for b, f in files.items()}
            raise AssertionError(
                f"awaited identical segment files of {topic}-{partition} on every broker "
                f"for {FAILOVER_TIMEOUT_S:.0f}s; sizes by broker: {sizes}"
            )
        time.sleep(0.2)


def test_three_brokers_start_and_all_see_each_other(cluster: Cluster) -> None:
    views = {i: cluster.metadata(i) for i in cluster.brokers}
    cluster_ids = {v.cluster_id for v in views.values()}
    assert len(cluster_ids) == 1 and None not in cluster_ids, cluster_ids
    for view in views.values():
        assert {i: port for i, (_h, port, _r) in view.brokers.items()} == {
            i: b.port for i, b in cluster.brokers.items()
        }
    assert len({v.controller_id for v in views.values()}) == 1
    # The cluster id is each broker's meta.properties' too.
    (cluster_id,) = cluster_ids
    for broker in cluster.brokers.values():
        assert f"cluster.id={cluster_id}\n" in (broker.data_dir / "meta.properties").read_text()


@pytest.mark.parametrize("via", [1, 2, 3])
def test_topic_created_through_any_broker_gets_leaders_and_full_isrs(
    cluster: Cluster, via: int
) -> None:
    topic = new_topic()
    create(cluster.brokers[via].bootstrap, topic, 3, 3)
    partitions = cluster.wait_for_topic(topic, 3, isr=3)
    for p in partitions.values():
        assert sorted(p.replicas) == [1, 2, 3] and sorted(p.isr) == [1, 2, 3]
    # Kafka's assignment starts leaders round-robin: each broker leads one of three.
    assert sorted(p.leader for p in partitions.values()) == [1, 2, 3]


def test_acks_all_produce_and_consume_with_identical_replicas(cluster: Cluster) -> None:
    topic = new_topic()
    create(cluster.bootstrap, topic, 1, 3, **{"min.insync.replicas": "2"})
    cluster.wait_for_topic(topic, 1, isr=3)
    values = [b"v%05d" % i for i in range(2000)]
    acknowledged(produce(cluster.bootstrap, topic, values))
    got = consume_all(cluster.bootstrap, topic, len(values))
    assert [m.value() for m in got] == values
    wait_for_identical_replicas(cluster, topic, 0)


def test_kill_of_the_leader_elects_from_the_isr_and_loses_nothing(cluster: Cluster) -> None:
    topic = new_topic()
    create(cluster.bootstrap, topic, 1, 3, **{"min.insync.replicas": "2"})
    before = cluster.wait_for_topic(topic, 1, isr=3)[0]
    first = [b"a%05d" % i for i in range(1000)]
    acknowledged(produce(cluster.bootstrap, topic, first))
    # Read once while all three brokers live: that also creates __consumer_offsets
    # (replication factor 3, as Kafka's default), which two brokers could not.
    assert [m.value() for m in consume_all(cluster.bootstrap, topic, len(first))] == first

    cluster.kill(before.leader)
    after = cluster.wait_for_leader(topic, 0, not_in=[before.leader], timeout=FAILOVER_TIMEOUT_S)
    assert after.leader in before.isr and after.leader_epoch > before.leader_epoch, (before, after)
    second = [b"b%05d" % i for i in range(1000)]
    acknowledged(produce(cluster.bootstrap, topic, second))
    got = consume_all(cluster.bootstrap, topic, len(first) + len(second))
    assert [m.value() for m in got] == first + second

    # The killed broker comes back, catches up and rejoins the ISR; every replica ends
    # byte-identical.
    cluster.restart(before.leader)
    cluster.wait_for_topic(topic, 1, isr=3, timeout=FAILOVER_TIMEOUT_S)
    wait_for_identical_replicas(cluster, topic, 0)


def test_another_broker_takes_over_when_the_controller_is_killed(cluster: Cluster) -> None:
    controller = cluster.wait_for_controller()
    cluster.kill(controller)
    successor = cluster.wait_for_controller(not_in=[controller], timeout=FAILOVER_TIMEOUT_S)
    assert successor != controller
    cluster.wait_for_brokers(set(cluster.brokers) - {controller}, timeout=FAILOVER_TIMEOUT_S)
    # The new controller acts: a topic created now gets leaders on the live brokers.
    topic = new_topic()
    live = [i for i in cluster.brokers if i != controller]
    create(cluster.brokers[live[0]].bootstrap, topic, 2, 2)
    partitions = cluster.wait_for_topic(topic, 2, isr=2)
    assert all(set(p.replicas) <= set(live) for p in partitions.values())
    cluster.restart(controller)
    cluster.wait_for_brokers(cluster.brokers)


def test_a_second_broker_with_the_same_id_is_refused(cluster: Cluster, tmp_path: Path) -> None:
    twin = BrokerProcess(
        tmp_path / "twin",
        {**cluster.brokers[1].overrides, "zookeeper.connect": cluster.zookeeper.connect},
    )
    with pytest.raises(BrokerError, match="exited with code 1"):
        twin.start()
    assert "broker id 1 is already registered" in twin.log_tail()
    assert "Traceback" not in twin.log_path.read_text()


def describe_topic_configs(port: int, topic: str) -> dict[str, str]:
    cls = request_type(DESCRIBE_CONFIGS, 4)
    resource = nested(cls, "DescribeConfigsResource")
    client = WireClient(port)
    try:
        response = client.call(
            DESCRIBE_CONFIGS,
            4,
            cls(
                include_synonyms=False,
                include_documentation=False,
                resources=(
                    resource(resource_type=2, resource_name=topic, configuration_keys=None),
                ),
            ),
        )
    finally:
        client.close()
    (result,) = response.results
    assert result.error_code == 0, result
    return {c.name: c.value for c in result.configs if c.config_source == 1}  # topic overrides


def test_topic_overrides_and_deletion_are_seen_by_every_broker(cluster: Cluster) -> None:
    topic = new_topic()
    create(cluster.brokers[1].bootstrap, topic, 2, 3, **{"retention.ms": "123456"})
    cluster.wait_for_topic(topic, 2, isr=3)
    for broker_id, broker in cluster.brokers.items():
        deadline = time.monotonic() + 10
        while describe_topic_configs(broker.port, topic) != {"retention.ms": "123456"}:
            assert time.monotonic() < deadline, f"broker {broker_id} lacks the topic's override"
            time.sleep(0.1)
    admin = AdminClient({"bootstrap.servers": cluster.brokers[3].bootstrap})
    admin.delete_topics([topic], operation_timeout=30)[topic].result(timeout=60)
    cluster.wait_until(
        lambda views: all(topic not in v.topics for v in views.values()),
        f"every broker to forget the deleted topic {topic}",
    )
    # Every replica's log is gone too.
    deadline = time.monotonic() + 30
    while any(cluster.segment_bytes(topic, p) for p in range(2)):
        assert time.monotonic() < deadline, f"logs of {topic} still on disk"
        time.sleep(0.2)


def test_a_partition_moves_to_other_brokers_with_its_data(cluster: Cluster) -> None:
    topic = new_topic("move")
    client = AdminClient({"bootstrap.servers": cluster.bootstrap})  # outlives its futures
    client.create_topics([NewTopic(topic, 1, replica_assignment=[[1, 2]])], operation_timeout=30)[
        topic
    ].result(timeout=60)
    cluster.wait_for_topic(topic, 1, isr=2)
    values = [b"m%04d" % i for i in range(500)]
    acknowledged(produce(cluster.bootstrap, topic, values))

    options = {"partition": "0", "replica": ["2", "3"]}
    (line,) = java_client.run("alter-reassignment", cluster.bootstrap, topic, options=options)
    assert line["error"] is None, line
    cluster.wait_until(
        lambda views: all(
            sorted(v.topics[topic][0].replicas) == [2, 3]
            and sorted(v.topics[topic][0].isr) == [2, 3]
            for v in views.values()
        ),
        f"{topic}-0 to be reassigned to brokers [2, 3] with both in sync",
    )
    assert java_client.run("list-reassignments", cluster.bootstrap, topic) == []
    got = consume_all(cluster.bootstrap, topic, len(values))
    assert [m.value() for m in got] == values
    wait_for_identical_replicas(cluster, topic, 0, on=[2, 3])
    # The replica that moved away deleted its log.
    deadline = time.monotonic() + 30
    while 1 in cluster.segment_bytes(topic, 0):
        assert time.monotonic() < deadline, f"broker 1 still holds the log of {topic}-0"
        time.sleep(0.2)


def call(cluster: Cluster, broker_id: int, api_key: int, version: int, request: Any) -> Any:
    client = WireClient(cluster.brokers[broker_id].port)
    try:
        return client.call(api_key, version, request)
    finally:
        client.close()


def test_requests_of_a_stale_controller_are_refused_and_not_applied(cluster: Cluster) -> None:
    """A zombie controller (an epoch older than the current one's) is fenced: its
    UpdateMetadata, LeaderAndIsr and StopReplica answer STALE_CONTROLLER_EPOCH and change
    nothing."""
    topic = new_topic()
    create(cluster.bootstrap, topic, 1, 3)
    before = cluster.wait_for_topic(topic, 1, isr=3)[0]
    target = next(i for i in cluster.brokers if i != before.leader)
    view = cluster.metadata(target)
    topic_id = None  # as a controller that does not know it

    stale = {"controller_id": before.leader, "controller_epoch": 0, "broker_epoch": -1}
    update = UpdateMetadataRequest(
        **stale,
        topic_states=(
            UpdateMetadataTopicState(
                topic_name=topic,
                topic_id=topic_id,
                partition_states=(
                    UpdateMetadataPartitionState(
                        partition_index=0,
                        controller_epoch=0,
                        leader=-2,  # "being deleted": would drop the partition
                        leader_epoch=0,
                        zk_version=0,
                    ),
                ),
            ),
        ),
        live_brokers=(),
    )
    answer = call(cluster, target, UPDATE_METADATA, 8, update)
    assert answer.error_code == ErrorCode.stale_controller_epoch
    leader_and_isr = LeaderAndIsrRequest(
        **stale,
        topic_states=(
            LeaderAndIsrTopicState(
                topic_name=topic,
                topic_id=topic_id,
                partition_states=(
                    LeaderAndIsrPartitionState(
                        partition_index=0,
                        controller_epoch=0,
                        leader=target,  # would make it leader
                        leader_epoch=before.leader_epoch + 10,
                        isr=(target,),
                        partition_epoch=99,
                        replicas=before.replicas,
                    ),
                ),
            ),
        ),
        live_leaders=(),
    )
    answer = call(cluster, target, LEADER_AND_ISR, 7, leader_and_isr)
    assert answer.error_code == ErrorCode.stale_controller_epoch
    stop = StopReplicaRequest(
        **stale,
        topic_states=(
            StopReplicaTopicState(
                topic_name=topic,
                partition_states=(
                    StopReplicaPartitionState(
                        partition_index=0, leader_epoch=-2, delete_partition=True
                    ),
                ),
            ),
        ),
    )
    answer = call(cluster, target, STOP_REPLICA, 4, stop)
    assert answer.error_code == ErrorCode.stale_controller_epoch
    # Nothing was applied: the broker's view and its replica's log are as they were.
    after = cluster.metadata(target)
    assert after.topics[topic] == view.topics[topic]
    assert cluster.segment_bytes(topic, 0).keys() == set(cluster.brokers)
    assert cluster.wait_for_topic(topic, 1, isr=3)[0].leader == before.leader


def test_controller_requests_to_another_broker_answer_not_controller(cluster: Cluster) -> None:
    controller = cluster.wait_for_controller()
    other = next(i for i in cluster.brokers if i != controller)
    answer = call(
        cluster,
        other,
        CONTROLLED_SHUTDOWN,
        3,
        ControlledShutdownRequest(broker_id=other, broker_epoch=-1),
    )
    assert answer.error_code == ErrorCode.not_controller and answer.remaining_partitions == ()
    cls = request_type(ALTER_PARTITION, 2)
    request = cls(broker_id=other, broker_epoch=-1, topics=())
    answer = call(cluster, other, ALTER_PARTITION, 2, request)
    assert answer.error_code == ErrorCode.not_controller
    # The broker is still served and still in the cluster.
    cluster.wait_for_brokers(cluster.brokers)
