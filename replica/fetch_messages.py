"""Fetch's work (Kafka's ReplicaManager.fetchMessages): whole batches up to the high
watermark (read_committed: the last stable offset, with the aborted transactions of the
range; followers: the log end), long-polled through the fetch purgatory. One path for
consumers and followers (replica_id >= 0): a follower's fetch offset is its log end, which
moves the high watermark and the ISR. Both may fetch in incremental sessions (KIP-227).

The handler decodes the request (topic ids already resolved to names) and encodes the
answer: ``respond(topics, error, session id)``, called now or when a parked fetch completes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, TypeVar

from kio.schema.errors import ErrorCode

from gregor.log.errors import OffsetOutOfRangeError
from gregor.log.log import ReadResult
from gregor.replica.delayed_fetch import DelayedFetch, PartitionFetch, SessionFetch
from gregor.replica.errors import STORAGE_ERRORS, error_code
from gregor.replica.fetch_session import FetchSession, FetchSessions
from gregor.replica.partition import Partition, check_leader
from gregor.wire.fetch import (
    FetchPartition,
    FetchPartitionRequest,
    FetchRequest,
    FetchTopic,
    FetchTopicRequest,
)

if TYPE_CHECKING:
    from gregor.replica.manager import ReplicaManager

R = TypeVar("R")
# The answer's partitions, its top-level error, its session id (0: none).
FetchRespond = Callable[[list[FetchTopic], ErrorCode, int], R]

# KIP-227 session epochs of a full request: open a new session, or fetch without one.
FULL_EPOCH = 0
FINAL_EPOCH = -1
# What a read found per partition, kept in case the fetch parks:
# (partition, fetch offset, region read, the partition's byte limit).
_Found = tuple[Partition, int, ReadResult, int]


def fetch_messages(
    replicas: ReplicaManager,
    request: FetchRequest,
    version: int,
    max_bytes: int,
    origin: Callable[[], str],
    respond: FetchRespond[R],
    readable: Callable[[str], bool] | None = None,
) -> R | asyncio.Future[R]:
    """Read ``request``'s partitions, at most ``max_bytes`` (the handler's bound: the
    request's, fetch.max.bytes and a consumer's quota), and answer through ``respond`` now
    or once the fetch, parked, completes. ``origin()`` names the fetcher in the purgatory's
    log lines (made only for a fetch that parks). ``readable``, with an authorizer: whether
    the consumer may read a topic; the others' partitions, the request's or its session's,
    are answered TOPIC_AUTHORIZATION_FAILED unread (Kafka's check in handleFetchRequest)."""
    wanted = request.topics
    session: FetchSession | None = None
    full = True
    sessions = replicas.fetch_sessions
    if version >= 7 and request.session_epoch in (FULL_EPOCH, FINAL_EPOCH):
        if request.session_id != 0:  # a full request closes the session it names
            sessions.remove(request.session_id)
        if request.session_epoch == FULL_EPOCH:
            size = sum(len(t.partitions) for t in request.topics)
            session = sessions.new(request.replica_id, version >= 13, size)
            if session is not None:
                session.update(_resolved(request.topics), [])
    elif version >= 7:
        session, error = _incremental(sessions, request, version)
        if session is None:
            return respond([], error, 0)
        full = False
        wanted = _session_topics(session) + [t for t in request.topics if not t.topic]
    refused: list[FetchTopic] = []
    if readable is not None:
        wanted, refused = _authorized(wanted, readable)
    min_bytes = min(request.min_bytes, max_bytes)
    if session is not None and request.replica_id >= 0:
        return _follower_session_fetch(
            replicas, request, session, full, min_bytes, max_bytes, origin, respond
        )
    session_id = 0 if session is None else session.id

    def answer(topics: list[FetchTopic]) -> R:
        if refused:
            topics = topics + refused
        if session is not None:
            topics = _changed(session, topics, full)
        return respond(topics, ErrorCode.none, session_id)

    found: list[_Found] = []
    topics, available = _read(replicas, request, wanted, found, max_bytes)
    # Answered at once, as Kafka does: no wait asked, enough data, an error, or nothing to
    # wait for (the Java consumer sends a fetch of no partitions when it closes).
    if request.max_wait_ms <= 0 or available >= min_bytes or available < 0 or not found:
        return answer(topics)
    delayed = DelayedFetch(
        [
            PartitionFetch.after_read(
                *f, follower=request.replica_id >= 0, read_committed=request.isolation_level == 1
            )
            for f in found
        ],
        min_bytes,
        lambda: answer(_read(replicas, request, wanted, None, max_bytes)[0]),
        f"fetch from {origin()}",
        refresh=(
            (lambda changed: answer(_reread(replicas, request, wanted, topics, changed, max_bytes)))
            if available == 0
            else None
        ),
    )
    if delayed.ready():
        return answer(topics)
    return replicas.fetch_purgatory.park(delayed.keys, request.max_wait_ms, delayed)


def _follower_session_fetch(
    replicas: ReplicaManager,
    request: FetchRequest,
    session: FetchSession,
    full: bool,
    min_bytes: int,
    max_bytes: int,
    origin: Callable[[], str],
    respond: FetchRespond[R],
) -> R | asyncio.Future[R]:
    """A follower's fetch in its session: only the session's dirty partitions (named by the
    request, or changed since its last answer) are read, and when none has data it parks
    on the session, woken by a change of any of its partitions (``FetchSessions.touch``)."""
    session.last_fetch_ms = replicas.now_ms()
    wanted = _dirty_topics(session) + [t for t in request.topics if not t.topic]
    topics, available = _read(replicas, request, wanted, [], max_bytes)

    def answer(fresh: list[FetchTopic]) -> R:
        answered = _settle(replicas, session, topics + fresh)
        return respond(_changed(session, answered, full), ErrorCode.none, session.id)

    if request.max_wait_ms <= 0 or available >= min_bytes or available < 0:
        return answer([])

    def read(keys: list[tuple[str, int]] | None) -> tuple[list[FetchTopic], int]:
        return _read(replicas, request, _dirty_topics(session, keys), None, max_bytes)

    delayed = SessionFetch(session, min_bytes, read, answer, f"fetch from {origin()}")
    return replicas.fetch_purgatory.park([session], request.max_wait_ms, delayed)


def _dirty_topics(
    session: FetchSession, keys: list[tuple[str, int]] | None = None
) -> list[FetchTopicRequest]:
    """The session's partitions of ``keys`` (None: its dirty ones, which it forgets as
    read), with their latest fetch state, grouped by topic."""
    topics: dict[str, FetchTopicRequest] = {}
    for key in session.take_dirty() if keys is None else keys:
        cached = session.partitions[key]
        entry = topics.get(key[0])
        if entry is None:
            entry = topics[key[0]] = FetchTopicRequest(key[0], [], cached.topic_id)
        entry.partitions.append(cached.request)
    return list(topics.values())


def _settle(
    replicas: ReplicaManager, session: FetchSession, topics: list[FetchTopic]
) -> list[FetchTopic]:
    """Before answering a follower's session: a partition read with nothing to send, at
    the log end, in the ISR, and unchanged since it was read becomes quiet (not read again until it
    changes or the follower names it); any other stays dirty. Merges a partition read
    twice (first read, then again when it changed) into its last read."""
    latest: dict[tuple[str, int], FetchPartition] = {}
    by_topic: dict[str, FetchTopic] = {}
    for topic in topics:
        by_topic.setdefault(topic.name, FetchTopic(topic.name, [], topic.topic_id))
        for p in topic.partitions:
            latest[(topic.name, p.index)] = p
    for (name, index), p in latest.items():
        by_topic[name].partitions.append(p)
        key = (name, index)
        cached = session.partitions.get(key)
        if cached is None or key in session.dirty:
            continue
        records = p.records  # never None here: a read sets b"" or a region
        size = len(records) if isinstance(records, bytes) else records.size  # type: ignore[union-attr]
        partition = replicas.get(name, index)
        if (
            p.error_code == ErrorCode.none
            and p.diverging_epoch is None
            and not size
            and partition is not None
            and cached.request.fetch_offset == partition.log.log_end_offset
            and session.replica_id in partition.isr  # else each fetch may let it join
        ):
            cached.quiet = True
        else:
            session.dirty.add(key)
    return [t for t in by_topic.values() if t.partitions]


def _resolved(topics: list[FetchTopicRequest]) -> list[FetchTopicRequest]:
    return [t for t in topics if t.topic]


def _incremental(
    sessions: FetchSessions, request: FetchRequest, version: int
) -> tuple[FetchSession | None, ErrorCode]:
    """The session an incremental request (KIP-227) continues, at the epoch it expects
    next, updated with the partitions the request names or forgets (Kafka's
    FetchManager.newContext)."""
    session = sessions.get(request.session_id)
    if session is None or session.replica_id != request.replica_id:
        return None, ErrorCode.fetch_session_id_not_found
    if request.session_epoch != session.epoch:
        return None, ErrorCode.invalid_fetch_session_epoch
    if session.uses_topic_ids != (version >= 13):
        return None, ErrorCode.fetch_session_topic_id_error
    session.next_epoch()
    session.update(_resolved(request.topics), request.forgotten)
    return session, ErrorCode.none


def _authorized(
    wanted: list[FetchTopicRequest], readable: Callable[[str], bool]
) -> tuple[list[FetchTopicRequest], list[FetchTopic]]:
    """``wanted`` without the topics ``readable`` refuses, and those topics' answers. A topic
    id this broker does not know (no name) stays, to be answered UNKNOWN_TOPIC_ID first."""
    allowed: list[FetchTopicRequest] = []
    refused: list[FetchTopic] = []
    verdicts: dict[str, bool] = {}
    for topic in wanted:
        name = topic.topic
        if not name:
            allowed.append(topic)
            continue
        verdict = verdicts.get(name)
        if verdict is None:
            verdict = verdicts[name] = readable(name)
        if verdict:
            allowed.append(topic)
        else:
            refused.append(
                FetchTopic(
                    name,
                    [
                        FetchPartition(
                            fp.partition, ErrorCode.topic_authorization_failed, records=b""
                        )
                        for fp in topic.partitions
                    ],
                    topic.topic_id,
                )
            )
    return allowed, refused


def _session_topics(session: FetchSession) -> list[FetchTopicRequest]:
    """Every partition of the session, with its latest fetch state, grouped by topic."""
    topics: dict[str, FetchTopicRequest] = {}
    for (topic, _), cached in session.partitions.items():
        entry = topics.get(topic)
        if entry is None:
            entry = topics[topic] = FetchTopicRequest(topic, [], cached.topic_id)
        entry.partitions.append(cached.request)
    return list(topics.values())


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
            out.append(FetchTopic(topic.name, kept, topic.topic_id))
    return out


def _read(
    replicas: ReplicaManager,
    request: FetchRequest,
    wanted: list[FetchTopicRequest],
    found: list[_Found] | None,
    max_bytes: int,
) -> tuple[list[FetchTopic], int]:
    """Read every requested partition; return the topics and the bytes found (-1: an error
    or a diverging epoch, answered at once). Each partition read without error goes to
    ``found``; only then (the first read of a request) is a follower's fetch recorded."""
    remaining = max_bytes
    total = 0
    errors = False
    first_with_data = True
    topics = []
    read_committed = request.isolation_level == 1
    replica = request.replica_id
    follower = replica >= 0
    for topic in wanted:
        out = FetchTopic(topic.topic, topic_id=topic.topic_id)
        topics.append(out)
        unknown_id = topic.topic_id is not None and not _id_matches(replicas, topic)
        for fp in topic.partitions:
            result = FetchPartition(fp.partition)
            out.partitions.append(result)
            partition = None if unknown_id else replicas.get(topic.topic, fp.partition)
            if partition is None:
                result.error_code = (
                    ErrorCode.unknown_topic_id
                    if unknown_id
                    else replicas.not_hosted(topic.topic, fp.partition)
                )
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
                        read_committed=read_committed,
                    )
                    if follower and found is not None:  # read: the offset is in its log
                        replicas.update_follower_fetch(
                            partition, replica, fp.fetch_offset, fp.log_start_offset
                        )
            except STORAGE_ERRORS as e:
                result.error_code = error_code(e)
            result.high_watermark = partition.high_watermark
            result.last_stable_offset = partition.last_stable_offset()
            result.log_start_offset = log.log_start_offset
            if read_committed:
                # The aborted transactions with data in the region (clients skip them).
                result.aborted = (
                    log.aborted_transactions(fp.fetch_offset, region) if region is not None else []
                )
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


