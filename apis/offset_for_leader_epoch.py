"""OffsetForLeaderEpoch: the end offset of a leader epoch in the leader's log (KIP-101).

Followers use it to find where their log diverged from the leader's; the Java consumer
to validate its position after a leader change (KIP-320). Answered by the leader only,
from its leader epoch cache: for an epoch it does not know, the largest below it and that
one's end; for one above all it knows, -1 / -1 (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET).
Authorized as Kafka does: CLUSTER_ACTION (a follower) allows every topic, else DESCRIBE on
each (KIP-320's consumers); a refused topic's partitions are TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from gregor.apis.acl import authorize_cluster, authorized_names
from gregor.apis.context import NO_THROTTLE, RequestContext, Services, build, nested
from gregor.controller.acls.model import AclOperation, ResourceType
from gregor.log.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
from gregor.replica.partition import check_leader
from gregor.wire.schema import response_type
from gregor.wire.versions import OFFSET_FOR_LEADER_EPOCH


def handle(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(OFFSET_FOR_LEADER_EPOCH, ctx.api_version)
    epoch_end = nested(cls, "EpochEndOffset")
    topic_result = nested(cls, "OffsetForLeaderTopicResult")
    allowed = None
    if services.authorizer is not None and not authorize_cluster(
        services, ctx, AclOperation.CLUSTER_ACTION
    ):
        allowed = authorized_names(
            services,
            ctx,
            AclOperation.DESCRIBE,
            ResourceType.TOPIC,
            (t.topic for t in request.topics),
        )
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            if allowed is not None and topic.topic not in allowed:
                error, epoch, end = (
                    ErrorCode.topic_authorization_failed,
                    UNDEFINED_EPOCH,
                    UNDEFINED_EPOCH_OFFSET,
                )
            else:
                error, epoch, end = _end_offset(services, topic.topic, p)
            partitions.append(
                build(
                    epoch_end,
                    error_code=error,
                    partition=p.partition,
                    leader_epoch=epoch,
                    end_offset=end,
                )
            )
        topics.append(topic_result(topic=topic.topic, partitions=tuple(partitions)))
    return build(cls, throttle_time=NO_THROTTLE, topics=tuple(topics))


def _end_offset(services: Services, topic: str, p: Any) -> tuple[ErrorCode, int, int]:
    partition = services.replicas.get(topic, p.partition)
    if partition is None:
        return (
            services.replicas.not_hosted(topic, p.partition),
            UNDEFINED_EPOCH,
            UNDEFINED_EPOCH_OFFSET,
        )
    error = check_leader(partition, p.current_leader_epoch)
    if error != ErrorCode.none:
        return error, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
    epoch, end = partition.log.end_offset_for_epoch(p.leader_epoch)
    if end == UNDEFINED_EPOCH_OFFSET:
        return ErrorCode.none, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
    return ErrorCode.none, epoch, end
