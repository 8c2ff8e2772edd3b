"""The rules of config resources (metadata/config_resource.py), shared by every controller
and the config APIs: which keys each resource type takes, how incremental operations apply,
and validation with Kafka's error codes and messages (KIP-226 dynamic broker configs, KIP-339
incremental alters, KIP-848 group configs)."""

from __future__ import annotations

import logging
import re
from collections.abc import Container, Iterable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from gregor.configdef import (
    LONG_MAX,
    ConfigError,
    ConfigKey,
    Type,
    at_least,
    between,
    invalid,
    one_of,
)
from gregor.controller.metadata.config_resource import BROKER, GROUP, TOPIC, ConfigResource
from gregor.controller.topics import TopicError, check_configs
from gregor.log.config import LOG_BROKER_KEYS, TOPIC_CONFIGS, LogConfig

logger = logging.getLogger(__name__)

# AlterConfigOp.OpType ids
SET = 0
DELETE = 1
APPEND = 2
SUBTRACT = 3


# The broker key of each topic config that has one, highest precedence first (Kafka's
# ServerTopicConfigSynonyms.TOPIC_CONFIG_SYNONYMS: the first of each chain). These are the
# dynamic log keys (Kafka's DynamicLogConfig): every log picks them up at once. The other
# keys of a chain (log.retention.minutes/.hours, log.roll.hours, log.roll.jitter.hours,
# log.flush.scheduler.interval.ms) are read-only, as in Kafka.
DYNAMIC_BROKER_KEYS = frozenset(
    definition.synonyms[0][0] for definition in TOPIC_CONFIGS.values() if definition.synonyms
)


# Each bounded int group config (Kafka 4.1's GroupConfig.validateValues, in its order): the
# broker keys of its lower and upper bound (None: not bounded there), and their defaults.
# Gregor's broker has the group.consumer.* and group.share.* keys; the others stay at
# Kafka's defaults.
GROUP_CONFIG_BOUNDS: dict[str, tuple[str | None, int, str, int]] = {
    "consumer.heartbeat.interval.ms": (
        "group.consumer.min.heartbeat.interval.ms",
        5_000,
        "group.consumer.max.heartbeat.interval.ms",
        15_000,
    ),
    "consumer.session.timeout.ms": (
        "group.consumer.min.session.timeout.ms",
        45_000,
        "group.consumer.max.session.timeout.ms",
        60_000,
    ),
    "share.heartbeat.interval.ms": (
        "group.share.min.heartbeat.interval.ms",
        5_000,
        "group.share.max.heartbeat.interval.ms",
        15_000,
    ),
    "share.session.timeout.ms": (
        "group.share.min.session.timeout.ms",
        45_000,
        "group.share.max.session.timeout.ms",
        60_000,
    ),
    "share.record.lock.duration.ms": (
        "group.share.min.record.lock.duration.ms",
        15_000,
        "group.share.max.record.lock.duration.ms",
        60_000,
    ),
    "streams.heartbeat.interval.ms": (
        "group.streams.min.heartbeat.interval.ms",
        5_000,
        "group.streams.max.heartbeat.interval.ms",
        15_000,
    ),
    "streams.session.timeout.ms": (
        "group.streams.min.session.timeout.ms",
        45_000,
        "group.streams.max.session.timeout.ms",
        60_000,
    ),
    "streams.num.standby.replicas": (None, 0, "group.streams.max.standby.replicas", 2),
}
# The bound keys a Gregor broker config sets (check_group_configs' ``bounds``).
BROKER_GROUP_BOUND_KEYS = (
    "group.consumer.min.heartbeat.interval.ms",
    "group.consumer.max.heartbeat.interval.ms",
    "group.consumer.min.session.timeout.ms",
    "group.consumer.max.session.timeout.ms",
    "group.share.min.heartbeat.interval.ms",
    "group.share.max.heartbeat.interval.ms",
    "group.share.min.session.timeout.ms",
    "group.share.max.session.timeout.ms",
)

