"""``gregor topics`` against a real broker process, each change checked through
confluent-kafka's admin client as well as through the tool's own output: regular
expressions for ``--topic``, ``--if-exists``, ``--if-not-exists`` and ``--exclude-internal``
as kafka-topics.sh has them."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from gregor.server.harness.broker_process import BrokerProcess

REPO_ROOT = Path(__file__).resolve().parent.parent


def gregor(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "gregor.server.cli", "topics", "--bootstrap-server", bootstrap]
    return subprocess.run(command + list(args), cwd=REPO_ROOT, capture_output=True, text=True)


def ok(bootstrap: str, *args: str) -> str:
    result = gregor(bootstrap, *args)
    assert result.returncode == 0, result.stderr
    return result.stdout


def confluent_view(bootstrap: str, topic: str) -> tuple[int, dict[str, str]]:
    """(partition count, non-default configs) as confluent-kafka's admin client sees them."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    meta = admin.list_topics(topic, timeout=10).topics[topic]
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(10)
    overrides = {k: e.value for k, e in entries.items() if not e.is_default}
    return len(meta.partitions), overrides


def test_create_describe_alter_delete(gregor_broker: BrokerProcess) -> None:
    bootstrap = gregor_broker.bootstrap
    topic = f"cli-{uuid.uuid4().hex[:8]}"
    out = ok(
        bootstrap,
        "--create",
        "--topic",
        topic,
        "--partitions",
        "3",
        "--config",
        "retention.ms=60000",
        "--config",
        "cleanup.policy=compact",
    )
    assert out == f"Created topic {topic}.\n"
    assert confluent_view(bootstrap, topic) == (
        3,
        {"retention.ms": "60000", "cleanup.policy": "compact"},
    )
    assert topic in ok(bootstrap, "--list").splitlines()
    assert topic in json.loads(ok(bootstrap, "--list", "--json"))["topics"]

    text = ok(bootstrap, "--describe", "--topic", topic).splitlines()
    assert text == [
        f"Topic: {topic}\tPartitionCount: 3\tReplicationFactor: 1\t"
        "Configs: cleanup.policy=compact,retention.ms=60000",
        *(f"\tTopic: {topic}\tPartition: {p}\tLeader: 0\tReplicas: 0\tIsr: 0" for p in range(3)),
    ]

    out = ok(
        bootstrap,
        "--alter",
        "--topic",
        topic,
        "--partitions",
        "5",
        "--config",
        "retention.ms=120000",
        "--delete-config",
        "cleanup.policy",
    )
    assert out == f"Altered topic {topic}.\n"
    assert confluent_view(bootstrap, topic) == (5, {"retention.ms": "120000"})
    (described,) = json.loads(ok(bootstrap, "--describe", "--topic", topic, "--json"))["topics"]
    assert described["partitionCount"] == 5 and described["internal"] is False
    assert described["configs"] == {"retention.ms": "120000"}
    assert [p["partition"] for p in described["partitions"]] == list(range(5))
    assert all(p["leader"] == 0 and p["isr"] == [0] for p in described["partitions"])

    # Errors carry Kafka's error names and exit 1.
    again = gregor(bootstrap, "--create", "--topic", topic)
    assert again.returncode == 1 and "TOPIC_ALREADY_EXISTS" in again.stderr
    fewer = gregor(bootstrap, "--alter", "--topic", topic, "--partitions", "2")
    assert fewer.returncode == 1 and "INVALID_PARTITIONS" in fewer.stderr

    assert json.loads(ok(bootstrap, "--delete", "--topic", topic, "--json")) == {
        "topic": topic,
        "result": "Deleted",
    }
    assert topic not in ok(bootstrap, "--list").splitlines()
    gone = gregor(bootstrap, "--describe", "--topic", topic)
    assert gone.returncode == 1
    assert gone.stderr == f"Error: Topic '{topic}' does not exist as expected\n"


def test_describe_all_and_usage_errors(gregor_broker: BrokerProcess) -> None:
    bootstrap = gregor_broker.bootstrap
    first, second = (f"all-{i}-{uuid.uuid4().hex[:8]}" for i in range(2))
    ok(bootstrap, "--create", "--topic", first)
    ok(bootstrap, "--create", "--topic", second, "--partitions", "2")
    described = {t["topic"]: t for t in json.loads(ok(bootstrap, "--describe", "--json"))["topics"]}
    assert described[first]["partitionCount"] == 1 and described[second]["partitionCount"] == 2

    no_topic = gregor(bootstrap, "--delete")
    assert no_topic.returncode == 1 and "--topic is required" in no_topic.stderr
    nothing = gregor(bootstrap, "--alter", "--topic", first)
    assert nothing.returncode == 1 and "--alter needs" in nothing.stderr
    two_actions = gregor(bootstrap, "--list", "--describe")
    assert two_actions.returncode == 2 and "not allowed with" in two_actions.stderr
    unreachable = gregor(
        f"127.0.0.1:{gregor_broker.port + 1 if gregor_broker.port < 65535 else 1}", "--list"
    )
    assert unreachable.returncode == 1 and "cannot connect" in unreachable.stderr


