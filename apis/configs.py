"""DescribeConfigs for topics, brokers (this one, and the cluster-wide dynamic defaults)
and groups, with each value's source and synonyms in Kafka's precedence. Each resource needs
DESCRIBE_CONFIGS on its topic, its group or (a broker) the cluster, else it is answered
TOPIC_/GROUP_/CLUSTER_AUTHORIZATION_FAILED with Kafka's message and no configs."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from gregor.apis.acl import MESSAGES, config_resource_error
from gregor.apis.context import NO_THROTTLE, RequestContext, Services, build, nested
from gregor.configdef import Type
from gregor.controller.acls.model import AclOperation
from gregor.controller.configs import (
    ALL_DYNAMIC_BROKER_KEYS,
    BROKER_KEYS,
    GROUP_CONFIGS,
    broker_key,
    broker_synonyms,
)
from gregor.controller.metadata.config_resource import (
    BROKER,
    DEFAULT_BROKER,
    GROUP,
    TOPIC,
    ConfigResource,
)
from gregor.controller.topics import TopicError
from gregor.log.config import TOPIC_CONFIGS, resolve_config
from gregor.wire.schema import response_type
from gregor.wire.versions import DESCRIBE_CONFIGS

# DescribeConfigs config sources
DYNAMIC_TOPIC_CONFIG = 1
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
GROUP_CONFIG = 8

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
    """This broker's config levels, highest precedence first (KIP-226), the defaults last."""
    cache = services.metadata
    own = ConfigResource(BROKER, str(services.config.broker_id))
    return [
        (DYNAMIC_BROKER_CONFIG, cache.dynamic_configs(own)),
        (DYNAMIC_DEFAULT_BROKER_CONFIG, cache.dynamic_configs(ConfigResource(BROKER, ""))),
        (STATIC_BROKER_CONFIG, services.config.raw),
        (DEFAULT_CONFIG, _defaults()),
    ]


def _defaults() -> dict[str, str]:
    """Kafka's staticDefaultConfigs: the broker keys that have a default, as text."""
    return {k: key.default for k, key in BROKER_KEYS.items() if key.default is not None}


def _merged(layers: Layers) -> dict[str, str]:
    props: dict[str, str] = {}
    for _, layer in reversed(layers):
        props.update(layer)
    return props


def _synonyms(layers: Layers, name: str, keys: list[str], sensitive: bool) -> list[Synonym]:
    """Kafka's ConfigHelper.configSynonyms: each of `keys` set at each level, level by
    level, then everything before the first entry for `name` dropped (so a chain's
    lower keys, e.g. log.retention.hours, are listed for log.retention.ms only after an
    entry of log.retention.ms itself)."""
    found = [
        (k, None if sensitive else layer[k], source)
        for source, layer in layers
        for k in keys
        if k in layer
    ]
    first = next((i for i, (k, _, _) in enumerate(found) if k == name), len(found))
    return found[first:]


def describe_topic_configs(
    services: Services, overrides: Mapping[str, str], keys: Collection[str] | None, synonyms: bool
) -> list[ConfigEntry]:
    """Kafka's ConfigHelper.createTopicConfigEntry: the synonyms of a topic config are its
    override, then its first broker key's chain (configSynonyms over that key)."""
    layers = broker_layers(services)
    broker_props = _merged(layers[:-1])
    entries = []
    for definition in TOPIC_CONFIGS.values():
        name = definition.name
        if keys and name not in keys:
            continue
        value, _ = resolve_config(definition, broker_props, overrides)
        found: list[Synonym] = []
        if name in overrides:
            found.append((name, format_value(value), DYNAMIC_TOPIC_CONFIG))
        if definition.synonyms:
            first = definition.synonyms[0][0]
            found += _synonyms(layers, first, broker_synonyms(first), False)
        source = found[0][2] if found else DEFAULT_CONFIG
        entry = ConfigEntry(name, format_value(value), source, definition.type)
        if synonyms:
            entry.synonyms = found
        entries.append(entry)
    return entries


def _broker_entry(
    layers: Layers, name: str, value: str | None, per_broker: bool, synonyms: bool
) -> ConfigEntry:
    """Kafka's ConfigHelper.createBrokerConfigEntry. A key Gregor does not know is of an
    unknown type, so sensitive, as Kafka treats it."""
    key = broker_key(name)
    sensitive = key is None or key.sensitive
    found = _synonyms(layers, name, broker_synonyms(name), sensitive)
    if not per_broker:
        found = [s for s in found if s[2] == DYNAMIC_DEFAULT_BROKER_CONFIG]
    entry = ConfigEntry(
        name,
        None if sensitive else value,
        found[0][2] if found else DEFAULT_CONFIG,
        0 if key is None else key.type,  # 0: UNKNOWN
        read_only=name not in ALL_DYNAMIC_BROKER_KEYS,
        is_sensitive=sensitive,
    )
    if synonyms:
        entry.synonyms = found
    return entry


def _value(props: Mapping[str, str], name: str) -> str | None:
    """A broker key's value in `props` as Kafka prints it (lists without spaces)."""
    text = props.get(name)
    if text is None:
        return None
    key = broker_key(name)
    if key is not None and key.type is Type.LIST:
        return ",".join(item.strip() for item in text.split(",") if item.strip())
    return text.strip() if key is not None and not key.sensitive else text


def describe_broker_configs(
    services: Services, keys: Collection[str] | None, synonyms: bool
) -> list[ConfigEntry]:
    """Every broker key Gregor knows, then every other key set at some level (unknown
    ones, listener-prefixed ones), with the value this broker runs with."""
    layers = broker_layers(services)
    props = _merged(layers)
    names = list(BROKER_KEYS)
    names += sorted({k for _, layer in layers[:-1] for k in layer} - set(BROKER_KEYS))
    return [
        _broker_entry(layers, name, _value(props, name), True, synonyms)
        for name in names
        if not (keys and name not in keys)
    ]


def describe_default_broker_configs(
    services: Services, keys: Collection[str] | None, synonyms: bool
) -> list[ConfigEntry]:
    """The cluster-wide dynamic defaults only, as Kafka answers the resource name ""."""
    layers = broker_layers(services)
    defaults = layers[1][1]
    return [
        _broker_entry(layers, name, _value(defaults, name), False, synonyms)
        for name in defaults
        if not (keys and name not in keys)
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
        value = overrides.get(name, definition.default)
        entry = ConfigEntry(name, value, source, definition.type)
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
        refused = config_resource_error(
            services,
            ctx,
            AclOperation.DESCRIBE_CONFIGS,
            resource.resource_type,
            resource.resource_name,
        )
        try:
            if refused is not None:
                raise TopicError(refused, MESSAGES[refused])
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
