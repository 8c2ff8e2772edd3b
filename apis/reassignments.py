"""AlterPartitionReassignments and ListPartitionReassignments: moving partitions between
brokers, which the controller carries out. They need ALTER and DESCRIBE on the cluster
(else the top-level CLUSTER_AUTHORIZATION_FAILED, nothing changed)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from kio.schema.errors import ErrorCode

from gregor.apis.acl import MESSAGES, authorize_cluster
from gregor.apis.context import NO_THROTTLE, RequestContext, Services, build, later, nested
from gregor.controller.acls.model import AclOperation
from gregor.controller.base import TopicPartition
from gregor.controller.topics import TopicError
from gregor.wire.schema import response_type
from gregor.wire.versions import ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS


def handle_alter(services: Services, ctx: RequestContext, request: Any) -> Any:
    if not authorize_cluster(services, ctx, AclOperation.ALTER):
        refused = ErrorCode.cluster_authorization_failed
        return build(
            response_type(ALTER_PARTITION_REASSIGNMENTS, ctx.api_version),
            throttle_time=NO_THROTTLE,
            allow_replication_factor_change=getattr(
                request, "allow_replication_factor_change", True
            ),
            error_code=refused,
            error_message=MESSAGES[refused],
            responses=(),
        )
    return later(_alter(services, ctx, request))


async def _alter(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(ALTER_PARTITION_REASSIGNMENTS, ctx.api_version)
    topic_cls = nested(cls, "ReassignableTopicResponse")
    partition_cls = nested(cls, "ReassignablePartitionResponse")
    targets: dict[TopicPartition, list[int] | None] = {
        (t.name, p.partition_index): None if p.replicas is None else list(p.replicas)
        for t in request.topics
        for p in t.partitions
    }
    # v1 (KIP-860): the client may forbid a change of replication factor; v0 allows it.
    allow_rf_change = getattr(request, "allow_replication_factor_change", True)
    outcomes = await services.controller.alter_partition_reassignments(
        targets, allow_replication_factor_change=allow_rf_change
    )
    # Every topic asked about is answered, in order, even one that named no partitions.
    by_topic: dict[str, list[Any]] = {t.name: [] for t in request.topics}
    for (topic, index), error in outcomes.items():
        by_topic[topic].append(
            partition_cls(
                partition_index=index,
                error_code=ErrorCode.none if error is None else error.code,
                error_message=None if error is None else error.message,
            )
        )
    return build(
        cls,
        throttle_time=NO_THROTTLE,
        allow_replication_factor_change=allow_rf_change,  # echoed, as Kafka's controller does
        error_code=ErrorCode.none,
        error_message=None,
        responses=tuple(
            topic_cls(name=topic, partitions=tuple(partitions))
            for topic, partitions in by_topic.items()
        ),
    )


def handle_list(services: Services, ctx: RequestContext, request: Any) -> Any:
    if not authorize_cluster(services, ctx, AclOperation.DESCRIBE):
        refused = ErrorCode.cluster_authorization_failed
        return response_type(LIST_PARTITION_REASSIGNMENTS, ctx.api_version)(
            throttle_time=NO_THROTTLE,
            error_code=refused,
            error_message=MESSAGES[refused],
            topics=(),
        )
    return later(_list(services, ctx, request))


async def _list(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(LIST_PARTITION_REASSIGNMENTS, ctx.api_version)
    topic_cls = nested(cls, "OngoingTopicReassignment")
    partition_cls = nested(cls, "OngoingPartitionReassignment")
    partitions = (
        None
        if request.topics is None
        else [(t.name, p) for t in request.topics for p in t.partition_indexes]
    )
    try:
        ongoing = await services.controller.list_partition_reassignments(partitions)
    except TopicError as e:  # a cluster broker that is not the controller
        return cls(throttle_time=NO_THROTTLE, error_code=e.code, error_message=e.message, topics=())
    by_topic: dict[str, list[Any]] = defaultdict(list)
    for (topic, index), reassignment in ongoing.items():
        by_topic[topic].append(
            partition_cls(
                partition_index=index,
                replicas=tuple(reassignment.replicas),
                adding_replicas=tuple(reassignment.adding_replicas),
                removing_replicas=tuple(reassignment.removing_replicas),
            )
        )
    return cls(
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        topics=tuple(
            topic_cls(name=topic, partitions=tuple(partitions))
            for topic, partitions in by_topic.items()
        ),
    )
