"""The Structured Streaming job: events from Kafka, parsed, counted per 10-second event-time
window and kind under a watermark, written to a Kafka topic and to Parquet.

The two sinks are two queries over the same source, each with its own checkpoint, so each
keeps its own guarantee (docs/spark.md):
- the topic sink is at-least-once: a restart re-runs the micro-batch that was running
  when the query stopped, and that batch may already have written its rows. The re-run has
  the same input offsets, watermark and state, so it writes the same rows under the same
  keys: a consumer that keeps one record per key (or the compacted topic) sees each window
  exactly once;
- the Parquet sink is exactly-once for readers that go through its ``_spark_metadata`` log
  (Spark does): files of a batch that did not commit are not part of the table.
In append mode a window is emitted once, when the watermark passes its end; later events
for it would be dropped, which the generator's bounded lateness rules out.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from .events import LATENESS_BOUND_MS

WINDOW_S = 10
WATERMARK_DELAY_S = 30
assert WATERMARK_DELAY_S * 1000 > LATENESS_BOUND_MS, "the watermark would drop events"
EVENT_SCHEMA = "id LONG, ts LONG, user STRING, kind STRING, amount INT"
# Window bounds as the results carry them (the session's time zone is UTC).
TIME_FORMAT = "yyyy-MM-dd'T'HH:mm:ss'Z'"


@dataclass(frozen=True)
class PipelineConfig:
    bootstrap: str
    events_topic: str
    results_topic: str
    work_dir: Path

    @property
    def parquet_dir(self) -> Path:
        return self.work_dir / "windows"

    def checkpoint(self, sink: str) -> Path:
        return self.work_dir / "checkpoints" / sink


def windowed_counts(spark: SparkSession, config: PipelineConfig) -> DataFrame:
    """Per (window, kind): the number of events and the sum of their amounts. Values that
    are not event JSON are skipped."""
    raw = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", config.bootstrap)
        .option("subscribe", config.events_topic)
        .option("startingOffsets", "earliest")
        .load()
    )
    events = (
        raw.select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e"))
        .where("e.id IS NOT NULL AND e.ts IS NOT NULL")
        .select("e.*", F.timestamp_millis("e.ts").alias("event_time"))
    )
    return (
        events.withWatermark("event_time", f"{WATERMARK_DELAY_S} seconds")
        .groupBy(F.window("event_time", f"{WINDOW_S} seconds"), "kind")
        .agg(F.count("*").alias("events"), F.sum("amount").alias("amount"))
        .select(
            _formatted("window.start").alias("window_start"),
            _formatted("window.end").alias("window_end"),
            "kind",
            "events",
            "amount",
        )
    )


def _formatted(column: str) -> Column:
    return F.date_format(F.col(column), TIME_FORMAT)


def start_topic_sink(
    counts: DataFrame, config: PipelineConfig, trigger: dict[str, object]
) -> StreamingQuery:
    """Each window's result as a JSON record keyed by "<window start>/<kind>"."""
    records = counts.select(
        F.concat_ws("/", "window_start", "kind").alias("key"),
        F.to_json(F.struct(*counts.columns)).alias("value"),
    )
    return (
        records.writeStream.queryName("windows-to-topic")
        .format("kafka")
        .option("kafka.bootstrap.servers", config.bootstrap)
        .option("topic", config.results_topic)
        .option("checkpointLocation", str(config.checkpoint("topic-sink")))
        .outputMode("append")
        .trigger(**trigger)
        .start()
    )


def start_parquet_sink(
    counts: DataFrame, config: PipelineConfig, trigger: dict[str, object]
) -> StreamingQuery:
    return (
        counts.writeStream.queryName("windows-to-parquet")
        .format("parquet")
        .option("path", str(config.parquet_dir))
        .option("checkpointLocation", str(config.checkpoint("parquet-sink")))
        .outputMode("append")
        .trigger(**trigger)
        .start()
    )


def start(
    spark: SparkSession, config: PipelineConfig, trigger: dict[str, object]
) -> list[StreamingQuery]:
    """Both sinks' queries, running; ``trigger`` is DataStreamWriter.trigger's keywords."""
    return [
        start_topic_sink(windowed_counts(spark, config), config, trigger),
        start_parquet_sink(windowed_counts(spark, config), config, trigger),
    ]