GROUP_CONFIGS: dict[str, ConfigKey] = {
    k.name: k
    for k in (
        ConfigKey("consumer.session.timeout.ms", Type.INT, "45000", at_least(1)),
        ConfigKey("consumer.heartbeat.interval.ms", Type.INT, "5000", at_least(1)),
        ConfigKey("share.session.timeout.ms", Type.INT, "45000", at_least(1)),
        ConfigKey("share.heartbeat.interval.ms", Type.INT, "5000", at_least(1)),
        ConfigKey("share.record.lock.duration.ms", Type.INT, "30000", at_least(1000)),
        ConfigKey("share.auto.offset.reset", Type.STRING, "latest", one_of("latest", "earliest")),
        ConfigKey(
            "share.isolation.level",
            Type.STRING,
            "read_uncommitted",
            one_of("read_committed", "read_uncommitted"),
        ),
        ConfigKey("streams.session.timeout.ms", Type.INT, "45000", at_least(1)),
        ConfigKey("streams.heartbeat.interval.ms", Type.INT, "5000", at_least(1)),
        ConfigKey("streams.num.standby.replicas", Type.INT, "0", at_least(0)),
    )
}


def _list_default(resource_type: int, key: str) -> str | None:
    """The default of a list-typed key of the resource type (APPEND and SUBTRACT apply to
    those only, from the default when unset), else None."""
    if resource_type == BROKER:
        definition = broker_key(key)
    elif resource_type == TOPIC:
        definition = TOPIC_CONFIGS.get(key)
    else:
        return None
    if definition is None or definition.type is not Type.LIST:
        return None
    return definition.default or ""


def apply_operations(
    resource_type: int, current: Mapping[str, str], ops: Iterable[tuple[str, int, str | None]]
) -> dict[str, str]:
    """The resource's overrides after IncrementalAlterConfigs' (name, operation, value)
    operations, as Kafka's prepareIncrementalConfigs applies them."""
    result = dict(current)
    for name, op, value in ops:
        if op == SET:
            result[name] = value or ""
        elif op == DELETE:
            result.pop(name, None)
        elif op in (APPEND, SUBTRACT):
            default = _list_default(resource_type, name)
            if default is None:
                verb = "append" if op == APPEND else "subtract"
                raise TopicError(
                    ErrorCode.invalid_config,
                    f"Config value {verb} is not allowed for config key: {name}",
                )
            old = [v.strip() for v in result.get(name, default).split(",") if v.strip()]
            given = (value or "").split(",")
            if op == APPEND:
                new = old + [v for v in given if v not in old]
            else:
                new = [v for v in old if v not in given]
            result[name] = ",".join(new)
        else:
            raise TopicError(ErrorCode.invalid_request, f"Unknown operations type {op}")
    return result


def check_group_configs(
    configs: Mapping[str, str], bounds: Mapping[str, int] | None = None
) -> None:
    """Kafka's GroupConfig.validate: known names, typed values within the broker's bounds
    (``bounds``: the broker's values of BROKER_GROUP_BOUND_KEYS; Kafka's defaults when
    absent), session timeouts above heartbeat intervals."""
    for name in configs:
        if name not in GROUP_CONFIGS:
            raise TopicError(ErrorCode.invalid_config, f"Unknown group config name: {name}")
    try:
        values = {d.name: d.parse(configs.get(d.name, d.default)) for d in GROUP_CONFIGS.values()}
    except ConfigError as e:
        raise TopicError(ErrorCode.invalid_config, str(e)) from None
    given = bounds or {}
    for name, (low_key, low, high_key, high) in GROUP_CONFIG_BOUNDS.items():
        if low_key is not None and values[name] < given.get(low_key, low):
            raise TopicError(
                ErrorCode.invalid_config, f"{name} must be greater than or equal to {low_key}"
            )
        if values[name] > given.get(high_key, high):
            raise TopicError(
                ErrorCode.invalid_config, f"{name} must be less than or equal to {high_key}"
            )
    for kind in ("consumer", "share", "streams"):
        session, heartbeat = f"{kind}.session.timeout.ms", f"{kind}.heartbeat.interval.ms"
        if values[session] <= values[heartbeat]:
            raise TopicError(
                ErrorCode.invalid_config, f"{session} must be greater than {heartbeat}"
            )


