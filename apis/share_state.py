"""The share coordinator's APIs (KIP-932, v0 each): InitializeShareGroupState (83),
ReadShareGroupState (84), WriteShareGroupState (85), DeleteShareGroupState (86) and
ReadShareGroupStateSummary (87), sent by share-partition leaders and group coordinators
(``server/share_persister.py``) to the share-partition's coordinator.

Inter-broker APIs: CLUSTER_ACTION on the cluster, else CLUSTER_AUTHORIZATION_FAILED for every
partition. UNSUPPORTED_VERSION for every partition while ``group.share.enable`` is false, as
Kafka's ``isShareGroupProtocolEnabled``; INVALID_GROUP_ID for an empty group id, and
INVALID_REQUEST for a missing topic id, as Kafka's ShareCoordinatorService."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.delete_share_group_state.v0 import response as delete_v0
from kio.schema.errors import ErrorCode
from kio.schema.initialize_share_group_state.v0 import response as initialize_v0
from kio.schema.read_share_group_state.v0 import response as read_v0
from kio.schema.read_share_group_state_summary.v0 import response as summary_v0
from kio.schema.write_share_group_state.v0 import response as write_v0
from kio.static.primitive import i8, i16, i32, i64

from gregor.apis.context import RequestContext, Services, later
from gregor.apis.inter_broker import cluster_action
from gregor.coordinator.share_coordinator import ShareCoordinator
from gregor.coordinator.share_state_records import StateBatch
from gregor.replica.share_persister import ShareState, ShareStateError

# A partition's answer: its result entity, given the error (NONE or not) and the state read.
Answer = Callable[[int, ErrorCode, ShareState | None], Any]


def _refusal(services: Services, ctx: RequestContext) -> ErrorCode | None:
    if not services.config["group.share.enable"]:
        return ErrorCode.unsupported_version
    if not cluster_action(services, ctx):
        return ErrorCode.cluster_authorization_failed
    if services.share_coordinator is None:
        return ErrorCode.coordinator_not_available
    return None


def _serve(
    services: Services,
    ctx: RequestContext,
    request: Any,
    call: Callable[[ShareCoordinator, uuid.UUID, Any], Awaitable[ShareState | None]],
    answer: Answer,
    topic_result: Callable[..., Any],
    response: Callable[..., Any],
) -> Any:
    """Each partition's ``call``, started one per turn of the event loop and answered
    together in the request's order: each partition's ``answer`` in its topic's
    ``topic_result`` (topic_id, partitions), those in the ``response`` (results)."""
    refused = _refusal(services, ctx)
    if refused is None and not request.group_id:
        refused = ErrorCode.invalid_group_id

    async def one(topic_id: uuid.UUID | None, partition: Any) -> Any:
        if refused is not None:
            return answer(partition.partition, refused, None)
        if topic_id is None:
            return answer(partition.partition, ErrorCode.invalid_request, None)
        coordinator = services.share_coordinator
        assert coordinator is not None
        try:
            state = await call(coordinator, topic_id, partition)
        except ShareStateError as e:
            return answer(partition.partition, e.error, None)
        return answer(partition.partition, ErrorCode.none, state)

    async def all_of() -> Any:
        topics, started = [], []
        for topic in request.topics:
            for p in topic.partitions:
                started.append(asyncio.ensure_future(one(topic.topic_id, p)))
                # One partition's work (a merge of its batches) per turn of the event loop;
                # their writes are awaited together.
                await asyncio.sleep(0)
        results = iter(await asyncio.gather(*started))
        for topic in request.topics:
            partitions = tuple(next(results) for _ in topic.partitions)
            topics.append(topic_result(topic_id=topic.topic_id, partitions=partitions))
        return response(results=tuple(topics))

    return later(all_of())


def _message(error: ErrorCode) -> str | None:
    return None if error == ErrorCode.none else error.name


def _error_only(partition_result: Callable[..., Any]) -> Answer:
    """The answer of an API whose partition results carry only the error."""
    return lambda partition, error, _state: partition_result(
        partition=i32(partition), error_code=error, error_message=_message(error)
    )


def handle_initialize(services: Services, ctx: RequestContext, request: Any) -> Any:
    async def call(c: ShareCoordinator, topic_id: uuid.UUID, p: Any) -> None:
        await c.initialize(request.group_id, topic_id, p.partition, p.state_epoch, p.start_offset)

    return _serve(
        services,
        ctx,
        request,
        call,
        _error_only(initialize_v0.PartitionResult),
        initialize_v0.InitializeStateResult,
        initialize_v0.InitializeShareGroupStateResponse,
    )


def handle_read(services: Services, ctx: RequestContext, request: Any) -> Any:
    async def call(c: ShareCoordinator, topic_id: uuid.UUID, p: Any) -> ShareState:
        return await c.read(request.group_id, topic_id, p.partition, p.leader_epoch)

    def answer(partition: int, error: ErrorCode, state: ShareState | None) -> Any:
        return read_v0.PartitionResult(
            partition=i32(partition),
            error_code=error,
            error_message=_message(error),
            state_epoch=i32(0 if state is None else state.state_epoch),
            start_offset=i64(-1 if state is None else state.start_offset),
            state_batches=()
            if state is None
            else tuple(
                read_v0.StateBatch(
                    first_offset=i64(b.first_offset),
                    last_offset=i64(b.last_offset),
                    delivery_state=i8(b.delivery_state),
                    delivery_count=i16(b.delivery_count),
                )
                for b in state.batches
            ),
        )

    return _serve(
        services,
        ctx,
        request,
        call,
        answer,
        read_v0.ReadStateResult,
        read_v0.ReadShareGroupStateResponse,
    )


def handle_write(services: Services, ctx: RequestContext, request: Any) -> Any:
    async def call(c: ShareCoordinator, topic_id: uuid.UUID, p: Any) -> None:
        batches = [
            StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
            for b in p.state_batches
        ]
        await c.write(
            request.group_id,
            topic_id,
            p.partition,
            p.state_epoch,
            p.leader_epoch,
            p.start_offset,
            batches,
        )

    return _serve(
        services,
        ctx,
        request,
        call,
        _error_only(write_v0.PartitionResult),
        write_v0.WriteStateResult,
        write_v0.WriteShareGroupStateResponse,
    )


def handle_delete(services: Services, ctx: RequestContext, request: Any) -> Any:
    async def call(c: ShareCoordinator, topic_id: uuid.UUID, p: Any) -> None:
        await c.delete(request.group_id, topic_id, p.partition)

    return _serve(
        services,
        ctx,
        request,
        call,
        _error_only(delete_v0.PartitionResult),
        delete_v0.DeleteStateResult,
        delete_v0.DeleteShareGroupStateResponse,
    )


def handle_read_summary(services: Services, ctx: RequestContext, request: Any) -> Any:
    async def call(c: ShareCoordinator, topic_id: uuid.UUID, p: Any) -> ShareState:
        return await c.read_summary(request.group_id, topic_id, p.partition)

    def answer(partition: int, error: ErrorCode, state: ShareState | None) -> Any:
        return summary_v0.PartitionResult(
            partition=i32(partition),
            error_code=error,
            error_message=_message(error),
            state_epoch=i32(0 if state is None else state.state_epoch),
            leader_epoch=i32(-1 if state is None else state.leader_epoch),
            start_offset=i64(-1 if state is None else state.start_offset),
        )

    return _serve(
        services,
        ctx,
        request,
        call,
        answer,
        summary_v0.ReadStateSummaryResult,
        summary_v0.ReadShareGroupStateSummaryResponse,
    )
