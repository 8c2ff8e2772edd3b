"""Clients pinned to a protocol release instead of negotiating one.

kafka-python with ``api_version`` set skips its inference and takes the request versions
from its table for that release (``kafka/protocol/broker_version_data.py``,
``BROKER_API_VERSIONS``): many applications pin it, and kafka-python's own integration suite
pins ``(4, 0, 0)``. It still sends ApiVersions, but keeps its table whenever the broker's
answer infers as the same release or a later one, so every request version the table names
for the pinned release must be one the broker serves: Gregor once advertised Produce v13
with Metadata only to v12, kafka-python pinned to 4.0 sent Metadata v13, and Gregor closed
the connection. Each pinned release here bootstraps, creates and describes a topic, lists
it, describes its configs, produces keyed records with acks=all, consumes them in a group,
commits, lists the group, and a second member of the group resumes from the commit; and no
broker log line says a request was refused.

librdkafka (confluent-kafka) with ``api.version.request=false`` and
``broker.version.fallback``: see ``test_librdkafka_fallback_that_still_queries`` and
``test_librdkafka_fallback_kafka4_cannot_serve`` for what librdkafka then does and why.
"""

from __future__ import annotations

import re
import subprocess
import time
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic
from kafka.structs import OffsetAndMetadata

from compat_tests.broker import BrokerProcess
from compat_tests.confluent_admin import create_topic
from compat_tests.group_checks import SESSION_OVERRIDES
from compat_tests.matrix import compat

# The releases the issue names: 2.6 and 3.9 (ZooKeeper era), 4.0 (what kafka-python's own
# suite pins) and 4.1 (the release Gregor's version table follows).
PINNED = [(2, 6), (3, 9), (4, 0), (4, 1)]
# Each kafka-python test joins a new group twice: without this the first join of an empty
# group waits Kafka's default group.initial.rebalance.delay.ms (3 s) each time.
BROKER_OVERRIDES = SESSION_OVERRIDES
PARTITIONS = 2
FIRST, SECOND = 10, 4  # records before and after the first member commits
RETENTION_MS = "3600000"
TIMEOUT_S = 30
# What the dispatcher writes when it refuses a request ("Closing connection from ...:
# unsupported API key 3 version 13", or a request its schema cannot decode).
REFUSED = re.compile(r"unsupported|malformed", re.IGNORECASE)


class BrokerLogs:
    """The lines every broker of the fixture logged since this was made."""

    def __init__(self, broker: BrokerProcess) -> None:
        cluster = getattr(broker, "cluster", None)
        paths = (
            [b.log_path for b in cluster.brokers.values()]
            if cluster is not None
            else [broker.log_path]
        )
        self.start = {p: p.stat().st_size if p.exists() else 0 for p in paths}

    def new_lines(self) -> list[str]:
        lines: list[str] = []
        for path, offset in self.start.items():
            with open(path, "rb") as f:
                f.seek(offset)
                lines += f.read().decode(errors="replace").splitlines()
        return lines

    def refusals(self) -> list[str]:
        return [line for line in self.new_lines() if REFUSED.search(line)]


def version_id(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


def produce(
    broker: BrokerProcess, topic: str, api_version: tuple[int, int], keys: range
) -> dict[int, list[int]]:
    """Send one keyed record per key (acks=all); the offsets acknowledged, per partition."""
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap, api_version=api_version, acks="all", linger_ms=5
    )
    try:
        futures = [producer.send(topic, key=f"k{i}".encode(), value=f"v{i}".encode()) for i in keys]
        producer.flush(TIMEOUT_S)
        acked: dict[int, list[int]] = {}
        for future in futures:
            meta = future.get(timeout=TIMEOUT_S)
            acked.setdefault(meta.partition, []).append(meta.offset)
        return acked
    finally:
        producer.close(timeout=TIMEOUT_S)


def consume(consumer: KafkaConsumer, count: int) -> list[tuple[int, int, bytes, bytes]]:
    """Poll until ``count`` records came: (partition, offset, key, value) of each."""
    got: list[tuple[int, int, bytes, bytes]] = []
    deadline = time.monotonic() + TIMEOUT_S * 2
    while len(got) < count:
        assert time.monotonic() < deadline, f"consumed {len(got)} of {count} records"
        for batch in consumer.poll(timeout_ms=200).values():
            got += [(m.partition, m.offset, m.key, m.value) for m in batch]
    return got


def group_consumer(
    broker: BrokerProcess, topic: str, group: str, api_version: tuple[int, int]
) -> KafkaConsumer:
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        api_version=api_version,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    consumer.subscribe([topic])
    return consumer


