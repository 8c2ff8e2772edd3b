"""Topic-level log configuration: the key table (types, defaults, broker synonyms, validators),
the broker keys those synonyms are, and the resolved, typed `LogConfig` a Log runs with."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gregor.configdef import (
    LONG_MAX,
    ConfigError,
    ConfigKey,
    Type,
    Validator,
    at_least,
    between,
    each_one_of,
    invalid,
    one_of,
)

_HOUR_MS = 3_600_000
_MINUTE_MS = 60_000
_WEEK_MS = str(7 * 24 * _HOUR_MS)
_NEVER = str(LONG_MAX)


def _gzip_level(name: str, value: int) -> None:
    if not (1 <= value <= 9 or value == -1):
        raise invalid(name, value, "Value must be between 1 and 9 or -1")


def _throttled_replicas(name: str, value: list[str]) -> None:
    """Kafka's ThrottledReplicaListValidator: "*" or partitionId:brokerId pairs."""
    if value == ["*"]:
        return
    for item in value:
        part, sep, broker = item.partition(":")
        if not sep or not part.strip().isdigit() or not broker.strip().isdigit():
            raise invalid(
                name,
                ",".join(value),
                f"{name} must be the literal '*' or a list of replicas in the following "
                "format: [partitionId]:[brokerId],[partitionId]:[brokerId],...",
            )


@dataclass(frozen=True, slots=True)
class TopicKey(ConfigKey):
    """A topic-level key. `synonyms` are the broker keys that set its value when the topic
    does not, with their unit multipliers, highest precedence first; `attr` is the LogConfig
    field holding it (None: unused here)."""

    synonyms: tuple[tuple[str, int], ...] = ()
    attr: str | None = None


def _d(
    name: str,
    type_: Type,
    default: str,
    synonyms: Sequence[str | tuple[str, int]] = (),
    validator: Validator | None = None,
    attr: str | None = "auto",
) -> TopicKey:
    if attr == "auto":
        attr = name.replace(".", "_")
    syn = tuple((s, 1) if isinstance(s, str) else s for s in synonyms)
    return TopicKey(name, type_, default, validator, syn, attr)


_COMPRESSION = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

TOPIC_CONFIGS: dict[str, TopicKey] = {
    d.name: d
    for d in (
        _d(
            "cleanup.policy",
            Type.LIST,
            "delete",
            ["log.cleanup.policy"],
            each_one_of("compact", "delete"),
        ),
        _d(
            "compression.type",
            Type.STRING,
            "producer",
            ["compression.type"],
            one_of(*_COMPRESSION),
        ),
        _d("compression.gzip.level", Type.INT, "-1", ["compression.gzip.level"], _gzip_level),
        _d("compression.lz4.level", Type.INT, "9", ["compression.lz4.level"], between(1, 17)),
        _d(
            "compression.zstd.level",
            Type.INT,
            "3",
            ["compression.zstd.level"],
            between(-131072, 22),
        ),
        _d(
            "delete.retention.ms",
            Type.LONG,
            "86400000",
            ["log.cleaner.delete.retention.ms"],
            at_least(0),
        ),
        _d(
            "file.delete.delay.ms",
            Type.LONG,
            "60000",
            ["log.segment.delete.delay.ms"],
            at_least(0),
        ),
        _d(
            "flush.messages",
            Type.LONG,
            _NEVER,
            ["log.flush.interval.messages"],
            at_least(1),
            "flush_interval_messages",
        ),
        _d(
            "flush.ms",
            Type.LONG,
            _NEVER,
            ["log.flush.interval.ms", "log.flush.scheduler.interval.ms"],
            at_least(0),
            "flush_interval_ms",
        ),
        _d(
            "follower.replication.throttled.replicas",
            Type.LIST,
            "",
            [],
            _throttled_replicas,
            None,
        ),
        _d("index.interval.bytes", Type.INT, "4096", ["log.index.interval.bytes"], at_least(0)),
        _d(
            "leader.replication.throttled.replicas",
            Type.LIST,
            "",
            [],
            _throttled_replicas,
            None,
        ),
        _d(
            "local.retention.bytes",
            Type.LONG,
            "-2",
            ["log.local.retention.bytes"],
            at_least(-2),
        ),
        _d("local.retention.ms", Type.LONG, "-2", ["log.local.retention.ms"], at_least(-2)),
        _d(
            "max.compaction.lag.ms",
            Type.LONG,
            _NEVER,
            ["log.cleaner.max.compaction.lag.ms"],
            at_least(1),
        ),
        _d("max.message.bytes", Type.INT, "1048588", ["message.max.bytes"], at_least(0)),
        _d(
            "message.timestamp.after.max.ms",
            Type.LONG,
            _NEVER,
            ["log.message.timestamp.after.max.ms"],
            at_least(0),
        ),
        _d(
            "message.timestamp.before.max.ms",
            Type.LONG,
            _NEVER,
            ["log.message.timestamp.before.max.ms"],
            at_least(0),
        ),
        _d(
            "message.timestamp.type",
            Type.STRING,
            "CreateTime",
            ["log.message.timestamp.type"],
            one_of("CreateTime", "LogAppendTime"),
        ),
        _d(
            "min.cleanable.dirty.ratio",
            Type.DOUBLE,
            "0.5",
            ["log.cleaner.min.cleanable.ratio"],
            between(0, 1),
        ),
        _d(
            "min.compaction.lag.ms",
            Type.LONG,
            "0",
            ["log.cleaner.min.compaction.lag.ms"],
            at_least(0),
        ),
        _d("min.insync.replicas", Type.INT, "1", ["min.insync.replicas"], at_least(1)),
        _d("preallocate", Type.BOOLEAN, "false", ["log.preallocate"]),
        _d("remote.storage.enable", Type.BOOLEAN, "false", [], None, None),
        _d("remote.log.copy.disable", Type.BOOLEAN, "false", [], None, None),
        _d("remote.log.delete.on.disable", Type.BOOLEAN, "false", [], None, None),
        _d("retention.bytes", Type.LONG, "-1", ["log.retention.bytes"]),
        _d(
            "retention.ms",
            Type.LONG,
            _WEEK_MS,
            [
                ("log.retention.ms", 1),
                ("log.retention.minutes", _MINUTE_MS),
                ("log.retention.hours", _HOUR_MS),
            ],
            at_least(-1),
        ),
        # Kafka 3.x minimum (a v0 record overhead), so tests can use tiny segments.
        _d("segment.bytes", Type.INT, str(1 << 30), ["log.segment.bytes"], at_least(14)),
        _d(
            "segment.index.bytes",
            Type.INT,
            str(10 * 1024 * 1024),
            ["log.index.size.max.bytes"],
            at_least(4),
        ),
        _d(
            "segment.jitter.ms",
            Type.LONG,
            "0",
            [("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", _HOUR_MS)],
            at_least(0),
        ),
        _d(
            "segment.ms",
            Type.LONG,
            _WEEK_MS,
            [("log.roll.ms", 1), ("log.roll.hours", _HOUR_MS)],
            at_least(1),
        ),
        _d(
            "unclean.leader.election.enable",
            Type.BOOLEAN,
            "false",
            ["unclean.leader.election.enable"],
        ),
    )
}


