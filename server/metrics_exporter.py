"""The Prometheus endpoint: ``/metrics`` on ``metrics.prometheus.host``:
``metrics.prometheus.port``, served by a thread of its own (prometheus_client's WSGI app),
so a scrape never waits for the event loop to serve it and never holds it up either,
except for the one snapshot of broker state taken on the loop (``metrics_state.py``).

Names are those the Prometheus JMX exporter gives Kafka's MBeans with its example
Kafka configuration (``example_configs/kafka-2_0_0.yml``, also Strimzi's): lower case,
``kafka_<domain>_<type>_<name>``, ``PerSec`` meters as ``_total`` counters without the
``PerSec``, the MBean's keys as labels. Request times are real Prometheus histograms (the
exporter can only make quantile gauges of Kafka's, keeping their ``_count``). Kafka has no
MBean for consumer-group lag; those follow kafka_exporter's ``kafka_consumergroup_*``.
docs/metrics.md lists them all.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import socket
import threading
from collections.abc import Callable, Iterator
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import ThreadingWSGIServer, make_wsgi_app
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from server.metrics import (
    BUCKETS_MS,
    BYTES_IN,
    BYTES_OUT,
    MESSAGES_IN,
    SLOTS,
    TIMES,
    BrokerMetrics,
    RequestStats,
)
from server.metrics_state import BrokerState
from server.ratelimit import RateLimitedLog

logger = logging.getLogger(__name__)
limited_log = RateLimitedLog(logger)

# How long a scrape waits for the event loop's snapshot of broker state; past it, the
# scrape answers without the state gauges (Prometheus's default scrape timeout is 10 s).
STATE_TIMEOUT_S = 5.0
# How often the HTTP thread checks whether it is to stop: the bound on a shutdown's wait.
_POLL_S = 0.1

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


class BrokerCollector(Collector):
    """Builds the metric families at scrape time, on the scrape's thread."""

    def __init__(
        self, metrics: BrokerMetrics, read_state: Callable[[], BrokerState | None]
    ) -> None:
        self.metrics = metrics
        self.read_state = read_state

    def collect(self) -> Iterator[Metric]:
        # First: reading the state on the event loop also counts the requests waiting in
        # the batch, so the histograms copied next include every request answered so far.
        state = self.read_state()
        yield from _topic_families(self.metrics)
        yield from _request_families(self.metrics.request_types())
        if state is not None:
            yield from _state_families(state)


def _topic_families(metrics: BrokerMetrics) -> Iterator[Metric]:
    topics = {topic: list(counts) for topic, counts in metrics.topics.copy().items()}
    totals = list(metrics.all_topics)
    for name, index, doc in _TOPIC_COUNTERS:
        family = CounterMetricFamily(name, doc, labels=["topic"])
        family.add_metric([], totals[index])
        for topic, counts in sorted(topics.items()):
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


