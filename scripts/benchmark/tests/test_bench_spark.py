"""The spark scenario: a real Spark batch read (its own JVM, about 20 s) of a small topic on
a real Gregor process, and how its results read in the table."""

from pathlib import Path

import pytest
from benchmark.artifacts import ensure_java_driver
from benchmark.brokers import GREGOR, Broker
from benchmark.drivers import MIB, JavaDriver
from benchmark.report import markdown_table
from benchmark.scenarios import BY_NAME, Context, Sizes

RECORDS = 20_000
TINY = Sizes(MIB, 2 * MIB, 2, 30, 30, spark_records=RECORDS)
ROW = [("spark", "Spark read", "spark")]
RESULT = {
    "spark_rec_s": 2.5e5,
    "spark_mib_s": 23.8,
    "spark_records": 1e6,
    "spark_count_right": 1.0,
    "spark_seconds": 4.0,
    "broker_cpu_s": 2.0,
    "broker_cpu_pct": 50.0,
}


def test_spark_scenario_reads_every_record_from_gregor(tmp_path: Path) -> None:
    with Broker(GREGOR, tmp_path / "gregor") as broker:
        m = BY_NAME["spark"].run(Context(broker, TINY, JavaDriver(ensure_java_driver())))
    assert m["spark_records"] == RECORDS and m["spark_count_right"] == 1.0
    assert m["spark_rec_s"] == pytest.approx(RECORDS / m["spark_seconds"])
    assert m["spark_mib_s"] == pytest.approx(RECORDS * 100 / MIB / m["spark_seconds"])
    assert m["broker_cpu_s"] > 0  # it served the fetches


def test_a_wrong_count_is_shown_as_such() -> None:
    short = {**RESULT, "spark_records": 995_985.0, "spark_count_right": 0.0}
    table = markdown_table(
        ROW, {"g": {"spark": RESULT}, "t": {"spark": short}}, {"g": "G", "t": "T"}
    )
    assert table.splitlines()[2] == (
        "| Spark read | Spark batch read | 23.8 MiB/s (250 k rec/s) | 23.8 MiB/s (250 k rec/s) "
        "| 1.00× |"
    )
    assert "| records read | 1,000,000 (all) | 995,985 (WRONG COUNT) |" in table
    assert "| … as % of one core | 50 | 50 | 1.00× |" in table
