"""Cluster administration through real admin clients: confluent-kafka's AdminClient and
the Java Admin (kafka-clients 4.3) grow topics, describe log dirs, elect leaders and
list or alter partition reassignments."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import NewPartitions

from compat_tests import java_client as java
from compat_tests.broker import BrokerProcess
from compat_tests.confluent_admin import admin, create_topic
from compat_tests.matrix import compat
from compat_tests.records import Rec, assert_round_trip
from compat_tests.test_confluent import consume, produce


@compat("confluent", "admin")
def test_confluent_create_partitions(
    broker: BrokerProcess, new_topic: Callable[[str], str]
) -> None:
    topic = new_topic("grown")
    create_topic(broker, topic, 1)
    client = admin(broker)
    client.create_partitions([NewPartitions(topic, 3)], operation_timeout=30)[topic].result(30)
    broker.wait_for_topic(topic, 3)  # every broker, as the next request may go to any
    assert len(client.list_topics(topic, timeout=10).topics[topic].partitions) == 3

    # A count that is not an increase is refused as Kafka refuses it.
    refused = client.create_partitions([NewPartitions(topic, 3)])[topic]
    with pytest.raises(KafkaException) as failure:
        refused.result(30)
    assert failure.value.args[0].name() == "INVALID_PARTITIONS"

    sent = [
        Rec(partition=p, key=b"k%d" % i, value=b"v%d" % i, headers=(), timestamp=1_000 + i)
        for i, p in enumerate([2, 0, 2, 1, 2])
    ]
    reports = produce(broker, topic, sent)
    assert sorted((m.partition(), m.offset()) for m in reports) == [
        (0, 0),
        (1, 0),
        (2, 0),
        (2, 1),
        (2, 2),
    ]
    assert_round_trip(sent, consume(broker, topic, 3, len(sent)))


@compat("java", "admin")
def test_java_create_partitions(broker: BrokerProcess, new_topic: Callable[[str], str]) -> None:
    topic = new_topic("java-grown")
    java.create_topic(broker, topic, 1)
    java.run("create-partitions", broker.bootstrap, topic, options={"count": "2"})
    sent = [Rec(partition=1, key=b"k", value=b"new", headers=(), timestamp=5_000)]
    (ack,) = java.run("produce", broker.bootstrap, topic, stdin=java.produce_input(sent))
    assert (ack["partition"], ack["offset"]) == (1, 0)
    consumed = java.run("consume", broker.bootstrap, topic, options={"count": "1"})
    assert_round_trip(sent, java.parse_consumed(consumed))
    with pytest.raises(java.JavaClientError, match="InvalidPartitionsException"):
        java.run("create-partitions", broker.bootstrap, topic, options={"count": "1"})


@compat("java", "admin")
def test_java_describe_log_dirs(broker: BrokerProcess, new_topic: Callable[[str], str]) -> None:
    topic = new_topic("java-dirs")
    java.create_topic(broker, topic, 2)
    sent = [Rec(partition=0, key=None, value=b"x" * 100, headers=(), timestamp=1_000)]
    # acks=all (the Java default): every replica holds the record when it is acknowledged.
    java.run("produce", broker.bootstrap, topic, stdin=java.produce_input(sent))
    described = java.run("describe-log-dirs", broker.bootstrap, topic)
    # One log dir per broker, each holding a replica of both partitions.
    assert {(d["broker"], d["log_dir"]) for d in described} == {
        (i, str(path.absolute())) for i, path in broker.data_dirs.items()
    }
    for d in described:
        assert d["error"] is None
        assert d["total_bytes"] >= d["usable_bytes"] > 0
        replicas = {r["partition"]: r for r in d["replicas"] if r["topic"] == topic}
        assert replicas.keys() == {0, 1}
        assert replicas[0]["size"] > 100 and replicas[1]["size"] == 0
        assert all(r["offset_lag"] == 0 and not r["is_future"] for r in replicas.values())


@compat("java", "admin")
@pytest.mark.parametrize("election", ["PREFERRED", "UNCLEAN"])
def test_java_elect_leaders(
    broker: BrokerProcess, new_topic: Callable[[str], str], election: str
) -> None:
    topic = new_topic("java-elect")
    java.create_topic(broker, topic, 2)
    lines = java.run(
        "elect-leaders",
        broker.bootstrap,
        topic,
        options={"election": election, "partition": ["0", "1", "9"]},
    )
    assert {(d["partition"], d["error"]) for d in lines} == {
        (0, "ElectionNotNeededException"),
        (1, "ElectionNotNeededException"),
        (9, "UnknownTopicOrPartitionException"),
    }
    # All partitions: only those whose leader changed are answered, and none did.
    assert java.run("elect-leaders", broker.bootstrap, topic, options={"election": election}) == []


@compat("java", "admin")
def test_java_partition_reassignments(
    broker: BrokerProcess, new_topic: Callable[[str], str]
) -> None:
    topic = new_topic("java-move")
    java.create_topic(broker, topic, 1)
    metadata = admin(broker).list_topics(topic, timeout=10)
    current = [str(r) for r in metadata.topics[topic].partitions[0].replicas]
    unknown = str(max(metadata.brokers) + 1)

    def alter(*replicas: str) -> str | None:
        options = {"partition": "0", "replica": list(replicas)}
        (line,) = java.run("alter-reassignment", broker.bootstrap, topic, options=options)
        return line["error"]

    assert alter(*current) is None  # the current replicas: complete at once
    assert alter(*current, unknown) == "InvalidReplicaAssignmentException"
    assert alter() == "NoReassignmentInProgressException"
    assert java.run("list-reassignments", broker.bootstrap, topic) == []
