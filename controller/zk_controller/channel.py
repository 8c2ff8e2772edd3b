"""The controller's channel to the brokers (Kafka's ControllerChannelManager).

One queue and one sender task per live broker: requests to a broker go out one at a time,
in the order the controller decided them, each retried (after a back-off) until it is
answered or the broker leaves the cluster. A `RequestBatch` gathers the decisions of one
controller event and turns them into at most one LeaderAndIsr, one UpdateMetadata and one
StopReplica request per broker, whatever the number of partitions.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i16, i32, i64

from gregor.wire.interbroker import (
    LeaderAndIsrLiveLeader,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    LeaderAndIsrTopicState,
    StopReplicaPartitionState,
    StopReplicaRequest,
    StopReplicaTopicState,
    UpdateMetadataBroker,
    UpdateMetadataEndpoint,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
    UpdateMetadataTopicState,
)

logger = logging.getLogger(__name__)

Send = Callable[[int, Any, int], Awaitable[Any]]
OnResponse = Callable[[int, Any, Any], None]  # (broker id, request, response)
TP = tuple[str, int]
_Brokers = tuple[BrokerId, ...]

LEADER_AND_ISR_VERSION = 7
UPDATE_METADATA_VERSION = 8
STOP_REPLICA_VERSION = 4
# Kafka's LeaderAndIsr.LeaderDuringDelete and EpochDuringDelete: the leader and leader
# epoch brokers are told for the partitions of a topic being deleted.
LEADER_DURING_DELETE = -2
EPOCH_DURING_DELETE = -2
SECURITY_PROTOCOLS = {
    "PLAINTEXT": i16(0),
    "SSL": i16(1),
    "SASL_PLAINTEXT": i16(2),
    "SASL_SSL": i16(3),
}


@dataclass(frozen=True, slots=True)
class Endpoint:
    listener: str
    host: str
    port: int
    security_protocol: str


@dataclass(frozen=True, slots=True)
class Broker:
    """A live broker as the channel needs it: its epoch (the registration's czxid),
    endpoints and rack."""

    id: int
    epoch: int
    endpoints: tuple[Endpoint, ...]
    rack: str | None

    def endpoint(self, listener: str) -> Endpoint | None:
        return next((e for e in self.endpoints if e.listener == listener), None)


@dataclass(frozen=True, slots=True)
class PartitionView:
    """A partition's state as sent to brokers."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int
    controller_epoch: int
    replicas: tuple[int, ...]
    leader_recovery_state: int = 0
    adding: tuple[int, ...] = ()  # replicas being added by a reassignment
    removing: tuple[int, ...] = ()  # and being removed


class BrokerQueue:
    """Kafka's RequestSendThread: one broker's requests, in order, each until answered."""

    def __init__(self, broker_id: int, send: Send, backoff_s: float) -> None:
        self.broker_id = broker_id
        self._send = send
        self._backoff_s = backoff_s
        self._queue: asyncio.Queue[tuple[Any, int, OnResponse | None]] = asyncio.Queue()
        self._closed = False
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"controller-channel-{broker_id}"
        )

    def put(self, request: Any, version: int, on_response: OnResponse | None) -> None:
        self._queue.put_nowait((request, version, on_response))

    @property
    def pending(self) -> int:
        return self._queue.qsize()

    async def close(self) -> None:
        # The flag too: a cancellation that lands as a send fails can be lost, and the
        # retry loop would then keep the controller's event waiting here for ever.
        self._closed = True
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while not self._closed:
            request, version, on_response = await self._queue.get()
            response = await self._send_until_answered(request, version)
            if on_response is not None and response is not None:
                on_response(self.broker_id, request, response)

    async def _send_until_answered(self, request: Any, version: int) -> Any:
        failures = 0
        while not self._closed:
            try:
                return await self._send(self.broker_id, request, version)
            except (ConnectionError, TimeoutError, OSError) as e:
                # The broker is still registered (else this task would be cancelled):
                # it is restarting or slow; Kafka's sender retries the same way.
                failures += 1
                if failures == 1 or failures % 50 == 0:
                    logger.warning(
                        "Controller request %s to broker %d failed (%s); retrying",
                        type(request).__name__,
                        self.broker_id,
                        str(e) or type(e).__name__,
                    )
                await asyncio.sleep(self._backoff_s)
            except Exception:
                # Not the network: sending it again would fail the same way.
                logger.exception(
                    "Controller request %s to broker %d dropped",
                    type(request).__name__,
                    self.broker_id,
                )
                return None
        return None


