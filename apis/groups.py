"""The classic group protocol: FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, DescribeGroups, ListGroups and DeleteGroups.

Authorized as Kafka's handlers: FindCoordinator DESCRIBE on each group or transactional id
(GROUP_/TRANSACTIONAL_ID_AUTHORIZATION_FAILED per key, no coordinator topic created for a
refused one); JoinGroup, SyncGroup, Heartbeat and LeaveGroup READ on the group;
DescribeGroups DESCRIBE per group, with each group's authorized operations (KIP-430);
ListGroups every group with DESCRIBE on the cluster, else those with DESCRIBE; DeleteGroups
DELETE per group."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from gregor.apis.acl import (
    MESSAGES,
    authorize,
    authorize_cluster,
    authorized_names,
    authorized_operations,
)
from gregor.apis.context import (
    NO_AUTHORIZED_OPERATIONS,
    NO_THROTTLE,
    RequestContext,
    Services,
    build,
    later,
    nested,
)
from gregor.controller.acls.model import AclOperation, ResourceType
from gregor.controller.base import NewTopic
from gregor.controller.topics import TopicError
from gregor.coordinator.coordinator import GroupCoordinator
from gregor.coordinator.group import GroupState
from gregor.coordinator.membership import JoinResult, SyncResult
from gregor.coordinator.records import OFFSETS_TOPIC
from gregor.coordinator.share_state_records import SHARE_GROUP_STATE_TOPIC
from gregor.coordinator.txn_records import TRANSACTION_STATE_TOPIC
from gregor.wire.schema import response_type
from gregor.wire.versions import (
    DELETE_GROUPS,
    DESCRIBE_GROUPS,
    FIND_COORDINATOR,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_GROUPS,
    SYNC_GROUP,
)

logger = logging.getLogger(__name__)

GROUP_KEY = 0
TRANSACTION_KEY = 1
SHARE_KEY = 2  # "<group>:<topic id>:<partition>", sent by brokers only (KIP-932)
T = TypeVar("T")


def then(result: T | asyncio.Future[T], respond: Callable[[T], Any]) -> Any:
    """The response now when the coordinator answered at once, else a future of it."""
    if not isinstance(result, asyncio.Future):
        return respond(result)
    if result.done():
        return respond(result.result())
    out: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    result.add_done_callback(lambda f: out.set_result(respond(f.result())))
    return out


def millis(value: timedelta) -> int:
    return value // timedelta(milliseconds=1)


def client_host(ctx: RequestContext) -> str:
    """As Kafka prints an InetAddress: "/127.0.0.1"."""
    return "/" + ctx.peer.rsplit(":", 1)[0]


def may_read_group(services: Services, ctx: RequestContext, group_id: str) -> bool:
    return authorize(services, ctx, AclOperation.READ, ResourceType.GROUP, group_id)


def coordinator(services: Services) -> GroupCoordinator:
    assert services.groups is not None
    return services.groups


# -- FindCoordinator ------------------------------------------------------------------------
async def create_offsets_topic(services: Services) -> None:
    """Create ``__consumer_offsets`` with its internal settings, as Kafka does on first use
    (whether FindCoordinator or a Metadata request asks first)."""
    config = services.config
    await _create_internal_topic(
        services,
        OFFSETS_TOPIC,
        config["offsets.topic.num.partitions"],
        config["offsets.topic.replication.factor"],
        {
            "cleanup.policy": "compact",
            "compression.type": "producer",
            "segment.bytes": str(config["offsets.topic.segment.bytes"]),
        },
    )


async def create_transaction_state_topic(services: Services) -> None:
    """Create ``__transaction_state`` with its internal settings (Kafka's
    ``transaction.state.log.*``), as Kafka does on first use."""
    config = services.config
    await _create_internal_topic(
        services,
        TRANSACTION_STATE_TOPIC,
        config["transaction.state.log.num.partitions"],
        config["transaction.state.log.replication.factor"],
        {
            "cleanup.policy": "compact",
            "compression.type": "uncompressed",
            "segment.bytes": str(config["transaction.state.log.segment.bytes"]),
            "unclean.leader.election.enable": "false",
        },
        config["transaction.state.log.min.isr"],
    )


async def create_share_state_topic(services: Services) -> None:
    """Create ``__share_group_state`` with Kafka's settings for it (``share.coordinator.*``,
    the delete policy with infinite retention KIP-932 gives it), as Kafka does on first use."""
    config = services.config
    await _create_internal_topic(
        services,
        SHARE_GROUP_STATE_TOPIC,
        config["share.coordinator.state.topic.num.partitions"],
        config["share.coordinator.state.topic.replication.factor"],
        {
            "cleanup.policy": "delete",
            "compression.type": "producer",
            "retention.ms": "-1",
            "segment.bytes": str(config["share.coordinator.state.topic.segment.bytes"]),
        },
        config["share.coordinator.state.topic.min.isr"],
    )


async def _create_internal_topic(
    services: Services,
    topic: str,
    partitions: int,
    replication: int,
    configs: dict[str, str],
    min_isr: int | None = None,
) -> None:
    """Create an internal topic; raises TopicError, but not when another request created it
    meanwhile."""
    if services.cluster is None:
        # The embedded node is every replica there is. A cluster waits, as Kafka does,
        # until enough brokers are registered (FindCoordinator answers
        # COORDINATOR_NOT_AVAILABLE meanwhile), so the topic is never under-replicated.
        replication = min(replication, len(services.metadata.brokers))
        if min_isr is not None:
            min_isr = min(min_isr, replication)
    if min_isr is not None:
        configs = {**configs, "min.insync.replicas": str(min_isr)}
    (outcome,) = await services.controller.create_topics(
        [NewTopic(topic, partitions, replication, configs)]
    )
    if isinstance(outcome, TopicError) and outcome.code != ErrorCode.topic_already_exists:
        raise outcome


def _locate(
    services: Services, ctx: RequestContext, key: str, key_type: int
) -> tuple[ErrorCode, str | None, int, str, int]:
    """(error, message, node id, host, port) of the coordinator of one key, once its
    topic exists."""
    if key_type not in (GROUP_KEY, TRANSACTION_KEY, SHARE_KEY):
        return ErrorCode.invalid_request, f"unknown key type {key_type}", -1, "", -1
    refused = _refused_key(services, ctx, key, key_type)
    if refused is not None:
        return refused, None, -1, "", -1
    if not key:
        return ErrorCode.invalid_request, None, -1, "", -1
    if key_type == GROUP_KEY:
        info = services.metadata.partition(OFFSETS_TOPIC, coordinator(services).partition_for(key))
    elif key_type == SHARE_KEY:
        if services.share_coordinator is None:
            return ErrorCode.coordinator_not_available, None, -1, "", -1
        info = services.metadata.partition(
            SHARE_GROUP_STATE_TOPIC, services.share_coordinator.partition_for_key(key)
        )
    else:
        assert services.transactions is not None
        info = services.metadata.partition(
            TRANSACTION_STATE_TOPIC, services.transactions.partition_for(key)
        )
    broker = None if info is None else services.metadata.brokers.get(info.leader)
    endpoint = None if broker is None else broker.endpoint(ctx.listener)
    if info is None or endpoint is None:
        return ErrorCode.coordinator_not_available, None, -1, "", -1
    return ErrorCode.none, None, info.leader, endpoint[0], endpoint[1]


def _refused_key(
    services: Services, ctx: RequestContext, key: str, key_type: int
) -> ErrorCode | None:
    """FindCoordinator's check of one key: DESCRIBE on the group or transactional id,
    CLUSTER_ACTION for a share-partition's (an inter-broker lookup)."""
    if key_type == SHARE_KEY:
        if authorize_cluster(services, ctx, AclOperation.CLUSTER_ACTION):
            return None
        return ErrorCode.cluster_authorization_failed
    if key_type == GROUP_KEY:
        if authorize(services, ctx, AclOperation.DESCRIBE, ResourceType.GROUP, key):
            return None
        return ErrorCode.group_authorization_failed
    if authorize(services, ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
        return None
    return ErrorCode.transactional_id_authorization_failed


def handle_find_coordinator(services: Services, ctx: RequestContext, request: Any) -> Any:
    if ctx.api_version < 4:
        key_type, keys = getattr(request, "key_type", GROUP_KEY), (request.key,)
    else:
        key_type, keys = request.key_type, request.coordinator_keys
    topic = {
        GROUP_KEY: OFFSETS_TOPIC,
        TRANSACTION_KEY: TRANSACTION_STATE_TOPIC,
        SHARE_KEY: SHARE_GROUP_STATE_TOPIC,
    }.get(key_type)
    if services.authorizer is not None and topic is not None:
        # As Kafka: the coordinator topic is created for an authorized key only.
        keys = tuple(k for k in keys if _refused_key(services, ctx, k, key_type) is None)
    if topic is None or topic in services.metadata.topics or not any(keys):
        return _find_coordinator(services, ctx, request)
    return later(_create_then_find(services, ctx, request, key_type))


async def _create_then_find(
    services: Services, ctx: RequestContext, request: Any, key_type: int
) -> Any:
    try:
        if key_type == GROUP_KEY:
            await create_offsets_topic(services)
        elif key_type == SHARE_KEY:
            await create_share_state_topic(services)
        else:
            await create_transaction_state_topic(services)
    except TopicError as e:
        logger.warning("Could not create a coordinator topic: %s", e.message)
    return _find_coordinator(services, ctx, request)


def _find_coordinator(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(FIND_COORDINATOR, ctx.api_version)
    if ctx.api_version < 4:
        error, message, node, host, port = _locate(
            services, ctx, request.key, getattr(request, "key_type", GROUP_KEY)
        )
        return build(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=error,
            error_message=message,
            node_id=node,
            host=host,
            port=port,
        )
    coordinator_cls = nested(cls, "Coordinator")
    entries = []
    for key in request.coordinator_keys:
        error, message, node, host, port = _locate(services, ctx, key, request.key_type)
        entries.append(
            coordinator_cls(
                key=key, node_id=node, host=host, port=port, error_code=error, error_message=message
            )
        )
    return build(cls, throttle_time=NO_THROTTLE, coordinators=tuple(entries))


# -- JoinGroup / SyncGroup / Heartbeat / LeaveGroup -----------------------------------------
def handle_join(services: Services, ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    session_ms = millis(request.session_timeout)
    rebalance_ms = millis(request.rebalance_timeout) if version >= 1 else session_ms
    if not may_read_group(services, ctx, request.group_id):
        return respond_join(ctx, JoinResult(ErrorCode.group_authorization_failed, ""))
    result = coordinator(services).membership.join(
        request.group_id,
        request.member_id,
        getattr(request, "group_instance_id", None),
        ctx.client_id or "",
        client_host(ctx),
        request.protocol_type,
        [(p.name, p.metadata) for p in request.protocols],
        session_ms,
        rebalance_ms,
        require_known_member_id=version >= 4
        and getattr(request, "group_instance_id", None) is None,
    )

    def respond(r: JoinResult) -> Any:
        return respond_join(ctx, r)

    return then(result, respond)


def respond_join(ctx: RequestContext, r: JoinResult) -> Any:
    version = ctx.api_version
    cls = response_type(JOIN_GROUP, version)
    member_cls = nested(cls, "JoinGroupResponseMember")
    return build(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=r.error,
        generation_id=r.generation,
        protocol_type=r.protocol_type,
        protocol_name=r.protocol_name if version >= 7 else (r.protocol_name or ""),
        leader=r.leader_id,
        skip_assignment=r.skip_assignment,
        member_id=r.member_id,
        members=tuple(
            build(member_cls, member_id=m, group_instance_id=i, metadata=md)
            for m, i, md in r.members
        ),
    )


def handle_sync(services: Services, ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    cls = response_type(SYNC_GROUP, version)
    protocol_type = getattr(request, "protocol_type", None)
    protocol_name = getattr(request, "protocol_name", None)
    # Kafka refuses a v5+ request without its protocol type and name
    # (INCONSISTENT_GROUP_PROTOCOL, the coordinator's answer here) before authorizing.
    mandatory_missing = version >= 5 and (protocol_type is None or protocol_name is None)
    result: SyncResult | asyncio.Future[SyncResult]
    if not mandatory_missing and not may_read_group(services, ctx, request.group_id):
        result = SyncResult(ErrorCode.group_authorization_failed)
    else:
        result = coordinator(services).membership.sync(
            request.group_id,
            request.generation_id,
            request.member_id,
            getattr(request, "group_instance_id", None),
            protocol_type,
            protocol_name,
            {a.member_id: a.assignment for a in request.assignments},
        )

    def respond(r: SyncResult) -> Any:
        return build(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=r.error,
            protocol_type=r.protocol_type,
            protocol_name=r.protocol_name,
            assignment=r.assignment,
        )

    return then(result, respond)


def handle_heartbeat(services: Services, ctx: RequestContext, request: Any) -> Any:
    if not may_read_group(services, ctx, request.group_id):
        error = ErrorCode.group_authorization_failed
    else:
        error = coordinator(services).membership.heartbeat(
            request.group_id,
            request.generation_id,
            request.member_id,
            getattr(request, "group_instance_id", None),
        )
    return build(
        response_type(HEARTBEAT, ctx.api_version), throttle_time=NO_THROTTLE, error_code=error
    )


def handle_leave(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(LEAVE_GROUP, ctx.api_version)
    if not may_read_group(services, ctx, request.group_id):
        return build(
            cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.group_authorization_failed
        )
    membership = coordinator(services).membership
    if ctx.api_version < 3:
        _, errors = membership.leave(request.group_id, [(request.member_id, None)])
        return build(cls, throttle_time=NO_THROTTLE, error_code=errors[0])
    leaving = [(m.member_id, m.group_instance_id) for m in request.members]
    error, errors = membership.leave(request.group_id, leaving)
    member_cls = nested(cls, "MemberResponse")
    return build(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=error,
        members=()
        if error != ErrorCode.none
        else tuple(
            member_cls(member_id=m, group_instance_id=i, error_code=e)
            for (m, i), e in zip(leaving, errors, strict=True)
        ),
    )


# -- DescribeGroups / ListGroups / DeleteGroups ---------------------------------------------
def handle_describe(services: Services, ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    cls = response_type(DESCRIBE_GROUPS, version)
    group_cls = nested(cls, "DescribedGroup")
    member_cls = nested(cls, "DescribedGroupMember")
    with_operations = getattr(request, "include_authorized_operations", False)
    described = []
    for group_id in request.groups:
        if not authorize(services, ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            refused = ErrorCode.group_authorization_failed
            described.append(
                build(
                    group_cls,
                    error_code=refused,
                    error_message=MESSAGES[refused],
                    group_id=group_id,
                    group_state="",
                    protocol_type="",
                    protocol_data="",
                    members=(),
                    authorized_operations=NO_AUTHORIZED_OPERATIONS,
                )
            )
            continue
        error, group = coordinator(services).membership.describe(group_id)
        message = None
        runtime = coordinator(services).runtime
        modern = group_id in runtime.consumer_groups or group_id in runtime.share_groups
        if modern and error in (ErrorCode.none, ErrorCode.group_id_not_found):
            # As Kafka 4.1: DescribeGroups describes classic groups only.
            error, group = ErrorCode.group_id_not_found, None
            message = f"Group {group_id} is not a classic group."
        fields: dict[str, Any] = {
            "group_id": group_id,
            "group_state": "",
            "protocol_type": "",
            "protocol_data": "",
            "members": (),
            "error_message": message,
            "authorized_operations": NO_AUTHORIZED_OPERATIONS,
        }
        if error == ErrorCode.group_id_not_found and version < 6:
            error, fields["group_state"] = ErrorCode.none, GroupState.DEAD.value
            fields["error_message"] = None
        if group is not None:
            stable = group.is_(GroupState.STABLE)
            protocol = group.protocol_name if stable else None
            fields.update(
                group_state=group.state.value,
                protocol_type=group.protocol_type or "",
                protocol_data=protocol or "",
                members=tuple(
                    build(
                        member_cls,
                        member_id=m.member_id,
                        group_instance_id=m.group_instance_id,
                        client_id=m.client_id,
                        client_host=m.client_host,
                        member_metadata=m.metadata(protocol) if stable else b"",
                        member_assignment=m.assignment if stable else b"",
                    )
                    for m in group.members.values()
                ),
            )
        if with_operations and error == ErrorCode.none:
            fields["authorized_operations"] = authorized_operations(
                services, ctx, ResourceType.GROUP, group_id
            )
        described.append(build(group_cls, error_code=error, **fields))
    return build(cls, throttle_time=NO_THROTTLE, groups=tuple(described))


def handle_list(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(LIST_GROUPS, ctx.api_version)
    listed_cls = nested(cls, "ListedGroup")
    states = {s.lower() for s in getattr(request, "states_filter", ())}
    types = {t.lower() for t in getattr(request, "types_filter", ())}
    groups = []
    # With DESCRIBE on the cluster every group is listed (Kafka keeps it for compatibility),
    # else those the request may DESCRIBE.
    every = authorize_cluster(services, ctx, AclOperation.DESCRIBE)

    def add_listed(group_id: str, state: str, protocol_type: str, group_type: str) -> None:
        if states and state.lower() not in states:
            return
        if not every and not authorize(
            services, ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id
        ):
            return
        groups.append(
            build(
                listed_cls,
                group_id=group_id,
                protocol_type=protocol_type,
                group_state=state,
                group_type=group_type,
            )
        )

    if not types or "classic" in types:
        for group in coordinator(services).membership.groups():
            add_listed(group.group_id, group.state.value, group.protocol_type or "", "classic")
    if not types or "consumer" in types:
        for consumer_group in coordinator(services).consumer_membership.groups():
            add_listed(consumer_group.group_id, consumer_group.state.value, "consumer", "consumer")
    if not types or "share" in types:
        for share_group in coordinator(services).share_membership.groups():
            add_listed(share_group.group_id, share_group.state.value, "share", "share")
    # As Kafka: the groups loaded so far, and the error while any partition is loading.
    error = (
        ErrorCode.coordinator_load_in_progress
        if coordinator(services).loading()
        else ErrorCode.none
    )
    return build(cls, throttle_time=NO_THROTTLE, error_code=error, groups=tuple(groups))


def handle_delete(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(DELETE_GROUPS, ctx.api_version)
    result_cls = nested(cls, "DeletableGroupResult")
    names = list(dict.fromkeys(request.groups_names))
    allowed = authorized_names(services, ctx, AclOperation.DELETE, ResourceType.GROUP, names)
    refused = dict.fromkeys(
        (g for g in names if g not in allowed), ErrorCode.group_authorization_failed
    )

    def respond(results: dict[str, ErrorCode]) -> Any:
        results = {**results, **refused}
        return build(
            cls,
            throttle_time=NO_THROTTLE,
            results=tuple(result_cls(group_id=g, error_code=results[g]) for g in names),
        )

    deleted = [g for g in names if g in allowed]
    group_coordinator = coordinator(services)
    share_ids = [
        g
        for g in deleted
        if group_coordinator.share_membership.get(g) is not None
        and group_coordinator.owner_error(g) is None
    ]
    if not share_ids:
        return then(coordinator(services).membership.delete_groups(deleted), respond)
    return later(_delete_with_share_groups(services, deleted, share_ids, respond))


async def _delete_with_share_groups(
    services: Services,
    group_ids: list[str],
    share_ids: list[str],
    respond: Callable[[dict[str, ErrorCode]], Any],
) -> Any:
    """DeleteGroups naming share groups: an empty one loses its share-partitions' state
    and then its records, one with members is NON_EMPTY_GROUP."""
    shares = coordinator(services).share_membership
    pending: dict[str, asyncio.Future[ErrorCode]] = {}
    results: dict[str, ErrorCode] = {}
    for group_id in share_ids:
        group = shares.get(group_id)
        if group is None:
            results[group_id] = ErrorCode.group_id_not_found
        elif not group.is_empty():
            results[group_id] = ErrorCode.non_empty_group
        else:
            pending[group_id] = shares.delete(group)
    others = [g for g in group_ids if g not in share_ids]
    results.update(await coordinator(services).membership.delete_groups(others))
    for group_id, future in pending.items():
        results[group_id] = await future
    return respond(results)
