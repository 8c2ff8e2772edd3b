"""Measure the Kafka port while /metrics is attacked, on a broker with many partitions.

    .venv/bin/python scripts/fuzzing/metrics_load.py --partitions 20000

Starts a broker with the Prometheus endpoint on, creates ``--partitions`` partitions (in
topics of 1,000), starts the fuzz's canary (Metadata, a one-record Produce, a Fetch of it,
timed) in a process of its own, and reports its latency in three phases of
``--seconds`` each: quiet; ``--half-open`` half-sent ``GET /metrics`` connections held
open (those the broker closes are opened again every second); ``--scrapers`` scrapers
looping on whole scrapes as Prometheus asks for them. Also: scrapes computed and served,
scrape wall time, broker CPU and peak RSS.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import selectors
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

if __name__ == "__main__":
    root = Path(__file__).resolve().parents[2]
    sys.path[:0] = [str(root / "scripts"), str(root)]

from benchmark.procstats import cpu_seconds, memory_kib  # noqa: E402

from compat_tests.broker import BrokerProcess  # noqa: E402
from fuzzing.canary import TOPIC, Canary  # noqa: E402
from fuzzing.canary import create_topic as create_canary_topic  # noqa: E402
from fuzzing.report import percentile  # noqa: E402
from fuzzing.runner import canary_worker  # noqa: E402
from tests.kafka_wire import WireClient, create_topic  # noqa: E402

_MP = multiprocessing.get_context("fork")
HALF = b"GET /metrics HTTP/1.1\r\nHost: broker\r\nAccept: */*\r\n"
SCRAPE = (
    b"GET /metrics HTTP/1.1\r\nHost: broker\r\nAccept: application/openmetrics-text;"
    b"version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.4\r\nAccept-Encoding: gzip\r\n\r\n"
)


def _create(port: int, partitions: int) -> float:
    start = time.monotonic()
    client = WireClient(port, timeout=600)
    try:
        for i, start_at in enumerate(range(0, partitions, 1000)):
            count = min(1000, partitions - start_at)
            result = create_topic(client, f"many-{i}", count)
            assert result.error_code in (0, 36), result  # 36: exists (--work-dir reused)
        create_canary_topic(client, TOPIC)
    finally:
        client.close()
    return time.monotonic() - start


def _half_open(port: int, count: int, stop: threading.Event) -> None:
    sel = selectors.DefaultSelector()
    open_: set[socket.socket] = set()

    def refill() -> None:
        while len(open_) < count:
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=2)
                sock.sendall(HALF)
            except OSError:
                return
            sock.setblocking(False)
            open_.add(sock)
            sel.register(sock, selectors.EVENT_READ)

    last = 0.0
    while not stop.is_set():
        if time.monotonic() - last >= 1.0:
            refill()
            last = time.monotonic()
        for key, _ in sel.select(0.1):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            with contextlib.suppress(OSError):
                if sock.recv(65536):
                    continue
            sel.unregister(sock)
            sock.close()
            open_.discard(sock)
    for sock in open_:
        sock.close()


def _scraper(port: int, stop: threading.Event, times: list[float]) -> None:
    while not stop.is_set():
        start = time.monotonic()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
                sock.sendall(SCRAPE)
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = sock.recv(65536)
                    if not chunk:
                        raise ConnectionError
                    data += chunk
                head, _, body = data.partition(b"\r\n\r\n")
                length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
                while len(body) < length:
                    chunk = sock.recv(1 << 20)
                    if not chunk:
                        raise ConnectionError
                    body += chunk
            times.append(time.monotonic() - start)
        except (OSError, ValueError, IndexError):
            time.sleep(0.1)


def _counter(port: int, name: str) -> float:
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        data = b""
        while chunk := sock.recv(1 << 20):
            data += chunk
    for line in data.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return float("nan")


def _phase(broker: BrokerProcess, canary: Canary, seconds: float) -> list[float]:
    stop, out = _MP.Event(), _MP.Queue()
    proc = _MP.Process(target=canary_worker, args=(canary, stop, out))
    proc.start()
    time.sleep(seconds)
    stop.set()
    state = out.get(timeout=60)
    proc.join(10)
    return state.latencies_ms


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=20_000)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--half-open", type=int, default=2000)
    parser.add_argument("--scrapers", type=int, default=4)
    parser.add_argument("--work-dir", type=Path)
    parser.add_argument("--sigterm", action="store_true", help="end with SIGTERM under attack")
    args = parser.parse_args()
    work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="gregor-metrics-load-"))
    broker = BrokerProcess(work_dir, {"metrics.prometheus.port": "0"}, start_timeout_s=600)
    broker.start()
    metrics_port = broker.metrics_port
    try:
        took = _create(broker.port, args.partitions)
        print(f"{args.partitions:,} partitions created in {took:.0f} s")
        canary = Canary(broker.port)
        canary.setup()
        start = time.monotonic()
        size = len(_counter_body(metrics_port))
        print(f"one scrape: {size / 1e6:.1f} MB in {time.monotonic() - start:.2f} s (wall)")
        rows = []
        for name in ("quiet", f"{args.half_open} half-open", f"{args.scrapers} scrapers"):
            stop = threading.Event()
            threads: list[threading.Thread] = []
            times: list[float] = []
            if "half-open" in name:
                threads = [
                    threading.Thread(target=_half_open, args=(metrics_port, args.half_open, stop))
                ]
            elif "scrapers" in name:
                threads = [
                    threading.Thread(target=_scraper, args=(metrics_port, stop, times))
                    for _ in range(args.scrapers)
                ]
            before = _counter(metrics_port, "gregor_metrics_scrapes_total")
            cpu = cpu_seconds(broker.pid)
            for t in threads:
                t.start()
            time.sleep(1.0 if threads else 0)  # the attack under way
            latencies = _phase(broker, canary, args.seconds)
            stop.set()
            for t in threads:
                t.join(60)
            cpu = cpu_seconds(broker.pid) - cpu
            name += f" (RSS {_rss_mb(broker.pid):.0f} MB)"
            computed = _counter(metrics_port, "gregor_metrics_scrapes_total") - before - 1
            rows.append((name, latencies, computed, times, cpu))
        print(f"peak RSS {memory_kib(broker.pid) / 1024:.0f} MB")
        body = _counter_body(metrics_port).decode()
        for line in body.splitlines():
            if line.startswith("gregor_metrics_last_scrape"):
                print(line)
        for name, latencies, computed, times, cpu in rows:
            served = (
                f", {len(times)} scrapes served (p50 {percentile(times, 0.5):.2f} s)"
                if times
                else ""
            )
            print(
                f"{name:>30}: canary {len(latencies):,} round trips, p50 "
                f"{percentile(latencies, 0.5):.1f} ms, p99 {percentile(latencies, 0.99):.1f} ms, "
                f"max {max(latencies):.1f} ms; {computed:.0f} scrapes computed{served}; "
                f"broker CPU {cpu:.1f} s"
            )
        if args.sigterm:
            stop = threading.Event()
            threads = [
                threading.Thread(target=_half_open, args=(metrics_port, args.half_open, stop))
            ]
            threads += [
                threading.Thread(target=_scraper, args=(metrics_port, stop, []))
                for _ in range(args.scrapers)
            ]
            for t in threads:
                t.start()
            time.sleep(3)
            start = time.monotonic()
            assert broker._proc is not None
            broker._proc.send_signal(signal.SIGTERM)
            code = broker._proc.wait(120)
            print(f"SIGTERM under attack: exited ({code}) in {time.monotonic() - start:.1f} s")
            stop.set()
            for t in threads:
                t.join(60)
    finally:
        broker.stop()
    return 0


def _rss_mb(pid: int) -> float:
    """The broker's resident memory now (VmRSS; memory_kib gives the peak, VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _counter_body(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        sock.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        data = b""
        while chunk := sock.recv(1 << 20):
            data += chunk
    return data


if __name__ == "__main__":
    sys.exit(main())
