"""The Prometheus endpoint: ``/metrics`` on ``metrics.prometheus.host``:
``metrics.prometheus.port``, served on the broker's event loop with no thread per
connection, so that no number of HTTP clients, however slow or hostile, can take the
interpreter away from the Kafka port.

- HTTP: a small HTTP/1.0 and 1.1 server on asyncio streams. A request's line and headers
  must arrive whole within ``REQUEST_TIMEOUT_S`` (slowloris: closed), within
  ``MAX_LINE`` and ``MAX_HEAD`` bytes (414 and 431, closed); at most ``MAX_CONNECTIONS``
  connections are open (the others get a 503 and are closed at once). A malformed request
  gets 400 (505 for an HTTP version other than 1.x), a method other than GET or OPTIONS
  405, a path other than ``/metrics`` 404; each kind logs a rate-limited line and never a
  traceback. HTTP/1.1 keeps the connection open unless asked not to, HTTP/1.0 closes it
  unless asked to keep it (``Connection: keep-alive``); an idle kept connection is closed
  after ``IDLE_TIMEOUT_S``, and one that does not take its response in ``SEND_TIMEOUT_S``.
- One computation for many scrapers (``Scrapes``): a request is answered with a scrape
  computed after it arrived (so a scrape always shows what happened before it), and
  every request that arrives while one is computed shares the next. Computations start
  at least ``MIN_INTERVAL_S`` apart, and ten times as far apart as the last one took of
  the event loop's time (at most ``MAX_INTERVAL_S``): however many scrapers loop,
  scraping costs at most about a tenth of the broker's time. A request that never
  arrives whole (a half-sent GET that closes) computes nothing.
- Slices: the broker state is read (``metrics_state.read_state``) and the per-partition,
  per-topic and histogram families are formatted ``STEP`` samples at a time, yielding to
  the event loop between slices, so that a scrape of 50,000 partitions never holds the
  loop for more than a few milliseconds at a time (2 ms measured at 41,000 partitions;
  ``gregor_metrics_last_scrape_*`` report it). The headers of those families and the
  small ones are encoded by prometheus_client's own encoders; the bulk is formatted here,
  byte for byte as those encoders would (tests/test_metrics_exposition.py checks it
  against them). The text is kept in both the Prometheus text format (0.0.4, or 1.0.0
  when asked) and OpenMetrics (``Accept: application/openmetrics-text``, what Prometheus
  asks for first), the bulk slices shared by the two; gzip (``Accept-Encoding: gzip``,
  what Prometheus sends) is done once per scrape and format in a thread (zlib releases
  the interpreter while it compresses).

Names are those the Prometheus JMX exporter gives Kafka's MBeans with its example
Kafka configuration (``example_configs/kafka-2_0_0.yml``, also Strimzi's): lower case,
``kafka_<domain>_<type>_<name>``, ``PerSec`` meters as ``_total`` counters without the
``PerSec``, the MBean's keys as labels. Request times are real Prometheus histograms (the
exporter can only make quantile gauges of Kafka's, keeping their ``_count``). Kafka has no
MBean for consumer-group lag; those follow kafka_exporter's ``kafka_consumergroup_*``.
The endpoint's own counters are ``gregor_metrics_*``. docs/metrics.md lists them all.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import itertools
import logging
import socket
import time
import zlib
from collections.abc import Awaitable, Callable, Iterable, Iterator

from prometheus_client import PlatformCollector, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import (
    CONTENT_TYPE_PLAIN_0_0_4,
    choose_encoder,
    generate_latest,
    gzip_accepted,
)
from prometheus_client.openmetrics import exposition as openmetrics
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from gregor.ratelimit import RateLimitedLog
from gregor.server.metrics import (
    BUCKETS_MS,
    BYTES_IN,
    BYTES_OUT,
    MESSAGES_IN,
    SLOTS,
    TIMES,
    BrokerMetrics,
    RequestStats,
)
from gregor.server.metrics_state import STEPS, BrokerState, GroupOffset, Logs, Steps, pause

logger = logging.getLogger(__name__)
limited_log = RateLimitedLog(logger)

# HTTP limits.
MAX_CONNECTIONS = 32
MAX_LINE = 8 * 1024  # the request line
MAX_HEAD = 16 * 1024  # the request line and the headers
MAX_HEADERS = 64
REQUEST_TIMEOUT_S = 5.0  # a request's line and headers, from the connection or first byte
IDLE_TIMEOUT_S = 30.0  # a kept-alive connection waiting for its next request
SEND_TIMEOUT_S = 30.0  # a response the client does not read
LINGER_S = 1.0  # after an error answer, unread request bytes are discarded this long
LINGER_BYTES = 4 << 20  # or up to this many
_WRITE_HIGH = 256 * 1024  # buffered response bytes before waiting for the client

# How often scrapes are computed: at least MIN_INTERVAL_S apart, and COST_FACTOR times
# the last one's duration, up to MAX_INTERVAL_S.
MIN_INTERVAL_S = 0.05
COST_FACTOR = 10.0
MAX_INTERVAL_S = 5.0
# Samples formatted per slice of the event loop's time (about a millisecond).
STEP = 2000

TEXT, OPENMETRICS = 0, 1
_EOF = b"# EOF\n"
_ALLOW = "OPTIONS,GET"

_TOPIC_COUNTERS = (
    (
        "kafka_server_brokertopicmetrics_bytesin",
        BYTES_IN,
        "Bytes of record batches appended by Produce requests (BytesInPerSec); without a "
        "topic label, all topics",
    ),
    (
        "kafka_server_brokertopicmetrics_messagesin",
        MESSAGES_IN,
        "Records appended by Produce requests, idempotent retries not counted "
        "(MessagesInPerSec); without a topic label, all topics",
    ),
    (
        "kafka_server_brokertopicmetrics_bytesout",
        BYTES_OUT,
        "Bytes of record batches in Fetch responses to consumers (BytesOutPerSec); "
        "without a topic label, all topics",
    ),
)
_TIME_DOCS = {
    "TotalTimeMs": "from the request's hand-over to the handlers to its response written",
    "RequestQueueTimeMs": "waiting for a request handler",
    "LocalTimeMs": "in the request handler, response encoding included",
    "RemoteTimeMs": "parked in a purgatory (long poll, acks=all, coordinator write)",
    "ResponseSendTimeMs": "writing the response to the socket",
    "ThrottleTimeMs": "the quota delay applied after the response",
}
_LE = [floatToGoString(b) for b in BUCKETS_MS] + ["+Inf"]
# (name suffix, doc, LogState field)
_LOG_GAUGES = (
    ("size", "Bytes of the log's segment files", 2),
    ("logstartoffset", "The log start offset", 3),
    ("logendoffset", "The log end offset", 4),
    ("numlogsegments", "Segments of the log", 5),
)
_OFFSETS_DOC = (
    "A group's committed offset, for the groups this broker coordinates and the partitions it hosts"
)
_LAG_DOC = (
    "The partition's high watermark minus the group's committed offset, for the groups "
    "this broker coordinates and the partitions it hosts"
)
_GROUP_LABELS = ["consumergroup", "topic", "partition"]
_ENDPOINT_FAMILIES = (
    ("gregor_metrics_scrapes", "counter", "Scrapes computed (concurrent requests share one)"),
    ("gregor_metrics_responses", "counter", "Responses to GET /metrics"),
    (
        "gregor_metrics_refused_connections",
        "counter",
        "Connections refused over the connection cap",
    ),
    (
        "gregor_metrics_timed_out_connections",
        "counter",
        "Connections closed because a request did not arrive whole in time",
    ),
    (
        "gregor_metrics_bad_requests",
        "counter",
        "Malformed, oversized or unsupported HTTP requests",
    ),
    (
        "gregor_metrics_last_scrape_cpu_seconds",
        "gauge",
        "CPU time of the event loop's thread the last scrape computed took, over its slices",
    ),
    (
        "gregor_metrics_last_scrape_longest_slice_seconds",
        "gauge",
        "The longest the last scrape computed held the event loop at a time (CPU time)",
    ),
    ("gregor_metrics_last_scrape_slices", "gauge", "Slices of the last scrape computed"),
)


# -- the families, as prometheus_client's objects (small ones; the reference for the rest)


def _topic_families(
    totals: list[int], topics: list[tuple[str, list[int]]]
) -> Iterator[CounterMetricFamily]:
    for name, index, doc in _TOPIC_COUNTERS:
        family = CounterMetricFamily(name, doc, labels=["topic"])
        family.add_metric([], totals[index])
        for topic, counts in topics:
            family.add_metric([topic], counts[index])
        yield family


class _Copy:
    """One request type's numbers, copied off the live lists."""

    def __init__(self, name: str, versions: list[int], data: list[int]) -> None:
        self.name, self.versions, self.data = name, versions, data

    @classmethod
    def of(cls, stats: RequestStats) -> _Copy:
        return cls(stats.name, list(stats.versions), list(stats.data))

    def plus(self, other: _Copy, name: str) -> _Copy:
        return _Copy(name, _add(self.versions, other.versions), _add(self.data, other.data))


