"""``gregor perf produce|consume`` against a real broker process: the summary counts the
records that librdkafka then finds in the topic, --throughput holds the rate, and the
consumer test reads back exactly what was asked. About 3 s."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition

from compat_tests.process_pool import ProcessPool
from gregor.server.harness.broker_process import BrokerProcess
from tests.cli_run import gregor, new_topic, ok, table


@pytest.fixture(scope="module")
def broker(process_pool: ProcessPool) -> BrokerProcess:
    return process_pool.broker()


def topic_records(broker: BrokerProcess, topic: str, partitions: int) -> tuple[int, set[int]]:
    """(records in the topic, the value sizes of the first ones) as librdkafka sees them."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "perf-check",
            "auto.offset.reset": "earliest",
        }
    )
    total = sum(
        consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1] for p in range(partitions)
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    sizes = {len(m.value()) for m in consumer.consume(50, 10) if not m.error()}
    consumer.close()
    return total, sizes


def test_produce_then_consume(broker: BrokerProcess) -> None:
    topic = new_topic(broker.bootstrap, "perf", 3)
    report = ok(
        "perf",
        "produce",
        "--bootstrap-server",
        broker.bootstrap,
        "--topic",
        topic,
        "--num-records",
        "20000",
        "--record-size",
        "100",
        "--throughput",
        "-1",
        "--compression-type",
        "lz4",
        "--json",
    ).json()
    assert report["mode"] == "produce" and report["records"] == 20000
    assert report["errors"] == 0 and report["firstError"] is None
    assert report["mbPerSec"] == pytest.approx(
        report["recordsPerSec"] * 100 / 1024 / 1024, rel=0.02
    )
    latency = report["latencyMs"]
    assert 0 < latency["p50"] <= latency["p95"] <= latency["p99"] <= latency["max"]
    assert topic_records(broker, topic, 3) == (20000, {100})

    text = ok(
        "perf",
        "consume",
        "--bootstrap-server",
        broker.bootstrap,
        "--topic",
        topic,
        "--num-records",
        "15000",
    )
    (summary,) = table(text.out)
    assert summary["RECORDS"] == "15000" and float(summary["RECORDS/S"].replace(",", "")) > 0
    assert "FETCH P99 MS" in summary and "15000/15000" in text.err  # the progress bar's end
    everything = ok(
        "perf",
        "consume",
        "--bootstrap-server",
        broker.bootstrap,
        "--topic",
        topic,
        "--num-records",
        "20000",
        "--json",
    ).json()
    assert everything["records"] == 20000 and everything["mode"] == "consume"

    too_many = gregor(
        "perf",
        "consume",
        "--bootstrap-server",
        broker.bootstrap,
        "--topic",
        topic,
        "--num-records",
        "20001",
        "--timeout-ms",
        "500",
    )
    assert too_many.code == 1 and "consumed 20000 of 20001 records" in too_many.err


def test_throughput_limit(broker: BrokerProcess) -> None:
    topic = f"perf-{uuid.uuid4().hex[:8]}"
    result = ok(
        "perf",
        "produce",
        "--bootstrap-server",
        broker.bootstrap,
        "--topic",
        topic,
        "--num-records",
        "600",
        "--record-size",
        "10",
        "--throughput",
        "1000",
    )
    (summary,) = table(result.out)
    assert summary["RECORDS"] == "600"
    # 600 records at 1000/s: the last one's turn comes 0.599 s after the first's.
    assert float(summary["SECONDS"]) >= 0.599
    assert float(summary["RECORDS/S"].replace(",", "")) <= 600 / 0.599  # 1,001.7
    assert topic_records(broker, topic, 1) == (600, {10})
    assert "600/600" in result.err