class ControllerChannel:
    """The queues to the live brokers; `add_broker`/`remove_broker` follow membership."""

    def __init__(self, send: Send, backoff_s: float = 0.1) -> None:
        self._send = send
        self._backoff_s = backoff_s
        self._queues: dict[int, BrokerQueue] = {}

    def add_broker(self, broker_id: int) -> None:
        if broker_id not in self._queues:
            self._queues[broker_id] = BrokerQueue(broker_id, self._send, self._backoff_s)

    async def remove_broker(self, broker_id: int) -> None:
        """Stop sending to a broker that left: what it was owed is dropped (the controller
        tells it everything again when it returns)."""
        queue = self._queues.pop(broker_id, None)
        if queue is not None:
            await queue.close()

    def send(
        self, broker_id: int, request: Any, version: int, on_response: OnResponse | None = None
    ) -> None:
        queue = self._queues.get(broker_id)
        if queue is None:
            logger.debug("Not sending %s to broker %d: not live", type(request).__name__, broker_id)
            return
        queue.put(request, version, on_response)

    def pending(self) -> int:
        """Requests queued and not yet being sent, over all brokers."""
        return sum(q.pending for q in self._queues.values())

    async def close(self) -> None:
        queues, self._queues = list(self._queues.values()), {}
        await asyncio.gather(*(q.close() for q in queues))


class RequestBatch:
    """The requests one controller event produces (Kafka's ControllerBrokerRequestBatch).

    A partition given a new state is told to the brokers named (LeaderAndIsr) and to every
    live broker (UpdateMetadata); a later decision about the same partition in the same
    batch replaces the earlier one."""

    def __init__(self) -> None:
        self.leader_and_isr: dict[int, dict[TP, tuple[PartitionView, bool]]] = {}
        self.metadata_brokers: set[int] = set()
        self.metadata: dict[TP, PartitionView] = {}
        self.stop_replica: dict[int, dict[TP, tuple[bool, int]]] = {}

    def __bool__(self) -> bool:
        return bool(
            self.leader_and_isr or self.metadata_brokers or self.metadata or self.stop_replica
        )

    def add_leader_and_isr(
        self, brokers: Iterable[int], tp: TP, state: PartitionView, *, is_new: bool = False
    ) -> None:
        for broker in brokers:
            per_broker = self.leader_and_isr.setdefault(broker, {})
            was_new = per_broker.get(tp, (None, False))[1]
            per_broker[tp] = (state, is_new or was_new)
        self.metadata[tp] = state

    def add_update_metadata(
        self, brokers: Iterable[int], partitions: Mapping[TP, PartitionView] = {}
    ) -> None:
        """UpdateMetadata to `brokers` (with the partitions of this batch and `partitions`;
        with none, it still carries the live broker list)."""
        self.metadata_brokers.update(brokers)
        self.metadata.update(partitions)

    def add_deleting(self, partitions: Mapping[TP, PartitionView]) -> None:
        """Partitions of a topic being deleted, told to every live broker with Kafka's
        LeaderDuringDelete as leader, so that they drop them from their metadata."""
        for tp, state in partitions.items():
            self.metadata[tp] = dataclasses.replace(state, leader=LEADER_DURING_DELETE)

    def add_stop_replica(self, broker: int, tp: TP, *, delete: bool, leader_epoch: int) -> None:
        """Deleting replicas carry Kafka's EpochDuringDelete whatever `leader_epoch`;
        others the partition's leader epoch, which a broker checks against its own."""
        epoch = EPOCH_DURING_DELETE if delete else leader_epoch
        self.stop_replica.setdefault(broker, {})[tp] = (delete, epoch)

    def send(
        self,
        channel: ControllerChannel,
        *,
        controller_id: int,
        controller_epoch: int,
        brokers: Mapping[int, Broker],
        topic_ids: Mapping[str, uuid.UUID],
        listener: str,
        on_stop_replica: OnResponse | None = None,
    ) -> None:
        """Queue the requests: per broker LeaderAndIsr, then UpdateMetadata, then
        StopReplica (Kafka's order). Every live broker gets UpdateMetadata whenever a
        partition changed."""
        if self.metadata:
            self.metadata_brokers.update(brokers)
        # A partition's state is the same entity in every broker's request.
        built: dict[tuple[TP, bool], LeaderAndIsrPartitionState] = {}
        for broker_id, partitions in self.leader_and_isr.items():
            broker = brokers.get(broker_id)
            if broker is None:
                continue
            request = _leader_and_isr(
                controller_id,
                controller_epoch,
                broker.epoch,
                partitions,
                built,
                brokers,
                topic_ids,
                listener,
            )
            channel.send(broker_id, request, LEADER_AND_ISR_VERSION)
        if self.metadata_brokers:
            template = _update_metadata(
                controller_id, controller_epoch, self.metadata, brokers, topic_ids
            )
            for broker_id in sorted(self.metadata_brokers):
                broker = brokers.get(broker_id)
                if broker is not None:
                    update = dataclasses.replace(template, broker_epoch=i64(broker.epoch))
                    channel.send(broker_id, update, UPDATE_METADATA_VERSION)
        for broker_id, stops in self.stop_replica.items():
            broker = brokers.get(broker_id)
            if broker is not None:
                stop = _stop_replica(controller_id, controller_epoch, broker.epoch, stops)
                channel.send(broker_id, stop, STOP_REPLICA_VERSION, on_stop_replica)


def _by_topic(partitions: Iterable[TP]) -> dict[str, list[int]]:
    topics: dict[str, list[int]] = {}
    for topic, index in partitions:
        topics.setdefault(topic, []).append(index)
    return topics


