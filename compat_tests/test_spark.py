"""Spark's built-in Kafka source and sink (spark-sql-kafka-0-10, PySpark 4.3.0, local[2])
against a real Gregor process, and the reference pipeline (scripts/spark_pipeline).

One SparkSession (one JVM) serves the module. The tests run against one broker, not twice
like the rest of compat_tests: each Spark check costs seconds of JVM work on a 2-core
machine, and the cluster's part for Spark is the loss of a partition leader, tested on its
own 3-broker cluster below. One test runs against a broker secured as in production
(``compat_tests/sasl_ssl_broker.py``: SASL_SSL, SCRAM-SHA-512, ACLs).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AclOperation, AdminClient, NewTopic, ResourceType
from py4j.protocol import Py4JJavaError
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from compat_tests.broker import REPO_ROOT, BrokerProcess
from compat_tests.matrix import compat
from compat_tests.process_pool import ProcessPool
from compat_tests.records import (
    Rec,
    assert_round_trip,
    by_partition,
    offset_for_time,
    sample_records,
)
from compat_tests.sasl_ssl_broker import SaslSslBroker, secured_broker
from compat_tests.spark_checks import (
    BatchCollector,
    PacedProducer,
    read_batch,
    sink_frame,
)
from compat_tests.test_confluent import consume, produce
from compat_tests.txn_checks import TXN_OVERRIDES, wait_for
from gregor.server.harness.cluster import Cluster
from scripts.spark_pipeline import events, job, results
from scripts.spark_pipeline.session import new_session

pytestmark = compat("java", "spark")  # Spark's connector runs on the Java client

TIMEOUT_S = 120
# The JIT's first tier only and the serial collector: the tests' JVMs live a minute or two,
# too short for the optimising compiler's threads to pay for the cores they take from the
# broker on a 2-core machine (measured: the pipeline's first run 17-30 s instead of 36-45 s).
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    local = tmp_path_factory.mktemp("spark-local")
    conf = {"spark.local.dir": str(local), "spark.driver.extraJavaOptions": JVM_OPTIONS}
    session = new_session("gregor-compat", conf=conf, log_level="ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def broker(process_pool: ProcessPool) -> BrokerProcess:
    return process_pool.broker(TXN_OVERRIDES)


@pytest.fixture(scope="module")
def secured(process_pool: ProcessPool, tmp_path_factory: pytest.TempPathFactory) -> SaslSslBroker:
    return secured_broker(process_pool, tmp_path_factory)


@pytest.fixture
def topic_factory(broker: BrokerProcess) -> Callable[..., str]:
    """create(partitions=1, config=None, prefix="spark") -> a fresh topic's name."""

    def create(
        partitions: int = 1, config: dict[str, str] | None = None, prefix: str = "spark"
    ) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        client = AdminClient({"bootstrap.servers": broker.bootstrap})
        client.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name].result(30)
        return name

    return create


def stream(spark: SparkSession, bootstrap: str, topic: str, **options: str) -> DataFrame:
    """A streaming read of ``topic`` from the earliest offsets."""
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def input_rows(query: StreamingQuery) -> list[int]:
    """numInputRows of each micro-batch the query ran."""
    return [p["numInputRows"] for p in query.recentProgress]


def await_query(query: StreamingQuery, check: Callable[[], object], what: str) -> None:
    """Until ``check()`` holds; fails at once, with the query's error, if the query stops."""

    def holds() -> object:
        if not query.isActive:
            raise AssertionError(f"query stopped awaiting {what}: {query.exception()}")
        return check()

    wait_for(holds, what)


def values(rows: list[Rec]) -> list[str]:
    return [(r.value or b"").decode() for r in rows]


# -- batch --------------------------------------------------------------------------------


