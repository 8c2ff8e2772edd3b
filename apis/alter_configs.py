"""AlterConfigs (whole sets, deprecated in Kafka) and IncrementalAlterConfigs (KIP-339:
SET, DELETE, APPEND, SUBTRACT) for topics, brokers and groups.

As in Kafka, the receiving broker checks the request's shape and validates BROKER changes
itself (its own id, or "" for the cluster default; Kafka's DynamicBrokerConfig rules:
read-only keys, per-listener-only and per-broker-only keys, types, and the
reconfigurations' own checks, all INVALID_REQUEST; unknown keys stored as given; a TLS
listener's new keystore that does not load, INVALID_CONFIG); TOPIC and GROUP changes are
validated by the controller (INVALID_CONFIG, UNKNOWN_TOPIC_OR_PARTITION), which persists
every change. After the check for repeated resources, each needs ALTER_CONFIGS on its topic,
its group or (a broker) the cluster, as Kafka's controller checks, else
TOPIC_/GROUP_/CLUSTER_AUTHORIZATION_FAILED."""

from __future__ import annotations

from collections import Counter
from typing import Any

from kio.schema.errors import ErrorCode

from gregor.apis.acl import MESSAGES, config_resource_error
from gregor.apis.configs import check_own_broker_id
from gregor.apis.context import NO_THROTTLE, RequestContext, Services, later, nested
from gregor.controller.acls.model import AclOperation
from gregor.controller.configs import (
    DELETE,
    apply_operations,
    base_key,
    broker_synonyms,
    check_broker_configs,
)
from gregor.controller.metadata.config_resource import (
    BROKER,
    DEFAULT_BROKER,
    GROUP,
    TOPIC,
    ConfigResource,
)
from gregor.controller.topics import TopicError
from gregor.wire.schema import response_type
from gregor.wire.versions import ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS

Change = tuple[ConfigResource, dict[str, str]]


def handle_alter(services: Services, ctx: RequestContext, request: Any) -> Any:
    return later(_alter(services, ctx, request, incremental=False))


def handle_incremental(services: Services, ctx: RequestContext, request: Any) -> Any:
    return later(_alter(services, ctx, request, incremental=True))


async def _alter(
    services: Services, ctx: RequestContext, request: Any, *, incremental: bool
) -> Any:
    api = INCREMENTAL_ALTER_CONFIGS if incremental else ALTER_CONFIGS
    cls = response_type(api, ctx.api_version)
    entry_cls = nested(cls, "AlterConfigsResourceResponse")
    counts = Counter((r.resource_type, r.resource_name) for r in request.resources)
    prepared: list[Change | TopicError] = []
    for resource in request.resources:
        try:
            if counts[resource.resource_type, resource.resource_name] > 1:
                raise TopicError(
                    ErrorCode.invalid_request, "Each resource must appear at most once."
                )
            refused = config_resource_error(
                services,
                ctx,
                AclOperation.ALTER_CONFIGS,
                resource.resource_type,
                resource.resource_name,
            )
            if refused is not None:
                raise TopicError(refused, MESSAGES[refused])
            prepared.append(_change(services, resource, incremental))
        except TopicError as e:
            prepared.append(e)
    changes = [p for p in prepared if not isinstance(p, TopicError)]
    outcomes = iter(
        await services.controller.alter_configs(changes, validate_only=request.validate_only)
    )
    responses = []
    for resource, change in zip(request.resources, prepared, strict=True):
        error = change if isinstance(change, TopicError) else next(outcomes)
        responses.append(
            entry_cls(
                error_code=ErrorCode.none if error is None else error.code,
                error_message=None if error is None else error.message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
            )
        )
    return cls(throttle_time=NO_THROTTLE, responses=tuple(responses))


def _change(services: Services, resource: Any, incremental: bool) -> Change:
    """The resource and its whole new set of configs, after the receiving broker's checks
    (request shape, and the whole check of BROKER changes)."""
    names = [c.name for c in resource.configs]
    if len(set(names)) != len(names):
        raise TopicError(ErrorCode.invalid_request, "Error due to duplicate config keys")
    nulls = [
        c.name
        for c in resource.configs
        if c.value is None and not (incremental and c.config_operation == DELETE)
    ]
    if nulls:
        raise TopicError(
            ErrorCode.invalid_request, "Null value not supported for : " + ", ".join(nulls)
        )
    target = ConfigResource(resource.resource_type, resource.resource_name)
    if target.type not in (TOPIC, BROKER, GROUP):
        raise TopicError(ErrorCode.invalid_request, f"Unknown resource type {target.type}")
    if target.type == BROKER and target.name != DEFAULT_BROKER:
        check_own_broker_id(services, target.name)
    current = services.metadata.dynamic_configs(target)
    if incremental:
        configs = apply_operations(
            target.type, current, [(c.name, c.config_operation, c.value) for c in resource.configs]
        )
    else:
        configs = {c.name: c.value for c in resource.configs}
    if target.type == BROKER:
        new = _broker_props_with(services, target, configs)
        check_broker_configs(
            configs,
            per_broker=target.name != DEFAULT_BROKER,
            current=_broker_props_with(services, None, {}),
            new=new,
            advertised=services.config.advertised_listener_names,
        )
        if services.check_broker_props is not None:
            services.check_broker_props(new)
    return target, configs


def _broker_props_with(
    services: Services, target: ConfigResource | None, configs: dict[str, str]
) -> dict[str, str]:
    """This broker's effective properties with `configs` in place at `target`'s level
    (None: as they are). As Kafka's overrideProps, a key set at a level hides the other
    keys of its chain below it (a dynamic log.retention.ms over a static .hours)."""
    cache = services.metadata
    default = ConfigResource(BROKER, DEFAULT_BROKER)
    own = ConfigResource(BROKER, str(services.config.broker_id))
    props = dict(services.config.raw)
    for level in (default, own):
        for name, value in (configs if target == level else cache.dynamic_configs(level)).items():
            if base_key(name) == name:  # a listener's key leaves the base key in place
                for synonym in broker_synonyms(name):
                    if synonym != name:
                        props.pop(synonym, None)
            props[name] = value
    return props