def test_topic_regex_if_exists_if_not_exists(gregor_broker: BrokerProcess) -> None:
    bootstrap = gregor_broker.bootstrap
    prefix = f"rx-{uuid.uuid4().hex[:8]}"
    dotted, lookalike, dashed = f"{prefix}.a", f"{prefix}xa", f"{prefix}-b"
    for name in (dotted, lookalike, dashed):
        ok(bootstrap, "--create", "--topic", name)

    def listed(pattern: str) -> list[str]:
        return ok(bootstrap, "--list", "--topic", pattern).splitlines()

    # A Java regular expression matched against the whole name; "." is any character
    # unless escaped, "," means "|", and a plain name matches itself.
    assert listed(dashed) == [dashed]
    assert listed(dotted) == [dotted, lookalike]
    assert listed(prefix.replace("-", "\\-") + "\\.a") == [dotted]
    assert listed(f"{prefix}.*") == [dashed, dotted, lookalike]
    assert listed(f"{dashed},{prefix}x.") == [dashed, lookalike]
    assert listed(prefix) == []  # the whole name, not a part of it
    described = json.loads(ok(bootstrap, "--describe", "--topic", f"{prefix}[.-].*", "--json"))
    assert [t["topic"] for t in described["topics"]] == [dashed, dotted]

    # --if-not-exists: an existing topic is no error (and nothing is printed).
    assert ok(bootstrap, "--create", "--topic", dotted, "--if-not-exists") == ""
    again = gregor(bootstrap, "--create", "--topic", dotted)
    assert again.returncode == 1 and "TOPIC_ALREADY_EXISTS" in again.stderr

    # --alter and --delete act on every match; --if-exists makes no match no error.
    altered = ok(bootstrap, "--alter", "--topic", f"{prefix}.a", "--partitions", "2")
    assert altered == f"Altered topic {dotted}.\nAltered topic {lookalike}.\n"
    assert [confluent_view(bootstrap, n)[0] for n in (dotted, lookalike, dashed)] == [2, 2, 1]
    missing = gregor(bootstrap, "--delete", "--topic", f"{prefix}-nothing.*")
    assert missing.returncode == 1
    assert missing.stderr == f"Error: Topic '{prefix}-nothing.*' does not exist as expected\n"
    for action in (("--delete",), ("--alter", "--partitions", "3"), ("--describe",)):
        quiet = ok(bootstrap, *action, "--topic", f"{prefix}-nothing.*", "--if-exists")
        assert quiet == ""
    out = ok(bootstrap, "--delete", "--topic", f"{prefix}.*", "--json")
    deleted = [json.loads(line) for line in out.splitlines()]
    assert deleted == [{"topic": n, "result": "Deleted"} for n in (dashed, dotted, lookalike)]
    assert listed(f"{prefix}.*") == []

    # Each option goes with the actions kafka-topics.sh takes it with.
    misplaced = gregor(bootstrap, "--delete", "--topic", dotted, "--if-not-exists")
    assert misplaced.returncode == 1
    assert misplaced.stderr == "Error: --if-not-exists goes with --create only\n"
    misplaced = gregor(bootstrap, "--create", "--topic", dotted, "--if-exists")
    assert "--if-exists goes with --alter, --delete, --describe only" in misplaced.stderr
    bad = gregor(bootstrap, "--list", "--topic", "a(")
    assert bad.returncode == 1 and bad.stderr == "Error: a( is an invalid regex.\n"


def test_exclude_internal(gregor_broker: BrokerProcess) -> None:
    bootstrap = gregor_broker.bootstrap
    # A group's first commit creates __consumer_offsets.
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = f"ex-{uuid.uuid4().hex[:8]}"
    ok(bootstrap, "--create", "--topic", topic)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}"})
    consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    consumer.close()
    assert "__consumer_offsets" in admin.list_topics(timeout=10).topics

    everything = ok(bootstrap, "--list").splitlines()
    assert "__consumer_offsets" in everything and topic in everything
    external = ok(bootstrap, "--list", "--exclude-internal").splitlines()
    assert external == [n for n in everything if n != "__consumer_offsets"]
    described = json.loads(ok(bootstrap, "--describe", "--exclude-internal", "--json"))["topics"]
    assert [t["topic"] for t in described] == external
    assert ok(bootstrap, "--list", "--topic", "__.*", "--exclude-internal") == ""
    assert ok(bootstrap, "--list", "--topic", "__.*") == "__consumer_offsets\n"
    misplaced = gregor(bootstrap, "--delete", "--topic", topic, "--exclude-internal")
    assert misplaced.returncode == 1
    assert misplaced.stderr == "Error: --exclude-internal goes with --list, --describe only\n"
