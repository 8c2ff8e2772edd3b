"""What the consumer group (KIP-848) and share group (KIP-932) heartbeats and describes do
alike: ConsumerGroupHeartbeat and ShareGroupHeartbeat refuse and answer the same way, and
ConsumerGroupDescribe and ShareGroupDescribe authorize and describe each group the same way.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from gregor.apis.acl import MESSAGES, authorize, authorized_names, authorized_operations
from gregor.apis.context import (
    NO_AUTHORIZED_OPERATIONS,
    NO_THROTTLE,
    RequestContext,
    Services,
    build,
    later,
    nested,
)
from gregor.apis.groups import may_read_group
from gregor.controller.acls.model import AclOperation, ResourceType
from gregor.coordinator.assignors import Assignment
from gregor.coordinator.consumer_group import ConsumerGroup
from gregor.coordinator.consumer_membership import HeartbeatResult
from gregor.coordinator.share_group import ShareGroup
from gregor.coordinator.share_membership import ShareHeartbeatResult

Group = TypeVar("Group", ConsumerGroup, ShareGroup)


def heartbeat_refusal(
    services: Services,
    ctx: RequestContext,
    enabled: bool,
    group_id: str,
    subscribed_topic_names: Sequence[str] | None,
) -> ErrorCode | None:
    """Why a heartbeat is refused before the coordinator sees it (None: it is not): the
    protocol is off, the group may not be READ, or a subscribed topic may not be DESCRIBEd."""
    if not enabled:
        return ErrorCode.unsupported_version
    if not may_read_group(services, ctx, group_id):
        return ErrorCode.group_authorization_failed
    names = subscribed_topic_names
    if names and services.authorizer is not None:
        allowed = authorized_names(services, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
        if len(allowed) < len(set(names)):
            return ErrorCode.topic_authorization_failed
    return None


def heartbeat_response(cls: type, result: HeartbeatResult | ShareHeartbeatResult) -> Any:
    """The heartbeat response ``cls`` carrying ``result`` (no assignment: unchanged)."""
    assignment = None
    if result.assignment is not None:
        topic_cls = nested(cls, "TopicPartitions")
        assignment = nested(cls, "Assignment")(
            topic_partitions=tuple(
                topic_cls(topic_id=topic, partitions=tuple(sorted(parts)))
                for topic, parts in sorted(result.assignment.items())
            )
        )
    return build(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=result.error,
        error_message=result.message,
        member_id=result.member_id,
        member_epoch=result.member_epoch,
        heartbeat_interval=timedelta(milliseconds=result.heartbeat_interval_ms),
        assignment=assignment,
    )


# A describe of more groups than this is answered a slice at a time: 2,000 groups held the
# event loop 30-40 ms in one piece.
_DESCRIBE_SLICE = 200


def describe_groups(
    services: Services,
    ctx: RequestContext,
    request: Any,
    cls: type,
    *,
    enabled: bool,
    describe: Callable[[str], tuple[ErrorCode, str | None, Group | None]],
    topic_ids: Callable[[Group], Iterable[uuid.UUID]],
    assignor_name: Callable[[Group], str],
    members: Callable[[Group], tuple[Any, ...]],
) -> Any:
    """The describe response ``cls`` for the request's groups: each refused while the
    protocol is off, without DESCRIBE on the group, or using a topic (one it subscribes to
    by name, or ``topic_ids``) the request may not DESCRIBE; else described. More than
    ``_DESCRIBE_SLICE`` groups are described a slice per turn of the event loop."""
    group_cls = nested(cls, "DescribedGroup")

    def failed(group_id: str, error: ErrorCode, message: str | None) -> Any:
        return build(
            group_cls,
            error_code=error,
            error_message=message,
            group_id=group_id,
            group_state="",
            group_epoch=0,
            assignment_epoch=0,
            assignor_name="",
            members=(),
            authorized_operations=NO_AUTHORIZED_OPERATIONS,
        )

    def one(group_id: str) -> Any:
        if not enabled:
            return failed(group_id, ErrorCode.unsupported_version, None)
        if not authorize(services, ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            refused = ErrorCode.group_authorization_failed
            return failed(group_id, refused, MESSAGES[refused])
        error, message, group = describe(group_id)
        if group is None:
            return failed(group_id, error, message)
        if not _may_describe_topics(services, ctx, group, topic_ids):
            return failed(
                group_id,
                ErrorCode.topic_authorization_failed,
                "The described group uses topics that the client is not authorized to describe.",
            )
        operations = NO_AUTHORIZED_OPERATIONS
        if request.include_authorized_operations:
            operations = authorized_operations(services, ctx, ResourceType.GROUP, group_id)
        return build(
            group_cls,
            error_code=ErrorCode.none,
            error_message=None,
            group_id=group_id,
            group_state=group.state.value,
            group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch,
            assignor_name=assignor_name(group),
            members=members(group),
            authorized_operations=operations,
        )

    group_ids = request.group_ids
    if len(group_ids) <= _DESCRIBE_SLICE:
        return build(cls, throttle_time=NO_THROTTLE, groups=tuple(map(one, group_ids)))

    async def sliced() -> Any:
        described: list[Any] = []
        for start in range(0, len(group_ids), _DESCRIBE_SLICE):
            if start:
                await asyncio.sleep(0)  # other connections are served between two slices
            described.extend(map(one, group_ids[start : start + _DESCRIBE_SLICE]))
        return build(cls, throttle_time=NO_THROTTLE, groups=tuple(described))

    return later(sliced())


def described_assignment(services: Services, cls: type, assignment: Assignment) -> Any:
    """A member's assignment in the describe response ``cls``, by topic id and name."""
    topic_cls = nested(cls, "TopicPartitions")
    topics = []
    for topic_id, parts in sorted(assignment.items()):
        name = services.metadata.topic_name(topic_id)
        if name is not None:  # as Kafka: a topic no longer in the metadata is left out
            topics.append(
                topic_cls(topic_id=topic_id, topic_name=name, partitions=tuple(sorted(parts)))
            )
    return nested(cls, "Assignment")(topic_partitions=tuple(topics))


def _may_describe_topics(
    services: Services,
    ctx: RequestContext,
    group: Group,
    topic_ids: Callable[[Group], Iterable[uuid.UUID]],
) -> bool:
    if services.authorizer is None:
        return True
    names = group.subscribed_topic_names()
    for topic_id in topic_ids(group):
        name = services.metadata.topic_name(topic_id)
        if name is not None:
            names.add(name)
    allowed = authorized_names(services, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
    return len(allowed) == len(names)
