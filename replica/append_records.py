"""Produce's work (Kafka's ReplicaManager.appendRecords): validate each partition's batch,
then append it to the partition's leader log; with acks=all, answer once the high watermark
covers every append (the produce purgatory).

Validation walks every record (in C) and decompresses compressed batches. When a request
holds a compressed or large batch, or one the topic recompresses, its validation runs on
the ReplicaManager's validation pool (the codecs and the walker release the GIL) and the
answer is a future, so the event loop keeps serving other connections. Offsets are
assigned and bytes written afterwards, on the event loop; a connection has one request in
flight, so a producer's batches still reach the log in order.

The handler decodes the request (topic ids already resolved to names, "" if unknown) and
encodes the answer: ``respond(results, appends)``, called now or once the appends are done.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from kio.schema.errors import ErrorCode

from gregor.controller.metadata.topic_names import INTERNAL_TOPICS
from gregor.log.validator import CODEC_BY_NAME, Budget, RecordErrors, Validated, validate
from gregor.replica.delayed_produce import ReplicationWait
from gregor.replica.errors import STORAGE_ERRORS, error_code
from gregor.replica.partition import Partition
from gregor.replica.purgatory import OperationFailed
from gregor.wire.compression import NONE
from gregor.wire.produce import (
    PartitionData,
    PartitionResult,
    ProduceRequest,
    TopicData,
    check_records,
)

if TYPE_CHECKING:
    from gregor.replica.manager import ReplicaManager

logger = logging.getLogger(__name__)

R = TypeVar("R")
# Each topic of the request with its partitions' results, in the request's order.
Results = list[tuple[TopicData, list[PartitionResult]]]
# KIP-890 part 1, the transaction coordinator's check: (transactional id, producer id,
# producer epoch, partitions) -> each partition's error (NONE: in the ongoing transaction).
Verify = Callable[
    [str, int, int, list[tuple[str, int]]], Awaitable[dict[tuple[str, int], ErrorCode]]
]

# Uncompressed batches above this size are walked off the event loop (about 0.1 ms of C).
INLINE_MAX_BYTES = 256 << 10


@dataclass(slots=True)
class PartitionAppend:
    """One partition's batch of a produce; ``appended_records`` is set once it is appended
    (its record count, 0 for a retry's duplicate)."""

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
    appended_records: int | None = None


ProduceRespond = Callable[[Results, list[PartitionAppend]], R]


def append_records(
    replicas: ReplicaManager,
    request: ProduceRequest,
    version: int,
    verify: Verify | None,
    respond: ProduceRespond[R],
) -> R | asyncio.Future[R]:
    """Append ``request``'s batches; ``respond``'s answer, or a future of it. ``verify``:
    the transaction coordinator's check (None: none is wired in, and a first
    transactional write to a partition is INVALID_TXN_STATE)."""
    acks = request.acks
    now_ms = replicas.now_ms()
    results: Results = []
    appends: list[PartitionAppend] = []
    for topic in request.topics:
        partitions = []
        for data in topic.partitions:
            result = PartitionResult(data.index)
            if not topic.name and topic.topic_id is not None:
                result.error_code = ErrorCode.unknown_topic_id
            else:
                append = _admit(replicas, version, topic.name, data, acks, result)
                if append is not None:
                    appends.append(append)
            partitions.append(result)
        results.append((topic, partitions))
    if request.transactional_id is None and any(a.transactional for a in appends):
        # Kafka answers the whole request so: transactional records need a transactional id.
        for _, partitions in results:
            for result in partitions:
                result.error_code = ErrorCode.transactional_id_authorization_failed
        return respond(results, [])
    # KIP-890 part 1: a producer's first transactional write to a partition goes in only
    # if the coordinator says the partition is in its ongoing transaction.
    unverified = [
        a
        for a in appends
        if a.transactional and not a.partition.log.producer_state.has_ongoing_txn(a.producer_id)
    ]
    if not unverified:
        return _write(replicas, request, results, appends, now_ms, respond)
    if verify is None or request.transactional_id is None:
        for a in unverified:
            a.result.error_code = ErrorCode.invalid_txn_state
        verified = [a for a in appends if a not in unverified]
        return _write(replicas, request, results, verified, now_ms, respond)
    return asyncio.ensure_future(
        _verify(replicas, request, verify, results, appends, unverified, now_ms, respond)
    )


async def _verify(
    replicas: ReplicaManager,
    request: ProduceRequest,
    verify: Verify,
    results: Results,
    appends: list[PartitionAppend],
    unverified: list[PartitionAppend],
    now_ms: int,
    respond: ProduceRespond[R],
) -> R:
    """Ask the coordinator about the partitions of ``unverified``, then write what passed."""
    assert request.transactional_id is not None
    first = unverified[0]
    for a in unverified:
        a.guard = a.partition.log.producer_state.begin_verification(a.producer_id)
    try:
        errors = await verify(
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
    written = [a for a in appends if a not in refused]
    answer = _write(replicas, request, results, written, now_ms, respond)
    return await answer if isinstance(answer, asyncio.Future) else answer


def _write(
    replicas: ReplicaManager,
    request: ProduceRequest,
    results: Results,
    appends: list[PartitionAppend],
    now_ms: int,
    respond: ProduceRespond[R],
) -> R | asyncio.Future[R]:
    """Validate and append ``appends``; the answer, or a future of it."""
    acks = request.acks

    def finish(outcomes: list[Validated | Exception]) -> R | asyncio.Future[R]:
        waits: list[tuple[PartitionResult, ReplicationWait]] = []
        for append, outcome in zip(appends, outcomes, strict=True):
            end = _append(replicas, append, outcome, acks, now_ms)
            if end is not None and acks == -1:
                wait = ReplicationWait(append.partition, end)
                if wait.check(replicas.is_current):  # already replicated
                    append.result.error_code = wait.outcome
                else:
                    waits.append((append.result, wait))
        if not waits:
            return respond(results, appends)

        def replicated() -> R:
            for result, wait in waits:
                result.error_code = wait.outcome
            return respond(results, appends)

        return replicas.wait_for_replication(
            [wait for _, wait in waits], request.timeout_ms, replicated
        )

    if not any(a.heavy for a in appends):
        return finish(_validate_all(appends, now_ms))
    loop = asyncio.get_running_loop()
    response: asyncio.Future[R] = loop.create_future()

    def validated(work: asyncio.Future[list[Validated | Exception]]) -> None:
        if work.cancelled():  # the pool was shut down: its request is never answered
            response.set_exception(OperationFailed("the broker is shutting down"))
            return
        try:
            answer = finish(work.result())
        except Exception as e:  # the handler's (acks=0 closes the connection), or a bug
            response.set_exception(e)
            return
        if isinstance(answer, asyncio.Future):  # waiting for replication
            answer.add_done_callback(lambda done: _forward(done, response))
        else:
            response.set_result(answer)

    try:
        work = loop.run_in_executor(replicas.validation_pool, _validate_all, appends, now_ms)
    except RuntimeError:  # the pool was shut down (the broker is stopping)
        response.set_exception(OperationFailed("the broker is shutting down"))
        return response
    work.add_done_callback(validated)
    return response


def _forward(done: asyncio.Future[R], response: asyncio.Future[R]) -> None:
    if done.cancelled():
        response.cancel()
    elif (exc := done.exception()) is not None:
        response.set_exception(exc)
    else:
        response.set_result(done.result())


def _admit(
    replicas: ReplicaManager,
    version: int,
    topic: str,
    data: PartitionData,
    acks: int,
    result: PartitionResult,
) -> PartitionAppend | None:
    """Checks that need no record walk; the partition's append if they pass."""
    if acks not in (0, 1, -1):
        result.error_code = ErrorCode.invalid_required_acks
        return None
    partition = replicas.get(topic, data.index)
    if partition is None:
        result.error_code = replicas.not_hosted(topic, data.index)
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
        or header.size > INLINE_MAX_BYTES
    )
    return PartitionAppend(
        topic,
        partition,
        data.records,
        result,
        heavy,
        header.is_transactional,
        header.producer_id,
        header.producer_epoch,
    )


def _validate_all(appends: list[PartitionAppend], now_ms: int) -> list[Validated | Exception]:
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
    replicas: ReplicaManager,
    a: PartitionAppend,
    outcome: Validated | Exception,
    acks: int,
    now_ms: int,
) -> int | None:
    """Append one partition's batch; return the offset the high watermark must reach for
    it to be replicated (None if nothing was appended)."""
    result, partition = a.result, a.partition
    if isinstance(outcome, Exception):
        _fail(result, outcome, a.topic, result.index)
        return None
    # The partition may have moved or gone while its batch was validated in a thread.
    if replicas.get(a.topic, result.index) is not partition or not partition.is_leader:
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
        appended = replicas.append_validated(partition, outcome, now_ms)
    except STORAGE_ERRORS as e:
        _fail(result, e, a.topic, result.index)
        return None
    result.base_offset = appended.first_offset
    result.log_start_offset = appended.log_start_offset
    result.log_append_time = appended.log_append_time
    # A retry's records were counted when they were first appended.
    a.appended_records = 0 if appended.duplicate else appended.record_count
    return appended.last_offset + 1


def _fail(result: PartitionResult, e: Exception, topic: str, index: int) -> None:
    code = error_code(e)
    result.error_code = code
    result.error_message = str(e)
    if isinstance(e, RecordErrors):
        result.record_errors = e.record_errors
    logger.debug("Produce to %s-%d failed: %s (%s)", topic, index, code.name, e)
