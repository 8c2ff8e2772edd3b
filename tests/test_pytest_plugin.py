"""The pytest plugin for users' suites (server/harness/pytest_plugin.py), used as a user would: its
fixtures with confluent-kafka and kafka-python, a clean restart and a kill -9 of its broker;
and a user's suite run in a pytest of its own (nothing starts unless asked, one broker per
session, the topic marker)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, Producer
from confluent_kafka import TopicPartition as ConfluentPartition
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from gregor.server.cli.client.connection import Client
from gregor.server.harness.broker_process import BrokerProcess

REPO_ROOT = Path(__file__).resolve().parent.parent
Sent = tuple[int, bytes | None, bytes, tuple[tuple[str, bytes], ...]]


def sample(count: int, partitions: int) -> list[Sent]:
    return [
        (
            i % partitions,
            None if i % 5 == 0 else f"k{i}".encode(),
            f"value-{i}".encode() * (1 + i % 3),
            (("n", str(i).encode()),) if i % 2 else (),
        )
        for i in range(count)
    ]


def confluent_produce(bootstrap: str, topic: str, records: list[Sent]) -> None:
    failures: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            failures.append(err)

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for partition, key, value, headers in records:
        producer.produce(
            topic, value, key, partition, headers=list(headers), on_delivery=on_delivery
        )
    assert producer.flush(30) == 0
    assert failures == []


def confluent_consume(bootstrap: str, topic: str, partitions: int, count: int) -> list[Sent]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "plugin-test"})
    c.assign([ConfluentPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    got: list[Sent] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < count and time.monotonic() < deadline:
            for msg in c.consume(num_messages=500, timeout=0.5):
                assert msg.error() is None, msg.error()
                headers = tuple(msg.headers() or ())
                got.append((msg.partition(), msg.key(), msg.value(), headers))
    finally:
        c.close()
    return got


def kafka_python_produce(bootstrap: str, topic: str, records: list[Sent]) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    futures = [
        producer.send(topic, value, key, list(headers), partition)
        for partition, key, value, headers in records
    ]
    producer.flush(30)
    for future in futures:
        future.get(timeout=30)
    producer.close()


def kafka_python_consume(bootstrap: str, topic: str, partitions: int, count: int) -> list[Sent]:
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    c.assign([TopicPartition(topic, p) for p in range(partitions)])
    c.seek_to_beginning()
    got: list[Sent] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < count and time.monotonic() < deadline:
            for tp, messages in c.poll(timeout_ms=500).items():
                got += [(tp.partition, m.key, m.value, tuple(m.headers)) for m in messages]
    finally:
        c.close()
    return got


def by_partition(records: list[Sent]) -> dict[int, list[Sent]]:
    out: dict[int, list[Sent]] = {}
    for r in records:
        out.setdefault(r[0], []).append(r)
    return out


@pytest.mark.gregor_topic(partitions=3)
def test_confluent_round_trip(gregor_bootstrap: str, gregor_topic: str) -> None:
    sent = sample(60, 3)
    confluent_produce(gregor_bootstrap, gregor_topic, sent)
    got = confluent_consume(gregor_bootstrap, gregor_topic, 3, len(sent))
    assert by_partition(got) == by_partition(sent)


def test_kafka_python_round_trip(gregor_bootstrap: str, gregor_topic: str) -> None:
    sent = sample(40, 1)
    kafka_python_produce(gregor_bootstrap, gregor_topic, sent)
    assert kafka_python_consume(gregor_bootstrap, gregor_topic, 1, len(sent)) == sent


def test_restart_keeps_the_data(
    gregor_broker: BrokerProcess, gregor_bootstrap: str, gregor_topic_factory: Callable[..., str]
) -> None:
    topic = gregor_topic_factory(partitions=2)
    sent = sample(30, 2)
    confluent_produce(gregor_bootstrap, topic, sent)
    pid = gregor_broker.pid
    gregor_broker.restart()
    assert gregor_broker.pid != pid
    assert gregor_broker.bootstrap == gregor_bootstrap
    got = kafka_python_consume(gregor_bootstrap, topic, 2, len(sent))
    assert by_partition(got) == by_partition(sent)


def test_kill_keeps_acknowledged_data(
    gregor_broker: BrokerProcess, gregor_bootstrap: str, gregor_topic: str
) -> None:
    sent = sample(50, 1)
    kafka_python_produce(gregor_bootstrap, gregor_topic, sent[:25])
    confluent_produce(gregor_bootstrap, gregor_topic, sent[25:])
    pid = gregor_broker.pid
    gregor_broker.kill()
    assert gregor_broker.pid != pid
    assert "Received SIGTERM" not in gregor_broker.log_tail(3)
    # The recovered broker takes new writes after the acknowledged ones.
    more = sample(5, 1)
    confluent_produce(gregor_bootstrap, gregor_topic, more)
    got = confluent_consume(gregor_bootstrap, gregor_topic, 1, len(sent) + len(more))
    assert got == sent + more


def test_topic_factory_makes_distinct_topics_with_their_config(
    gregor_bootstrap: str, gregor_topic_factory: Callable[..., str]
) -> None:
    first = gregor_topic_factory()
    second = gregor_topic_factory(partitions=4, config={"cleanup.policy": "compact"})
    assert first != second
    assert "test_topic_factory" in first
    with Client(gregor_bootstrap) as client:
        meta = {t.name: t for t in client.metadata([first, second]).topics}
    assert [len(meta[first].partitions), len(meta[second].partitions)] == [1, 4]


USER_SUITE = """
import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