def _add(x: list[int], y: list[int]) -> list[int]:
    return [a + b for a, b in zip(x, y, strict=True)]


def _request_copies(types: list[RequestStats]) -> list[_Copy]:
    """The request types seen so far, copied, by name; Fetch the sum of its two kinds."""
    copies = [_Copy.of(stats) for stats in types]
    by_name = {c.name: c for c in copies}
    # Kafka counts every fetch under Fetch as well as under FetchConsumer or FetchFollower.
    copies.append(by_name["FetchConsumer"].plus(by_name["FetchFollower"], "Fetch"))
    return sorted((c for c in copies if any(c.versions)), key=lambda c: c.name)


def _requests_family(seen: list[_Copy]) -> CounterMetricFamily:
    requests = CounterMetricFamily(
        "kafka_network_requestmetrics_requests",
        "Requests answered, by type and API version (RequestsPerSec)",
        labels=["request", "version"],
    )
    for c in seen:
        for version, count in enumerate(c.versions):
            if count:
                requests.add_metric([c.name, str(version)], count)
    return requests


def _time_family(i: int) -> HistogramMetricFamily:
    time_name = TIMES[i]
    return HistogramMetricFamily(
        f"kafka_network_requestmetrics_{time_name.lower()}",
        f"{time_name}: milliseconds {_TIME_DOCS[time_name]}",
        labels=["request"],
    )


