"""A local SparkSession with Spark's Kafka source and sink on its class path.

The connector jar is committed beside this file (jars/README.md says where it comes from);
kafka-clients and commons-pool2 are the ones ./scripts/setup-test-deps unpacks into
.cache/jars/. Spark ships the compression codecs and slf4j that kafka-clients loads.
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession

REPO = Path(__file__).resolve().parents[2]
CONNECTOR_JAR = Path(__file__).with_name("jars") / "spark-sql-kafka-0-10_2.13-4.1.0-SNAPSHOT.jar"
CLIENT_JARS = (
    REPO / ".cache" / "jars" / "kafka-clients-4.3.0.jar",
    REPO / ".cache" / "jars" / "commons-pool2-2.12.1.jar",
)

# Small-machine settings: two shuffle partitions instead of 200 (each is a task and a state
# store per micro-batch), no web UI, no progress bar on the terminal, UTC window bounds.
DEFAULT_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
}


def kafka_jars() -> list[Path]:
    """The three jars Spark's Kafka connector needs; fails naming the set-up if one is missing."""
    jars = [CONNECTOR_JAR, *CLIENT_JARS]
    missing = [str(j) for j in jars if not j.is_file()]
    if missing:
        raise FileNotFoundError(
            f"missing {', '.join(missing)}: run ./scripts/setup-test-deps to unpack them"
        )
    return jars


def new_session(
    app: str,
    master: str = "local[2]",
    conf: dict[str, str] | None = None,
    log_level: str = "WARN",
) -> SparkSession:
    """A SparkSession (the running one if this process has it) that reads and writes Kafka."""
    builder = SparkSession.builder.master(master).appName(app)
    settings = {**DEFAULT_CONF, "spark.jars": ",".join(map(str, kafka_jars())), **(conf or {})}
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    return spark