def check_config_change(
    resource: ConfigResource,
    configs: Mapping[str, str],
    topics: Container[str],
    group_bounds: Mapping[str, int] | None = None,
) -> None:
    """A controller's checks of a resource's new configs, `topics` being those that exist,
    `group_bounds` as check_group_configs' (BROKER resources are checked by the receiving
    broker: check_broker_configs)."""
    if resource.type == TOPIC:
        if not resource.name:
            raise TopicError(ErrorCode.invalid_request, "Default topic resources are not allowed.")
        check_configs(configs)
        if resource.name not in topics:
            raise TopicError(
                ErrorCode.unknown_topic_or_partition,
                f"The topic '{resource.name}' does not exist.",
            )
    elif resource.type == GROUP:
        if not resource.name:
            raise TopicError(ErrorCode.invalid_request, "Default group resources are not allowed.")
        check_group_configs(configs, group_bounds)
    elif resource.type != BROKER:
        raise TopicError(ErrorCode.invalid_request, f"Unknown resource type {resource.type}")


# -- Dynamic broker configs (KIP-226), as Kafka 4.1's DynamicBrokerConfig -----------------

# SslConfigs.RECONFIGURABLE_CONFIGS: dynamic only per listener (listener.name.<l>.<key>).
SSL_RECONFIGURABLE = frozenset(
    {
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.keystore.password",
        "ssl.key.password",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.truststore.password",
        "ssl.keystore.certificate.chain",
        "ssl.keystore.key",
        "ssl.truststore.certificates",
    }
)
# DynamicListenerConfig.ReconfigurableConfigs.
LISTENER_RECONFIGURABLE = frozenset(
    {
        "listeners",
        "listener.security.protocol.map",
        "principal.builder.class",
        "ssl.protocol",
        "ssl.provider",
        "ssl.cipher.suites",
        "ssl.enabled.protocols",
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.keystore.password",
        "ssl.key.password",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.truststore.password",
        "ssl.keymanager.algorithm",
        "ssl.trustmanager.algorithm",
        "ssl.endpoint.identification.algorithm",
        "ssl.secure.random.implementation",
        "ssl.client.auth",
        "ssl.engine.factory.class",
        "sasl.mechanism.inter.broker.protocol",
        "sasl.jaas.config",
        "sasl.enabled.mechanisms",
        "sasl.kerberos.service.name",
        "sasl.kerberos.kinit.cmd",
        "sasl.kerberos.ticket.renew.window.factor",
        "sasl.kerberos.ticket.renew.jitter",
        "sasl.kerberos.min.time.before.relogin",
        "sasl.kerberos.principal.to.local.rules",
        "sasl.login.refresh.window.factor",
        "sasl.login.refresh.window.jitter",
        "sasl.login.refresh.min.period.seconds",
        "sasl.login.refresh.buffer.seconds",
        "max.connections",
        "max.connection.creation.rate",
        "num.network.threads",
    }
)
# Listener keys that may also be set for the whole cluster.
CLUSTER_LEVEL_LISTENER = frozenset(
    {"max.connections", "max.connection.creation.rate", "num.network.threads"}
)
PER_BROKER_KEYS = (SSL_RECONFIGURABLE | LISTENER_RECONFIGURABLE) - CLUSTER_LEVEL_LISTENER
# Keys set per listener that a listener's own reconfiguration takes (SocketServer's and the
# acceptor's ListenerReconfigurableConfigs), besides the SSL ones.
_LISTENER_MUTABLE = SSL_RECONFIGURABLE | CLUSTER_LEVEL_LISTENER
LOG_CLEANER_RECONFIGURABLE = frozenset(
    {
        "log.cleaner.threads",
        "log.cleaner.dedupe.buffer.size",
        "log.cleaner.io.buffer.load.factor",
        "log.cleaner.io.buffer.size",
        "message.max.bytes",
        "log.cleaner.io.max.bytes.per.second",
        "log.cleaner.backoff.ms",
    }
)
THREAD_POOL_RECONFIGURABLE = frozenset(
    {
        "num.io.threads",
        "num.replica.fetchers",
        "num.recovery.threads.per.data.dir",
        "background.threads",
    }
)
SOCKET_SERVER_RECONFIGURABLE = frozenset(
    {
        "max.connections.per.ip",
        "max.connections.per.ip.overrides",
        "max.connections",
        "max.connection.creation.rate",
    }
)
REMOTE_LOG_RECONFIGURABLE = frozenset(
    {
        "remote.log.index.file.cache.total.size.bytes",
        "remote.fetch.max.wait.ms",
        "remote.log.manager.copy.max.bytes.per.second",
        "remote.log.manager.fetch.max.bytes.per.second",
        "remote.list.offsets.request.timeout.ms",
        "remote.log.manager.copier.thread.pool.size",
        "remote.log.manager.expiration.thread.pool.size",
        "remote.log.manager.follower.thread.pool.size",
        "remote.log.reader.threads",
    }
)
_REMOTE_THREAD_POOLS = frozenset(k for k in REMOTE_LOG_RECONFIGURABLE if "thread" in k)
ALL_DYNAMIC_BROKER_KEYS = (
    SSL_RECONFIGURABLE
    | LOG_CLEANER_RECONFIGURABLE
    | frozenset(DYNAMIC_BROKER_KEYS)
    | THREAD_POOL_RECONFIGURABLE
    | {"metric.reporters"}
    | LISTENER_RECONFIGURABLE
    | SOCKET_SERVER_RECONFIGURABLE
    | {"producer.id.expiration.ms", "transaction.partition.verification.enable"}
    | REMOTE_LOG_RECONFIGURABLE
    | {"follower.fetch.last.tiered.offset.enable"}
    | {"config.providers"}
    | {"group.coordinator.cached.buffer.max.bytes"}  # GroupCoordinatorConfig's
    | {"share.coordinator.cached.buffer.max.bytes"}  # ShareCoordinatorConfig's
)
_LISTENER_KEY = re.compile(r"listener\.name\.([^.]*)\.(.*)")
# Listener-prefixed SASL keys also name the mechanism: listener.name.<l>.<mechanism>.<key>.
_LISTENER_MECHANISM_KEYS = (
    "sasl.jaas.config",
    "sasl.login.callback.handler.class",
    "sasl.login.class",
    "sasl.server.callback.handler.class",
    "connections.max.reauth.ms",
)
# The chains of broker keys for one setting, highest precedence first (Kafka's
# DynamicBrokerConfig.brokerConfigSynonyms): log.flush.scheduler.interval.ms is the default
# of log.flush.interval.ms, not the other way round.
_CHAINS = (
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
)


