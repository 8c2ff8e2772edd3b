"""The ``metrics_http`` family: hostile HTTP against the broker's Prometheus endpoint
(``/metrics``), while the canary times the Kafka port. Opt-in (``--family metrics_http``):
the broker is then started with ``metrics.prometheus.port`` set.

Each episode is one of: half-sent requests that hang up (they must compute nothing),
half-sent requests held open past the request timeout, slowloris (a header dripped a
byte at a time until the broker closes), huge request lines and headers, malformed
requests, and floods of whole scrapes (some read, some abandoned, some pipelined on a
kept-alive connection, in both formats, gzipped or not). An episode returns how many
requests (or attempts at one) it sent: they count as the run's frames.
"""

from __future__ import annotations

import contextlib
import random
import socket
import struct
import time

FAMILY = "metrics_http"
CONNECT_TIMEOUT_S = 2.0
IO_TIMEOUT_S = 15.0  # a scrape may wait for the next computation (at most ~5 s apart)
HOLD_S = (0.5, 2.0)
SLOWLORIS_MAX_S = 8.0  # longer than the endpoint's request timeout (5 s)
DRIP_EVERY_S = 0.5

_GOOD = (
    b"GET /metrics HTTP/1.1\r\nHost: broker\r\nUser-Agent: Prometheus/3.0\r\n"
    b"Accept: application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;"
    b"q=0.4,*/*;q=0.1\r\nAccept-Encoding: gzip\r\nX-Prometheus-Scrape-Timeout-Seconds: 10"
    b"\r\n\r\n",
    b"GET /metrics HTTP/1.0\r\n\r\n",
    b"GET /metrics?name[]=x HTTP/1.1\r\nConnection: close\r\n\r\n",
    b"GET /metrics HTTP/1.0\r\nConnection: keep-alive\r\nAccept-Encoding: gzip\r\n\r\n",
)
_BAD = (
    b"POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
    b"DELETE / HTTP/1.1\r\n\r\n",
    b"GET /../../etc/passwd HTTP/1.1\r\n\r\n",
    b"GET /metrics HTTP/9.9\r\n\r\n",
    b"GET /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    b"GET /metrics HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
    b"GET  /metrics  HTTP/1.1\r\n\r\n",
    b"\r\n\r\n\r\n\r\n\r\n\r\n",
    b"get /metrics http/1.1\r\n\r\n",
    b"GET /metrics HTTP/1.1\r\n : empty name\r\n\r\n",
    b"GET /m\xe9trics\x00 HTTP/1.1\r\n\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  # a TLS ClientHello's start
    b"\x00\x00\x00\x14\x00\x12\x00\x00",  # a Kafka frame on the wrong port
)


def _connect(port: int) -> socket.socket | None:
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=CONNECT_TIMEOUT_S)
    except OSError:
        time.sleep(0.05)
        return None
    sock.settimeout(IO_TIMEOUT_S)
    return sock


def _drain(sock: socket.socket, limit_s: float = IO_TIMEOUT_S) -> None:
    """Read until the broker closes (or limit_s)."""
    deadline = time.monotonic() + limit_s
    with contextlib.suppress(OSError):
        while time.monotonic() < deadline:
            sock.settimeout(max(deadline - time.monotonic(), 0.001))
            if not sock.recv(1 << 16):
                return


def _half(rng: random.Random) -> bytes:
    """A request cut before its blank line."""
    request = rng.choice(_GOOD)
    return request[: rng.randrange(1, request.index(b"\r\n\r\n") + 2)]


def half_sent(port: int, rng: random.Random) -> int:
    """Connections that send part of a request and hang up (or reset)."""
    socks = [s for s in (_connect(port) for _ in range(rng.randint(1, 50))) if s is not None]
    for sock in socks:
        with contextlib.suppress(OSError), sock:
            sock.sendall(_half(rng))
            if rng.random() < 0.3:  # a reset instead of a close
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    return len(socks)


