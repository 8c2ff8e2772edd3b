"""AlterConfigs (whole sets, deprecated in Kafka) and IncrementalAlterConfigs (KIP-339:
SET, DELETE, APPEND, SUBTRACT) for topics, brokers and groups.

As in Kafka, the receiving broker checks the request's shape and validates BROKER changes
itself (its own id, or "" for the cluster default; only dynamic keys, INVALID_REQUEST
otherwise); TOPIC and GROUP changes are validated by the controller (INVALID_CONFIG,
UNKNOWN_TOPIC_OR_PARTITION), which persists every change."""

from __future__ import annotations

from collections import Counter
from typing import Any

from kio.schema.errors import ErrorCode

from apis.configs import check_own_broker_id
from apis.context import NO_THROTTLE, RequestContext, Services, later, nested
from controller.configs import (
    BROKER,
    DEFAULT_BROKER,
    DELETE,
    GROUP,
    TOPIC,
    ConfigResource,
    apply_operations,
    check_broker_configs,
)
from controller.topics import TopicError
from wire.schema import response_type
from wire.versions import ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS

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
        check_broker_configs(configs, _broker_props_with(services, target, configs))
    return target, configs


def _broker_props_with(
    services: Services, target: ConfigResource, configs: dict[str, str]
) -> dict[str, str]:
    """This broker's effective properties with `configs` in place at `target`'s level."""
    cache = services.metadata
    default = ConfigResource(BROKER, DEFAULT_BROKER)
    own = ConfigResource(BROKER, str(services.config.broker_id))
    return {
        **services.config.raw,
        **(configs if target == default else cache.dynamic_configs(default)),
        **(configs if target == own else cache.dynamic_configs(own)),
    }