def test_a_test_without_fixtures_starts_no_broker(tmp_path_factory):
    assert not list(tmp_path_factory.getbasetemp().glob("gregor*"))

def test_first(gregor_bootstrap, gregor_topic):
    producer = KafkaProducer(bootstrap_servers=gregor_bootstrap, acks="all")
    producer.send(gregor_topic, b"hello", partition=0).get(timeout=30)
    producer.close()
    c = KafkaConsumer(bootstrap_servers=gregor_bootstrap)
    parts = c.partitions_for_topic(gregor_topic)
    c.close()
    pytest.first = (gregor_bootstrap, gregor_topic, parts)

@pytest.mark.gregor_topic(partitions=3)
def test_second_shares_the_broker(gregor_bootstrap, gregor_topic):
    bootstrap, topic, parts = pytest.first
    assert bootstrap == gregor_bootstrap and topic != gregor_topic
    assert parts == {0}
    c = KafkaConsumer(bootstrap_servers=gregor_bootstrap)
    assert c.partitions_for_topic(gregor_topic) == {0, 1, 2}
    c.close()

def test_fails_with_the_broker_log(gregor_broker):
    assert False, "on purpose"
"""


def test_a_users_suite_through_the_entry_point(tmp_path: Path) -> None:
    """The suite runs in a pytest of its own that finds the plugin as an installed package's
    pytest11 entry point: setuptools writes this checkout's metadata to a directory on the
    path, and nothing names the plugin."""
    metadata = tmp_path / "metadata"
    metadata.mkdir()
    subprocess.run(
        [sys.executable, "setup.py", "-q", "egg_info", "--egg-base", str(metadata)],
        cwd=REPO_ROOT,
        check=True,
        capture_output=True,
    )
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_user.py").write_text(USER_SUITE)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(metadata), str(REPO_ROOT)]))
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rN"]
    command += ["-W", "ignore::DeprecationWarning", "test_user.py"]
    result = subprocess.run(command, cwd=suite, env=env, capture_output=True, text=True)
    out = result.stdout + result.stderr
    assert "1 failed, 3 passed" in out, out
    assert "test_fails_with_the_broker_log" in out and "on purpose" in out
    # A failing test that holds the broker shows its log.
    assert "gregor broker log" in out and "started (cluster id" in out


def test_loading_the_plugin_leaves_the_tls_and_jwt_libraries_unloaded() -> None:
    # The plugin loads in every pytest session of a project that installs Gregor; only a
    # secured broker needs cryptography (certificates, JWTs) and urllib (JWKS).
    probe = (
        "import sys, gregor.server.harness.pytest_plugin; "
        "print(sorted(m for m in ('cryptography', 'urllib.request') if m in sys.modules))"
    )
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "[]"
