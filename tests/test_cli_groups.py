"""``gregor groups`` against a real broker process, with confluent-kafka (librdkafka) as the
group's consumer: describe's lag is what was produced minus what the consumer committed,
a reset changes what the consumer then reads, and deletion follows Kafka's rules."""

from __future__ import annotations

import datetime
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from compat_tests.group_checks import wait_until
from compat_tests.process_pool import ProcessPool
from gregor.server.harness.broker_process import BrokerProcess
from tests.cli_run import CliResult, gregor, new_topic, ok, table

BASE_TS = 1_700_000_000_000
PRODUCED = {0: 7, 1: 4}  # records per partition; record i of a partition at BASE_TS + i s
BROKER_OVERRIDES = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000"}


@pytest.fixture(scope="module")
def broker(process_pool: ProcessPool) -> BrokerProcess:
    return process_pool.broker(BROKER_OVERRIDES)


@pytest.fixture
def topic(broker: BrokerProcess) -> str:
    name = new_topic(broker.bootstrap, "groups", 2)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for partition, count in PRODUCED.items():
        for i in range(count):
            producer.produce(
                name, f"{partition}-{i}".encode(), partition=partition, timestamp=BASE_TS + i * 1000
            )
    assert producer.flush(10) == 0
    return name


def new_consumer(broker: BrokerProcess, topic: str, group: str) -> Consumer:
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "client.id": "lag-checker",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
        }
    )
    consumer.subscribe([topic])
    return consumer


def member(broker: BrokerProcess, topic: str, group: str) -> Consumer:
    """A group member that owns every partition of ``topic`` once this returns (the records
    its polls returned meanwhile are dropped)."""
    member = new_consumer(broker, topic, group)
    wait_until(
        lambda: len(member.assignment()) == 2,
        30,
        "the assignment",
        step=lambda: member.poll(0.1),
    )
    return member


def committed(
    broker: BrokerProcess, topic: str, group: str, partitions: list[int] | None = None
) -> dict[int, int]:
    """The group's committed offsets as librdkafka reads them (-1001: none)."""
    reader = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        tps = [TopicPartition(topic, p) for p in partitions or PRODUCED]
        offsets = reader.committed(tps, timeout=10)
        return {tp.partition: tp.offset for tp in offsets}
    finally:
        reader.close()


def groups(broker: BrokerProcess, *args: str) -> str:
    return ok("groups", "--bootstrap-server", broker.bootstrap, *args).out