def _leader_and_isr(
    controller_id: int,
    controller_epoch: int,
    broker_epoch: int,
    partitions: Mapping[TP, tuple[PartitionView, bool]],
    built: dict[tuple[TP, bool], LeaderAndIsrPartitionState],
    brokers: Mapping[int, Broker],
    topic_ids: Mapping[str, uuid.UUID],
    listener: str,
) -> LeaderAndIsrRequest:
    # Per-partition fields are plain ints (what kio's i32/i8 return at run time), declared
    # (cast) rather than checked: the phantom-type checks cost more than the rest of building
    # a 10,000-partition request, and the controller's own state is in range.
    topic_states = []
    for topic, indexes in _by_topic(partitions).items():
        states = []
        for index in indexes:
            s, is_new = partitions[(topic, index)]
            state = built.get(((topic, index), is_new))
            if state is None:
                state = built[((topic, index), is_new)] = LeaderAndIsrPartitionState(
                    partition_index=cast(i32, index),
                    controller_epoch=cast(i32, s.controller_epoch),
                    leader=cast(BrokerId, s.leader),
                    leader_epoch=cast(i32, s.leader_epoch),
                    isr=cast(_Brokers, s.isr),
                    partition_epoch=cast(i32, s.partition_epoch),
                    replicas=cast(_Brokers, s.replicas),
                    adding_replicas=cast(_Brokers, s.adding),
                    removing_replicas=cast(_Brokers, s.removing),
                    is_new=is_new,
                    leader_recovery_state=cast(i8, s.leader_recovery_state),
                )
            states.append(state)
        topic_states.append(
            LeaderAndIsrTopicState(
                topic_name=TopicName(topic),
                topic_id=topic_ids.get(topic),
                partition_states=tuple(states),
            )
        )
    leaders = sorted({s.leader for s, _ in partitions.values()})
    live_leaders = []
    for leader in leaders:
        broker = brokers.get(leader)
        endpoint = broker.endpoint(listener) if broker is not None else None
        if endpoint is not None:
            live_leaders.append(
                LeaderAndIsrLiveLeader(
                    broker_id=BrokerId(leader), host_name=endpoint.host, port=i32(endpoint.port)
                )
            )
    return LeaderAndIsrRequest(
        controller_id=BrokerId(controller_id),
        controller_epoch=i32(controller_epoch),
        broker_epoch=i64(broker_epoch),
        topic_states=tuple(topic_states),
        live_leaders=tuple(live_leaders),
    )


def _update_metadata(
    controller_id: int,
    controller_epoch: int,
    partitions: Mapping[TP, PartitionView],
    brokers: Mapping[int, Broker],
    topic_ids: Mapping[str, uuid.UUID],
) -> UpdateMetadataRequest:
    topic_states = []
    for topic, indexes in _by_topic(partitions).items():
        states = []
        for index in indexes:
            s = partitions[(topic, index)]
            states.append(
                UpdateMetadataPartitionState(
                    partition_index=cast(i32, index),
                    controller_epoch=cast(i32, s.controller_epoch),
                    leader=cast(BrokerId, s.leader),
                    leader_epoch=cast(i32, s.leader_epoch),
                    isr=cast(_Brokers, s.isr),
                    zk_version=cast(i32, s.partition_epoch),
                    replicas=cast(_Brokers, s.replicas),
                    offline_replicas=cast(
                        _Brokers, tuple(r for r in s.replicas if r not in brokers)
                    ),
                )
            )
        topic_states.append(
            UpdateMetadataTopicState(
                topic_name=TopicName(topic),
                topic_id=topic_ids.get(topic),
                partition_states=tuple(states),
            )
        )
    live = tuple(
        UpdateMetadataBroker(
            id=BrokerId(b.id),
            endpoints=tuple(
                UpdateMetadataEndpoint(
                    port=i32(e.port),
                    host=e.host,
                    listener=e.listener,
                    security_protocol=SECURITY_PROTOCOLS.get(e.security_protocol, i16(0)),
                )
                for e in b.endpoints
            ),
            rack=b.rack,
        )
        for b in sorted(brokers.values(), key=lambda b: b.id)
    )
    return UpdateMetadataRequest(
        controller_id=BrokerId(controller_id),
        controller_epoch=i32(controller_epoch),
        topic_states=tuple(topic_states),
        live_brokers=live,
    )


def _stop_replica(
    controller_id: int,
    controller_epoch: int,
    broker_epoch: int,
    stops: Mapping[TP, tuple[bool, int]],
) -> StopReplicaRequest:
    topic_states = []
    for topic, indexes in _by_topic(stops).items():
        topic_states.append(
            StopReplicaTopicState(
                topic_name=TopicName(topic),
                partition_states=tuple(
                    StopReplicaPartitionState(
                        partition_index=i32(index), leader_epoch=i32(epoch), delete_partition=delete
                    )
                    for index in indexes
                    for delete, epoch in [stops[(topic, index)]]
                ),
            )
        )
    return StopReplicaRequest(
        controller_id=BrokerId(controller_id),
        controller_epoch=i32(controller_epoch),
        broker_epoch=i64(broker_epoch),
        topic_states=tuple(topic_states),
    )
