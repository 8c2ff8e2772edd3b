"""ShareFetch and ShareAcknowledge (KIP-932) on the share-partition leader, as Kafka 4.1's
handleShareFetchRequest and handleShareAcknowledgeRequest: the gate (``group.share.enable``),
READ on the group then on each topic, the member's share session, the acknowledgements
(applied and written first), then acquisition from the session's partitions
(replica/share_partition_manager.py), parked while there is nothing to acquire. The records
answered are the log's batches holding the acquired records, sent from the segment file."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from gregor.apis.acl import authorize
from gregor.apis.context import (
    NO_THROTTLE,
    RawResponse,
    RequestContext,
    Services,
    build,
    later,
    nested,
)
from gregor.apis.leader_hints import LEADER_ERRORS, leader_hint
from gregor.controller.acls.model import AclOperation, ResourceType
from gregor.ratelimit import RateLimitedLog
from gregor.replica.delayed_share_fetch import DelayedShareFetch
from gregor.replica.share_partition import AcknowledgementBatch
from gregor.replica.share_partition_manager import SharePartitionManager, ShareWindow
from gregor.replica.share_session import FINAL_EPOCH, INITIAL_EPOCH, ShareSession
from gregor.wire.leader_hints import NodeEndpoint
from gregor.wire.schema import response_type
from gregor.wire.share_fetch import SharePartitionData, encode_share_fetch_response
from gregor.wire.versions import SHARE_ACKNOWLEDGE

# A client that keeps sending a stale session epoch or bad acknowledgements must not fill
# the log: a line per kind every 10 s, with the count of those left out.
limited_log = RateLimitedLog(logging.getLogger(__name__))

ZERO_UUID = uuid.UUID(int=0)
# (topic id, partition) -> its answer so far
Answers = dict[tuple[uuid.UUID, int], SharePartitionData]


def handle_share_fetch(services: Services, ctx: RequestContext, request: Any) -> Any:
    manager = _admitted(services, ctx, request)
    if isinstance(manager, ErrorCode):
        return _fetch_error(manager)
    acks = _acknowledgements(request.topics)
    epoch = request.share_session_epoch
    if epoch == INITIAL_EPOCH and acks:
        return _fetch_error(ErrorCode.invalid_request)
    return later(_share_fetch(services, ctx, manager, request, acks))


async def _share_fetch(
    services: Services,
    ctx: RequestContext,
    manager: SharePartitionManager,
    request: Any,
    acks: dict[tuple[uuid.UUID, int], list[AcknowledgementBatch]],
) -> RawResponse:
    group_id, member_id, epoch = request.group_id, request.member_id, request.share_session_epoch
    named = [(t.topic_id, p.partition_index) for t in request.topics for p in t.partitions]
    sessions = manager.sessions
    if epoch == INITIAL_EPOCH:
        session, _, error = sessions.open(group_id, member_id, _connection(ctx), named)
    else:
        session, error = sessions.continued(group_id, member_id, epoch)
        if session is not None and epoch != FINAL_EPOCH:
            forgotten = [
                (t.topic_id, index) for t in request.forgotten_topics_data for index in t.partitions
            ]
            session.update(named, forgotten)
    if session is None:
        _refused("ShareFetch", group_id, member_id, epoch, error)
        return _fetch_error(error)
    answers: Answers = {}
    readable = _readable(services, ctx)
    await _acknowledge(manager, readable, group_id, member_id, acks, answers, ack_field=True)
    lock_ms = manager.lock_duration_ms(group_id)
    if epoch == FINAL_EPOCH:
        manager.release_member(group_id, member_id, list(session.partitions))
        return _fetch_answer(services, ctx, answers, lock_ms)
    windows: list[ShareWindow] = []
    for key in _rotated(session):
        error = readable(key[0])
        window = None
        if error == ErrorCode.none:
            window, error = await manager.share_partition((group_id, *key))
        if window is None:
            answers.setdefault(key, SharePartitionData(key[1])).error_code = error
        else:
            windows.append(window)
    max_bytes = min(request.max_bytes, services.config["fetch.max.bytes"])
    quota = services.quotas.fetch
    if quota.enabled:  # as Fetch: at most what the consumer's quota allows in one window span
        max_bytes = int(min(max_bytes, quota.max_value_in_window(ctx.user, ctx.client_id)))

    def respond() -> RawResponse:
        _acquire(manager, windows, member_id, request.max_records, max_bytes, answers)
        if epoch == INITIAL_EPOCH:  # a full answer names every partition of the session
            for key in session.partitions:
                answers.setdefault(key, SharePartitionData(key[1]))
        return _fetch_answer(services, ctx, answers, lock_ms)

    delayed = DelayedShareFetch(manager, windows, request.min_bytes, respond)
    failed = any(a.error_code for a in answers.values())
    if request.max_wait.total_seconds() <= 0 or not windows or failed or delayed.ready():
        return respond()
    wait_ms = int(request.max_wait.total_seconds() * 1000)
    result: RawResponse = await manager.purgatory.park(delayed.keys, wait_ms, delayed)
    return result


def _acquire(
    manager: SharePartitionManager,
    windows: list[ShareWindow],
    member_id: str,
    max_records: int,
    max_bytes: int,
    answers: Answers,
) -> None:
    remaining_records = max_records
    remaining_bytes = max_bytes
    first = True
    for window in windows:
        _, topic_id, index = window.key
        key = (topic_id, index)
        if remaining_records <= 0 or remaining_bytes <= 0:
            break
        got = manager.acquire(window, member_id, remaining_records, remaining_bytes, first)
        if got.error == ErrorCode.none and not got.acquired:
            continue
        answer = answers.setdefault(key, SharePartitionData(index))
        answer.error_code = got.error
        answer.records = got.records
        answer.acquired = [(a.first_offset, a.last_offset, a.delivery_count) for a in got.acquired]
        for a in got.acquired:
            remaining_records -= a.last_offset - a.first_offset + 1
        if got.size:
            first = False
            remaining_bytes -= got.size


def _rotated(session: ShareSession) -> list[tuple[uuid.UUID, int]]:
    """The session's partitions, starting one further each request: a request's
    max_records does not always go to the same first partitions."""
    keys = list(session.partitions)
    if not keys:
        return keys
    shift = session.epoch % len(keys)
    return keys[shift:] + keys[:shift]


def handle_share_acknowledge(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(SHARE_ACKNOWLEDGE, ctx.api_version)

    def error(code: ErrorCode) -> Any:
        return cls(throttle_time=NO_THROTTLE, error_code=code, responses=(), node_endpoints=())

    manager = _admitted(services, ctx, request)
    if isinstance(manager, ErrorCode):
        return error(manager)
    group_id = request.group_id or ""
    epoch = request.share_session_epoch
    if epoch == INITIAL_EPOCH:
        return error(ErrorCode.invalid_share_session_epoch)
    session, code = manager.sessions.continued(group_id, request.member_id, epoch)
    if session is None:
        _refused("ShareAcknowledge", group_id, request.member_id, epoch, code)
        return error(code)

    async def acknowledge() -> Any:
        answers: Answers = {}
        acks = _acknowledgements(request.topics)
        await _acknowledge(
            manager, _readable(services, ctx), group_id, request.member_id, acks, answers
        )
        if epoch == FINAL_EPOCH:
            manager.release_member(group_id, request.member_id, list(session.partitions))
        return _acknowledge_answer(services, ctx, cls, answers)

    return later(acknowledge())


# -- shared ----------------------------------------------------------------------------------
def _admitted(
    services: Services, ctx: RequestContext, request: Any
) -> SharePartitionManager | ErrorCode:
    """The manager that serves a ShareFetch or ShareAcknowledge, or why it is refused: share
    groups are off, the group may not be READ, or the request names no member."""
    manager = services.share_partitions
    if not services.config["group.share.enable"] or manager is None:
        return ErrorCode.unsupported_version
    group_id = request.group_id or ""
    if not authorize(services, ctx, AclOperation.READ, ResourceType.GROUP, group_id):
        return ErrorCode.group_authorization_failed
    if not request.member_id:
        return ErrorCode.invalid_request
    return manager


def _refused(api: str, group_id: str, member_id: str, epoch: int, error: ErrorCode) -> None:
    """A member's session refused: its client starts a new one and fails the
    acknowledgements it had not sent, so a line says why."""
    limited_log.log(
        "session-refused",
        logging.INFO,
        "%s of member %s in share group %s at session epoch %d refused: %s",
        api,
        member_id,
        group_id,
        epoch,
        error.name,
    )


def _connection(ctx: RequestContext) -> str:
    return f"{ctx.listener} {ctx.peer}"


def _acknowledgements(
    topics: Sequence[Any],
) -> dict[tuple[uuid.UUID, int], list[AcknowledgementBatch]]:
    acks: dict[tuple[uuid.UUID, int], list[AcknowledgementBatch]] = {}
    for topic in topics:
        for p in topic.partitions:
            if p.acknowledgement_batches:
                acks[(topic.topic_id, p.partition_index)] = [
                    AcknowledgementBatch(b.first_offset, b.last_offset, b.acknowledge_types)
                    for b in p.acknowledgement_batches
                ]
    return acks


async def _acknowledge(
    manager: SharePartitionManager,
    readable: Any,
    group_id: str,
    member_id: str,
    acks: dict[tuple[uuid.UUID, int], list[AcknowledgementBatch]],
    answers: Answers,
    *,
    ack_field: bool = False,
) -> None:
    """Apply each partition's acknowledgements; its result goes to the answer's
    acknowledge_error_code (ShareFetch) or error_code (ShareAcknowledge)."""
    failed = []
    for key, batches in acks.items():
        code = readable(key[0])
        if code == ErrorCode.none:
            code = await manager.acknowledge((group_id, *key), member_id, batches)
        answer = answers.setdefault(key, SharePartitionData(key[1]))
        if ack_field:
            answer.acknowledge_error_code = code
        else:
            answer.error_code = code
        if code != ErrorCode.none:
            failed.append(f"{key[0]}:{key[1]} ({code.name})")
    if failed:  # its records go out again once their locks expire
        limited_log.log(
            "acknowledgements-failed",
            logging.INFO,
            "Acknowledgements of member %s in share group %s failed for %s",
            member_id,
            group_id,
            ", ".join(failed),
        )


def _readable(services: Services, ctx: RequestContext) -> Any:
    """topic id -> the error refusing it: UNKNOWN_TOPIC_ID, TOPIC_AUTHORIZATION_FAILED, or
    none."""
    verdicts: dict[uuid.UUID, ErrorCode] = {}

    def check(topic_id: uuid.UUID) -> ErrorCode:
        verdict = verdicts.get(topic_id)
        if verdict is None:
            name = services.metadata.topic_name(topic_id)
            if name is None:
                verdict = ErrorCode.unknown_topic_id
            elif not authorize(services, ctx, AclOperation.READ, ResourceType.TOPIC, name):
                verdict = ErrorCode.topic_authorization_failed
            else:
                verdict = ErrorCode.none
            verdicts[topic_id] = verdict
        return verdict

    return check


def _hints(services: Services, ctx: RequestContext, answers: Answers) -> list[NodeEndpoint]:
    """Partitions answered NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH name their current
    leader; returns those leaders' endpoints."""
    leaders: dict[int, NodeEndpoint] = {}
    for (topic_id, index), answer in answers.items():
        if answer.error_code in LEADER_ERRORS or answer.acknowledge_error_code in LEADER_ERRORS:
            name = services.metadata.topic_name(topic_id)
            hint = None if name is None else leader_hint(services, ctx.listener, name, index)
            if hint is not None:
                answer.current_leader = hint[0]
                leaders[hint[0][0]] = hint[1]
    return list(leaders.values())


