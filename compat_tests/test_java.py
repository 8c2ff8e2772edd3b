"""The official Java client (kafka-clients 4.3.0) through compat_tests/java/GregorClient.java."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from compat_tests import java_client as java
from compat_tests.broker import BrokerProcess
from compat_tests.matrix import compat
from compat_tests.records import (
    CODECS,
    Rec,
    assert_round_trip,
    offset_for_time,
    probe_times,
    sample_records,
)

pytestmark = compat("java", "produce-consume")

PARTITIONS = 2
BIG = 1024 * 1024
BROKER_OVERRIDES = {"message.max.bytes": str(2 * BIG)}


def list_offsets(
    broker: BrokerProcess, topic: str, specs: list[str], via: str
) -> dict[tuple[str, int], int | None]:
    lines = java.run("list-offsets", broker.bootstrap, topic, options={"spec": specs, "via": via})
    return {(d["spec"], d["partition"]): d["offset"] for d in lines}


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip(broker: BrokerProcess, new_topic: Callable[[str], str], codec: str) -> None:
    topic = new_topic(f"java-{codec}")
    java.create_topic(broker, topic, PARTITIONS)
    sent = sample_records(PARTITIONS, 30)
    acks = java.run(
        "produce",
        broker.bootstrap,
        topic,
        configs={"compression.type": codec, "acks": "all", "linger.ms": "5"},
        stdin=java.produce_input(sent),
    )
    assert [(a["partition"], a["timestamp"]) for a in acks] == [
        (r.partition, r.timestamp) for r in sent
    ]

    lines = java.run("consume", broker.bootstrap, topic, options={"count": str(len(sent))})
    assert {d["timestamp_type"] for d in lines} == {"CreateTime"}
    got = java.parse_consumed(lines)
    assert_round_trip(sent, got)
    assert {(a["partition"], a["offset"]) for a in acks} == {(r.partition, r.offset) for r in got}

    times = probe_times(sent)
    for via in ("consumer", "admin"):
        offsets = list_offsets(broker, topic, ["earliest", "latest", *map(str, times)], via)
        for p in range(PARTITIONS):
            assert offsets["earliest", p] == 0
            assert offsets["latest", p] == len(sent) // PARTITIONS
            for ts in times:
                assert offsets[str(ts), p] == offset_for_time(sent, p, ts), (via, p, ts)

    java.run("delete-topic", broker.bootstrap, topic)


@pytest.mark.parametrize("acks", ["0", "1"])
def test_non_idempotent_acks(
    broker: BrokerProcess, new_topic: Callable[[str], str], acks: str
) -> None:
    """acks=0 gets no produce response at all; acks=1 without a producer id."""
    topic = new_topic(f"java-acks{acks}")
    java.create_topic(broker, topic, 1)
    sent = sample_records(1, 20)
    java.run(
        "produce",
        broker.bootstrap,
        topic,
        configs={"acks": acks, "enable.idempotence": "false", "compression.type": "lz4"},
        stdin=java.produce_input(sent),
    )
    lines = java.run("consume", broker.bootstrap, topic, options={"count": str(len(sent))})
    assert_round_trip(sent, java.parse_consumed(lines))


def test_one_megabyte_records(broker: BrokerProcess, new_topic: Callable[[str], str]) -> None:
    """Records above the consumer's 1 MB max.partition.fetch.bytes still come back."""
    topic = new_topic("java-big")
    java.create_topic(broker, topic, 1)
    now = int(time.time() * 1000)
    sent = [Rec(0, f"k{i}".encode(), bytes([65 + i]) * (BIG + i), (), now + i) for i in range(3)]
    java.run(
        "produce",
        broker.bootstrap,
        topic,
        configs={"max.request.size": str(2 * BIG), "compression.type": "none"},
        stdin=java.produce_input(sent),
    )
    lines = java.run("consume", broker.bootstrap, topic, options={"count": str(len(sent))})
    assert_round_trip(sent, java.parse_consumed(lines))
