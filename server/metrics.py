"""The broker's metrics as recorded on the hot path: plain integers in lists, arrays and
dicts, turned into Prometheus metric families only when scraped (``server/metrics_exporter.py``).

Only the event loop thread writes them, so nothing is locked. Topic counters are a few
list and dict updates per partition written or read. A request leaves its timestamps in a
batch, counted into its histograms a batch at a time in C (``server/_histograms.c``), and
before every scrape. A scrape runs on the event loop too, in slices: it copies each
request type's arrays in one step (``list(...)``), so it never sees them in the middle
of a change; topic counters are read a slice at a time, so two of them may be a few
requests apart, which counters tolerate.

Request times follow Kafka's RequestMetrics: TotalTimeMs from the moment the request is
handed to the handler pool to the moment its response is written, split into
RequestQueueTimeMs (waiting for a handler), LocalTimeMs (the handler, response encoding
included), RemoteTimeMs (parked in a purgatory: a long poll, acks=all, a coordinator
write) and ResponseSendTimeMs (writing it to the socket); ThrottleTimeMs is the quota delay
applied after the response (KIP-219), not part of the total.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.utils import floatToGoString

from gregor.apis.timing import END, FOLLOWER_FETCH, RequestTiming
from gregor.coordinator.consumer_group import ConsumerGroupState
from gregor.coordinator.group import GroupState
from gregor.coordinator.share_group import ShareGroupState
from gregor.server._histograms import count
from gregor.wire import versions
from gregor.wire.schema import request_type

if TYPE_CHECKING:
    from gregor.controller.acls.authorizer import AclAuthorizer
    from gregor.coordinator.coordinator import GroupCoordinator

# Histogram buckets: powers of two of milliseconds, from 1/8 ms (a metadata answer) to
# 32768 ms (past request.timeout.ms's default: an acks=all produce that timed out). A
# time's bucket is then a division and a bit_length(), with no search and no table.
_UNIT_NS = 125_000  # 1/8 ms
BUCKETS_MS = tuple(2**k / 8 for k in range(19))
_INF = len(BUCKETS_MS)  # the +Inf bucket's index

# The histograms of a request type, in the order of their slots in RequestStats.data.
TIMES = (
    "TotalTimeMs",
    "RequestQueueTimeMs",
    "LocalTimeMs",
    "RemoteTimeMs",
    "ResponseSendTimeMs",
    "ThrottleTimeMs",
)
# A histogram's slots in RequestStats.data: a count per bucket (+Inf last, not cumulative),
# then the sum of the observations (ns).
SLOTS = len(BUCKETS_MS) + 2

# Kafka's names of the two kinds of fetch, timed apart (a follower's long poll is not a
# consumer's); "Fetch" is their sum, made at scrape time.
FETCH_CONSUMER = "FetchConsumer"
FETCH_FOLLOWER = "FetchFollower"

# Per topic: [bytes in, messages in, bytes out].
BYTES_IN, MESSAGES_IN, BYTES_OUT = range(3)


# Finished requests wait in a batch and are bucketed together once it holds this many, or
# when a scrape asks: in one loop over the batch the histograms stay in the CPU's caches,
# where bucketed as each request ended they had been evicted by the request's own work.
# Bucketing in Python cost 1 us a request this way, 3 us request by request.
BATCH = 256


class RequestStats:
    """One request type's counts per API version, and its time histograms (ns; the
    throttle time too) in one flat array: one array is one copy for a scrape. Arrays of
    int64, which the C counter adds to in place."""

    __slots__ = ("name", "versions", "data")

    def __init__(self, name: str, max_version: int) -> None:
        self.name = name
        self.versions = array("q", bytes(8 * (max_version + 1)))
        self.data = array("q", bytes(8 * len(TIMES) * SLOTS))


class BrokerMetrics:
    """What the handlers and the network layer record; written on the event loop only."""

    def __init__(self) -> None:
        self.topics: dict[str, list[int]] = {}
        self.all_topics = [0, 0, 0]  # as Kafka's all-topics meters: deleted topics stay in
        # By RequestTiming.kind: a consumer's fetch under the Fetch API key.
        self.requests: dict[int, RequestStats] = {
            key: RequestStats(request_type(key, top).__name__.removesuffix("Request"), top)
            for key, (_, top) in versions.SUPPORTED.items()
        }
        top = versions.SUPPORTED[versions.FETCH][1]
        self.requests[versions.FETCH] = RequestStats(FETCH_CONSUMER, top)
        self.requests[FOLLOWER_FETCH] = RequestStats(FETCH_FOLLOWER, top)
        self.batch: list[RequestTiming] = []

    def finish(self, timing: RequestTiming, end: int) -> None:
        """The request ended (answered, or closed) at ``end``."""
        timing[END] = end
        batch = self.batch
        batch.append(timing)
        if len(batch) >= BATCH:
            self.flush()

    def flush(self) -> None:
        """Count the batch's requests into their histograms (on the event loop thread)."""
        batch, self.batch = self.batch, []
        count(batch, self.requests, _UNIT_NS, _INF, SLOTS)

    def produced(self, topic: str, size: int, records: int) -> None:
        """A client's batches appended to one partition of ``topic``."""
        counts = self.topics.get(topic)
        if counts is None:
            counts = self.topics[topic] = [0, 0, 0]
        counts[BYTES_IN] += size
        counts[MESSAGES_IN] += records
        totals = self.all_topics
        totals[BYTES_IN] += size
        totals[MESSAGES_IN] += records

    def fetched(self, topic: str, size: int) -> None:
        """Record bytes of ``topic`` in a response to a consumer."""
        counts = self.topics.get(topic)
        if counts is None:
            counts = self.topics[topic] = [0, 0, 0]
        counts[BYTES_OUT] += size
        self.all_topics[BYTES_OUT] += size

    def forget_topic(self, topic: str) -> None:
        """The topic was deleted: its series go, as Kafka removes a deleted topic's meters."""
        self.topics.pop(topic, None)

    def request_types(self) -> list[RequestStats]:
        return list(self.requests.values())


