"""The official Java client (kafka-clients 4.3.0) through compat_tests/java/GregorClient.java."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from compat_tests import java_client as java
from compat_tests.broker import BrokerProcess
from compat_tests.records import (
    CODECS,
    assert_round_trip,
    offset_for_time,
    probe_times,
    sample_records,
)

PARTITIONS = 2


def list_offsets(
    broker: BrokerProcess, topic: str, specs: list[str], via: str
) -> dict[tuple[str, int], int | None]:
    lines = java.run("list-offsets", broker.bootstrap, topic, options={"spec": specs, "via": via})
    return {(d["spec"], d["partition"]): d["offset"] for d in lines}


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip(broker: BrokerProcess, new_topic: Callable[[str], str], codec: str) -> None:
    topic = new_topic(f"java-{codec}")
    java.run(
        "create-topic",
        broker.bootstrap,
        topic,
        options={"partitions": str(PARTITIONS), "replication-factor": "1"},
    )
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
