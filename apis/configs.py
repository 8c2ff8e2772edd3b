"""DescribeConfigs for topics and for this broker."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from apis.context import NO_THROTTLE, RequestContext, Services, build, nested
from log.config import TOPIC_CONFIGS, resolve_config
from wire.schema import response_type
from wire.versions import DESCRIBE_CONFIGS

TOPIC = 2
BROKER = 4

# DescribeConfigs config sources
DYNAMIC_TOPIC_CONFIG = 1
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5

_CONFIG_TYPES = {
    "bool": 1,
    "string": 2,
    "int": 3,
    "short": 4,
    "long": 5,
    "double": 6,
    "list": 7,
    "class": 8,
    "password": 9,
}


@dataclass(slots=True)
class ConfigEntry:
    name: str
    value: str | None
    config_source: int
    config_type: int
    read_only: bool = False
    is_sensitive: bool = False
    synonyms: list[tuple[str, str | None, int]] = field(default_factory=list)


def format_value(value: Any) -> str | None:
    """Render a typed value the way Kafka prints it."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def describe_topic_configs(
    services: Services, overrides: Mapping[str, str], keys: Collection[str] | None, synonyms: bool
) -> list[ConfigEntry]:
    broker_props = services.config.raw
    entries = []
    for definition in TOPIC_CONFIGS.values():
        if keys and definition.name not in keys:
            continue
        value, source_key = resolve_config(definition, broker_props, overrides)
        source = (
            DEFAULT_CONFIG
            if source_key is None
            else DYNAMIC_TOPIC_CONFIG
            if source_key == definition.name
            else STATIC_BROKER_CONFIG
        )
        entry = ConfigEntry(
            definition.name, format_value(value), source, _CONFIG_TYPES.get(definition.type, 0)
        )
        if synonyms:
            if definition.name in overrides:
                entry.synonyms.append(
                    (definition.name, overrides[definition.name], DYNAMIC_TOPIC_CONFIG)
                )
            for key, _ in definition.synonyms:
                if key in broker_props:
                    entry.synonyms.append((key, broker_props[key], STATIC_BROKER_CONFIG))
            entry.synonyms.append(
                (
                    definition.synonyms[0][0] if definition.synonyms else definition.name,
                    format_value(definition.default),
                    DEFAULT_CONFIG,
                )
            )
        entries.append(entry)
    return entries


def describe_broker_configs(
    services: Services, keys: Collection[str] | None, synonyms: bool
) -> list[ConfigEntry]:
    config = services.config
    entries = []
    own_keys = config.key_types()
    for name, type_ in own_keys.items():
        if keys and name not in keys:
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
    for definition in TOPIC_CONFIGS.values():
        for name, _ in definition.synonyms:
            if name in own_keys or (keys and name not in keys):
                continue
            raw = config.raw.get(name)
            source = DEFAULT_CONFIG if raw is None else STATIC_BROKER_CONFIG
            value = (
                raw
                if raw is not None
                else (
                    format_value(definition.default) if name == definition.synonyms[0][0] else None
                )
            )
            entry = ConfigEntry(
                name, value, source, _CONFIG_TYPES.get(definition.type, 0), read_only=True
            )
            if synonyms:
                entry.synonyms.append((name, value, source))
            entries.append(entry)
    return entries


def handle(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(DESCRIBE_CONFIGS, ctx.api_version)
    result_cls = nested(cls, "DescribeConfigsResult")
    entry_cls = nested(cls, "DescribeConfigsResourceResult")
    synonym_cls = nested(cls, "DescribeConfigsSynonym")
    want_synonyms = bool(getattr(request, "include_synonyms", False))
    results = []
    for resource in request.resources:
        keys = resource.configuration_keys or None
        code, message, entries = ErrorCode.none, None, []
        if resource.resource_type == TOPIC:
            topic = services.metadata.topics.get(resource.resource_name)
            if topic is None:
                code = ErrorCode.unknown_topic_or_partition
                message = f"Topic {resource.resource_name} does not exist"
            else:
                entries = describe_topic_configs(services, topic.configs, keys, want_synonyms)
        elif resource.resource_type == BROKER:
            if resource.resource_name not in ("", str(services.config.broker_id)):
                code = ErrorCode.invalid_request
                message = f"Unexpected broker id, expected {services.config.broker_id}"
            else:
                entries = describe_broker_configs(services, keys, want_synonyms)
        else:
            code = ErrorCode.invalid_request
            message = f"Unsupported resource type {resource.resource_type}"
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