# Kafka's authentication counters (Selector's sensors and SocketServer's
# expired-connections-killed-count, kafka.server:type=socket-server-metrics), per listener and
# SASL mechanism.
SUCCESSFUL_AUTHENTICATION = "successful-authentication-total"
SUCCESSFUL_AUTHENTICATION_NO_REAUTH = "successful-authentication-no-reauth-total"
FAILED_AUTHENTICATION = "failed-authentication-total"
SUCCESSFUL_REAUTHENTICATION = "successful-reauthentication-total"
FAILED_REAUTHENTICATION = "failed-reauthentication-total"
EXPIRED_CONNECTIONS_KILLED = "expired-connections-killed-count"
_AUTHENTICATION_DOCS = {
    SUCCESSFUL_AUTHENTICATION: "Connections authenticated",
    SUCCESSFUL_AUTHENTICATION_NO_REAUTH: "Connections authenticated by clients that cannot "
    "re-authenticate (KIP-368)",
    FAILED_AUTHENTICATION: "Authentications that failed",
    SUCCESSFUL_REAUTHENTICATION: "Connections re-authenticated",
    FAILED_REAUTHENTICATION: "Re-authentications that failed",
    EXPIRED_CONNECTIONS_KILLED: "Connections closed because their SASL session expired",
}


# Kafka has no metric of the TLS handshake's time: Gregor's, beside Kafka's socket-server
# metrics, in milliseconds and the request histograms' buckets.
TLS_HANDSHAKE_TIME = "gregor_socket_server_metrics_tls_handshake_time_ms"
_LE = (*map(floatToGoString, BUCKETS_MS), "+Inf")


