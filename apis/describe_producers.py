"""DescribeProducers (KIP-664): the active idempotent producers of partitions this broker
leads, from each log's producer state. A topic without READ is TOPIC_AUTHORIZATION_FAILED
in each of its partitions."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from gregor.apis.acl import authorize
from gregor.apis.context import NO_THROTTLE, RequestContext, Services, nested
from gregor.controller.acls.model import AclOperation, ResourceType
from gregor.wire.schema import response_type
from gregor.wire.versions import DESCRIBE_PRODUCERS


def handle(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(DESCRIBE_PRODUCERS, ctx.api_version)
    topic_cls = nested(cls, "TopicResponse")
    partition_cls = nested(cls, "PartitionResponse")
    state_cls = nested(cls, "ProducerState")
    topics = []
    for topic in request.topics:
        partitions = []
        readable = authorize(services, ctx, AclOperation.READ, ResourceType.TOPIC, topic.name)
        for index in topic.partition_indexes:
            partition = services.replicas.get(topic.name, index)
            error, message, producers = ErrorCode.none, None, ()
            if not readable:
                error = ErrorCode.topic_authorization_failed
            elif partition is None:
                error = services.replicas.not_hosted(topic.name, index)
            elif not partition.is_leader:
                error = ErrorCode.not_leader_or_follower
            elif partition.log.offline:
                error = ErrorCode.kafka_storage_error
            else:
                producers = tuple(
                    state_cls(
                        producer_id=e.producer_id,
                        producer_epoch=e.producer_epoch,
                        last_sequence=e.last_seq,
                        last_timestamp=e.last_timestamp,
                        coordinator_epoch=e.coordinator_epoch,
                        current_txn_start_offset=e.current_txn_first_offset,
                    )
                    for e in partition.log.producer_state.producers.values()
                )
            if error != ErrorCode.none:
                message = f"{topic.name}-{index}: {error.name}"
            partitions.append(
                partition_cls(
                    partition_index=index,
                    error_code=error,
                    error_message=message,
                    active_producers=producers,
                )
            )
        topics.append(topic_cls(name=topic.name, partitions=tuple(partitions)))
    return cls(throttle_time=NO_THROTTLE, topics=tuple(topics))
