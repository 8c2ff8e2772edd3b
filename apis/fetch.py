"""Fetch: whole batches up to the high watermark (for followers, the log end), long-polled
through the purgatory. One path for consumers and followers (replica_id >= 0): a
follower's fetch offset is its log end, which moves the high watermark and the ISR."""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from apis.context import RawResponse, RequestContext, Services
from apis.errors import STORAGE_ERRORS, error_code, not_hosted
from log.errors import OffsetOutOfRangeError
from log.log import ReadResult
from replica.delayed_fetch import DelayedFetch, PartitionFetch
from replica.fetch_session import FetchSession, FetchSessions
from replica.partition import Partition, check_leader
from wire.fetch import (
    FetchPartition,
    FetchPartitionRequest,
    FetchRequest,
    FetchTopic,
    FetchTopicRequest,
    encode_fetch_response,
)

# What a read found per partition, kept in case the fetch parks:
# (partition, fetch offset, region read, the partition's byte limit).
_Found = tuple[Partition, int, ReadResult, int]


def handle(
    services: Services, ctx: RequestContext, request: FetchRequest
) -> RawResponse | asyncio.Future:
    wanted = request.topics
    session: FetchSession | None = None
    if ctx.api_version >= 7 and request.replica_id >= 0 and request.session_epoch != -1:
        session, error = _session(services.replicas.fetch_sessions, request)
        if session is None:
            return _answer(ctx, [], error)
        wanted = _session_topics(session)
    elif ctx.api_version >= 7 and request.session_id != 0:
        if request.replica_id < 0:  # consumers get no sessions
            return _answer(ctx, [], ErrorCode.fetch_session_id_not_found)
        services.replicas.fetch_sessions.remove(request.session_id)  # closed by the follower
    full = session is None or request.session_epoch == 0

    def answer(topics: list[FetchTopic]) -> RawResponse:
        if session is None:
            return _answer(ctx, topics)
        return _answer(ctx, _changed(session, topics, full), session_id=session.id)

    found: list[_Found] = []
    topics, available = _read(services, request, wanted, found)
    # Answered at once, as Kafka does: no wait asked, enough data, an error, or nothing to
    # wait for (the Java consumer sends a fetch of no partitions when it closes).
    if request.max_wait_ms <= 0 or available >= request.min_bytes or available < 0 or not found:
        return answer(topics)
    delayed = DelayedFetch(
        [PartitionFetch.after_read(*f, follower=request.replica_id >= 0) for f in found],
        request.min_bytes,
        lambda: answer(_read(services, request, wanted, None)[0]),
        f"fetch from {ctx.client_id!r} at {ctx.peer}",
    )
    if delayed.ready():
        return answer(topics)
    return services.replicas.fetch_purgatory.park(delayed.keys, request.max_wait_ms, delayed)


def _answer(
    ctx: RequestContext,
    topics: list[FetchTopic],
    error: ErrorCode = ErrorCode.none,
    session_id: int = 0,
) -> RawResponse:
    parts, size = encode_fetch_response(
        ctx.api_version, topics, error_code=error, session_id=session_id
    )
    return RawResponse(parts, size)


def _session(
    sessions: FetchSessions, request: FetchRequest
) -> tuple[FetchSession | None, ErrorCode]:
    """A follower's fetch session (KIP-227): a new one (epoch 0), or its existing one at the
    epoch it expects next, updated with the partitions the request names or forgets."""
    if request.session_id == 0:
        if request.session_epoch != 0:
            return None, ErrorCode.invalid_fetch_session_epoch
        session = sessions.new(request.replica_id)
    else:
        found = sessions.get(request.session_id)
        if found is None or found.replica_id != request.replica_id:
            return None, ErrorCode.fetch_session_id_not_found
        if request.session_epoch == 0:  # close it and start over
            sessions.remove(found.id)
            session = sessions.new(request.replica_id)
        elif request.session_epoch != found.epoch:
            return None, ErrorCode.invalid_fetch_session_epoch
        else:
            session = found
            session.epoch += 1
    session.update(request.topics, request.forgotten)
    return session, ErrorCode.none


