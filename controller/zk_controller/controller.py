"""The controller (Kafka's KafkaController): election, failover and the event loop.

Every broker runs one; the one that wins `/controller` is active. It rebuilds its view
(the context) from ZooKeeper and from then on is the only writer of partition state. Each
ZooKeeper watch, broker request and rebalance tick is queued as an event, and the events
run one at a time on one asyncio task, so each sees the state the previous one left. An
event gathers its requests to brokers in one RequestBatch, sent through the channel when
it is done.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from gregor.controller.zk_controller.alter_partition import AlterPartitionHandler, alter_response
from gregor.controller.zk_controller.channel import (
    TP,
    Broker,
    ControllerChannel,
    Endpoint,
    RequestBatch,
    Send,
)
from gregor.controller.zk_controller.config import ControllerConfig
from gregor.controller.zk_controller.context import ControllerContext
from gregor.controller.zk_controller.partition_states import PartitionStateMachine
from gregor.controller.zk_controller.reassignment import Reassignments
from gregor.controller.zk_controller.topic_deletion import TopicDeletionManager
from gregor.controller.zookeeper.client import SessionExpiredError, SessionState
from gregor.controller.zookeeper.data import BrokerRegistration, ControllerMovedError, KafkaZk
from gregor.wire.errors import KafkaError
from gregor.wire.interbroker import StopReplicaRequest, StopReplicaResponse

logger = logging.getLogger(__name__)

T = TypeVar("T")


class ControllerError(KafkaError):
    """A request to the controller that fails with a Kafka error code."""


class ZkController:
    def __init__(self, broker_id: int, zk: KafkaZk, send: Send, config: ControllerConfig) -> None:
        self.broker_id = broker_id
        self.zk = zk
        self.config = config
        self._send = send
        self.active = False
        self.context = ControllerContext(broker_id)
        self.partition_states = PartitionStateMachine(self.context, zk, config)
        self.reassignments = Reassignments(self.context, zk, self.partition_states)
        self.deletion = TopicDeletionManager(self.context, zk, config)
        self.isr_changes = AlterPartitionHandler(
            self.context, self.partition_states, self.reassignments
        )
        self._channel: ControllerChannel | None = None
        self._events: asyncio.Queue[tuple[Callable[..., Awaitable[Any]], tuple[Any, ...], Any]] = (
            asyncio.Queue()
        )
        self._task: asyncio.Task[None] | None = None
        self._rebalance: asyncio.Task[None] | None = None

    @property
    def brokers(self) -> Mapping[int, Broker]:
        """The live brokers, as this controller last saw them (empty unless active)."""
        return self.context.brokers

    # --- life cycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Campaign for `/controller` now and whenever it is vacated."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name="controller")
        self.zk.zk.add_state_listener(self._on_session_state)
        self._enqueue(self._elect)

    async def stop(self) -> None:
        if self._task is None:
            return
        self.zk.zk.remove_state_listener(self._on_session_state)
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        self._task = None
        await self._resign()

    async def _run(self) -> None:
        while True:
            fn, args, future = await self._events.get()
            try:
                result = await fn(*args)
            except ControllerMovedError:
                logger.warning("Controller %d: another controller was elected", self.broker_id)
                await self._resign()
                if future is not None and not future.done():
                    future.set_exception(_not_controller())
            except SessionExpiredError:
                # The session ended (ZooKeeper's watches fire on its loss, before kazoo has a
                # new one): /controller went with it. The new session's CONNECTED campaigns
                # again, re-arming the watches from scratch.
                logger.warning(
                    "Controller %d: ZooKeeper session expired during %s; awaiting a new session",
                    self.broker_id,
                    fn.__name__,
                )
                await self._resign()
                if future is not None and not future.done():
                    future.set_exception(_not_controller())
            except Exception as e:
                if future is not None and not future.done():
                    future.set_exception(e)
                else:
                    logger.exception("Controller event %s failed", fn.__name__)
            else:
                if future is not None and not future.done():
                    future.set_result(result)

    def _enqueue(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        self._events.put_nowait((fn, args, None))

    async def _submit(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._events.put_nowait((fn, args, future))
        return await future

    def _on_session_state(self, state: SessionState) -> None:
        # LOST: the session expired, /controller with it. CONNECTED (also after SUSPENDED,
        # the session kept): look at /controller again, campaigning if it is vacant.
        if state is SessionState.LOST:
            self._enqueue(self._resign)
        elif state is SessionState.CONNECTED:
            self._enqueue(self._elect)

    def _on_controller_change(self, _event: Any = None) -> None:
        self._enqueue(self._elect)

    async def _elect(self) -> None:
        """Watch /controller (its change or deletion is the next call of this) and act on
        who holds it: resign if it is no longer this broker, campaign if nobody."""
        holder = await self.zk.controller_id(watch=self._on_controller_change)
        if self.active and holder != self.broker_id:
            logger.info("Controller %d: /controller is now %s; resigning", self.broker_id, holder)
            await self._resign()
        if holder is not None:
            return
        elected = await self.zk.elect_controller(self.broker_id)
        if elected is None:
            return  # another broker won: the watch sees its /controller
        self.context.epoch, self.context.epoch_version = elected.epoch, elected.zk_version
        try:
            await self._failover()
        except (ControllerMovedError, SessionExpiredError):
            raise
        except Exception:
            logger.exception("Controller %d: failover failed; resigning", self.broker_id)
            version = self.context.epoch_version
            await self._resign()
            await self.zk.resign_controller(version)

    async def _resign(self) -> None:
        if not self.active and self._channel is None:
            return
        logger.info("Controller %d resigns (epoch %d)", self.broker_id, self.context.epoch)
        self.active = False
        if self._rebalance is not None:
            self._rebalance.cancel()
            self._rebalance = None
        channel, self._channel = self._channel, None
        if channel is not None:
            await channel.close()
        self.context.reset()

    # --- failover: the state rebuilt from ZooKeeper -----------------------------------------

    async def _failover(self) -> None:
        started = time.monotonic()
        ctx = self.context
        self.active = True
        self._channel = ControllerChannel(self._send)
        registrations = await self.zk.brokers(watch=self._on_broker_change)
        for registration in registrations.values():
            self._add_broker(_broker(registration))
        names = await self.zk.topic_names(watch=self._on_topic_change)
        await self._load_topics(names)
        read = time.monotonic()
        to_delete = await self.zk.topics_to_delete(watch=self._on_deletion_change)
        # Every live broker is told everything: a broker's view may predate any change
        # the previous controller made before dying.
        batch = RequestBatch()
        for tp in ctx.states:
            if tp[0] not in to_delete:
                batch.add_leader_and_isr(ctx.live_replicas(tp), tp, ctx.view(tp))
        batch.add_update_metadata(ctx.brokers)
        await self._load_topics(to_delete)  # created since the topics were read
        for name in to_delete:
            await self.deletion.start(name, batch)
        built = time.monotonic()
        await self.partition_states.react_to_liveness(batch)
        await self.reassignments.complete(list(ctx.reassigning), batch)
        led = time.monotonic()
        self._flush(batch)
        if self.config.auto_leader_rebalance:
            self._rebalance = asyncio.get_running_loop().create_task(self._rebalance_timer())
        now = time.monotonic()
        logger.info(
            "Controller %d active at epoch %d: %d broker(s), %d topic(s), %d partition(s) "
            "in %.3f s (state read %.3f s, requests built %.3f s, leaders elected %.3f s, "
            "requests queued %.3f s)",
            self.broker_id,
            ctx.epoch,
            len(ctx.brokers),
            len(ctx.topic_ids),
            len(ctx.assignments),
            now - started,
            read - started,
            built - read,
            led - built,
            now - led,
        )

    async def _load_topics(self, names: Iterable[str]) -> list[TP]:
        """Read the assignments and states of topics new to this controller; their
        partitions (those without a state are new)."""
        ctx = self.context
        names = [n for n in names if n not in ctx.topic_ids]
        if not names:
            return []
        # A data watch on each topic: partitions added to it.
        assignments = await asyncio.gather(
            *(self.zk.topic_assignment(n, watch=self._on_assignment_change) for n in names)
        )
        new: list[TP] = []
        for assignment in assignments:
            if assignment is None:
                continue  # deleted meanwhile
            name = assignment.name
            ctx.topic_ids[name] = assignment.topic_id
            ctx.topic_partitions[name] = sorted(assignment.partitions)
            for index, replicas in assignment.partitions.items():
                ctx.assignments[(name, index)] = tuple(replicas)
                new.append((name, index))
                adding = tuple(assignment.adding_replicas.get(index, ()))
                removing = tuple(assignment.removing_replicas.get(index, ()))
                if adding or removing:
                    ctx.reassigning[(name, index)] = (adding, removing)
        ctx.states.update(await self.zk.partition_states(new))
        return new

    # --- ZooKeeper watches -----------------------------------------------------------------

    def _on_broker_change(self, _event: Any = None) -> None:
        self._enqueue(self._broker_change)

    def _on_topic_change(self, _event: Any = None) -> None:
        self._enqueue(self._topic_change)

    def _on_assignment_change(self, event: Any) -> None:
        if event.path:  # not a connection-state event
            self._enqueue(self._assignment_change, event.path.rsplit("/", 1)[-1])

    def _on_deletion_change(self, _event: Any = None) -> None:
        self._enqueue(self._deletion_change)

    # --- brokers coming and going ----------------------------------------------------------

    async def _broker_change(self) -> None:
        if not self.active:
            return
        ctx = self.context
        current = {
            id_: _broker(r)
            for id_, r in (await self.zk.brokers(watch=self._on_broker_change)).items()
        }
        # A broker back with a new registration (a new epoch) left and came back.
        dead = {b for b, known in ctx.brokers.items() if current.get(b) != known}
        new = {b for b in current if b not in ctx.brokers or b in dead}
        if not dead and not new:
            return
        logger.info(
            "Controller %d: brokers joined %s, left %s", self.broker_id, sorted(new), sorted(dead)
        )
        batch = RequestBatch()
        for b in dead:
            del ctx.brokers[b]
            ctx.shutting_down.discard(b)
            assert self._channel is not None
            await self._channel.remove_broker(b)
        if dead:
            # A bounced broker lost what it had not flushed: its leaderships move and it
            # leaves the ISRs before it is let back in, as a new replica.
            await self.partition_states.react_to_liveness(batch)
        for b in new:
            self._add_broker(current[b])
        if new:
            # A joining broker learns everything: first the whole metadata (in a request of
            # its own, so that it knows the leaders' endpoints before it follows them; every
            # live broker gets it, learning of the newcomer), then LeaderAndIsr for every
            # replica it holds; then offline partitions may have a leader again.
            metadata = RequestBatch()
            metadata.add_update_metadata(new, ctx.views())
            self._flush(metadata)
            for tp in ctx.partitions_on(new):
                if tp in ctx.states and tp[0] not in ctx.deleting:
                    batch.add_leader_and_isr(new & set(ctx.assignments[tp]), tp, ctx.view(tp))
            await self.partition_states.react_to_liveness(batch)
        batch.add_update_metadata(ctx.brokers)  # the live broker list changed
        self.deletion.retry_on(new, batch)
        self._flush(batch)

    def _add_broker(self, broker: Broker) -> None:
        self.context.brokers[broker.id] = broker
        assert self._channel is not None
        self._channel.add_broker(broker.id)

    # --- topics ----------------------------------------------------------------------------

    async def _topic_change(self) -> None:
        if not self.active:
            return
        ctx = self.context
        names = await self.zk.topic_names(watch=self._on_topic_change)
        for gone in set(ctx.topic_ids) - set(names) - set(ctx.deleting):
            logger.warning("Controller %d: topic %s vanished from ZooKeeper", self.broker_id, gone)
            ctx.forget_topic(gone)
        new = await self._load_topics(names)
        if new:
            batch = RequestBatch()
            await self.partition_states.react_to_liveness(batch)
            self._flush(batch)

    async def _assignment_change(self, topic: str) -> None:
        """Partitions added to a topic (CreatePartitions)."""
        ctx = self.context
        if not self.active or topic not in ctx.topic_ids:
            return
        assignment = await self.zk.topic_assignment(topic, watch=self._on_assignment_change)
        if assignment is None:
            return
        added = [(topic, p) for p in assignment.partitions if (topic, p) not in ctx.assignments]
        for tp in added:
            ctx.assignments[tp] = tuple(assignment.partitions[tp[1]])
        ctx.topic_partitions[topic] = sorted(assignment.partitions)
        if added:
            ctx.states.update(await self.zk.partition_states(added))
            batch = RequestBatch()
            await self.partition_states.react_to_liveness(batch)
            self._flush(batch)

    async def _deletion_change(self) -> None:
        if not self.active:
            return
        batch = RequestBatch()
        names = await self.zk.topics_to_delete(watch=self._on_deletion_change)
        await self._load_topics(names)  # those created since this controller last looked
        for name in names:
            await self.deletion.start(name, batch)
        self._flush(batch)

    def _on_stop_replica(
        self, broker: int, request: StopReplicaRequest, response: StopReplicaResponse
    ) -> None:
        self._enqueue(self._stop_replica_answered, broker, request, response)

    async def _stop_replica_answered(
        self, broker: int, request: StopReplicaRequest, response: StopReplicaResponse
    ) -> None:
        if self.active:
            await self.deletion.replicas_deleted(broker, request, response)

    # --- requests from brokers and clients ---------------------------------------------------

    async def handle_alter_partition(self, request: Any) -> Any:
        """AlterPartition v2/v3 from a partition leader (KIP-497): the new ISR is written if
        the leader's epochs are current and its members are live replicas."""
        version = type(request).__version__
        if not self.active:
            return alter_response(version, ErrorCode.not_controller, [])
        try:
            return await self._submit(self._alter_partition, request)
        except ControllerError as e:
            return alter_response(version, e.code, [])

    async def _alter_partition(self, request: Any) -> Any:
        if not self.active:
            return alter_response(type(request).__version__, ErrorCode.not_controller, [])
        batch = RequestBatch()
        response = await self.isr_changes.handle(request, batch)
        self._flush(batch)
        return response

    async def handle_controlled_shutdown(self, broker_id: int, broker_epoch: int) -> list[TP]:
        """Move leadership off a stopping broker and shrink it out of the ISRs of the
        partitions it follows; the partitions it still leads (none once it may stop).
        Raises ControllerError (NOT_CONTROLLER, BROKER_NOT_AVAILABLE, STALE_BROKER_EPOCH)."""
        if not self.active:
            raise _not_controller()
        return await self._submit(self._controlled_shutdown, broker_id, broker_epoch)

    async def _controlled_shutdown(self, broker_id: int, broker_epoch: int) -> list[TP]:
        if not self.active:
            raise _not_controller()
        broker = self.context.brokers.get(broker_id)
        if broker is None:
            raise ControllerError(
                ErrorCode.broker_not_available, f"Broker {broker_id} is not alive"
            )
        if broker_epoch != -1 and broker_epoch < broker.epoch:
            raise ControllerError(
                ErrorCode.stale_broker_epoch,
                f"Received controlled shutdown for broker {broker_id} with a stale epoch "
                f"{broker_epoch}; its current epoch is {broker.epoch}",
            )
        batch = RequestBatch()
        remaining = await self.partition_states.controlled_shutdown(broker_id, batch)
        self._flush(batch)
        return remaining

    async def elect_leaders(
        self, election_type: int, partitions: Collection[TP] | None
    ) -> dict[TP, tuple[ErrorCode, str | None]]:
        """ElectLeaders: preferred (0) or unclean (1) election for `partitions` (None: all);
        per partition the error code and message Kafka gives."""
        if not self.active:
            raise _not_controller()
        return await self._submit(self._elect_leaders, election_type, partitions)

    async def _elect_leaders(
        self, election_type: int, partitions: Collection[TP] | None
    ) -> dict[TP, tuple[ErrorCode, str | None]]:
        if not self.active:
            raise _not_controller()
        batch = RequestBatch()
        results = await self.partition_states.elect_leaders(election_type, partitions, batch)
        self._flush(batch)
        return results

    async def alter_partition_reassignments(
        self,
        targets: Mapping[TP, Sequence[int] | None],
        *,
        allow_replication_factor_change: bool = True,
    ) -> dict[TP, tuple[ErrorCode, str | None]]:
        """AlterPartitionReassignments (KIP-455): start moving each partition to its target
        replicas (None cancels its reassignment, back to the replicas it had); per
        partition the error code and message Kafka gives. Raises ControllerError
        (NOT_CONTROLLER)."""
        if not self.active:
            raise _not_controller()
        return await self._submit(
            self._alter_reassignments, targets, allow_replication_factor_change
        )

    async def _alter_reassignments(
        self, targets: Mapping[TP, Sequence[int] | None], allow_rf_change: bool
    ) -> dict[TP, tuple[ErrorCode, str | None]]:
        if not self.active:
            raise _not_controller()
        batch = RequestBatch()
        results = await self.reassignments.alter(targets, allow_rf_change, batch)
        self._flush(batch)
        return results

    async def list_partition_reassignments(
        self, partitions: Collection[TP] | None
    ) -> dict[TP, tuple[list[int], list[int], list[int]]]:
        """The ongoing reassignments among `partitions` (None: all): replicas, adding,
        removing."""
        if not self.active:
            raise _not_controller()
        return await self._submit(self._list_reassignments, partitions)

    async def _list_reassignments(
        self, partitions: Collection[TP] | None
    ) -> dict[TP, tuple[list[int], list[int], list[int]]]:
        if not self.active:
            raise _not_controller()
        return self.reassignments.ongoing(partitions)

    # --- preferred leaders ------------------------------------------------------------------

    async def _rebalance_timer(self) -> None:
        delay = self.config.first_imbalance_check_s
        while True:
            await asyncio.sleep(delay)
            delay = self.config.leader_imbalance_check_interval_s
            self._enqueue(self._check_imbalance)

    async def _check_imbalance(self) -> None:
        if not self.active or self.context.shutting_down:
            return
        batch = RequestBatch()
        await self.partition_states.rebalance_leaders(batch)
        self._flush(batch)

    # --- telling ---------------------------------------------------------------------------

    def _flush(self, batch: RequestBatch) -> None:
        if not batch or self._channel is None:
            return
        batch.send(
            self._channel,
            controller_id=self.broker_id,
            controller_epoch=self.context.epoch,
            brokers=self.context.brokers,
            topic_ids=self.context.topic_ids,
            listener=self.config.inter_broker_listener,
            on_stop_replica=self._on_stop_replica,
        )


def _broker(registration: BrokerRegistration) -> Broker:
    protocols = registration.security_protocol_map
    return Broker(
        id=registration.id,
        epoch=registration.epoch,
        endpoints=tuple(
            Endpoint(name, host, port, protocols.get(name, name))
            for name, (host, port) in registration.endpoints.items()
        ),
        rack=registration.rack,
    )


def _not_controller() -> ControllerError:
    return ControllerError(ErrorCode.not_controller, "This broker is not the controller")
