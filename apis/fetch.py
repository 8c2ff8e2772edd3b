"""Fetch: topic ids resolved to names (v13+, KIP-516), authorization (Kafka's: a follower
needs CLUSTER_ACTION, else every partition is TOPIC_AUTHORIZATION_FAILED; a consumer READ
on each topic, per partition), the ReplicaManager's fetch (replica/fetch_messages.py:
reading, sessions, long polls), and the answer encoded with its leader hints (v16+),
charged to a consumer's quota and counted in the metrics."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from gregor.apis.acl import authorize, authorize_cluster
from gregor.apis.context import RawResponse, RequestContext, Services
from gregor.apis.leader_hints import LEADER_ERRORS, leader_hint
from gregor.controller.acls.model import AclOperation, ResourceType
from gregor.wire.fetch import (
    FetchPartition,
    FetchRequest,
    FetchTopic,
    FetchTopicRequest,
    encode_fetch_response,
)
from gregor.wire.leader_hints import NodeEndpoint

if TYPE_CHECKING:
    from gregor.server.metrics import BrokerMetrics


def handle(
    services: Services, ctx: RequestContext, request: FetchRequest
) -> RawResponse | asyncio.Future[RawResponse]:
    version = ctx.api_version
    if version >= 13:
        _resolve(services, request)
    max_bytes = min(request.max_bytes, services.config["fetch.max.bytes"])
    # consumer_byte_rate: a consumer fetches at most what its quota allows in one window span.
    quota = services.quotas.fetch
    charged = quota.enabled and request.replica_id < 0
    if charged:
        max_bytes = int(min(max_bytes, quota.max_value_in_window(ctx.user, ctx.client_id)))
    metrics = services.metrics if request.replica_id < 0 else None

    def respond(topics: list[FetchTopic], error: ErrorCode, session_id: int) -> RawResponse:
        if error != ErrorCode.none:
            return _answer(ctx, [], error)
        endpoints = _leader_hints(services, ctx, topics) if version >= 16 else None
        response = _answer(ctx, topics, session_id=session_id, endpoints=endpoints)
        if charged:
            answered = _charge(services, ctx, response, session_id)
            if answered is not response:  # throttled: emptied
                return answered
        if metrics is not None:
            _count_out(metrics, topics)
        return response

    readable = None
    if services.authorizer is not None:
        if request.replica_id >= 0:
            if not authorize_cluster(services, ctx, AclOperation.CLUSTER_ACTION):
                return _answer(ctx, _refused(request.topics))
        else:

            def readable(topic: str) -> bool:
                return authorize(services, ctx, AclOperation.READ, ResourceType.TOPIC, topic)

    return services.replicas.fetch_messages(
        request,
        version,
        max_bytes,
        lambda: f"{ctx.client_id!r} at {ctx.peer}",
        respond,
        readable,
    )


def _refused(topics: list[FetchTopicRequest]) -> list[FetchTopic]:
    """A fetch from a replica without CLUSTER_ACTION: every partition it names refused,
    without a session opened or continued."""
    code = ErrorCode.topic_authorization_failed
    return [
        FetchTopic(
            t.topic,
            [FetchPartition(p.partition, code, records=b"") for p in t.partitions],
            t.topic_id,
        )
        for t in topics
    ]


def _answer(
    ctx: RequestContext,
    topics: list[FetchTopic],
    error: ErrorCode = ErrorCode.none,
    session_id: int = 0,
    endpoints: list[NodeEndpoint] | None = None,
) -> RawResponse:
    parts, size = encode_fetch_response(
        ctx.api_version,
        topics,
        error_code=error,
        session_id=session_id,
        node_endpoints=endpoints,
    )
    return RawResponse(parts, size, 0)  # the throttle time starts the body


def _count_out(metrics: BrokerMetrics, topics: list[FetchTopic]) -> None:
    """A consumer's answer's record bytes, per topic (Kafka's BytesOutPerSec)."""
    for topic in topics:
        size = 0
        for p in topic.partitions:
            records = p.records
            if isinstance(records, bytes):
                size += len(records)
            elif records is not None:
                size += records.size
        if size:
            metrics.fetched(topic.name, size)


def _charge(
    services: Services, ctx: RequestContext, response: RawResponse, session_id: int
) -> RawResponse:
    """Count a consumer's response against its consumer_byte_rate. Over the quota, the
    answer is empty (its bytes are taken back, the client fetches them again after its
    throttle time), in its fetch session, as in Kafka."""
    quota = services.quotas.fetch
    now_ms = services.now_ms()
    delay = quota.record(ctx.user, ctx.client_id, response.size, now_ms)
    if not delay:
        return response
    quota.unrecord(ctx.user, ctx.client_id, response.size, now_ms)
    ctx.throttle_ms = max(ctx.throttle_ms, delay)
    return _answer(ctx, [], session_id=session_id)


def _leader_hints(
    services: Services, ctx: RequestContext, topics: list[FetchTopic]
) -> list[NodeEndpoint]:
    """KIP-951 (v16+): partitions answered NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH
    name their current leader, when it is a live broker; returns those leaders' endpoints."""
    leaders: dict[int, NodeEndpoint] = {}
    for topic in topics:
        for p in topic.partitions:
            if p.error_code in LEADER_ERRORS:
                hint = leader_hint(services, ctx.listener, topic.name, p.index)
                if hint is not None:
                    leader, endpoint = hint
                    p.current_leader = leader
                    leaders[leader[0]] = endpoint
    return list(leaders.values())


def _resolve(services: Services, request: FetchRequest) -> None:
    """Fetch v13+ names topics by id (KIP-516): find their names. A topic whose id this
    broker does not know keeps an empty name (its partitions answer UNKNOWN_TOPIC_ID)."""
    names = services.metadata.topic_name
    for topic in request.topics:
        # the decoder's plain str for TopicName (wire/fetch.py skips kio's phantom checks)
        topic.topic = names(topic.topic_id) or ""  # type: ignore[arg-type]
    for topic_id, indexes in request.forgotten_ids:
        name = names(topic_id)
        if name is not None:
            request.forgotten.append((name, indexes))
