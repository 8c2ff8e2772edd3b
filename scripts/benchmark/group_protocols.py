"""Kafka 4's group protocols side by side on one Gregor broker: `scripts/bench groups
[--parts join,rebalance,share] [--rounds N] [--json FILE]`. confluent-kafka (librdkafka)
clients, their defaults except where noted.

- **join**: 3 members of a new group subscribe to a 6-partition topic holding records; the
  seconds until every member has read one, with the classic protocol and with the consumer
  protocol (KIP-848, ``group.protocol=consumer``). The broker runs with Kafka's shipped
  ``group.initial.rebalance.delay.ms=0``. Target (issue #20): ≤ 0.5 s with the consumer protocol.
- **rebalance**: 3 members read a 6-partition topic while a producer writes 2,000 records/s;
  once every member reads, one leaves (closes); the pause is the longest time either
  remaining member then goes without a record, until every partition (the leaver's too) has
  been read again and 1 s more.
- **share**: 1, 2 and 4 share consumers (KIP-932, implicit acknowledgement) drain one
  partition of 100 B records, each in a process of its own, against one classic consumer
  doing the same; records per second from the first record read to the last. Target:
  2 share consumers ≥ 0.5× the classic consumer's rate.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from .brokers import GREGOR, Broker
from .drivers import QUIET, DriverError
from .groups import first_reads

PARTS = ("join", "rebalance", "share")
PROTOCOLS = ("classic", "consumer")
MEMBERS = 3
PARTITIONS = 6
PRODUCE_RATE = 2000
SHARE_CONSUMERS = (1, 2, 4)
SHARE_RECORDS = 1_000_000
JOIN_TARGET_S = 0.5
SHARE_TARGET = 0.5
_DEADLINE_S = 60.0
BROKER_OVERRIDES = {"group.share.enable": "true"}

# One consumer of a protocol ("classic", "consumer" or "share") in a child process: it
# prints how many records it has read, every 0.1 s and once more when told to stop (stdin).
_DRAIN = """
import sys, threading, time
from confluent_kafka import Consumer, ShareConsumer
bootstrap, topic, group, protocol = sys.argv[1:5]
config = {"bootstrap.servers": bootstrap, "group.id": group, "log_level": 0}
if protocol == "share":
    consumer = ShareConsumer(config)
else:
    consumer = Consumer({**config, "auto.offset.reset": "earliest", "enable.auto.commit": False})
consumer.subscribe([topic])
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
read, first, last, reported = 0, 0.0, 0.0, 0.0
while not stop.is_set():
    batch = consumer.poll(0.1) if protocol == "share" else consumer.consume(500, 0.1)
    got = sum(1 for m in batch if m.error() is None)
    if got:
        now = time.time()
        first = first or now
        last, read = now, read + got
    if time.monotonic() - reported > 0.1:
        print(read, first, last, flush=True)
        reported = time.monotonic()
print(read, first, last, flush=True)
consumer.close()
"""


def _log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _consumer(broker: Broker, group: str, protocol: str) -> Consumer:
    config: dict[str, Any] = {
        "bootstrap.servers": broker.bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        **QUIET,
    }
    if protocol == "consumer":
        config["group.protocol"] = "consumer"
    return Consumer(config)


def _topic(broker: Broker, partitions: int, records: int) -> str:
    topic = f"bench-protocols-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, partitions)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, **QUIET})
    for i in range(records):
        producer.produce(topic, b"x" * 100, partition=i % partitions)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(60):
        raise DriverError("records to read were not all acknowledged")
    return topic


def join(broker: Broker, protocol: str) -> float:
    """Seconds from subscribe() until every member of a new group has read a record."""
    topic = _topic(broker, PARTITIONS, 6000)
    group = f"bench-join-{uuid.uuid4().hex[:8]}"
    return first_reads([_consumer(broker, group, protocol) for _ in range(MEMBERS)], topic)


def rebalance_pause(broker: Broker, protocol: str) -> float:
    """The longest time a remaining member goes without a record after one member left,
    until every partition has been read again (the leaver's by the others) and 1 s more."""
    topic = _topic(broker, PARTITIONS, 0)
    group = f"bench-leave-{uuid.uuid4().hex[:8]}"
    stop = threading.Event()

    def produce() -> None:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1, **QUIET})
        sent, started = 0, time.monotonic()
        while not stop.is_set():
            producer.produce(topic, b"x" * 100, partition=sent % PARTITIONS)
            sent += 1
            ahead = sent / PRODUCE_RATE - (time.monotonic() - started)
            producer.poll(max(ahead, 0))
        producer.flush(10)

    producing = threading.Thread(target=produce)
    producing.start()
    members = [_consumer(broker, group, protocol) for _ in range(MEMBERS)]
    try:
        for c in members:
            c.subscribe([topic])
        last = [0.0] * MEMBERS
        deadline = time.monotonic() + _DEADLINE_S
        while not all(last):  # every member reads
            _poll_round(members, last, set(), deadline)
        leaving, staying = members[0], members[1:]
        leaving.close()
        left = time.monotonic()
        last, longest, read_again = [left] * len(staying), 0.0, set[int]()
        settled = None
        while settled is None or time.monotonic() < settled + 1.0:
            before = list(last)
            _poll_round(staying, last, read_again, left + _DEADLINE_S)
            gaps = (b - a for a, b in zip(before, last, strict=True) if b > a)
            longest = max(longest, *gaps, 0.0)
            if settled is None and len(read_again) == PARTITIONS:
                settled = time.monotonic()
        return max(longest, *(time.monotonic() - t for t in last))
    finally:
        stop.set()
        producing.join()
        for c in members[1:]:
            c.close()


