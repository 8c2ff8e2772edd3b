"""Kafka Connect 4.3 distributed workers (real JVMs) against the broker: FileStreamSource
reads a file into a topic, FileStreamSink writes the topic to another file.

What FileStreamSource guarantees: each record carries the file position after its line
as its source offset; the worker commits the offsets of acknowledged records every
offset.flush.interval.ms and once more when a task stops cleanly. So a clean stop and
restart resumes exactly where it left off (every line once), while a worker killed with
-9 leaves the lines sent since the last commit to be read again by whoever takes the task:
at least once, in order. The sink is the same: it flushes its file and commits its
consumer offsets together, finally on a clean stop. With exactly.once.source.support the
source's records and offsets commit in one transaction: exactly once for read_committed
readers of the topic, even through kill -9.

FileStreamSource counts that position in characters but resumes by skipping bytes, so a
file with non-ASCII text resumes mid-line after a restart (Connect's example connector,
not the broker): the tests that restart or move the source task use ASCII lines.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from confluent_kafka.admin import AclOperation, ResourcePatternType, ResourceType
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType

from compat_tests.broker import BrokerProcess
from compat_tests.connect import (
    ConnectWorker,
    client_properties,
    file_sink,
    file_source,
    running_on,
)
from compat_tests.group_checks import SESSION_OVERRIDES, create_topic, wait_until
from compat_tests.matrix import compat
from compat_tests.process_pool import ProcessPool
from compat_tests.sasl_ssl_broker import SaslSslBroker, secured_broker

pytestmark = compat("java", "connect")

# The coordinator looks for timed-out transactions every second (Kafka: 10 s).
BROKER_OVERRIDES = {
    **SESSION_OVERRIDES,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
}
# Offsets committed twice a second; a dead worker's session ends in 3 s and the leader
# hands its work to the others 1 s later (Kafka's defaults: 60 s, 10 s and 5 min). One
# partition for the offsets and status topics (Kafka: 25 and 5): each worker start creates
# them and reads every partition to its end, and the tests run one connector of each kind.
WORKER_OVERRIDES = {
    "offset.flush.interval.ms": "500",
    "session.timeout.ms": "3000",
    "heartbeat.interval.ms": "500",
    "scheduled.rebalance.max.delay.ms": "1000",
    "offset.storage.partitions": "1",
    "status.storage.partitions": "1",
}
TIMEOUT = 60


@pytest.fixture
def group() -> str:
    return f"connect-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def topic(broker: BrokerProcess, new_topic: Callable[[str], str]) -> str:
    """One partition, so the sink writes the lines in the order the source read them."""
    return create_topic(broker, new_topic("lines"), 1)


@pytest.fixture(scope="module")
def secured(process_pool: ProcessPool, tmp_path_factory: pytest.TempPathFactory) -> SaslSslBroker:
    return secured_broker(process_pool, tmp_path_factory)


def worker(
    broker: BrokerProcess, tmp_path: Path, group: str, extra: dict[str, str] | None = None
) -> ConnectWorker:
    overrides = {**WORKER_OVERRIDES, **(extra or {})}
    return ConnectWorker(tmp_path, broker.bootstrap, group, broker.replication_factor, overrides)


@pytest.fixture
def workers(broker: BrokerProcess, tmp_path: Path, group: str) -> Iterator[list[ConnectWorker]]:
    """Two workers of one Connect cluster, started side by side (stopped at the end)."""
    pair = [worker(broker, tmp_path, group) for _ in range(2)]
    try:
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda w: w.start(), pair))
        yield pair
    finally:
        for w in pair:
            w.kill()


def numbered_lines(start: int, count: int, accent: str = "") -> str:
    """Distinct lines of varied length, each ending in a newline; up to four ``accent``
    characters in each."""
    return "".join(
        f"{i} {accent * (i % 5)}{'x' * (i * 37 % 500)}\n" for i in range(start, start + count)
    )


def pipeline(w: ConnectWorker, group: str, source: Path, sink: Path, topic: str) -> list[str]:
    """Create the source and sink connectors, named after the group so that the sink's
    consumer group (connect-<name>) is this test's own; return their names."""
    names = [f"{group}-source", f"{group}-sink"]
    w.put_connector(names[0], file_source(source, topic))
    w.put_connector(names[1], file_sink(sink, topic))
    return names


