"""Produce: append each partition's batches to its leader log."""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode

from apis.context import CloseConnection, RawResponse, RequestContext, Services
from apis.errors import STORAGE_ERRORS, error_code, not_hosted
from wire.produce import PartitionData, PartitionResult, ProduceRequest, encode_produce_response

logger = logging.getLogger(__name__)


def handle(services: Services, ctx: RequestContext, request: ProduceRequest) -> Any:
    """Return the response, or None for acks=0 (which is never answered)."""
    acks = request.acks
    now_ms = services.now_ms()
    results: list[tuple[str, list[PartitionResult]]] = []
    failed = False
    for topic in request.topics:
        partitions = []
        for data in topic.partitions:
            result = PartitionResult(data.index)
            result.error_code = _append(services, topic.name, data, acks, now_ms, result)
            failed |= result.error_code != ErrorCode.none
            partitions.append(result)
        results.append((topic.name, partitions))
    if acks == 0:
        if failed:  # the client expects no answer; closing is the only way to tell it
            raise CloseConnection("a produce request with acks=0 failed")
        return None
    body = encode_produce_response(ctx.api_version, results)
    return RawResponse([body], len(body))


def _append(
    services: Services,
    topic: str,
    data: PartitionData,
    acks: int,
    now_ms: int,
    result: PartitionResult,
) -> ErrorCode:
    if acks not in (0, 1, -1):
        return ErrorCode.invalid_required_acks
    partition = services.replicas.get(topic, data.index)
    if partition is None:
        return not_hosted(services, topic, data.index)
    if not partition.is_leader:
        return ErrorCode.not_leader_or_follower
    if data.records is None:
        return ErrorCode.corrupt_message
    if acks == -1 and len(partition.isr) < partition.log.config.min_insync_replicas:
        return ErrorCode.not_enough_replicas
    try:
        appended = services.replicas.append(partition, data.records, now_ms)
    except STORAGE_ERRORS as e:
        code = error_code(e)
        logger.debug("Produce to %s-%d failed: %s (%s)", topic, data.index, code.name, e)
        return code
    result.base_offset = appended.first_offset
    result.log_start_offset = appended.log_start_offset
    result.log_append_time = appended.log_append_time
    return ErrorCode.none