def _session_topics(session: FetchSession) -> list[FetchTopicRequest]:
    """Every partition of the session, with its latest fetch state, grouped by topic."""
    topics: dict[str, list[FetchPartitionRequest]] = {}
    for (topic, _), cached in session.partitions.items():
        topics.setdefault(topic, []).append(cached.request)
    return [FetchTopicRequest(topic, partitions) for topic, partitions in topics.items()]


def _changed(session: FetchSession, topics: list[FetchTopic], full: bool) -> list[FetchTopic]:
    """What a session's answer names: every partition in a full one; else those with data,
    an error, a diverging epoch, or a new high watermark or log start offset."""
    out = []
    for topic in topics:
        kept = []
        for p in topic.partitions:
            cached = session.partitions.get((topic.name, p.index))
            moved = cached is None or cached.changed(p.high_watermark, p.log_start_offset)
            records = p.records
            has_data = records is not None and (
                len(records) if isinstance(records, bytes) else records.size
            )
            if full or moved or has_data or p.error_code or p.diverging_epoch is not None:
                kept.append(p)
        if kept:
            out.append(FetchTopic(topic.name, kept))
    return out


def _read(
    services: Services,
    request: FetchRequest,
    wanted: list[FetchTopicRequest],
    found: list[_Found] | None,
) -> tuple[list[FetchTopic], int]:
    """Read every requested partition; return the topics and the bytes found (-1: an error
    or a diverging epoch, answered at once). Each partition read without error goes to
    ``found``; only then (the first read of a request) is a follower's fetch recorded."""
    remaining = min(request.max_bytes, services.config["fetch.max.bytes"])
    total = 0
    errors = False
    first_with_data = True
    topics = []
    read_committed = request.isolation_level == 1
    replica = request.replica_id
    follower = replica >= 0
    for topic in wanted:
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
            result.error_code = check_leader(partition, fp.current_leader_epoch)
            if not result.error_code and follower and replica not in partition.followers:
                result.error_code = ErrorCode.not_leader_or_follower
            log = partition.log
            region = None
            try:
                if result.error_code == ErrorCode.none and fp.last_fetched_epoch >= 0:
                    result.diverging_epoch = _diverging_epoch(partition, fp)
                if result.error_code == ErrorCode.none and result.diverging_epoch is None:
                    region = partition.read(
                        fp.fetch_offset,
                        min(fp.partition_max_bytes, remaining),
                        min_one_batch=first_with_data,
                        follower=follower,
                    )
                    if follower and found is not None:  # read: the offset is in its log
                        services.replicas.update_follower_fetch(
                            partition, replica, fp.fetch_offset
                        )
            except STORAGE_ERRORS as e:
                result.error_code = error_code(e)
            result.high_watermark = partition.high_watermark
            result.last_stable_offset = partition.high_watermark
            result.log_start_offset = log.log_start_offset
            if read_committed:
                result.aborted = []
            if region is None or result.error_code != ErrorCode.none:
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


def _diverging_epoch(partition: Partition, fp: FetchPartitionRequest) -> tuple[int, int] | None:
    """KIP-320: the largest epoch at or below the fetcher's last fetched one and its end
    offset here, when the fetcher's log diverged from this one (it has that epoch beyond
    where this log ends it, or an epoch this log lacks)."""
    log = partition.log
    if (
        fp.last_fetched_epoch == log.leader_epochs.latest_epoch
        and log.log_start_offset <= fp.fetch_offset <= log.log_end_offset
    ):
        return None  # the common case: the fetcher is on this log's latest epoch
    epoch, end = log.end_offset_for_epoch(fp.last_fetched_epoch)
    if epoch < 0 or end < 0:
        raise OffsetOutOfRangeError(
            f"the end offset of the last fetched epoch {fp.last_fetched_epoch} is not known"
        )
    if fp.fetch_offset < log.log_start_offset:
        raise OffsetOutOfRangeError(
            f"offset {fp.fetch_offset} is below the log start offset {log.log_start_offset}"
        )
    if epoch < fp.last_fetched_epoch or end < fp.fetch_offset:
        return epoch, end
    return None
