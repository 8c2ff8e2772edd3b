"""Config resources and their rules, shared by every controller and the config APIs:
which keys each resource type takes, how incremental operations apply, and validation
with Kafka's error codes and messages (KIP-226 dynamic broker configs, KIP-339
incremental alters, KIP-848 group configs)."""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import quote, unquote

from kio.schema.errors import ErrorCode

from controller.topics import TopicError, check_configs
from log.config import TOPIC_CONFIGS, ConfigDef, LogConfig

# ConfigResource.Type ids
TOPIC = 2
BROKER = 4
GROUP = 32

# AlterConfigOp.OpType ids
SET = 0
DELETE = 1
APPEND = 2
SUBTRACT = 3

# The resource name of the cluster-wide default broker configs.
DEFAULT_BROKER = ""


@dataclass(frozen=True, slots=True)
class ConfigResource:
    type: int
    name: str

    @property
    def entity_path(self) -> str:
        """Where Kafka's ZooKeeper layout keeps it, under /config (broker default:
        `brokers/<default>`); groups are Gregor's own, ZooKeeper-era Kafka had none, with
        their ids URL-encoded as Kafka's Sanitizer does client ids (they may hold '/'; dots
        too, since "." and ".." are not znode names)."""
        if self.type == TOPIC:
            return f"topics/{self.name}"
        if self.type == BROKER:
            return f"brokers/{self.name or '<default>'}"
        return f"groups/{quote(self.name, safe='').replace('.', '%2E')}"

    @classmethod
    def from_entity_path(cls, path: str) -> ConfigResource | None:
        kind, _, name = path.partition("/")
        resource_type = {"topics": TOPIC, "brokers": BROKER, "groups": GROUP}.get(kind)
        if resource_type is None or not name:
            return None
        if resource_type == BROKER and name == "<default>":
            name = DEFAULT_BROKER
        elif resource_type == GROUP:
            name = unquote(name)
        return cls(resource_type, name)


# Broker keys that take effect without a restart: the broker-level synonyms of topic configs
# (Kafka's DynamicLogConfig), which every log picks up at once.
DYNAMIC_BROKER_KEYS: dict[str, ConfigDef] = {
    key: definition for definition in TOPIC_CONFIGS.values() for key, _ in definition.synonyms
}


@dataclass(frozen=True, slots=True)
class GroupConfigDef:
    """One of Kafka 4's GroupConfig keys: its default and the bounds the broker sets
    (Kafka's group.<type>.min/max.* defaults; Gregor does not make them configurable)."""

    name: str
    type: str
    default: int | str
    low: int | None = None
    high: int | None = None
    choices: tuple[str, ...] = ()


GROUP_CONFIGS: dict[str, GroupConfigDef] = {
    d.name: d
    for d in (
        GroupConfigDef("consumer.session.timeout.ms", "int", 45_000, 45_000, 60_000),
        GroupConfigDef("consumer.heartbeat.interval.ms", "int", 5_000, 5_000, 15_000),
        GroupConfigDef("share.session.timeout.ms", "int", 45_000, 45_000, 60_000),
        GroupConfigDef("share.heartbeat.interval.ms", "int", 5_000, 5_000, 15_000),
        GroupConfigDef("share.record.lock.duration.ms", "int", 30_000, 15_000, 60_000),
        GroupConfigDef(
            "share.auto.offset.reset", "string", "latest", choices=("latest", "earliest")
        ),
        GroupConfigDef(
            "share.isolation.level",
            "string",
            "read_uncommitted",
            choices=("read_committed", "read_uncommitted"),
        ),
        GroupConfigDef("streams.session.timeout.ms", "int", 45_000, 45_000, 60_000),
        GroupConfigDef("streams.heartbeat.interval.ms", "int", 5_000, 5_000, 15_000),
        GroupConfigDef("streams.num.standby.replicas", "int", 0, 0, 2),
    )
}
# Kafka's broker keys holding the bounds, named in its messages.
_GROUP_BOUND_KEYS = {
    "consumer.session.timeout.ms": "group.consumer.{}.session.timeout.ms",
    "consumer.heartbeat.interval.ms": "group.consumer.{}.heartbeat.interval.ms",
    "share.session.timeout.ms": "group.share.{}.session.timeout.ms",
    "share.heartbeat.interval.ms": "group.share.{}.heartbeat.interval.ms",
    "share.record.lock.duration.ms": "group.share.{}.record.lock.duration.ms",
    "streams.session.timeout.ms": "group.streams.{}.session.timeout.ms",
    "streams.heartbeat.interval.ms": "group.streams.{}.heartbeat.interval.ms",
    "streams.num.standby.replicas": "group.streams.{}.standby.replicas",
}


