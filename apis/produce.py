"""Produce: validate each partition's batch, then append it to the partition's leader log;
with acks=all, answer once the high watermark covers every append (the produce purgatory).

Validation walks every record (in C) and decompresses compressed batches. When a request
holds a compressed or large batch, or one the topic recompresses, its validation runs in a
worker thread (the codecs and the walker release the GIL) and the handler answers with a
future, so the event loop keeps serving other connections. Offsets are assigned and bytes
written afterwards, on the event loop; a connection has one request in flight, so a
producer's batches still reach the log in order.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from gregor.apis.context import CloseConnection, RawResponse, RequestContext, Services, later
from gregor.apis.errors import STORAGE_ERRORS, error_code, not_hosted
from gregor.apis.leader_hints import leader_hint
from gregor.controller.topics import INTERNAL_TOPICS
from gregor.log.validator import (
    CODEC_BY_NAME,
    Budget,
    RecordErrors,
    Validated,
    validate,
)
from gregor.replica.delayed_produce import ReplicationWait
from gregor.replica.partition import Partition
from gregor.wire.compression import NONE
from gregor.wire.leader_hints import NodeEndpoint
from gregor.wire.produce import (
    PartitionData,
    PartitionResult,
    ProduceRequest,
    TopicData,
    check_records,
    encode_produce_response,
    throttle_position,
)

logger = logging.getLogger(__name__)

# Uncompressed batches above this size are walked off the event loop (about 0.1 ms of C).
_INLINE_MAX_BYTES = 256 << 10
# Two workers: as many as there are cores to spare, and a bound on the memory that requests
# being decompressed hold at once (each at most MAX_DECOMPRESSED_PER_REQUEST).
_workers = ThreadPoolExecutor(max_workers=2, thread_name_prefix="produce-validation")
_queued: set[Future[list[Validated | Exception]]] = set()


def cancel_queued_validations() -> None:
    """At shutdown: validations not started yet are dropped (their requests were never
    answered, so nothing is lost), else the process would work through the backlog a flood
    of heavy requests left before it could exit."""
    for work in list(_queued):
        work.cancel()


@dataclass(slots=True)
class _Append:
    topic: str
    partition: Partition
    records: memoryview
    result: PartitionResult
    heavy: bool
    transactional: bool
    producer_id: int
    producer_epoch: int
    # KIP-890: the guard of this partition's verification, which a marker voids.
    guard: object | None = None


def handle(services: Services, ctx: RequestContext, request: ProduceRequest) -> Any:
    """Return the response, a future of it, or None for acks=0 (which is never answered)."""
    acks = request.acks
    now_ms = services.now_ms()
    results: list[tuple[TopicData, list[PartitionResult]]] = []
    appends: list[_Append] = []
    for topic in request.topics:
        partitions = []
        if topic.topic_id is not None:  # v13+ (KIP-516)
            topic.name = services.metadata.topic_name(topic.topic_id) or ""
        for data in topic.partitions:
            result = PartitionResult(data.index)
            if not topic.name and topic.topic_id is not None:
                result.error_code = ErrorCode.unknown_topic_id
                append = None
            else:
                append = _admit(services, ctx.api_version, topic.name, data, acks, result)
            if append is not None:
                appends.append(append)
            partitions.append(result)
        results.append((topic, partitions))
    if request.transactional_id is None and any(a.transactional for a in appends):
        # Kafka answers the whole request so: transactional records need a transactional id.
        for _, partitions in results:
            for result in partitions:
                result.error_code = ErrorCode.transactional_id_authorization_failed
        return _respond(services, ctx, acks, results)
    # KIP-890 part 1: a producer's first transactional write to a partition goes in only
    # if the coordinator says the partition is in its ongoing transaction.
    unverified = [
        a
        for a in appends
        if a.transactional and not a.partition.log.producer_state.has_ongoing_txn(a.producer_id)
    ]
    if not unverified:
        return _write(services, ctx, request, results, appends, now_ms)
    if services.txn is None or request.transactional_id is None:
        for a in unverified:
            a.result.error_code = ErrorCode.invalid_txn_state
        verified = [a for a in appends if a not in unverified]
        return _write(services, ctx, request, results, verified, now_ms)
    return later(_verify(services, ctx, request, results, appends, unverified, now_ms))


async def _verify(
    services: Services,
    ctx: RequestContext,
    request: ProduceRequest,
    results: list[tuple[TopicData, list[PartitionResult]]],
    appends: list[_Append],
    unverified: list[_Append],
    now_ms: int,
) -> Any:
    """Ask the coordinator about the partitions of ``unverified``, then write what passed."""
    assert services.txn is not None and request.transactional_id is not None
    first = unverified[0]
    for a in unverified:
        a.guard = a.partition.log.producer_state.begin_verification(a.producer_id)
    try:
        errors = await services.txn.verify(
            request.transactional_id,
            first.producer_id,
            first.producer_epoch,
            [(a.topic, a.result.index) for a in unverified],
        )
    except Exception:
        # The coordinator could not be asked: a retriable error, as Kafka answers then.
        logger.exception("Verifying the transaction of %r failed", request.transactional_id)
        errors = {}
        default = ErrorCode.not_enough_replicas
    else:
        default = ErrorCode.invalid_txn_state
    refused = []
    for a in unverified:
        code = errors.get((a.topic, a.result.index), default)
        if code != ErrorCode.none:
            a.result.error_code = code
            refused.append(a)
            a.partition.log.producer_state.end_verification(a.producer_id, a.guard)
    answer = _write(
        services, ctx, request, results, [a for a in appends if a not in refused], now_ms
    )
    return await answer if isinstance(answer, asyncio.Future) else answer


def _write(
    services: Services,
    ctx: RequestContext,
    request: ProduceRequest,
    results: list[tuple[TopicData, list[PartitionResult]]],
    appends: list[_Append],
    now_ms: int,
) -> Any:
    """Validate and append ``appends``; the response, or a future of it."""
    acks = request.acks

    def finish(outcomes: list[Validated | Exception]) -> Any:
        waits: list[tuple[PartitionResult, ReplicationWait]] = []
        for append, outcome in zip(appends, outcomes, strict=True):
            end = _append(services, append, outcome, acks, now_ms)
            if end is not None and acks == -1:
                wait = ReplicationWait(append.partition, end)
                if wait.check(services.replicas.is_current):  # already replicated
                    append.result.error_code = wait.error
                else:
                    waits.append((append.result, wait))
        if not waits:
            return _respond(services, ctx, acks, results)

        def replicated() -> Any:
            for result, wait in waits:
                result.error_code = wait.error
            return _respond(services, ctx, acks, results)

        return services.replicas.wait_for_replication(
            [wait for _, wait in waits], request.timeout_ms, replicated
        )

    if not any(a.heavy for a in appends):
        return finish(_validate_all(appends, now_ms))
    loop = asyncio.get_running_loop()
    response: asyncio.Future[Any] = loop.create_future()

    def validated(work: asyncio.Future[list[Validated | Exception]]) -> None:
        if work.cancelled():
            response.set_exception(CloseConnection("the broker is shutting down"))
            return
        try:
            answer = finish(work.result())
        except Exception as e:  # CloseConnection for acks=0, or a bug: the dispatcher reports
            response.set_exception(e)
            return
        if isinstance(answer, asyncio.Future):  # waiting for replication
            answer.add_done_callback(lambda done: _forward(done, response))
        else:
            response.set_result(answer)

    queued = _workers.submit(_validate_all, appends, now_ms)
    _queued.add(queued)
    queued.add_done_callback(_queued.discard)
    work = asyncio.wrap_future(queued, loop=loop)
    work.add_done_callback(validated)
    return response


def _forward(done: asyncio.Future[Any], response: asyncio.Future[Any]) -> None:
    if done.cancelled():
        response.cancel()
    elif done.exception() is not None:
        response.set_exception(done.exception())  # type: ignore[arg-type]
    else:
        response.set_result(done.result())


def _admit(
    services: Services,
    version: int,
    topic: str,
    data: PartitionData,
    acks: int,
    result: PartitionResult,
) -> _Append | None:
    """Checks that need no record walk; the partition's append if they pass."""
    if acks not in (0, 1, -1):
        result.error_code = ErrorCode.invalid_required_acks
        return None
    partition = services.replicas.get(topic, data.index)
    if partition is None:
        result.error_code = not_hosted(services, topic, data.index)
        return None
    try:
        header = check_records(version, data.records)
    except STORAGE_ERRORS as e:
        _fail(result, e, topic, data.index)
        return None
    if topic in INTERNAL_TOPICS:
        result.error_code = ErrorCode.invalid_topic_exception
        result.error_message = f"Cannot append to internal topic {topic}"
        return None
    if not partition.is_leader:
        result.error_code = ErrorCode.not_leader_or_follower
        return None
    assert data.records is not None  # check_records refuses None
    config = partition.log.config
    recompressed = CODEC_BY_NAME.get(config.compression_type, header.compression)
    heavy = (
        header.compression != NONE
        or recompressed != header.compression
        or header.size > _INLINE_MAX_BYTES
    )
    return _Append(
        topic,
        partition,
        data.records,
        result,
        heavy,
        header.is_transactional,
        header.producer_id,
        header.producer_epoch,
    )


