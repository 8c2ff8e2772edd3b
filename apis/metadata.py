"""Metadata: brokers, controller and topic partitions, with auto topic creation.

Authorized as Kafka's handleTopicMetadataRequest: a topic without DESCRIBE is left out of an
all-topics answer and answered TOPIC_AUTHORIZATION_FAILED when named (by id: without its
name); a missing topic is auto-created only with CREATE on the cluster or on the topic, else
TOPIC_AUTHORIZATION_FAILED; authorized operations (KIP-430) per topic and for the cluster."""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any

from kio.schema.errors import ErrorCode

from gregor.apis.acl import (
    authorize_cluster,
    authorized_names,
    authorized_operations,
    cluster_authorized_operations,
)
from gregor.apis.context import (
    NO_AUTHORIZED_OPERATIONS,
    NO_THROTTLE,
    CloseConnection,
    RequestContext,
    Services,
    build,
    later,
    nested,
)
from gregor.apis.groups import create_offsets_topic
from gregor.apis.topics import new_topic
from gregor.controller.acls.model import AclOperation, ResourceType
from gregor.controller.base import NewTopic
from gregor.controller.metadata.cache import PartitionInfo, TopicInfo
from gregor.controller.metadata.topic_names import INTERNAL_TOPICS
from gregor.controller.topics import TopicError, check_topic_name
from gregor.coordinator.records import OFFSETS_TOPIC
from gregor.wire.encoder import EncodedItems, entity_encoder
from gregor.wire.schema import response_type
from gregor.wire.versions import METADATA

logger = logging.getLogger(__name__)

# Metadata looks topics up by id from this version, and is encoded compactly from this one.
_TOPIC_IDS_FROM = 12
_FLEXIBLE_FROM = 9
# What a partition's entry says besides the cache's state of it.
_LED, _NO_LEADER, _LISTENER_MISSING, _LOG_OFFLINE = range(4)


def _index(p: PartitionInfo) -> int:
    return p.index


@lru_cache(maxsize=256)
def _entry_struct(replicas: int, isr: int, offline: int) -> struct.Struct:
    return struct.Struct(f">hiiiB{replicas}iB{isr}iB{offline}iB")


def flexible_partition_entry(
    code: int,
    index: int,
    leader: int,
    leader_epoch: int,
    replicas: Sequence[int],
    isr: Sequence[int],
    offline: Sequence[int],
) -> bytes | None:
    """A partition's entry in a flexible Metadata answer (versions 9 and later), packed in
    one call: after a leadership change every client asks again and each of 50,000 entries
    is new, which the schema's writer took half a second or more to encode. None when an
    array's length takes more than a byte (the schema's writer then does it)."""
    n_replicas, n_isr, n_offline = len(replicas), len(isr), len(offline)
    if max(n_replicas, n_isr, n_offline) >= 127:
        return None
    return _entry_struct(n_replicas, n_isr, n_offline).pack(
        code,
        index,
        leader,
        leader_epoch,
        n_replicas + 1,
        *replicas,
        n_isr + 1,
        *isr,
        n_offline + 1,
        *offline,
        0,
    )


def handle(services: Services, ctx: RequestContext, request: Any) -> Any:
    """The response at once, unless topics are to be created first: then a future of it
    (Metadata is on every client's hot path, so the common case stays synchronous)."""
    refused = _refused(services, ctx, request) if services.authorizer is not None else {}
    missing = _to_create(services, ctx, request, refused)
    if not missing:
        return _respond(services, ctx, request, refused)
    return later(_create_then_respond(services, ctx, request, missing, refused))