class AuthenticationMetrics:
    """The authentication counters and the TLS handshake times, always recorded (a
    handshake or an authentication costs far more than a dict update) and reported when
    the Prometheus endpoint is on (a collector of it)."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str, str], int] = {}  # (counter, listener, mechanism)
        # Per listener: a count per bucket (+Inf last, not cumulative), then the sum (ns).
        self.handshakes: dict[str, array[int]] = {}

    def record(self, counter: str, listener: str, mechanism: str) -> None:
        key = (counter, listener, mechanism)
        self.counts[key] = self.counts.get(key, 0) + 1

    def tls_handshake(self, listener: str, elapsed_ns: int) -> None:
        """A TLS handshake on ``listener`` succeeded after ``elapsed_ns``."""
        slots = self.handshakes.get(listener)
        if slots is None:
            slots = self.handshakes[listener] = array("q", bytes(8 * SLOTS))
        slots[min((elapsed_ns // _UNIT_NS).bit_length(), _INF)] += 1
        slots[-1] += elapsed_ns

    def _handshake_family(self) -> HistogramMetricFamily:
        family = HistogramMetricFamily(
            TLS_HANDSHAKE_TIME,
            "Milliseconds from a TLS connection's acceptance to its handshake done",
            labels=["listener"],
        )
        for listener, slots in sorted(self.handshakes.items()):
            cumulative, buckets = 0, []
            for le, n in zip(_LE, slots[: _INF + 1], strict=True):
                cumulative += n
                buckets.append((le, cumulative))
            family.add_metric([listener], buckets, slots[-1] / 1e6)
        return family

    def collect(self) -> Iterator[Metric]:
        for counter, doc in _AUTHENTICATION_DOCS.items():
            name = "kafka_server_socket_server_metrics_" + counter.replace("-", "_")
            labels = ["listener", "mechanism"]
            family: Metric
            if counter == EXPIRED_CONNECTIONS_KILLED:  # Kafka's name has no _total
                family = GaugeMetricFamily(name, doc, labels=labels)
            else:
                family = CounterMetricFamily(name, doc, labels=labels)
            for (kind, listener, mechanism), value in sorted(self.counts.items()):
                if kind == counter:
                    family.add_metric([listener, mechanism], value)
            yield family
        yield self._handshake_family()


# Kafka's authorizer metrics (kafka.server:type=authorizer-metrics, StandardAuthorizer's
# AuthorizerMetrics): its per-minute rates are counters here, as Kafka's PerSec meters are
# (rate(...[1m]) * 60 is Kafka's figure).
_AUTHORIZER = "kafka_server_authorizer_metrics_"


class AuthorizerMetrics:
    """What the authorizer answered (its own counters, kept by ``authorize``) and how many
    ACLs it holds; a collector of the Prometheus endpoint on a broker with an authorizer."""

    def __init__(self, authorizer: AclAuthorizer) -> None:
        self.authorizer = authorizer

    def collect(self) -> Iterator[Metric]:
        allowed, denied = self.authorizer.allowed, self.authorizer.denied
        for name, doc, value in (
            ("request", "Authorizations (authorization-request-rate-per-minute)", allowed + denied),
            ("allowed", "Authorizations allowed (authorization-allowed-rate-per-minute)", allowed),
            ("denied", "Authorizations denied (authorization-denied-rate-per-minute)", denied),
        ):
            yield CounterMetricFamily(f"{_AUTHORIZER}authorization_{name}", doc, value=value)
        yield GaugeMetricFamily(
            f"{_AUTHORIZER}acls_total_count",
            "ACLs held (acls-total-count)",
            self.authorizer.count(),
        )


# Kafka's group coordinator metrics (kafka.server:type=group-coordinator-metrics,
# GroupCoordinatorMetrics): its gauges by protocol and state, and its meters as counters.
_GROUP_COORDINATOR = "kafka_server_group_coordinator_metrics_"
_CLASSIC_STATES = tuple(s.value for s in GroupState)
_CONSUMER_STATES = tuple(s.value for s in ConsumerGroupState)
_SHARE_STATES = tuple(s.value for s in ShareGroupState)


class GroupCoordinatorMetrics:
    """The groups this broker coordinates by protocol and state and the offsets they hold,
    counted at scrape time, and the coordinator's own counters of rebalances and offsets;
    a collector of the Prometheus endpoint."""

    def __init__(self, coordinator: GroupCoordinator) -> None:
        self.coordinator = coordinator

    def collect(self) -> Iterator[Metric]:
        runtime = self.coordinator.runtime
        modern = runtime.consumer_groups
        consumer = dict.fromkeys(_CONSUMER_STATES, 0)
        for modern_group in list(modern.values()):
            consumer[modern_group.state.value] += 1
        classic = dict.fromkeys(_CLASSIC_STATES, 0)
        offsets = 0
        for group_id, group in list(runtime.groups.items()):
            offsets += len(group.offsets)
            if group_id not in modern:  # else only its offsets' holder
                classic[group.state.value] += 1
        shares = self.coordinator.share_membership
        share = dict.fromkeys(_SHARE_STATES, 0)
        for share_group in shares.groups():
            share[share_group.state.value] += 1
        family = GaugeMetricFamily(
            f"{_GROUP_COORDINATOR}group_count",
            "Groups by rebalance protocol (group-count)",
            labels=["protocol"],
        )
        family.add_metric(["classic"], sum(classic.values()))
        family.add_metric(["consumer"], sum(consumer.values()))
        family.add_metric(["share"], sum(share.values()))
        yield family
        for name, doc, counts in (
            ("classic_group_count", "Classic groups by state (classic-group-count)", classic),
            ("consumer_group_count", "Consumer groups by state (consumer-group-count)", consumer),
            ("share_group_count", "Share groups by state (share-group-count)", share),
        ):
            family = GaugeMetricFamily(f"{_GROUP_COORDINATOR}{name}", doc, labels=["state"])
            for state, n in counts.items():
                family.add_metric([state], n)
            yield family
        yield GaugeMetricFamily(
            f"{_GROUP_COORDINATOR}offset_count", "Committed offsets held (offset-count)", offsets
        )
        membership, committed = self.coordinator.consumer_membership, self.coordinator.offsets
        for name, doc, value in (
            (
                "consumer_group_rebalance",
                "Consumer group epoch bumps (consumer-group-rebalance-count)",
                membership.rebalances,
            ),
            (
                "share_group_rebalance",
                "Share group epoch bumps (share-group-rebalance-count)",
                shares.rebalances,
            ),
            ("offset_commit", "Offsets committed (offset-commit-count)", committed.committed),
            ("offset_expiration", "Offsets expired (offset-expiration-count)", committed.expired),
            (
                "offset_deletion",
                "Offsets deleted by OffsetDelete (offset-deletion-count)",
                committed.deleted,
            ),
        ):
            yield CounterMetricFamily(f"{_GROUP_COORDINATOR}{name}", doc, value=value)
