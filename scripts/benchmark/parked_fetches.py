"""Produce latency while consumers are parked on long-poll fetches over many partitions.

Issue #10, item 13: every append used to re-read every partition of every parked fetch.
This starts one Gregor process (the tests' launcher, running ``--repo``'s packages, so two
checkouts can be compared), parks ``--consumers`` raw Fetch requests, each over all
``--partitions`` partitions of one topic with a ``min_bytes`` they never reach, and then
times ``--produces`` sequential one-record Produce requests (acks=1) spread round-robin
over those partitions, first with no fetch parked (the baseline) and then with them
parked. Raw frames on sockets, so client overhead stays out of the figures.

    .venv/bin/python scripts/benchmark/parked_fetches.py [--repo /work/main]
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from gregor.server.harness.broker_process import BrokerProcess  # noqa: E402
from gregor.wire.headers import skip_tagged_fields  # noqa: E402
from gregor.wire.records import build_batch  # noqa: E402
from gregor.wire.schema import decode, encode, request_type, response_type  # noqa: E402

PRODUCE, FETCH, METADATA, CREATE_TOPICS = 0, 1, 3, 19
NEVER_ENOUGH = 2**31 - 1  # min_bytes no fetch reaches: it stays parked
START_TIMEOUT_S = 60


def _nested(cls: type, name: str) -> type:
    return getattr(sys.modules[cls.__module__], name)


class Connection:
    """One socket speaking request/response frames (flexible headers: v2 request, v1 reply)."""

    def __init__(self, port: int, timeout: float) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._correlation = 0

    def send(self, api_key: int, version: int, body: Any) -> int:
        self._correlation += 1
        client = b"parked-fetch-bench"
        head = struct.pack(">hhih", api_key, version, self._correlation, len(client)) + client
        payload = head + b"\x00" + encode(body)
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)
        return self._correlation

    def receive(self, api_key: int, version: int) -> Any:
        frame = self._recv(struct.unpack(">i", self._recv(4))[0])
        return decode(response_type(api_key, version), frame, skip_tagged_fields(frame, 4))

    def call(self, api_key: int, version: int, body: Any) -> Any:
        self.send(api_key, version, body)
        return self.receive(api_key, version)

    def _recv(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self.sock.recv(n)
            if not chunk:
                raise ConnectionError("broker closed the connection")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)


def _create_topic(conn: Connection, topic: str, partitions: int) -> None:
    cls = request_type(CREATE_TOPICS, 7)
    creatable = _nested(cls, "CreatableTopic")
    request = cls(
        timeout=datetime.timedelta(seconds=30),
        validate_only=False,
        topics=(
            creatable(
                name=topic,
                num_partitions=partitions,
                replication_factor=1,
                assignments=(),
                configs=(),
            ),
        ),
    )
    error = conn.call(CREATE_TOPICS, 7, request).topics[0].error_code
    if error != 0:
        raise RuntimeError(f"CreateTopics {topic}: error {error}")


def _fetch_all(topic: str, partitions: int, max_wait_s: float) -> Any:
    cls = request_type(FETCH, 12)
    fetch_topic, fetch_partition = _nested(cls, "FetchTopic"), _nested(cls, "FetchPartition")
    return cls(
        max_wait=datetime.timedelta(seconds=max_wait_s),
        min_bytes=NEVER_ENOUGH,
        max_bytes=50 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        forgotten_topics_data=(),
        rack_id="",
        topics=(
            fetch_topic(
                topic=topic,
                partitions=tuple(
                    fetch_partition(partition=i, fetch_offset=0, partition_max_bytes=1 << 20)
                    for i in range(partitions)
                ),
            ),
        ),
    )


def _produce(topic: str, partition: int, batch: bytes) -> Any:
    cls = request_type(PRODUCE, 9)
    data, topic_data = _nested(cls, "PartitionProduceData"), _nested(cls, "TopicProduceData")
    return cls(
        transactional_id=None,
        acks=1,
        timeout=datetime.timedelta(seconds=30),
        topic_data=(
            topic_data(name=topic, partition_data=(data(index=partition, records=batch),)),
        ),
    )


def _time_produces(conn: Connection, topic: str, partitions: int, count: int) -> list[float]:
    batch = build_batch([(None, bytes(100), (), int(time.time() * 1000))])
    requests = [_produce(topic, i % partitions, batch) for i in range(count)]
    latencies = []
    for request in requests:
        started = time.perf_counter()
        response = conn.call(PRODUCE, 9, request)
        latencies.append((time.perf_counter() - started) * 1000)
        error = response.responses[0].partition_responses[0].error_code
        if error != 0:
            raise RuntimeError(f"Produce: error {error}")
    return latencies


def _summary(latencies: list[float]) -> str:
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (
        f"produce p50 {statistics.median(ordered):.2f} ms, p99 {p99:.2f} ms, "
        f"max {ordered[-1]:.2f} ms over {len(ordered)} requests"
    )


class _CheckoutBroker(BrokerProcess):
    """The launcher's broker, run from another checkout's packages."""

    def __init__(self, directory: Path, repo: Path) -> None:
        super().__init__(directory, start_timeout_s=START_TIMEOUT_S)
        self.repo = repo

    def env(self) -> dict[str, str]:
        env = super().env()
        env["PYTHONPATH"] = os.pathsep.join([str(self.repo), env.get("PYTHONPATH", "")])
        return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, default=REPO, help="checkout whose broker to run")
    parser.add_argument("--consumers", type=int, default=20)
    parser.add_argument("--partitions", type=int, default=200)
    parser.add_argument("--produces", type=int, default=2000)
    args = parser.parse_args(argv)
    commit = subprocess.run(
        ["git", "-C", str(args.repo), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    print(
        f"{args.repo} ({commit}): {args.consumers} fetch(es) parked over "
        f"{args.partitions} partitions, {args.produces} produces each phase",
        flush=True,
    )
    work = Path(tempfile.mkdtemp(prefix="gregor-parked-fetches-"))
    broker = _CheckoutBroker(work, args.repo)
    parked: list[Connection] = []
    try:
        broker.start()
        producer = Connection(broker.port, timeout=60)
        _create_topic(producer, "watched", args.partitions)
        _time_produces(producer, "watched", args.partitions, 200)  # warm-up
        print(
            "no fetch parked:   "
            + _summary(_time_produces(producer, "watched", args.partitions, args.produces))
        )
        # Parked for longer than the run: the deadline never answers them meanwhile.
        request = _fetch_all("watched", args.partitions, max_wait_s=600)
        for _ in range(args.consumers):
            conn = Connection(broker.port, timeout=60)
            conn.send(FETCH, 12, request)
            parked.append(conn)
        # The fetches were sent before these round trips: by the time the broker has
        # served them, it has read and parked every fetch.
        _time_produces(producer, "watched", args.partitions, 50)
        print(
            "fetches parked:    "
            + _summary(_time_produces(producer, "watched", args.partitions, args.produces))
        )
    finally:
        for conn in parked:
            conn.sock.close()
        broker.close()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