def _poll_round(
    members: list[Consumer], last: list[float], partitions: set[int], deadline: float
) -> None:
    """One poll of each member: when each last read a record, and which partitions were read."""
    if time.monotonic() > deadline:
        raise DriverError(f"members did not read every partition within {_DEADLINE_S}s")
    for i, c in enumerate(members):
        message = c.poll(0.005)
        if message is not None and message.error() is None:
            last[i] = time.monotonic()
            partitions.add(message.partition())


def drain_rate(broker: Broker, protocol: str, consumers: int) -> float:
    """Records per second that ``consumers`` processes of ``protocol`` drain from one
    partition holding SHARE_RECORDS records (from the first record read to the last)."""
    topic = _topic(broker, 1, SHARE_RECORDS)
    group = f"bench-drain-{uuid.uuid4().hex[:8]}"
    if protocol == "share":
        _earliest(broker, group)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _DRAIN, broker.bootstrap, topic, group, protocol],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(consumers)
    ]
    latest: list[tuple[int, float, float]] = [(0, 0.0, 0.0)] * consumers
    readers = [
        threading.Thread(target=_follow, args=(p, latest, i), daemon=True)
        for i, p in enumerate(procs)
    ]
    for r in readers:
        r.start()
    deadline = time.monotonic() + _DEADLINE_S * 3
    try:
        while sum(n for n, _, _ in latest) < SHARE_RECORDS:
            if time.monotonic() > deadline:
                got = sum(n for n, _, _ in latest)
                raise DriverError(f"{protocol} x{consumers} read {got} of {SHARE_RECORDS}")
            time.sleep(0.05)  # the children report every 0.1 s: nothing to await sooner
    finally:
        for p in procs:
            p.communicate("", timeout=30)
        for r in readers:
            r.join(5)
    read = sum(n for n, _, _ in latest)
    first = min(f for n, f, _ in latest if n)
    end = max(t for n, _, t in latest if n)
    return read / (end - first)


def _follow(proc: subprocess.Popen[str], latest: list[tuple[int, float, float]], i: int) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        read, first, last = line.split()
        latest[i] = (int(read), float(first), float(last))


def _earliest(broker: Broker, group: str) -> None:
    """share.auto.offset.reset=earliest for the share group (a group config)."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})
    resource = ConfigResource(
        ConfigResource.Type.GROUP,
        group,
        incremental_configs=[
            ConfigEntry(
                "share.auto.offset.reset",
                "earliest",
                incremental_operation=AlterConfigOpType.SET,
            )
        ],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="scripts/bench groups",
        description="The classic, consumer (KIP-848) and share (KIP-932) group protocols "
        "side by side on one Gregor broker.",
    )
    parser.add_argument("--parts", default=",".join(PARTS), help="of: " + ", ".join(PARTS))
    parser.add_argument("--rounds", type=int, default=3, help="medians over this many rounds")
    parser.add_argument("--json", type=Path, help="also write the measurements here")
    args = parser.parse_args(argv)
    unknown = set(args.parts.split(",")) - set(PARTS)
    if unknown:
        parser.error(f"unknown parts: {', '.join(sorted(unknown))}")
    return args


def main(argv: list[str]) -> int:
    args = _parse(argv)
    parts = args.parts.split(",")
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="gregor-bench-groups-") as tmp:
        with Broker(GREGOR, Path(tmp) / "broker", overrides=BROKER_OVERRIDES) as broker:
            for name, measure in _measures(parts):
                values = []
                for round_ in range(args.rounds):
                    values.append(measure(broker))
                    _log(f"{name} round {round_ + 1}: {values[-1]:.3f}")
                results[name] = statistics.median(values)
    _print(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


def _measures(parts: list[str]) -> list[tuple[str, Any]]:
    measures: list[tuple[str, Any]] = []
    for protocol in PROTOCOLS:
        if "join" in parts:
            measures.append((f"join_s.{protocol}", lambda b, p=protocol: join(b, p)))
        if "rebalance" in parts:
            measures.append((f"pause_s.{protocol}", lambda b, p=protocol: rebalance_pause(b, p)))
    if "share" in parts:
        measures.append(("records_per_s.classic.1", lambda b: drain_rate(b, "classic", 1)))
        for n in SHARE_CONSUMERS:
            measures.append((f"records_per_s.share.{n}", lambda b, n=n: drain_rate(b, "share", n)))
    return measures


def _print(results: dict[str, float]) -> None:
    print("| measurement | classic | consumer protocol | target |")
    print("|---|---|---|---|")
    if "join_s.classic" in results:
        print(
            f"| 3 members join a new group, each reads a record | "
            f"{results['join_s.classic']:.2f} s | {results['join_s.consumer']:.2f} s | "
            f"consumer ≤ {JOIN_TARGET_S} s |"
        )
    if "pause_s.classic" in results:
        print(
            f"| one of 3 members leaves: the others' longest pause | "
            f"{results['pause_s.classic']:.2f} s | {results['pause_s.consumer']:.2f} s | |"
        )
    if "records_per_s.classic.1" in results:
        classic = results["records_per_s.classic.1"]
        print()
        print("| one partition, 100 B records | records/s | ratio to 1 classic consumer |")
        print("|---|---|---|")
        print(f"| 1 classic consumer | {classic:,.0f} | 1.00 |")
        for n in SHARE_CONSUMERS:
            rate = results[f"records_per_s.share.{n}"]
            print(f"| {n} share consumer(s) | {rate:,.0f} | {rate / classic:.2f} |")
        print(f"\nTarget: 2 share consumers ≥ {SHARE_TARGET}× one classic consumer.")
