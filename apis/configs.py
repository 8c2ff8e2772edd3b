"""DescribeConfigs for topics, brokers (this one, and the cluster-wide dynamic defaults)
and groups, with each value's source and synonyms in Kafka's precedence."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from apis.context import NO_THROTTLE, RequestContext, Services, build, nested
from controller.configs import (
    BROKER,
    DEFAULT_BROKER,
    DYNAMIC_BROKER_KEYS,
    GROUP,
    GROUP_CONFIGS,
    TOPIC,
    ConfigResource,
)
from controller.topics import TopicError
from log.config import TOPIC_CONFIGS, resolve_config
from wire.schema import response_type
from wire.versions import DESCRIBE_CONFIGS

# DescribeConfigs config sources
DYNAMIC_TOPIC_CONFIG = 1
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
GROUP_CONFIG = 8

_CONFIG_TYPES = {
    "bool": 1,
    "boolean": 1,
    "string": 2,
    "int": 3,
    "short": 4,
    "long": 5,
    "double": 6,
    "list": 7,
    "class": 8,
    "password": 9,
}

Synonym = tuple[str, str | None, int]
Layers = list[tuple[int, Mapping[str, str]]]


@dataclass(slots=True)
class ConfigEntry:
    name: str
    value: str | None
    config_source: int
    config_type: int
    read_only: bool = False
    is_sensitive: bool = False
    synonyms: list[Synonym] = field(default_factory=list)


def format_value(value: Any) -> str | None:
    """Render a typed value the way Kafka prints it."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def broker_layers(services: Services) -> Layers:
    """This broker's config levels, highest precedence first (KIP-226)."""
    cache = services.metadata
    own = ConfigResource(BROKER, str(services.config.broker_id))
    return [
        (DYNAMIC_BROKER_CONFIG, cache.dynamic_configs(own)),
        (DYNAMIC_DEFAULT_BROKER_CONFIG, cache.dynamic_configs(ConfigResource(BROKER, ""))),
        (STATIC_BROKER_CONFIG, services.config.raw),
    ]


def _merged(layers: Layers) -> dict[str, str]:
    props: dict[str, str] = {}
    for _, layer in reversed(layers):
        props.update(layer)
    return props


def _source(layers: Layers, key: str) -> int:
    return next((source for source, layer in layers if key in layer), DEFAULT_CONFIG)


def _synonyms(layers: Layers, keys: list[str]) -> list[Synonym]:
    """Each key set at each level, level by level as Kafka lists them."""
    return [(k, layer[k], source) for source, layer in layers for k in keys if k in layer]


def describe_topic_configs(
    services: Services, overrides: Mapping[str, str], keys: Collection[str] | None, synonyms: bool
) -> list[ConfigEntry]:
    layers = broker_layers(services)
    broker_props = _merged(layers)
    entries = []
    for definition in TOPIC_CONFIGS.values():
        name = definition.name
        if keys and name not in keys:
            continue
        value, source_key = resolve_config(definition, broker_props, overrides)
        if name in overrides:
            source = DYNAMIC_TOPIC_CONFIG
        elif source_key is None:
            source = DEFAULT_CONFIG
        else:
            source = _source(layers, source_key)
        entry = ConfigEntry(
            name, format_value(value), source, _CONFIG_TYPES.get(definition.type, 0)
        )
        if synonyms:
            if name in overrides:
                entry.synonyms.append((name, overrides[name], DYNAMIC_TOPIC_CONFIG))
            entry.synonyms += _synonyms(layers, [k for k, _ in definition.synonyms])
            default_key = definition.synonyms[0][0] if definition.synonyms else name
            entry.synonyms.append((default_key, format_value(definition.default), DEFAULT_CONFIG))
        entries.append(entry)
    return entries


def describe_broker_configs(
    services: Services, keys: Collection[str] | None, synonyms: bool
) -> list[ConfigEntry]:
    """Every key of this broker: its own table, then the broker-level topic defaults (the
    dynamic ones)."""
    config = services.config
    layers = broker_layers(services)
    entries = []
    own_keys = config.key_types()
    for name, type_ in own_keys.items():
        if name in DYNAMIC_BROKER_KEYS or (keys and name not in keys):
            continue
        source = DEFAULT_CONFIG if config.is_default(name) else STATIC_BROKER_CONFIG
        sensitive = type_ == "password"
        value = None if sensitive else format_value(config[name])
        entry = ConfigEntry(
            name, value, source, _CONFIG_TYPES[type_], read_only=True, is_sensitive=sensitive
        )
        if synonyms:
            entry.synonyms.append((name, value, source))
        entries.append(entry)
    for name in DYNAMIC_BROKER_KEYS:
        if keys and name not in keys:
            continue
        default = format_value(config[name]) if name in own_keys else None
        entries.append(_dynamic_broker_entry(name, layers, synonyms, default))
    return entries