def append(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(text)


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8") if path.exists() else ""


def complete_lines(path: Path) -> list[str]:
    """The lines of ``path`` that end in a newline (a flush may be under way)."""
    text = read(path)
    return text[: text.rfind("\n") + 1].splitlines()


def wait_copied(source: Path, sink: Path) -> None:
    """Wait until the sink holds as many bytes as the source (each flush adds whole lines)."""
    size = source.stat().st_size
    wait_until(
        lambda: sink.exists() and sink.stat().st_size >= size,
        TIMEOUT,
        f"{sink} to reach {size} bytes",
    )


def topic_values(
    broker: BrokerProcess, topic: str, isolation_level: str = "read_uncommitted"
) -> list[str]:
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, isolation_level=isolation_level)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        end = consumer.end_offsets([tp])[tp]
        values: list[str] = []
        while consumer.position(tp) < end:
            for records in consumer.poll(timeout_ms=1000).values():
                values += [r.value.decode() for r in records]
        return values
    finally:
        consumer.close()


def kill_mid_stream(victim: ConnectWorker, broker: BrokerProcess, topic: str, after: int) -> None:
    """kill -9 the worker as soon as the topic holds more than ``after`` records: while its
    source task is still sending, before it commits the offsets of what it sent."""
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    try:
        tp = TopicPartition(topic, 0)
        wait_until(
            lambda: consumer.end_offsets([tp])[tp] > after,
            TIMEOUT,
            f"{topic} to grow past {after} records",
        )
        victim.kill()
    finally:
        consumer.close()


def cleanup_policies(broker: BrokerProcess, topics: list[str]) -> dict[str, str]:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        resources = [ConfigResource(ConfigResourceType.TOPIC, t) for t in topics]
        described = admin.describe_configs(resources)["topic"]
        return {t: described[t]["cleanup.policy"]["value"] for t in topics}
    finally:
        admin.close()


def test_file_copied_exactly_through_a_topic(
    broker: BrokerProcess, tmp_path: Path, group: str, topic: str
) -> None:
    source, sink = tmp_path / "source.txt", tmp_path / "sink.txt"
    source.write_text(numbered_lines(0, 3000, accent="é"), encoding="utf-8")
    with worker(broker, tmp_path, group) as w:
        names = pipeline(w, group, source, sink, topic)
        wait_copied(source, sink)
        assert read(sink) == read(source)
        assert topic_values(broker, topic) == read(source).splitlines()
        assert [running_on(w.status(name)) for name in names] == [[w.worker_id]] * 2
        internal = [w.config[f"{kind}.storage.topic"] for kind in ("config", "offset", "status")]
        # Connect creates its topics compacted, and refuses to run on any that is not.
        assert cleanup_policies(broker, internal) == dict.fromkeys(internal, "compact")


def test_restart_resumes_from_stored_offsets(
    broker: BrokerProcess, tmp_path: Path, group: str, topic: str
) -> None:
    source, sink = tmp_path / "source.txt", tmp_path / "sink.txt"
    source.write_text(numbered_lines(0, 1000), encoding="utf-8")
    w = worker(broker, tmp_path, group)
    with w:
        names = pipeline(w, group, source, sink, topic)
        wait_copied(source, sink)
        w.stop()
        append(source, numbered_lines(1000, 500))  # while no worker runs
        w.start()
        append(source, numbered_lines(1500, 500))  # after the restart
        wait_copied(source, sink)
        assert read(sink) == read(source)
        assert len(topic_values(broker, topic)) == 2000
        # The stored offset is the byte position after the last line read.
        end = source.stat().st_size
        wait_until(
            lambda: [o["offset"] for o in w.offsets(names[0])] == [{"position": end}],
            TIMEOUT,
            f"the source offset to reach {end}",
        )


