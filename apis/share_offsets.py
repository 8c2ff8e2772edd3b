"""The share groups' offsets (KIP-932): DescribeShareGroupOffsets, AlterShareGroupOffsets and
DeleteShareGroupOffsets v0, the admin APIs behind kafka-share-groups.sh and Admin's
listShareGroupOffsets/alterShareGroupOffsets/deleteShareGroupOffsets.

Authorized as Kafka 4.1's KafkaApis: Describe needs DESCRIBE on the group
(GROUP_AUTHORIZATION_FAILED for the group) and DESCRIBE on each topic (its partitions
TOPIC_AUTHORIZATION_FAILED; asked for all topics, the ones denied are left out); Alter needs
READ on the group and on each topic; Delete DELETE on the group and READ on each topic. A
topic not in the metadata is described with start offset -1 and is UNKNOWN_TOPIC_OR_PARTITION
to Alter and Delete, as is a partition it does not have. While ``group.share.enable`` is
false all three answer UNSUPPORTED_VERSION. The coordinator's part is
``coordinator/share_offsets.py``.
"""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from gregor.apis.acl import MESSAGES, authorize, authorized_names
from gregor.apis.context import NO_THROTTLE, RequestContext, Services, build, later, nested
from gregor.apis.groups import coordinator
from gregor.apis.share_groups import share_groups_enabled
from gregor.controller.acls.model import AclOperation, ResourceType
from gregor.replica.share_persister import UNINITIALIZED_OFFSET
from gregor.wire.schema import response_type
from gregor.wire.versions import (
    ALTER_SHARE_GROUP_OFFSETS,
    DELETE_SHARE_GROUP_OFFSETS,
    DESCRIBE_SHARE_GROUP_OFFSETS,
)

NO_TOPIC_ID = uuid.UUID(int=0)
UNKNOWN = ErrorCode.unknown_topic_or_partition
UNKNOWN_MESSAGE = "This server does not host this topic-partition."


def _message(error: ErrorCode, message: str | None = None) -> str | None:
    if error == ErrorCode.none:
        return None
    return message or MESSAGES.get(error)


# -- DescribeShareGroupOffsets -------------------------------------------------------------
def handle_describe(services: Services, ctx: RequestContext, request: Any) -> Any:
    return later(_describe(services, ctx, request))


