"""WriteTxnMarkers (API 27, v1): the transaction coordinator's COMMIT or ABORT markers for
the partitions this broker leads, each a control batch appended as leader and answered
once the ISR has it. The local coordinator calls ``write_txn_markers`` in-process; other
brokers' coordinators send the request (cluster mode: an embedded node closes the
connection, as for LeaderAndIsr). A marker on a ``__consumer_offsets`` partition, once
replicated, makes the group coordinator apply or drop the transaction's offsets."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.types import TopicName
from kio.schema.write_txn_markers.v1.request import WriteTxnMarkersRequest
from kio.schema.write_txn_markers.v1.response import (
    WritableTxnMarkerPartitionResult,
    WritableTxnMarkerResult,
    WritableTxnMarkerTopicResult,
    WriteTxnMarkersResponse,
)
from kio.static.primitive import i32

from gregor.apis.context import RequestContext, Services, later
from gregor.apis.inter_broker import cluster_action, cluster_member
from gregor.coordinator.records import OFFSETS_TOPIC
from gregor.replica.manager import MarkerAppend


def handle(services: Services, ctx: RequestContext, request: WriteTxnMarkersRequest) -> Any:
    if not cluster_action(services, ctx):
        return WriteTxnMarkersResponse(
            markers=tuple(
                WritableTxnMarkerResult(
                    producer_id=marker.producer_id,
                    topics=tuple(
                        WritableTxnMarkerTopicResult(
                            name=topic.name,
                            partitions=tuple(
                                WritableTxnMarkerPartitionResult(
                                    partition_index=index,
                                    error_code=ErrorCode.cluster_authorization_failed,
                                )
                                for index in topic.partition_indexes
                            ),
                        )
                        for topic in marker.topics
                    ),
                )
                for marker in request.markers
            )
        )
    cluster_member(services, "WriteTxnMarkers")
    return later(write_txn_markers(services, request))


async def write_txn_markers(
    services: Services, request: WriteTxnMarkersRequest
) -> WriteTxnMarkersResponse:
    """Write every marker of ``request``; errors per partition (NOT_LEADER_OR_FOLLOWER,
    UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS, INVALID_PRODUCER_EPOCH,
    TRANSACTION_COORDINATOR_FENCED, REQUEST_TIMED_OUT...)."""
    replicas = services.replicas
    # Per marker, per topic: (partition index, its append or the error found first).
    outcomes: list[list[tuple[TopicName, list[tuple[i32, MarkerAppend | ErrorCode]]]]] = []
    appends: list[MarkerAppend] = []
    for marker in request.markers:
        topics: list[tuple[TopicName, list[tuple[i32, MarkerAppend | ErrorCode]]]] = []
        for topic in marker.topics:
            partitions: list[tuple[i32, MarkerAppend | ErrorCode]] = []
            for index in topic.partition_indexes:
                partition = replicas.get(topic.name, index)
                if partition is None:
                    partitions.append((index, services.replicas.not_hosted(topic.name, index)))
                    continue
                append = MarkerAppend(
                    partition,
                    marker.producer_id,
                    marker.producer_epoch,
                    marker.transaction_result,
                    marker.coordinator_epoch,
                )
                appends.append(append)
                partitions.append((index, append))
            topics.append((topic.name, partitions))
        outcomes.append(topics)
    await replicas.append_markers(appends, services.config["request.timeout.ms"])
    groups = services.groups
    results = []
    for marker, topics in zip(request.markers, outcomes, strict=True):
        topic_results = []
        for name, partitions in topics:
            partition_results = []
            for index, outcome in partitions:
                if isinstance(outcome, ErrorCode):
                    error = outcome
                else:
                    error = outcome.error or ErrorCode.none
                    if error == ErrorCode.none and name == OFFSETS_TOPIC and groups is not None:
                        groups.on_txn_marker(
                            index, marker.producer_id, marker.transaction_result, outcome.offset
                        )
                partition_results.append(
                    WritableTxnMarkerPartitionResult(partition_index=index, error_code=error)
                )
            topic_results.append(
                WritableTxnMarkerTopicResult(name=name, partitions=tuple(partition_results))
            )
        results.append(
            WritableTxnMarkerResult(producer_id=marker.producer_id, topics=tuple(topic_results))
        )
    return WriteTxnMarkersResponse(markers=tuple(results))
