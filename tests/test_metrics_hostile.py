"""The Prometheus endpoint of a real broker process under hostile HTTP clients: half-sent
requests, slowloris, a 1 MB request line, more connections than the cap, many scrapers
at once, SIGTERM in the middle of it all. The Kafka port must stay prompt (a good
client's ApiVersions and Metadata round trips timed all along), the broker log free of
tracebacks, and every well-formed scrape answered."""

from __future__ import annotations

import contextlib
import gzip
import multiprocessing
import re
import socket
import threading
import time
from collections.abc import Iterator
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event
from pathlib import Path

import pytest

from compat_tests.broker import BrokerProcess
from gregor.apis.context import build
from gregor.server.harness.broker_process import BrokerProcessError as BrokerError
from gregor.server.metrics_exporter import MAX_CONNECTIONS, REQUEST_TIMEOUT_S
from gregor.wire.schema import request_type
from gregor.wire.versions import API_VERSIONS, METADATA
from tests.kafka_wire import WireClient, create_topic
from tests.prometheus_scrape import Scrape

GOOD_CLIENT_BOUND_S = 0.2  # every round trip of the good client during an attack
_MP = multiprocessing.get_context("fork")
_SERVING = re.compile(r"Serving Prometheus metrics on http://\S+:(\d+)/metrics")
HALF = b"GET /metrics HTTP/1.1\r\nHost: broker\r\nAccept: */*\r\n"  # no blank line: unfinished


def start_with_metrics(tmp_dir: Path, overrides: dict[str, str] | None = None) -> BrokerProcess:
    """A broker whose endpoint binds port 0 on loopback; the port it bound (read back from
    its log) is then in ``overrides["metrics.prometheus.port"]``, where Scrape looks. A
    port picked free and bound later may be taken in between on a busy machine."""
    for attempt in range(3):
        proc = BrokerProcess(tmp_dir, {**(overrides or {}), **METRICS_ON_PORT_0})
        try:
            proc.start()
        except BrokerError as e:
            # The harness picks the Kafka port free and the broker binds it later: on a busy
            # machine another process's connection may take it in between.
            if "already in use" not in str(e) or attempt == 2:
                raise
            continue
        try:
            read_metrics_port(proc)
        except AssertionError:
            proc.kill()
            raise
        return proc
    raise AssertionError("unreachable")


METRICS_ON_PORT_0 = {"metrics.prometheus.port": "0", "metrics.prometheus.host": "127.0.0.1"}


def read_metrics_port(proc: BrokerProcess) -> int:
    """The port a started broker's endpoint bound (its log says), also put in
    ``proc.overrides["metrics.prometheus.port"]`` for Scrape."""
    deadline = time.monotonic() + 30
    while not (found := _SERVING.findall(proc.log_path.read_text())):
        assert time.monotonic() < deadline, f"no metrics port in {proc.log_path}"
        time.sleep(0.05)
    proc.overrides["metrics.prometheus.port"] = found[-1]
    return int(found[-1])


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = start_with_metrics(tmp_path_factory.mktemp("metrics-hostile"))
    try:
        client = WireClient(proc.port)
        try:
            assert create_topic(client, "hostile", 200).error_code == 0
        finally:
            client.close()
        yield proc
    finally:
        proc.stop()

    assert "Traceback" not in proc.log_path.read_text()


def _port(broker: BrokerProcess) -> int:
    return int(broker.overrides["metrics.prometheus.port"])


def _connect(port: int, timeout: float = 5.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=timeout)


def _read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One HTTP response (status, lower-cased headers, body by Content-Length)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed after {data!r}")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    length = int(headers["content-length"])
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed mid-body")
        body += chunk
    assert len(body) == length
    return int(status_line.split(" ")[1]), headers, body


def _exchange(port: int, request: bytes) -> tuple[int, dict[str, str], bytes, bool]:
    """Send one request on a new connection: the response, and whether the broker then
    closed the connection (rather than keeping it alive)."""
    with _connect(port) as sock:
        sock.sendall(request)
        status, headers, body = _read_response(sock)
        sock.settimeout(0.5)
        try:
            closed = sock.recv(1) == b""
        except TimeoutError:
            closed = False
        except ConnectionResetError:
            closed = True
    return status, headers, body, closed