def _broker_key(topic: TopicKey, index: int) -> ConfigKey:
    """The broker key of `topic`'s synonym at `index`, as Kafka's ServerLogConfigs defines
    it: only the last of a chain has a default (the topic default, in the key's unit; the
    others fall back to it); hours and minutes keys are ints."""
    name, multiplier = topic.synonyms[index]
    last = index == len(topic.synonyms) - 1
    if multiplier != 1:
        default = str(topic.parse(topic.default) // multiplier) if last else None
        return ConfigKey(name, Type.INT, default)
    return ConfigKey(name, topic.type, topic.default if last else None, topic.validator)


# Every broker key that is a topic key's synonym.
LOG_BROKER_KEYS: dict[str, ConfigKey] = {
    key.name: key
    for topic in TOPIC_CONFIGS.values()
    for key in (_broker_key(topic, i) for i in range(len(topic.synonyms)))
}


def validate_topic_configs(overrides: Mapping[str, str | None]) -> None:
    """Raise ConfigError for an unknown key or a bad value (CreateTopics → INVALID_CONFIG)."""
    for key, text in overrides.items():
        definition = TOPIC_CONFIGS.get(key)
        if definition is None:
            raise ConfigError(f"Unknown topic config name: {key}")
        if text is None:
            raise ConfigError(f"Null value not supported for topic configs: {key}")
        definition.parse(text)


def resolve_config(
    definition: TopicKey, broker_props: Mapping[str, str], topic_overrides: Mapping[str, str]
) -> tuple[Any, str | None]:
    """The effective value and its source: the topic key, a broker key, or None (default)."""
    if definition.name in topic_overrides:
        return definition.parse(topic_overrides[definition.name]), definition.name
    for key, multiplier in definition.synonyms:
        if key in broker_props:
            value = LOG_BROKER_KEYS[key].parse(broker_props[key])
            if multiplier != 1:  # hours or minutes: the topic key's bounds hold in ms
                value *= multiplier
                if definition.validator is not None:
                    definition.validator(key, value)
            return value, key
    return definition.parse(definition.default), None


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Typed topic-level settings; defaults are Kafka's."""

    segment_bytes: int = 1 << 30
    segment_ms: int = 7 * 24 * _HOUR_MS
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10 * 1024 * 1024
    retention_ms: int = 7 * 24 * _HOUR_MS
    retention_bytes: int = -1
    local_retention_ms: int = -2
    local_retention_bytes: int = -2
    index_interval_bytes: int = 4096
    flush_interval_messages: int = LONG_MAX
    flush_interval_ms: int = LONG_MAX
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    max_message_bytes: int = 1_048_588
    cleanup_policy: str = "delete"
    delete_retention_ms: int = 86_400_000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5
    file_delete_delay_ms: int = 60_000
    min_insync_replicas: int = 1
    compression_type: str = "producer"
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    unclean_leader_election_enable: bool = False
    preallocate: bool = False

    @property
    def delete_enabled(self) -> bool:
        return "delete" in self.cleanup_policy.split(",")

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy.split(",")

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @classmethod
    def from_properties(
        cls, broker_props: Mapping[str, str], topic_overrides: Mapping[str, str]
    ) -> LogConfig:
        """Topic override > broker key (in Kafka's precedence, e.g. log.retention.ms >
        .minutes > .hours) > default. Raises ConfigError naming the offending key."""
        unknown = [k for k in topic_overrides if k not in TOPIC_CONFIGS]
        if unknown:
            raise ConfigError(f"Unknown topic config name: {unknown[0]}")
        values: dict[str, Any] = {}
        for definition in TOPIC_CONFIGS.values():
            if definition.attr is not None:
                value = resolve_config(definition, broker_props, topic_overrides)[0]
                # a list (cleanup.policy) is kept as its comma-joined text
                is_list = definition.type is Type.LIST
                values[definition.attr] = ",".join(value) if is_list else value
        return cls(**values)
