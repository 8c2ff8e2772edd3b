"""``gregor groups`` on a consumer-protocol group (KIP-848) against a real broker process,
with confluent-kafka (librdkafka, ``group.protocol=consumer``) as its member: listed with
its type and state, described with member epochs, assignments, the group's epochs and
assignor, offsets and lag, as kafka-consumer-groups.sh shows them; its offsets are reset
and it is deleted once empty, and neither while it has a member."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from compat_tests.group_checks import wait_until
from compat_tests.process_pool import ProcessPool
from gregor.server.harness.broker_process import BrokerProcess
from tests.cli_run import gregor, new_topic, ok, table
from tests.test_cli_groups import BROKER_OVERRIDES

PRODUCED = {0: 7, 1: 4}  # records per partition


@pytest.fixture(scope="module")
def broker(process_pool: ProcessPool) -> BrokerProcess:
    # test_cli_groups' overrides: the pool hands both modules one broker.
    return process_pool.broker(BROKER_OVERRIDES)


@pytest.fixture
def topic(broker: BrokerProcess) -> str:
    name = new_topic(broker.bootstrap, "cg-cli", 2)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for partition, count in PRODUCED.items():
        for i in range(count):
            producer.produce(name, f"{partition}-{i}".encode(), partition=partition)
    assert producer.flush(10) == 0
    return name


def groups(broker: BrokerProcess, *args: str) -> str:
    return ok("groups", "--bootstrap-server", broker.bootstrap, *args).out


def test_a_consumer_protocol_group_through_its_life(broker: BrokerProcess, topic: str) -> None:
    group = f"cg-{uuid.uuid4().hex[:8]}"
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "client.id": "kip848-cli",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    wait_until(
        lambda: len(consumer.assignment()) == 2,
        30,
        "the assignment",
        step=lambda: consumer.poll(0.1),
    )
    consumer.commit(
        offsets=[TopicPartition(topic, 0, 5), TopicPartition(topic, 1, 1)], asynchronous=False
    )
    member_id = consumer.memberid()

    # --list: --type and --state add their columns and filter.
    listed = {r["GROUP"]: r for r in table(groups(broker, "--list", "--type", "--state"))}
    assert (listed[group]["TYPE"], listed[group]["STATE"]) == ("Consumer", "Stable")
    assert group not in groups(broker, "--list", "--type", "classic")
    assert group not in groups(broker, "--list", "--state", "Empty")
    assert group in groups(broker, "--list", "--type", "Consumer", "--state", "stable")
    bad = gregor("groups", "--bootstrap-server", broker.bootstrap, "--list", "--type", "streams")
    assert bad.code == 1 and "Invalid types list 'streams'" in bad.err

    # --describe: what ConsumerGroupDescribe tells, with offsets and lag.
    (described,) = ok(
        "groups", "--bootstrap-server", broker.bootstrap, "--describe", "--group", group, "--json"
    ).json()["groups"]
    epoch = described["groupEpoch"]
    assert epoch >= 1 and described["targetAssignmentEpoch"] == epoch
    assert (described["type"], described["state"], described["assignmentStrategy"]) == (
        "consumer",
        "Stable",
        "uniform",
    )
    (only,) = described["members"]
    assigned = [{"topic": topic, "partition": 0}, {"topic": topic, "partition": 1}]
    assert (only["memberId"], only["clientId"], only["memberEpoch"]) == (
        member_id,
        "kip848-cli",
        epoch,
    )
    assert only["partitions"] == assigned and only["targetAssignment"] == assigned
    assert [
        (o["partition"], o["currentOffset"], o["lag"], o["memberId"]) for o in described["offsets"]
    ] == [(0, 5, 2, member_id), (1, 1, 3, member_id)]

    (members,) = table(groups(broker, "--describe", "--group", group, "--members", "--verbose"))
    assert members["CONSUMER-ID"] == member_id and members["#PARTITIONS"] == "2"
    assert (members["CURRENT-EPOCH"], members["TARGET-EPOCH"]) == (str(epoch), str(epoch))
    assert members["CURRENT-ASSIGNMENT"] == members["TARGET-ASSIGNMENT"] == f"{topic}:0,1"
    (state,) = table(groups(broker, "--describe", "--group", group, "--state", "--verbose"))
    assert (state["ASSIGNMENT-STRATEGY"], state["STATE"], state["#MEMBERS"]) == (
        "uniform",
        "Stable",
        "1",
    )
    assert state["GROUP-EPOCH"] == state["TARGET-ASSIGNMENT-EPOCH"] == str(epoch)
    rows = table(groups(broker, "--describe", "--group", group))
    assert [(r["PARTITION"], r["CURRENT-OFFSET"], r["LAG"]) for r in rows] == [
        ("0", "5", "2"),
        ("1", "1", "3"),
    ]

    # While it has a member: no reset, no deletion.
    reset = ["--reset-offsets", "--group", group, "--all-topics", "--to-earliest", "--execute"]
    active = gregor("groups", "--bootstrap-server", broker.bootstrap, *reset)
    assert active.code == 1 and "current state is Stable" in active.err
    busy = gregor("groups", "--bootstrap-server", broker.bootstrap, "--delete", "--group", group)
    assert busy.code == 1 and "NON_EMPTY_GROUP" in busy.err

    consumer.close()  # leaves the group (epoch -1)
    listed = {r["GROUP"]: r for r in table(groups(broker, "--list", "--type", "--state"))}
    assert (listed[group]["TYPE"], listed[group]["STATE"]) == ("Consumer", "Empty")
    text = groups(broker, "--describe", "--group", group)
    assert f"Consumer group '{group}' has no active members." in text
    assert [(r["LAG"], r["CONSUMER-ID"]) for r in table(text)] == [("2", "-"), ("3", "-")]

    out = groups(broker, *reset)
    assert [(r["PARTITION"], r["NEW-OFFSET"]) for r in table(out)] == [("0", "0"), ("1", "0")]
    (after,) = ok(
        "groups", "--bootstrap-server", broker.bootstrap, "--describe", "--group", group, "--json"
    ).json()["groups"]
    assert [o["currentOffset"] for o in after["offsets"]] == [0, 0]

    out = groups(broker, "--delete", "--group", group)
    assert out == f"Deletion of requested consumer groups ('{group}') was successful.\n"
    assert group not in groups(broker, "--list")
    gone = gregor("groups", "--bootstrap-server", broker.bootstrap, "--describe", "--group", group)
    assert gone.code == 1 and f"Consumer group '{group}' does not exist." in gone.err