def _request_families(types: list[RequestStats]) -> Iterator[Metric]:
    seen = _request_copies(types)
    yield _requests_family(seen)
    for i in range(len(TIMES)):
        family = _time_family(i)
        for c in seen:
            histogram = c.data[i * SLOTS : (i + 1) * SLOTS]
            buckets = list(zip(_LE, itertools.accumulate(histogram[:-1]), strict=True))
            family.add_metric([c.name], buckets, sum_value=histogram[-1] / 1e6)
        yield family


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _scalar_families(state: BrokerState) -> Iterator[Metric]:
    yield _gauge(
        "kafka_server_replicamanager_partitioncount",
        "Partitions with a replica on this broker",
        state.partitions,
    )
    yield _gauge(
        "kafka_server_replicamanager_leadercount", "Partitions this broker leads", state.leaders
    )
    yield _gauge(
        "kafka_server_replicamanager_underreplicatedpartitions",
        "Partitions led here whose ISR is smaller than their replica set",
        state.under_replicated,
    )
    yield _gauge(
        "kafka_controller_kafkacontroller_activecontrollercount",
        "1 if this broker is the active controller",
        int(state.active_controller),
    )
    yield _gauge(
        "kafka_controller_kafkacontroller_offlinepartitionscount",
        "Partitions without a live leader (reported by the active controller; 0 elsewhere)",
        state.offline,
    )


def _log_family(suffix: str, doc: str) -> GaugeMetricFamily:
    return GaugeMetricFamily(
        f"kafka_log_log_{suffix}", f"{doc}, per replica hosted here", labels=["topic", "partition"]
    )


def _endpoint_families(values: Iterable[float]) -> Iterator[Metric]:
    for (name, kind, doc), value in zip(_ENDPOINT_FAMILIES, values, strict=True):
        if kind == "counter":
            yield CounterMetricFamily(name, doc, value=value)
        else:
            yield GaugeMetricFamily(name, doc, value=value)