def broker_synonyms(name: str) -> list[str]:
    """The broker keys that set `name`'s value, highest precedence first, `name` among
    them (a listener-prefixed key's base key follows it)."""
    for chain in _CHAINS:
        if name in chain:
            return list(chain)
    if name == "log.flush.interval.ms":
        return [name, "log.flush.scheduler.interval.ms"]
    match = _LISTENER_KEY.fullmatch(name)
    if match:
        base = match.group(2)
        mechanism = next((k for k in _LISTENER_MECHANISM_KEYS if base.endswith(k)), None)
        return [name, mechanism or base]
    return [name]


def base_key(name: str) -> str:
    """A listener-prefixed key's base key (listener.name.<l>.<key> -> <key>)."""
    match = _LISTENER_KEY.fullmatch(name)
    return match.group(2) if match else name


# Kafka's keys that Gregor's server.properties table (server/config.py) does not have, and
# that Kafka reconfigures at run time: stored and described (types, defaults and bounds as
# Kafka's). The ssl.* and sasl.* ones are read per listener (server/config.py's
# listener_settings); tiered storage and metrics reporters are not acted on.
_EXTRA_BROKER_KEYS = [
    ConfigKey("ssl.keystore.type", Type.STRING, "JKS"),
    ConfigKey("ssl.keystore.location", Type.STRING, None),
    ConfigKey("ssl.keystore.password", Type.PASSWORD, None),
    ConfigKey("ssl.key.password", Type.PASSWORD, None),
    ConfigKey("ssl.truststore.type", Type.STRING, "JKS"),
    ConfigKey("ssl.truststore.location", Type.STRING, None),
    ConfigKey("ssl.truststore.password", Type.PASSWORD, None),
    ConfigKey("ssl.keystore.certificate.chain", Type.PASSWORD, None),
    ConfigKey("ssl.keystore.key", Type.PASSWORD, None),
    ConfigKey("ssl.truststore.certificates", Type.PASSWORD, None),
    ConfigKey("ssl.protocol", Type.STRING, "TLSv1.3"),
    ConfigKey("ssl.provider", Type.STRING, None),
    ConfigKey("ssl.cipher.suites", Type.LIST, None),
    ConfigKey("ssl.enabled.protocols", Type.LIST, "TLSv1.2,TLSv1.3"),
    ConfigKey("ssl.keymanager.algorithm", Type.STRING, "SunX509"),
    ConfigKey("ssl.trustmanager.algorithm", Type.STRING, "PKIX"),
    ConfigKey("ssl.endpoint.identification.algorithm", Type.STRING, "https"),
    ConfigKey("ssl.secure.random.implementation", Type.STRING, None),
    ConfigKey("ssl.client.auth", Type.STRING, "none", one_of("required", "requested", "none")),
    ConfigKey("ssl.engine.factory.class", Type.CLASS, None),
    ConfigKey(
        "principal.builder.class",
        Type.CLASS,
        "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder",
    ),
    ConfigKey("sasl.mechanism.inter.broker.protocol", Type.STRING, "GSSAPI"),
    ConfigKey("sasl.jaas.config", Type.PASSWORD, None),
    ConfigKey("sasl.enabled.mechanisms", Type.LIST, "GSSAPI"),
    ConfigKey("sasl.kerberos.service.name", Type.STRING, None),
    ConfigKey("sasl.kerberos.kinit.cmd", Type.STRING, "/usr/bin/kinit"),
    ConfigKey("sasl.kerberos.ticket.renew.window.factor", Type.DOUBLE, "0.8"),
    ConfigKey("sasl.kerberos.ticket.renew.jitter", Type.DOUBLE, "0.05"),
    ConfigKey("sasl.kerberos.min.time.before.relogin", Type.LONG, "60000"),
    ConfigKey("sasl.kerberos.principal.to.local.rules", Type.LIST, "DEFAULT"),
    ConfigKey("sasl.login.refresh.window.factor", Type.DOUBLE, "0.8", between(0.5, 1.0)),
    ConfigKey("sasl.login.refresh.window.jitter", Type.DOUBLE, "0.05", between(0.0, 0.25)),
    ConfigKey("sasl.login.refresh.min.period.seconds", Type.SHORT, "60", between(0, 900)),
    ConfigKey("sasl.login.refresh.buffer.seconds", Type.SHORT, "300", between(0, 3600)),
    ConfigKey("num.recovery.threads.per.data.dir", Type.INT, "2", at_least(1)),
    ConfigKey("background.threads", Type.INT, "10", at_least(1)),
    ConfigKey("metric.reporters", Type.LIST, ""),
    ConfigKey("transaction.partition.verification.enable", Type.BOOLEAN, "true"),
    ConfigKey("remote.log.index.file.cache.total.size.bytes", Type.LONG, "1073741824", at_least(1)),
    ConfigKey("remote.fetch.max.wait.ms", Type.INT, "500", at_least(1)),
    ConfigKey(
        "remote.log.manager.copy.max.bytes.per.second", Type.LONG, str(LONG_MAX), at_least(1)
    ),
    ConfigKey(
        "remote.log.manager.fetch.max.bytes.per.second", Type.LONG, str(LONG_MAX), at_least(1)
    ),
    ConfigKey("remote.list.offsets.request.timeout.ms", Type.LONG, "30000", at_least(1)),
    ConfigKey("remote.log.manager.copier.thread.pool.size", Type.INT, "10", at_least(1)),
    ConfigKey("remote.log.manager.expiration.thread.pool.size", Type.INT, "10", at_least(1)),
    ConfigKey("remote.log.manager.follower.thread.pool.size", Type.INT, "2", at_least(1)),
    ConfigKey("remote.log.reader.threads", Type.INT, "10", at_least(1)),
    ConfigKey("follower.fetch.last.tiered.offset.enable", Type.BOOLEAN, "false"),
    ConfigKey("config.providers", Type.LIST, ""),
    ConfigKey(
        "group.coordinator.cached.buffer.max.bytes", Type.INT, "1048588", at_least(512 * 1024)
    ),
    ConfigKey(
        "share.coordinator.cached.buffer.max.bytes", Type.INT, "1048588", at_least(512 * 1024)
    ),
]

