"""LeaderAndIsr (cluster mode): the controller tells this broker which partitions it leads
and which it follows, and from which leader."""

from __future__ import annotations

import logging
import time
from typing import Any

from kio.schema.errors import ErrorCode

from gregor.apis.context import RequestContext, Services, later
from gregor.apis.inter_broker import cluster_action, cluster_member, stale_epoch
from gregor.coordinator.records import OFFSETS_TOPIC
from gregor.coordinator.share_state_records import SHARE_GROUP_STATE_TOPIC
from gregor.coordinator.txn_records import TRANSACTION_STATE_TOPIC
from gregor.replica.state import LeaderAndIsrState
from gregor.wire.interbroker import (
    LeaderAndIsrPartitionError,
    LeaderAndIsrResponse,
    LeaderAndIsrTopicError,
)

logger = logging.getLogger(__name__)

_NONE: dict[str, str] = {}  # a topic's overrides when it has none here (shared, not changed)


def handle(services: Services, ctx: RequestContext, request: Any) -> Any:
    if not cluster_action(services, ctx):
        return _response(
            request,
            lambda _tp: ErrorCode.cluster_authorization_failed,
            ErrorCode.cluster_authorization_failed,
        )
    member = cluster_member(services, "LeaderAndIsr")
    return later(_apply(services, member, request, ctx.correlation_id))


async def _apply(
    services: Services, member: Any, request: Any, correlation_id: int
) -> LeaderAndIsrResponse:
    started = time.monotonic()
    stale = stale_epoch(services, member, request)
    if stale is not None:
        return _response(request, lambda _tp: stale, stale)
    # A partition new to this broker gets its log created with its topic's overrides.
    new_topics = {
        t.topic_name
        for t in request.topic_states
        for p in t.partition_states
        if services.replicas.get(t.topic_name, p.partition_index) is None
    }
    configs = await member.topic_configs(sorted(new_topics)) if new_topics else {}
    states = [
        LeaderAndIsrState(
            t.topic_name,
            t.topic_id,
            p.partition_index,
            p.leader,
            p.leader_epoch,
            p.isr,
            p.partition_epoch,
            p.replicas,
            p.is_new,
            topic_configs,
        )
        for t in request.topic_states
        for topic_configs in (configs.get(t.topic_name, _NONE),)
        for p in t.partition_states
    ]
    await services.replicas.create_logs(states)  # a slice at a time: others are served
    errors = await services.replicas.apply_leader_and_isr(request.controller_epoch, states)
    groups = services.groups
    if groups is not None:
        # The group coordinator follows the leadership of __consumer_offsets' partitions.
        for s in states:
            if s.topic == OFFSETS_TOPIC and errors.get((s.topic, s.partition)) == ErrorCode.none:
                if s.leader == member.broker_id:
                    groups.on_become_leader(s.partition)
                else:
                    groups.on_resign(s.partition)
    transactions = services.transactions
    if transactions is not None:
        # The transaction coordinator follows __transaction_state's, the leader epoch
        # being its coordinator epoch.
        for s in states:
            if (
                s.topic == TRANSACTION_STATE_TOPIC
                and errors.get((s.topic, s.partition)) == ErrorCode.none
            ):
                if s.leader == member.broker_id:
                    transactions.on_become_leader(s.partition, s.leader_epoch)
                else:
                    transactions.on_resign(s.partition)
    shares = services.share_coordinator
    if shares is not None:
        # The share coordinator follows __share_group_state's.
        for s in states:
            if (
                s.topic == SHARE_GROUP_STATE_TOPIC
                and errors.get((s.topic, s.partition)) == ErrorCode.none
            ):
                if s.leader == member.broker_id:
                    shares.on_become_leader(s.partition)
                else:
                    shares.on_resign(s.partition)
    # Kafka's state-change log line for each request (a failover's cost shows here).
    logger.info(
        "Finished LeaderAndIsr correlation id %d from controller %d epoch %d for %d "
        "partition(s) (%d refused, %d of them for a leader epoch not newer) in %.3f s",
        correlation_id,
        request.controller_id,
        request.controller_epoch,
        len(states),
        sum(e != ErrorCode.none for e in errors.values()),
        sum(e == ErrorCode.stale_controller_epoch for e in errors.values()),
        time.monotonic() - started,
    )
    return _response(request, lambda tp: errors.get(tp, ErrorCode.none), ErrorCode.none)


def _response(request: Any, error_of: Any, top: ErrorCode) -> LeaderAndIsrResponse:
    return LeaderAndIsrResponse(
        error_code=top,
        topics=tuple(
            LeaderAndIsrTopicError(
                topic_id=t.topic_id,
                partition_errors=tuple(
                    LeaderAndIsrPartitionError(
                        partition_index=p.partition_index,
                        error_code=error_of((t.topic_name, p.partition_index)),
                    )
                    for p in t.partition_states
                ),
            )
            for t in request.topic_states
        ),
    )
