"""The Prometheus endpoint of a real broker process, scraped over HTTP and parsed with
prometheus_client's parser while confluent-kafka produces and consumes: the topic
counters, request counts and time histograms, consumer-group lag, log sizes against the
files on disk, partition state, throttle time, and the endpoint's configuration."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from compat_tests.broker import BrokerProcess
from compat_tests.confluent_admin import create_topic, delete_topic
from gregor.server.config import BrokerConfig, ConfigError
from gregor.server.harness.broker_process import BrokerProcessError as BrokerError
from gregor.server.metrics import BUCKETS_MS, TIMES, BrokerMetrics
from tests.kafka_wire import WireClient
from tests.prometheus_scrape import Scrape
from tests.test_client_quotas import alter
from tests.test_metrics_hostile import start_with_metrics

KEY_SIZE, VALUE_SIZE = 8, 100
BATCH_HEADER = 61  # RecordBatch v2's header
# A record's own bytes besides its key and value: length, attributes, timestamp delta,
# offset delta, key length, value length and header count, each a varint of 1 byte at
# least; with these sizes, a batch under 8192 records and its timestamps within 2^20 ms,
# at most 2 + 1 + 3 + 2 + 1 + 2 + 1.
RECORD_OVERHEAD_MIN, RECORD_OVERHEAD_MAX = 7, 12


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    overrides = {"quota.window.num": "2"}
    proc = start_with_metrics(tmp_path_factory.mktemp("metrics"), overrides)
    try:
        yield proc
    finally:
        proc.stop()


def _key(i: int) -> bytes:
    return f"{i:0{KEY_SIZE}d}".encode()


def _produce(broker: BrokerProcess, topic: str, partition: int, count: int, **config: str) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": "20", **config})
    for i in range(count):
        producer.produce(topic, b"v" * VALUE_SIZE, key=_key(i), partition=partition)
    assert producer.flush(30) == 0


def _consume_all(broker: BrokerProcess, topic: str, partitions: int, count: int) -> None:
    """Read every record once, from the start, without a group."""
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen = 0
    deadline = time.monotonic() + 30
    while seen < count and time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is not None and message.error() is None:
            seen += 1
    consumer.close()
    assert seen == count


def _segment_bytes(broker: BrokerProcess, topic: str, partition: int) -> int:
    return sum(p.stat().st_size for p in (broker.data_dir / f"{topic}-{partition}").glob("*.log"))


def test_produce_and_consume_move_the_counters_by_what_was_sent(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    topic, partitions, per_partition = "moves", 2, 1500
    create_topic(broker, topic, partitions)
    before = Scrape(broker)
    # Scrapes all along the run: every one answers, and the counters never go back.
    seen: list[float] = []
    stop = threading.Event()

    def scrape_meanwhile() -> None:
        # Two at least: scrapes are computed at most every so often (a fast run may be over
        # before the second).
        while not stop.is_set() or len(seen) < 2:
            seen.append(Scrape(broker).value("kafka_server_brokertopicmetrics_messagesin_total"))

    scraper = threading.Thread(target=scrape_meanwhile)
    scraper.start()
    try:
        for p in range(partitions):
            _produce(broker, topic, p, per_partition)
        _consume_all(broker, topic, partitions, partitions * per_partition)
    finally:
        stop.set()
        scraper.join()
    assert len(seen) >= 2 and seen == sorted(seen)
    after = Scrape(broker)

    n = partitions * per_partition
    assert after.value("kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == n
    bytes_in = after.value("kafka_server_brokertopicmetrics_bytesin_total", topic=topic)
    # Stored byte for byte as sent (no compression): what came in is what is on disk.
    assert bytes_in == sum(_segment_bytes(broker, topic, p) for p in range(partitions))
    count = "kafka_network_requestmetrics_totaltimems_count"
    produces = after.value(count, request="Produce") - before.value(count, request="Produce")
    assert 1 <= produces <= n
    record = KEY_SIZE + VALUE_SIZE
    assert n * (record + RECORD_OVERHEAD_MIN) + BATCH_HEADER <= bytes_in
    # At most one batch per partition of each request.
    assert bytes_in <= n * (record + RECORD_OVERHEAD_MAX) + produces * partitions * BATCH_HEADER
    # One consumer read each batch once, whole (fetches return whole batches).
    assert after.value("kafka_server_brokertopicmetrics_bytesout_total", topic=topic) == bytes_in
    for name in ("bytesin", "messagesin", "bytesout"):
        total = f"kafka_server_brokertopicmetrics_{name}_total"
        assert after.value(total) - before.value(total) == after.value(total, topic=topic)

    fetches = after.value(count, request="Fetch")
    assert fetches > before.value(count, request="Fetch")
    assert fetches == after.value(count, request="FetchConsumer")
    assert after.value(count, request="FetchFollower") == 0
    _assert_histograms_consistent(after)


def _assert_histograms_consistent(scrape: Scrape) -> None:
    """Per request type: as many observations in every time histogram as requests counted,
    cumulative buckets, and the parts of the time adding up to the total."""
    requests = scrape.labelled("kafka_network_requestmetrics_requests_total", "request")
    assert {"Produce", "Fetch", "FetchConsumer", "Metadata", "ApiVersions"} <= requests
    for request in requests:
        count = sum(
            v
            for (name, labels), v in scrape.samples.items()
            if name == "kafka_network_requestmetrics_requests_total"
            and dict(labels)["request"] == request
        )
        for time_name in TIMES:
            family = f"kafka_network_requestmetrics_{time_name.lower()}"
            assert scrape.types[family] == "histogram"
            buckets = [
                scrape.value(f"{family}_bucket", request=request, le=le)
                for le in [*(str(float(b)) for b in BUCKETS_MS), "+Inf"]
            ]
            assert buckets == sorted(buckets), (request, time_name, buckets)
            assert buckets[-1] == scrape.value(f"{family}_count", request=request) == count
        parts = sum(
            scrape.value(f"kafka_network_requestmetrics_{t.lower()}_sum", request=request)
            for t in ("RequestQueueTimeMs", "LocalTimeMs", "RemoteTimeMs", "ResponseSendTimeMs")
        )
        total = scrape.value("kafka_network_requestmetrics_totaltimems_sum", request=request)
        assert parts == pytest.approx(total, rel=1e-6, abs=1e-6)


def test_exactly_one_produce_request_per_synchronous_send(broker: BrokerProcess) -> None:
    topic = "one-by-one"
    create_topic(broker, topic, 1)
    before = Scrape(broker)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": "0"})
    for i in range(10):
        producer.produce(topic, b"v" * VALUE_SIZE, key=_key(i))
        assert producer.flush(10) == 0
    after = Scrape(broker)
    for name in ("requests_total", "localtimems_count", "totaltimems_count"):
        sample = f"kafka_network_requestmetrics_{name}"
        moved = sum(
            v - before.samples.get((n, labels), 0.0)
            for (n, labels), v in after.samples.items()
            if n == sample and dict(labels)["request"] == "Produce"
        )
        assert moved == 10, name
    assert after.value("kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == 10


def test_consumer_group_lag_after_a_partial_commit(broker: BrokerProcess) -> None:
    topic, group = "lagging", "metrics-group"
    create_topic(broker, topic, 2)
    _produce(broker, topic, 0, 300)
    _produce(broker, topic, 1, 200)
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    consumer.commit(
        offsets=[TopicPartition(topic, 0, 120), TopicPartition(topic, 1, 200)], asynchronous=False
    )
    consumer.close()
    scrape = Scrape(broker)
    labels = {"consumergroup": group, "topic": topic}
    assert scrape.value("kafka_consumergroup_current_offset", partition="0", **labels) == 120
    assert scrape.value("kafka_consumergroup_lag", partition="0", **labels) == 180
    assert scrape.value("kafka_consumergroup_current_offset", partition="1", **labels) == 200
    assert scrape.value("kafka_consumergroup_lag", partition="1", **labels) == 0


def test_log_gauges_match_the_files_on_disk_and_the_node_is_healthy(
    broker: BrokerProcess,
) -> None:
    topic = "sized"
    create_topic(broker, topic, 3)
    for p, count in enumerate((0, 10, 700)):
        _produce(broker, topic, p, count)
    scrape = Scrape(broker)
    for p, count in enumerate((0, 10, 700)):
        labels = {"topic": topic, "partition": str(p)}
        assert scrape.value("kafka_log_log_size", **labels) == _segment_bytes(broker, topic, p)
        assert scrape.value("kafka_log_log_logendoffset", **labels) == count
        assert scrape.value("kafka_log_log_logstartoffset", **labels) == 0
        assert scrape.value("kafka_log_log_numlogsegments", **labels) == 1
    assert _segment_bytes(broker, topic, 2) > 700 * VALUE_SIZE
    hosted = sum(1 for d in broker.data_dir.iterdir() if d.name.rpartition("-")[2].isdigit())
    assert scrape.value("kafka_server_replicamanager_partitioncount") == hosted >= 3
    assert scrape.value("kafka_server_replicamanager_leadercount") == hosted
    assert scrape.value("kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert scrape.value("kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    assert scrape.value("kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert scrape.value("process_resident_memory_bytes") > 0


def test_throttle_time_of_a_client_over_its_quota(broker: BrokerProcess) -> None:
    topic = "throttled"
    create_topic(broker, topic, 1)
    client = WireClient(broker.port)
    try:
        assert alter(client, [({"client-id": "slow"}, {"producer_byte_rate": 1024})])[0][0] == 0
    finally:
        client.close()
    before = Scrape(broker)
    _produce(broker, topic, 0, 200, **{"client.id": "slow"})  # 20 KB against 1 KiB/s
    after = Scrape(broker)
    name = "kafka_network_requestmetrics_throttletimems"
    throttled = after.value(f"{name}_count", request="Produce") - after.value(
        f"{name}_bucket", request="Produce", le="0.1"
    )
    assert throttled >= 1
    assert after.value(f"{name}_sum", request="Produce") > before.value(
        f"{name}_sum", request="Produce"
    )


def test_a_deleted_topics_series_go_and_the_all_topics_total_stays(broker: BrokerProcess) -> None:
    topic = "short-lived"
    create_topic(broker, topic, 1)
    _produce(broker, topic, 0, 50)
    before = Scrape(broker)
    assert before.value("kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == 50
    delete_topic(broker, topic)
    after = Scrape(broker)
    assert topic not in after.labelled("kafka_server_brokertopicmetrics_messagesin_total", "topic")
    assert topic not in after.labelled("kafka_log_log_size", "topic")
    total = "kafka_server_brokertopicmetrics_messagesin_total"
    assert after.value(total) == before.value(total)


def test_the_endpoint_is_off_by_default_and_its_port_is_checked(tmp_path: Path) -> None:
    assert BrokerConfig({})["metrics.prometheus.port"] == -1
    with pytest.raises(ConfigError, match="metrics.prometheus.port"):
        BrokerConfig({"metrics.prometheus.port": "65536"})
    # A port that cannot be bound stops start-up with a message naming the keys.
    with socket_bound() as port:
        proc = BrokerProcess(tmp_path, {"metrics.prometheus.port": str(port)}, start_timeout_s=10)
        with pytest.raises(BrokerError, match=r"Cannot serve metrics .*metrics\.prometheus\.port"):
            proc.start()
        proc.stop()


@contextlib.contextmanager
def socket_bound() -> Iterator[int]:
    """A port some other socket listens on, for the block's duration."""
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_request_times_fall_in_their_buckets() -> None:
    """The C counter (server/_histograms.c) on hand-made timings: a bucket is
    bit_length(ns / 0.125 ms), the slot after +Inf sums the nanoseconds."""
    metrics = BrokerMetrics()
    ms = 1_000_000
    produce = [0, 9, 0, ms // 10, 0, ms // 2, 3 * ms, 1, metrics]  # answered at once
    parked = [0, 9, 0, 0, ms // 10, 40_000 * ms, 40_001 * ms, 0, metrics]  # past 32768 ms
    metrics.batch = [produce, parked]
    metrics.flush()
    stats = metrics.requests[0]
    assert stats.versions[9] == 2 and sum(stats.versions) == 2
    slots = len(BUCKETS_MS) + 2
    histograms = {name: stats.data[i * slots : (i + 1) * slots] for i, name in enumerate(TIMES)}
    inf = len(BUCKETS_MS)
    expected = {  # name: (buckets of produce and parked, sum in ns)
        "TotalTimeMs": ([5, inf], 3 * ms + 40_001 * ms),  # 3 ms: le 4 ms
        "RequestQueueTimeMs": ([0, 0], ms // 10),  # 0.1 ms: le 0.125 ms
        "LocalTimeMs": ([2, 0], 2 * ms // 5 + ms // 10),  # 0.4 ms: le 0.5 ms
        "RemoteTimeMs": ([0, inf], 40_000 * ms - ms // 10),
        "ResponseSendTimeMs": ([5, 4], 5 * ms // 2 + ms),  # 2.5 ms: le 4; 1 ms: le 2
        "ThrottleTimeMs": ([3, 0], ms),  # whole milliseconds: 1 ms in le 1 ms
    }
    for name, (buckets, total) in expected.items():
        counts = [0] * (inf + 1)
        for bucket in buckets:
            counts[bucket] += 1
        assert list(histograms[name][:-1]) == counts, name
        assert histograms[name][-1] == total, name
