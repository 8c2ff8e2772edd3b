"""Topic-level log configuration: the key table (types, defaults, broker synonyms, validators)
and the resolved, typed `LogConfig` a Log runs with."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

LONG_MAX = (1 << 63) - 1
INT_MAX = (1 << 31) - 1

_HOUR_MS = 3_600_000
_MINUTE_MS = 60_000


def _integer(text: str, kind: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError(f"Not a number of type {kind}") from None


def _parse_long(text: str) -> int:
    value = _integer(text, "LONG")
    if not -(1 << 63) <= value <= LONG_MAX:
        raise ValueError("out of range for a long")
    return value


def _parse_int(text: str) -> int:
    value = _integer(text, "INT")
    if not -(1 << 31) <= value <= INT_MAX:
        raise ValueError("out of range for an int")
    return value


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError("expected true or false")
    return lowered == "true"


def _parse_double(text: str) -> float:
    return float(text.strip())


def _parse_string(text: str) -> str:
    return text.strip()


def _parse_list(text: str) -> str:
    # Lists are kept in their canonical comma-joined text form.
    return ",".join(item.strip() for item in text.split(",") if item.strip())


_PARSERS: dict[str, Callable[[str], Any]] = {
    "long": _parse_long,
    "int": _parse_int,
    "boolean": _parse_bool,
    "double": _parse_double,
    "string": _parse_string,
    "list": _parse_list,
}

Validator = Callable[[Any], str | None]  # returns a reason when the value is invalid


def _at_least(low: float) -> Validator:
    return lambda v: None if v >= low else f"must be at least {low}"


def _between(low: float, high: float) -> Validator:
    return lambda v: None if low <= v <= high else f"must be between {low} and {high}"


def _one_of(*allowed: str) -> Validator:
    return lambda v: None if v in allowed else f"must be one of {', '.join(allowed)}"


def _list_of(*allowed: str) -> Validator:
    def check(v: str) -> str | None:
        bad = [item for item in v.split(",") if item and item not in allowed]
        return f"items must be in {', '.join(allowed)}" if bad else None

    return check


def _level(low: int, high: int, also: int | None = None) -> Validator:
    def check(v: int) -> str | None:
        if low <= v <= high or v == also:
            return None
        return f"must be between {low} and {high}"

    return check


def _throttled_replicas(v: str) -> str | None:
    # "*" or a list of "partition:brokerId" pairs.
    if v in ("", "*"):
        return None
    for item in v.split(","):
        part, sep, broker = item.partition(":")
        if not sep or not part.strip().isdigit() or not broker.strip().isdigit():
            return "must be '*' or a list of partitionId:brokerId pairs"
    return None


@dataclass(frozen=True, slots=True)
class ConfigDef:
    """One topic-level config key. `synonyms` are broker keys with their unit multipliers,
    highest precedence first; `attr` is the LogConfig field holding it (None: unused here)."""

    name: str
    type: str
    default: Any
    synonyms: tuple[tuple[str, int], ...]
    validator: Validator | None = None
    attr: str | None = None

    def parse(self, text: str, *, key: str | None = None, multiplier: int = 1) -> Any:
        """Parse and validate `text`; ValueError names `key` (defaults to the topic key)."""
        shown = key or self.name
        try:
            value = _PARSERS[self.type](str(text))
        except ValueError as exc:
            raise ValueError(f"Invalid value {text!r} for configuration {shown}: {exc}") from None
        if multiplier != 1:
            value *= multiplier
        if self.validator is not None:
            reason = self.validator(value)
            if reason is not None:
                raise ValueError(f"Invalid value {text!r} for configuration {shown}: {reason}")
        return value


def _d(
    name: str,
    type_: str,
    default: Any,
    synonyms: list[str | tuple[str, int]] = (),  # type: ignore[assignment]
    validator: Validator | None = None,
    attr: str | None = "auto",
) -> ConfigDef:
    if attr == "auto":
        attr = name.replace(".", "_")
    syn = tuple((s, 1) if isinstance(s, str) else s for s in synonyms)
    return ConfigDef(name, type_, default, syn, validator, attr)


_COMPRESSION = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

TOPIC_CONFIGS: dict[str, ConfigDef] = {
    d.name: d
    for d in (
        _d(
            "cleanup.policy",
            "list",
            "delete",
            ["log.cleanup.policy"],
            _list_of("compact", "delete"),
        ),
        _d("compression.type", "string", "producer", ["compression.type"], _one_of(*_COMPRESSION)),
        _d("compression.gzip.level", "int", -1, ["compression.gzip.level"], _level(1, 9, -1)),
        _d("compression.lz4.level", "int", 9, ["compression.lz4.level"], _level(1, 17)),
        _d("compression.zstd.level", "int", 3, ["compression.zstd.level"], _level(-131072, 22)),
        _d(
            "delete.retention.ms",
            "long",
            86_400_000,
            ["log.cleaner.delete.retention.ms"],
            _at_least(0),
        ),
        _d("file.delete.delay.ms", "long", 60_000, ["log.segment.delete.delay.ms"], _at_least(0)),
        _d(
            "flush.messages",
            "long",
            LONG_MAX,
            ["log.flush.interval.messages"],
            _at_least(1),
            "flush_interval_messages",
        ),
        _d(
            "flush.ms",
            "long",
            LONG_MAX,
            ["log.flush.interval.ms", "log.flush.scheduler.interval.ms"],
            _at_least(0),
            "flush_interval_ms",
        ),
        _d(
            "follower.replication.throttled.replicas",
            "list",
            "",
            [],
            _throttled_replicas,
            None,
        ),
        _d("index.interval.bytes", "int", 4096, ["log.index.interval.bytes"], _at_least(0)),
        _d(
            "leader.replication.throttled.replicas",
            "list",
            "",
            [],
            _throttled_replicas,
            None,
        ),
        _d("local.retention.bytes", "long", -2, ["log.local.retention.bytes"], _at_least(-2)),
        _d("local.retention.ms", "long", -2, ["log.local.retention.ms"], _at_least(-2)),
        _d(
            "max.compaction.lag.ms",
            "long",
            LONG_MAX,
            ["log.cleaner.max.compaction.lag.ms"],
            _at_least(1),
        ),
        _d("max.message.bytes", "int", 1_048_588, ["message.max.bytes"], _at_least(0)),
        _d(
            "message.timestamp.after.max.ms",
            "long",
            LONG_MAX,
            ["log.message.timestamp.after.max.ms"],
            _at_least(0),
        ),
        _d(
            "message.timestamp.before.max.ms",
            "long",
            LONG_MAX,
            ["log.message.timestamp.before.max.ms"],
            _at_least(0),
        ),
        _d(
            "message.timestamp.type",
            "string",
            "CreateTime",
            ["log.message.timestamp.type"],
            _one_of("CreateTime", "LogAppendTime"),
        ),
        _d(
            "min.cleanable.dirty.ratio",
            "double",
            0.5,
            ["log.cleaner.min.cleanable.ratio"],
            _between(0, 1),
        ),
        _d(
            "min.compaction.lag.ms",
            "long",
            0,
            ["log.cleaner.min.compaction.lag.ms"],
            _at_least(0),
        ),
        _d("min.insync.replicas", "int", 1, ["min.insync.replicas"], _at_least(1)),
        _d("preallocate", "boolean", False, ["log.preallocate"]),
        _d("remote.storage.enable", "boolean", False, [], None, None),
        _d("remote.log.copy.disable", "boolean", False, [], None, None),
        _d("remote.log.delete.on.disable", "boolean", False, [], None, None),
        _d("retention.bytes", "long", -1, ["log.retention.bytes"]),
        _d(
            "retention.ms",
            "long",
            7 * 24 * _HOUR_MS,
            [
                ("log.retention.ms", 1),
                ("log.retention.minutes", _MINUTE_MS),
                ("log.retention.hours", _HOUR_MS),
            ],
            _at_least(-1),
        ),
        # Kafka 3.x minimum (a v0 record overhead), so tests can use tiny segments.
        _d("segment.bytes", "int", 1 << 30, ["log.segment.bytes"], _at_least(14)),
        _d(
            "segment.index.bytes",
            "int",
            10 * 1024 * 1024,
            ["log.index.size.max.bytes"],
            _at_least(4),
        ),
        _d(
            "segment.jitter.ms",
            "long",
            0,
            [("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", _HOUR_MS)],
            _at_least(0),
        ),
        _d(
            "segment.ms",
            "long",
            7 * 24 * _HOUR_MS,
            [("log.roll.ms", 1), ("log.roll.hours", _HOUR_MS)],
            _at_least(1),
        ),
        _d(
            "unclean.leader.election.enable",
            "boolean",
            False,
            ["unclean.leader.election.enable"],
        ),
    )
}

# Broker-level hour/minute keys are ints in Kafka; parse them as such.
_BROKER_INT_KEYS = frozenset(
    {"log.retention.hours", "log.retention.minutes", "log.roll.hours", "log.roll.jitter.hours"}
)


def validate_topic_configs(overrides: Mapping[str, str | None]) -> None:
    """Raise ValueError for an unknown key or a bad value (CreateTopics → INVALID_CONFIG)."""
    for key, text in overrides.items():
        definition = TOPIC_CONFIGS.get(key)
        if definition is None:
            raise ValueError(f"Unknown topic config name: {key}")
        if text is None:
            raise ValueError(f"Null value not supported for topic configs: {key}")
        definition.parse(text)


def resolve_config(
    definition: ConfigDef, broker_props: Mapping[str, str], topic_overrides: Mapping[str, str]
) -> tuple[Any, str | None]:
    """The effective value and its source: the topic key, a broker key, or None (default)."""
    if definition.name in topic_overrides:
        return definition.parse(topic_overrides[definition.name]), definition.name
    for key, multiplier in definition.synonyms:
        if key in broker_props:
            if key in _BROKER_INT_KEYS:
                base = ConfigDef(key, "int", None, (), definition.validator)
                return base.parse(broker_props[key], multiplier=multiplier), key
            return definition.parse(broker_props[key], key=key, multiplier=multiplier), key
    return definition.default, None


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
        .minutes > .hours) > default. Raises ValueError naming the offending key."""
        unknown = [k for k in topic_overrides if k not in TOPIC_CONFIGS]
        if unknown:
            raise ValueError(f"Unknown topic config name: {unknown[0]}")
        values = {}
        for definition in TOPIC_CONFIGS.values():
            if definition.attr is not None:
                values[definition.attr] = resolve_config(definition, broker_props, topic_overrides)[
                    0
                ]
        return cls(**values)