# Every broker key Gregor knows (Kafka's names): the log keys, the extra dynamic keys above,
# and the server.properties table that server/config.py registers here at import
# (register_broker_keys). A key not in it is unknown: Kafka stores those as given.
BROKER_KEYS: dict[str, ConfigKey] = {**{k.name: k for k in _EXTRA_BROKER_KEYS}, **LOG_BROKER_KEYS}


# Kafka's read-only broker keys that Gregor does not have (KRaft, security and plug-in
# settings among them): refused as Kafka refuses them, never described.
KAFKA_READ_ONLY_KEYS = frozenset(
    {
        "process.roles",
        "controller.listener.names",
        "controller.quorum.voters",
        "controller.quorum.bootstrap.servers",
        "metadata.log.dir",
        "early.start.listeners",
        "authorizer.class.name",
        "sasl.mechanism.controller.protocol",
        "sasl.server.callback.handler.class",
        "sasl.login.class",
        "sasl.login.callback.handler.class",
        "connections.max.reauth.ms",
        "ssl.principal.mapping.rules",
        "security.providers",
        "password.encoder.secret",
        "delegation.token.secret.key",
        "reserved.broker.max.id",
        "broker.id.generation.enable",
        "replica.selector.class",
        "alter.config.policy.class.name",
        "create.topic.policy.class.name",
        "client.quota.callback.class",
        "metrics.num.samples",
        "metrics.sample.window.ms",
        "metrics.recording.level",
        "unstable.api.versions.enable",
        "num.replica.alter.log.dirs.threads",
        "log.dir.failure.timeout.ms",
    }
)