def test_two_workers_share_tasks_and_survivor_takes_over(
    broker: BrokerProcess,
    tmp_path: Path,
    group: str,
    topic: str,
    workers: list[ConnectWorker],
) -> None:
    source, sink = tmp_path / "source.txt", tmp_path / "sink.txt"
    source.write_text(numbered_lines(0, 1000), encoding="utf-8")
    first, second = workers
    # Either worker takes the request: a follower forwards it to the leader.
    names = pipeline(second, group, source, sink, topic)
    placement: dict[str, str] = {}

    def spread() -> bool:
        for name in names:
            on = running_on(first.status(name))
            if on is None:
                return False
            placement[name] = on[0]
        return set(placement.values()) == {first.worker_id, second.worker_id}

    wait_until(spread, TIMEOUT, "each worker to run one of the two tasks")
    wait_copied(source, sink)

    victim = first if placement[names[0]] == first.worker_id else second
    survivor = second if victim is first else first
    append(source, numbered_lines(1000, 20000))
    kill_mid_stream(victim, broker, topic, after=1000)
    append(source, numbered_lines(21000, 1000))  # data keeps flowing after the kill

    def all_on_survivor() -> bool:
        return all(running_on(survivor.status(name)) == [survivor.worker_id] for name in names)

    wait_until(all_on_survivor, TIMEOUT, f"the tasks to move to {survivor.worker_id}")
    expected = read(source).splitlines()
    wait_until(
        lambda: set(read(sink).splitlines()) >= set(expected),
        TIMEOUT,
        "every line to reach the sink",
    )
    # At least once: the lines the dead worker sent after its last offset commit come
    # again, so the sink may repeat a stretch, but the first copies are the file in order.
    copied = complete_lines(sink)
    assert list(dict.fromkeys(copied)) == expected


def test_exactly_once_source_through_kill_9(
    broker: BrokerProcess, tmp_path: Path, group: str, topic: str
) -> None:
    """The worker is killed while its task sends, as a rule inside an open transaction,
    which the broker aborts when the restarted task's producer fences the old one (or on
    timeout); read_committed readers see each line once, in order."""
    source = tmp_path / "source.txt"
    source.write_text(numbered_lines(0, 1000), encoding="utf-8")
    # A restarted worker reads the offsets topic read_committed up to its high watermark
    # before it starts any task, so it waits for the dead task's open transaction to time
    # out (the producer's default: 60 s) when that transaction had written offsets too.
    eos = {"exactly.once.source.support": "enabled", "producer.transaction.timeout.ms": "5000"}
    w = worker(broker, tmp_path, group, eos)
    with w:
        name = f"{group}-source"
        w.put_connector(name, file_source(source, topic))
        append(source, numbered_lines(1000, 20000))
        kill_mid_stream(w, broker, topic, after=1000)
        w.start()
        expected = read(source).splitlines()
        wait_until(
            lambda: [o["offset"] for o in w.offsets(name)] == [{"position": source.stat().st_size}],
            TIMEOUT,
            "the source to commit the end of the file",
        )
        assert topic_values(broker, topic, "read_committed") == expected


@compat("java", "security")
def test_file_copied_over_sasl_ssl_with_acls(
    secured: SaslSslBroker, tmp_path: Path, group: str
) -> None:
    """Every client of the worker (its own, the source's producer, the sink's consumer,
    the admins) authenticates with SCRAM-SHA-512 over TLS as a user allowed only its
    topics (the internal ones and the data topic, all named after the group), its group
    and the sink's group: the file arrives byte for byte."""
    user = group
    properties = secured.user(user, f"{user}-secret")
    topic = f"{group}-lines"
    secured.broker.create_topic(topic)
    secured.allow(
        user,
        ResourceType.TOPIC,
        group,
        [AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE],
        ResourcePatternType.PREFIXED,
    )
    secured.allow(user, ResourceType.GROUP, group, [AclOperation.READ])
    secured.allow(user, ResourceType.GROUP, f"connect-{group}-sink", [AclOperation.READ])
    source, sink = tmp_path / "source.txt", tmp_path / "sink.txt"
    source.write_text(numbered_lines(0, 1000), encoding="utf-8")
    overrides = {**WORKER_OVERRIDES, **client_properties(properties)}
    with ConnectWorker(tmp_path, secured.bootstrap, group, 1, overrides) as w:
        names = pipeline(w, group, source, sink, topic)
        wait_copied(source, sink)
        assert read(sink) == read(source)
        assert [running_on(w.status(name)) for name in names] == [[w.worker_id]] * 2
