"""Produce: append each partition's batches to its leader log."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from kio.schema.errors import ErrorCode

from apis.context import NO_THROTTLE, CloseConnection, RequestContext, Services, build, nested
from apis.errors import STORAGE_ERRORS, error_code, not_hosted
from wire.schema import response_type
from wire.versions import PRODUCE

logger = logging.getLogger(__name__)


def handle(services: Services, ctx: RequestContext, request: Any) -> Any:
    """Return the response, or None for acks=0 (which is never answered)."""
    acks = request.acks
    now_ms = services.now_ms()
    results: list[tuple[str, list[dict[str, Any]]]] = []
    failed = False
    for topic in request.topic_data:
        partitions = []
        for data in topic.partition_data:
            result: dict[str, Any] = {
                "index": data.index,
                "base_offset": -1,
                "log_start_offset": -1,
                "log_append_time": None,
            }
            code = _append(services, topic.name, data.index, data.records, acks, now_ms, result)
            result["error_code"] = code
            failed |= code != ErrorCode.none
            partitions.append(result)
        results.append((topic.name, partitions))
    if acks == 0:
        if failed:  # the client expects no answer; closing is the only way to tell it
            raise CloseConnection("a produce request with acks=0 failed")
        return None
    cls = response_type(PRODUCE, ctx.api_version)
    topic_cls = nested(cls, "TopicProduceResponse")
    partition_cls = nested(cls, "PartitionProduceResponse")
    return build(
        cls,
        throttle_time=NO_THROTTLE,
        responses=tuple(
            topic_cls(
                name=name,
                partition_responses=tuple(
                    build(partition_cls, record_errors=(), error_message=None, **p)
                    for p in partitions
                ),
            )
            for name, partitions in results
        ),
    )


def _append(
    services: Services,
    topic: str,
    index: int,
    records: bytes | None,
    acks: int,
    now_ms: int,
    result: dict[str, Any],
) -> ErrorCode:
    if acks not in (0, 1, -1):
        return ErrorCode.invalid_required_acks
    partition = services.replicas.get(topic, index)
    if partition is None:
        return not_hosted(services, topic, index)
    if not partition.is_leader:
        return ErrorCode.not_leader_or_follower
    if records is None:
        return ErrorCode.corrupt_message
    if acks == -1 and len(partition.isr) < partition.log.config.min_insync_replicas:
        return ErrorCode.not_enough_replicas
    try:
        appended = services.replicas.append(partition, records, now_ms)
    except STORAGE_ERRORS as e:
        code = error_code(e)
        logger.debug("Produce to %s-%d failed: %s (%s)", topic, index, code.name, e)
        return code
    result["base_offset"] = appended.first_offset
    result["log_start_offset"] = appended.log_start_offset
    if appended.log_append_time >= 0:
        result["log_append_time"] = datetime.fromtimestamp(appended.log_append_time / 1000, UTC)
    return ErrorCode.none