def _good_client(port: int, stop: Event, out: Queue) -> None:
    """ApiVersions and Metadata round trips on one connection, timed, until ``stop``."""
    latencies: list[float] = []
    errors: list[str] = []
    client = WireClient(port, timeout=30)
    versions = build(
        request_type(API_VERSIONS, 3), client_software_name="good", client_software_version="1"
    )
    metadata = build(
        request_type(METADATA, 12),
        topics=None,
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    try:
        while not stop.is_set():
            for api, version, body in ((API_VERSIONS, 3, versions), (METADATA, 12, metadata)):
                start = time.perf_counter()
                client.call(api, version, body)
                latencies.append(time.perf_counter() - start)
            time.sleep(0.005)
    except (OSError, ValueError, AssertionError) as e:
        errors.append(repr(e))
    finally:
        client.close()
        out.put((latencies, errors))


class GoodClient:
    """_good_client in a process of its own (the attack's threads share this one's
    interpreter, which would time them instead of the broker)."""

    def __init__(self, port: int) -> None:
        self._stop, self._out = _MP.Event(), _MP.Queue()
        self._proc = _MP.Process(target=_good_client, args=(port, self._stop, self._out))
        self.latencies: list[float] = []
        self.errors: list[str] = []

    def __enter__(self) -> GoodClient:
        self._proc.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.latencies, self.errors = self._out.get(timeout=60)
        self._proc.join(10)

    def check(self) -> None:
        assert not self.errors, self.errors
        assert len(self.latencies) > 20
        worst = sorted(self.latencies)[-5:]
        assert worst[-1] < GOOD_CLIENT_BOUND_S, (
            f"worst round trips {[round(w * 1000) for w in worst]} ms of {len(self.latencies)}"
        )


def _wait_until_scrapable(broker: BrokerProcess, within_s: float = 15.0) -> Scrape:
    """A scrape, once the connections of a previous attack are gone (they may hold the
    connection cap until their request timeout)."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            return Scrape(broker)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_half_open_connections_and_a_huge_request_line_leave_the_kafka_port_prompt(
    broker: BrokerProcess,
) -> None:
    port = _port(broker)
    before = _wait_until_scrapable(broker)
    held: list[socket.socket] = []
    with GoodClient(broker.port) as good:
        time.sleep(0.3)
        try:
            # A 1 MB request line is answered (414) and closed, promptly.
            start = time.monotonic()
            request = b"GET /" + b"m" * (1 << 20) + b" HTTP/1.1\r\n\r\n"
            status, _, _, closed = _exchange(port, request)
            assert (status, closed) == (414, True)
            assert time.monotonic() - start < 5
            for i in range(400):  # far more than the cap: the rest are refused
                with contextlib.suppress(OSError):
                    sock = _connect(port)
                    sock.sendall(HALF)
                    if i % 2:  # half of them hang up half-sent: that asks for nothing
                        sock.close()
                    else:
                        held.append(sock)
            time.sleep(1.0)
        finally:
            for sock in held:
                sock.close()
    good.check()
    after = _wait_until_scrapable(broker)
    # The half-sent requests computed nothing: at most the two scrapes of this test.
    scrapes = "gregor_metrics_scrapes_total"
    assert after.value(scrapes) - before.value(scrapes) <= 2
    assert after.value("gregor_metrics_refused_connections_total") > 0
    assert "Traceback" not in broker.log_path.read_text()


def test_slowloris_connections_are_closed_after_the_request_timeout(
    broker: BrokerProcess,
) -> None:
    port = _port(broker)
    _wait_until_scrapable(broker)
    request = b"GET /metrics HTTP/1.1\r\nHost: broker\r\n" + b"X-Slow: " + b"a" * 200
    socks = [_connect(port) for _ in range(5)]
    closed_after: dict[int, float] = {}
    start = time.monotonic()
    with GoodClient(broker.port) as good:
        for i in range(len(request)):
            for n, sock in enumerate(socks):
                if n in closed_after:
                    continue
                try:
                    sock.sendall(request[i : i + 1])
                    sock.setblocking(False)
                    try:
                        if sock.recv(1) == b"":
                            raise ConnectionError
                    except BlockingIOError:
                        pass
                    finally:
                        sock.setblocking(True)
                except OSError:
                    closed_after[n] = time.monotonic() - start
            if len(closed_after) == len(socks) or time.monotonic() - start > 15:
                break
            time.sleep(0.25)
    for sock in socks:
        sock.close()
    good.check()
    assert len(closed_after) == len(socks), closed_after
    assert all(
        REQUEST_TIMEOUT_S - 0.5 < t < REQUEST_TIMEOUT_S + 3 for t in closed_after.values()
    ), closed_after
    scrape = _wait_until_scrapable(broker)
    assert scrape.value("gregor_metrics_timed_out_connections_total") >= len(socks)


def test_the_connection_cap_refuses_extras_and_frees_up(broker: BrokerProcess) -> None:
    port = _port(broker)
    _wait_until_scrapable(broker)
    time.sleep(0.3)  # the scrape's own connection is closed
    idle = [_connect(port) for _ in range(MAX_CONNECTIONS)]
    try:
        time.sleep(0.3)
        status, headers, _, closed = _exchange(port, b"GET /metrics HTTP/1.1\r\n\r\n")
        assert (status, closed) == (503, True)
    finally:
        for sock in idle:
            sock.close()
    scrape = _wait_until_scrapable(broker, within_s=3)
    assert scrape.value("gregor_metrics_refused_connections_total") >= 1


def test_concurrent_scrapers_share_one_computation(broker: BrokerProcess) -> None:
    port = _port(broker)
    before = _wait_until_scrapable(broker)
    scrapers = 16
    barrier = threading.Barrier(scrapers)
    bodies: list[bytes] = []

    def scrape() -> None:
        barrier.wait()
        status, _, body, _ = _exchange(port, b"GET /metrics HTTP/1.0\r\n\r\n")
        assert status == 200
        bodies.append(body)

    threads = [threading.Thread(target=scrape) for _ in range(scrapers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(bodies) == scrapers
    after = Scrape(broker)
    computed = after.value("gregor_metrics_scrapes_total") - before.value(
        "gregor_metrics_scrapes_total"
    )
    responses = after.value("gregor_metrics_responses_total") - before.value(
        "gregor_metrics_responses_total"
    )
    assert responses == scrapers + 1
    # Sixteen at once: one computation, or two if some came while the first was computed
    # (plus the last scrape's own).
    assert computed <= 3, computed
    assert len(set(bodies)) <= 2


def test_http_behaviour(broker: BrokerProcess) -> None:
    port = _port(broker)
    _wait_until_scrapable(broker)
    status, headers, body, closed = _exchange(port, b"GET /metrics HTTP/1.0\r\n\r\n")
    assert (status, closed) == (200, True)
    assert headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert b"# TYPE kafka_log_log_size gauge\n" in body
    # HTTP/1.1 keeps the connection: two scrapes on one.
    with _connect(port) as sock:
        for _ in range(2):
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: b\r\n\r\n")
            status, headers, body = _read_response(sock)
            assert status == 200 and "connection" not in headers
    # HTTP/1.0 asking for keep-alive gets it.
    with _connect(port) as sock:
        for _ in range(2):
            sock.sendall(b"GET /metrics HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            status, headers, _ = _read_response(sock)
            assert status == 200 and headers["connection"] == "keep-alive"
    # What Prometheus asks for: OpenMetrics, gzipped.
    status, headers, body, _ = _exchange(
        port,
        b"GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text;version=1.0.0;"
        b"q=0.5,text/plain;version=0.0.4;q=0.4\r\nAccept-Encoding: gzip\r\n\r\n",
    )
    assert status == 200 and headers["content-encoding"] == "gzip"
    assert headers["content-type"].startswith("application/openmetrics-text; version=1.0.0")
    text = gzip.decompress(body)
    assert text.endswith(b"# EOF\n") and b"# TYPE kafka_log_log_size gauge\n" in text
    expected = {
        b"GET /other HTTP/1.1\r\nConnection: close\r\n\r\n": 404,
        b"POST /metrics HTTP/1.1\r\nContent-Length: 2\r\n\r\nab": 405,
        b"HEAD /metrics HTTP/1.0\r\n\r\n": 405,
        b"GET /metrics HTTP/2.0\r\n\r\n": 505,
        b"garbage\r\n\r\n": 400,
        b"GET /metrics\r\n\r\n": 400,
        b"GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n": 400,
        b"GET /metrics HTTP/1.1\r\n" + b"X-Big: " + b"h" * 20_000 + b"\r\n\r\n": 431,
        b"GET /metrics HTTP/1.1\r\n" + b"X: y\r\n" * 100 + b"\r\n": 431,
        b"\xff\xfe\x00garbage \x80 HTTP/1.1\r\n\r\n": 400,
        b"GET /metrics HTTP/1.1\r\nAccept: text/plain; version=1\rX: y\r\n\r\n": 400,
    }
    for request, want in expected.items():
        status, _, _, closed = _exchange(port, request)
        assert (status, closed) == (want, True), request[:40]
    # An Accept header prometheus_client's negotiation chokes on: the default format.
    status, headers, _, _ = _exchange(
        port, b"GET /metrics HTTP/1.0\r\nAccept: application/openmetrics-text; version=abc\r\n\r\n"
    )
    assert (status, headers["content-type"]) == (200, "text/plain; version=0.0.4; charset=utf-8")
    status, headers, body, _ = _exchange(port, b"OPTIONS /metrics HTTP/1.0\r\n\r\n")
    assert (status, headers["allow"], body) == (200, "OPTIONS,GET", b"")
    log = broker.log_path.read_text()
    assert "Bad metrics request" in log and "Traceback" not in log


def test_sigterm_during_an_attack_exits_promptly(tmp_path: Path) -> None:
    proc = start_with_metrics(tmp_path)
    metrics_port = _port(proc)
    held: list[socket.socket] = []
    stop = threading.Event()

    def loop_scrapes() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError, ConnectionError):
                _exchange(metrics_port, b"GET /metrics HTTP/1.0\r\n\r\n")

    scrapers = [threading.Thread(target=loop_scrapes, daemon=True) for _ in range(4)]
    try:
        for t in scrapers:
            t.start()
        for _ in range(300):
            with contextlib.suppress(OSError):
                sock = _connect(metrics_port)
                sock.sendall(HALF)
                held.append(sock)
        start = time.monotonic()
        proc.stop()  # SIGTERM; raises if not gone within the harness's stop timeout
        took = time.monotonic() - start
    finally:
        stop.set()
        for sock in held:
            sock.close()
        proc.kill()
    assert took < 5, took
    assert "Traceback" not in proc.log_path.read_text()