def _validate_all(appends: list[_Append], now_ms: int) -> list[Validated | Exception]:
    """Validate every partition's batch; one request shares one decompression budget.
    Touches no log state, so it may run in a worker thread."""
    outcomes: list[Validated | Exception] = []
    with Budget() as budget:
        for a in appends:
            try:
                config = a.partition.log.config
                outcomes.append(validate(a.records, config, now_ms, budget=budget))
            except STORAGE_ERRORS as e:
                # Kept as a value, so without its traceback and context: their frames would
                # hold this list (a cycle, freed only by the garbage collector) and the
                # decompressed bytes of a refused bomb, up to the whole budget, for as long.
                e.__context__ = None
                outcomes.append(e.with_traceback(None))
    return outcomes


def _append(
    services: Services, a: _Append, outcome: Validated | Exception, acks: int, now_ms: int
) -> int | None:
    """Append one partition's batch; return the offset the high watermark must reach for
    it to be replicated (None if nothing was appended)."""
    result, partition = a.result, a.partition
    if isinstance(outcome, Exception):
        _fail(result, outcome, a.topic, result.index)
        return None
    # The partition may have moved or gone while its batch was validated in a thread.
    if services.replicas.get(a.topic, result.index) is not partition or not partition.is_leader:
        result.error_code = ErrorCode.not_leader_or_follower
        return None
    if a.guard is not None and not partition.log.producer_state.end_verification(
        a.producer_id, a.guard
    ):
        # The transaction ended (a marker came) while the coordinator was asked.
        result.error_code = ErrorCode.invalid_txn_state
        return None
    min_isr = partition.log.config.min_insync_replicas
    if acks == -1 and len(partition.isr) < min_isr:
        result.error_code = ErrorCode.not_enough_replicas
        result.error_message = (
            f"The size of the current ISR {partition.isr} is insufficient to satisfy the "
            f"min.isr requirement of {min_isr} for partition {a.topic}-{result.index}"
        )
        return None
    try:
        appended = services.replicas.append_validated(partition, outcome, now_ms)
    except STORAGE_ERRORS as e:
        _fail(result, e, a.topic, result.index)
        return None
    result.base_offset = appended.first_offset
    result.log_start_offset = appended.log_start_offset
    result.log_append_time = appended.log_append_time
    metrics = services.metrics
    if metrics is not None:
        # The bytes as the client sent them (Kafka's BytesInPerSec); a retry's records
        # were counted when they were first appended.
        records = 0 if appended.duplicate else appended.record_count
        metrics.produced(a.topic, a.records.nbytes, records)
    return appended.last_offset + 1


