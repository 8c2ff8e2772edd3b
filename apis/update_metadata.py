"""UpdateMetadata (cluster mode): the controller's view of live brokers and partition
states, which every broker answers Metadata, FindCoordinator and DescribeCluster from."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from apis.context import RequestContext, Services
from apis.inter_broker import cluster_member, stale_epoch
from controller.metadata import apply_update_metadata
from wire.interbroker import UpdateMetadataResponse


def handle(services: Services, ctx: RequestContext, request: Any) -> UpdateMetadataResponse:
    member = cluster_member(services, "UpdateMetadata")
    stale = stale_epoch(services, member, request)
    if stale is not None:
        return UpdateMetadataResponse(error_code=stale)
    known = set(services.metadata.topics)
    deleted = apply_update_metadata(services.metadata, request)
    groups = services.groups
    if groups is not None:
        for topic in {t for t, _ in deleted}:
            if topic not in services.metadata.topics:
                groups.on_topic_deleted(topic)
    member.metadata_updated(set(services.metadata.topics) - known)
    return UpdateMetadataResponse(error_code=ErrorCode.none)
