"""ListOffsets: earliest, latest, max-timestamp and by-timestamp lookups, none past what the
request's isolation level may fetch (read_committed: the last stable offset).

Without tiered storage the local log is the whole log: earliest-local (-4, v8+) is the
log start offset, and latest-tiered (-5, v9+, KIP-1005) is no offset (-1), as Kafka answers
for a topic without remote storage. v10's timeout only bounds remote reads (KIP-1075). A
topic without DESCRIBE is TOPIC_AUTHORIZATION_FAILED in each of its partitions.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from gregor.apis.acl import authorized_names
from gregor.apis.context import NO_THROTTLE, RequestContext, Services, build, nested
from gregor.controller.acls.model import AclOperation, ResourceType
from gregor.replica.errors import STORAGE_ERRORS, error_code
from gregor.wire.schema import response_type
from gregor.wire.versions import LIST_OFFSETS

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5


def handle(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(LIST_OFFSETS, ctx.api_version)
    topic_cls = nested(cls, "ListOffsetsTopicResponse")
    partition_cls = nested(cls, "ListOffsetsPartitionResponse")
    read_committed = getattr(request, "isolation_level", 0) == 1
    allowed = authorized_names(
        services, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, (t.name for t in request.topics)
    )
    refused = {
        "error_code": ErrorCode.topic_authorization_failed,
        "timestamp": -1,
        "offset": -1,
        "leader_epoch": -1,
    }
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            if topic.name not in allowed:
                partitions.append(
                    build(partition_cls, partition_index=p.partition_index, **refused)
                )
                continue
            fields = _lookup(
                services,
                topic.name,
                p.partition_index,
                p.timestamp,
                getattr(p, "current_leader_epoch", -1),
                read_committed,
            )
            partitions.append(build(partition_cls, partition_index=p.partition_index, **fields))
        topics.append(topic_cls(name=topic.name, partitions=tuple(partitions)))
    return build(cls, throttle_time=NO_THROTTLE, topics=tuple(topics))


def _lookup(
    services: Services,
    topic: str,
    index: int,
    timestamp: int,
    leader_epoch: int,
    read_committed: bool,
) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "error_code": ErrorCode.none,
        "timestamp": -1,
        "offset": -1,
        "leader_epoch": -1,
    }
    partition = services.replicas.get(topic, index)
    if partition is None:
        fields["error_code"] = services.replicas.not_hosted(topic, index)
        return fields
    if not partition.is_leader:
        fields["error_code"] = ErrorCode.not_leader_or_follower
        return fields
    if leader_epoch > partition.leader_epoch:
        fields["error_code"] = ErrorCode.unknown_leader_epoch
        return fields
    if 0 <= leader_epoch < partition.leader_epoch:
        fields["error_code"] = ErrorCode.fenced_leader_epoch
        return fields
    log = partition.log
    fields["leader_epoch"] = partition.leader_epoch
    # What a consumer of this isolation level may fetch (Kafka's lastFetchableOffset).
    fetchable = partition.last_stable_offset() if read_committed else partition.high_watermark
    try:
        if timestamp == LATEST:
            fields["offset"] = fetchable
        elif timestamp in (EARLIEST, EARLIEST_LOCAL):
            fields["offset"] = log.log_start_offset
        elif timestamp == MAX_TIMESTAMP:
            found_ts, found_offset = log.max_timestamp()
            if 0 <= found_offset < fetchable:
                fields["timestamp"], fields["offset"] = found_ts, found_offset
        elif timestamp == LATEST_TIERED:
            fields["leader_epoch"] = -1
        elif timestamp >= 0:
            found = log.offset_for_timestamp(timestamp)
            if found is not None and found[0] < fetchable:
                fields["offset"], fields["timestamp"] = found
        else:
            fields["error_code"] = ErrorCode.invalid_request
    except STORAGE_ERRORS as e:
        fields["error_code"] = error_code(e)
    return fields
