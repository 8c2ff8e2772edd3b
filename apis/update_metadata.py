"""UpdateMetadata (cluster mode): the controller's view of live brokers and partition
states, which every broker answers Metadata, FindCoordinator and DescribeCluster from."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from gregor.apis.context import RequestContext, Services
from gregor.apis.inter_broker import cluster_action, cluster_member, stale_epoch
from gregor.controller.metadata.cache import LEADER_DURING_DELETE, apply_update_metadata
from gregor.wire.interbroker import UpdateMetadataResponse

logger = logging.getLogger(__name__)


def handle(
    services: Services, ctx: RequestContext, request: Any
) -> UpdateMetadataResponse | asyncio.Future[UpdateMetadataResponse]:
    started = time.monotonic()
    if not cluster_action(services, ctx):
        return UpdateMetadataResponse(error_code=ErrorCode.cluster_authorization_failed)
    member = cluster_member(services, "UpdateMetadata")
    stale = stale_epoch(services, member, request)
    if stale is not None:
        return UpdateMetadataResponse(error_code=stale)
    new = {s.topic_name for s in request.topic_states} - services.metadata.topics.keys()
    if not new:
        return _apply(services, member, request, {}, ctx.correlation_id, started)
    # UpdateMetadata carries no configs; a new topic becomes visible with its overrides
    # (read from /config/topics, as Kafka's brokers read them for DescribeConfigs), so a
    # client never sees it without them. Requests on this connection wait meanwhile.
    return asyncio.ensure_future(
        _apply_with_configs(services, member, request, sorted(new), ctx.correlation_id, started)
    )


async def _apply_with_configs(
    services: Services,
    member: Any,
    request: Any,
    names: list[str],
    correlation_id: int,
    started: float,
) -> UpdateMetadataResponse:
    configs = await member.topic_configs(names)
    return _apply(services, member, request, configs, correlation_id, started)


def _apply(
    services: Services,
    member: Any,
    request: Any,
    configs: Mapping[str, dict[str, str]],
    correlation_id: int,
    started: float,
) -> UpdateMetadataResponse:
    deleted = apply_update_metadata(services.metadata, request)
    for name, overrides in configs.items():
        topic = services.metadata.topics.get(name)
        if topic is not None:
            topic.configs = overrides
    groups = services.groups
    if groups is not None:
        for name in {t for t, _ in deleted}:
            if name not in services.metadata.topics:
                groups.on_topic_deleted(name)
    member.metadata_updated()
    # Kafka's metadata cache line for each request (a failover's last step shows here).
    logger.info(
        "Added %d and deleted %d partition(s) in the metadata cache for UpdateMetadata "
        "correlation id %d from controller %d epoch %d in %.3f s",
        sum(
            p.leader != LEADER_DURING_DELETE
            for t in request.topic_states
            for p in t.partition_states
        ),
        len(deleted),
        correlation_id,
        request.controller_id,
        request.controller_epoch,
        time.monotonic() - started,
    )
    return UpdateMetadataResponse(error_code=ErrorCode.none)
