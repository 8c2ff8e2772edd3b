"""The broker's SharePersister (``replica/share_persister.py``): each call goes to the
share coordinator of the share-partition, the leader of its ``__share_group_state``
partition: this broker's own ShareCoordinator in process, another broker's through
Initialize/Read/Write/Delete/ReadShareGroupStateSummary v0.

The coordinator is found as FindCoordinator key type 2 finds it (the same metadata, read
here rather than asked of a broker), and the topic is created on first need as
FindCoordinator creates it. While the coordinator moves or loads (NOT_COORDINATOR,
COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, or its broker unreachable) a call
is tried again after a back-off, MAX_ATTEMPTS times in all, then fails with ShareStateError.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from kio.schema.delete_share_group_state.v0 import request as delete_v0
from kio.schema.errors import ErrorCode
from kio.schema.initialize_share_group_state.v0 import request as initialize_v0
from kio.schema.read_share_group_state.v0 import request as read_v0
from kio.schema.read_share_group_state_summary.v0 import request as summary_v0
from kio.schema.write_share_group_state.v0 import request as write_v0
from kio.static.primitive import i8, i16, i32, i64

from gregor.controller.topics import TopicError
from gregor.coordinator.share_coordinator import ShareCoordinator
from gregor.coordinator.share_state_records import StateBatch as RecordBatch
from gregor.replica.share_partition import StateBatch
from gregor.replica.share_persister import UNINITIALIZED_OFFSET, ShareState, ShareStateError
from gregor.server.broker_client import BrokerUnavailable, RequestTimedOut

__all__ = ["BrokerSharePersister"]

logger = logging.getLogger(__name__)
T = TypeVar("T")

RETRIABLE = frozenset(
    {
        ErrorCode.not_coordinator,
        ErrorCode.coordinator_not_available,
        ErrorCode.coordinator_load_in_progress,
    }
)
MAX_ATTEMPTS = 10
RETRY_BACKOFF_S = 0.05  # doubling up to RETRY_BACKOFF_MAX_S: some 6 s in all
RETRY_BACKOFF_MAX_S = 1.0

Send = Callable[[int, Any, int], Awaitable[Any]]  # (node id, request, api version)


class BrokerSharePersister:
    def __init__(
        self,
        coordinator: ShareCoordinator,
        broker_id: int,
        leader_of: Callable[[int], int | None],
        create_topic: Callable[[], Awaitable[None]],
        send: Send | None,
        max_attempts: int = MAX_ATTEMPTS,
    ) -> None:
        """``leader_of(index)``: the leader of that ``__share_group_state`` partition (-1
        while it has none, None while the topic does not exist); ``send`` reaches other
        brokers (None: there are none)."""
        self._max_attempts = max_attempts
        self._coordinator = coordinator
        self._broker_id = broker_id
        self._leader_of = leader_of
        self._create_topic = create_topic
        self._send = send

    async def initialize(
        self,
        group_id: str,
        topic_id: uuid.UUID,
        partition: int,
        state_epoch: int,
        start_offset: int,
    ) -> None:
        request = _one_partition(
            initialize_v0.InitializeShareGroupStateRequest,
            initialize_v0.InitializeStateData,
            group_id,
            topic_id,
            initialize_v0.PartitionData(
                partition=i32(partition),
                state_epoch=i32(state_epoch),
                start_offset=i64(start_offset),
            ),
        )
        await self._call(
            group_id,
            topic_id,
            partition,
            lambda c: c.initialize(group_id, topic_id, partition, state_epoch, start_offset),
            request,
            lambda _result: None,
        )

    async def read(
        self, group_id: str, topic_id: uuid.UUID, partition: int, leader_epoch: int
    ) -> ShareState | None:
        request = _one_partition(
            read_v0.ReadShareGroupStateRequest,
            read_v0.ReadStateData,
            group_id,
            topic_id,
            read_v0.PartitionData(partition=i32(partition), leader_epoch=i32(leader_epoch)),
        )
        state = await self._call(
            group_id,
            topic_id,
            partition,
            lambda c: c.read(group_id, topic_id, partition, leader_epoch),
            request,
            lambda r: ShareState(
                r.state_epoch,
                leader_epoch,
                r.start_offset,
                tuple(
                    StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                    for b in r.state_batches
                ),
            ),
        )
        # What the coordinator answers for a share-partition that has no state yet.
        if (
            state.start_offset == UNINITIALIZED_OFFSET
            and not state.batches
            and not state.state_epoch
        ):
            return None
        # The read recorded the caller's leader epoch (the wire does not answer one).
        return dataclasses.replace(state, leader_epoch=leader_epoch)

    async def write(
        self,
        group_id: str,
        topic_id: uuid.UUID,
        partition: int,
        state_epoch: int,
        leader_epoch: int,
        start_offset: int,
        batches: Sequence[StateBatch],
    ) -> None:
        request = _one_partition(
            write_v0.WriteShareGroupStateRequest,
            write_v0.WriteStateData,
            group_id,
            topic_id,
            write_v0.PartitionData(
                partition=i32(partition),
                state_epoch=i32(state_epoch),
                leader_epoch=i32(leader_epoch),
                start_offset=i64(start_offset),
                state_batches=tuple(
                    write_v0.StateBatch(
                        first_offset=i64(b.first_offset),
                        last_offset=i64(b.last_offset),
                        delivery_state=i8(b.delivery_state),
                        delivery_count=i16(b.delivery_count),
                    )
                    for b in batches
                ),
            ),
        )
        records = [RecordBatch(*b) for b in batches]
        await self._call(
            group_id,
            topic_id,
            partition,
            lambda c: c.write(
                group_id, topic_id, partition, state_epoch, leader_epoch, start_offset, records
            ),
            request,
            lambda _result: None,
        )

    async def delete(self, group_id: str, topic_id: uuid.UUID, partition: int) -> None:
        request = _one_partition(
            delete_v0.DeleteShareGroupStateRequest,
            delete_v0.DeleteStateData,
            group_id,
            topic_id,
            delete_v0.PartitionData(partition=i32(partition)),
        )
        await self._call(
            group_id,
            topic_id,
            partition,
            lambda c: c.delete(group_id, topic_id, partition),
            request,
            lambda _result: None,
        )

    async def read_summary(
        self, group_id: str, topic_id: uuid.UUID, partition: int
    ) -> ShareState | None:
        request = _one_partition(
            summary_v0.ReadShareGroupStateSummaryRequest,
            summary_v0.ReadStateSummaryData,
            group_id,
            topic_id,
            summary_v0.PartitionData(partition=i32(partition), leader_epoch=i32(-1)),
        )
        state = await self._call(
            group_id,
            topic_id,
            partition,
            lambda c: c.read_summary(group_id, topic_id, partition),
            request,
            lambda r: ShareState(r.state_epoch, r.leader_epoch, r.start_offset),
        )
        if state.start_offset == UNINITIALIZED_OFFSET and not state.state_epoch:
            return None
        return state

    # -- finding the coordinator ------------------------------------------------------------
    async def _call(
        self,
        group_id: str,
        topic_id: uuid.UUID,
        partition: int,
        local: Callable[[ShareCoordinator], Awaitable[T]],
        request: Any,
        answer: Callable[[Any], T],
    ) -> T:
        """``local`` on this broker's coordinator, or ``request`` to the coordinator's broker
        and ``answer`` of its one partition result; retried while the coordinator moves."""
        index = self._coordinator.partition_for(group_id, topic_id, partition)
        backoff = RETRY_BACKOFF_S
        for attempt in range(1, self._max_attempts + 1):
            try:
                leader = await self._coordinator_of(index)
                if leader == self._broker_id:
                    return await local(self._coordinator)
                return answer(await self._remote(leader, request))
            except ShareStateError as e:
                if e.error not in RETRIABLE or attempt == self._max_attempts:
                    raise
                logger.debug(
                    "Share coordinator of %s: %s; retrying", request.group_id, e.error.name
                )
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, RETRY_BACKOFF_MAX_S)
        raise AssertionError("unreachable")

    async def _coordinator_of(self, index: int) -> int:
        leader = self._leader_of(index)
        if leader is None:
            try:
                await self._create_topic()
            except TopicError as e:
                logger.warning("Could not create the share coordinator's topic: %s", e.message)
            leader = self._leader_of(index)
        if leader is None or leader < 0:
            raise ShareStateError(ErrorCode.coordinator_not_available)
        return leader

    async def _remote(self, node_id: int, request: Any) -> Any:
        if self._send is None:
            raise ShareStateError(ErrorCode.coordinator_not_available)
        try:
            response = await self._send(node_id, request, 0)
        except (BrokerUnavailable, RequestTimedOut, ConnectionError, TimeoutError) as e:
            raise ShareStateError(ErrorCode.coordinator_not_available, str(e)) from None
        (result,) = (p for t in response.results for p in t.partitions)
        if result.error_code != ErrorCode.none:
            raise ShareStateError(result.error_code, result.error_message or "")
        return result


def _one_partition(
    request: Callable[..., Any],
    topic_data: Callable[..., Any],
    group_id: str,
    topic_id: uuid.UUID,
    partition_data: Any,
) -> Any:
    """The ``request`` of one share-partition's ``partition_data``."""
    return request(
        group_id=group_id,
        topics=(topic_data(topic_id=topic_id, partitions=(partition_data,)),),
    )