def _dynamic_broker_entry(
    name: str, layers: Layers, synonyms: bool, default: str | None = None
) -> ConfigEntry:
    """A dynamic broker key; `default` is its value in this broker's own key table."""
    definition = DYNAMIC_BROKER_KEYS[name]
    source = _source(layers, name)
    if source != DEFAULT_CONFIG:
        value = next(layer[name] for s, layer in layers if s == source)
    elif default is not None:
        value = default
    else:
        value = format_value(definition.default) if name == definition.synonyms[0][0] else None
    entry = ConfigEntry(name, value, source, _CONFIG_TYPES.get(definition.type, 0))
    if synonyms:
        entry.synonyms = _synonyms(layers, [k for k, _ in definition.synonyms])
        if source == DEFAULT_CONFIG and value is not None:
            entry.synonyms.append((name, value, DEFAULT_CONFIG))
        else:
            topic_default = format_value(definition.default)
            entry.synonyms.append((definition.synonyms[0][0], topic_default, DEFAULT_CONFIG))
    return entry


def describe_default_broker_configs(
    services: Services, keys: Collection[str] | None, synonyms: bool
) -> list[ConfigEntry]:
    """The cluster-wide dynamic defaults only, as Kafka answers the resource name ""."""
    layers = broker_layers(services)[1:]
    return [
        _dynamic_broker_entry(name, layers, synonyms)
        for name in layers[0][1]
        if name in DYNAMIC_BROKER_KEYS and not (keys and name not in keys)
    ]


def describe_group_configs(
    overrides: Mapping[str, str], keys: Collection[str] | None, synonyms: bool
) -> list[ConfigEntry]:
    entries = []
    for definition in GROUP_CONFIGS.values():
        name = definition.name
        if keys and name not in keys:
            continue
        source = GROUP_CONFIG if name in overrides else DEFAULT_CONFIG
        value = overrides.get(name, str(definition.default))
        entry = ConfigEntry(name, value, source, _CONFIG_TYPES[definition.type])
        if synonyms:
            entry.synonyms.append((name, value, source))
        entries.append(entry)
    return entries


def check_own_broker_id(services: Services, name: str) -> None:
    """A per-broker resource must name this broker (clients send it there); raises
    TopicError(INVALID_REQUEST) otherwise, with Kafka's messages."""
    try:
        broker_id = int(name)
    except ValueError:
        raise TopicError(
            ErrorCode.invalid_request, f"Node id must be an integer, but it is: {name}"
        ) from None
    if broker_id != services.config.broker_id:
        raise TopicError(
            ErrorCode.invalid_request,
            f"Unexpected broker id, expected {services.config.broker_id}, but received {name}",
        )


def _describe(
    services: Services, resource_type: int, name: str, keys: Any, synonyms: bool
) -> list[ConfigEntry]:
    if resource_type == TOPIC:
        topic = services.metadata.topics.get(name)
        if topic is None:
            raise TopicError(ErrorCode.unknown_topic_or_partition, f"Topic {name} does not exist")
        return describe_topic_configs(services, topic.configs, keys, synonyms)
    if resource_type == BROKER:
        if name == DEFAULT_BROKER:
            return describe_default_broker_configs(services, keys, synonyms)
        check_own_broker_id(services, name)
        return describe_broker_configs(services, keys, synonyms)
    if resource_type == GROUP:
        overrides = services.metadata.dynamic_configs(ConfigResource(GROUP, name))
        return describe_group_configs(overrides, keys, synonyms)
    raise TopicError(ErrorCode.invalid_request, f"Unsupported resource type {resource_type}")


def handle(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(DESCRIBE_CONFIGS, ctx.api_version)
    result_cls = nested(cls, "DescribeConfigsResult")
    entry_cls = nested(cls, "DescribeConfigsResourceResult")
    synonym_cls = nested(cls, "DescribeConfigsSynonym")
    want_synonyms = bool(getattr(request, "include_synonyms", False))
    results = []
    for resource in request.resources:
        code, message, entries = ErrorCode.none, None, []
        try:
            entries = _describe(
                services,
                resource.resource_type,
                resource.resource_name,
                resource.configuration_keys or None,
                want_synonyms,
            )
        except TopicError as e:
            code, message = e.code, e.message
        configs = tuple(
            build(
                entry_cls,
                name=e.name,
                value=e.value,
                read_only=e.read_only,
                config_source=e.config_source,
                is_sensitive=e.is_sensitive,
                is_default=e.config_source == DEFAULT_CONFIG,
                config_type=e.config_type,
                documentation=None,
                synonyms=tuple(synonym_cls(name=n, value=v, source=s) for n, v, s in e.synonyms),
            )
            for e in entries
        )
        results.append(
            build(
                result_cls,
                error_code=code,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
                configs=configs,
            )
        )
    return build(cls, throttle_time=NO_THROTTLE, results=tuple(results))