@compat("kafka-python", "pinned")
@pytest.mark.parametrize("api_version", PINNED, ids=version_id)
def test_kafka_python_pinned(
    broker: BrokerProcess, new_topic: Callable[[str], str], api_version: tuple[int, int]
) -> None:
    logs = BrokerLogs(broker)
    topic = new_topic(f"pinned-{version_id(api_version)}")
    group = f"pinned-group-{uuid.uuid4().hex[:8]}"
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, api_version=api_version)
    try:
        admin.create_topics(
            [
                NewTopic(
                    topic,
                    num_partitions=PARTITIONS,
                    replication_factor=broker.replication_factor,
                    topic_configs={"retention.ms": RETENTION_MS},
                )
            ]
        )
        broker.wait_for_topic(topic, PARTITIONS)
        assert topic in admin.list_topics()
        (described,) = admin.describe_topics([topic])
        assert described["name"] == topic and described["error_code"] == 0, described
        assert len(described["partitions"]) == PARTITIONS, described
        configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        # Only the configs set on the topic come back (the default filter: modified).
        assert configs["topic"][topic]["retention.ms"]["value"] == RETENTION_MS, configs

        acked = produce(broker, topic, api_version, range(FIRST))
        assert sum(len(offsets) for offsets in acked.values()) == FIRST
        for partition, offsets in acked.items():
            assert sorted(offsets) == list(range(len(offsets))), (partition, offsets)
        ends = {tp: len(acked.get(tp.partition, [])) for tp in tps}

        first = group_consumer(broker, topic, group, api_version)
        try:
            got = consume(first, FIRST)
            assert sorted(k for _, _, k, _ in got) == sorted(f"k{i}".encode() for i in range(FIRST))
            first.commit()
            assert {tp: first.committed(tp) for tp in tps} == ends
        finally:
            first.close()

        listed = admin.list_groups()
        assert group in {g["group_id"] for g in listed}, listed

        produce(broker, topic, api_version, range(FIRST, FIRST + SECOND))
        second = group_consumer(broker, topic, group, api_version)
        try:
            assert {tp: second.committed(tp) for tp in tps} == ends
            got = consume(second, SECOND)
            # From the commit on: the second batch only, nothing of the first again.
            assert sorted(k for _, _, k, _ in got) == sorted(
                f"k{i}".encode() for i in range(FIRST, FIRST + SECOND)
            )
            assert all(offset >= ends[TopicPartition(topic, p)] for p, offset, _, _ in got)
            second.commit({TopicPartition(topic, 0): OffsetAndMetadata(0, "", -1)})
            assert second.committed(TopicPartition(topic, 0)) == 0
        finally:
            second.close()
    finally:
        admin.close()
    assert logs.refusals() == []


# librdkafka's legacy protocol tables (src/rdkafka_feature.c, rd_kafka_get_legacy_ApiVersions)
# cover these four releases; any other broker.version.fallback is "queryable".
LEGACY_FALLBACK = "0.9.0"
# Long enough for the refused Produce to be sent and its connection closed (at once).
MESSAGE_TIMEOUT_MS = 2000


