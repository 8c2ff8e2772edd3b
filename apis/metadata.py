"""Metadata: brokers, controller and topic partitions, with auto topic creation."""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode

from apis.context import (
    NO_AUTHORIZED_OPERATIONS,
    NO_THROTTLE,
    CloseConnection,
    RequestContext,
    Services,
    build,
    nested,
)
from apis.groups import ensure_offsets_topic
from apis.topics import create_topic
from controller.metadata import TopicInfo
from controller.topics import INTERNAL_TOPICS, TopicError, check_topic_name
from coordinator.records import OFFSETS_TOPIC
from wire.schema import response_type
from wire.versions import METADATA

logger = logging.getLogger(__name__)


def handle(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(METADATA, ctx.api_version)
    broker_cls = nested(cls, "MetadataResponseBroker")
    topic_cls = nested(cls, "MetadataResponseTopic")
    partition_cls = nested(cls, "MetadataResponsePartition")
    cache = services.metadata

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

    def partition_entry(topic: str, p: Any) -> Any:
        hosted = services.replicas.get(topic, p.index)
        if hosted is not None and hosted.log.offline:
            # Its log directory failed: no replica can lead (as Kafka's controller decides
            # once the broker reports the directory offline).
            return build(
                partition_cls,
                error_code=ErrorCode.leader_not_available,
                partition_index=p.index,
                leader_id=-1,
                leader_epoch=p.leader_epoch,
                replica_nodes=tuple(p.replicas),
                isr_nodes=tuple(p.isr),
                offline_replicas=(hosted.broker_id,),
            )
        leader = cache.brokers.get(p.leader)
        if leader is None or leader.endpoint(ctx.listener) is None:
            # No live leader (none elected yet, or it died and the controller has not moved
            # the partition): clients wait and refresh. A live leader without this listener
            # is LISTENER_NOT_FOUND from v6, as in Kafka.
            listener_missing = leader is not None and ctx.api_version >= 6
            return build(
                partition_cls,
                error_code=ErrorCode.listener_not_found
                if listener_missing
                else ErrorCode.leader_not_available,
                partition_index=p.index,
                leader_id=-1,
                leader_epoch=p.leader_epoch,
                replica_nodes=tuple(p.replicas),
                isr_nodes=tuple(p.isr),
                offline_replicas=tuple(p.offline_replicas),
            )
        return build(
            partition_cls,
            error_code=ErrorCode.none,
            partition_index=p.index,
            leader_id=p.leader,
            leader_epoch=p.leader_epoch,
            replica_nodes=tuple(p.replicas),
            isr_nodes=tuple(p.isr),
            offline_replicas=tuple(p.offline_replicas),
        )

    def topic_entry(topic: TopicInfo) -> Any:
        partitions = tuple(
            partition_entry(topic.name, p)
            for p in sorted(topic.partitions.values(), key=lambda p: p.index)
        )
        return build(
            topic_cls,
            error_code=ErrorCode.none,
            name=topic.name,
            topic_id=topic.topic_id,
            is_internal=topic.internal,
            partitions=partitions,
            topic_authorized_operations=NO_AUTHORIZED_OPERATIONS,
        )

    def error_entry(code: ErrorCode, name: str | None, topic_id: Any = None) -> Any:
        return build(
            topic_cls,
            error_code=code,
            name=name,
            topic_id=topic_id,
            is_internal=False,
            partitions=(),
            topic_authorized_operations=NO_AUTHORIZED_OPERATIONS,
        )

    wanted = request.topics
    if wanted is None or (ctx.api_version == 0 and not wanted):
        topics = [topic_entry(t) for t in cache.topics.values()]
    else:
        auto_create = (
            getattr(request, "allow_auto_topic_creation", True)
            and services.config["auto.create.topics.enable"]
        )
        topics = []
        for entry in wanted:
            name = entry.name
            topic_id = getattr(entry, "topic_id", None)
            if ctx.api_version < 12 and name is None:
                # v10-11 carry a topic id field, but their responses cannot hold a null
                # name: Kafka refuses such a request as invalid.
                raise CloseConnection(
                    f"Topic name can not be null for Metadata version {ctx.api_version}"
                )
            if name is None and topic_id is not None:
                name = cache.topic_name(topic_id)
                if name is None:
                    topics.append(error_entry(ErrorCode.unknown_topic_id, None, topic_id))
                    continue
            topic = cache.topics.get(name)
            if topic is None:
                try:
                    check_topic_name(name)
                except TopicError as e:
                    topics.append(error_entry(e.code, name))
                    continue
                # Internal topics get their shape from the broker's own settings: the group
                # coordinator's for __consumer_offsets; __transaction_state waits for the
                # transaction coordinator that will own it.
                if not auto_create or (name in INTERNAL_TOPICS and name != OFFSETS_TOPIC):
                    topics.append(error_entry(ErrorCode.unknown_topic_or_partition, name))
                    continue
                try:
                    if name == OFFSETS_TOPIC:
                        topic = ensure_offsets_topic(services)
                    else:
                        topic = create_topic(services, name, -1, -1, {})
                except TopicError as e:
                    if e.code != ErrorCode.topic_already_exists:
                        logger.info("Auto-creation of topic %s failed: %s", name, e.message)
                        topics.append(error_entry(e.code, name))
                        continue
                    topic = cache.topics[name]
            topics.append(topic_entry(topic))

    return build(
        cls,
        throttle_time=NO_THROTTLE,
        brokers=tuple(brokers),
        cluster_id=cache.cluster_id,
        controller_id=cache.controller_id,
        topics=tuple(topics),
        cluster_authorized_operations=NO_AUTHORIZED_OPERATIONS,
    )
