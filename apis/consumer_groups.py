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
from gregor.apis.groups import client_host, coordinator, may_read_group, millis, then
from gregor.controller.acls.model import AclOperation, ResourceType
from gregor.controller.metadata.config_resource import GROUP, ConfigResource
from gregor.coordinator.assignors import Assignment
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

    def respond(r: HeartbeatResult) -> Any:
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

    if not _enabled(services):
        return respond(HeartbeatResult(ErrorCode.unsupported_version))
    if not may_read_group(services, ctx, request.group_id):
        return respond(HeartbeatResult(ErrorCode.group_authorization_failed))
    names = request.subscribed_topic_names
    if names and services.authorizer is not None:
        allowed = authorized_names(services, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
        if len(allowed) < len(set(names)):
            return respond(HeartbeatResult(ErrorCode.topic_authorization_failed))
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
    return then(result, respond)


def handle_describe(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(CONSUMER_GROUP_DESCRIBE, ctx.api_version)
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
    membership = coordinator(services).consumer_membership
    for group_id in request.group_ids:
        if not _enabled(services):
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
                assignor_name=group.preferred_assignor(membership.settings.consumer_assignors[0]),
                members=_members(services, cls, group),
                authorized_operations=operations,
            )
        )
    return build(cls, throttle_time=NO_THROTTLE, groups=tuple(described))


def _group_topics(group: ConsumerGroup) -> set[uuid.UUID]:
    topics: set[uuid.UUID] = set()
    for member in group.members.values():
        topics.update(member.assignment.assigned)
        topics.update(member.assignment.pending_revocation)
    for target in group.target.values():
        topics.update(target)
    return topics


def _may_describe_topics(services: Services, ctx: RequestContext, group: ConsumerGroup) -> bool:
    if services.authorizer is None:
        return True
    names = group.subscribed_topic_names()
    for topic_id in _group_topics(group):
        name = services.metadata.topic_name(topic_id)
        if name is not None:
            names.add(name)
    allowed = authorized_names(services, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
    return len(allowed) == len(names)


def _members(services: Services, cls: type, group: ConsumerGroup) -> tuple[Any, ...]:
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
            instance_id=m.instance_id,
            rack_id=m.rack_id,
            member_epoch=m.member_epoch,
            client_id=m.client_id,
            client_host=m.client_host,
            subscribed_topic_names=m.subscribed_topic_names,
            subscribed_topic_regex=m.subscribed_topic_regex,
            assignment=assignment(m.assignment.assigned),
            target_assignment=assignment(group.target.get(m.member_id, {})),
            member_type=CONSUMER_MEMBER_TYPE if m.classic is None else CLASSIC_MEMBER_TYPE,
        )
        for m in group.members.values()
    )
