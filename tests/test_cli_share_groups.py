"""``gregor groups`` on a share group (KIP-932) against a real broker process, with a
confluent-kafka ShareConsumer as its member: listed with ``--type share`` and its state,
described with its members, epochs, start offsets and lag as kafka-share-groups.sh shows
them; its start offsets reset (dry run, then executed, which a new member reads from) only
once it is Empty, deleted for a topic, and the group deleted."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer, ShareConsumer

from compat_tests.group_checks import wait_until
from compat_tests.process_pool import ProcessPool
from gregor.server.harness.broker_process import BrokerProcess
from tests.cli_run import gregor, new_topic, ok, table
from tests.test_cli_groups import BROKER_OVERRIDES

PRODUCED = {0: 7, 1: 4}  # records per partition


@pytest.fixture(scope="module")
def broker(process_pool: ProcessPool) -> BrokerProcess:
    # test_cli_groups' overrides: the pool hands these modules one broker.
    return process_pool.broker(BROKER_OVERRIDES)


@pytest.fixture
def topic(broker: BrokerProcess) -> str:
    name = new_topic(broker.bootstrap, "sg-cli", 2)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for partition, count in PRODUCED.items():
        for i in range(count):
            producer.produce(name, f"{partition}-{i}".encode(), partition=partition)
    assert producer.flush(10) == 0
    return name


@pytest.fixture
def group(broker: BrokerProcess) -> str:
    """A share group that starts from the log start (share.auto.offset.reset=earliest)."""
    name = f"sg-{uuid.uuid4().hex[:8]}"
    ok(
        "configs",
        "--bootstrap-server",
        broker.bootstrap,
        "--alter",
        "--entity-type",
        "groups",
        "--entity-name",
        name,
        "--add-config",
        "share.auto.offset.reset=earliest",
    )
    return name


def groups(broker: BrokerProcess, *args: str) -> str:
    return ok("groups", "--bootstrap-server", broker.bootstrap, *args).out


def describe(broker: BrokerProcess, group: str) -> dict:
    (described,) = ok(
        "groups", "--bootstrap-server", broker.bootstrap, "--describe", "--group", group, "--json"
    ).json()["groups"]
    return described


def start_offsets(broker: BrokerProcess, group: str) -> dict[int, tuple[int | None, int]]:
    """Partition -> (start offset, lag)."""
    offsets = describe(broker, group)["offsets"]
    return {o["partition"]: (o["startOffset"], o["lag"]) for o in offsets}


@pytest.fixture
def consumers() -> Iterator[list[ShareConsumer]]:
    made: list[ShareConsumer] = []
    yield made
    for consumer in made:
        consumer.close()


def read_all(
    broker: BrokerProcess, topic: str, group: str, made: list[ShareConsumer]
) -> ShareConsumer:
    """A share consumer of ``group`` that read (and, polling on, acknowledged) every record."""
    consumer = ShareConsumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": group, "client.id": "kip932-cli"}
    )
    made.append(consumer)
    consumer.subscribe([topic])
    received: list[bytes] = []
    wait_until(
        lambda: len(received) >= sum(PRODUCED.values()),
        30,
        "every record",
        step=lambda: received.extend(m.value() for m in consumer.poll(0.2) if m.error() is None),
    )
    assert sorted(received) == sorted(
        f"{p}-{i}".encode() for p, count in PRODUCED.items() for i in range(count)
    )
    return consumer


def test_a_share_group_through_its_life(
    broker: BrokerProcess, topic: str, group: str, consumers: list[ShareConsumer]
) -> None:
    consumer = read_all(broker, topic, group, consumers)
    # Implicit acknowledgement: the next polls accept what the last one delivered.
    wait_until(
        lambda: start_offsets(broker, group) == {0: (7, 0), 1: (4, 0)},
        30,
        "the start offsets past every record",
        step=lambda: consumer.poll(0.1),
    )

    # --list: share groups only with --type share (or every type).
    listed = {r["GROUP"]: r for r in table(groups(broker, "--list", "--type", "--state"))}
    assert (listed[group]["TYPE"], listed[group]["STATE"]) == ("Share", "Stable")
    assert group in groups(broker, "--list", "--type", "share", "--state", "Stable")
    assert group not in groups(broker, "--list")
    assert group not in groups(broker, "--list", "--type", "consumer,classic")
    assert group not in groups(broker, "--list", "--type", "share", "--state", "Empty")

    # --describe: ShareGroupDescribe's members and epochs, the start offsets and lag.
    described = describe(broker, group)
    assert (described["type"], described["state"], described["assignmentStrategy"]) == (
        "share",
        "Stable",
        "simple",
    )
    assert described["groupEpoch"] >= 1
    assert described["targetAssignmentEpoch"] == described["groupEpoch"]
    (member,) = described["members"]
    assert member["clientId"] == "kip932-cli"
    assert member["memberEpoch"] == described["groupEpoch"]
    assert member["partitions"] == [{"topic": topic, "partition": p} for p in (0, 1)]
    rows = table(groups(broker, "--describe", "--group", group))
    assert [(r["TOPIC"], r["PARTITION"], r["START-OFFSET"], r["LAG"]) for r in rows] == [
        (topic, "0", "7", "0"),
        (topic, "1", "4", "0"),
    ]
    (state,) = table(groups(broker, "--describe", "--group", group, "--state", "--verbose"))
    assert (state["STATE"], state["#MEMBERS"], state["ASSIGNMENT-STRATEGY"]) == (
        "Stable",
        "1",
        "simple",
    )
    (row,) = table(groups(broker, "--describe", "--group", group, "--members", "--verbose"))
    assert (row["CLIENT-ID"], row["#PARTITIONS"]) == ("kip932-cli", "2")
    assert row["CURRENT-ASSIGNMENT"] == f"{topic}:0,1"

    # Offsets are reset only once the group is Empty.
    reset = ("--reset-offsets", "--group", group, "--topic", topic)
    busy = gregor("groups", "--bootstrap-server", broker.bootstrap, *reset, "--to-earliest")
    assert busy.code == 1 and "inactive" in busy.err
    consumers.remove(consumer)
    consumer.close()
    wait_until(lambda: describe(broker, group)["state"] == "Empty", 30, "the group Empty")

    # A dry run changes nothing; --execute sets the start offsets (AlterShareGroupOffsets).
    planned = table(groups(broker, *reset, "--to-earliest", "--dry-run"))
    assert [(r["PARTITION"], r["NEW-OFFSET"]) for r in planned] == [("0", "0"), ("1", "0")]
    assert start_offsets(broker, group) == {0: (7, 0), 1: (4, 0)}
    shifted = gregor(
        "groups", "--bootstrap-server", broker.bootstrap, *reset, "--shift-by", "1", "--execute"
    )
    assert shifted.code == 1 and "--to-earliest" in shifted.err
    reset_p0 = ("--reset-offsets", "--group", group, "--topic", f"{topic}:0")
    groups(broker, *reset_p0, "--to-offset", "2", "--execute")
    assert start_offsets(broker, group) == {0: (2, 5), 1: (4, 0)}
    groups(broker, *reset, "--to-datetime", "2999-01-01T00:00:00", "--execute")
    assert start_offsets(broker, group) == {0: (7, 0), 1: (4, 0)}
    reset_all = ("--reset-offsets", "--group", group, "--all-topics")
    groups(broker, *reset_all, "--to-earliest", "--execute")
    assert start_offsets(broker, group) == {0: (0, 7), 1: (0, 4)}

    # A new member reads every record again from the reset start offsets.
    consumer = read_all(broker, topic, group, consumers)
    consumers.remove(consumer)
    consumer.close()
    wait_until(lambda: describe(broker, group)["state"] == "Empty", 30, "the group Empty again")

    # --delete-offsets (DeleteShareGroupOffsets): the topic's state is gone.
    deleted = table(groups(broker, "--delete-offsets", "--group", group, "--topic", topic))
    assert [(r["TOPIC"], r["STATUS"]) for r in deleted] == [(topic, "Successful")]
    assert start_offsets(broker, group) == {}
    again = gregor(
        "groups",
        "--bootstrap-server",
        broker.bootstrap,
        "--delete-offsets",
        "--group",
        group,
        "--topic",
        topic,
    )
    assert again.code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in again.out

    # --delete (DeleteGroups) of the Empty share group.
    assert "was successful" in groups(broker, "--delete", "--group", group)
    assert group not in groups(broker, "--list", "--type", "share")