def reference_families(
    metrics: BrokerMetrics, state: BrokerState | None, endpoint_counts: Iterable[float]
) -> Iterator[Metric]:
    """Every broker family as prometheus_client objects, in the order of the exposition:
    what ``build`` formats, for prometheus_client's encoders to check it against."""
    topics = sorted(metrics.topics.items())
    yield from _topic_families(list(metrics.all_topics), topics)
    yield from _request_families(metrics.request_types())
    if state is not None:
        yield from _scalar_families(state)
        for suffix, doc, field in _LOG_GAUGES:
            family = _log_family(suffix, doc)
            logs = state.logs
            for topic, partition, value in zip(
                logs.topics, logs.partitions, logs.column(field), strict=True
            ):
                family.add_metric([topic, str(partition)], value)
            yield family
        offsets = GaugeMetricFamily(
            "kafka_consumergroup_current_offset", _OFFSETS_DOC, labels=_GROUP_LABELS
        )
        lag = GaugeMetricFamily("kafka_consumergroup_lag", _LAG_DOC, labels=_GROUP_LABELS)
        for g in state.group_offsets:
            labels = [g.group, g.topic, str(g.partition)]
            offsets.add_metric(labels, g.offset)
            lag.add_metric(labels, g.lag)
        yield offsets
        yield lag
    yield from _endpoint_families(endpoint_counts)


# -- the exposition, built in slices


class _Just:
    """A collector of the given families, for prometheus_client's encoders."""

    def __init__(self, *families: Metric) -> None:
        self.families = families

    def collect(self) -> tuple[Metric, ...]:
        return self.families


def _encoded(*families: Metric) -> tuple[bytes, bytes]:
    """``families`` in the text format and in OpenMetrics (without its ``# EOF``), by
    prometheus_client's encoders."""
    collector = _Just(*families)
    return generate_latest(collector), openmetrics.generate_latest(collector)[: -len(_EOF)]


def _num(value: float) -> str:
    """floatToGoString(value), quicker for the usual small integers."""
    if value.__class__ is int and -(10**15) < value < 1_000_000:
        return f"{value}.0"
    return floatToGoString(value)


def _esc(value: str) -> str:
    """A label value escaped as both encoders do (backslash, newline, double quote)."""
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


class Exposition:
    """One scrape's text in both formats: lists of chunks, the bulk ones shared."""

    def __init__(self) -> None:
        self.chunks: tuple[list[bytes], list[bytes]] = ([], [])
        self.steps = Steps()
        self._gzipped: dict[int, asyncio.Future[list[bytes]]] = {}

    def families(self, *families: Metric) -> None:
        text, om = _encoded(*families)
        self.chunks[TEXT].append(text)
        self.chunks[OPENMETRICS].append(om)

    def shared(self, chunk: bytes) -> None:
        self.chunks[TEXT].append(chunk)
        self.chunks[OPENMETRICS].append(chunk)

    def finish(self) -> None:
        self.chunks[OPENMETRICS].append(_EOF)

    def body(self, fmt: int) -> bytes:
        return b"".join(self.chunks[fmt])

    async def gzipped(self, fmt: int) -> list[bytes]:
        """The format's text gzipped: once per scrape, in a thread."""
        future = self._gzipped.get(fmt)
        if future is None:
            loop = asyncio.get_running_loop()
            future = self._gzipped[fmt] = loop.run_in_executor(None, _gzip, self.chunks[fmt])
        return await asyncio.shield(future)


def _gzip(chunks: list[bytes]) -> list[bytes]:
    compressor = zlib.compressobj(6, zlib.DEFLATED, 31)  # 31: gzip's header and trailer
    out = [compressor.compress(chunk) for chunk in chunks]
    out.append(compressor.flush())
    return [chunk for chunk in out if chunk]


async def _bulk(exposition: Exposition, head: Metric, lines: Iterable[str]) -> None:
    """A family whose header is ``head`` (prometheus_client's encoding of it, with its
    unlabelled sample if any) and whose labelled sample lines are ``lines``, formatted
    STEP at a time with the event loop served in between."""
    await pause()
    exposition.families(head)
    iterator = iter(lines)
    while chunk := "".join(itertools.islice(iterator, STEP)):
        exposition.shared(chunk.encode())
        await pause()


def _topic_lines(name: str, index: int, topics: list[tuple[str, list[int]]]) -> Iterator[str]:
    sample = f"{name}_total"
    for topic, counts in topics:
        yield f'{sample}{{topic="{_esc(topic)}"}} {_num(counts[index])}\n'


def _histogram_lines(name: str, i: int, seen: list[_Copy]) -> Iterator[str]:
    for c in seen:
        request = _esc(c.name)
        histogram = c.data[i * SLOTS : (i + 1) * SLOTS]
        count = 0
        for le, n in zip(_LE, histogram[:-1], strict=True):
            count += n
            yield f'{name}_bucket{{le="{le}",request="{request}"}} {_num(count)}\n'
        yield f'{name}_count{{request="{request}"}} {_num(count)}\n'
        yield f'{name}_sum{{request="{request}"}} {floatToGoString(histogram[-1] / 1e6)}\n'


