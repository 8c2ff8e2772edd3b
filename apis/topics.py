"""CreateTopics, DeleteTopics and CreatePartitions.

Authorized as Kafka's controller APIs: CreateTopics CREATE on the cluster or on each topic
(TOPIC_AUTHORIZATION_FAILED), a created topic's configs answered only with DESCRIBE_CONFIGS
(else its TopicConfigErrorCode is TOPIC_AUTHORIZATION_FAILED); DeleteTopics DELETE on the
cluster or on each topic, a topic without DESCRIBE refused before its existence is told (and,
named by id, without its name); CreatePartitions ALTER on each topic. A repeated topic is
refused as invalid before any check, as in Kafka."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from gregor.apis.acl import MESSAGES, authorize_cluster, authorized_names
from gregor.apis.configs import describe_topic_configs
from gregor.apis.context import NO_THROTTLE, RequestContext, Services, build, later, nested
from gregor.controller.acls.model import AclOperation, ResourceType
from gregor.controller.base import NewPartitions, NewTopic
from gregor.controller.metadata.cache import TopicInfo
from gregor.controller.topics import TopicError, check_client_creatable, check_client_deletable
from gregor.wire.schema import response_type
from gregor.wire.versions import CREATE_PARTITIONS, CREATE_TOPICS, DELETE_TOPICS


def new_topic(
    services: Services,
    name: str,
    partitions: int,
    replication_factor: int,
    configs: Mapping[str, str],
    assignments: Mapping[int, Sequence[int]] | None = None,
) -> NewTopic:
    """A topic a client asked for (CreateTopics or Metadata auto-creation); -1 means the
    broker default for partitions and replication."""
    check_client_creatable(name)
    if partitions == -1:
        partitions = services.config["num.partitions"]
    if replication_factor == -1:
        replication_factor = services.config["default.replication.factor"]
    return NewTopic(name, partitions, replication_factor, configs, assignments)


def _requested(
    services: Services, ctx: RequestContext, entry: Any, counts: Counter[str]
) -> NewTopic:
    """What one CreatableTopic asks for; a TopicError if the request itself is invalid."""
    if counts[entry.name] > 1:
        raise TopicError(
            ErrorCode.invalid_request,
            f"Create topics request from client `{ctx.client_id}` contains "
            f"multiple entries for the following topics: {entry.name}",
        )
    assignments = None
    if entry.assignments:
        if entry.num_partitions != -1 or entry.replication_factor != -1:
            raise TopicError(
                ErrorCode.invalid_request,
                "Both numPartitions or replicationFactor and "
                "replicasAssignments were set. Both cannot be used at the "
                "same time.",
            )
        assignments = {a.partition_index: a.broker_ids for a in entry.assignments}
        if len(assignments) != len(entry.assignments):
            raise TopicError(
                ErrorCode.invalid_replica_assignment,
                "Found multiple manual partition assignments for partition "
                + str(_first_repeated(a.partition_index for a in entry.assignments)),
            )
    return new_topic(
        services,
        entry.name,
        entry.num_partitions,
        entry.replication_factor,
        {c.name: c.value for c in entry.configs},
        assignments,
    )


def _first_repeated(values: Iterable[int]) -> int | None:
    seen: set[int] = set()
    for value in values:
        if value in seen:
            return value
        seen.add(value)
    return None


Outcomes = list[TopicInfo | TopicError]


async def _controller(call: Awaitable[Outcomes], count: int) -> Outcomes:
    """The controller's answers. A big change yields to the event loop as it goes, so the
    broker may stop under it (its last tasks are cancelled): then every topic is answered
    REQUEST_TIMED_OUT, which clients retry (the change is all or nothing either way)."""
    try:
        return await call
    except asyncio.CancelledError:
        stopped = TopicError(
            ErrorCode.request_timed_out, "The broker stopped during the topic change."
        )
        return [stopped] * count


def handle_create(services: Services, ctx: RequestContext, request: Any) -> Any:
    return later(_create(services, ctx, request))


async def _create(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(CREATE_TOPICS, ctx.api_version)
    result_cls = nested(cls, "CreatableTopicResult")
    config_cls = nested(cls, "CreatableTopicConfigs") if ctx.api_version >= 5 else None
    counts = Counter(t.name for t in request.topics)
    names = [t.name for t in request.topics]
    creatable = describable = set(names)
    if services.authorizer is not None:
        if not authorize_cluster(services, ctx, AclOperation.CREATE):
            creatable = authorized_names(
                services, ctx, AclOperation.CREATE, ResourceType.TOPIC, names
            )
        describable = authorized_names(
            services, ctx, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, names
        )
    outcomes: list[TopicInfo | TopicError | None] = []
    wanted: list[NewTopic] = []
    for entry in request.topics:
        try:
            if counts[entry.name] == 1 and entry.name not in creatable:
                raise TopicError(ErrorCode.topic_authorization_failed, "Authorization failed.")
            wanted.append(_requested(services, ctx, entry, counts))
            outcomes.append(None)  # the controller's answer, below
        except TopicError as e:
            outcomes.append(e)
    answers = iter(
        await _controller(
            services.controller.create_topics(wanted, validate_only=request.validate_only),
            len(wanted),
        )
    )
    results = []
    for entry, outcome in zip(request.topics, outcomes, strict=True):
        if outcome is None:
            outcome = next(answers)
        fields: dict[str, Any] = {
            "name": entry.name,
            "topic_id": None,
            "num_partitions": -1,
            "replication_factor": -1,
            "configs": None,
        }
        if isinstance(outcome, TopicError):
            fields.update(error_code=outcome.code, error_message=outcome.message)
        elif entry.name not in describable:
            fields.update(
                error_code=ErrorCode.none,
                error_message=None,
                topic_id=outcome.topic_id,
                num_partitions=len(outcome.partitions),
                replication_factor=len(outcome.partitions[0].replicas),
                topic_config_error_code=ErrorCode.topic_authorization_failed,
            )
        else:
            fields.update(
                error_code=ErrorCode.none,
                error_message=None,
                topic_id=outcome.topic_id,
                num_partitions=len(outcome.partitions),
                replication_factor=len(outcome.partitions[0].replicas),
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
                    for c in describe_topic_configs(services, outcome.configs, None, False)
                ),
            )
        results.append(build(result_cls, **fields))
    return build(cls, throttle_time=NO_THROTTLE, topics=tuple(results))


def handle_delete(services: Services, ctx: RequestContext, request: Any) -> Any:
    return later(_delete(services, ctx, request))


async def _delete(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(DELETE_TOPICS, ctx.api_version)
    result_cls = nested(cls, "DeletableTopicResult")
    if ctx.api_version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, None) for name in request.topic_names]
    # Each entry: the name and id to answer with, and its error or None to ask the controller.
    entries: list[tuple[str | None, Any, TopicError | None]] = []
    names: list[str] = []  # those asked of the controller
    resolved = [(n if n is not None else services.metadata.topic_name(i), i) for n, i in wanted]
    describable = deletable = None  # None: every topic
    if services.authorizer is not None and not authorize_cluster(
        services, ctx, AclOperation.DELETE
    ):
        named = {n for n, _ in resolved if n is not None}
        describable = authorized_names(
            services, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, named
        )
        deletable = authorized_names(services, ctx, AclOperation.DELETE, ResourceType.TOPIC, named)
    for (given, topic_id), (name, _) in zip(wanted, resolved, strict=True):
        try:
            if name is None:
                raise TopicError(
                    ErrorCode.unknown_topic_id, "This server does not host this topic ID."
                )
            if not services.config["delete.topic.enable"]:
                raise TopicError(ErrorCode.topic_deletion_disabled, "Topic deletion is disabled.")
            if describable is not None and deletable is not None:
                if given is None and name not in deletable:
                    # Named by id: the name is told only to whom may DESCRIBE it.
                    name = name if name in describable else None
                    raise _refused_topic()
                if name not in describable:
                    raise _refused_topic()
                if name not in services.metadata.topics:
                    raise TopicError(
                        ErrorCode.unknown_topic_or_partition,
                        "This server does not host this topic-partition.",
                    )
                if name not in deletable:
                    raise _refused_topic()
            check_client_deletable(name)
            entries.append((name, topic_id, None))
            names.append(name)
        except TopicError as e:
            entries.append((name, topic_id, e))
    answers = iter(await _controller(services.controller.delete_topics(names), len(names)))
    results = []
    for name, topic_id, error in entries:
        outcome = next(answers) if error is None else error
        if isinstance(outcome, TopicError):
            code, message = outcome.code, outcome.message
        else:
            code, message, topic_id = ErrorCode.none, None, outcome.topic_id
        results.append(
            build(result_cls, name=name, topic_id=topic_id, error_code=code, error_message=message)
        )
    return build(cls, throttle_time=NO_THROTTLE, responses=tuple(results))


def _refused_topic() -> TopicError:
    code = ErrorCode.topic_authorization_failed
    return TopicError(code, MESSAGES[code])


def handle_create_partitions(services: Services, ctx: RequestContext, request: Any) -> Any:
    return later(_create_partitions(services, ctx, request))


async def _create_partitions(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(CREATE_PARTITIONS, ctx.api_version)
    result_cls = nested(cls, "CreatePartitionsTopicResult")
    counts = Counter(t.name for t in request.topics)
    # One result per topic name, as Kafka answers: a repeated topic is refused as a whole.
    outcomes: dict[str, TopicInfo | TopicError | None] = {}
    wanted: list[NewPartitions] = []
    alterable = authorized_names(
        services, ctx, AclOperation.ALTER, ResourceType.TOPIC, counts.keys()
    )
    for entry in request.topics:
        if counts[entry.name] > 1:
            outcomes[entry.name] = TopicError(
                ErrorCode.invalid_request, "Duplicate topic in request."
            )
            continue
        if entry.name not in alterable:
            outcomes[entry.name] = _refused_topic()
            continue
        assignments = (
            None if entry.assignments is None else [a.broker_ids for a in entry.assignments]
        )
        wanted.append(NewPartitions(entry.name, entry.count, assignments))
        outcomes[entry.name] = None  # the controller's answer, below
    answers = await _controller(
        services.controller.create_partitions(wanted, validate_only=request.validate_only),
        len(wanted),
    )
    outcomes.update(zip((w.topic for w in wanted), answers, strict=True))
    results = []
    for name, outcome in outcomes.items():
        if isinstance(outcome, TopicError):
            code, message = outcome.code, outcome.message
        else:
            code, message = ErrorCode.none, None
        results.append(result_cls(name=name, error_code=code, error_message=message))
    return build(cls, throttle_time=NO_THROTTLE, results=tuple(results))