def refusals_by_broker(logs: BrokerLogs, api_key: int, version: int) -> list[int]:
    """How many refusal lines each broker logged naming ``api_key`` at ``version``."""
    named = re.compile(rf"\bkey {api_key}\b.*\bversion {version}\b")
    counts = []
    for path, offset in logs.start.items():
        with open(path, "rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
        counts.append(
            sum(1 for line in text.splitlines() if REFUSED.search(line) and named.search(line))
        )
    return counts


def confluent_round_trip(broker: BrokerProcess, topic: str, **config: str | int) -> None:
    """Produce three keyed records (acks=all) and read them back from offset 0."""
    reports: list[tuple[KafkaError | None, object]] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", **config})
    for i in range(3):
        producer.produce(
            topic, key=f"k{i}", value=f"v{i}", on_delivery=lambda e, m: reports.append((e, m))
        )
    assert producer.flush(TIMEOUT_S) == 0
    assert [e for e, _ in reports] == [None] * 3, reports
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused", **config})
    try:
        consumer.assign([CTopicPartition(topic, 0, OFFSET_BEGINNING)])
        got: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < 3:
            assert time.monotonic() < deadline, f"consumed {got}"
            for msg in consumer.consume(num_messages=10, timeout=0.2):
                assert msg.error() is None, msg.error()
                got.append(msg.value())
        assert got == [b"v0", b"v1", b"v2"]
    finally:
        consumer.close()


@compat("confluent", "pinned")
@pytest.mark.parametrize("fallback", ["0.10.0", "2.6.0", "4.1.0"])
def test_librdkafka_fallback_that_still_queries(
    broker: BrokerProcess, new_topic: Callable[[str], str], fallback: str
) -> None:
    """``api.version.request=false`` is overridden by any fallback librdkafka has no legacy
    table for: rd_kafka_new() sets ``api_version_request = 1`` when
    ``rd_kafka_ApiVersion_is_queryable(broker_version_fallback)`` (src/rdkafka.c), which is
    every version but the prefixes 0.9.0, 0.8.2, 0.8.1, 0.8.0 (and the refused 0.7./0.6.) of
    rd_kafka_get_legacy_ApiVersions (src/rdkafka_feature.c); CONFIGURATION.md: "Valid
    values are: 0.9.0, 0.8.2, 0.8.1, 0.8.0. Any other value >= 0.10, such as 0.10.2.1,
    enables ApiVersionRequests" (librdkafka 2.16 prints the same text when the property is
    set, as deprecated: brokers < 0.10 go in librdkafka 3). So the client negotiates as
    usual, against Kafka 4 as against Gregor. That it did is in the outcome: the only
    fallback table such a value maps to holds ApiVersion alone, so without the query
    librdkafka would send Produce v0, which neither Kafka 4 nor Gregor serves."""
    logs = BrokerLogs(broker)
    topic = new_topic("rdkafka-fallback")
    create_topic(broker, topic, 1)
    confluent_round_trip(
        broker, topic, **{"api.version.request": False, "broker.version.fallback": fallback}
    )
    assert logs.refusals() == []


@compat("confluent", "pinned")
def test_librdkafka_fallback_kafka4_cannot_serve(
    broker: BrokerProcess, new_topic: Callable[[str], str]
) -> None:
    """``api.version.request=false`` with ``broker.version.fallback=0.9.0``: librdkafka
    takes the versions of its 0.9.0 table (src/rdkafka_feature.c,
    rd_kafka_ApiVersion_0_9_0: Produce 0-1, Fetch 0-1, ListOffsets 0, Metadata 0,
    OffsetCommit 0-2, OffsetFetch 0-1, FindCoordinator/JoinGroup/Heartbeat/LeaveGroup/
    SyncGroup/DescribeGroups/ListGroups 0) and no feature that needs Produce v2+ (MsgVer1,
    MsgVer2: rd_kafka_feature_map), so it sends Metadata v0 (which Kafka 4 still serves),
    then Produce v1 with a v0/v1 message set, and a consumer ListOffsets v0 or Fetch v1.
    Kafka 4 removed Produce v0-2, Fetch v0-3, ListOffsets v0 and message formats v0/v1
    (KIP-896; Produce stays advertised from v0 but v0-2 requests are refused), so such a
    client cannot work against Kafka 4: the broker closes the connection, librdkafka
    reconnects and sends it again (about once a second, forever): the producer's
    application gets each message back as _MSG_TIMED_OUT after ``message.timeout.ms``; a
    consumer gets no message. With a single broker the error callback also reports
    _ALL_BROKERS_DOWN meanwhile; in a cluster the client keeps its connections to the other
    brokers, so that error never comes, as against a Kafka 4 cluster (seen with librdkafka
    2.16.0 against Gregor, which refuses as Kafka 4 does; connection closed by peer is only
    logged by librdkafka, at level 6, not reported as an error).

    Gregor must do the same, log the refusal once per broker for that client, API and
    version rather than once per attempt, and keep serving other clients meanwhile."""
    logs = BrokerLogs(broker)
    # With one broker, its closing the connection leaves librdkafka none up; in a cluster
    # the client keeps its other brokers' connections, and has no such error to report.
    one_broker = len(logs.start) == 1
    topic = new_topic("rdkafka-legacy")
    create_topic(broker, topic, 1)
    # Its own client id: Gregor logs a refusal once per client host, client id, API and
    # version (apis/dispatch.py), and other tests of the module refuse the same requests.
    legacy = {
        "api.version.request": False,
        "broker.version.fallback": LEGACY_FALLBACK,
        "client.id": f"legacy-{uuid.uuid4().hex[:8]}",
    }
    errors: list[KafkaError] = []
    reports: list[tuple[KafkaError | None, float]] = []
    started = time.monotonic()
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "message.timeout.ms": MESSAGE_TIMEOUT_MS,
            "error_cb": errors.append,
            **legacy,
        }
    )
    producer.produce(
        topic,
        key=b"k",
        value=b"v",
        on_delivery=lambda e, m: reports.append((e, time.monotonic() - started)),
    )
    # Meanwhile, a client that negotiates is served as usual.
    other = new_topic("rdkafka-other")
    create_topic(broker, other, 1)
    confluent_round_trip(broker, other)
    assert producer.flush(MESSAGE_TIMEOUT_MS / 1000 + 10) == 0
    ((error, after),) = reports
    assert error is not None and error.code() == KafkaError._MSG_TIMED_OUT, error
    assert after < MESSAGE_TIMEOUT_MS / 1000 + 5
    if one_broker:
        assert any(e.code() == KafkaError._ALL_BROKERS_DOWN for e in errors), errors
    per_broker = refusals_by_broker(logs, 0, 1)
    assert sum(per_broker) >= 1 and max(per_broker) == 1, per_broker

    consumer_errors: list[KafkaError] = []
    started_consumer = time.monotonic()
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "unused",
            "error_cb": consumer_errors.append,
            **legacy,
        }
    )
    try:
        consumer.assign([CTopicPartition(other, 0, OFFSET_BEGINNING)])
        # Until the leader refused the ListOffsets v0 and, with one broker, the application
        # heard of it; the consumer never gets a record meanwhile.
        deadline = time.monotonic() + 15
        while not (
            sum(refusals_by_broker(logs, 2, 0))
            and (consumer_errors or not one_broker)
            and time.monotonic() > started_consumer + 3
        ):
            assert time.monotonic() < deadline, ("no refusal or error", consumer_errors)
            msg = consumer.poll(0.2)
            assert msg is None or msg.error() is not None, msg.value()
    finally:
        consumer.close()
    if one_broker:
        assert any(e.code() == KafkaError._ALL_BROKERS_DOWN for e in consumer_errors)
    per_broker = refusals_by_broker(logs, 2, 0)
    assert max(per_broker) == 1, per_broker
    assert broker.running
    after_all = new_topic("rdkafka-after")
    create_topic(broker, after_all, 1)
    confluent_round_trip(broker, after_all)