def _list_key(resource_type: int, key: str) -> ConfigDef | None:
    """The definition of a list-typed key of the resource type (APPEND and SUBTRACT apply
    to those only), else None."""
    table = {TOPIC: TOPIC_CONFIGS, BROKER: DYNAMIC_BROKER_KEYS}.get(resource_type, {})
    definition = table.get(key)
    return definition if definition is not None and definition.type == "list" else None


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
            definition = _list_key(resource_type, name)
            if definition is None:
                verb = "append" if op == APPEND else "subtract"
                raise TopicError(
                    ErrorCode.invalid_config,
                    f"Config value {verb} is not allowed for config key: {name}",
                )
            old = [v for v in result.get(name, str(definition.default)).split(",") if v]
            given = (value or "").split(",")
            if op == APPEND:
                new = old + [v for v in given if v not in old]
            else:
                new = [v for v in old if v not in given]
            result[name] = ",".join(new)
        else:
            raise TopicError(ErrorCode.invalid_request, f"Unknown operations type {op}")
    return result


def check_broker_configs(configs: Mapping[str, str], effective: Mapping[str, str]) -> None:
    """A dynamic broker config set (per broker or the cluster default); `effective` is the
    broker's whole configuration with it in place. Kafka answers INVALID_REQUEST here."""
    fixed = sorted(k for k in configs if k not in DYNAMIC_BROKER_KEYS)
    if fixed:
        raise TopicError(
            ErrorCode.invalid_request,
            f"Cannot update these configs dynamically: Set({', '.join(fixed)})",
        )
    try:
        LogConfig.from_properties(effective, {})
    except ValueError as e:
        raise TopicError(ErrorCode.invalid_request, str(e)) from None


def check_group_configs(configs: Mapping[str, str]) -> None:
    """Kafka's GroupConfig.validate: known names, typed values within the broker's bounds,
    session timeouts above heartbeat intervals."""
    for name in configs:
        if name not in GROUP_CONFIGS:
            raise TopicError(ErrorCode.invalid_config, f"Unknown group config name: {name}")
    values = {
        d.name: d.default if d.name not in configs else _group_value(d, configs[d.name])
        for d in GROUP_CONFIGS.values()
    }
    for kind in ("consumer", "share", "streams"):
        session, heartbeat = f"{kind}.session.timeout.ms", f"{kind}.heartbeat.interval.ms"
        if values[session] <= values[heartbeat]:  # type: ignore[operator]
            raise TopicError(
                ErrorCode.invalid_config, f"{session} must be greater than {heartbeat}"
            )


def _group_value(definition: GroupConfigDef, text: str) -> int | str:
    name = definition.name
    if definition.type == "string":
        if text not in definition.choices:
            raise TopicError(
                ErrorCode.invalid_config,
                f"Invalid value {text} for configuration {name}: String must be one of: "
                + ", ".join(definition.choices),
            )
        return text
    try:
        value = int(text.strip())
        if not -(2**31) <= value < 2**31:
            raise ValueError
    except ValueError:
        raise TopicError(
            ErrorCode.invalid_config,
            f"Invalid value {text} for configuration {name}: Not a number of type INT",
        ) from None
    bound = _GROUP_BOUND_KEYS[name]
    if definition.low is not None and value < definition.low:
        raise TopicError(
            ErrorCode.invalid_config,
            f"{name} must be greater than or equal to {bound.format('min')}",
        )
    if definition.high is not None and value > definition.high:
        raise TopicError(
            ErrorCode.invalid_config, f"{name} must be less than or equal to {bound.format('max')}"
        )
    return value


def check_config_change(
    resource: ConfigResource, configs: Mapping[str, str], topics: Container[str]
) -> None:
    """A controller's checks of a resource's new configs, `topics` being those that exist
    (BROKER resources are checked by the receiving broker: check_broker_configs)."""
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
        check_group_configs(configs)
    elif resource.type != BROKER:
        raise TopicError(ErrorCode.invalid_request, f"Unknown resource type {resource.type}")