def _log_lines(name: str, field: int, logs: Logs) -> Iterator[str]:
    for topic, partition, value in zip(
        logs.topics, logs.partitions, logs.column(field), strict=True
    ):
        yield f'{name}{{partition="{partition}",topic="{_esc(topic)}"}} {_num(value)}\n'


def _group_lines(name: str, lag: bool, offsets: list[GroupOffset]) -> Iterator[str]:
    for g in offsets:
        value = g.lag if lag else g.offset
        yield (
            f'{name}{{consumergroup="{_esc(g.group)}",partition="{g.partition}",'
            f'topic="{_esc(g.topic)}"}} {_num(value)}\n'
        )


async def build(
    metrics: BrokerMetrics,
    read_state: Callable[[], Awaitable[BrokerState]],
    endpoint_counts: Callable[[], Iterable[float]],
    collectors: Iterable[Collector] = (),
) -> Exposition:
    """One scrape, on the event loop, in slices (timed in ``exposition.steps``)."""
    exposition = Exposition()
    STEPS.set(exposition.steps)
    # First: reading the state also counts the requests waiting in the batch, so the
    # histograms copied next include every request answered so far.
    try:
        state: BrokerState | None = await read_state()
    except Exception as e:
        state = None
        limited_log.log(
            "state-failed", logging.ERROR, "Scrape without broker state: reading it failed: %r", e
        )
    totals = list(metrics.all_topics)
    topics = sorted(metrics.topics.items())
    for name, index, doc in _TOPIC_COUNTERS:
        counter = CounterMetricFamily(name, doc, labels=["topic"])
        counter.add_metric([], totals[index])
        await _bulk(exposition, counter, _topic_lines(name, index, topics))
    await pause()
    seen = _request_copies(metrics.request_types())
    exposition.families(_requests_family(seen))
    for i in range(len(TIMES)):
        histogram = _time_family(i)
        await _bulk(exposition, histogram, _histogram_lines(histogram.name, i, seen))
    if state is not None:
        exposition.families(*_scalar_families(state))
        for suffix, doc, field in _LOG_GAUGES:
            gauge = _log_family(suffix, doc)
            await _bulk(exposition, gauge, _log_lines(gauge.name, field, state.logs))
        for name, doc, lag in (
            ("kafka_consumergroup_current_offset", _OFFSETS_DOC, False),
            ("kafka_consumergroup_lag", _LAG_DOC, True),
        ):
            gauge = GaugeMetricFamily(name, doc, labels=_GROUP_LABELS)
            await _bulk(exposition, gauge, _group_lines(name, lag, state.group_offsets))
    await pause()
    exposition.families(*_endpoint_families(endpoint_counts()))
    for collector in collectors:
        exposition.families(*collector.collect())
    exposition.finish()
    exposition.steps.end_slice(2)
    return exposition


class Scrapes:
    """Scrapes computed at most once per interval and shared: ``get()`` returns one that
    started after it was called (it waits for the next), shared by every caller that came
    while the previous one was computed or the interval ran."""

    def __init__(
        self,
        compute: Callable[[], Awaitable[Exposition]],
        min_interval_s: float = MIN_INTERVAL_S,
        cost_factor: float = COST_FACTOR,
    ) -> None:
        self.compute = compute
        self.min_interval_s = min_interval_s
        self.cost_factor = cost_factor
        self.computed = 0
        self.last_steps: Steps | None = None
        self._next: asyncio.Future[Exposition] | None = None
        self._runner: asyncio.Task[None] | None = None
        self._last_start = -float("inf")
        self._last_cost = 0.0

    def interval(self) -> float:
        return min(MAX_INTERVAL_S, max(self.min_interval_s, self.cost_factor * self._last_cost))

    async def get(self) -> Exposition:
        if self._next is None:
            self._next = asyncio.get_running_loop().create_future()
            if self._runner is None or self._runner.done():
                self._runner = asyncio.create_task(self._run(), name="metrics-scrape")
        return await asyncio.shield(self._next)

    async def _run(self) -> None:
        while self._next is not None:
            wait = self._last_start + self.interval() - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            future, self._next = self._next, None
            self._last_start = start = time.monotonic()
            self.computed += 1
            try:
                exposition = await self.compute()
            except asyncio.CancelledError:
                future.cancel()
                raise
            except Exception as e:
                limited_log.log("scrape-failed", logging.ERROR, "Computing a scrape failed: %r", e)
                future.set_exception(e)
                future.exception()  # retrieved: no "never retrieved" log if nobody waits
                self._last_cost = time.monotonic() - start
            else:
                future.set_result(exposition)
                steps = self.last_steps = exposition.steps
                logger.debug(
                    "Scrape computed in %.0f ms (%.1f ms of CPU in %d slices, the longest "
                    "%.1f ms, ending at %s)",
                    (time.monotonic() - start) * 1000,
                    steps.cpu * 1000,
                    steps.count,
                    steps.longest * 1000,
                    steps.longest_at,
                )
                # The cost is the event loop's time it took, not the wall time its slices
                # were spread over.
                self._last_cost = steps.cpu

    def stop(self) -> None:
        if self._runner is not None:
            self._runner.cancel()
        if self._next is not None:
            self._next.cancel()
            self._next = None


