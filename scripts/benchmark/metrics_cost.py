"""What recording metrics costs: `scripts/bench metrics-cost [--requests 20000] [--rounds 5]
[--scrape SECONDS]`.

Two Gregor brokers run side by side, one with the Prometheus endpoint on (scraped every
--scrape seconds; 0, the default: never, the recording alone) and one with it off. One
client sends the same raw requests to both in turn, one at a time, so both see the same
machine at the same moments; each broker's CPU time (utime + stime, /proc) over a phase,
divided by the requests it answered, is its cost per request. On a shared machine the
throughput of a whole run moves by ±10-30 % from run to run; the CPU time one request
costs, measured on both brokers at once, by a few percent at most.

Workloads, each one request at a time (the worst case for a per-request cost):
produce of one 100 B record, produce of a 16 KiB batch of 1 KiB records (the Java
producer's default batch), fetch of one 100 B record, fetch of 16 KiB and of 1 MiB.
"""

from __future__ import annotations

import argparse
import datetime
import socket
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from gregor.apis.context import build, nested  # noqa: E402
from gregor.wire.records import build_batch  # noqa: E402
from gregor.wire.schema import request_type  # noqa: E402
from gregor.wire.versions import FETCH, PRODUCE  # noqa: E402
from tests.kafka_wire import request_frame  # noqa: E402

from .brokers import GREGOR, Broker  # noqa: E402
from .procstats import cpu_seconds  # noqa: E402

TOPIC_SMALL, TOPIC_BATCH = "small", "batch"
# The event loop's polling for the next request (server/polling.py) spends CPU waiting on a
# client that sends one request at a time; off, CPU time is the requests' work alone.
NO_POLLING = {"gregor.idle.poll.us": "0"}
KIB = 1024


def produce_frame(topic: str, record: int, records: int) -> bytes:
    cls = request_type(PRODUCE, 9)
    now = int(time.time() * 1000)
    batch = build_batch([(None, b"v" * record, [], now)] * records)
    data = nested(cls, "PartitionProduceData")(index=0, records=batch)
    request = build(
        cls,
        transactional_id=None,
        acks=1,
        timeout=datetime.timedelta(seconds=30),
        topic_data=(nested(cls, "TopicProduceData")(name=topic, partition_data=(data,)),),
    )
    return request_frame(PRODUCE, 9, 1, request, client_id="metrics-cost")


def fetch_frame(topic: str, max_bytes: int) -> bytes:
    """A consumer's fetch of the partition's first ``max_bytes``, not waiting."""
    cls = request_type(FETCH, 12)
    module = sys.modules[cls.__module__]
    partition = module.FetchPartition(
        partition=0, current_leader_epoch=-1, fetch_offset=0, partition_max_bytes=max_bytes
    )
    request = cls(
        max_wait=datetime.timedelta(0),
        min_bytes=1,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(module.FetchTopic(topic=topic, partitions=(partition,)),),
        forgotten_topics_data=(),
        rack_id="",
    )
    return request_frame(FETCH, 12, 1, request, client_id="metrics-cost")


class RawConnection:
    """A raw connection sending one prebuilt frame and reading its answer, again and again."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = bytearray(4 << 20)

    def call(self, frame: bytes) -> None:
        self.sock.sendall(frame)
        self._read(4)
        self._read(struct.unpack_from(">i", self.buffer)[0])

    def _read(self, n: int) -> None:
        view, got = memoryview(self.buffer), 0
        while got < n:
            chunk = self.sock.recv_into(view[got:n])
            if not chunk:
                raise ConnectionError("connection closed by broker")
            got += chunk


def alternate(pair: list[tuple[Broker, RawConnection]], frame: bytes, requests: int) -> list[float]:
    """Each broker's CPU microseconds per request, the brokers taking turns request by
    request."""
    before = [cpu_seconds(broker.pid) for broker, _ in pair]
    for _ in range(requests):
        for _, connection in pair:
            connection.call(frame)
    after = [cpu_seconds(broker.pid) for broker, _ in pair]
    return [(a - b) * 1e6 / requests for a, b in zip(after, before, strict=True)]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench metrics-cost", description=__doc__)
    parser.add_argument("--requests", type=int, default=20_000, help="per workload and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--scrape", type=float, default=0.0, help="seconds between scrapes (0: none)"
    )
    args = parser.parse_args(argv)
    workloads: list[tuple[str, Callable[[], bytes]]] = [
        ("produce 1 x 100 B", lambda: produce_frame(TOPIC_SMALL, 100, 1)),
        ("produce 16 x 1 KiB", lambda: produce_frame(TOPIC_BATCH, KIB, 16)),
        ("fetch 100 B", lambda: fetch_frame(TOPIC_SMALL, 1)),
        ("fetch 16 KiB", lambda: fetch_frame(TOPIC_BATCH, 16 * KIB)),
        ("fetch 1 MiB", lambda: fetch_frame(TOPIC_BATCH, 1 << 20)),
    ]
    frames = {name: make() for name, make in workloads}
    costs: dict[str, dict[str, list[float]]] = {n: {"on": [], "off": []} for n in frames}
    with tempfile.TemporaryDirectory(prefix="gregor-metrics-cost-") as tmp:
        on = Broker(GREGOR, Path(tmp) / "on", args.scrape, NO_POLLING)
        off = Broker(GREGOR, Path(tmp) / "off", None, NO_POLLING)
        with on, off:
            for broker in (on, off):
                broker.create_topic(TOPIC_SMALL, 1)
                broker.create_topic(TOPIC_BATCH, 1)
            connections = {b: RawConnection(b.port) for b in (on, off)}
            for round_ in range(args.rounds):
                # Alternate which broker goes first within each pair of requests.
                order = [on, off] if round_ % 2 == 0 else [off, on]
                pair = [(b, connections[b]) for b in order]
                for name, frame in frames.items():
                    cpu = alternate(pair, frame, args.requests)
                    per_request = dict(zip(order, cpu, strict=True))
                    costs[name]["on"].append(per_request[on])
                    costs[name]["off"].append(per_request[off])
                print(f"round {round_ + 1} of {args.rounds} done", file=sys.stderr, flush=True)
        if on.scrape_report:
            print(f"metrics: {on.scrape_report}", file=sys.stderr)
    print("| workload | CPU µs per request, metrics off | on | on/off |")
    print("|---|---:|---:|---:|")
    for name, by_mode in costs.items():
        off_us, on_us = statistics.median(by_mode["off"]), statistics.median(by_mode["on"])
        print(f"| {name} | {off_us:.1f} | {on_us:.1f} | {on_us / off_us:.3f} |")
    print()
    print(f"Medians of {args.rounds} rounds of {args.requests} requests per broker; per round:")
    for name, by_mode in costs.items():
        rounds = ", ".join(
            f"{a:.1f}/{b:.1f}" for a, b in zip(by_mode["off"], by_mode["on"], strict=True)
        )
        print(f"- {name} (off/on): {rounds}")
    return 0