def _request_families(types: list[RequestStats]) -> Iterator[Metric]:
    copies = [_Copy.of(stats) for stats in types]
    by_name = {c.name: c for c in copies}
    # Kafka counts every fetch under Fetch as well as under FetchConsumer or FetchFollower.
    copies.append(by_name["FetchConsumer"].plus(by_name["FetchFollower"], "Fetch"))
    seen = sorted((c for c in copies if any(c.versions)), key=lambda c: c.name)
    requests = CounterMetricFamily(
        "kafka_network_requestmetrics_requests",
        "Requests answered, by type and API version (RequestsPerSec)",
        labels=["request", "version"],
    )
    for c in seen:
        for version, count in enumerate(c.versions):
            if count:
                requests.add_metric([c.name, str(version)], count)
    yield requests
    for i, time_name in enumerate(TIMES):
        family = HistogramMetricFamily(
            f"kafka_network_requestmetrics_{time_name.lower()}",
            f"{time_name}: milliseconds {_TIME_DOCS[time_name]}",
            labels=["request"],
        )
        for c in seen:
            histogram = c.data[i * SLOTS : (i + 1) * SLOTS]
            buckets = list(zip(_LE, itertools.accumulate(histogram[:-1]), strict=True))
            family.add_metric([c.name], buckets, sum_value=histogram[-1] / 1e6)
        yield family


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _state_families(state: BrokerState) -> Iterator[Metric]:
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
    log_gauges = (
        ("size", "Bytes of the log's segment files", 2),
        ("logstartoffset", "The log start offset", 3),
        ("logendoffset", "The log end offset", 4),
        ("numlogsegments", "Segments of the log", 5),
    )
    for suffix, doc, field in log_gauges:
        family = GaugeMetricFamily(
            f"kafka_log_log_{suffix}",
            f"{doc}, per replica hosted here",
            labels=["topic", "partition"],
        )
        for log in state.logs:
            family.add_metric([log.topic, str(log.partition)], log[field])
        yield family
    offsets = GaugeMetricFamily(
        "kafka_consumergroup_current_offset",
        "A group's committed offset, for the groups this broker coordinates and the "
        "partitions it hosts",
        labels=["consumergroup", "topic", "partition"],
    )
    lag = GaugeMetricFamily(
        "kafka_consumergroup_lag",
        "The partition's high watermark minus the group's committed offset, for the groups "
        "this broker coordinates and the partitions it hosts",
        labels=["consumergroup", "topic", "partition"],
    )
    for g in state.group_offsets:
        labels = [g.group, g.topic, str(g.partition)]
        offsets.add_metric(labels, g.offset)
        lag.add_metric(labels, g.lag)
    yield offsets
    yield lag


def on_loop(
    loop: asyncio.AbstractEventLoop, read: Callable[[], BrokerState]
) -> Callable[[], BrokerState | None]:
    """``read`` run on the loop's thread, for another thread to call: None (and a log line)
    if the loop is gone, does not get to it in STATE_TIMEOUT_S, or ``read`` fails."""

    def call() -> BrokerState | None:
        result: concurrent.futures.Future[BrokerState] = concurrent.futures.Future()

        def run() -> None:
            if result.set_running_or_notify_cancel():
                try:
                    result.set_result(read())
                except Exception as e:
                    result.set_exception(e)

        try:
            loop.call_soon_threadsafe(run)
        except RuntimeError:  # the loop is closed: the broker is stopping
            return None
        try:
            return result.result(STATE_TIMEOUT_S)
        except concurrent.futures.TimeoutError:
            result.cancel()
            limited_log.log(
                "state-timeout",
                logging.WARNING,
                "Scrape without broker state: the event loop did not answer in %.0fs",
                STATE_TIMEOUT_S,
            )
        except Exception:
            logger.exception("Reading the broker state for a scrape failed")
        return None

    return call


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        """Scrapes are not logged (wsgiref writes every request to stderr)."""


class MetricsEndpoint:
    """The HTTP server of ``/metrics`` on its own daemon thread."""

    def __init__(self, host: str, port: int, collector: Collector) -> None:
        self.host = host or "0.0.0.0"
        self.port = port
        self.registry = CollectorRegistry()
        self.registry.register(collector)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self._server: ThreadingWSGIServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> int:
        """Bind and serve; return the bound port. Raises OSError if it cannot bind."""
        family = socket.getaddrinfo(
            self.host, self.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0][0]
        server_class = type("MetricsServer", (ThreadingWSGIServer,), {"address_family": family})
        server = make_server(
            self.host,
            self.port,
            make_wsgi_app(self.registry),
            server_class,
            handler_class=_QuietHandler,
        )
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": _POLL_S},
            name="prometheus-metrics",
            daemon=True,
        )
        self._thread.start()
        self.port = server.server_port
        return self.port

    def stop(self) -> None:
        """Stop serving (waits up to _POLL_S for the server thread to notice)."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join()