def test_batch_write_then_read(
    spark: SparkSession, broker: BrokerProcess, topic_factory: Callable[..., str]
) -> None:
    """Spark's sink writes keyed and unkeyed records, null values and headers to chosen
    partitions; Spark's source and confluent-kafka read back exactly those, in order."""
    topic = topic_factory(3)
    sent = sample_records(3, 100)
    before = int(time.time() * 1000)
    (
        sink_frame(spark, sent)
        .write.format("kafka")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("topic", topic)
        .save()
    )
    after = int(time.time() * 1000)

    got = read_batch(spark, broker.bootstrap, topic)
    assert len(got) == 300
    # Spark's producer stamps its own CreateTime.
    assert all(before <= r.timestamp <= after for r in got)
    unstamped = [replace(r, timestamp=0) for r in sent]
    assert_round_trip(unstamped, [replace(r, timestamp=0) for r in got])
    by_confluent = consume(broker, topic, 3, 300)
    assert_round_trip(unstamped, [replace(r, timestamp=0) for r in by_confluent])


def test_include_headers(
    spark: SparkSession, broker: BrokerProcess, topic_factory: Callable[..., str]
) -> None:
    """Headers as confluent-kafka sent them (repeated keys, empty and null values) come back
    with includeHeaders, with the records' CreateTimes; without it there is no column."""
    topic = topic_factory(2)
    sent = sample_records(2, 30)
    produce(broker, topic, sent)
    got = read_batch(spark, broker.bootstrap, topic)
    assert_round_trip(sent, got)
    assert any(r.headers for r in got) and any(v is None for r in got for _, v in r.headers)
    plain = spark.read.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
    assert "headers" not in plain.option("subscribe", topic).load().columns


