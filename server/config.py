"""Broker configuration: Kafka's ``server.properties`` key names, types and defaults.

Values are kept as the strings the operator wrote (so log-level keys can be handed to
``gregor.log.config`` unchanged) and parsed once through the table below when loaded.
"""

from __future__ import annotations

import logging
import re
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gregor.configdef import INT_MAX, ConfigError, ConfigKey, Type, at_least, between, invalid
from gregor.controller.configs import parse_ip_overrides, register_broker_keys
from gregor.log.config import LOG_BROKER_KEYS, LogConfig

logger = logging.getLogger(__name__)

KEYS: dict[str, ConfigKey] = {
    k.name: k
    for k in (
        *LOG_BROKER_KEYS.values(),  # the broker keys of the topic keys' defaults
        # identity and listeners
        ConfigKey("broker.id", Type.INT, "0", at_least(-1)),
        ConfigKey("node.id", Type.INT, None, at_least(-1)),
        ConfigKey("listeners", Type.LIST, "PLAINTEXT://:9092"),
        ConfigKey("advertised.listeners", Type.LIST, None),
        ConfigKey(
            "listener.security.protocol.map",
            Type.LIST,
            "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        ),
        ConfigKey("broker.rack", Type.STRING, None),
        ConfigKey("log.dirs", Type.LIST, None),
        ConfigKey("log.dir", Type.LIST, "/tmp/kafka-logs"),
        # cluster mode (docs/cluster.md): set zookeeper.connect to join a cluster
        ConfigKey("zookeeper.connect", Type.STRING, None),
        ConfigKey("zookeeper.session.timeout.ms", Type.INT, "18000", at_least(1)),
        # no default: the session timeout's
        ConfigKey("zookeeper.connection.timeout.ms", Type.INT, None, at_least(1)),
        ConfigKey("inter.broker.listener.name", Type.STRING, None),
        ConfigKey("security.inter.broker.protocol", Type.STRING, "PLAINTEXT"),
        ConfigKey("replica.lag.time.max.ms", Type.LONG, "30000", at_least(0)),
        ConfigKey("replica.fetch.wait.max.ms", Type.INT, "500", at_least(0)),
        ConfigKey("replica.fetch.min.bytes", Type.INT, "1", at_least(0)),
        ConfigKey("replica.fetch.max.bytes", Type.INT, "1048576", at_least(0)),
        ConfigKey("replica.fetch.response.max.bytes", Type.INT, "10485760", at_least(0)),
        ConfigKey("replica.fetch.backoff.ms", Type.INT, "1000", at_least(0)),
        ConfigKey("num.replica.fetchers", Type.INT, "1", at_least(1)),
        ConfigKey("replica.high.watermark.checkpoint.interval.ms", Type.LONG, "5000", at_least(1)),
        ConfigKey("replica.socket.timeout.ms", Type.INT, "30000", at_least(1)),
        ConfigKey("controller.socket.timeout.ms", Type.INT, "30000", at_least(1)),
        ConfigKey("auto.leader.rebalance.enable", Type.BOOLEAN, "true"),
        ConfigKey("leader.imbalance.check.interval.seconds", Type.LONG, "300", at_least(1)),
        ConfigKey("leader.imbalance.per.broker.percentage", Type.INT, "10", at_least(0)),
        ConfigKey("controlled.shutdown.enable", Type.BOOLEAN, "true"),
        ConfigKey("controlled.shutdown.max.retries", Type.INT, "3", at_least(0)),
        ConfigKey("controlled.shutdown.retry.backoff.ms", Type.LONG, "5000", at_least(0)),
        # network and request handling
        ConfigKey("num.network.threads", Type.INT, "3", at_least(1)),
        ConfigKey("num.io.threads", Type.INT, "8", at_least(1)),
        ConfigKey("queued.max.requests", Type.INT, "500", at_least(1)),
        ConfigKey("socket.request.max.bytes", Type.INT, "104857600", at_least(1)),
        # Kafka's default is -1 (unbounded); Gregor bounds the pool by default (README).
        ConfigKey("queued.max.request.bytes", Type.LONG, "104857600", at_least(-1)),
        # Kafka's default is 102400; Gregor keeps the OS's autotuned buffers by default
        # (-1), which fetch twice as fast on loopback (README).
        ConfigKey("socket.send.buffer.bytes", Type.INT, "-1", at_least(-1)),
        ConfigKey("socket.receive.buffer.bytes", Type.INT, "-1", at_least(-1)),
        ConfigKey("connections.max.idle.ms", Type.LONG, "600000"),
        ConfigKey("max.connections", Type.INT, str(INT_MAX), at_least(0)),
        ConfigKey("max.connections.per.ip", Type.INT, str(INT_MAX), at_least(0)),
        ConfigKey("max.connections.per.ip.overrides", Type.STRING, ""),
        # KIP-612; also listener.name.<listener>.max.connection.creation.rate
        ConfigKey("max.connection.creation.rate", Type.INT, str(INT_MAX), at_least(0)),
        # Gregor's own: how long the event loop polls before it sleeps (server/polling.py)
        ConfigKey("gregor.idle.poll.us", Type.INT, "200", at_least(0)),
        # The Prometheus endpoint (server/metrics_exporter.py, docs/metrics.md): off unless
        # a port is set; 0 picks a free one (logged). The host as in listeners: empty, all
        # interfaces.
        ConfigKey("metrics.prometheus.port", Type.INT, "-1", between(-1, 65535)),
        ConfigKey("metrics.prometheus.host", Type.STRING, ""),
        ConfigKey("fetch.max.bytes", Type.INT, "57671680", at_least(1024)),
        ConfigKey("request.timeout.ms", Type.INT, "30000", at_least(0)),
        # client quotas (server/quotas.py): the rate's windows
        ConfigKey("quota.window.num", Type.INT, "11", at_least(1)),
        ConfigKey("quota.window.size.seconds", Type.INT, "1", at_least(1)),
        # topics
        ConfigKey("num.partitions", Type.INT, "1", at_least(1)),
        ConfigKey("default.replication.factor", Type.INT, "1", at_least(1)),
        ConfigKey("auto.create.topics.enable", Type.BOOLEAN, "true"),
        ConfigKey("delete.topic.enable", Type.BOOLEAN, "true"),
        # log
        ConfigKey("log.retention.check.interval.ms", Type.LONG, "300000", at_least(1)),
        ConfigKey("log.flush.offset.checkpoint.interval.ms", Type.INT, "60000", at_least(0)),
        ConfigKey("log.flush.start.offset.checkpoint.interval.ms", Type.INT, "60000", at_least(0)),
        ConfigKey("log.cleaner.enable", Type.BOOLEAN, "true"),
        ConfigKey("log.cleaner.threads", Type.INT, "1", at_least(0)),
        ConfigKey("log.cleaner.dedupe.buffer.size", Type.LONG, "134217728", at_least(0)),
        ConfigKey("log.cleaner.io.buffer.load.factor", Type.DOUBLE, "0.9", at_least(0)),
        ConfigKey("log.cleaner.io.buffer.size", Type.INT, "524288", at_least(0)),
        ConfigKey(
            "log.cleaner.io.max.bytes.per.second",
            Type.DOUBLE,
            "1.7976931348623157E308",
            at_least(0),
        ),
        ConfigKey("log.cleaner.backoff.ms", Type.LONG, "15000", at_least(0)),
        # groups and offsets
        ConfigKey("offsets.topic.num.partitions", Type.INT, "50", at_least(1)),
        ConfigKey("offsets.topic.replication.factor", Type.INT, "3", at_least(1)),
        ConfigKey("offsets.topic.segment.bytes", Type.INT, "104857600", at_least(1)),
        ConfigKey("offsets.retention.minutes", Type.INT, "10080", at_least(1)),
        ConfigKey("offsets.retention.check.interval.ms", Type.LONG, "600000", at_least(1)),
        ConfigKey("offsets.commit.timeout.ms", Type.INT, "5000", at_least(1)),
        ConfigKey("offset.metadata.max.bytes", Type.INT, "4096", at_least(0)),
        ConfigKey("group.initial.rebalance.delay.ms", Type.INT, "3000", at_least(0)),
        ConfigKey("group.min.session.timeout.ms", Type.INT, "6000"),
        ConfigKey("group.max.session.timeout.ms", Type.INT, "1800000"),
        ConfigKey("group.max.size", Type.INT, str(INT_MAX), at_least(1)),
        # producers
        ConfigKey("producer.id.expiration.ms", Type.INT, "86400000", at_least(1)),
        # transactions (coordinator/txn_coordinator.py)
        ConfigKey("transactional.id.expiration.ms", Type.INT, "604800000", at_least(1)),
        ConfigKey("transaction.max.timeout.ms", Type.INT, "900000", at_least(1)),
        ConfigKey("transaction.state.log.num.partitions", Type.INT, "50", at_least(1)),
        ConfigKey("transaction.state.log.replication.factor", Type.INT, "3", at_least(1)),
        ConfigKey("transaction.state.log.min.isr", Type.INT, "2", at_least(1)),
        ConfigKey("transaction.state.log.segment.bytes", Type.INT, "104857600", at_least(1)),
        ConfigKey(
            "transaction.abort.timed.out.transaction.cleanup.interval.ms",
            Type.INT,
            "10000",
            at_least(1),
        ),
        ConfigKey(
            "transaction.remove.expired.transaction.cleanup.interval.ms",
            Type.INT,
            "3600000",
            at_least(1),
        ),
    )
}

# The dynamic broker config rules (controller/configs.py) know these keys' types and bounds.
register_broker_keys(KEYS.values())

# Keys Gregor accepts and does not act on, with why; the README lists them too, and each
# one set explicitly is logged at start-up.
IGNORED: dict[str, str] = {
    "num.network.threads": "one asyncio event loop does all network I/O",
    "log.flush.start.offset.checkpoint.interval.ms": "the log start offsets are "
    "checkpointed with the recovery points (log.flush.offset.checkpoint.interval.ms)",
    "log.cleaner.io.buffer.size": "the cleaner's worker maps segments into memory (mmap) "
    "instead of reading them through buffers",
}

# Key prefixes and names that configure security Gregor does not have (TLS, SASL, ACLs):
# setting any of them must not leave the operator believing it is in force.
_SECURITY_PREFIXES = ("ssl.", "sasl.", "security.", "authorizer.", "principal.builder.")
_SECURITY_KEYS = frozenset({"super.users", "allow.everyone.if.no.acl.found"})
_HARMLESS = frozenset({("security.inter.broker.protocol", "PLAINTEXT")})

# Keys that act only in cluster mode: set without zookeeper.connect, they are logged as
# ignored (an embedded node has no followers, no controller to talk to, no ZooKeeper).
CLUSTER_ONLY = frozenset(
    {
        "zookeeper.session.timeout.ms",
        "zookeeper.connection.timeout.ms",
        "inter.broker.listener.name",
        "replica.lag.time.max.ms",
        "replica.fetch.wait.max.ms",
        "replica.fetch.min.bytes",
        "replica.fetch.max.bytes",
        "replica.fetch.response.max.bytes",
        "replica.fetch.backoff.ms",
        "num.replica.fetchers",
        "replica.high.watermark.checkpoint.interval.ms",
        "replica.socket.timeout.ms",
        "controller.socket.timeout.ms",
        "auto.leader.rebalance.enable",
        "leader.imbalance.check.interval.seconds",
        "leader.imbalance.per.broker.percentage",
        "controlled.shutdown.enable",
        "controlled.shutdown.max.retries",
        "controlled.shutdown.retry.backoff.ms",
        "request.timeout.ms",
    }
)


def _is_security_key(name: str) -> bool:
    if name.startswith("listener.name."):
        # listener.name.<listener>.<key>, or for SASL keys also
        # listener.name.<listener>.<mechanism>.<key> (sasl.jaas.config, callback handlers)
        rest = name.split(".", 3)[3] if name.count(".") >= 3 else ""
        after_mechanism = rest.split(".", 1)[1] if "." in rest else ""
        return _is_security_key(rest) or after_mechanism.startswith("sasl.")
    return name.startswith(_SECURITY_PREFIXES) or name in _SECURITY_KEYS


class BrokerConfig:
    """Validated broker configuration; ``raw`` keeps the explicitly set strings."""

    def __init__(self, raw: Mapping[str, str]) -> None:
        self.raw: dict[str, str] = dict(raw)
        self._values: dict[str, Any] = {
            name: key.parse(self.raw.get(name, key.default)) for name, key in KEYS.items()
        }
        for name in self.raw:
            if _is_security_key(name) and (name, self.raw[name].upper()) not in _HARMLESS:
                raise ConfigError(
                    f"{name} is set, but Gregor has no TLS, SASL or authorization: it would "
                    "serve plaintext to anyone; remove the key"
                )
            if name in IGNORED:
                logger.warning("Configuration %s is accepted but ignored: %s", name, IGNORED[name])
            elif name in CLUSTER_ONLY and not self.raw.get("zookeeper.connect"):
                logger.warning(
                    "Configuration %s is ignored: it applies only in cluster mode "
                    "(zookeeper.connect is not set)",
                    name,
                )
            elif name not in KEYS and not _LISTENER_RATE.fullmatch(name):
                logger.warning(
                    "Unknown configuration %r was supplied but isn't a known config; it is ignored",
                    name,
                )
        self.log_config = LogConfig.from_properties(self.raw, {})
        self._check()

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def is_default(self, name: str) -> bool:
        return name not in self.raw

    def _check(self) -> None:
        if not self.listeners:
            raise ConfigError("listeners must name at least one listener")
        protocols = self.security_protocols
        for listener in self.listeners:
            name = parse_listener(listener)[0]
            protocol = protocols.get(name)
            if protocol is None:
                raise ConfigError(
                    f"No security protocol defined for listener {name} "
                    "(listener.security.protocol.map)"
                )
            if protocol != "PLAINTEXT":
                raise ConfigError(
                    f"Listener {name} uses security protocol {protocol}, but Gregor serves "
                    "PLAINTEXT only (no TLS or SASL yet)"
                )
        for listener in self.advertised_listeners:
            parse_listener(listener, "advertised.listeners")
        if self.cluster_mode:
            self._check_cluster()
        self.per_ip_overrides = self._per_ip_overrides()
        self.listener_connection_creation_rates = listener_connection_creation_rates(self.raw)
        if self["node.id"] is not None and self["node.id"] != self["broker.id"]:
            if "broker.id" in self.raw:
                raise ConfigError("broker.id and node.id must match when both are set")

    def _check_cluster(self) -> None:
        """Kafka's cross-key rules for the replication and inter-broker settings."""
        connect = self["zookeeper.connect"]
        hosts = connect.partition("/")[0]
        if not hosts or any(not h.strip() for h in hosts.split(",")):
            raise ConfigError(
                f"Invalid value {connect!r} for configuration zookeeper.connect: expected "
                "host:port[,host:port...][/chroot]"
            )
        if self["broker.rack"] == "":
            raise ConfigError("Invalid value '' for configuration broker.rack: empty")
        if "inter.broker.listener.name" in self.raw and "security.inter.broker.protocol" in (
            self.raw
        ):
            raise ConfigError(
                "Only one of inter.broker.listener.name and security.inter.broker.protocol "
                "should be set."
            )
        name = self.inter_broker_listener
        advertised = [parse_listener(x)[0] for x in self.advertised_listeners or self.listeners]
        if name not in advertised:
            raise ConfigError(
                f"inter.broker.listener.name must be a listener name defined in "
                f"advertised.listeners. The valid options based on currently configured "
                f"listeners are {','.join(advertised)}"
                if "inter.broker.listener.name" in self.raw
                else f"No listener uses security.inter.broker.protocol "
                f"{self['security.inter.broker.protocol']} (listener {name} is needed for "
                "the other brokers to reach this one)"
            )
        if self["replica.fetch.wait.max.ms"] > self["replica.socket.timeout.ms"]:
            raise ConfigError(
                "replica.socket.timeout.ms should always be at least replica.fetch.wait.max.ms"
                " to prevent unnecessary socket timeouts"
            )
        if self["replica.fetch.wait.max.ms"] > self["replica.lag.time.max.ms"]:
            raise ConfigError(
                "replica.fetch.wait.max.ms should always be less than or equal to "
                "replica.lag.time.max.ms to prevent frequent changes in ISR"
            )
        if self["leader.imbalance.per.broker.percentage"] > 100:
            raise ConfigError(
                "Invalid value for configuration leader.imbalance.per.broker.percentage: "
                "value must be at most 100"
            )

    @property
    def cluster_mode(self) -> bool:
        """True when zookeeper.connect is set: this broker is one of a cluster."""
        return bool(self["zookeeper.connect"])

    @property
    def zookeeper_connection_timeout_ms(self) -> int:
        timeout = self["zookeeper.connection.timeout.ms"]
        return self["zookeeper.session.timeout.ms"] if timeout is None else timeout

    @property
    def inter_broker_listener(self) -> str:
        """inter.broker.listener.name, or the listener named after
        security.inter.broker.protocol (PLAINTEXT), as Kafka derives it."""
        name = self["inter.broker.listener.name"]
        return (name or self["security.inter.broker.protocol"]).upper()

    @property
    def broker_id(self) -> int:
        node_id = self["node.id"]
        return node_id if node_id is not None else self["broker.id"]

    @property
    def log_dirs(self) -> list[Path]:
        return [Path(d) for d in (self["log.dirs"] or self["log.dir"])]

    @property
    def listeners(self) -> list[str]:
        return self["listeners"]

    @property
    def advertised_listeners(self) -> list[str]:
        return self["advertised.listeners"] or []

    @property
    def advertised_listener_names(self) -> list[str]:
        """The names of the listeners advertised (the listeners, when none are)."""
        return [parse_listener(x)[0] for x in self.advertised_listeners or self.listeners]

    @property
    def security_protocols(self) -> dict[str, str]:
        """listener.security.protocol.map as {listener name: protocol}."""
        protocols = {}
        for entry in self["listener.security.protocol.map"]:
            name, sep, protocol = entry.partition(":")
            if not sep or not name.strip() or not protocol.strip():
                raise ConfigError(
                    f"Invalid value {entry!r} for configuration listener.security.protocol.map:"
                    " expected LISTENER:PROTOCOL"
                )
            protocols[name.strip().upper()] = protocol.strip().upper()
        return protocols

    def _per_ip_overrides(self) -> dict[str, int]:
        """max.connections.per.ip.overrides (``host:count,...``) by IP address."""
        return resolve_ip_overrides(self["max.connections.per.ip.overrides"])


_LISTENER_RATE = re.compile(r"listener\.name\.([^.]+)\.max\.connection\.creation\.rate")


def listener_connection_creation_rates(props: Mapping[str, str]) -> dict[str, int]:
    """listener.name.<listener>.max.connection.creation.rate by upper-case listener name;
    ConfigError naming the key if a value is not an int of at least 0."""
    rates = {}
    for name, text in props.items():
        match = _LISTENER_RATE.fullmatch(name)
        if match is not None:
            rates[match.group(1).upper()] = KEYS["max.connection.creation.rate"].parse(text, name)
    return rates


def resolve_ip_overrides(text: str) -> dict[str, int]:
    """max.connections.per.ip.overrides (``host:count,...``) by IP address, hosts resolved;
    ConfigError naming the key if malformed."""
    overrides = {}
    for host, count in parse_ip_overrides(text).items():
        try:
            infos = socket.getaddrinfo(host.strip("[]"), None, type=socket.SOCK_STREAM)
        except OSError as e:
            raise invalid("max.connections.per.ip.overrides", host, f"cannot resolve: {e}") from e
        for info in infos:
            overrides[str(info[4][0])] = count
    return overrides


def parse_listener(listener: str, key: str = "listeners") -> tuple[str, str, int]:
    """``NAME://host:port`` -> (name, host, port); host may be empty (all interfaces)."""
    name, sep, address = listener.partition("://")
    host, colon, port = address.rpartition(":")
    problem = None
    if not sep or not colon or not name:
        problem = "expected NAME://host:port"
    elif not port.isdigit() or not 0 <= int(port) <= 65535:
        problem = "the port must be a number from 0 to 65535"
    if problem:
        raise ConfigError(f"Invalid value {listener!r} for configuration {key}: {problem}")
    return name.upper(), host.strip("[]"), int(port)


def read_properties(path: Path) -> dict[str, str]:
    """Parse a Java-style ``.properties`` file (``key=value`` or ``key: value``, # comments)."""
    props: dict[str, str] = {}
    pending = ""
    for line in path.read_text().splitlines():
        line = pending + line.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\"):
            pending = line[:-1]
            continue
        for i, ch in enumerate(line):
            if ch in "=:":
                props[line[:i].strip()] = line[i + 1 :].strip()
                break
        else:
            props[line] = ""
    return props
