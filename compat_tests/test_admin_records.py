"""DeleteRecords, DescribeTopicPartitions, DescribeProducers, AlterReplicaLogDirs, ListOffsets
and Produce record errors (KIP-467) through real clients: the Java Admin and producer
(kafka-clients 4.3), confluent-kafka (librdkafka) and kafka-python's admin."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import KafkaError, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import NewTopic, OffsetSpec
from kafka import TopicPartition as KpTopicPartition
from kafka import TopicPartitionReplica
from kafka.admin import KafkaAdminClient
from kafka.errors import (
    IncompatibleBrokerVersion,
    LogDirNotFoundError,
    NoError,
    UnsupportedVersionError,
)

from compat_tests import java_client as java
from compat_tests.broker import BrokerProcess
from compat_tests.confluent_admin import admin, create_topic
from compat_tests.matrix import compat
from compat_tests.records import Rec
from compat_tests.test_confluent import consume, consumer, produce

# Ten of every hundred records lack a key: a compacted topic refuses exactly those.
KEYLESS = set(range(5, 100, 10))


def keyed_records(count: int, partition: int = 0, keyless: set[int] | None = None) -> list[Rec]:
    return [
        Rec(
            partition=partition,
            key=None if i in (keyless or ()) else b"k%d" % i,
            value=b"v%d" % i,
            headers=(),
            timestamp=0,
        )
        for i in range(count)
    ]


@pytest.fixture
def kp_admin(broker: BrokerProcess) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    yield client
    client.close()


@compat("java", "admin")
def test_java_admin_records_apis(broker: BrokerProcess, new_topic: Callable[[str], str]) -> None:
    topic = new_topic("java-trim")
    java.create_topic(broker, topic, 3)
    acks = java.run("produce", broker.bootstrap, topic, stdin=java.produce_input(keyed_records(10)))
    assert [a["offset"] for a in acks] == list(range(10))

    (deleted,) = java.run(
        "delete-records", broker.bootstrap, topic, options={"partition": "0", "offset": "4"}
    )
    assert (deleted["low_watermark"], deleted["error"]) == (4, None)
    offsets = java.run(
        "list-offsets", broker.bootstrap, topic, options={"spec": "earliest", "via": "admin"}
    )
    assert {o["partition"]: o["offset"] for o in offsets} == {0: 4, 1: 0, 2: 0}
    (too_far,) = java.run(
        "delete-records", broker.bootstrap, topic, options={"partition": "0", "offset": "11"}
    )
    assert too_far["error"] == "OffsetOutOfRangeException"

    # One partition per DescribeTopicPartitions answer: three pages, all partitions.
    described = java.run("describe-topics", broker.bootstrap, topic, options={"page-size": "1"})
    assert [d["partition"] for d in described] == [0, 1, 2]
    assert all(d["leader"] in d["replicas"] and d["leader"] in broker.data_dirs for d in described)

    # The Java producer is idempotent by default: its producer id shows up.
    (producer,) = java.run(
        "describe-producers", broker.bootstrap, topic, options={"partition": "0"}
    )
    assert producer["producer_id"] >= 0 and producer["last_sequence"] == 9

    # The replica on partition 0's leader, moved to the directory it is in: a no-op.
    leader = described[0]["leader"]
    here = str(broker.data_dirs[leader].absolute())
    (same,) = java.run(
        "alter-log-dir",
        broker.bootstrap,
        topic,
        options={"partition": "0", "dir": here, "broker": str(leader)},
    )
    assert same == {"error": None, "current_dir": here}
    (unknown,) = java.run(
        "alter-log-dir",
        broker.bootstrap,
        topic,
        options={"partition": "0", "dir": "/nowhere", "broker": str(leader)},
    )
    assert unknown["error"] == "LogDirNotFoundException"


@compat("java", "produce-consume")
def test_java_producer_fails_exactly_the_bad_records(
    broker: BrokerProcess, new_topic: Callable[[str], str]
) -> None:
    topic = new_topic("java-keyless")
    java.run("create-topic", broker.bootstrap, topic, topic_configs={"cleanup.policy": "compact"})
    results = java.run(
        "produce",
        broker.bootstrap,
        topic,
        options={"allow-errors": "true"},
        # One batch of all 100 records, sent once the producer is flushed.
        configs={"linger.ms": "60000", "batch.size": "1000000", "retries": "0"},
        stdin=java.produce_input(keyed_records(100, keyless=KEYLESS)),
    )
    assert len(results) == 100
    named = {i for i, r in enumerate(results) if "InvalidRecordException" in r.get("error", "")}
    assert named == KEYLESS
    # Kafka's producer fails the batch's other records too, with a generic error that says
    # they were in a batch with invalid records (Sender.failBatch).
    others = [r["error"] for i, r in enumerate(results) if i not in KEYLESS]
    assert all("part of a batch which had one more more invalid records" in e for e in others)


@compat("confluent", "produce-consume")
def test_librdkafka_producer_reports_the_bad_records(
    broker: BrokerProcess, new_topic: Callable[[str], str]
) -> None:
    topic = new_topic("rdkafka-keyless")
    client = admin(broker)
    client.create_topics(
        [NewTopic(topic, 1, 1, config={"cleanup.policy": "compact"})], operation_timeout=30
    )[topic].result(60)
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "linger.ms": 60_000,
            "batch.num.messages": 1000,
            "retries": 0,
        }
    )
    # Knowing the partition first keeps the records out of librdkafka's unassigned queue, whose
    # move to the partition can start a batch before linger.ms is up.
    producer.list_topics(topic, timeout=30)
    outcomes: dict[int, KafkaError | None] = {}
    for i, rec in enumerate(keyed_records(100, keyless=KEYLESS)):
        producer.produce(
            topic,
            value=rec.value,
            key=rec.key,
            partition=0,
            on_delivery=lambda err, msg, i=i: outcomes.__setitem__(i, err),
        )
    assert producer.flush(60) == 0
    assert len(outcomes) == 100
    # librdkafka fails the records the response names with INVALID_RECORD, and the rest of
    # their batch with its local _INVALID_DIFFERENT_RECORD. A record that librdkafka still put
    # in a batch of its own without a keyless one is stored.
    named = {i for i, e in outcomes.items() if e is not None and e.code() == 87}
    assert named == KEYLESS
    others = {i: None if e is None else e.code() for i, e in outcomes.items() if i not in KEYLESS}
    assert set(others.values()) <= {KafkaError._INVALID_DIFFERENT_RECORD, None}
    assert KafkaError._INVALID_DIFFERENT_RECORD in others.values()
    stored = sorted(i for i, code in others.items() if code is None)
    assert [r.value for r in consume(broker, topic, 1, len(stored))] == [b"v%d" % i for i in stored]
    watcher = consumer(broker)
    try:
        assert watcher.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1] == len(stored)
    finally:
        watcher.close()


@compat("confluent", "admin")
def test_confluent_delete_records_and_list_offsets(
    broker: BrokerProcess, new_topic: Callable[[str], str]
) -> None:
    topic = new_topic("rdkafka-trim")
    create_topic(broker, topic, 1)
    produce(broker, topic, keyed_records(8))
    client = admin(broker)
    tp = TopicPartition(topic, 0, 5)
    deleted = client.delete_records([tp])[tp].result(30)
    assert deleted.low_watermark == 5
    earliest = client.list_offsets({TopicPartition(topic, 0): OffsetSpec.earliest()})
    assert next(iter(earliest.values())).result(30).offset == 5
    latest = client.list_offsets({TopicPartition(topic, 0): OffsetSpec.latest()})
    assert next(iter(latest.values())).result(30).offset == 8
    described = client.describe_topics(TopicCollection([topic]))[topic].result(30)
    assert [p.id for p in described.partitions] == [0]


@compat("kafka-python", "admin")
def test_kafka_python_admin_records_apis(
    broker: BrokerProcess, kp_admin: KafkaAdminClient, new_topic: Callable[[str], str]
) -> None:
    topic = new_topic("kp-trim")
    create_topic(broker, topic, 2)
    produce(broker, topic, keyed_records(6), **{"enable.idempotence": True})
    tp = KpTopicPartition(topic, 0)
    result = kp_admin.delete_records({tp: 3})
    assert result[tp]["low_watermark"] == 3
    pages = kp_admin.describe_topic_partitions([topic], response_partition_limit=1)
    assert pages["topics"][0]["name"] == topic
    assert len(pages["topics"][0]["partitions"]) == 1
    assert pages["next_cursor"] == {"topic_name": topic, "partition_index": 1}
    offsets = kp_admin.list_partition_offsets({tp: -2})
    assert offsets[tp].offset == 3
    (state,) = kp_admin.describe_producers([tp])[tp].active_producers
    assert state.producer_id >= 0 and state.last_sequence == 5
    (described,) = kp_admin.describe_topics([topic])
    leader = next(p["leader_id"] for p in described["partitions"] if p["partition_index"] == 0)
    here = str(broker.data_dirs[leader].absolute())
    replica = TopicPartitionReplica(topic, 0, leader)
    assert kp_admin.alter_replica_log_dirs({replica: here}) == {replica: NoError}
    assert kp_admin.alter_replica_log_dirs({replica: "/nowhere"}) == {replica: LogDirNotFoundError}
    # DescribeQuorum belongs to KRaft; a ZooKeeper-era broker does not advertise it.
    with pytest.raises((IncompatibleBrokerVersion, UnsupportedVersionError)):
        kp_admin.describe_metadata_quorum()


@compat("kafka-python", "admin")
def test_kafka_python_create_partitions_and_describe_log_dirs(
    broker: BrokerProcess, kp_admin: KafkaAdminClient, new_topic: Callable[[str], str]
) -> None:
    topic = new_topic("kp-grown")
    create_topic(broker, topic, 1)
    kp_admin.create_partitions({topic: 3})
    # The controller answers once its own metadata holds the new partitions; the broker
    # kafka-python asks next may learn of them a moment later, as with Kafka.
    broker.wait_for_topic(topic, 3)
    (described,) = kp_admin.describe_topics([topic])
    assert sorted(p["partition_index"] for p in described["partitions"]) == [0, 1, 2]
    produce(broker, topic, keyed_records(4, partition=2))
    dirs = kp_admin.describe_log_dirs(topic_partitions={topic: [0, 1, 2]})
    text = repr(dirs)
    assert topic in text
    assert any(str(d.absolute()) in text for d in broker.data_dirs.values())
