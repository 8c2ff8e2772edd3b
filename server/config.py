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

from gregor.configdef import (
    INT_MAX,
    ConfigError,
    ConfigKey,
    Type,
    at_least,
    between,
    each_one_of,
    invalid,
    one_of,
)
from gregor.controller.acls.authorizer import check_authorizer_class, check_super_users
from gregor.controller.configs import base_key, broker_key, parse_ip_overrides, register_broker_keys
from gregor.coordinator.assignors import ASSIGNORS
from gregor.coordinator.settings import MIGRATION_POLICIES, assignor_name
from gregor.log.config import LOG_BROKER_KEYS, LogConfig

logger = logging.getLogger(__name__)

# Kafka's SecurityProtocol names.
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
TLS_PROTOCOLS = frozenset({"SSL", "SASL_SSL"})
SASL_PROTOCOLS = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})


def _share_assignors(name: str, values: list[str]) -> None:
    """group.share.assignors: Kafka 4.1 has the simple assignor only."""
    if [assignor_name(v) for v in values] != ["simple"]:
        raise invalid(name, values, "the only share group assignor is the simple assignor")


def _known_assignors(name: str, values: list[str]) -> None:
    """group.consumer.assignors: the server assignors Gregor has, by class or short name."""
    if not values:
        raise invalid(name, values, "at least one assignor is required")
    for value in values:
        if assignor_name(value) not in ASSIGNORS:
            raise invalid(name, value, f"unknown assignor, known are {', '.join(ASSIGNORS)}")


