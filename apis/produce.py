"""Produce: topic ids resolved to names (v13+, KIP-516), authorization (Kafka's: WRITE on
the transactional id when any partition's first batch is transactional, for the whole
request; WRITE on each topic, per partition), the ReplicaManager's append
(replica/append_records.py: validation, appends, acks=all waits), and the answer: counted
against the produce quota and in the metrics, encoded with its leader hints (v10+), or
none for acks=0 (whose failure closes the connection)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from gregor.apis.acl import authorize, authorized_names
from gregor.apis.context import CloseConnection, RawResponse, RequestContext, Services
from gregor.apis.leader_hints import leader_hint
from gregor.controller.acls.model import AclOperation, ResourceType
from gregor.replica.append_records import PartitionAppend, ProduceRespond, Results
from gregor.wire.leader_hints import NodeEndpoint
from gregor.wire.produce import (
    PartitionResult,
    ProduceRequest,
    encode_produce_response,
    throttle_position,
)

# A record batch's attributes (int16) end at this byte; bit 4 marks a transactional batch.
_ATTRIBUTES_LOW = 22
_TRANSACTIONAL = 0x10
_MAGIC_AT = 16


def handle(services: Services, ctx: RequestContext, request: ProduceRequest) -> Any:
    """Return the response, a future of it, or None for acks=0 (which is never answered)."""
    for topic in request.topics:
        if topic.topic_id is not None:
            topic.name = services.metadata.topic_name(topic.topic_id) or ""
    txn = services.txn

    def respond(results: Results, appends: list[PartitionAppend]) -> RawResponse | None:
        metrics = services.metrics
        if metrics is not None:
            for a in appends:
                if a.appended_records is not None:
                    # The bytes as the client sent them (Kafka's BytesInPerSec).
                    metrics.produced(a.topic, a.records.nbytes, a.appended_records)
        quota = services.quotas.produce
        if quota.enabled:  # the request's bytes count once it is done, as in Kafka
            delay = quota.record(ctx.user, ctx.client_id, ctx.size, services.now_ms())
            ctx.throttle_ms = max(ctx.throttle_ms, delay)
        if request.acks == 0:
            if any(p.error_code for _, partitions in results for p in partitions):
                # The client expects no answer; closing is the only way to tell it.
                raise CloseConnection("a produce request with acks=0 failed")
            return None
        version = ctx.api_version
        endpoints = _leader_hints(services, ctx.listener, results) if version >= 10 else None
        body = encode_produce_response(version, results, node_endpoints=endpoints)
        return RawResponse([body], len(body), throttle_position(version, len(body), endpoints))

    answer: ProduceRespond[RawResponse | None] = respond
    if services.authorizer is not None:
        refused = _refused(services, ctx, request)
        if refused is not None:
            return respond(refused, [])
        answer = _with_refused_topics(services, ctx, request, respond)
    return services.replicas.append_records(
        request, ctx.api_version, None if txn is None else txn.verify, answer
    )


def _refused(services: Services, ctx: RequestContext, request: ProduceRequest) -> Results | None:
    """Kafka's first check: transactional records need WRITE on the request's transactional
    id, else every partition is TRANSACTIONAL_ID_AUTHORIZATION_FAILED."""
    transactional = any(
        p.records is not None
        and len(p.records) > _ATTRIBUTES_LOW
        and p.records[_MAGIC_AT] == 2
        and p.records[_ATTRIBUTES_LOW] & _TRANSACTIONAL
        for t in request.topics
        for p in t.partitions
    )
    txn_id = request.transactional_id
    if not transactional or (
        txn_id is not None
        and authorize(services, ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id)
    ):
        return None
    code = ErrorCode.transactional_id_authorization_failed
    return [(t, [PartitionResult(p.index, code) for p in t.partitions]) for t in request.topics]


def _with_refused_topics(
    services: Services,
    ctx: RequestContext,
    request: ProduceRequest,
    respond: ProduceRespond[RawResponse | None],
) -> ProduceRespond[RawResponse | None]:
    """Take the topics without WRITE out of ``request`` (nothing of theirs is appended) and
    answer their partitions TOPIC_AUTHORIZATION_FAILED, in the request's order. A topic id
    this broker does not know stays in, to be answered UNKNOWN_TOPIC_ID as Kafka does first."""
    topics = request.topics
    allowed = authorized_names(
        services, ctx, AclOperation.WRITE, ResourceType.TOPIC, [t.name for t in topics if t.name]
    )
    if len(allowed) == len(topics):  # each topic named once, all allowed: the usual case
        return respond
    request.topics = [t for t in topics if not t.name or t.name in allowed]
    if len(request.topics) == len(topics):
        return respond
    code = ErrorCode.topic_authorization_failed

    def merged(results: Results, appends: list[PartitionAppend]) -> RawResponse | None:
        answered: dict[int, list[PartitionResult]] = {id(t): ps for t, ps in results}
        return respond(
            [
                (
                    t,
                    answered.get(id(t)) or [PartitionResult(p.index, code) for p in t.partitions],
                )
                for t in topics
            ],
            appends,
        )

    return merged


def _leader_hints(services: Services, listener: str, results: Results) -> list[NodeEndpoint]:
    """KIP-951 (v10+): partitions answered NOT_LEADER_OR_FOLLOWER name their current
    leader, when it is a live broker; returns those leaders' endpoints."""
    leaders: dict[int, NodeEndpoint] = {}
    for topic, partitions in results:
        for result in partitions:
            if result.error_code == ErrorCode.not_leader_or_follower:
                hint = leader_hint(services, listener, topic.name, result.index)
                if hint is not None:
                    leader, endpoint = hint
                    result.current_leader = leader
                    leaders[leader[0]] = endpoint
    return list(leaders.values())