def test_describe_shows_lag_and_members(broker: BrokerProcess, topic: str) -> None:
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = member(broker, topic, group)
    consumer.commit(
        offsets=[TopicPartition(topic, 0, 5), TopicPartition(topic, 1, 1)], asynchronous=False
    )

    (described,) = ok(
        "groups", "--bootstrap-server", broker.bootstrap, "--describe", "--group", group, "--json"
    ).json()["groups"]
    assert described["state"] == "Stable" and described["assignmentStrategy"] == "range"
    (only,) = described["members"]
    assert only["memberId"] == consumer.memberid() and only["clientId"] == "lag-checker"
    assert described["offsets"] == [
        {
            "topic": topic,
            "partition": 0,
            "currentOffset": 5,
            "logEndOffset": 7,
            "lag": 2,
            "memberId": consumer.memberid(),
        },
        {
            "topic": topic,
            "partition": 1,
            "currentOffset": 1,
            "logEndOffset": 4,
            "lag": 3,
            "memberId": consumer.memberid(),
        },
    ]

    rows = table(groups(broker, "--describe", "--group", group))
    assert [(r["PARTITION"], r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"]) for r in rows] == [
        ("0", "5", "7", "2"),
        ("1", "1", "4", "3"),
    ]
    assert {(r["CONSUMER-ID"], r["CLIENT-ID"]) for r in rows} == {
        (consumer.memberid(), "lag-checker")
    }
    (members,) = table(groups(broker, "--describe", "--group", group, "--members"))
    assert members["#PARTITIONS"] == "2" and members["CONSUMER-ID"] == consumer.memberid()
    (state,) = table(groups(broker, "--describe", "--group", group, "--state"))
    assert (state["STATE"], state["#MEMBERS"], state["ASSIGNMENT-STRATEGY"]) == (
        "Stable",
        "1",
        "range",
    )
    assert group in groups(broker, "--list").splitlines()
    listed = ok("groups", "--bootstrap-server", broker.bootstrap, "--list", "--json").json()
    assert {"group": group, "state": "Stable", "protocolType": "consumer"} in listed["groups"]

    # Offsets of a group with members are not reset; the group is not deleted.
    active = gregor(
        "groups",
        "--bootstrap-server",
        broker.bootstrap,
        "--reset-offsets",
        "--group",
        group,
        "--all-topics",
        "--to-earliest",
        "--execute",
    )
    assert active.code == 1 and "current state is Stable" in active.err
    not_empty = gregor(
        "groups", "--bootstrap-server", broker.bootstrap, "--delete", "--group", group
    )
    assert not_empty.code == 1 and "NON_EMPTY_GROUP" in not_empty.err
    consumer.close()

    text = groups(broker, "--describe", "--group", group)
    assert f"Consumer group '{group}' has no active members." in text
    assert [(r["LAG"], r["CONSUMER-ID"]) for r in table(text)] == [("2", "-"), ("3", "-")]


def test_reset_offsets_changes_what_the_consumer_reads(broker: BrokerProcess, topic: str) -> None:
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = member(broker, topic, group)
    consumer.commit(
        offsets=[TopicPartition(topic, 0, 6), TopicPartition(topic, 1, 4)], asynchronous=False
    )
    consumer.close()
    reset = ("--reset-offsets", "--group", group)

    dry = gregor(
        "groups", "--bootstrap-server", broker.bootstrap, *reset, "--all-topics", "--to-earliest"
    )
    assert dry.code == 0 and "--execute option is missing" in dry.err
    assert [r["NEW-OFFSET"] for r in table(dry.out)] == ["0", "0"]
    assert committed(broker, topic, group) == {0: 6, 1: 4}  # a dry run changes nothing

    ok(
        "groups",
        "--bootstrap-server",
        broker.bootstrap,
        *reset,
        "--topic",
        f"{topic}:0",
        "--to-earliest",
        "--execute",
    )
    assert committed(broker, topic, group) == {0: 0, 1: 4}
    reader = new_consumer(broker, topic, group)
    seen: list[tuple[int, int]] = []
    wait_until(
        lambda: len(seen) == 7,
        30,
        "partition 0 read again",
        step=lambda: seen.extend(
            (m.partition(), m.offset()) for m in reader.consume(10, 0.2) if not m.error()
        ),
    )
    assert seen == [(0, i) for i in range(7)]
    reader.close()

    def execute(*args: str) -> dict[int, int]:
        out = ok(
            "groups", "--bootstrap-server", broker.bootstrap, *reset, *args, "--execute", "--json"
        ).json()
        assert out["executed"] is True
        new = {o["partition"]: o["newOffset"] for o in out["groups"][0]["offsets"]}
        assert committed(broker, topic, group) == {**committed_before, **new}
        return new

    committed_before = {0: 0, 1: 4}
    assert execute("--all-topics", "--shift-by", "3") == {0: 3, 1: 4}  # kept within the log
    committed_before = {0: 3, 1: 4}
    assert execute("--topic", topic, "--shift-by", "-2") == {0: 1, 1: 2}
    committed_before = {0: 1, 1: 2}
    assert execute("--topic", f"{topic}:1", "--to-offset", "99") == {1: 4}
    committed_before = {0: 1, 1: 4}
    moment = datetime.datetime.fromtimestamp((BASE_TS + 2500) / 1000, datetime.UTC)
    assert execute("--topic", topic, "--to-datetime", moment.isoformat()) == {0: 3, 1: 3}
    committed_before = {0: 3, 1: 3}
    assert execute("--topic", topic, "--to-datetime", "2100-01-01T00:00:00") == {0: 7, 1: 4}
    committed_before = {0: 7, 1: 4}
    assert execute("--all-topics", "--to-earliest") == {0: 0, 1: 0}
    committed_before = {0: 0, 1: 0}
    assert execute("--all-topics", "--to-latest") == {0: 7, 1: 4}

    no_target = gregor("groups", "--bootstrap-server", broker.bootstrap, *reset, "--to-latest")
    assert no_target.code == 1 and "--topic or --all-topics" in no_target.err


def test_delete_and_missing_groups(broker: BrokerProcess, topic: str) -> None:
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = member(broker, topic, group)
    consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    consumer.close()
    assert group in groups(broker, "--list").splitlines()
    out = groups(broker, "--delete", "--group", group)
    assert out == f"Deletion of requested consumer groups ('{group}') was successful.\n"
    assert group not in groups(broker, "--list").splitlines()
    assert committed(broker, topic, group) == {0: -1001, 1: -1001}

    missing = gregor(
        "groups", "--bootstrap-server", broker.bootstrap, "--describe", "--group", group
    )
    assert missing.code == 1 and f"Consumer group '{group}' does not exist." in missing.err
    gone = gregor(
        "groups", "--bootstrap-server", broker.bootstrap, "--delete", "--group", group, "--json"
    )
    assert gone.code == 1 and gone.json() == {
        "groups": [{"group": group, "error": "GROUP_ID_NOT_FOUND"}]
    }


def test_reset_to_current_and_by_duration_over_two_topics(
    broker: BrokerProcess, topic: str
) -> None:
    # A second topic whose first 3 records are old and last 2 are from now.
    recent = new_topic(broker.bootstrap, "recent", 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    now_ms = int(time.time() * 1000)
    for i in range(5):
        producer.produce(recent, b"r", partition=0, timestamp=BASE_TS + i if i < 3 else now_ms)
    assert producer.flush(10) == 0
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = member(broker, topic, group)
    consumer.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
    consumer.close()
    reset = ("groups", "--bootstrap-server", broker.bootstrap, "--reset-offsets", "--group", group)

    def new_offsets(result: CliResult) -> dict[tuple[str, int], int]:
        assert result.code == 0, result.err
        return {(r["TOPIC"], int(r["PARTITION"])): int(r["NEW-OFFSET"]) for r in table(result.out)}

    # --to-current: the committed offset; the log end where none is committed.
    current = gregor(*reset, "--topic", topic, "--to-current")
    assert new_offsets(current) == {(topic, 0): 2, (topic, 1): 4}
    assert "--execute option is missing" in current.err
    assert committed(broker, topic, group) == {0: 2, 1: -1001}  # a dry run changes nothing
    ok(*reset, "--topic", topic, "--to-current", "--execute")
    assert committed(broker, topic, group) == {0: 2, 1: 4}

    # --by-duration: the first record at or after that long ago; the log end where there
    # is none. Both --topic options count.
    by_duration = (*reset, "--topic", topic, "--topic", recent, "--by-duration", "PT1H")
    assert new_offsets(gregor(*by_duration)) == {(topic, 0): 7, (topic, 1): 4, (recent, 0): 3}
    ok(*by_duration, "--execute")
    assert committed(broker, topic, group) == {0: 7, 1: 4}
    assert committed(broker, recent, group, [0]) == {0: 3}
    # Long enough ago to cover every record: the log start.
    everything = gregor(*reset, "--topic", recent, "--by-duration", "P3650DT0.5S")
    assert new_offsets(everything) == {(recent, 0): 0}

    bad = gregor(*reset, "--topic", recent, "--by-duration", "1h")
    assert bad.code == 1
    assert bad.err == "Error: --by-duration must look like PnDTnHnMnS (e.g. PT1H30M), got '1h'\n"