def kcat(broker: BrokerProcess, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    return subprocess.run(
        ["kcat", "-b", broker.bootstrap, *args], input=stdin, capture_output=True, timeout=60
    )


@compat("kcat", "pinned")
def test_kcat_fallback(broker: BrokerProcess, new_topic: Callable[[str], str]) -> None:
    """kcat on Debian's librdkafka 2.0.2, which has the same legacy tables and the same
    override of ``api.version.request=false`` as librdkafka 2.16 (see the two tests above):
    with ``broker.version.fallback=0.10.0`` it queries the versions and produces and
    consumes; with 0.9.0 it sends Produce v1 (and ListOffsets v0 to consume), the broker
    closes the connection as Kafka 4 does, and kcat reports the failure and exits 1 within
    ``message.timeout.ms`` (with one broker at once: it ends when all its brokers are
    down). Gregor logs that once, and keeps serving."""
    logs = BrokerLogs(broker)
    topic = new_topic("kcat-fallback")
    create_topic(broker, topic, 1)
    pinned = ["-X", "api.version.request=false", "-X", "message.timeout.ms=3000"]
    modern = [*pinned, "-X", "broker.version.fallback=0.10.0"]
    done = kcat(broker, "-P", "-t", topic, "-K", ":", *modern, stdin=b"k1:v1\nk2:v2\n")
    assert done.returncode == 0, done.stderr
    done = kcat(broker, "-C", "-t", topic, "-o", "beginning", "-e", "-c", "2", *modern)
    assert (done.returncode, done.stdout) == (0, b"v1\nv2\n"), done.stderr

    legacy = [*pinned, "-X", f"broker.version.fallback={LEGACY_FALLBACK}"]
    legacy += ["-X", f"client.id=kcat-legacy-{uuid.uuid4().hex[:8]}"]  # as in the test above
    started = time.monotonic()
    done = kcat(broker, "-P", "-t", topic, *legacy, stdin=b"lost\n")
    assert done.returncode == 1 and b"ERROR" in done.stderr, done
    assert time.monotonic() - started < 3 + 10
    assert max(refusals_by_broker(logs, 0, 1)) == 1
    if len(logs.start) == 1:
        done = kcat(broker, "-C", "-t", topic, "-o", "beginning", "-e", *legacy)
        assert (done.returncode, done.stdout) == (1, b""), done
        assert refusals_by_broker(logs, 2, 0) == [1]
    done = kcat(broker, "-C", "-t", topic, "-o", "beginning", "-e", "-c", "2", *modern)
    assert (done.returncode, done.stdout) == (0, b"v1\nv2\n"), done.stderr