def register_broker_keys(keys: Iterable[ConfigKey]) -> None:
    BROKER_KEYS.update((key.name, key) for key in keys)


def broker_key(name: str) -> ConfigKey | None:
    """The key's definition; a listener-prefixed key has its base key's type."""
    return BROKER_KEYS.get(name) or BROKER_KEYS.get(base_key(name))


def _set(names: Iterable[str]) -> str:
    # Kafka prints a Scala Set; sorted here so that the message is stable.
    return f"Set({', '.join(sorted(names))})"


def check_broker_configs(
    configs: Mapping[str, str],
    *,
    per_broker: bool,
    current: Mapping[str, str],
    new: Mapping[str, str],
    advertised: Iterable[str],
) -> None:
    """A dynamic broker config set as Kafka's DynamicBrokerConfig.validate checks it:
    `configs` is the resource's whole new set (per broker, or the cluster default),
    `current` and `new` the broker's effective properties before and with it, `advertised`
    this broker's advertised listener names. Raises TopicError(INVALID_REQUEST) with
    Kafka's message. Unknown keys are accepted (stored as given), as Kafka does."""
    fixed = [
        k
        for k in configs
        if (k in BROKER_KEYS or k in KAFKA_READ_ONLY_KEYS) and k not in ALL_DYNAMIC_BROKER_KEYS
    ]
    if fixed:
        raise TopicError(
            ErrorCode.invalid_request, f"Cannot update these configs dynamically: {_set(fixed)}"
        )
    unprefixed = [k for k in configs if k in SSL_RECONFIGURABLE]
    if unprefixed:
        raise TopicError(
            ErrorCode.invalid_request,
            "These security configs can be dynamically updated only per-listener using the "
            f"listener prefix: {_set(unprefixed)}",
        )
    try:
        for name, text in configs.items():
            key = BROKER_KEYS.get(base_key(name))
            if key is not None and base_key(name) in ALL_DYNAMIC_BROKER_KEYS:
                key.parse(text, base_key(name))
        if not per_broker:
            only_per_broker = [
                k
                for k in configs
                if k in PER_BROKER_KEYS
                or (_LISTENER_KEY.fullmatch(k) and base_key(k) not in CLUSTER_LEVEL_LISTENER)
            ]
            if only_per_broker:
                raise TopicError(
                    ErrorCode.invalid_request,
                    "Cannot update these configs at default cluster level, broker id must be "
                    f"specified: {_set(only_per_broker)}",
                )
        LogConfig.from_properties(new, {})
    except ConfigError as e:
        raise TopicError(ErrorCode.invalid_request, str(e)) from None
    try:
        _check_reconfiguration(current, new, set(advertised))
    except ValueError as e:
        # Kafka wraps a reconfigurable's refusal: its reason is only logged.
        logger.info("Invalid dynamic broker configuration: %s", e)
        raise TopicError(ErrorCode.invalid_request, "Invalid dynamic configuration") from None


