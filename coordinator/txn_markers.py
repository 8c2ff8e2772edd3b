"""WriteTxnMarkers from the transaction coordinator to the leaders of a transaction's
partitions: batched per broker (one request carries the markers of every transaction
queued for that broker meanwhile), retried until each partition has its marker or is
gone; the broker's own partitions are written in-process.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.types import ProducerId, TopicName
from kio.schema.write_txn_markers.v1.request import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
)
from kio.static.primitive import i16, i32

logger = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
# (node id, request) -> response: in-process for this broker, the inter-broker client else.
SendMarkers = Callable[[int, WriteTxnMarkersRequest], Awaitable[Any]]
# The leader of a partition: a node id, -1 while it has none, None once it is gone.
LeaderOf = Callable[[str, int], int | None]

RETRY_BACKOFF_S = 0.1
# Answers after which the partition is asked again (its leader moving, or not caught up).
_GONE = frozenset({ErrorCode.unknown_topic_or_partition})


@dataclass(frozen=True, slots=True)
class TxnMarker:
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int


@dataclass(eq=False, slots=True)
class _Queued:
    marker: TxnMarker
    partitions: list[TopicPartition]
    answer: asyncio.Future[dict[TopicPartition, ErrorCode]] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class TxnMarkerChannel:
    def __init__(self, send: SendMarkers, leader_of: LeaderOf) -> None:
        self._send = send
        self._leader_of = leader_of
        self._queues: dict[int, list[_Queued]] = {}
        self._senders: dict[int, asyncio.Task[None]] = {}
        self._closed = False

    async def write(
        self, marker: TxnMarker, partitions: set[TopicPartition], still_owner: Callable[[], bool]
    ) -> bool:
        """Write the marker to every partition; False if ``still_owner`` turned False (the
        coordinator resigned: its successor resumes the markers) or the channel closed."""
        remaining = set(partitions)
        while remaining:
            if self._closed or not still_owner():
                return False
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in sorted(remaining):
                leader = self._leader_of(*tp)
                if leader is None:
                    logger.info("Dropping the marker of %s-%d: the partition is gone", *tp)
                    remaining.discard(tp)
                elif leader >= 0:
                    by_leader.setdefault(leader, []).append(tp)
            waits = [self._enqueue(node, marker, tps) for node, tps in by_leader.items()]
            for wait in waits:
                try:
                    answers = await wait
                except Exception as e:  # noqa: BLE001 - the broker's failure: retry
                    logger.debug("Writing markers failed: %s", e)
                    continue
                for tp, error in answers.items():
                    if error == ErrorCode.none or (error in _GONE and self._leader_of(*tp) is None):
                        remaining.discard(tp)
                    elif error in (
                        ErrorCode.invalid_producer_epoch,
                        ErrorCode.producer_fenced,
                        ErrorCode.transaction_coordinator_fenced,
                    ):
                        # Kafka drops these: a newer epoch or coordinator owns the partition.
                        logger.warning(
                            "Marker for producer %d on %s-%d answered %s: dropped",
                            marker.producer_id,
                            tp[0],
                            tp[1],
                            error.name,
                        )
                        remaining.discard(tp)
            if remaining:
                await asyncio.sleep(RETRY_BACKOFF_S)
        return True

    def _enqueue(
        self, node: int, marker: TxnMarker, partitions: list[TopicPartition]
    ) -> asyncio.Future[dict[TopicPartition, ErrorCode]]:
        queued = _Queued(marker, partitions)
        self._queues.setdefault(node, []).append(queued)
        if node not in self._senders:
            self._senders[node] = asyncio.get_running_loop().create_task(self._drain(node))
        return queued.answer

    async def _drain(self, node: int) -> None:
        """Send what is queued for the node, one request at a time, all of it per request."""
        try:
            while self._queues.get(node):
                batch = self._queues.pop(node)
                try:
                    response = await self._send(node, _request(batch))
                except Exception as e:  # noqa: BLE001 - each waiter retries
                    for queued in batch:
                        if not queued.answer.done():
                            queued.answer.set_exception(ConnectionError(str(e)))
                    continue
                _answer(batch, response)
        finally:
            self._senders.pop(node, None)

    def close(self) -> None:
        self._closed = True
        for task in self._senders.values():
            task.cancel()


def _request(batch: list[_Queued]) -> WriteTxnMarkersRequest:
    markers = []
    for queued in batch:
        by_topic: dict[str, list[i32]] = {}
        for topic, index in queued.partitions:
            by_topic.setdefault(topic, []).append(i32(index))
        m = queued.marker
        markers.append(
            WritableTxnMarker(
                producer_id=ProducerId(m.producer_id),
                producer_epoch=i16(m.producer_epoch),
                transaction_result=m.commit,
                topics=tuple(
                    WritableTxnMarkerTopic(name=TopicName(topic), partition_indexes=tuple(parts))
                    for topic, parts in by_topic.items()
                ),
                coordinator_epoch=i32(m.coordinator_epoch),
            )
        )
    return WriteTxnMarkersRequest(markers=tuple(markers))


def _answer(batch: list[_Queued], response: Any) -> None:
    """Hand each waiter its partitions' errors; a partition missing from the answer is
    asked again."""
    results = list(response.markers)
    for index, queued in enumerate(batch):
        errors = dict.fromkeys(queued.partitions, ErrorCode.unknown_server_error)
        if index < len(results) and results[index].producer_id == queued.marker.producer_id:
            for topic in results[index].topics:
                for p in topic.partitions:
                    if (topic.name, p.partition_index) in errors:
                        errors[topic.name, p.partition_index] = ErrorCode(p.error_code)
        if not queued.answer.done():
            queued.answer.set_result(errors)
