"""Shared pieces of the Spark compatibility tests: Spark's rows as the other clients' Rec,
DataFrames of Recs for Spark's sink, a foreachBatch collector and a paced background
producer that keeps what the broker acknowledged."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, Message, Producer
from pyspark.sql import DataFrame, Row, SparkSession

from compat_tests.records import Rec

SINK_SCHEMA = (
    "key BINARY, value BINARY, partition INT, headers ARRAY<STRUCT<key: STRING, value: BINARY>>"
)


def to_rec(row: Row) -> Rec:
    headers = tuple(
        (h.key, None if h.value is None else bytes(h.value)) for h in (row.headers or ())
    )
    return Rec(
        partition=row.partition,
        key=None if row.key is None else bytes(row.key),
        value=None if row.value is None else bytes(row.value),
        headers=headers,
        timestamp=row.ts,
        offset=row.offset,
    )


def recs(df: DataFrame) -> list[Rec]:
    """The rows of a Kafka source DataFrame read with includeHeaders, in partition then
    offset order; timestamps as epoch milliseconds."""
    rows = df.selectExpr(
        "partition", "offset", "key", "value", "headers", "unix_millis(timestamp) AS ts"
    ).collect()
    return sorted((to_rec(r) for r in rows), key=lambda r: (r.partition, r.offset))


def read_batch(spark: SparkSession, bootstrap: str, topic: str, **options: str) -> list[Rec]:
    """A batch read of ``topic`` (earliest to latest unless ``options`` say otherwise)."""
    reader = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("includeHeaders", "true")
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return recs(reader.load())


def sink_frame(spark: SparkSession, records: list[Rec]) -> DataFrame:
    """The records as rows for Spark's Kafka sink, in one partition so that each Kafka
    partition receives them in list order."""
    rows = [(r.key, r.value, r.partition, [list(h) for h in r.headers]) for r in records]
    return spark.createDataFrame(rows, SINK_SCHEMA).coalesce(1)


@dataclass
class BatchCollector:
    """A foreachBatch function keeping the string values of every micro-batch, its size
    and its number of Spark partitions (the source's read tasks)."""

    values: list[str] = field(default_factory=list)
    batch_sizes: list[int] = field(default_factory=list)
    batch_partitions: list[int] = field(default_factory=list)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        rows = batch.selectExpr("CAST(value AS STRING) AS v").collect()
        self.values.extend(r.v for r in rows)
        self.batch_sizes.append(len(rows))
        self.batch_partitions.append(batch.rdd.getNumPartitions())


class PacedProducer:
    """Produces "0", "1", ... to a topic at ``rate`` records/s from a thread (idempotent,
    acks=all) until stopped; ``delivered`` holds the acknowledged values."""

    def __init__(self, bootstrap: str, topic: str, rate: float) -> None:
        self.topic = topic
        self.rate = rate
        self.sent = 0
        self.delivered: list[str] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._producer = Producer(
            {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5}
        )
        self._thread = threading.Thread(target=self._run, name=f"produce-{topic}", daemon=True)

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            self.delivered.append(msg.value().decode())
        else:
            self.errors.append(str(err))

    def _run(self) -> None:
        started = time.monotonic()
        while not self._stop.is_set():
            self._producer.produce(
                self.topic, str(self.sent).encode(), on_delivery=self._on_delivery
            )
            self.sent += 1
            self._producer.poll(0)
            time.sleep(max(0.0, started + self.sent / self.rate - time.monotonic()))
        # Idempotent retries ride out a broker restart; everything sent gets an answer.
        self._producer.flush(120)

    def start(self) -> PacedProducer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(150)
        assert not self._thread.is_alive(), "producer did not finish flushing"
        assert not self.errors, self.errors[:3]
        assert len(self.delivered) == self.sent, (
            f"{len(self.delivered)} of {self.sent} acknowledged"
        )
