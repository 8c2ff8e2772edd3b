"""StopReplica (cluster mode): the controller tells this broker to stop replicating
partitions, deleting their logs when their topic is deleted or they moved away."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from gregor.apis.context import RequestContext, Services
from gregor.apis.inter_broker import cluster_action, cluster_member, stale_epoch
from gregor.coordinator.records import OFFSETS_TOPIC
from gregor.coordinator.share_state_records import SHARE_GROUP_STATE_TOPIC
from gregor.coordinator.txn_records import TRANSACTION_STATE_TOPIC
from gregor.replica.state import StopReplicaState
from gregor.wire.interbroker import StopReplicaPartitionError, StopReplicaResponse


def handle(services: Services, ctx: RequestContext, request: Any) -> StopReplicaResponse:
    if not cluster_action(services, ctx):
        return _response(
            request,
            lambda _tp: ErrorCode.cluster_authorization_failed,
            ErrorCode.cluster_authorization_failed,
        )
    member = cluster_member(services, "StopReplica")
    stale = stale_epoch(services, member, request)
    if stale is not None:
        return _response(request, lambda _tp: stale, stale)
    states = [
        StopReplicaState(t.topic_name, p.partition_index, p.leader_epoch, p.delete_partition)
        for t in request.topic_states
        for p in t.partition_states
    ]
    groups = services.groups
    if groups is not None:
        for s in states:
            if s.topic == OFFSETS_TOPIC:
                groups.on_resign(s.partition)
    transactions = services.transactions
    if transactions is not None:
        for s in states:
            if s.topic == TRANSACTION_STATE_TOPIC:
                transactions.on_resign(s.partition)
    shares = services.share_coordinator
    if shares is not None:
        for s in states:
            if s.topic == SHARE_GROUP_STATE_TOPIC:
                shares.on_resign(s.partition)
    errors = services.replicas.stop_replicas(request.controller_epoch, states)
    metrics = services.metrics
    if metrics is not None:
        # As Kafka: a topic's series go once no partition of it is left here.
        hosted = {p.topic for p in services.replicas}
        for topic in {s.topic for s in states if s.delete} - hosted:
            metrics.forget_topic(topic)
    return _response(request, lambda tp: errors.get(tp, ErrorCode.none), ErrorCode.none)


def _response(request: Any, error_of: Any, top: ErrorCode) -> StopReplicaResponse:
    return StopReplicaResponse(
        error_code=top,
        partition_errors=tuple(
            StopReplicaPartitionError(
                topic_name=t.topic_name,
                partition_index=p.partition_index,
                error_code=error_of((t.topic_name, p.partition_index)),
            )
            for t in request.topic_states
            for p in t.partition_states
        ),
    )
