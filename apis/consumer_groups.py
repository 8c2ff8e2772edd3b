"""The consumer group protocol (KIP-848): ConsumerGroupHeartbeat and ConsumerGroupDescribe.

Authorized as Kafka's KafkaApis: ConsumerGroupHeartbeat READ on the group, then DESCRIBE on
every subscribed topic name the request carries (TOPIC_AUTHORIZATION_FAILED if one is
denied, KAFKA-18813); ConsumerGroupDescribe DESCRIBE per group (GROUP_AUTHORIZATION_FAILED),
and a group using a topic the request may not DESCRIBE is answered
TOPIC_AUTHORIZATION_FAILED without its members. With ``consumer`` left out of
``group.coordinator.rebalance.protocols`` both answer UNSUPPORTED_VERSION, as Kafka's do.
"""

from __future__ import annotations

import uuid
from typing import Any

from gregor.apis.acl import authorized_names
from gregor.apis.context import RequestContext, Services, build, nested
from gregor.apis.group_heartbeat_describe import (
    describe_groups,
    described_assignment,
    heartbeat_refusal,
    heartbeat_response,
)
from gregor.apis.groups import client_host, coordinator, millis, then
from gregor.controller.acls.model import AclOperation, ResourceType
from gregor.controller.metadata.config_resource import GROUP, ConfigResource
from gregor.coordinator.consumer_group import ConsumerGroup
from gregor.coordinator.consumer_membership import (
    GroupTiming,
    HeartbeatRequest,
    HeartbeatResult,
    as_assignment,
)
from gregor.wire.schema import response_type
from gregor.wire.versions import CONSUMER_GROUP_DESCRIBE, CONSUMER_GROUP_HEARTBEAT

# ConsumerGroupDescribe v1's MemberType: the member uses the classic or the consumer protocol.
CLASSIC_MEMBER_TYPE = 0
CONSUMER_MEMBER_TYPE = 1


def _enabled(services: Services) -> bool:
    return "consumer" in services.config["group.coordinator.rebalance.protocols"]


def group_timing(services: Services, group_id: str) -> GroupTiming:
    """The group's ``consumer.*`` configs, else the broker's ``group.consumer.*``."""
    overrides = services.metadata.dynamic_configs(ConfigResource(GROUP, group_id))
    settings = coordinator(services).consumer_membership.settings
    return GroupTiming(
        int(overrides.get("consumer.session.timeout.ms", settings.consumer_session_timeout_ms)),
        int(
            overrides.get("consumer.heartbeat.interval.ms", settings.consumer_heartbeat_interval_ms)
        ),
    )


def handle_heartbeat(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(CONSUMER_GROUP_HEARTBEAT, ctx.api_version)
    names = request.subscribed_topic_names
    refused = heartbeat_refusal(services, ctx, _enabled(services), request.group_id, names)
    if refused is not None:
        return heartbeat_response(cls, HeartbeatResult(refused))
    owned = request.topic_partitions
    result = coordinator(services).consumer_membership.heartbeat(
        HeartbeatRequest(
            group_id=request.group_id,
            member_id=request.member_id,
            member_epoch=request.member_epoch,
            instance_id=request.instance_id,
            rack_id=request.rack_id,
            rebalance_timeout_ms=millis(request.rebalance_timeout),
            subscribed_topic_names=None if names is None else tuple(names),
            subscribed_topic_regex=getattr(request, "subscribed_topic_regex", None),
            server_assignor=request.server_assignor,
            owned=None
            if owned is None
            else as_assignment((t.topic_id, t.partitions) for t in owned if t.topic_id),
            client_id=ctx.client_id or "",
            client_host=client_host(ctx),
            api_version=ctx.api_version,
        ),
        group_timing(services, request.group_id),
        services.metadata.topics,
        services.metadata.topics_added,
        None
        if services.authorizer is None
        else lambda names: authorized_names(
            services, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names
        ),
    )
    return then(result, lambda r: heartbeat_response(cls, r))


def handle_describe(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(CONSUMER_GROUP_DESCRIBE, ctx.api_version)
    membership = coordinator(services).consumer_membership
    return describe_groups(
        services,
        ctx,
        request,
        cls,
        enabled=_enabled(services),
        describe=membership.describe,
        topic_ids=_group_topics,
        assignor_name=lambda group: group.preferred_assignor(
            membership.settings.consumer_assignors[0]
        ),
        members=lambda group: _members(services, cls, group),
    )


def _group_topics(group: ConsumerGroup) -> set[uuid.UUID]:
    topics: set[uuid.UUID] = set()
    for member in group.members.values():
        topics.update(member.assignment.assigned)
        topics.update(member.assignment.pending_revocation)
    for target in group.target.values():
        topics.update(target)
    return topics


def _members(services: Services, cls: type, group: ConsumerGroup) -> tuple[Any, ...]:
    return tuple(
        build(
            nested(cls, "Member"),
            member_id=m.member_id,
            instance_id=m.instance_id,
            rack_id=m.rack_id,
            member_epoch=m.member_epoch,
            client_id=m.client_id,
            client_host=m.client_host,
            subscribed_topic_names=m.subscribed_topic_names,
            subscribed_topic_regex=m.subscribed_topic_regex,
            assignment=described_assignment(services, cls, m.assignment.assigned),
            target_assignment=described_assignment(
                services, cls, group.target.get(m.member_id, {})
            ),
            member_type=CONSUMER_MEMBER_TYPE if m.classic is None else CLASSIC_MEMBER_TYPE,
        )
        for m in group.members.values()
    )