def _refused(services: Services, ctx: RequestContext, request: Any) -> dict[str, ErrorCode]:
    """The topics a request names that are answered TOPIC_AUTHORIZATION_FAILED: those
    without DESCRIBE, and those missing that auto-creation would create without CREATE on
    the cluster or on the topic."""
    wanted = request.topics
    if wanted is None or (ctx.api_version == 0 and not wanted):
        return {}
    cache = services.metadata
    names = set()
    for entry in wanted:
        topic_id = getattr(entry, "topic_id", None)
        name = entry.name or (None if topic_id is None else cache.topic_name(topic_id))
        if name:
            names.add(name)
    describable = authorized_names(services, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
    refused = dict.fromkeys(names - describable, ErrorCode.topic_authorization_failed)
    missing = [n for n in describable if n not in cache.topics]
    if (
        missing
        and _auto_create(services, request)
        and not authorize_cluster(services, ctx, AclOperation.CREATE)
    ):
        creatable = authorized_names(
            services, ctx, AclOperation.CREATE, ResourceType.TOPIC, missing
        )
        refused.update(
            dict.fromkeys(set(missing) - creatable, ErrorCode.topic_authorization_failed)
        )
    return refused


def _auto_create(services: Services, request: Any) -> bool:
    return (
        getattr(request, "allow_auto_topic_creation", True)
        and services.config["auto.create.topics.enable"]
    )


def _to_create(
    services: Services, ctx: RequestContext, request: Any, refused: dict[str, ErrorCode]
) -> list[str]:
    """The topics the request names that auto-creation should create, in order."""
    wanted = request.topics
    if wanted is None or (ctx.api_version == 0 and not wanted):
        return []
    cache = services.metadata
    auto_create = _auto_create(services, request)
    missing: dict[str, None] = {}
    for entry in wanted:
        name = entry.name
        if ctx.api_version < _TOPIC_IDS_FROM and name is None:
            # v10-11 carry a topic id field, but their responses cannot hold a null name:
            # Kafka refuses such a request as invalid.
            raise CloseConnection(
                f"Topic name can not be null for Metadata version {ctx.api_version}"
            )
        # Internal topics get their shape from the broker's own settings: the group
        # coordinator's for __consumer_offsets; __transaction_state waits for the
        # transaction coordinator that will own it.
        if (
            auto_create
            and name is not None
            and name not in cache.topics
            and name not in refused
            and (name not in INTERNAL_TOPICS or name == OFFSETS_TOPIC)
            and _legal(name)
        ):
            missing[name] = None
    return list(missing)


def _legal(name: str) -> bool:
    try:
        check_topic_name(name)
    except TopicError:
        return False
    return True


async def _create_then_respond(
    services: Services,
    ctx: RequestContext,
    request: Any,
    names: list[str],
    refused: dict[str, ErrorCode],
) -> Any:
    failed = dict(refused)
    if OFFSETS_TOPIC in names:
        try:
            await create_offsets_topic(services)
        except TopicError as e:
            failed[OFFSETS_TOPIC] = e.code
            logger.info("Auto-creation of topic %s failed: %s", OFFSETS_TOPIC, e.message)
    wanted: list[NewTopic] = []
    errors: list[tuple[str | NewTopic, TopicInfo | TopicError]] = []
    for name in names:
        if name == OFFSETS_TOPIC:
            continue
        try:
            wanted.append(new_topic(services, name, -1, -1, {}))
        except TopicError as e:
            errors.append((name, e))
    errors.extend(zip(wanted, await services.controller.create_topics(wanted), strict=True))
    for new, outcome in errors:
        name = new if isinstance(new, str) else new.name
        if isinstance(outcome, TopicError) and outcome.code != ErrorCode.topic_already_exists:
            logger.info("Auto-creation of topic %s failed: %s", name, outcome.message)
            failed[name] = outcome.code
    return _respond(services, ctx, request, failed)


def _respond(
    services: Services, ctx: RequestContext, request: Any, failed: dict[str, ErrorCode]
) -> Any:
    """The response from the cache; `failed` holds the topics refused or that
    auto-creation could not create, with the error to answer."""
    cls = response_type(METADATA, ctx.api_version)
    broker_cls = nested(cls, "MetadataResponseBroker")
    topic_cls = nested(cls, "MetadataResponseTopic")
    partition_cls = nested(cls, "MetadataResponsePartition")
    cache = services.metadata
    with_operations = getattr(request, "include_topic_authorized_operations", False)

    def topic_operations(name: str | None) -> int:
        if not with_operations or name is None:
            return NO_AUTHORIZED_OPERATIONS
        return authorized_operations(services, ctx, ResourceType.TOPIC, name)

    brokers = []
    for broker in cache.brokers.values():
        endpoint = broker.endpoint(ctx.listener)
        if endpoint is not None:
            brokers.append(
                build(
                    broker_cls,
                    node_id=broker.node_id,
                    host=endpoint[0],
                    port=endpoint[1],
                    rack=broker.rack,
                )
            )

    encode_partition = entity_encoder(partition_cls)
    flexible = ctx.api_version >= _FLEXIBLE_FROM

    # Looked up once per answer, not per partition (an answer may hold 50,000): whether a
    # log directory failed, and what each leader's liveness makes of a partition.
    any_log_offline = bool(services.replicas.logs.offline_dirs)
    leader_states: dict[int, int] = {}

    def leader_state(leader_id: int) -> int:
        state = leader_states.get(leader_id)
        if state is None:
            leader = cache.brokers.get(leader_id)
            if leader is not None and leader.endpoint(ctx.listener) is not None:
                state = _LED
            elif leader is not None and ctx.api_version >= 6:
                state = _LISTENER_MISSING
            else:
                state = _NO_LEADER
            leader_states[leader_id] = state
        return state

    def partition_entry(topic: str, p: PartitionInfo) -> bytes:
        hosted = services.replicas.get(topic, p.index) if any_log_offline else None
        if hosted is not None and hosted.log.offline:
            state = _LOG_OFFLINE
        else:
            state = leader_state(p.leader)
        key = (partition_cls, state)
        memo = p.encoded
        if memo is not None and memo[0] == key:
            return memo[1]
        code, leader_id, offline = partition_fields(p, state, hosted)
        encoded = None
        if flexible:
            encoded = flexible_partition_entry(
                code, p.index, leader_id, p.leader_epoch, p.replicas, p.isr, offline
            )
        if encoded is None:
            encoded = encode_partition(
                build(
                    partition_cls,
                    error_code=code,
                    partition_index=p.index,
                    leader_id=leader_id,
                    leader_epoch=p.leader_epoch,
                    replica_nodes=tuple(p.replicas),
                    isr_nodes=tuple(p.isr),
                    offline_replicas=offline,
                )
            )
        p.encoded = (key, encoded)
        return encoded

    def partition_fields(
        p: PartitionInfo, state: int, hosted: Any
    ) -> tuple[ErrorCode, int, tuple[int, ...]]:
        """The entry's error code, leader and offline replicas."""
        offline: tuple[int, ...]
        if state == _LOG_OFFLINE:
            # Its log directory failed: no replica can lead (as Kafka's controller decides
            # once the broker reports the directory offline).
            code, leader_id, offline = ErrorCode.leader_not_available, -1, (hosted.broker_id,)
        elif state == _LED:
            code, leader_id, offline = ErrorCode.none, p.leader, tuple(p.offline_replicas)
        else:
            # No live leader (none elected yet, or it died and the controller has not moved
            # the partition): clients wait and refresh. A live leader without this listener
            # is LISTENER_NOT_FOUND from v6, as in Kafka.
            code = (
                ErrorCode.listener_not_found
                if state == _LISTENER_MISSING
                else ErrorCode.leader_not_available
            )
            leader_id, offline = -1, tuple(p.offline_replicas)
        return code, leader_id, offline

    def topic_entry(topic: TopicInfo) -> Any:
        # Each partition is encoded once per state (apis and clients ask for every
        # partition again and again; a 50,000-partition answer took a second to build).
        partitions = EncodedItems(
            [partition_entry(topic.name, p) for p in sorted(topic.partitions.values(), key=_index)]
        )
        return build(
            topic_cls,
            error_code=ErrorCode.none,
            name=topic.name,
            topic_id=topic.topic_id,
            is_internal=topic.internal,
            partitions=partitions,
            topic_authorized_operations=topic_operations(topic.name),
        )

    def error_entry(code: ErrorCode, name: str | None, topic_id: Any = None) -> Any:
        refused = code == ErrorCode.topic_authorization_failed
        return build(
            topic_cls,
            error_code=code,
            name=name,
            topic_id=topic_id,
            is_internal=False,
            partitions=(),
            topic_authorized_operations=NO_AUTHORIZED_OPERATIONS
            if refused
            else topic_operations(name),
        )

    wanted = request.topics
    if wanted is None or (ctx.api_version == 0 and not wanted):
        shown: Iterable[TopicInfo] = cache.topics.values()
        if services.authorizer is not None:
            describable = authorized_names(
                services, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, cache.topics
            )
            shown = [t for t in shown if t.name in describable]
        topics = [topic_entry(t) for t in shown]
    else:
        topics = []
        by_id = ctx.api_version >= _TOPIC_IDS_FROM
        for entry in wanted:
            name = entry.name
            topic_id = getattr(entry, "topic_id", None)
            # By id when the name is null or empty (the Java client's forTopicIds sends ""),
            # from v12: v10-11 carry the field, but their answers cannot hold a null name
            # (a null name there closed the connection above; "" is a name there).
            if by_id and not name and topic_id is not None:
                name = cache.topic_name(topic_id)
                if name is None:
                    topics.append(error_entry(ErrorCode.unknown_topic_id, None, topic_id))
                    continue
                if failed.get(name) == ErrorCode.topic_authorization_failed:
                    # Topic ids are not secret, their names are (Kafka's comment).
                    topics.append(error_entry(ErrorCode.topic_authorization_failed, None, topic_id))
                    continue
            if failed.get(name) == ErrorCode.topic_authorization_failed:
                topics.append(error_entry(ErrorCode.topic_authorization_failed, name))
                continue
            topic = cache.topics.get(name)
            if topic is not None:
                topics.append(topic_entry(topic))
                continue
            try:
                check_topic_name(name)
                code = failed.get(name, ErrorCode.unknown_topic_or_partition)
            except TopicError as e:
                code = e.code
            topics.append(error_entry(code, name))

    return build(
        cls,
        throttle_time=NO_THROTTLE,
        brokers=tuple(brokers),
        cluster_id=cache.cluster_id,
        controller_id=cache.controller_id,
        topics=tuple(topics),
        cluster_authorized_operations=cluster_authorized_operations(services, ctx)
        if getattr(request, "include_cluster_authorized_operations", False)
        else NO_AUTHORIZED_OPERATIONS,
        # v13's top-level error (KIP-1102) exists for REBOOTSTRAP_REQUIRED, which tells the
        # client to go back to its bootstrap servers (a proxy or a cluster moved behind the
        # same address). A Kafka 4.1 broker never sets it, nor does Gregor: its errors are
        # per topic and partition as before.
        error_code=ErrorCode.none,
    )
