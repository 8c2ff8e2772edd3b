"""Produce: topic ids resolved to names (v13+, KIP-516), the ReplicaManager's append
(replica/append_records.py: validation, appends, acks=all waits), and the answer: counted
against the produce quota and in the metrics, encoded with its leader hints (v10+), or
none for acks=0 (whose failure closes the connection)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from gregor.apis.context import CloseConnection, RawResponse, RequestContext, Services
from gregor.apis.leader_hints import leader_hint
from gregor.replica.append_records import PartitionAppend, Results
from gregor.wire.leader_hints import NodeEndpoint
from gregor.wire.produce import ProduceRequest, encode_produce_response, throttle_position


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

    return services.replicas.append_records(
        request, ctx.api_version, None if txn is None else txn.verify, respond
    )


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
