"""Fetch: whole batches up to the high watermark, long-polled through the purgatory."""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from apis.context import RawResponse, RequestContext, Services
from apis.errors import STORAGE_ERRORS, error_code, not_hosted
from log.log import ReadResult
from replica.delayed_fetch import DelayedFetch, PartitionFetch
from replica.partition import Partition
from wire.fetch import FetchPartition, FetchRequest, FetchTopic, encode_fetch_response

# What a read found per partition, kept in case the fetch parks:
# (partition, fetch offset, region read, the partition's byte limit).
_Found = tuple[Partition, int, ReadResult, int]


def handle(
    services: Services, ctx: RequestContext, request: FetchRequest
) -> RawResponse | asyncio.Future:
    if ctx.api_version >= 7 and request.session_id != 0:  # we never hand out sessions
        return _answer(ctx, [], ErrorCode.fetch_session_id_not_found)
    found: list[_Found] = []
    topics, available = _read(services, request, found)
    # Answered at once, as Kafka does: no wait asked, enough data, an error, or nothing to
    # wait for (the Java consumer sends a fetch of no partitions when it closes).
    if request.max_wait_ms <= 0 or available >= request.min_bytes or available < 0 or not found:
        return _answer(ctx, topics)
    delayed = DelayedFetch(
        [PartitionFetch.after_read(*f) for f in found],
        request.min_bytes,
        lambda: _answer(ctx, _read(services, request, None)[0]),
        f"fetch from {ctx.client_id!r} at {ctx.peer}",
    )
    if delayed.ready():
        return _answer(ctx, topics)
    return services.replicas.fetch_purgatory.park(delayed.keys, request.max_wait_ms, delayed)


def _answer(
    ctx: RequestContext, topics: list[FetchTopic], error: ErrorCode = ErrorCode.none
) -> RawResponse:
    parts, size = encode_fetch_response(ctx.api_version, topics, error_code=error)
    return RawResponse(parts, size)


def _read(
    services: Services, request: FetchRequest, found: list[_Found] | None
) -> tuple[list[FetchTopic], int]:
    """Read every requested partition; return the topics and the bytes found (-1: an error
    that must be answered at once). Each partition read without error goes to ``found``."""
    remaining = min(request.max_bytes, services.config["fetch.max.bytes"])
    total = 0
    errors = False
    first_with_data = True
    topics = []
    read_committed = request.isolation_level == 1
    for topic in request.topics:
        out = FetchTopic(topic.topic)
        topics.append(out)
        for fp in topic.partitions:
            result = FetchPartition(fp.partition)
            out.partitions.append(result)
            partition = services.replicas.get(topic.topic, fp.partition)
            if partition is None:
                result.error_code = not_hosted(services, topic.topic, fp.partition)
                result.records = b""
                errors = True
                continue
            if not partition.is_leader:
                result.error_code = ErrorCode.not_leader_or_follower
            elif fp.current_leader_epoch > partition.leader_epoch:
                result.error_code = ErrorCode.unknown_leader_epoch
            elif 0 <= fp.current_leader_epoch < partition.leader_epoch:
                result.error_code = ErrorCode.fenced_leader_epoch
            log = partition.log
            result.high_watermark = partition.high_watermark
            result.last_stable_offset = partition.high_watermark
            result.log_start_offset = log.log_start_offset
            if read_committed:
                result.aborted = []
            if result.error_code != ErrorCode.none:
                result.records = b""
                errors = True
                continue
            try:
                region = partition.read(
                    fp.fetch_offset,
                    min(fp.partition_max_bytes, remaining),
                    min_one_batch=first_with_data,
                )
            except STORAGE_ERRORS as e:
                result.error_code = error_code(e)
                result.records = b""
                errors = True
                continue
            result.records = region
            if found is not None:
                found.append((partition, fp.fetch_offset, region, fp.partition_max_bytes))
            if region.size:
                first_with_data = False
                remaining = max(remaining - region.size, 0)
                total += region.size
    return topics, -1 if errors else total