# -- HTTP


class _Idle(Exception):
    """A kept-alive connection sent no next request in time."""


class _BadRequest(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    414: "URI Too Long",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
    505: "HTTP Version Not Supported",
}


def _response_head(
    status: int, headers: list[tuple[str, str]], length: int, minor: int, keep: bool
) -> bytes:
    lines = [
        f"HTTP/1.{minor} {status} {_REASONS[status]}",
        f"Date: {email.utils.formatdate(usegmt=True)}",
        "Server: Gregor",
        *(f"{k}: {v}" for k, v in headers),
        f"Content-Length: {length}",
    ]
    if not keep:
        lines.append("Connection: close")
    elif minor == 0:
        lines.append("Connection: keep-alive")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class _Request:
    __slots__ = ("method", "target", "minor", "headers")

    def __init__(self, method: str, target: str, minor: int, headers: dict[str, str]) -> None:
        self.method, self.target, self.minor, self.headers = method, target, minor, headers

    @property
    def keep_alive(self) -> bool:
        tokens = {t.strip().lower() for t in self.headers.get("connection", "").split(",")}
        if "transfer-encoding" in self.headers or self.headers.get("content-length", "0") != "0":
            return False  # a body this server does not read
        return "close" not in tokens if self.minor == 1 else "keep-alive" in tokens


def _parse_request_line(line: bytes) -> tuple[str, str, int]:
    parts = line.decode("latin-1").rstrip("\r\n").split(" ")
    if len(parts) != 3:
        raise _BadRequest(400, "malformed request line")
    method, target, version = parts
    if not (method.isascii() and method.isalpha() and method.isupper()) or not target:
        raise _BadRequest(400, "malformed request line")
    if version not in ("HTTP/1.0", "HTTP/1.1"):
        if version.startswith("HTTP/") and version[5:].replace(".", "", 1).isdigit():
            raise _BadRequest(505, f"HTTP version {version[5:]!r}")
        raise _BadRequest(400, "malformed request line")
    return method, target, int(version[-1])


def _parse_header(line: bytes, headers: dict[str, str]) -> None:
    name, colon, value = line.decode("latin-1").rstrip("\r\n").partition(":")
    if not colon or not name or name != name.strip() or " " in name:
        raise _BadRequest(400, "malformed header line")
    name = name.lower()
    value = value.strip()
    if any((c < " " and c != "\t") or c == "\x7f" for c in value):
        raise _BadRequest(400, "control character in a header")
    if name == "content-length" and not value.isdigit():
        raise _BadRequest(400, "malformed Content-Length")
    headers[name] = f"{headers[name]},{value}" if name in headers else value