def effective_value(props: Mapping[str, str], name: str) -> object:
    """A broker key's typed value in `props` (its default when unset)."""
    key = broker_key(name)
    if key is None:
        return props.get(name)
    try:
        return key.parse(props.get(name, key.default), name)
    except ConfigError:
        return None


def _changed(current: Mapping[str, str], new: Mapping[str, str], keys: Container[str]) -> bool:
    names = set(current) | set(new)
    return any(n in keys and current.get(n) != new.get(n) for n in names)


def _check_thread_count(name: str, old: int, new: int) -> None:
    if new == old:
        return
    reason = f"Dynamic thread count update validation failed for {name}={new}"
    if new <= 0:
        raise ValueError(f"{reason}, value should be at least 1")
    if new < old // 2:
        raise ValueError(f"{reason}, value should be at least half the current value {old}")
    if new > old * 2:
        raise ValueError(
            f"{reason}, value should not be greater than double the current value {old}"
        )


def _check_reconfiguration(
    current: Mapping[str, str], new: Mapping[str, str], advertised: set[str]
) -> None:
    """The checks of Kafka's reconfigurables whose keys changed (BrokerDynamicThreadPool,
    LogCleaner, DynamicLogConfig, SocketServer, DynamicListenerConfig, the acceptors'
    num.network.threads, DynamicRemoteLogConfig); ValueError with the reason."""

    def value(props: Mapping[str, str], name: str) -> Any:
        return effective_value(props, name)

    if _changed(current, new, THREAD_POOL_RECONFIGURABLE):
        for name in sorted(THREAD_POOL_RECONFIGURABLE):
            _check_thread_count(name, value(current, name), value(new, name))
    network = {k for k in set(current) | set(new) if base_key(k) == "num.network.threads"}
    for name in sorted(network | {"num.network.threads"}):
        if current.get(name) != new.get(name):
            old = value(current, name) or value(current, "num.network.threads")
            _check_thread_count(name, old, value(new, name) or value(new, "num.network.threads"))
    if _changed(current, new, LOG_CLEANER_RECONFIGURABLE):
        threads, old = value(new, "log.cleaner.threads"), value(current, "log.cleaner.threads")
        if threads < 1:
            raise ValueError("Log cleaner threads should be at least 1")
        if threads < old // 2:
            raise ValueError(
                f"Log cleaner threads cannot be reduced to less than half the current value {old}"
            )
        if threads > old * 2:
            raise ValueError(
                "Log cleaner threads cannot be increased to more than double the current "
                f"value {old}"
            )
    if _changed(current, new, DYNAMIC_BROKER_KEYS):
        log = LogConfig.from_properties(new, {})
        for local, total, key in (
            (log.local_retention_ms, log.retention_ms, "log.retention.ms"),
            (log.local_retention_bytes, log.retention_bytes, "log.retention.bytes"),
        ):
            if total != -1 and local != -2:
                if local == -1:
                    raise ValueError(f"Value must not be -1 as {key} value is set as {total}.")
                if local > total:
                    raise ValueError(f"Value must not be more than {key} property value: {total}")
    if _changed(current, new, SOCKET_SERVER_RECONFIGURABLE):
        parse_ip_overrides(str(value(new, "max.connections.per.ip.overrides") or ""))
    if _changed(current, new, REMOTE_LOG_RECONFIGURABLE):
        for name in sorted(_REMOTE_THREAD_POOLS):
            _check_thread_count(name, value(current, name), value(new, name))
    if _changed(current, new, LISTENER_RECONFIGURABLE):
        _check_listeners(current, new, advertised)