def _migration_policy(name: str, value: str) -> None:
    """Kafka's ConfigDef.CaseInsensitiveValidString."""
    if value.lower() not in MIGRATION_POLICIES:
        raise invalid(
            name,
            value,
            "String must be one of (case insensitive): "
            + ", ".join(p.upper() for p in MIGRATION_POLICIES),
        )


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
        # requests (a multi counts once) outstanding at once, so that the controller's
        # writes of thousands of partition states do not flood ZooKeeper's heap
        ConfigKey("zookeeper.max.in.flight.requests", Type.INT, "10", at_least(1)),
        # ZooKeeper security (server/security/zk_client_security.py, docs/cluster.md)
        ConfigKey("zookeeper.set.acl", Type.BOOLEAN, "false"),
        ConfigKey("zookeeper.ssl.client.enable", Type.BOOLEAN, "false"),
        ConfigKey("zookeeper.clientCnxnSocket", Type.STRING, None),
        ConfigKey("zookeeper.ssl.keystore.location", Type.STRING, None),
        ConfigKey("zookeeper.ssl.keystore.password", Type.PASSWORD, None),
        ConfigKey("zookeeper.ssl.keystore.type", Type.STRING, None),
        ConfigKey("zookeeper.ssl.truststore.location", Type.STRING, None),
        ConfigKey("zookeeper.ssl.truststore.password", Type.PASSWORD, None),
        ConfigKey("zookeeper.ssl.truststore.type", Type.STRING, None),
        ConfigKey("zookeeper.ssl.protocol", Type.STRING, "TLSv1.2"),
        ConfigKey("zookeeper.ssl.enabled.protocols", Type.LIST, None),
        ConfigKey("zookeeper.ssl.cipher.suites", Type.LIST, None),
        ConfigKey("zookeeper.ssl.endpoint.identification.algorithm", Type.STRING, "HTTPS"),
        ConfigKey("zookeeper.ssl.crl.enable", Type.BOOLEAN, "false"),
        ConfigKey("zookeeper.ssl.ocsp.enable", Type.BOOLEAN, "false"),
        ConfigKey("inter.broker.listener.name", Type.STRING, None),
        ConfigKey(
            "security.inter.broker.protocol",
            Type.STRING,
            "PLAINTEXT",
            one_of(*SECURITY_PROTOCOLS),
        ),
        # TLS (server/listener_security.py): the other ssl.* keys, which Kafka reconfigures
        # per listener, are in controller/configs.py's table.
        ConfigKey("ssl.principal.mapping.rules", Type.STRING, "DEFAULT"),
        ConfigKey("ssl.allow.dn.changes", Type.BOOLEAN, "false"),
        ConfigKey("ssl.allow.san.changes", Type.BOOLEAN, "false"),
        # SASL (server/listener_security.py, server/security/authenticator.py); the
        # mechanisms' own keys are read by server/security/sasl/, the JAAS and
        # sasl.enabled.mechanisms keys are in controller/configs.py's table.
        ConfigKey("sasl.server.max.receive.size", Type.INT, "524288", at_least(0)),
        ConfigKey("connections.max.reauth.ms", Type.LONG, "0"),
        ConfigKey("connection.failed.authentication.delay.ms", Type.INT, "100", at_least(0)),
        ConfigKey("sasl.server.callback.handler.class", Type.CLASS, None),
        ConfigKey("sasl.oauthbearer.jwks.endpoint.url", Type.STRING, None),
        ConfigKey("sasl.oauthbearer.jwks.endpoint.refresh.ms", Type.LONG, "3600000"),
        ConfigKey("sasl.oauthbearer.expected.audience", Type.LIST, None),
        ConfigKey("sasl.oauthbearer.expected.issuer", Type.STRING, None),
        ConfigKey("sasl.oauthbearer.clock.skew.seconds", Type.INT, "30"),
        ConfigKey("sasl.oauthbearer.scope.claim.name", Type.STRING, "scope"),
        ConfigKey("sasl.oauthbearer.sub.claim.name", Type.STRING, "sub"),
        # authorization (controller/acls/authorizer.py)
        ConfigKey("authorizer.class.name", Type.STRING, "", check_authorizer_class),
        ConfigKey("super.users", Type.STRING, None, check_super_users),
        ConfigKey("allow.everyone.if.no.acl.found", Type.BOOLEAN, "false"),
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
        # the consumer group protocol (KIP-848; Kafka's GroupCoordinatorConfig)
        ConfigKey(
            "group.coordinator.rebalance.protocols",
            Type.LIST,
            "classic,consumer",
            each_one_of("classic", "consumer", "share", "streams"),  # Kafka 4.1's names
        ),
        ConfigKey("group.consumer.session.timeout.ms", Type.INT, "45000", at_least(1)),
        ConfigKey("group.consumer.min.session.timeout.ms", Type.INT, "45000", at_least(1)),
        ConfigKey("group.consumer.max.session.timeout.ms", Type.INT, "60000", at_least(1)),
        ConfigKey("group.consumer.heartbeat.interval.ms", Type.INT, "5000", at_least(1)),
        ConfigKey("group.consumer.min.heartbeat.interval.ms", Type.INT, "5000", at_least(1)),
        ConfigKey("group.consumer.max.heartbeat.interval.ms", Type.INT, "15000", at_least(1)),
        ConfigKey("group.consumer.max.size", Type.INT, str(INT_MAX), at_least(1)),
        ConfigKey(
            "group.consumer.assignors",
            Type.LIST,
            "org.apache.kafka.coordinator.group.assignor.UniformAssignor,"
            "org.apache.kafka.coordinator.group.assignor.RangeAssignor",
            _known_assignors,
        ),
        ConfigKey(
            "group.consumer.migration.policy",
            Type.STRING,
            "bidirectional",
            _migration_policy,
        ),
        # share groups (KIP-932; Kafka's ShareGroupConfig): membership
        # Kafka 4.1's internal gate, off there (share groups were a preview); on as from 4.2.
        ConfigKey("group.share.enable", Type.BOOLEAN, "true"),
        ConfigKey("group.share.session.timeout.ms", Type.INT, "45000", at_least(1)),
        ConfigKey("group.share.min.session.timeout.ms", Type.INT, "45000", at_least(1)),
        ConfigKey("group.share.max.session.timeout.ms", Type.INT, "60000", at_least(1)),
        ConfigKey("group.share.heartbeat.interval.ms", Type.INT, "5000", at_least(1)),
        ConfigKey("group.share.min.heartbeat.interval.ms", Type.INT, "5000", at_least(1)),
        ConfigKey("group.share.max.heartbeat.interval.ms", Type.INT, "15000", at_least(1)),
        ConfigKey("group.share.max.size", Type.INT, "200", between(10, 1000)),
        ConfigKey(
            "group.share.assignors",
            Type.LIST,
            "org.apache.kafka.coordinator.group.assignor.SimpleAssignor",
            _share_assignors,
        ),
        # share groups: share-partitions, sessions and fetches
        ConfigKey("group.share.record.lock.duration.ms", Type.INT, "30000", between(1000, 3600000)),
        ConfigKey(
            "group.share.min.record.lock.duration.ms", Type.INT, "15000", between(1000, 30000)
        ),
        ConfigKey(
            "group.share.max.record.lock.duration.ms",
            Type.INT,
            "60000",
            between(30000, 3600000),
        ),
        ConfigKey("group.share.delivery.count.limit", Type.INT, "5", between(2, 10)),
        ConfigKey("group.share.partition.max.record.locks", Type.INT, "2000", between(100, 10000)),
        ConfigKey("group.share.max.share.sessions", Type.INT, "2000", at_least(1)),
        # the share coordinator (Kafka's ShareCoordinatorConfig)
        ConfigKey("share.coordinator.state.topic.num.partitions", Type.INT, "50", at_least(1)),
        ConfigKey("share.coordinator.state.topic.replication.factor", Type.INT, "3", at_least(1)),
        ConfigKey("share.coordinator.state.topic.min.isr", Type.INT, "2", at_least(1)),
        ConfigKey(
            "share.coordinator.state.topic.segment.bytes", Type.INT, "104857600", at_least(1)
        ),
        ConfigKey(
            "share.coordinator.snapshot.update.records.per.snapshot",
            Type.INT,
            "500",
            between(0, 500),
        ),
        ConfigKey("share.coordinator.write.timeout.ms", Type.INT, "5000", at_least(1)),
        ConfigKey(  # Kafka's internal key
            "share.coordinator.state.topic.prune.interval.ms", Type.INT, "300000", at_least(1)
        ),
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
    "ssl.keymanager.algorithm": "Java's key manager factory; OpenSSL has none to choose",
    "ssl.trustmanager.algorithm": "Java's trust manager factory; OpenSSL verifies "
    "certificate chains itself",
    "ssl.secure.random.implementation": "OpenSSL seeds itself from the operating system",
    "zookeeper.clientCnxnSocket": "kazoo has one connection class, which does TLS when "
    "zookeeper.ssl.client.enable is true",
}