def held(port: int, rng: random.Random) -> int:
    """Half-sent requests held open a while: they hold the connection cap, not the loop."""
    socks = [s for s in (_connect(port) for _ in range(100)) if s is not None]
    for sock in socks:
        with contextlib.suppress(OSError):
            sock.sendall(_half(rng))
    time.sleep(rng.uniform(*HOLD_S))
    for sock in socks:
        sock.close()
    return len(socks)


def slowloris(port: int, rng: random.Random) -> int:
    """Headers dripped a byte at a time, until the broker closes them."""
    socks = [s for s in (_connect(port) for _ in range(20)) if s is not None]
    drip = b"GET /metrics HTTP/1.1\r\nHost: broker\r\nX-Slow: " + b"s" * 1000
    open_ = list(socks)
    deadline = time.monotonic() + SLOWLORIS_MAX_S
    i = 0
    while open_ and time.monotonic() < deadline:
        for sock in list(open_):
            try:
                sock.sendall(drip[i : i + 1])
            except OSError:
                open_.remove(sock)
        i += 1
        time.sleep(DRIP_EVERY_S)
    for sock in socks:
        sock.close()
    return len(socks)


def huge(port: int, rng: random.Random) -> int:
    """A request line, header or header count far over the limits, then the answer."""
    kind = rng.randrange(4)
    if kind == 0:
        request = b"GET /" + b"m" * (1 << 20) + b" HTTP/1.1\r\n\r\n"
    elif kind == 1:
        request = b"GET /metrics HTTP/1.1\r\nX-Big: " + b"h" * 100_000 + b"\r\n\r\n"
    elif kind == 2:
        request = b"GET /metrics HTTP/1.1\r\n" + b"X: y\r\n" * 1000 + b"\r\n"
    else:
        request = rng.randbytes(1 << 20)
    sock = _connect(port)
    if sock is None:
        return 0
    with sock:
        with contextlib.suppress(OSError):
            sock.sendall(request)
        _drain(sock)
    return 1


def malformed(port: int, rng: random.Random) -> int:
    """Bad methods, versions, paths, framing and plain garbage."""
    sent = 0
    for _ in range(rng.randint(1, 10)):
        sock = _connect(port)
        if sock is None:
            continue
        request = rng.choice(_BAD) if rng.random() < 0.8 else rng.randbytes(rng.randrange(1, 400))
        with sock:
            with contextlib.suppress(OSError):
                sock.sendall(request)
                sock.shutdown(socket.SHUT_WR)
            _drain(sock, 2.0 if request in _BAD else 6.0)
        sent += 1
    return sent


def flood(port: int, rng: random.Random) -> int:
    """Whole scrapes from many connections at once: some read, some abandoned unread,
    some pipelined on a kept-alive connection."""
    socks = []
    sent = 0
    for _ in range(rng.randint(5, 40)):
        sock = _connect(port)
        if sock is None:
            continue
        requests = [rng.choice(_GOOD) for _ in range(rng.choice((1, 1, 1, 3)))]
        with contextlib.suppress(OSError):
            sock.sendall(b"".join(requests))
            sent += len(requests)
        if rng.random() < 0.4:
            sock.close()  # abandoned: the answer is not read
        else:
            socks.append(sock)
    for sock in socks:
        with sock:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_WR)
            _drain(sock)
    return sent


EPISODES = (
    (half_sent, 0.3),
    (held, 0.08),
    (slowloris, 0.04),
    (huge, 0.12),
    (malformed, 0.2),
    (flood, 0.26),
)


def attack(port: int, rng: random.Random) -> int:
    """One episode against the endpoint on ``port``; the requests it sent."""
    episode = rng.choices([e for e, _ in EPISODES], [w for _, w in EPISODES])[0]
    return episode(port, rng)


def placeholder(rng: random.Random) -> list[bytes]:
    """The family's entry in frames.FAMILIES: episodes are run by ``attack``, on the
    metrics port (runner.fuzz_worker), not as frames on the Kafka port."""
    return []
