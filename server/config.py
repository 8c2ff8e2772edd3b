"""Broker configuration: Kafka's ``server.properties`` key names, types and defaults.

Values are kept as the strings the operator wrote (so log-level keys can be handed to
``gregor.log.config`` unchanged) and parsed once through the table below when loaded.
"""

from __future__ import annotations

import logging
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gregor.controller.configs import BrokerKey, register_broker_keys
from gregor.log.config import TOPIC_CONFIGS, ConfigDef, LogConfig, resolve_config

logger = logging.getLogger(__name__)

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1


class ConfigError(ValueError):
    """An invalid configuration value; the message names the key."""


def _parse_bool(raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError("expected true or false")
    return lowered == "true"


def _parse_list(raw: str) -> list[str]:
    return [item.strip() for item in raw.split(",") if item.strip()]


_PARSERS: dict[str, Callable[[str], Any]] = {
    "int": int,
    "long": int,
    "double": float,
    "bool": _parse_bool,
    "string": str,
    "list": _parse_list,
    "password": str,
}


@dataclass(frozen=True, slots=True)
class ConfigKey:
    name: str
    type: str
    default: str | None
    minimum: int | None = None
    choices: tuple[str, ...] | None = None

    def parse(self, raw: str) -> Any:
        try:
            value = _PARSERS[self.type](raw)
        except ValueError as e:
            raise ConfigError(f"Invalid value {raw!r} for configuration {self.name}: {e}") from e
        if self.minimum is not None and value < self.minimum:
            raise ConfigError(
                f"Invalid value {raw!r} for configuration {self.name}: "
                f"value must be at least {self.minimum}"
            )
        if self.choices is not None and value not in self.choices:
            raise ConfigError(
                f"Invalid value {raw!r} for configuration {self.name}: "
                f"must be one of {', '.join(self.choices)}"
            )
        if self.type in ("int",) and not -(2**31) <= value <= INT_MAX:
            raise ConfigError(f"Invalid value {raw!r} for configuration {self.name}: out of range")
        return value


def _k(
    name: str,
    type_: str,
    default: str | None,
    minimum: int | None = None,
    choices: tuple[str, ...] | None = None,
) -> ConfigKey:
    return ConfigKey(name, type_, default, minimum, choices)


KEYS: dict[str, ConfigKey] = {
    k.name: k
    for k in (
        # identity and listeners
        _k("broker.id", "int", "0", -1),
        _k("node.id", "int", None, -1),
        _k("listeners", "list", "PLAINTEXT://:9092"),
        _k("advertised.listeners", "list", None),
        _k(
            "listener.security.protocol.map",
            "list",
            "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        ),
        _k("broker.rack", "string", None),
        _k("log.dirs", "list", None),
        _k("log.dir", "list", "/tmp/kafka-logs"),
        # cluster mode (docs/cluster.md): set zookeeper.connect to join a cluster
        _k("zookeeper.connect", "string", None),
        _k("zookeeper.session.timeout.ms", "int", "18000", 1),
        _k("zookeeper.connection.timeout.ms", "int", None, 1),  # None: the session timeout
        _k("inter.broker.listener.name", "string", None),
        _k("security.inter.broker.protocol", "string", "PLAINTEXT"),
        _k("replica.lag.time.max.ms", "long", "30000", 0),
        _k("replica.fetch.wait.max.ms", "int", "500", 0),
        _k("replica.fetch.min.bytes", "int", "1", 0),
        _k("replica.fetch.max.bytes", "int", "1048576", 0),
        _k("replica.fetch.response.max.bytes", "int", "10485760", 0),
        _k("replica.fetch.backoff.ms", "int", "1000", 0),
        _k("num.replica.fetchers", "int", "1", 1),
        _k("replica.high.watermark.checkpoint.interval.ms", "long", "5000", 1),
        _k("replica.socket.timeout.ms", "int", "30000", 1),
        _k("controller.socket.timeout.ms", "int", "30000", 1),
        _k("auto.leader.rebalance.enable", "bool", "true"),
        _k("leader.imbalance.check.interval.seconds", "long", "300", 1),
        _k("leader.imbalance.per.broker.percentage", "int", "10", 0),
        _k("controlled.shutdown.enable", "bool", "true"),
        _k("controlled.shutdown.max.retries", "int", "3", 0),
        _k("controlled.shutdown.retry.backoff.ms", "long", "5000", 0),
        # network and request handling
        _k("num.network.threads", "int", "3", 1),
        _k("num.io.threads", "int", "8", 1),
        _k("queued.max.requests", "int", "500", 1),
        _k("socket.request.max.bytes", "int", "104857600", 1),
        # Kafka's default is -1 (unbounded); Gregor bounds the pool by default (README).
        _k("queued.max.request.bytes", "long", "104857600", -1),
        # Kafka's default is 102400; Gregor keeps the OS's autotuned buffers by default
        # (-1), which fetch twice as fast on loopback (README).
        _k("socket.send.buffer.bytes", "int", "-1", -1),
        _k("socket.receive.buffer.bytes", "int", "-1", -1),
        _k("connections.max.idle.ms", "long", "600000"),
        _k("max.connections", "int", str(INT_MAX), 0),
        _k("max.connections.per.ip", "int", str(INT_MAX), 0),
        _k("max.connections.per.ip.overrides", "string", ""),
        # KIP-612; also listener.name.<listener>.max.connection.creation.rate
        _k("max.connection.creation.rate", "int", str(INT_MAX), 0),
        # Gregor's own: how long the event loop polls before it sleeps (server/polling.py)
        _k("gregor.idle.poll.us", "int", "200", 0),
        # The Prometheus endpoint (server/metrics_exporter.py, docs/metrics.md): off unless
        # a port is set; 0 picks a free one (logged). The host as in listeners: empty, all
        # interfaces.
        _k("metrics.prometheus.port", "int", "-1", -1),
        _k("metrics.prometheus.host", "string", ""),
        _k("fetch.max.bytes", "int", "57671680", 1024),
        _k("request.timeout.ms", "int", "30000", 0),
        # client quotas (server/quotas.py): the rate's windows
        _k("quota.window.num", "int", "11", 1),
        _k("quota.window.size.seconds", "int", "1", 1),
        # topics
        _k("num.partitions", "int", "1", 1),
        _k("default.replication.factor", "int", "1", 1),
        _k("auto.create.topics.enable", "bool", "true"),
        _k("delete.topic.enable", "bool", "true"),
        # log
        _k("log.retention.check.interval.ms", "long", "300000", 1),
        _k("log.flush.scheduler.interval.ms", "long", str(LONG_MAX)),
        _k("log.flush.offset.checkpoint.interval.ms", "int", "60000", 0),
        _k("log.flush.start.offset.checkpoint.interval.ms", "int", "60000", 0),
        _k("log.cleaner.enable", "bool", "true"),
        _k("log.cleaner.threads", "int", "1", 0),
        _k("log.cleaner.dedupe.buffer.size", "long", "134217728", 0),
        _k("log.cleaner.io.buffer.load.factor", "double", "0.9", 0),
        _k("log.cleaner.io.buffer.size", "int", "524288", 0),
        _k("log.cleaner.io.max.bytes.per.second", "double", "1.7976931348623157E308", 0),
        _k("log.cleaner.backoff.ms", "long", "15000", 0),
        # groups and offsets
        _k("offsets.topic.num.partitions", "int", "50", 1),
        _k("offsets.topic.replication.factor", "int", "3", 1),
        _k("offsets.topic.segment.bytes", "int", "104857600", 1),
        _k("offsets.retention.minutes", "int", "10080", 1),
        _k("offsets.retention.check.interval.ms", "long", "600000", 1),
        _k("offsets.commit.timeout.ms", "int", "5000", 1),
        _k("offset.metadata.max.bytes", "int", "4096", 0),
        _k("group.initial.rebalance.delay.ms", "int", "3000", 0),
        _k("group.min.session.timeout.ms", "int", "6000"),
        _k("group.max.session.timeout.ms", "int", "1800000"),
        _k("group.max.size", "int", str(INT_MAX), 1),
        # producers
        _k("producer.id.expiration.ms", "int", "86400000", 1),
        # transactions (coordinator/txn_coordinator.py)
        _k("transactional.id.expiration.ms", "int", "604800000", 1),
        _k("transaction.max.timeout.ms", "int", "900000", 1),
        _k("transaction.state.log.num.partitions", "int", "50", 1),
        _k("transaction.state.log.replication.factor", "int", "3", 1),
        _k("transaction.state.log.min.isr", "int", "2", 1),
        _k("transaction.state.log.segment.bytes", "int", "104857600", 1),
        _k("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", "10000", 1),
        _k("transaction.remove.expired.transaction.cleanup.interval.ms", "int", "3600000", 1),
    )
}

# The dynamic broker config rules (controller/configs.py) know these keys' types and bounds.
register_broker_keys(
    BrokerKey(
        k.name, "boolean" if k.type == "bool" else k.type, k.default, k.minimum, None, k.choices
    )
    for k in KEYS.values()
)

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


_LOG_BROKER_KEYS: dict[str, ConfigDef] = {
    key: definition
    for definition in TOPIC_CONFIGS.values()
    for key, multiplier in definition.synonyms
    if multiplier == 1
}


class BrokerConfig:
    """Validated broker configuration; ``raw`` keeps the explicitly set strings."""

    def __init__(self, raw: Mapping[str, str]) -> None:
        self.raw: dict[str, str] = dict(raw)
        self._values: dict[str, Any] = {}
        for name, key in KEYS.items():
            text = self.raw.get(name, key.default)
            self._values[name] = None if text is None else key.parse(text)
        log_keys = {key for d in TOPIC_CONFIGS.values() for key, _ in d.synonyms}
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
            elif name not in KEYS and name not in log_keys and not _LISTENER_RATE.fullmatch(name):
                logger.warning(
                    "Unknown configuration %r was supplied but isn't a known config; it is ignored",
                    name,
                )
        try:
            self.log_config = LogConfig.from_properties(self.raw, {})
        except ValueError as e:
            raise ConfigError(str(e)) from None
        self._check()

    def __getitem__(self, name: str) -> Any:
        """A broker key's value; also a topic default's broker key without a unit
        conversion (``min.insync.replicas``, ``unclean.leader.election.enable``)."""
        try:
            return self._values[name]
        except KeyError:
            definition = _LOG_BROKER_KEYS.get(name)
            if definition is None:
                raise
            given = {name: self.raw[name]} if name in self.raw else {}
            return resolve_config(definition, given, {})[0]

    @staticmethod
    def key_types() -> dict[str, str]:
        """Every broker-level key this table defines, with its type."""
        return {name: key.type for name, key in KEYS.items()}

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
        if self["metrics.prometheus.port"] > 65535:
            raise ConfigError(
                f"Invalid value {self['metrics.prometheus.port']} for configuration "
                "metrics.prometheus.port: the port must be at most 65535 (-1: no endpoint)"
            )
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
        if match is None:
            continue
        try:
            rate = int(str(text).strip())
        except ValueError:
            rate = -1
        if not 0 <= rate <= INT_MAX:
            raise ConfigError(
                f"Invalid value {text!r} for configuration {name}: expected an int of at least 0"
            )
        rates[match.group(1).upper()] = rate
    return rates


def resolve_ip_overrides(text: str) -> dict[str, int]:
    """max.connections.per.ip.overrides (``host:count,...``) by IP address, hosts resolved;
    ConfigError naming the key if malformed."""
    overrides = {}
    for entry in _parse_list(text):
        host, sep, count = entry.rpartition(":")
        problem = None
        if not sep or not host or not count.isdigit():
            problem = "expected host:count"
        else:
            try:
                infos = socket.getaddrinfo(host.strip("[]"), None, type=socket.SOCK_STREAM)
            except OSError as e:
                problem = f"cannot resolve {host}: {e}"
        if problem:
            raise ConfigError(
                f"Invalid value {entry!r} for configuration "
                f"max.connections.per.ip.overrides: {problem}"
            )
        for info in infos:
            overrides[str(info[4][0])] = int(count)
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