# Keys that configure security Gregor does not have (Kerberos) or plug-ins it cannot load:
# setting any of them must not leave the operator believing it is in force.
_KERBEROS_PREFIX = "sasl.kerberos."
_PLUG_INS = {
    "principal.builder.class": "Gregor builds principals as Kafka's "
    "DefaultKafkaPrincipalBuilder does; custom principal builders are not supported",
    "ssl.engine.factory.class": "Gregor's TLS is Python's ssl (OpenSSL); custom SSL "
    "engine factories are not supported",
    "ssl.provider": "Gregor's TLS is Python's ssl (OpenSSL); Java security providers are "
    "not supported",
    "sasl.login.class": "Gregor logs in as Kafka's default login classes do; custom login "
    "classes are not supported",
}
_DEFAULT_PRINCIPAL_BUILDER = (
    "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder"
)

# Keys that act only in cluster mode: set without zookeeper.connect, they are logged as
# ignored (an embedded node has no followers, no controller to talk to, no ZooKeeper).
CLUSTER_ONLY = frozenset(
    {
        "zookeeper.session.timeout.ms",
        "zookeeper.connection.timeout.ms",
        "zookeeper.max.in.flight.requests",
        "zookeeper.set.acl",
        "zookeeper.ssl.client.enable",
        "zookeeper.clientCnxnSocket",
        "zookeeper.ssl.keystore.location",
        "zookeeper.ssl.keystore.password",
        "zookeeper.ssl.keystore.type",
        "zookeeper.ssl.truststore.location",
        "zookeeper.ssl.truststore.password",
        "zookeeper.ssl.truststore.type",
        "zookeeper.ssl.protocol",
        "zookeeper.ssl.enabled.protocols",
        "zookeeper.ssl.cipher.suites",
        "zookeeper.ssl.endpoint.identification.algorithm",
        "zookeeper.ssl.crl.enable",
        "zookeeper.ssl.ocsp.enable",
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


def _security_base_key(name: str) -> str:
    """The key without its listener prefix, nor the mechanism prefix of
    listener.name.<listener>.<mechanism>.sasl.* (and .connections.max.reauth.ms) keys."""
    base = base_key(name)
    if base != name:
        after_mechanism = base.split(".", 1)[1] if "." in base else ""
        if after_mechanism.startswith("sasl.") or after_mechanism == "connections.max.reauth.ms":
            base = after_mechanism
    return base


def _refusal(name: str, value: str) -> str | None:
    """Why the key cannot be honoured (None: it can). Listener-prefixed keys are judged by
    their base key; listener.name.<listener>.<mechanism>.sasl.* keys are SASL keys."""
    base = _security_base_key(name)
    if base in _PLUG_INS and not (
        base == "principal.builder.class" and value.strip() == _DEFAULT_PRINCIPAL_BUILDER
    ):
        return f"{name} is set, but {_PLUG_INS[base]}; remove the key"
    if base.startswith(_KERBEROS_PREFIX) or (
        base == "sasl.enabled.mechanisms" and "GSSAPI" in value.upper().replace(" ", "").split(",")
    ):
        return f"{name} is set, but Gregor does not support Kerberos (GSSAPI); remove it"
    if base.startswith("security.") and base != "security.inter.broker.protocol":
        return f"{name} is set, but Gregor does not support it; remove the key"
    return None


def _is_security_key(name: str) -> bool:
    """One of Kafka's ssl.* or sasl.* keys (or principal.builder.class, or a SASL connection
    key), perhaps listener- and mechanism-prefixed."""
    base = _security_base_key(name)
    return base.startswith(("ssl.", "sasl.", "principal.builder.", "connection")) and (
        base in KEYS or broker_key(base) is not None
    )


class BrokerConfig:
    """Validated broker configuration; ``raw`` keeps the explicitly set strings."""

    def __init__(self, raw: Mapping[str, str]) -> None:
        self.raw: dict[str, str] = dict(raw)
        self._values: dict[str, Any] = {
            name: key.parse(self.raw.get(name, key.default)) for name, key in KEYS.items()
        }
        for name, text in self.raw.items():
            refusal = _refusal(name, text)
            if refusal is not None:
                raise ConfigError(refusal)
            if _is_security_key(name):
                key = KEYS.get(_security_base_key(name)) or broker_key(_security_base_key(name))
                assert key is not None
                key.parse(text, name)  # ConfigError naming the (listener-prefixed) key
            if base_key(name) in IGNORED:
                logger.warning(
                    "Configuration %s is accepted but ignored: %s", name, IGNORED[base_key(name)]
                )
            elif name in CLUSTER_ONLY and not self.raw.get("zookeeper.connect"):
                logger.warning(
                    "Configuration %s is ignored: it applies only in cluster mode "
                    "(zookeeper.connect is not set)",
                    name,
                )
            elif (
                name not in KEYS
                and not _LISTENER_RATE.fullmatch(name)
                and not _is_security_key(name)
            ):
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
        names = [parse_listener(listener)[0] for listener in self.listeners]
        if len(set(names)) != len(names):
            raise ConfigError(
                f"Each listener must have a different name, listeners: {','.join(self.listeners)}"
            )
        for name in names:
            protocol = protocols.get(name)
            if protocol is None:
                raise ConfigError(
                    f"No security protocol defined for listener {name} "
                    "(listener.security.protocol.map)"
                )
        for listener in self.advertised_listeners:
            parse_listener(listener, "advertised.listeners")
        if self.cluster_mode:
            self._check_cluster()
        self._check_consumer_groups()
        self.per_ip_overrides = self._per_ip_overrides()
        self.listener_connection_creation_rates = listener_connection_creation_rates(self.raw)
        if self["node.id"] is not None and self["node.id"] != self["broker.id"]:
            if "broker.id" in self.raw:
                raise ConfigError("broker.id and node.id must match when both are set")

    def _check_consumer_groups(self) -> None:
        """Kafka's GroupCoordinatorConfig and ShareGroupConfig rules for the consumer and
        share protocols' timeouts."""
        for protocol in ("consumer", "share"):
            for kind in ("session.timeout", "heartbeat.interval"):
                key, low, high = (
                    f"group.{protocol}.{kind}.ms",
                    f"group.{protocol}.min.{kind}.ms",
                    f"group.{protocol}.max.{kind}.ms",
                )
                if self[high] < self[low]:
                    raise ConfigError(f"{high} must be greater than or equal to {low}")
                if self[key] < self[low]:
                    raise ConfigError(f"{key} must be greater than or equal to {low}")
                if self[key] > self[high]:
                    raise ConfigError(f"{key} must be less than or equal to {high}")
            heartbeat = f"group.{protocol}.heartbeat.interval.ms"
            session = f"group.{protocol}.session.timeout.ms"
            if self[heartbeat] >= self[session]:
                raise ConfigError(f"{heartbeat} must be less than {session}")
        if "classic" not in self["group.coordinator.rebalance.protocols"]:
            raise ConfigError("group.coordinator.rebalance.protocols must contain classic")

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
            if protocol.strip().upper() not in SECURITY_PROTOCOLS:
                raise ConfigError(
                    f"Invalid security protocol `{protocol.strip()}` defined in "
                    "listener.security.protocol.map"
                )
            protocols[name.strip().upper()] = protocol.strip().upper()
        return protocols

    @property
    def listener_names(self) -> list[str]:
        return [parse_listener(x)[0] for x in self.listeners]

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


def listener_settings(props: Mapping[str, str], listener: str) -> dict[str, str]:
    """The settings one listener runs with, as the security pieces take them: every key of
    ``props`` (a broker's effective properties), with the listener's own
    ``listener.name.<listener>.<key>`` in place of ``<key>`` (Kafka's
    valuesWithPrefixOverride), the other listeners' keys left out. A SASL mechanism's keys
    keep their mechanism prefix (``<mechanism>.sasl.jaas.config``)."""
    prefix = f"listener.name.{listener.lower()}."
    settings = {k: v for k, v in props.items() if not k.startswith("listener.name.")}
    settings.update((k[len(prefix) :], v) for k, v in props.items() if k.startswith(prefix))
    return settings


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
    """Parse a ``.properties`` file as ``java.util.Properties.load`` does: ``#``/``!``
    comment lines; a key ends at the first unescaped ``=``, ``:`` or whitespace, the
    separator and the whitespace around it are dropped, the rest of the line (trailing
    whitespace included) is the value; a line ending in an odd number of backslashes
    continues on the next, whose leading whitespace is dropped; ``\\t \\n \\r \\f
    \\uXXXX`` are escapes and a backslash before any other character stands for that
    character. The file is read as UTF-8 (``load(Reader)``); ``\\uXXXX`` escapes keep
    files written by Java's ``store`` ASCII. Raises ValueError on a malformed ``\\u``."""
    props: dict[str, str] = {}
    logical = ""
    continuing = False
    for natural in _NATURAL_LINE_END.split(path.read_text()):
        line = natural.lstrip(_PROPERTIES_SPACE)
        if not continuing and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        continuing = trailing % 2 == 1
        logical += line[:-1] if continuing else line
        if continuing:
            continue
        key, value = _split_property(logical)
        props[_unescape_property(key)] = _unescape_property(value)
        logical = ""
    if continuing and logical:  # the file ended inside a continuation
        key, value = _split_property(logical)
        props[_unescape_property(key)] = _unescape_property(value)
    return props


_NATURAL_LINE_END = re.compile(r"\r\n|\r|\n")
_PROPERTIES_SPACE = " \t\f"
_PROPERTIES_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _split_property(line: str) -> tuple[str, str]:
    """A logical line's raw key and raw value (escapes still in them)."""
    i = 0
    while i < len(line) and line[i] not in "=:" + _PROPERTIES_SPACE:
        i += 2 if line[i] == "\\" else 1
    key, rest = line[:i], line[i:].lstrip(_PROPERTIES_SPACE)
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(_PROPERTIES_SPACE)
    return key, rest


def _unescape_property(text: str) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        i += 1
        if ch != "\\" or i == len(text):
            if ch != "\\":  # a lone backslash at the very end is dropped, as Java does
                out.append(ch)
            continue
        ch = text[i]
        i += 1
        if ch == "u":
            digits = text[i : i + 4]
            if len(digits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise ValueError(f"Malformed \\uxxxx encoding: \\u{digits}")
            out.append(chr(int(digits, 16)))
            i += 4
        else:
            out.append(_PROPERTIES_ESCAPES.get(ch, ch))
    # \uXXXX pairs of surrogates (how store() writes characters beyond the BMP) joined.
    return "".join(out).encode("utf-16", "surrogatepass").decode("utf-16", "surrogatepass")