def _by_topic(answers: Answers) -> list[tuple[uuid.UUID, list[SharePartitionData]]]:
    topics: dict[uuid.UUID, list[SharePartitionData]] = {}
    for (topic_id, _), answer in answers.items():
        # kio reads the zero topic id as None (UNKNOWN_TOPIC_ID): answered as it came
        topics.setdefault(topic_id or ZERO_UUID, []).append(answer)
    return list(topics.items())


def _fetch_answer(
    services: Services, ctx: RequestContext, answers: Answers, lock_ms: int
) -> RawResponse:
    endpoints = _hints(services, ctx, answers)
    parts, size = encode_share_fetch_response(
        _by_topic(answers), acquisition_lock_timeout_ms=lock_ms, node_endpoints=endpoints
    )
    _charge(services, ctx, size)
    return RawResponse(parts, size, 0)  # the throttle time starts the body


def _charge(services: Services, ctx: RequestContext, size: int) -> None:
    """Count the answer against the consumer's fetch quota (consumer_byte_rate), as Fetch
    is; over it, the answer carries the throttle time and the connection is muted for it.
    Unlike a throttled Fetch the answer is not emptied: its records are acquired by the
    member, and held back they would only wait out their lock."""
    quota = services.quotas.fetch
    if quota.enabled:
        delay = quota.record(ctx.user, ctx.client_id, size, services.now_ms())
        ctx.throttle_ms = max(ctx.throttle_ms, delay)


def _fetch_error(code: ErrorCode) -> RawResponse:
    parts, size = encode_share_fetch_response([], error_code=code)
    return RawResponse(parts, size, 0)


def _acknowledge_answer(
    services: Services, ctx: RequestContext, cls: type, answers: Answers
) -> Any:
    endpoints = _hints(services, ctx, answers)
    leader_cls = nested(cls, "LeaderIdAndEpoch")
    partition_cls = nested(cls, "PartitionData")
    topic_cls = nested(cls, "ShareAcknowledgeTopicResponse")
    node_cls = nested(cls, "NodeEndpoint")
    return build(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        responses=tuple(
            topic_cls(
                topic_id=topic_id,
                partitions=tuple(
                    partition_cls(
                        partition_index=p.index,
                        error_code=ErrorCode(p.error_code),
                        current_leader=leader_cls(
                            leader_id=p.current_leader[0], leader_epoch=p.current_leader[1]
                        ),
                    )
                    for p in partitions
                ),
            )
            for topic_id, partitions in _by_topic(answers)
        ),
        node_endpoints=tuple(
            node_cls(node_id=n, host=h, port=port, rack=rack)
            for n, h, port, rack in sorted(endpoints)
        ),
    )
