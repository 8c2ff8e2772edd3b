"""DescribeTopicPartitions (KIP-966): topics and their partitions, paginated.

Topics are answered in name order, starting at the cursor's topic and partition; once
``response_partition_limit`` partitions are in the answer, ``next_cursor`` names where the
next request should start (Kafka's DescribeTopicPartitionsRequestHandler). Topics without
DESCRIBE are left out, or answered TOPIC_AUTHORIZATION_FAILED (after the others) when named;
each topic's authorized operations (KIP-430) are always reported.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from gregor.apis.acl import authorized_names, authorized_operations
from gregor.apis.context import (
    NO_AUTHORIZED_OPERATIONS,
    NO_THROTTLE,
    RequestContext,
    Services,
    nested,
)
from gregor.controller.acls.model import AclOperation, ResourceType
from gregor.controller.metadata.cache import ZERO_UUID, PartitionInfo, TopicInfo
from gregor.wire.schema import response_type
from gregor.wire.versions import DESCRIBE_TOPIC_PARTITIONS

# Kafka's max.request.partition.size.limit default: the most partitions one answer holds.
MAX_PARTITIONS = 2000


def handle(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(DESCRIBE_TOPIC_PARTITIONS, ctx.api_version)
    topic_cls = nested(cls, "DescribeTopicPartitionsResponseTopic")
    cursor_cls = nested(cls, "Cursor")
    cache = services.metadata
    cursor = request.cursor
    start_topic = cursor.topic_name if cursor is not None else ""
    fetch_all = not request.topics
    if fetch_all:
        names = sorted(n for n in cache.topics if n >= start_topic)
    else:
        names = sorted({t.name for t in request.topics if t.name >= start_topic})
    if cursor is not None and (
        cursor.partition_index < 0 or (not fetch_all and start_topic not in names)
    ):
        # Kafka throws InvalidRequestException: every requested topic carries the error.
        return cls(
            throttle_time=NO_THROTTLE,
            topics=tuple(
                _topic_error(topic_cls, t.name, None, ErrorCode.invalid_request)
                for t in request.topics
            ),
        )
    refused: list[Any] = []
    if services.authorizer is not None:
        describable = authorized_names(
            services, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names
        )
        if not fetch_all:
            refused = [
                _topic_error(topic_cls, n, ZERO_UUID, ErrorCode.topic_authorization_failed)
                for n in names
                if n not in describable
            ]
        names = [n for n in names if n in describable]
    # At least one partition per answer, as Kafka: a client paging at 0 still progresses.
    remaining = max(min(request.response_partition_limit, MAX_PARTITIONS), 1)
    topics = []
    next_cursor = None
    for name in names:
        if remaining == 0:
            next_cursor = cursor_cls(topic_name=name, partition_index=0)
            break
        topic = cache.topics.get(name)
        if topic is None:
            if not fetch_all:
                topics.append(
                    _topic_error(topic_cls, name, ZERO_UUID, ErrorCode.unknown_topic_or_partition)
                )
            continue
        first = cursor.partition_index if cursor is not None and name == start_topic else 0
        indexes = sorted(i for i in topic.partitions if i >= first)
        shown, rest = indexes[:remaining], indexes[remaining:]
        topics.append(_topic(services, ctx, cls, topic, shown))
        if rest:
            next_cursor = cursor_cls(topic_name=name, partition_index=rest[0])
            break
        remaining -= len(shown)
    return cls(throttle_time=NO_THROTTLE, topics=tuple(topics + refused), next_cursor=next_cursor)


def _topic(
    services: Services, ctx: RequestContext, cls: type, topic: TopicInfo, indexes: list[int]
) -> Any:
    partition_cls = nested(cls, "DescribeTopicPartitionsResponsePartition")
    partitions = []
    for index in indexes:
        p: PartitionInfo = topic.partitions[index]
        leader = services.metadata.live_leader(p)
        led = leader is not None and leader.endpoint(ctx.listener) is not None
        partitions.append(
            partition_cls(
                error_code=ErrorCode.none if led else ErrorCode.leader_not_available,
                partition_index=index,
                leader_id=p.leader if led else -1,
                leader_epoch=p.leader_epoch,
                replica_nodes=tuple(p.replicas),
                isr_nodes=tuple(p.isr),
                eligible_leader_replicas=(),
                last_known_elr=(),
                offline_replicas=tuple(p.offline_replicas),
            )
        )
    return nested(cls, "DescribeTopicPartitionsResponseTopic")(
        error_code=ErrorCode.none,
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=topic.internal,
        partitions=tuple(partitions),
        # No include flag in this API: Kafka always reports them.
        topic_authorized_operations=authorized_operations(
            services, ctx, ResourceType.TOPIC, topic.name
        ),
    )


def _topic_error(topic_cls: type, name: str, topic_id: Any, error: ErrorCode) -> Any:
    return topic_cls(
        error_code=error,
        name=name,
        topic_id=topic_id if topic_id is not None else ZERO_UUID,
        is_internal=False,
        partitions=(),
        topic_authorized_operations=NO_AUTHORIZED_OPERATIONS,
    )