def parse_ip_overrides(text: str) -> dict[str, int]:
    """max.connections.per.ip.overrides (`host:count,...`) by host; ConfigError if malformed."""
    overrides = {}
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        host, sep, count = entry.rpartition(":")
        if not sep or not host.strip() or not count.strip().isdigit():
            raise invalid("max.connections.per.ip.overrides", entry, "expected host:count")
        overrides[host.strip()] = int(count)
    return overrides


def _listener_names(props: Mapping[str, str]) -> set[str]:
    text = str(props.get("listeners", BROKER_KEYS["listeners"].default or ""))
    return {item.partition("://")[0].strip().upper() for item in text.split(",") if item.strip()}


def _protocols(props: Mapping[str, str]) -> dict[str, str]:
    text = str(props.get("listener.security.protocol.map") or "")
    default = BROKER_KEYS["listener.security.protocol.map"].default or ""
    protocols = {}
    for entry in (text or default).split(","):
        name, _, protocol = entry.partition(":")
        if name.strip():
            protocols[name.strip().upper()] = protocol.strip().upper()
    return protocols


def _listener_overrides(props: Mapping[str, str], listener: str) -> dict[str, str]:
    """The listener's own keys (prefix stripped) that no reconfiguration of it takes."""
    prefix = f"listener.name.{listener.lower()}."
    return {
        k[len(prefix) :]: v
        for k, v in props.items()
        if k.startswith(prefix) and k[len(prefix) :] not in _LISTENER_MUTABLE
    }


def _check_listeners(
    current: Mapping[str, str], new: Mapping[str, str], advertised: set[str]
) -> None:
    """DynamicListenerConfig.validateReconfiguration: listeners may be added and removed,
    but not the advertised ones, nor an existing listener's own keys or protocol."""
    new_names, old_names = _listener_names(new), _listener_names(current)
    if not advertised <= new_names:
        raise ValueError(
            f"Advertised listeners '{sorted(advertised)}' must be a subset of listeners "
            f"'{sorted(new_names)}'"
        )
    new_protocols, old_protocols = _protocols(new), _protocols(current)
    if not new_names <= set(new_protocols):
        raise ValueError(
            f"Listeners '{sorted(new_names)}' must be subset of listener map '{new_protocols}'"
        )
    for name in sorted(new_names & old_names):
        if _listener_overrides(new, name) != _listener_overrides(current, name):
            raise ValueError(
                f"Configs cannot be updated dynamically for existing listener {name}, "
                "restart broker or create a new listener for update"
            )
        if old_protocols.get(name) != new_protocols.get(name):
            raise ValueError(f"Security protocol cannot be updated for existing listener {name}")
