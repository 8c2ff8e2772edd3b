"""CreateTopics and DeleteTopics."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from apis.configs import describe_topic_configs
from apis.context import NO_THROTTLE, RequestContext, Services, build, nested
from controller.metadata import TopicInfo
from controller.topics import TopicError, check_client_creatable, check_client_deletable
from log.config import validate_topic_configs
from wire.schema import response_type
from wire.versions import CREATE_TOPICS, DELETE_TOPICS


def _check_configs(configs: Mapping[str, str]) -> None:
    try:
        validate_topic_configs(configs)
    except ValueError as e:
        raise TopicError(ErrorCode.invalid_config, str(e)) from None


def create_topic(
    services: Services,
    name: str,
    partitions: int,
    replication_factor: int,
    configs: Mapping[str, str],
    *,
    validate_only: bool = False,
) -> TopicInfo:
    """Create a topic a client asked for (CreateTopics or Metadata auto-creation); -1 means
    the broker default for partitions and replication."""
    check_client_creatable(name)
    if partitions == -1:
        partitions = services.config["num.partitions"]
    if replication_factor == -1:
        replication_factor = services.config["default.replication.factor"]
    return services.controller.create_topic(
        name,
        partitions,
        replication_factor,
        configs,
        validate_only=validate_only,
        check_configs=_check_configs,
    )


Requested = tuple[int, int, dict[str, str]]  # partitions, replication factor, configs


def _requested(
    services: Services, ctx: RequestContext, entry: Any, counts: Counter[str]
) -> Requested:
    """What one CreatableTopic asks for; a TopicError if the request itself is invalid."""
    if counts[entry.name] > 1:
        raise TopicError(
            ErrorCode.invalid_request,
            f"Create topics request from client `{ctx.client_id}` contains "
            f"multiple entries for the following topics: {entry.name}",
        )
    partitions, replication = entry.num_partitions, entry.replication_factor
    if entry.assignments:
        if partitions != -1 or replication != -1:
            raise TopicError(
                ErrorCode.invalid_request,
                "Both numPartitions or replicationFactor and "
                "replicasAssignments were set. Both cannot be used at the "
                "same time.",
            )
        partitions = len(entry.assignments)
        replication = len(entry.assignments[0].broker_ids)
        known = services.metadata.brokers
        if any(b not in known for a in entry.assignments for b in a.broker_ids):
            raise TopicError(
                ErrorCode.invalid_replica_assignment,
                "Replica assignment names unknown brokers",
            )
    return partitions, replication, {c.name: c.value for c in entry.configs}


def handle_create(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(CREATE_TOPICS, ctx.api_version)
    result_cls = nested(cls, "CreatableTopicResult")
    config_cls = nested(cls, "CreatableTopicConfigs") if ctx.api_version >= 5 else None
    counts = Counter(t.name for t in request.topics)
    # Every topic is validated before any is created, so a refused topic changes nothing;
    # creation then checks again (an earlier topic of the request may collide with it).
    checked: list[Requested | TopicError] = []
    for entry in request.topics:
        try:
            requested = _requested(services, ctx, entry, counts)
            create_topic(services, entry.name, *requested, validate_only=True)
            checked.append(requested)
        except TopicError as e:
            checked.append(e)
    results = []
    for entry, requested in zip(request.topics, checked, strict=True):
        fields: dict[str, Any] = {
            "name": entry.name,
            "topic_id": None,
            "num_partitions": -1,
            "replication_factor": -1,
            "configs": None,
        }
        try:
            if isinstance(requested, TopicError):
                raise requested
            topic = create_topic(
                services, entry.name, *requested, validate_only=request.validate_only
            )
            fields.update(
                error_code=ErrorCode.none,
                error_message=None,
                topic_id=topic.topic_id,
                num_partitions=len(topic.partitions),
                replication_factor=len(topic.partitions[0].replicas),
                configs=None
                if config_cls is None
                else tuple(
                    config_cls(
                        name=c.name,
                        value=c.value,
                        read_only=c.read_only,
                        config_source=c.config_source,
                        is_sensitive=c.is_sensitive,
                    )
                    for c in describe_topic_configs(services, topic.configs, None, False)
                ),
            )
        except TopicError as e:
            fields.update(error_code=e.code, error_message=e.message)
        results.append(build(result_cls, **fields))
    return build(cls, throttle_time=NO_THROTTLE, topics=tuple(results))


def handle_delete(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(DELETE_TOPICS, ctx.api_version)
    result_cls = nested(cls, "DeletableTopicResult")
    if ctx.api_version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, None) for name in request.topic_names]
    results = []
    for name, topic_id in wanted:
        code, message = ErrorCode.none, None
        try:
            if name is None:
                name = services.metadata.topic_name(topic_id)
                if name is None:
                    raise TopicError(
                        ErrorCode.unknown_topic_id, "This server does not host this topic ID."
                    )
            if not services.config["delete.topic.enable"]:
                raise TopicError(ErrorCode.topic_deletion_disabled, "Topic deletion is disabled.")
            check_client_deletable(name)
            topic_id = services.controller.delete_topic(name).topic_id
        except TopicError as e:
            code, message = e.code, e.message
        results.append(
            build(result_cls, name=name, topic_id=topic_id, error_code=code, error_message=message)
        )
    return build(cls, throttle_time=NO_THROTTLE, responses=tuple(results))