def test_offsets_by_timestamp_and_ending_offsets(
    spark: SparkSession, broker: BrokerProcess, topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(2)
    sent = sample_records(2, 50)
    produce(broker, topic, sent)
    stamps = sorted(r.timestamp for r in sent)
    mid = stamps[len(stamps) // 2] - 5  # between two records' times
    first: dict[int, int] = {}
    for p in (0, 1):
        offset = offset_for_time(sent, p, mid)
        assert offset is not None and 0 < offset < 50
        first[p] = offset
    parts = by_partition(sent)

    def expected(ranges: dict[int, tuple[int, int]]) -> list[tuple[int, int, Rec]]:
        return [
            (p, o, parts[p][o]) for p, (lo, hi) in sorted(ranges.items()) for o in range(lo, hi)
        ]

    def read(**options: str) -> list[tuple[int, int, Rec]]:
        return [
            (r.partition, r.offset, r)
            for r in read_batch(spark, broker.bootstrap, topic, **options)
        ]

    from_mid = expected({p: (first[p], 50) for p in (0, 1)})
    by_partition_json = json.dumps({topic: {"0": mid, "1": mid}})
    assert read(startingOffsetsByTimestamp=by_partition_json) == from_mid
    assert read(startingTimestamp=str(mid)) == from_mid
    ending = json.dumps({topic: {"0": 10, "1": -1}})
    assert read(endingOffsets=ending) == expected({0: (0, 10), 1: (0, 50)})
    until_mid = expected({p: (0, first[p]) for p in (0, 1)})
    assert read(endingTimestamp=str(mid)) == until_mid


def test_min_partitions_on_a_100_partition_topic(
    spark: SparkSession, broker: BrokerProcess, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    """A streaming read lists all 100 partitions' offsets, drops the empty ones and, with
    minPartitions, splits the others into that many read tasks, each record read once.

    Records go to 4 of the 100 partitions: each non-empty Kafka partition is a Spark task
    with a new consumer (0.3 s or more each on this machine, against Gregor or Tansu
    alike). A batch read is not used: it plans one task per partition, empty or not, and
    splits only when minPartitions exceeds the partition count."""
    topic = topic_factory(100)
    filled = (0, 33, 66, 99)
    sent = [f"{p}-{i}" for p in filled for i in range(50)]
    produce(broker, topic, [Rec(int(v.split("-")[0]), None, v.encode(), (), 0) for v in sent])

    def read_tasks(**options: str) -> list[int]:
        collected = BatchCollector()
        query = (
            stream(spark, broker.bootstrap, topic, **options)
            .writeStream.foreachBatch(collected)
            .option("checkpointLocation", str(tmp_path / uuid.uuid4().hex))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(TIMEOUT_S)
        assert sorted(collected.values) == sorted(sent)
        return [
            n
            for n, size in zip(collected.batch_partitions, collected.batch_sizes, strict=True)
            if size
        ]

    assert read_tasks() == [len(filled)]
    assert read_tasks(minPartitions="8") == [8]


# -- streaming ----------------------------------------------------------------------------


def test_streaming_to_a_topic_resumes_from_its_checkpoint(
    spark: SparkSession, broker: BrokerProcess, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    """Topic to topic with a checkpoint: the second run reads exactly the records that
    arrived after the first, and the output holds every input record once."""
    source, sink = topic_factory(2), topic_factory(1)
    sent = [Rec(i % 2, None, f"r{i}".encode(), (), 0) for i in range(150)]

    def run() -> int:
        query = (
            stream(spark, broker.bootstrap, source)
            .select("key", "value")
            .writeStream.format("kafka")
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .option("topic", sink)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(TIMEOUT_S)
        return sum(input_rows(query))

    produce(broker, source, sent[:100])
    assert run() == 100
    produce(broker, source, sent[100:])
    assert run() == 50
    assert Counter(values(read_batch(spark, broker.bootstrap, sink))) == Counter(values(sent))


def test_max_offsets_per_trigger(
    spark: SparkSession, broker: BrokerProcess, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    topic = topic_factory(1)
    produce(broker, topic, [Rec(0, None, f"m{i}".encode(), (), 0) for i in range(45)])
    collected = BatchCollector()
    query = (
        stream(spark, broker.bootstrap, topic, maxOffsetsPerTrigger="10")
        .writeStream.foreachBatch(collected)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(TIMEOUT_S)
    assert [n for n in collected.batch_sizes if n] == [10, 10, 10, 10, 5]
    assert collected.values == [f"m{i}" for i in range(45)]


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_fail_on_data_loss(
    spark: SparkSession,
    broker: BrokerProcess,
    topic_factory: Callable[..., str],
    tmp_path: Path,
    fail_on_data_loss: bool,
) -> None:
    """Records deleted (DeleteRecords) under a running query before it read them: with
    failOnDataLoss=true the query fails saying so; with false it skips to what is left."""
    topic = topic_factory(1)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    collected = BatchCollector()

    def first_batch_then_delete(batch: DataFrame, batch_id: int) -> None:
        collected(batch, batch_id)
        if batch_id == 0:  # the next batch will ask for offsets 10..99, 10..59 gone by then
            for i in range(10, 100):
                producer.produce(topic, str(i).encode())
            assert producer.flush(30) == 0
            (deleted,) = admin.delete_records([TopicPartition(topic, 0, 60)]).values()
            assert deleted.result(30).low_watermark == 60

    for i in range(10):
        producer.produce(topic, str(i).encode())
    assert producer.flush(30) == 0
    query = (
        stream(spark, broker.bootstrap, topic, failOnDataLoss=str(fail_on_data_loss).lower())
        .writeStream.foreachBatch(first_batch_then_delete)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        if fail_on_data_loss:
            with pytest.raises(StreamingQueryException) as failed:
                query.awaitTermination(TIMEOUT_S)
            assert "Some data may have been lost" in str(failed.value)
            assert "OffsetOutOfRangeException" in str(failed.value)
            assert collected.values == [str(i) for i in range(10)]
        else:
            wanted = [str(i) for i in [*range(10), *range(60, 100)]]
            await_query(query, lambda: len(collected.values) >= len(wanted), "the records left")
            assert collected.values == wanted
    finally:
        query.stop()


def test_read_committed(
    spark: SparkSession, broker: BrokerProcess, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    """kafka.isolation.level=read_committed over committed and aborted transactions (and an
    open one: it stops at the last stable offset) in batch and streaming reads."""
    topic = topic_factory(2)
    txn = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"spark-{topic}"})
    txn.init_transactions(30)
    for batch, commit in ((["c1", "c2"], True), (["a1", "a2"], False), (["c3"], True)):
        txn.begin_transaction()
        for i, value in enumerate(batch):
            txn.produce(topic, value.encode(), partition=i % 2)
        if commit:
            txn.commit_transaction(30)
        else:
            assert txn.flush(30) == 0  # the aborted records are in the log
            txn.abort_transaction(30)
    txn.begin_transaction()
    txn.produce(topic, b"open", partition=1)
    assert txn.flush(30) == 0

    committed = {"kafka.isolation.level": "read_committed"}

    def read(**options: str) -> list[tuple[int, int, str]]:
        rows = read_batch(spark, broker.bootstrap, topic, **options)
        return [(r.partition, r.offset, (r.value or b"").decode()) for r in rows]

    # Offsets 1 and 3 of each partition hold the transactions' markers.
    assert read(**committed) == [(0, 0, "c1"), (0, 4, "c3"), (1, 0, "c2")]
    assert read() == [
        (0, 0, "c1"),
        (0, 2, "a1"),
        (0, 4, "c3"),
        (1, 0, "c2"),
        (1, 2, "a2"),
        (1, 4, "open"),
    ]

    query = (
        stream(spark, broker.bootstrap, topic, **committed)
        .selectExpr("CAST(value AS STRING) AS v")
        .writeStream.format("memory")
        .queryName(f"committed_{uuid.uuid4().hex[:8]}")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(TIMEOUT_S)
    got = sorted(r.v for r in spark.table(query.name).collect())
    assert got == ["c1", "c2", "c3"]
    txn.commit_transaction(30)
    assert read(**committed)[-1] == (1, 4, "open")


def test_streaming_query_through_broker_kill_and_restart(
    spark: SparkSession, broker: BrokerProcess, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    """kill -9 of the only broker under a running query and a producer, then a restart on
    the same port: the query keeps running and reads every acknowledged record once."""
    topic = topic_factory(2)
    collected = BatchCollector()
    query = (
        stream(spark, broker.bootstrap, topic)
        .writeStream.foreachBatch(collected)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    producer = PacedProducer(broker.bootstrap, topic, rate=500).start()
    try:
        await_query(query, lambda: len(collected.values) >= 200, "200 records before the kill")
        broker.kill()
        broker.start()
        restarted_at = producer.sent
        await_query(
            query,
            lambda: any(int(v) > restarted_at + 200 for v in collected.values),
            "records produced after the restart",
        )
        producer.stop()
        await_query(
            query,
            lambda: len(collected.values) >= len(producer.delivered),
            "every acknowledged record",
        )
        assert Counter(collected.values) == Counter(producer.delivered)
    finally:
        query.stop()


def test_streaming_query_through_partition_leader_loss(spark: SparkSession, tmp_path: Path) -> None:
    """kill -9 of a partition's leader on a 3-broker cluster (replication factor 3,
    min.insync.replicas 2) under a running query and an acks=all producer: another replica
    leads, the query keeps running and reads every acknowledged record once.

    Spark asks the Admin client for the latest offsets; a ListOffsets call that was waiting
    for the dead leader waits default.api.timeout.ms (60 s) before Spark's retry asks the
    new one, as it would with Kafka: the source sets it to 10 s (and request.timeout.ms,
    which may not exceed it, to 5 s) to keep the test short."""
    # The dead leader's partitions move once its ZooKeeper session expires: 4 s, not 6.
    overrides = {**TXN_OVERRIDES, "zookeeper.session.timeout.ms": "4000"}
    with Cluster(tmp_path / "cluster", 3, overrides) as cluster:
        topic = f"spark-leader-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        new = NewTopic(topic, 2, 3, config={"min.insync.replicas": "2"})
        admin.create_topics([new])[topic].result(30)
        leader = cluster.wait_for_topic(topic, 2, isr=3)[0].leader
        collected = BatchCollector()
        timeouts = {"kafka.default.api.timeout.ms": "10000", "kafka.request.timeout.ms": "5000"}
        query = (
            stream(spark, cluster.bootstrap, topic, **timeouts)
            .writeStream.foreachBatch(collected)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .start()
        )
        producer = PacedProducer(cluster.bootstrap, topic, rate=500).start()
        try:
            await_query(query, lambda: len(collected.values) >= 200, "200 records before the kill")
            cluster.kill(leader)
            cluster.wait_for_leader(topic, 0, not_in=[leader])
            elected_at = producer.sent
            await_query(
                query,
                lambda: any(int(v) > elected_at + 200 for v in collected.values),
                "records produced after the leader change",
            )
            producer.stop()
            await_query(
                query,
                lambda: len(collected.values) >= len(producer.delivered),
                "every acknowledged record",
            )
            assert Counter(collected.values) == Counter(producer.delivered)
        finally:
            query.stop()


# -- SASL_SSL and ACLs --------------------------------------------------------------------


@compat("java", "security")
def test_sasl_ssl_with_acls(spark: SparkSession, secured: SaslSslBroker, tmp_path: Path) -> None:
    """Spark's sink and source, batch and streaming, with every client they make (producers,
    consumers, admins) authenticating with SCRAM-SHA-512 over TLS through ``kafka.*``
    options, as a user allowed READ and WRITE on two topics and only READ on a third, where
    Spark's write fails. No group ACL: Spark assigns partitions itself and keeps its
    offsets in the checkpoint."""
    user = f"spark-{uuid.uuid4().hex[:8]}"
    options = {f"kafka.{k}": v for k, v in secured.user(user, f"{user}-secret").items()}
    source, copy = f"{user}-in", f"{user}-out"
    for topic in (source, copy):
        secured.broker.create_topic(topic, 2)
        secured.allow(user, ResourceType.TOPIC, topic, [AclOperation.READ, AclOperation.WRITE])
    read_only = f"{user}-read-only"
    secured.broker.create_topic(read_only, 2)
    secured.allow(user, ResourceType.TOPIC, read_only, [AclOperation.READ])
    sent = sample_records(2, 50)

    def write(topic: str) -> None:
        (
            sink_frame(spark, sent)
            .write.format("kafka")
            .option("kafka.bootstrap.servers", secured.bootstrap)
            .options(**options)
            .option("topic", topic)
            .save()
        )

    with pytest.raises(Py4JJavaError, match="TopicAuthorizationException"):
        write(read_only)
    write(source)
    unstamped = [replace(r, timestamp=0) for r in sent]
    got = read_batch(spark, secured.bootstrap, source, **options)
    assert_round_trip(unstamped, [replace(r, timestamp=0) for r in got])

    query = (
        stream(spark, secured.bootstrap, source, includeHeaders="true", **options)
        .select("key", "value", "headers", "partition")
        .writeStream.format("kafka")
        .option("kafka.bootstrap.servers", secured.bootstrap)
        .options(**options)
        .option("topic", copy)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(TIMEOUT_S)
    copied = read_batch(spark, secured.bootstrap, copy, **options)
    assert_round_trip(unstamped, [replace(r, timestamp=0) for r in copied])


# -- the reference pipeline ---------------------------------------------------------------


def pipeline_config(
    broker: BrokerProcess, topic_factory: Callable[..., str], work_dir: Path
) -> job.PipelineConfig:
    return job.PipelineConfig(
        broker.bootstrap,
        topic_factory(events.EVENT_PARTITIONS, prefix="events"),
        topic_factory(1, {"cleanup.policy": "compact"}, prefix="windows"),
        work_dir,
    )


def parquet_windows(spark: SparkSession, config: job.PipelineConfig) -> list[dict]:
    rows = spark.read.parquet(str(config.parquet_dir)).collect()
    return sorted((r.asDict() for r in rows), key=lambda w: (w["window_start"], w["kind"]))


def sorted_windows(windows: dict[str, results.Window]) -> list[results.Window]:
    return [windows[k] for k in sorted(windows)]


def test_pipeline_replayed_batch_repeats_identical_records(
    spark: SparkSession, broker: BrokerProcess, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    """The guarantee docs/spark.md states, forced: a restart re-runs a micro-batch whose
    commit is missing from the checkpoint (a crash between the sink's write and the commit
    log). The topic then holds those windows twice, with equal keys and values, so the
    consumer view (one record per key) is exact; the Parquet table holds them once."""
    config = pipeline_config(broker, topic_factory, tmp_path / "work")
    events.produce_events(broker.bootstrap, config.events_topic, 0, 1500)
    expected = results.expected_windows(1500)

    def run() -> list[StreamingQuery]:
        queries = job.start(spark, config, {"availableNow": True})
        for q in queries:
            assert q.awaitTermination(TIMEOUT_S)
            assert q.exception() is None
        return queries

    topic_query, _ = run()
    first = results.read_results(broker.bootstrap, config.results_topic)
    assert first.windows == expected and first.duplicates == 0
    # The last batch with output: the one after the data, run once the watermark advanced.
    last = topic_query.recentProgress[-1]
    replayed = last["sink"]["numOutputRows"]
    assert replayed > 0, topic_query.recentProgress
    for sink in ("topic-sink", "parquet-sink"):
        commits = config.checkpoint(sink) / "commits"
        newest = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
        (commits / str(newest)).unlink()
        (commits / f".{newest}.crc").unlink()  # Hadoop's checksum beside it

    run()
    view = results.read_results(broker.bootstrap, config.results_topic)
    assert view.conflicts == []
    assert view.duplicates == replayed
    assert view.windows == expected
    assert parquet_windows(spark, config) == sorted_windows(expected)


def test_pipeline_resumes_after_kill(
    spark: SparkSession, broker: BrokerProcess, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    """The pipeline's own command, end to end: `run` is killed (-9, driver and JVM) while
    events arrive, then `demo` appends more, processes everything and prints the windows.
    The consumer view and the Parquet table hold exactly the windows computed without Spark."""
    config = pipeline_config(broker, topic_factory, tmp_path / "work")
    command = [sys.executable, "-m", "scripts.spark_pipeline", "--bootstrap", broker.bootstrap]
    command += ["--events-topic", config.events_topic, "--results-topic", config.results_topic]
    command += ["--work-dir", str(config.work_dir)]
    jvm_env = {**os.environ, "JAVA_TOOL_OPTIONS": JVM_OPTIONS}
    events.produce_events(broker.bootstrap, config.events_topic, 0, 1000)

    run_log = tmp_path / "run.log"

    def windows_seen() -> int:
        """Windows in the results topic; fails at once if `run` exited."""
        if running.poll() is not None:
            tail = "\n".join(run_log.read_text(errors="replace").splitlines()[-30:])
            raise AssertionError(f"`run` exited with {running.returncode}:\n{tail}")
        return len(results.read_results(broker.bootstrap, config.results_topic).windows)

    with open(run_log, "wb") as log:
        # Its own process group: the kill takes the JVM that PySpark started with it.
        running = subprocess.Popen(
            [*command, "run"],
            cwd=REPO_ROOT,
            env=jvm_env,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
    try:
        wait_for(windows_seen, "the first windows in the results topic", TIMEOUT_S)
        seen = windows_seen()
        more = PacedEvents(broker.bootstrap, config.events_topic, 1000, 2000, rate=400)
        wait_for(lambda: windows_seen() > seen, "windows from a batch of the new events")
        os.killpg(running.pid, signal.SIGKILL)
        running.wait(30)
        more.join()
    finally:
        if running.poll() is None:
            os.killpg(running.pid, signal.SIGKILL)
            running.wait(30)

    done = subprocess.run(
        [*command, "demo", "--events", "500"],
        cwd=REPO_ROOT,
        env=jvm_env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S * 2,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    expected = results.expected_windows(3500)
    assert f"{len(expected)} window results in {config.results_topic}" in done.stdout
    view = results.read_results(broker.bootstrap, config.results_topic)
    assert view.conflicts == []
    assert view.windows == expected
    assert parquet_windows(spark, config) == sorted_windows(expected)


class PacedEvents:
    """The pipeline's generator in a thread: events first..first+count-1 at ``rate``/s."""

    def __init__(self, bootstrap: str, topic: str, first: int, count: int, rate: float) -> None:
        self.errors: list[Exception] = []

        def produce_all() -> None:
            try:
                events.produce_events(bootstrap, topic, first, count, rate)
            except Exception as e:  # reported by join()
                self.errors.append(e)

        self._thread = threading.Thread(target=produce_all, daemon=True)
        self._thread.start()

    def join(self) -> None:
        self._thread.join(TIMEOUT_S)
        assert not self._thread.is_alive() and not self.errors, self.errors