async def _describe(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(DESCRIBE_SHARE_GROUP_OFFSETS, ctx.api_version)
    group_cls = nested(cls, "DescribeShareGroupOffsetsResponseGroup")
    groups = []
    for asked in request.groups:
        error, message, topics = await _describe_group(services, ctx, cls, asked)
        groups.append(
            group_cls(
                group_id=asked.group_id,
                topics=topics,
                error_code=error,
                error_message=_message(error, message),
            )
        )
    return build(cls, throttle_time=NO_THROTTLE, groups=tuple(groups))


async def _describe_group(
    services: Services, ctx: RequestContext, cls: type, asked: Any
) -> tuple[ErrorCode, str | None, tuple[Any, ...]]:
    topic_cls = nested(cls, "DescribeShareGroupOffsetsResponseTopic")
    partition_cls = nested(cls, "DescribeShareGroupOffsetsResponsePartition")

    def partition(index: int, start: int, epoch: int = 0, error: ErrorCode = ErrorCode.none) -> Any:
        return partition_cls(
            partition_index=index,
            start_offset=start,
            leader_epoch=epoch,
            error_code=error,
            error_message=_message(error),
        )

    if not share_groups_enabled(services):
        return ErrorCode.unsupported_version, None, ()
    if not authorize(services, ctx, AclOperation.DESCRIBE, ResourceType.GROUP, asked.group_id):
        return ErrorCode.group_authorization_failed, None, ()
    topics: list[Any] = []
    wanted: dict[uuid.UUID, frozenset[int]] | None = None
    if asked.topics is not None:
        names = [t.topic_name for t in asked.topics]
        allowed = authorized_names(services, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
        wanted = {}
        for t in asked.topics:
            info = services.metadata.topics.get(t.topic_name)
            if t.topic_name not in allowed:
                refused = ErrorCode.topic_authorization_failed
                parts = tuple(partition(p, 0, error=refused) for p in t.partitions)
            elif info is None:  # as Kafka: no data, not an error
                parts = tuple(partition(p, UNINITIALIZED_OFFSET) for p in t.partitions)
            else:
                wanted[info.topic_id] = wanted.get(info.topic_id, frozenset()) | set(t.partitions)
                continue
            topics.append(
                topic_cls(topic_name=t.topic_name, topic_id=NO_TOPIC_ID, partitions=parts)
            )
    result = await coordinator(services).share_offsets.describe(asked.group_id, wanted)
    if result.error != ErrorCode.none:
        return result.error, result.message, ()
    by_topic: dict[uuid.UUID, list[Any]] = {}
    for (topic_id, p), state in sorted(result.states.items()):
        if state is None:
            by_topic.setdefault(topic_id, []).append(partition(p, UNINITIALIZED_OFFSET))
        else:
            by_topic.setdefault(topic_id, []).append(
                partition(p, state.start_offset, state.leader_epoch)
            )
    described = []
    for topic_id, found in by_topic.items():
        name = services.metadata.topic_name(topic_id)
        if name is None:
            continue  # deleted meanwhile
        if asked.topics is None and not authorize(
            services, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name
        ):
            continue
        described.append(topic_cls(topic_name=name, topic_id=topic_id, partitions=tuple(found)))
    return ErrorCode.none, None, (*described, *topics)


# -- AlterShareGroupOffsets ----------------------------------------------------------------
def handle_alter(services: Services, ctx: RequestContext, request: Any) -> Any:
    return later(_alter(services, ctx, request))


async def _alter(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(ALTER_SHARE_GROUP_OFFSETS, ctx.api_version)
    topic_cls = nested(cls, "AlterShareGroupOffsetsResponseTopic")
    partition_cls = nested(cls, "AlterShareGroupOffsetsResponsePartition")

    def respond(error: ErrorCode, message: str | None = None, topics: tuple[Any, ...] = ()) -> Any:
        return build(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=error,
            error_message=_message(error, message),
            responses=topics,
        )

    def partition(index: int, error: ErrorCode) -> Any:
        message = UNKNOWN_MESSAGE if error == UNKNOWN else _message(error)
        return partition_cls(partition_index=index, error_code=error, error_message=message)

    group_id = request.group_id
    if not share_groups_enabled(services):
        return respond(ErrorCode.unsupported_version)
    if not authorize(services, ctx, AclOperation.READ, ResourceType.GROUP, group_id):
        return respond(ErrorCode.group_authorization_failed)
    names = [t.topic_name for t in request.topics]
    allowed = authorized_names(services, ctx, AclOperation.READ, ResourceType.TOPIC, names)
    refused: dict[tuple[str, int], ErrorCode] = {}
    offsets: dict[uuid.UUID, tuple[str, dict[int, int]]] = {}
    for t in request.topics:
        info = services.metadata.topics.get(t.topic_name)
        for p in t.partitions:
            key = (t.topic_name, p.partition_index)
            if t.topic_name not in allowed:
                refused[key] = ErrorCode.topic_authorization_failed
            elif services.metadata.partition(*key) is None:
                refused[key] = UNKNOWN
            else:
                assert info is not None
                offsets.setdefault(info.topic_id, (t.topic_name, {}))[1][p.partition_index] = (
                    p.start_offset
                )
    result = await coordinator(services).share_offsets.alter(group_id, offsets)
    if result.error != ErrorCode.none:
        return respond(result.error, result.message)
    topics = []
    for t in request.topics:
        info = services.metadata.topics.get(t.topic_name)
        topic_id = info.topic_id if info is not None and t.topic_name in allowed else NO_TOPIC_ID
        parts = tuple(
            partition(
                p.partition_index,
                refused.get((t.topic_name, p.partition_index))
                or result.errors.get((topic_id, p.partition_index), ErrorCode.none),
            )
            for p in t.partitions
        )
        topics.append(topic_cls(topic_name=t.topic_name, topic_id=topic_id, partitions=parts))
    return respond(ErrorCode.none, topics=tuple(topics))


# -- DeleteShareGroupOffsets ---------------------------------------------------------------
def handle_delete(services: Services, ctx: RequestContext, request: Any) -> Any:
    return later(_delete(services, ctx, request))


async def _delete(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(DELETE_SHARE_GROUP_OFFSETS, ctx.api_version)
    topic_cls = nested(cls, "DeleteShareGroupOffsetsResponseTopic")

    def respond(error: ErrorCode, message: str | None = None, topics: tuple[Any, ...] = ()) -> Any:
        return build(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=error,
            error_message=_message(error, message),
            responses=topics,
        )

    group_id = request.group_id
    if not share_groups_enabled(services):
        return respond(ErrorCode.unsupported_version)
    if not authorize(services, ctx, AclOperation.DELETE, ResourceType.GROUP, group_id):
        return respond(ErrorCode.group_authorization_failed)
    names = list(dict.fromkeys(t.topic_name for t in request.topics))
    allowed = authorized_names(services, ctx, AclOperation.READ, ResourceType.TOPIC, names)
    refused: dict[str, ErrorCode] = {}
    topics: dict[uuid.UUID, str] = {}
    for name in names:
        info = services.metadata.topics.get(name)
        if name not in allowed:
            refused[name] = ErrorCode.topic_authorization_failed
        elif info is None:
            refused[name] = UNKNOWN
        else:
            topics[info.topic_id] = name
    result = await coordinator(services).share_offsets.delete(group_id, topics)
    if result.error != ErrorCode.none:
        return respond(result.error, result.message)
    ids = {name: topic_id for topic_id, name in topics.items()}
    answered = []
    for name in names:
        topic_id = ids.get(name, NO_TOPIC_ID)
        error = refused.get(name) or result.errors.get((topic_id, -1), ErrorCode.none)
        message = UNKNOWN_MESSAGE if error == UNKNOWN else _message(error)
        answered.append(
            topic_cls(topic_name=name, topic_id=topic_id, error_code=error, error_message=message)
        )
    return respond(ErrorCode.none, topics=tuple(answered))
