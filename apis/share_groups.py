"""Share group membership (KIP-932): ShareGroupHeartbeat and ShareGroupDescribe.

Authorized as Kafka's KafkaApis: ShareGroupHeartbeat READ on the group, then DESCRIBE on
every subscribed topic name the request carries (TOPIC_AUTHORIZATION_FAILED if one is
denied); ShareGroupDescribe DESCRIBE per group (GROUP_AUTHORIZATION_FAILED), and a group
using a topic the request may not DESCRIBE is answered TOPIC_AUTHORIZATION_FAILED without
its members. While ``group.share.enable`` is false both answer UNSUPPORTED_VERSION in their
body, as Kafka 4.1's do without the share protocol enabled.
"""

from __future__ import annotations

from typing import Any

from gregor.apis.context import RequestContext, Services, build, nested
from gregor.apis.group_heartbeat_describe import (
    describe_groups,
    described_assignment,
    heartbeat_refusal,
    heartbeat_response,
)
from gregor.apis.groups import client_host, coordinator, then
from gregor.controller.metadata.config_resource import GROUP, ConfigResource
from gregor.coordinator.consumer_membership import GroupTiming
from gregor.coordinator.share_assignor import ASSIGNOR
from gregor.coordinator.share_group import ShareGroup
from gregor.coordinator.share_membership import ShareHeartbeatRequest, ShareHeartbeatResult
from gregor.wire.schema import response_type
from gregor.wire.versions import SHARE_GROUP_DESCRIBE, SHARE_GROUP_HEARTBEAT


def share_groups_enabled(services: Services) -> bool:
    """Kafka's isShareGroupProtocolEnabled: the broker key ``group.share.enable``."""
    return bool(services.config["group.share.enable"])


def group_timing(services: Services, group_id: str) -> GroupTiming:
    """The group's ``share.*`` configs, else the broker's ``group.share.*``."""
    overrides = services.metadata.dynamic_configs(ConfigResource(GROUP, group_id))
    settings = coordinator(services).share_membership.settings
    return GroupTiming(
        int(overrides.get("share.session.timeout.ms", settings.share_session_timeout_ms)),
        int(overrides.get("share.heartbeat.interval.ms", settings.share_heartbeat_interval_ms)),
    )


def handle_heartbeat(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(SHARE_GROUP_HEARTBEAT, ctx.api_version)
    names = request.subscribed_topic_names
    refused = heartbeat_refusal(
        services, ctx, share_groups_enabled(services), request.group_id, names
    )
    if refused is not None:
        return heartbeat_response(cls, ShareHeartbeatResult(refused))
    result = coordinator(services).share_membership.heartbeat(
        ShareHeartbeatRequest(
            group_id=request.group_id,
            member_id=request.member_id,
            member_epoch=request.member_epoch,
            rack_id=request.rack_id,
            subscribed_topic_names=None if names is None else tuple(names),
            client_id=ctx.client_id or "",
            client_host=client_host(ctx),
        ),
        group_timing(services, request.group_id),
        services.metadata.topics,
    )
    return then(result, lambda r: heartbeat_response(cls, r))


def handle_describe(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(SHARE_GROUP_DESCRIBE, ctx.api_version)
    return describe_groups(
        services,
        ctx,
        request,
        cls,
        enabled=share_groups_enabled(services),
        describe=coordinator(services).share_membership.describe,
        topic_ids=lambda group: (t for m in group.members.values() for t in m.assigned),
        assignor_name=lambda _group: ASSIGNOR,
        members=lambda group: _members(services, cls, group),
    )


def _members(services: Services, cls: type, group: ShareGroup) -> tuple[Any, ...]:
    return tuple(
        build(
            nested(cls, "Member"),
            member_id=m.member_id,
            rack_id=m.rack_id,
            member_epoch=m.member_epoch,
            client_id=m.client_id,
            client_host=m.client_host,
            subscribed_topic_names=m.subscribed_topic_names,
            assignment=described_assignment(services, cls, m.assigned),
        )
        for m in group.members.values()
    )
