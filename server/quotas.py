"""Client quotas: byte rates and request time per (user, client-id), as Kafka's
ClientQuotaManager measures and enforces them.

A quota group's usage is a rate over ``quota.window.num`` windows of
``quota.window.size.seconds`` (Kafka's Rate over a windowed sum). A request that takes the
rate over the bound is not refused: it is answered with the delay that brings the rate back
to the bound (``throttle_time_ms``), and the network layer mutes its connection for that
long (KIP-219). Which quota applies is the most specific configured entity in the seeds'
order; the connections matching that entity share one rate.

Entities are named as in ZooKeeper (controller/quota_entities.py). With no quota of a kind
configured its manager is disabled and costs the hot path one attribute test.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gregor.controller.quota_entities import (
    CONNECTION_CREATION_RATE,
    CONSUMER_BYTE_RATE,
    DEFAULT,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    IpEntity,
    QuotaEntity,
    desanitize,
    entity_path,
    sanitize,
)
from gregor.wire import versions
from gregor.wire.fetch import decode_fetch_request
from gregor.wire.headers import MalformedHeaderError, decode_request_header
from gregor.wire.schema import is_flexible

logger = logging.getLogger(__name__)

# A rate sensor left unused this long is dropped (Kafka's inactive-sensor expiry).
SENSOR_EXPIRY_MS = 3_600_000
_MAX_RESOLVED = 100_000
# Kafka's "no limit" for connection creation rates (Int.MaxValue).
UNLIMITED_RATE = 2**31 - 1
# Requests between brokers are never throttled by client quotas.
_INTER_BROKER = frozenset(
    {
        versions.LEADER_AND_ISR,
        versions.STOP_REPLICA,
        versions.UPDATE_METADATA,
        versions.CONTROLLED_SHUTDOWN,
        versions.ALTER_PARTITION,
        versions.WRITE_TXN_MARKERS,
    }
)


class Rate:
    """Kafka's Rate over a windowed sum: samples of ``window_ms`` each, ``num`` of them
    (plus the one being filled) making the measured span. A span shorter than ``num - 1``
    whole windows counts as that long, so a first burst is not judged over a few
    milliseconds (Rate.windowSize)."""

    __slots__ = ("num", "window_ms", "_starts", "_lasts", "_values", "_current")

    def __init__(self, num: int, window_ms: int) -> None:
        self.num = num
        self.window_ms = window_ms
        self._starts: list[int] = []
        self._lasts: list[int] = []
        self._values: list[float] = []
        self._current = 0

    def record(self, value: float, now_ms: int) -> None:
        if not self._starts:
            self._new_sample(now_ms)
        elif now_ms - self._starts[self._current] >= self.window_ms:
            self._current = (self._current + 1) % (self.num + 1)
            if self._current == len(self._starts):
                self._new_sample(now_ms)
            else:
                self._reset(self._current, now_ms)
        self._values[self._current] += value
        self._lasts[self._current] = now_ms

    def _new_sample(self, now_ms: int) -> None:
        self._starts.append(now_ms)
        self._lasts.append(now_ms)
        self._values.append(0.0)

    def _reset(self, i: int, now_ms: int) -> None:
        self._starts[i] = self._lasts[i] = now_ms
        self._values[i] = 0.0

    def _purge(self, now_ms: int) -> None:
        """Samples with no event within the measured span are emptied."""
        expiry = self.num * self.window_ms
        for i, last in enumerate(self._lasts):
            if now_ms - last >= expiry:
                self._reset(i, now_ms)

    def span_ms(self, now_ms: int) -> int:
        """The span the rate is measured over (Rate.windowSize)."""
        self._purge(now_ms)
        elapsed = now_ms - min(self._starts, default=now_ms)
        full = elapsed // self.window_ms
        if full < self.num - 1:
            elapsed += (self.num - 1 - full) * self.window_ms
        return elapsed

    def measure(self, now_ms: int) -> float:
        """Per second."""
        span = self.span_ms(now_ms)
        return self.total * 1000 / span

    @property
    def total(self) -> float:
        return sum(self._values)

    @property
    def last_ms(self) -> int:
        return max(self._lasts, default=0)


def throttle_ms(rate: float, bound: float, span_ms: int) -> int:
    """The delay that brings an observed rate O over a span W back to the bound T if
    nothing more is recorded: O * W / (W + X) = T, so X = (O - T) / T * W."""
    if rate <= bound:
        return 0
    return round((rate - bound) / bound * span_ms)


@dataclass(slots=True)
class _Sensor:
    rate: Rate
    bound: float
    until_ms: int = 0  # the quota group is throttled until then (its last delay's end)


class ClientQuotaManager:
    """One quota kind (producer bytes, consumer bytes or request time): its configured
    overrides, the rate of each quota group, and the throttle time of a recording."""

    def __init__(
        self, key: str, window_num: int, window_s: int, max_throttle_ms: int | None = None
    ) -> None:
        self.key = key
        self.window_num = window_num
        self.window_ms = window_s * 1000
        self.max_throttle_ms = max_throttle_ms
        self.enabled = False  # any quota of this kind configured
        self._overrides: dict[QuotaEntity, float] = {}
        self._sensors: dict[tuple[str, str], _Sensor] = {}  # by quota group (Kafka's tags)
        self._resolved: dict[tuple[str, str | None], _Sensor | None] = {}

    @property
    def groups(self) -> set[tuple[str, str]]:
        """The quota groups being measured, as (user, client id) with "" for either left out."""
        return set(self._sensors)

    def set_overrides(self, overrides: Mapping[QuotaEntity, float]) -> None:
        """Replace the configured quotas; rates already measured are kept."""
        self._overrides = dict(overrides)
        self.enabled = bool(self._overrides)
        self._resolved.clear()
        for sensor in self._sensors.values():
            sensor.bound = float("inf")  # re-resolved at the group's next request

    def quota(self, user: str, client_id: str | None) -> float | None:
        found = self._resolve(sanitize(user), sanitize(client_id or ""))
        return None if found is None else found[1]

    def _resolve(self, user: str, client: str) -> tuple[tuple[str, str], float] | None:
        """The quota group and bound for a sanitized (user, client id), in the seeds' order
        of precedence."""
        o = self._overrides
        for entity, group in (
            ((user, client), (user, client)),
            ((user, DEFAULT), (user, client)),
            ((user, None), (user, "")),
            ((DEFAULT, client), (user, client)),
            ((DEFAULT, DEFAULT), (user, client)),
            ((DEFAULT, None), (user, "")),
            ((None, client), ("", client)),
            ((None, DEFAULT), ("", client)),
        ):
            bound = o.get(entity)
            if bound is not None:
                return group, bound
        return None

    def _sensor(self, user: str, client_id: str | None) -> _Sensor | None:
        key = (user, client_id)
        try:
            return self._resolved[key]
        except KeyError:
            pass
        found = self._resolve(sanitize(user), sanitize(client_id or ""))
        sensor = None
        if found is not None:
            group, bound = found
            sensor = self._sensors.get(group)
            if sensor is None:
                sensor = self._sensors[group] = _Sensor(
                    Rate(self.window_num, self.window_ms), bound
                )
            sensor.bound = bound
        if len(self._resolved) >= _MAX_RESOLVED:  # a flood of client ids
            self._resolved.clear()
        self._resolved[key] = sensor
        return sensor

    def record(self, user: str, client_id: str | None, value: float, now_ms: int) -> int:
        """Record ``value`` for the client's quota group; the throttle time in ms (0 when
        the group is within its quota or has none)."""
        sensor = self._sensor(user, client_id)
        if sensor is None:
            return 0
        rate = sensor.rate
        rate.record(value, now_ms)
        span = rate.span_ms(now_ms)
        delay = throttle_ms(rate.total * 1000 / span, sensor.bound, span)
        if self.max_throttle_ms is not None:
            delay = min(delay, self.max_throttle_ms)
        if delay > 0 and now_ms + delay > sensor.until_ms:
            sensor.until_ms = now_ms + delay
        return delay

    def remaining_ms(self, user: str, client_id: str | None, now_ms: int) -> int:
        """How long the client's quota group stays throttled (0: not throttled). Every
        connection of the group is muted that long, new ones too: a client cannot shed
        its throttle by reconnecting. Looking up creates no rate."""
        try:
            sensor = self._resolved[(user, client_id)]
        except KeyError:  # not seen yet: its group may have been (a shared quota)
            found = self._resolve(sanitize(user), sanitize(client_id or ""))
            sensor = None if found is None else self._sensors.get(found[0])
        if sensor is None:
            return 0
        return max(0, sensor.until_ms - now_ms)

    def unrecord(self, user: str, client_id: str | None, value: float, now_ms: int) -> None:
        """Take back a recorded value (a throttled fetch is answered empty)."""
        sensor = self._sensor(user, client_id)
        if sensor is not None:
            sensor.rate.record(-value, now_ms)

    def max_value_in_window(self, user: str, client_id: str | None) -> float:
        """The most one recording may be without being throttled for sure: what a fetch may
        return at once (Kafka's getMaxValueInQuotaWindow)."""
        sensor = self._sensor(user, client_id)
        if sensor is None:
            return float("inf")
        return sensor.bound * (self.window_num - 1) * self.window_ms / 1000

    def expire(self, now_ms: int) -> None:
        """Drop the rates of quota groups idle for an hour."""
        idle = [g for g, s in self._sensors.items() if now_ms - s.rate.last_ms >= SENSOR_EXPIRY_MS]
        if idle:
            for group in idle:
                del self._sensors[group]
            self._resolved.clear()


class ClientQuotas:
    """The broker's quota managers and the quota configuration they enforce."""

    def __init__(self, window_num: int, window_s: int) -> None:
        self.connections = ConnectionRates(window_num, window_s)
        self.produce = ClientQuotaManager(PRODUCER_BYTE_RATE, window_num, window_s)
        self.fetch = ClientQuotaManager(CONSUMER_BYTE_RATE, window_num, window_s)
        # Request-time throttling is capped at one window, as in Kafka.
        self.request = ClientQuotaManager(
            REQUEST_PERCENTAGE, window_num, window_s, max_throttle_ms=window_s * 1000
        )
        self.configs: dict[QuotaEntity, dict[str, float]] = {}

    def apply(self, configs: Mapping[QuotaEntity, Mapping[str, float]]) -> None:
        """Enforce ``configs`` (every entity's quotas) from now on."""
        before = self.configs
        self.configs = {e: dict(v) for e, v in configs.items() if v}
        clients = {e: v for e, v in self.configs.items() if not isinstance(e, IpEntity)}
        for manager in (self.produce, self.fetch, self.request):
            manager.set_overrides(
                {e: v[manager.key] for e, v in clients.items() if manager.key in v}
            )
        self.connections.set_ip_rates(
            {
                (None if e.ip == DEFAULT else desanitize(e.ip)): int(v[CONNECTION_CREATION_RATE])
                for e, v in self.configs.items()
                if isinstance(e, IpEntity) and CONNECTION_CREATION_RATE in v
            }
        )
        if self.configs or before:
            logger.info("Client quotas now in force: %s", _describe(self.configs.items()))

    def expire(self, now_ms: int) -> None:
        for manager in (self.produce, self.fetch, self.request):
            manager.expire(now_ms)
        self.connections.expire()

    def gate(self, user: str, frame: bytes | bytearray) -> int:
        """How long a request must wait before it is handled because its client's quota
        group is throttled (ms; 0: handle it now). Kafka throttles the client (its user
        and client id), not a connection: a request on a new connection waits out the
        throttle its predecessors earned. Produce waits for the produce quota, a consumer's
        fetch for the fetch quota, every request but the brokers' own for request time."""
        produce, fetch, request = self.produce, self.fetch, self.request
        if not (produce.enabled or fetch.enabled or request.enabled):
            return 0
        try:
            header = decode_request_header(frame, False)
        except MalformedHeaderError:
            return 0  # the dispatcher answers it (by closing)
        api_key = header.api_key
        if api_key in _INTER_BROKER:
            return 0
        client_id = header.client_id
        now = time.time_ns() // 1_000_000
        delay = 0
        if request.enabled:
            delay = request.remaining_ms(user, client_id, now)
        if api_key == versions.PRODUCE and produce.enabled:
            delay = max(delay, produce.remaining_ms(user, client_id, now))
        elif api_key == versions.FETCH and fetch.enabled:
            delay = max(delay, fetch.remaining_ms(user, client_id, now))
        if delay and api_key == versions.FETCH and _is_follower_fetch(header.api_version, frame):
            return 0
        return delay


def _is_follower_fetch(version: int, frame: bytes | bytearray) -> bool:
    try:
        header = decode_request_header(frame, is_flexible(versions.FETCH, version))
        return decode_fetch_request(version, frame, header.body_offset).replica_id >= 0
    except Exception:  # malformed: the dispatcher closes the connection
        return False


class _RateSensor:
    """A connection creation rate and its bound (Kafka's Sensor with a Quota)."""

    __slots__ = ("rate", "bound")

    def __init__(self, window_num: int, window_ms: int, bound: float) -> None:
        self.rate = Rate(window_num, window_ms)
        self.bound = bound

    def record(self, now_ms: int, max_throttle_ms: int) -> int:
        """Count a connection; the delay that brings the rate back to the bound (ms)."""
        rate = self.rate
        rate.record(1.0, now_ms)
        if self.bound >= UNLIMITED_RATE:
            return 0
        if self.bound <= 0:
            return max_throttle_ms
        span = rate.span_ms(now_ms)
        return min(throttle_ms(rate.total * 1000 / span, self.bound, span), max_throttle_ms)

    def unrecord(self, now_ms: int) -> None:
        self.rate.record(-1.0, now_ms)


class ConnectionRates:
    """KIP-612's connection creation rates: broker-wide (``max.connection.creation.rate``),
    per listener (``listener.name.<l>.max.connection.creation.rate``) and per IP (the
    ``connection_creation_rate`` quota of the ``ip`` entity, or of the default IP), over
    ``quota.window.num`` windows of ``quota.window.size.seconds`` as client quotas are.
    Delays are capped at one window, as in Kafka's ConnectionQuotas.

    Over the broker or listener rate the listener stops accepting for the delay (the
    connection that went over waits, the next ones wait in the listen backlog); over its
    IP's rate a connection is not counted and is closed after the delay. The inter-broker
    listener is exempt from the broker-wide rate when there are other listeners."""

    def __init__(self, window_num: int, window_s: int) -> None:
        self.window_num = window_num
        self.window_ms = window_s * 1000
        self.max_throttle_ms = self.window_ms
        self.broker = self._sensor(UNLIMITED_RATE)
        self.listeners: dict[str, _RateSensor] = {}
        self.ip_rates: dict[str | None, int] = {}  # by address; None: the default IP
        self._ips: dict[str, _RateSensor] = {}
        # Counters (Kafka's connection-accept-throttle-time and ip-... metrics): how many
        # times and how long accepting was delayed, and connections closed per IP rate.
        self.listener_throttles = 0
        self.listener_throttle_ms = 0
        self.ip_throttles = 0
        self.ip_throttle_ms = 0

    def _sensor(self, bound: float) -> _RateSensor:
        return _RateSensor(self.window_num, self.window_ms, bound)

    def set_limits(self, broker_rate: int, listener_rates: Mapping[str, int]) -> None:
        """The broker-wide and per-listener rates (listeners by upper-case name)."""
        if broker_rate != self.broker.bound:
            logger.info("Max connection creation rate is now %d", broker_rate)
        self.broker.bound = broker_rate
        for name, sensor in self.listeners.items():
            sensor.bound = listener_rates.get(name, UNLIMITED_RATE)
        for name, rate in listener_rates.items():
            if name not in self.listeners:
                self.listeners[name] = self._sensor(rate)

    def set_ip_rates(self, rates: Mapping[str | None, int]) -> None:
        """connection_creation_rate quotas by IP address (None: the default IP)."""
        if rates != self.ip_rates:
            logger.info(
                "Connection creation rates per IP now %s",
                {("<default>" if ip is None else ip): r for ip, r in rates.items()} or "none",
            )
        self.ip_rates = dict(rates)
        for ip, sensor in self._ips.items():
            sensor.bound = self.ip_rate(ip)

    def ip_rate(self, ip: str) -> int:
        rate = self.ip_rates.get(ip)
        if rate is None:
            rate = self.ip_rates.get(None, UNLIMITED_RATE)
        return rate

    def _listener(self, listener: str) -> _RateSensor:
        sensor = self.listeners.get(listener)
        if sensor is None:
            sensor = self.listeners[listener] = self._sensor(UNLIMITED_RATE)
        return sensor

    def record_listener(self, listener: str, protected: bool, now_ms: int) -> int:
        """Count a new connection on ``listener``; how long the listener must stop
        accepting (ms). ``protected``: the inter-broker listener, which only its own
        rate limits."""
        delay = 0
        if not protected:
            delay = self.broker.record(now_ms, self.max_throttle_ms)
        delay = max(delay, self._listener(listener).record(now_ms, self.max_throttle_ms))
        if delay > 0:
            self.listener_throttles += 1
            self.listener_throttle_ms += delay
        return delay

    def record_ip(self, listener: str, protected: bool, ip: str, now_ms: int) -> int:
        """Count a new connection from ``ip``; over the IP's rate the delay after which it
        is closed (ms), and the connection is taken back out of every rate."""
        bound = self.ip_rate(ip)
        if bound >= UNLIMITED_RATE:
            return 0
        sensor = self._ips.get(ip)
        if sensor is None:
            sensor = self._ips[ip] = self._sensor(bound)
        delay = sensor.record(now_ms, self.max_throttle_ms)
        if delay > 0:
            sensor.unrecord(now_ms)
            if not protected:
                self.broker.unrecord(now_ms)
            self._listener(listener).unrecord(now_ms)
            self.ip_throttles += 1
            self.ip_throttle_ms += delay
        return delay

    def expire(self, now_ms: int | None = None) -> None:
        """Drop the rates of addresses idle for an hour."""
        if now_ms is None:
            now_ms = int(time.monotonic() * 1000)
        for ip in [
            ip for ip, s in self._ips.items() if now_ms - s.rate.last_ms >= SENSOR_EXPIRY_MS
        ]:
            del self._ips[ip]


def _describe(configs: Iterable[tuple[QuotaEntity, dict[str, float]]]) -> str:
    return ", ".join(f"/config/{entity_path(e)} {v}" for e, v in configs) or "none"
