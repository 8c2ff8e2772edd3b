"""Share group membership (KIP-932): ShareGroupHeartbeat and ShareGroupDescribe.

Authorized as Kafka's KafkaApis: ShareGroupHeartbeat READ on the group, then DESCRIBE on
every subscribed topic name the request carries (TOPIC_AUTHORIZATION_FAILED if one is
denied); ShareGroupDescribe DESCRIBE per group (GROUP_AUTHORIZATION_FAILED), and a group
using a topic the request may not DESCRIBE is answered TOPIC_AUTHORIZATION_FAILED without
its members. While ``group.share.enable`` is false both answer UNSUPPORTED_VERSION in their
body, as Kafka 4.1's do without the share protocol enabled.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from gregor.apis.acl import MESSAGES, authorize, authorized_names, authorized_operations
from gregor.apis.context import (
    NO_AUTHORIZED_OPERATIONS,
    NO_THROTTLE,
    RequestContext,
    Services,
    build,
    nested,
)
from gregor.apis.groups import client_host, coordinator, may_read_group, then
from gregor.controller.acls.model import AclOperation, ResourceType
from gregor.controller.metadata.config_resource import GROUP, ConfigResource
from gregor.coordinator.assignors import Assignment
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

    def respond(r: ShareHeartbeatResult) -> Any:
        assignment = None
        if r.assignment is not None:
            topic_cls = nested(cls, "TopicPartitions")
            assignment = nested(cls, "Assignment")(
                topic_partitions=tuple(
                    topic_cls(topic_id=topic, partitions=tuple(sorted(parts)))
                    for topic, parts in sorted(r.assignment.items())
                )
            )
        return build(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=r.error,
            error_message=r.message,
            member_id=r.member_id,
            member_epoch=r.member_epoch,
            heartbeat_interval=timedelta(milliseconds=r.heartbeat_interval_ms),
            assignment=assignment,
        )

    if not share_groups_enabled(services):
        return respond(ShareHeartbeatResult(ErrorCode.unsupported_version))
    if not may_read_group(services, ctx, request.group_id):
        return respond(ShareHeartbeatResult(ErrorCode.group_authorization_failed))
    names = request.subscribed_topic_names
    if names and services.authorizer is not None:
        allowed = authorized_names(services, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
        if len(allowed) < len(set(names)):
            return respond(ShareHeartbeatResult(ErrorCode.topic_authorization_failed))
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
    return then(result, respond)


def handle_describe(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(SHARE_GROUP_DESCRIBE, ctx.api_version)
    group_cls = nested(cls, "DescribedGroup")

    def failed(group_id: str, error: ErrorCode, message: str | None) -> Any:
        return build(
            group_cls,
            error_code=error,
            error_message=message,
            group_id=group_id,
            group_state="",
            group_epoch=0,
            assignment_epoch=0,
            assignor_name="",
            members=(),
            authorized_operations=NO_AUTHORIZED_OPERATIONS,
        )

    described = []
    membership = coordinator(services).share_membership
    for group_id in request.group_ids:
        if not share_groups_enabled(services):
            described.append(failed(group_id, ErrorCode.unsupported_version, None))
            continue
        if not authorize(services, ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            refused = ErrorCode.group_authorization_failed
            described.append(failed(group_id, refused, MESSAGES[refused]))
            continue
        error, message, group = membership.describe(group_id)
        if group is None:
            described.append(failed(group_id, error, message))
            continue
        if not _may_describe_topics(services, ctx, group):
            refused = ErrorCode.topic_authorization_failed
            described.append(
                failed(
                    group_id,
                    refused,
                    "The described group uses topics that the client is not authorized to "
                    "describe.",
                )
            )
            continue
        operations = NO_AUTHORIZED_OPERATIONS
        if request.include_authorized_operations:
            operations = authorized_operations(services, ctx, ResourceType.GROUP, group_id)
        described.append(
            build(
                group_cls,
                error_code=ErrorCode.none,
                error_message=None,
                group_id=group_id,
                group_state=group.state.value,
                group_epoch=group.group_epoch,
                assignment_epoch=group.assignment_epoch,
                assignor_name=ASSIGNOR,
                members=_members(services, cls, group),
                authorized_operations=operations,
            )
        )
    return build(cls, throttle_time=NO_THROTTLE, groups=tuple(described))


def _may_describe_topics(services: Services, ctx: RequestContext, group: ShareGroup) -> bool:
    if services.authorizer is None:
        return True
    names = group.subscribed_topic_names()
    for member in group.members.values():
        for topic_id in member.assigned:
            name = services.metadata.topic_name(topic_id)
            if name is not None:
                names.add(name)
    allowed = authorized_names(services, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
    return len(allowed) == len(names)


def _members(services: Services, cls: type, group: ShareGroup) -> tuple[Any, ...]:
    member_cls = nested(cls, "Member")
    assignment_cls = nested(cls, "Assignment")
    topic_cls = nested(cls, "TopicPartitions")

    def assignment(value: Assignment) -> Any:
        topics = []
        for topic_id, parts in sorted(value.items()):
            name = services.metadata.topic_name(topic_id)
            if name is not None:  # as Kafka: a topic no longer in the metadata is left out
                topics.append(
                    topic_cls(topic_id=topic_id, topic_name=name, partitions=tuple(sorted(parts)))
                )
        return assignment_cls(topic_partitions=tuple(topics))

    return tuple(
        build(
            member_cls,
            member_id=m.member_id,
            rack_id=m.rack_id,
            member_epoch=m.member_epoch,
            client_id=m.client_id,
            client_host=m.client_host,
            subscribed_topic_names=m.subscribed_topic_names,
            assignment=assignment(m.assigned),
        )
        for m in group.members.values()
    )