def _reread(
    replicas: ReplicaManager,
    request: FetchRequest,
    wanted: list[FetchTopicRequest],
    first: list[FetchTopic],
    changed: set[Hashable],
    max_bytes: int,
) -> list[FetchTopic]:
    """The first read's answer, which found no data, with the ``changed`` partitions read
    again: the same answer as reading all again, as the others are as they were read."""
    if not changed:
        return first
    subset = []
    for topic in wanted:
        parts = [fp for fp in topic.partitions if (topic.topic, fp.partition) in changed]
        if parts:
            subset.append(FetchTopicRequest(topic.topic, parts, topic.topic_id))
    fresh = {
        (topic.name, p.index): p
        for topic in _read(replicas, request, subset, None, max_bytes)[0]
        for p in topic.partitions
    }
    return [
        FetchTopic(
            topic.name,
            [fresh.get((topic.name, p.index), p) for p in topic.partitions],
            topic.topic_id,
        )
        for topic in first
    ]


def _id_matches(replicas: ReplicaManager, topic: FetchTopicRequest) -> bool:
    """Whether the topic the request names by id is still the one of that name (a session
    may outlive a topic deleted and created again)."""
    metadata = replicas.metadata
    info = None if metadata is None else metadata.topics.get(topic.topic)
    return info is not None and info.topic_id == topic.topic_id


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