def _fail(result: PartitionResult, e: Exception, topic: str, index: int) -> None:
    code = error_code(e)
    result.error_code = code
    result.error_message = str(e)
    if isinstance(e, RecordErrors):
        result.record_errors = e.record_errors
    logger.debug("Produce to %s-%d failed: %s (%s)", topic, index, code.name, e)


def _respond(
    services: Services,
    ctx: RequestContext,
    acks: int,
    results: list[tuple[TopicData, list[PartitionResult]]],
) -> Any:
    quota = services.quotas.produce
    if quota.enabled:  # the request's bytes count once it is done, as in Kafka
        delay = quota.record(ctx.user, ctx.client_id, ctx.size, services.now_ms())
        ctx.throttle_ms = max(ctx.throttle_ms, delay)
    if acks == 0:
        if any(p.error_code for _, partitions in results for p in partitions):
            # The client expects no answer; closing is the only way to tell it.
            raise CloseConnection("a produce request with acks=0 failed")
        return None
    version = ctx.api_version
    endpoints = _leader_hints(services, ctx.listener, results) if version >= 10 else None
    body = encode_produce_response(version, results, node_endpoints=endpoints)
    return RawResponse([body], len(body), throttle_position(version, len(body), endpoints))


def _leader_hints(
    services: Services, listener: str, results: list[tuple[TopicData, list[PartitionResult]]]
) -> list[NodeEndpoint]:
    """KIP-951 (v10+): partitions answered NOT_LEADER_OR_FOLLOWER name their current
    leader, when it is a live broker; returns those leaders' endpoints."""
    leaders: dict[int, NodeEndpoint] = {}
    for topic, partitions in results:
        for result in partitions:
            if result.error_code == ErrorCode.not_leader_or_follower:
                hint = leader_hint(services, listener, topic.name, result.index)
                if hint is not None:
                    leader, endpoint = hint
                    result.current_leader = leader
                    leaders[leader[0]] = endpoint
    return list(leaders.values())