async def _linger(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """After an error answer to a request not read to its end: end our side and discard
    what the client still sends for a moment (at most LINGER_BYTES), so that closing
    with unread bytes does not reset the connection before the client reads the answer."""
    with contextlib.suppress(OSError, RuntimeError):
        writer.write_eof()
    discarded = 0
    deadline = time.monotonic() + LINGER_S
    with contextlib.suppress(OSError, TimeoutError):
        while discarded < LINGER_BYTES:
            data = await asyncio.wait_for(reader.read(65536), deadline - time.monotonic())
            if not data:
                return
            discarded += len(data)


class MetricsEndpoint:
    """The HTTP server of ``/metrics``, on the running event loop."""

    def __init__(
        self,
        host: str,
        port: int,
        metrics: BrokerMetrics,
        read_state: Callable[[], Awaitable[BrokerState]],
        *,
        max_connections: int = MAX_CONNECTIONS,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
        send_timeout_s: float = SEND_TIMEOUT_S,
        min_interval_s: float = MIN_INTERVAL_S,
    ) -> None:
        self.host = host or "0.0.0.0"
        self.port = port
        self.metrics = metrics
        self.max_connections = max_connections
        self.request_timeout_s = request_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.send_timeout_s = send_timeout_s
        self.collectors: list[Collector] = [
            ProcessCollector(registry=None),
            PlatformCollector(registry=None),
        ]
        self.scrapes = Scrapes(
            lambda: build(metrics, read_state, self.counts, self.collectors), min_interval_s
        )
        self.responses = self.refused = self.timed_out = self.bad_requests = 0
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    def counts(self) -> tuple[float, ...]:
        last = self.scrapes.last_steps
        return (
            self.scrapes.computed,
            self.responses,
            self.refused,
            self.timed_out,
            self.bad_requests,
            last.cpu if last else 0.0,
            last.longest if last else 0.0,
            last.count if last else 0,
        )

    async def start(self) -> int:
        """Bind and serve; return the bound port. Raises OSError if it cannot bind."""
        family, kind, proto, _, address = socket.getaddrinfo(
            self.host, self.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
            sock.setblocking(False)
            self._server = await asyncio.start_server(
                self._connection, sock=sock, limit=MAX_HEAD, backlog=128
            )
        except BaseException:
            sock.close()
            raise
        self.port = sock.getsockname()[1]
        return self.port

    async def stop(self) -> None:
        """Stop serving: close the listener and every connection, drop the scrape."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        self.scrapes.stop()
        tasks = list(self._connections)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        transport = writer.transport
        if len(self._connections) >= self.max_connections or self._server is None:
            self.refused += 1
            limited_log.log(
                "refused",
                logging.WARNING,
                "Refused a metrics connection: %d open, the most served at once",
                len(self._connections),
            )
            transport.write(_response_head(503, [], 0, 1, False))
            transport.close()
            return
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        finished = False
        try:
            await self._serve(reader, writer)
            finished = True
        except (OSError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # the client went away, or the broker is stopping
        except Exception as e:  # a bug of ours: a line, never a traceback into the log
            limited_log.log("failed", logging.ERROR, "Serving a metrics request failed: %r", e)
        finally:
            self._connections.discard(task)
            if finished:  # the last response's tail is sent, unless the client stops reading
                transport.close()
                asyncio.get_running_loop().call_later(self.send_timeout_s, transport.abort)
            else:
                transport.abort()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        line_timeout = self.request_timeout_s  # the first request: from the connection on
        while True:
            try:
                request = await self._read_request(reader, line_timeout)
            except _Idle:
                return  # closed quietly, as HTTP servers close idle connections
            except TimeoutError:
                self.timed_out += 1
                limited_log.log(
                    "timeout",
                    logging.INFO,
                    "Closed a metrics connection: no whole request within %.0fs",
                    self.request_timeout_s,
                )
                return
            except asyncio.IncompleteReadError:
                return  # closed before a whole request: nothing was asked
            except _BadRequest as e:
                self.bad_requests += 1
                peer = writer.get_extra_info("peername")
                limited_log.log(
                    "bad-request",
                    logging.INFO,
                    "Bad metrics request from %s: %d %s",
                    peer[0] if peer else "?",
                    e.status,
                    e,
                )
                body = f"{e.status} {_REASONS[e.status]}: {e}\n".encode()
                headers = [("Content-Type", "text/plain; charset=utf-8")]
                head = _response_head(e.status, headers, len(body), 1, False)
                if await self._send(writer, [head, body]):
                    await _linger(reader, writer)
                return
            if not await self._answer(request, writer):
                return
            line_timeout = self.idle_timeout_s

    async def _read_request(self, reader: asyncio.StreamReader, line_timeout: float) -> _Request:
        """The request line within ``line_timeout``, then the headers within
        request_timeout_s of it (of the connection, for the first request)."""
        start = time.monotonic()
        try:
            try:
                line = await asyncio.wait_for(reader.readuntil(b"\n"), line_timeout)
            except TimeoutError:
                if line_timeout == self.idle_timeout_s:
                    raise _Idle from None
                raise
            if line_timeout == self.idle_timeout_s:
                start = time.monotonic()
            deadline = start + self.request_timeout_s
            for _ in range(4):  # blank lines before a request are tolerated (RFC 9112)
                if line.strip():
                    break
                line = await asyncio.wait_for(reader.readuntil(b"\n"), deadline - time.monotonic())
            if len(line) > MAX_LINE:
                raise _BadRequest(414, "request line too long")
        except asyncio.LimitOverrunError:
            raise _BadRequest(414, "request line too long") from None
        method, target, minor = _parse_request_line(line)
        headers: dict[str, str] = {}
        size = len(line)
        count = 0
        while True:
            try:
                line = await asyncio.wait_for(reader.readuntil(b"\n"), deadline - time.monotonic())
            except asyncio.LimitOverrunError:
                raise _BadRequest(431, "header line too long") from None
            size += len(line)
            if size > MAX_HEAD or count > MAX_HEADERS:
                raise _BadRequest(431, "headers too large")
            if line in (b"\r\n", b"\n"):
                return _Request(method, target, minor, headers)
            _parse_header(line, headers)
            count += 1

    async def _answer(self, request: _Request, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; whether the connection stays open."""
        keep, minor = request.keep_alive, request.minor
        path = request.target.partition("?")[0]
        if request.method == "OPTIONS":
            head = _response_head(200, [("Allow", _ALLOW)], 0, minor, keep)
            return await self._send(writer, [head]) and keep
        if request.method != "GET":
            self.bad_requests += 1
            limited_log.log(
                "method", logging.INFO, "Metrics request with method %.20r: 405", request.method
            )
            text = f"# HTTP 405 Method Not Allowed: {request.method}; use OPTIONS or GET\n"
            message = text.encode()
            headers = [("Allow", _ALLOW), ("Content-Type", "text/plain; charset=utf-8")]
            head = _response_head(405, headers, len(message), minor, keep)
            return await self._send(writer, [head, message]) and keep
        if path != "/metrics":
            self.bad_requests += 1
            limited_log.log("path", logging.INFO, "Metrics request for %.60r: 404", path)
            message = b"404 Not Found: metrics are at /metrics\n"
            headers = [("Content-Type", "text/plain; charset=utf-8")]
            head = _response_head(404, headers, len(message), minor, keep)
            return await self._send(writer, [head, message]) and keep
        try:
            _, content_type = choose_encoder(request.headers.get("accept", ""))
        except Exception:  # e.g. version=abc: prometheus_client compares it to numbers
            content_type = CONTENT_TYPE_PLAIN_0_0_4
        if not (content_type.isascii() and content_type.isprintable()):
            content_type = CONTENT_TYPE_PLAIN_0_0_4  # echoes the client's version: no CR
        fmt = OPENMETRICS if content_type.startswith("application/openmetrics-text") else TEXT
        # Every metric and label name here is a legacy one, the same under any escaping
        # but "dots" (which doubles underscores): that one is not offered.
        content_type = content_type.replace("escaping=dots", "escaping=underscores")
        try:
            exposition = await self.scrapes.get()
            if gzip_accepted(request.headers.get("accept-encoding", "")):
                body = await exposition.gzipped(fmt)
                headers = [("Content-Type", content_type), ("Content-Encoding", "gzip")]
            else:
                body = exposition.chunks[fmt]
                headers = [("Content-Type", content_type)]
        except asyncio.CancelledError:
            raise
        except Exception:  # logged where it failed
            message = b"500 Internal Server Error: the scrape failed\n"
            head = _response_head(500, [("Content-Type", "text/plain")], len(message), minor, False)
            await self._send(writer, [head, message])
            return False
        self.responses += 1
        head = _response_head(200, headers, sum(map(len, body)), minor, keep)
        return await self._send(writer, [head, *body]) and keep

    async def _send(self, writer: asyncio.StreamWriter, chunks: list[bytes]) -> bool:
        """Write ``chunks``, waiting for the client to take them when it falls behind;
        False if it went away or took longer than send_timeout_s."""
        transport = writer.transport
        deadline = time.monotonic() + self.send_timeout_s
        try:
            for chunk in chunks:
                if transport.is_closing():
                    return False
                transport.write(chunk)
                if transport.get_write_buffer_size() > _WRITE_HIGH:
                    await asyncio.wait_for(writer.drain(), deadline - time.monotonic())
            await asyncio.wait_for(writer.drain(), deadline - time.monotonic())
        except (TimeoutError, OSError):
            return False
        return not transport.is_closing()
