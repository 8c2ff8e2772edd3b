"""OffsetCommit, OffsetFetch (single- and multi-group versions) and OffsetDelete.

Authorized as Kafka's handlers: OffsetCommit READ on the group (else every partition
GROUP_AUTHORIZATION_FAILED) and READ on each topic (TOPIC_AUTHORIZATION_FAILED per
partition); OffsetFetch DESCRIBE on each group (GROUP_AUTHORIZATION_FAILED) and DESCRIBE on
each topic: a named one is TOPIC_AUTHORIZATION_FAILED, one of "all offsets" left out;
OffsetDelete DELETE on the group and READ on each topic."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from kio.schema.errors import ErrorCode

from gregor.apis.acl import authorize, authorized_names
from gregor.apis.context import NO_THROTTLE, RawResponse, RequestContext, Services, build, nested
from gregor.apis.groups import coordinator, may_read_group, then
from gregor.controller.acls.model import AclOperation, ResourceType
from gregor.coordinator.group import TopicPartition
from gregor.coordinator.offsets import CommitRequest
from gregor.coordinator.records import OffsetValue
from gregor.wire.offset_commit import OffsetCommitRequest, encode_offset_commit_response
from gregor.wire.schema import response_type
from gregor.wire.versions import OFFSET_DELETE, OFFSET_FETCH


def _known(services: Services, topic: str, partition: int) -> bool:
    return services.metadata.partition(topic, partition) is not None


def handle_commit(services: Services, ctx: RequestContext, request: OffsetCommitRequest) -> Any:
    """Decoded by ``gregor.wire.offset_commit`` and answered as raw bytes: the synchronous-commit
    hot path."""
    unknown: dict[TopicPartition, ErrorCode] = {}
    wanted: list[CommitRequest] = []
    refused: frozenset[str] | set[str] = frozenset()
    if services.authorizer is not None:
        if not may_read_group(services, ctx, request.group_id):
            return _refused_commit(ctx, request)
        names = [t.name for t in request.topics]
        refused = set(names) - authorized_names(
            services, ctx, AclOperation.READ, ResourceType.TOPIC, names
        )
    for topic in request.topics:
        name = topic.name
        if name in refused:
            for p in topic.partitions:
                unknown[(name, p[0])] = ErrorCode.topic_authorization_failed
            continue
        known = services.metadata.partition_indexes(name)
        for p in topic.partitions:
            if p[0] in known:
                wanted.append((name, *p))
            else:
                unknown[(name, p[0])] = ErrorCode.unknown_topic_or_partition
    version = ctx.api_version
    result: dict[TopicPartition, ErrorCode] | Any
    if refused and not wanted:
        result = {}  # as Kafka: nothing authorized, the coordinator is not asked
    else:
        result = coordinator(services).offsets.commit_offsets(
            request.group_id,
            request.generation_id_or_member_epoch,
            request.member_id,
            request.group_instance_id,
            wanted,
            request.retention_time_ms,
            api_version=version,
        )

    def respond(errors: dict[TopicPartition, ErrorCode]) -> RawResponse:
        if unknown:
            errors = {**errors, **unknown}
        topics: list[tuple[str, list[tuple[int, int]]]] = [
            (
                t.name,
                [(p[0], errors[(t.name, p[0])]) for p in t.partitions],
            )
            for t in request.topics
        ]
        body = encode_offset_commit_response(version, topics)
        return RawResponse([body], len(body))

    return then(result, respond)


def _refused_commit(ctx: RequestContext, request: OffsetCommitRequest) -> RawResponse:
    code: int = ErrorCode.group_authorization_failed
    topics = [(t.name, [(p[0], code) for p in t.partitions]) for t in request.topics]
    body = encode_offset_commit_response(ctx.api_version, topics)
    return RawResponse([body], len(body))


def _fetch_group(
    services: Services,
    ctx: RequestContext,
    group_id: str,
    topics: Any,
    partition_cls: type,
    topic_cls: type,
    require_stable: bool,
    member: tuple[str | None, int] = (None, -1),
) -> tuple[ErrorCode, tuple[Any, ...]]:
    """``member``: v9+'s member id and epoch, which a consumer-protocol group checks."""
    if not authorize(services, ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        refused = ErrorCode.group_authorization_failed
        return refused, tuple(
            topic_cls(
                name=t.name,
                partitions=tuple(
                    _partition_entry(partition_cls, p, None, refused) for p in t.partition_indexes
                ),
            )
            for t in topics or ()
        )
    described: set[str] | None = None  # None: every topic
    hidden: list[Any] = []  # the named topics without DESCRIBE
    if services.authorizer is not None and topics is not None:
        described = authorized_names(
            services, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, (t.name for t in topics)
        )
        hidden = [t for t in topics if t.name not in described]
        topics = [t for t in topics if t.name in described]
    wanted = None if topics is None else [(t.name, p) for t in topics for p in t.partition_indexes]
    offsets_api = coordinator(services).offsets
    error, offsets = offsets_api.fetch_offsets(group_id, wanted, *member)
    if services.authorizer is not None and topics is None:
        described = authorized_names(
            services, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, (t for t, _ in offsets)
        )
    if error != ErrorCode.none:
        # Per-partition errors as well, for the clients that only look there.
        offsets = dict.fromkeys(wanted or [])
    # KIP-447: a partition whose offsets a transaction still holds is not stable yet.
    unstable = offsets_api.unstable_offsets(group_id) if require_stable and not error else set()
    by_topic: dict[str, list[Any]] = defaultdict(list)
    for (topic, partition), value in offsets.items():
        if described is not None and topic not in described:
            continue  # all offsets asked for: those of topics without DESCRIBE left out
        if (topic, partition) in unstable:
            entry = _partition_entry(
                partition_cls, partition, None, ErrorCode.unstable_offset_commit
            )
        else:
            entry = _partition_entry(partition_cls, partition, value, error)
        by_topic[topic].append(entry)
    if described is not None and wanted is not None and not error:
        code = ErrorCode.topic_authorization_failed
        for t in hidden:
            by_topic[t.name] = [
                _partition_entry(partition_cls, p, None, code) for p in t.partition_indexes
            ]
    return error, tuple(topic_cls(name=t, partitions=tuple(ps)) for t, ps in by_topic.items())


def _partition_entry(cls: type, partition: int, value: OffsetValue | None, error: ErrorCode) -> Any:
    if value is None:
        return build(
            cls,
            partition_index=partition,
            committed_offset=-1,
            committed_leader_epoch=-1,
            metadata="",
            error_code=error,
        )
    return build(
        cls,
        partition_index=partition,
        committed_offset=value.offset,
        committed_leader_epoch=value.leader_epoch,
        metadata=value.metadata,
        error_code=error,
    )


def handle_fetch(services: Services, ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    cls = response_type(OFFSET_FETCH, version)
    if version < 8:
        error, topics = _fetch_group(
            services,
            ctx,
            request.group_id,
            request.topics,
            nested(cls, "OffsetFetchResponsePartition"),
            nested(cls, "OffsetFetchResponseTopic"),
            version >= 7 and request.require_stable,
        )
        return build(cls, throttle_time=NO_THROTTLE, topics=topics, error_code=error)
    group_cls = nested(cls, "OffsetFetchResponseGroup")
    groups = []
    for group in request.groups:
        error, topics = _fetch_group(
            services,
            ctx,
            group.group_id,
            group.topics,
            nested(cls, "OffsetFetchResponsePartitions"),
            nested(cls, "OffsetFetchResponseTopics"),
            request.require_stable,
            (getattr(group, "member_id", None), getattr(group, "member_epoch", -1)),
        )
        groups.append(group_cls(group_id=group.group_id, topics=topics, error_code=error))
    return build(cls, throttle_time=NO_THROTTLE, groups=tuple(groups))


def handle_delete(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(OFFSET_DELETE, ctx.api_version)
    topic_cls = nested(cls, "OffsetDeleteResponseTopic")
    partition_cls = nested(cls, "OffsetDeleteResponsePartition")
    if not authorize(services, ctx, AclOperation.DELETE, ResourceType.GROUP, request.group_id):
        return build(
            cls,
            error_code=ErrorCode.group_authorization_failed,
            throttle_time=NO_THROTTLE,
            topics=(),
        )
    order = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    readable = authorized_names(
        services, ctx, AclOperation.READ, ResourceType.TOPIC, (t for t, _ in order)
    )
    unknown = {
        tp: ErrorCode.topic_authorization_failed
        if tp[0] not in readable
        else ErrorCode.unknown_topic_or_partition
        for tp in order
        if tp[0] not in readable or not _known(services, *tp)
    }
    result = coordinator(services).offsets.delete_offsets(
        request.group_id, [tp for tp in order if tp not in unknown]
    )

    def respond(outcome: tuple[ErrorCode, dict[TopicPartition, ErrorCode]]) -> Any:
        error, errors = outcome
        if error != ErrorCode.none:
            return build(cls, error_code=error, throttle_time=NO_THROTTLE, topics=())
        errors = {**errors, **unknown}
        by_topic: dict[str, list[Any]] = defaultdict(list)
        for t, p in order:
            by_topic[t].append(partition_cls(partition_index=p, error_code=errors[(t, p)]))
        return build(
            cls,
            error_code=ErrorCode.none,
            throttle_time=NO_THROTTLE,
            topics=tuple(topic_cls(name=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
        )

    return then(result, respond)
