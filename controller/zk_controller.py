"""The cluster controller on ZooKeeper (Kafka's KafkaController and its state machines).

Every broker runs one; the one that wins `/controller` is active. It rebuilds its view of
the cluster from ZooKeeper, and from then on is the only writer of partition state: it
elects leaders (from the ISR, batched over every partition a change touches), shrinks dead
replicas out of ISRs, applies the leaders' AlterPartition requests, moves leadership away
from a broker in controlled shutdown and back to preferred replicas, reassigns partitions
and deletes topics.
Each decision is written to ZooKeeper first (one multi per batch, fenced by the controller
epoch's zk version) and then told to the brokers through the channel.

Everything runs as events on one asyncio task, one at a time, so an event sees the state
the previous one left. ZooKeeper watches, broker requests and the rebalance timer only
queue events.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from kio.schema.alter_partition.v2 import response as alter_v2
from kio.schema.alter_partition.v3 import response as alter_v3
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32, i32Timedelta

from gregor.controller.channel import (
    TP,
    Broker,
    ControllerChannel,
    Endpoint,
    PartitionView,
    RequestBatch,
    Send,
)
from gregor.controller.election import (
    RECOVERED,
    RECOVERING,
    Elected,
    elect_for_controlled_shutdown,
    elect_offline,
    elect_preferred,
    elect_reassigned,
)
from gregor.controller.zookeeper.client import SessionExpiredError, SessionState, TransactionFailed
from gregor.controller.zookeeper.data import (
    CONTROLLER_EPOCH_PATH,
    BrokerRegistration,
    ControllerMovedError,
    KafkaZk,
    PartitionState,
    StateConflict,
    TopicAssignment,
    delete_topic_path,
)
from gregor.wire.interbroker import StopReplicaRequest, StopReplicaResponse

logger = logging.getLogger(__name__)

NO_LEADER = -1
# ElectLeaders' election_type (Kafka's ElectionType)
PREFERRED = 0
UNCLEAN = 1


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    unclean_leader_election: bool = False
    auto_leader_rebalance: bool = True
    leader_imbalance_check_interval_s: float = 300.0
    leader_imbalance_per_broker_pct: int = 10
    delete_topic_enable: bool = True
    inter_broker_listener: str = "PLAINTEXT"
    # Kafka schedules the first imbalance check 5 s after failover.
    first_imbalance_check_s: float = 5.0

    @classmethod
    def from_config(cls, config: Any) -> ControllerConfig:
        """From the broker's configuration (Kafka's key names)."""
        return cls(
            unclean_leader_election=config["unclean.leader.election.enable"],
            auto_leader_rebalance=config["auto.leader.rebalance.enable"],
            leader_imbalance_check_interval_s=config["leader.imbalance.check.interval.seconds"],
            leader_imbalance_per_broker_pct=config["leader.imbalance.per.broker.percentage"],
            delete_topic_enable=config["delete.topic.enable"],
            inter_broker_listener=config.inter_broker_listener,
        )


class ControllerError(Exception):
    """A request to the controller that fails with a Kafka error code."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class ZkController:
    def __init__(self, broker_id: int, zk: KafkaZk, send: Send, config: ControllerConfig) -> None:
        self.broker_id = broker_id
        self.zk = zk
        self.config = config
        self._send = send
        self.active = False
        self.epoch = 0
        self._epoch_version = -1
        self._channel: ControllerChannel | None = None
        self._events: asyncio.Queue[tuple[Callable[..., Awaitable[Any]], tuple, Any]] = (
            asyncio.Queue()
        )
        self._task: asyncio.Task[None] | None = None
        self._rebalance: asyncio.Task[None] | None = None
        self._reset_context()

    def _reset_context(self) -> None:
        self.brokers: dict[int, Broker] = {}  # live, including those shutting down
        self.shutting_down: set[int] = set()
        self.topic_ids: dict[str, Any] = {}
        self.assignments: dict[TP, tuple[int, ...]] = {}
        self.topic_partitions: dict[str, list[int]] = {}
        self.states: dict[TP, PartitionState] = {}
        # topic being deleted -> replicas (broker, partition) not yet confirmed deleted
        self.deleting: dict[str, set[tuple[int, int]]] = {}
        # partition being reassigned -> (replicas being added, replicas being removed);
        # its assignment meanwhile is all of them, the targets first (Kafka's RS)
        self.reassigning: dict[TP, tuple[tuple[int, ...], tuple[int, ...]]] = {}

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

    async def _submit(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        future = asyncio.get_running_loop().create_future()
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
        self.epoch, self._epoch_version = elected.epoch, elected.zk_version
        try:
            await self._failover()
        except (ControllerMovedError, SessionExpiredError):
            raise
        except Exception:
            logger.exception("Controller %d: failover failed; resigning", self.broker_id)
            version = self._epoch_version
            await self._resign()
            await self.zk.resign_controller(version)

    async def _resign(self) -> None:
        if not self.active and self._channel is None:
            return
        logger.info("Controller %d resigns (epoch %d)", self.broker_id, self.epoch)
        self.active = False
        if self._rebalance is not None:
            self._rebalance.cancel()
            self._rebalance = None
        channel, self._channel = self._channel, None
        if channel is not None:
            await channel.close()
        self._reset_context()

    # --- failover: the state rebuilt from ZooKeeper -----------------------------------------

    async def _failover(self) -> None:
        started = time.monotonic()
        self.active = True
        self._channel = ControllerChannel(self._send)
        registrations = await self.zk.brokers(watch=self._on_broker_change)
        for registration in registrations.values():
            self._add_broker(_broker(registration))
        names = await self.zk.topic_names(watch=self._on_topic_change)
        await self._load_topics(names)
        to_delete = await self.zk.topics_to_delete(watch=self._on_deletion_change)
        # Every live broker is told everything: a broker's view may predate any change
        # the previous controller made before dying.
        batch = RequestBatch()
        for tp in self.states:
            if tp[0] not in to_delete:
                batch.add_leader_and_isr(self._live_replicas(tp), tp, self._view(tp))
        batch.add_update_metadata(self.brokers)
        for name in to_delete:
            await self._start_deletion(name, batch)
        await self._react_to_liveness(batch)
        await self._complete_reassignments(list(self.reassigning), batch)
        self._flush(batch)
        if self.config.auto_leader_rebalance:
            self._rebalance = asyncio.get_running_loop().create_task(self._rebalance_timer())
        logger.info(
            "Controller %d active at epoch %d: %d broker(s), %d topic(s), %d partition(s) "
            "in %.3f s",
            self.broker_id,
            self.epoch,
            len(self.brokers),
            len(self.topic_ids),
            len(self.assignments),
            time.monotonic() - started,
        )

    async def _load_topics(self, names: Iterable[str]) -> list[TP]:
        """Read the assignments and states of topics new to this controller; their
        partitions (those without a state are new)."""
        names = [n for n in names if n not in self.topic_ids]
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
            self.topic_ids[name] = assignment.topic_id
            self.topic_partitions[name] = sorted(assignment.partitions)
            for index, replicas in assignment.partitions.items():
                self.assignments[(name, index)] = tuple(replicas)
                new.append((name, index))
                adding = tuple(assignment.adding_replicas.get(index, ()))
                removing = tuple(assignment.removing_replicas.get(index, ()))
                if adding or removing:
                    self.reassigning[(name, index)] = (adding, removing)
        self.states.update(await self.zk.partition_states(new))
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
        current = {
            id_: _broker(r)
            for id_, r in (await self.zk.brokers(watch=self._on_broker_change)).items()
        }
        # A broker back with a new registration (a new epoch) left and came back.
        dead = {b for b, known in self.brokers.items() if current.get(b) != known}
        new = {b for b in current if b not in self.brokers or b in dead}
        if not dead and not new:
            return
        logger.info(
            "Controller %d: brokers joined %s, left %s", self.broker_id, sorted(new), sorted(dead)
        )
        batch = RequestBatch()
        for b in dead:
            del self.brokers[b]
            self.shutting_down.discard(b)
            assert self._channel is not None
            await self._channel.remove_broker(b)
        if dead:
            # A bounced broker lost what it had not flushed: its leaderships move and it
            # leaves the ISRs before it is let back in, as a new replica.
            await self._react_to_liveness(batch)
        for b in new:
            self._add_broker(current[b])
        if new:
            # A joining broker learns everything: first the whole metadata (in a request of
            # its own, so that it knows the leaders' endpoints before it follows them; every
            # live broker gets it, learning of the newcomer), then LeaderAndIsr for every
            # replica it holds; then offline partitions may have a leader again.
            metadata = RequestBatch()
            metadata.add_update_metadata(new, self._views())
            self._flush(metadata)
            for tp in self._partitions_on(new):
                if tp in self.states and tp[0] not in self.deleting:
                    batch.add_leader_and_isr(new & set(self.assignments[tp]), tp, self._view(tp))
            await self._react_to_liveness(batch)
        batch.add_update_metadata(self.brokers)  # the live broker list changed
        for topic, pending in self.deleting.items():
            for broker, index in pending:
                if broker in new:
                    batch.add_stop_replica(broker, (topic, index), delete=True, leader_epoch=-1)
        self._flush(batch)

    def _add_broker(self, broker: Broker) -> None:
        self.brokers[broker.id] = broker
        assert self._channel is not None
        self._channel.add_broker(broker.id)

    async def _react_to_liveness(self, batch: RequestBatch) -> None:
        """Give every partition a live leader if it can have one and drop dead replicas
        from ISRs, in one batched write (Kafka's OnlinePartition and OfflineReplica
        transitions together)."""
        candidates = self._candidates()
        new: dict[TP, PartitionState] = {}
        changes: dict[TP, PartitionState] = {}
        need_config: list[TP] = []
        for tp, replicas in self.assignments.items():
            if tp[0] in self.deleting:
                continue
            state = self.states.get(tp)
            if state is None:
                live = [r for r in replicas if r in candidates]
                if live:
                    new[tp] = self._initial_state(live)
                continue
            if state.leader not in self.brokers:
                elected = elect_offline(
                    replicas, state.isr, candidates, self.config.unclean_leader_election
                )
                if elected is None and any(r in candidates for r in replicas):
                    need_config.append(tp)  # the topic may allow unclean election
                if elected is not None:
                    changes[tp] = _with_leader(state, elected, self.epoch)
                elif state.leader != NO_LEADER:
                    # No eligible replica: offline, the ISR kept for a clean election later.
                    changes[tp] = _bump(state, self.epoch, leader=NO_LEADER)
            else:
                isr = [r for r in state.isr if r in self.brokers]
                if len(isr) != len(state.isr):
                    changes[tp] = _bump(state, self.epoch, isr=isr)
        for tp in await self._unclean_allowed(need_config):
            state = changes.get(tp, self.states[tp])
            elected = elect_offline(self.assignments[tp], state.isr, candidates, True)
            if elected is not None:
                logger.warning("Unclean leader election for %s-%d: %d", *tp, elected.leader)
                changes[tp] = _with_leader(self.states[tp], elected, self.epoch)
        if new:
            await self._create_states(new, batch)
        await self._commit(changes, batch)

    def _initial_state(self, live: list[int]) -> PartitionState:
        """A new partition: the first live replica leads, the live replicas are the ISR."""
        return PartitionState(
            leader=live[0],
            leader_epoch=0,
            isr=list(live),
            controller_epoch=self.epoch,
            leader_recovery_state=RECOVERED,
            partition_epoch=0,
        )

    async def _unclean_allowed(self, partitions: list[TP]) -> list[TP]:
        """Those of `partitions` whose topic allows unclean election (its
        unclean.leader.election.enable, else the broker's)."""
        allowed: dict[str, bool] = {}
        result = []
        for tp in partitions:
            topic = tp[0]
            if topic not in allowed:
                configs = await self.zk.topic_configs(topic)
                value = configs.get("unclean.leader.election.enable")
                default = self.config.unclean_leader_election
                allowed[topic] = default if value is None else value.lower() == "true"
            if allowed[topic]:
                result.append(tp)
        return result

    # --- topics ----------------------------------------------------------------------------

    async def _topic_change(self) -> None:
        if not self.active:
            return
        names = await self.zk.topic_names(watch=self._on_topic_change)
        for gone in set(self.topic_ids) - set(names) - set(self.deleting):
            logger.warning("Controller %d: topic %s vanished from ZooKeeper", self.broker_id, gone)
            self._forget_topic(gone)
        new = await self._load_topics(names)
        if new:
            batch = RequestBatch()
            await self._react_to_liveness(batch)
            self._flush(batch)

    async def _assignment_change(self, topic: str) -> None:
        """Partitions added to a topic (CreatePartitions)."""
        if not self.active or topic not in self.topic_ids:
            return
        assignment = await self.zk.topic_assignment(topic, watch=self._on_assignment_change)
        if assignment is None:
            return
        added = [(topic, p) for p in assignment.partitions if (topic, p) not in self.assignments]
        for tp in added:
            self.assignments[tp] = tuple(assignment.partitions[tp[1]])
        self.topic_partitions[topic] = sorted(assignment.partitions)
        if added:
            self.states.update(await self.zk.partition_states(added))
            batch = RequestBatch()
            await self._react_to_liveness(batch)
            self._flush(batch)

    # --- deletion --------------------------------------------------------------------------

    async def _deletion_change(self) -> None:
        if not self.active:
            return
        batch = RequestBatch()
        for name in await self.zk.topics_to_delete(watch=self._on_deletion_change):
            await self._start_deletion(name, batch)
        self._flush(batch)

    async def _start_deletion(self, name: str, batch: RequestBatch) -> None:
        """StopReplica (delete) to every replica of the topic; the znodes go once all have
        answered. A replica on a broker that is down is asked again when it returns."""
        if name in self.deleting:
            return
        if name not in self.topic_ids:
            await self._load_topics([name])  # created since this controller last looked
        if name not in self.topic_ids or not self.config.delete_topic_enable:
            if name in self.topic_ids:
                logger.warning("Not deleting topic %s: delete.topic.enable is false", name)
            await self._unmark_for_deletion(name)
            return
        logger.info("Controller %d: deleting topic %s", self.broker_id, name)
        pending = set()
        partitions = [(name, p) for p in self.topic_partitions[name]]
        batch.add_deleting({tp: self._view(tp) for tp in partitions if tp in self.states})
        for tp in partitions:
            for broker in self.assignments[tp]:
                pending.add((broker, tp[1]))
                if broker in self.brokers:
                    batch.add_stop_replica(broker, tp, delete=True, leader_epoch=-1)
        self.deleting[name] = pending
        if not pending:
            await self._complete_deletion(name)

    async def _unmark_for_deletion(self, name: str) -> None:
        tx = self.zk.zk.transaction()
        tx.check(CONTROLLER_EPOCH_PATH, self._epoch_version)
        tx.delete(delete_topic_path(name))
        try:
            await tx.commit()
        except TransactionFailed as e:
            if e.index == 0:
                raise ControllerMovedError("the controller epoch moved") from None
            raise

    def _on_stop_replica(
        self, broker: int, request: StopReplicaRequest, response: StopReplicaResponse
    ) -> None:
        self._enqueue(self._stop_replica_answered, broker, request, response)

    async def _stop_replica_answered(
        self, broker: int, request: StopReplicaRequest, response: StopReplicaResponse
    ) -> None:
        """Replicas confirmed deleted; a topic whose replicas all are is removed. Errors
        leave the replica pending until its broker registers again (Kafka's ineligible
        replicas)."""
        if not self.active or response.error_code != ErrorCode.none:
            return
        deleted = {
            (t.topic_name, p.partition_index)
            for t in request.topic_states
            for p in t.partition_states
            if p.delete_partition
        }
        done = set()
        for error in response.partition_errors:
            tp = (error.topic_name, error.partition_index)
            pending = self.deleting.get(tp[0])
            if pending is not None and tp in deleted and error.error_code == ErrorCode.none:
                pending.discard((broker, tp[1]))
                if not pending:
                    done.add(tp[0])
        for name in sorted(done):
            await self._complete_deletion(name)

    async def _complete_deletion(self, name: str) -> None:
        await self.zk.delete_topic(name, self._epoch_version)
        self._forget_topic(name)
        logger.info("Controller %d: deleted topic %s", self.broker_id, name)

    def _forget_topic(self, name: str) -> None:
        for index in self.topic_partitions.pop(name, []):
            self.assignments.pop((name, index), None)
            self.states.pop((name, index), None)
            self.reassigning.pop((name, index), None)
        self.topic_ids.pop(name, None)
        self.deleting.pop(name, None)

    # --- requests from brokers and clients ---------------------------------------------------

    async def handle_alter_partition(self, request: Any) -> Any:
        """AlterPartition v2/v3 from a partition leader (KIP-497): the new ISR is written if
        the leader's epochs are current and its members are live replicas."""
        version = type(request).__version__
        if not self.active:
            return _alter_response(version, ErrorCode.not_controller, [])
        try:
            return await self._submit(self._alter_partition, request)
        except ControllerError as e:
            return _alter_response(version, e.code, [])

    async def _alter_partition(self, request: Any) -> Any:
        version = type(request).__version__
        if not self.active:
            return _alter_response(version, ErrorCode.not_controller, [])
        sender = self.brokers.get(request.broker_id)
        if sender is None or request.broker_epoch not in (-1, sender.epoch):
            return _alter_response(version, ErrorCode.stale_broker_epoch, [])
        names = {topic_id: name for name, topic_id in self.topic_ids.items()}
        results: dict[TP, ErrorCode] = {}
        changes: dict[TP, PartitionState] = {}
        for topic in request.topics:
            name = names.get(topic.topic_id)
            for p in topic.partitions:
                if name is None:
                    results[(str(topic.topic_id), p.partition_index)] = ErrorCode.unknown_topic_id
                    continue
                tp = (name, p.partition_index)
                code, state = self._check_alter(request.broker_id, tp, p, version)
                if state is not None:
                    changes[tp] = state
                results[tp] = code
        batch = RequestBatch()
        for tp in await self._commit(changes, batch, tell_replicas=False):
            results[tp] = ErrorCode.invalid_update_version
        response = _alter_response(
            version, ErrorCode.none, self._alter_results(request, names, results)
        )
        # A reassignment's new replicas may all be in sync now.
        await self._complete_reassignments([tp for tp in changes if tp in self.reassigning], batch)
        self._flush(batch)
        return response

    def _check_alter(
        self, leader: int, tp: TP, p: Any, version: int
    ) -> tuple[ErrorCode, PartitionState | None]:
        state = self.states.get(tp)
        if state is None or tp[0] in self.deleting:
            return ErrorCode.unknown_topic_or_partition, None
        if p.leader_epoch != state.leader_epoch:
            return ErrorCode.fenced_leader_epoch, None
        if leader != state.leader:
            return ErrorCode.not_leader_or_follower, None
        isr = [b.broker_id for b in p.new_isr_with_epochs] if version >= 3 else list(p.new_isr)
        if isr == list(state.isr) and p.leader_recovery_state == state.leader_recovery_state:
            return ErrorCode.none, None  # a retry of what is already written
        if p.partition_epoch != state.partition_epoch:
            return ErrorCode.invalid_update_version, None
        if p.leader_recovery_state == RECOVERING and (
            state.leader_recovery_state == RECOVERED or len(isr) > 1
        ):
            return ErrorCode.invalid_request, None
        replicas = self.assignments[tp]
        epochs = (
            {b.broker_id: b.broker_epoch for b in p.new_isr_with_epochs} if version >= 3 else {}
        )
        for member in isr:
            broker = self.brokers.get(member)
            if (
                member not in replicas
                or broker is None
                or member in self.shutting_down
                or epochs.get(member, -1) not in (-1, broker.epoch)
            ):
                return ErrorCode.ineligible_replica, None
        if leader not in isr or len(set(isr)) != len(isr):
            return ErrorCode.invalid_request, None
        return ErrorCode.none, dataclasses.replace(
            state,
            isr=isr,
            leader_recovery_state=p.leader_recovery_state,
            controller_epoch=self.epoch,
        )

    def _alter_results(
        self, request: Any, names: Mapping[Any, str], results: Mapping[TP, ErrorCode]
    ) -> list[tuple[Any, list[tuple[int, ErrorCode, PartitionState | None]]]]:
        out = []
        for topic in request.topics:
            name = names.get(topic.topic_id)
            parts = []
            for p in topic.partitions:
                tp = (name if name is not None else str(topic.topic_id), p.partition_index)
                code = results[tp]
                parts.append((p.partition_index, code, self.states.get(tp) if code == 0 else None))
            out.append((topic.topic_id, parts))
        return out

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
        broker = self.brokers.get(broker_id)
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
        self.shutting_down.add(broker_id)
        batch = RequestBatch()
        moved: dict[TP, PartitionState] = {}
        shrunk: dict[TP, PartitionState] = {}
        for tp in self._partitions_on({broker_id}):
            replicas = self.assignments[tp]
            state = self.states.get(tp)
            if len(replicas) < 2 or state is None or tp[0] in self.deleting:
                continue
            if state.leader == broker_id:
                elected = elect_for_controlled_shutdown(
                    replicas, state.isr, self.brokers, self.shutting_down
                )
                if elected is not None:
                    moved[tp] = _with_leader(state, elected, self.epoch)
            else:
                if broker_id in state.isr and len(state.isr) > 1:  # an ISR is never empty
                    isr = [r for r in state.isr if r != broker_id]
                    shrunk[tp] = _bump(state, self.epoch, isr=isr)
                epoch = shrunk[tp].leader_epoch if tp in shrunk else state.leader_epoch
                batch.add_stop_replica(broker_id, tp, delete=False, leader_epoch=epoch)
        await self._commit({**moved, **shrunk}, batch, exclude={tp: broker_id for tp in shrunk})
        self._flush(batch)
        remaining = [
            tp
            for tp in self._partitions_on({broker_id})
            if len(self.assignments[tp]) > 1
            and tp in self.states
            and self.states[tp].leader == broker_id
        ]
        logger.info(
            "Controller %d: controlled shutdown of broker %d moved %d leader(s), %d remain",
            self.broker_id,
            broker_id,
            len(moved),
            len(remaining),
        )
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
        candidates = self._candidates()
        results: dict[TP, tuple[ErrorCode, str | None]] = {}
        changes: dict[TP, PartitionState] = {}
        for tp in self.assignments if partitions is None else partitions:
            replicas = self.assignments.get(tp)
            state = self.states.get(tp)
            if replicas is None:
                results[tp] = (
                    ErrorCode.unknown_topic_or_partition,
                    "The partition does not exist.",
                )
            elif tp[0] in self.deleting:
                results[tp] = (ErrorCode.invalid_topic_exception, "The topic is being deleted")
            elif election_type == PREFERRED and state is not None and state.leader == replicas[0]:
                results[tp] = (ErrorCode.election_not_needed, "Election not needed")
            elif election_type == UNCLEAN and state is not None and state.leader in candidates:
                results[tp] = (ErrorCode.election_not_needed, "Election not needed")
            else:
                elected = None
                if state is not None:
                    elected = (
                        elect_preferred(replicas, state.isr, candidates)
                        if election_type == PREFERRED
                        else elect_offline(replicas, state.isr, candidates, True)
                    )
                if elected is None:
                    code = (
                        ErrorCode.preferred_leader_not_available
                        if election_type == PREFERRED
                        else ErrorCode.eligible_leaders_not_available
                    )
                    results[tp] = (code, f"Failed to elect leader for partition {tp[0]}-{tp[1]}")
                else:
                    changes[tp] = _with_leader(state, elected, self.epoch)
                    results[tp] = (ErrorCode.none, None)
        batch = RequestBatch()
        await self._commit(changes, batch)
        self._flush(batch)
        return results

    # --- reassignment (KIP-455) ----------------------------------------------------------------

    async def alter_partition_reassignments(
        self,
        targets: Mapping[TP, Sequence[int] | None],
        *,
        allow_replication_factor_change: bool = True,
    ) -> dict[TP, tuple[ErrorCode, str | None]]:
        """AlterPartitionReassignments: start moving each partition to its target replicas
        (None cancels its reassignment, back to the replicas it had); per partition the
        error code and message Kafka gives. Raises ControllerError (NOT_CONTROLLER)."""
        if not self.active:
            raise _not_controller()
        return await self._submit(
            self._alter_reassignments, targets, allow_replication_factor_change
        )

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
        return {
            tp: (list(self.assignments[tp]), list(adding), list(removing))
            for tp, (adding, removing) in self.reassigning.items()
            if partitions is None or tp in partitions
        }

    async def _alter_reassignments(
        self, targets: Mapping[TP, Sequence[int] | None], allow_rf_change: bool = True
    ) -> dict[TP, tuple[ErrorCode, str | None]]:
        if not self.active:
            raise _not_controller()
        results: dict[TP, tuple[ErrorCode, str | None]] = {}
        moves: dict[TP, tuple[int, ...]] = {}
        for tp, target in targets.items():
            if tp not in self.assignments or tp[0] in self.deleting:
                results[tp] = (
                    ErrorCode.unknown_topic_or_partition,
                    "The partition does not exist.",
                )
                continue
            if target is None:
                if tp not in self.reassigning:
                    results[tp] = (
                        ErrorCode.no_reassignment_in_progress,
                        f"Unable to cancel reassignment of partition {tp[0]}-{tp[1]}: "
                        "there is no reassignment in progress.",
                    )
                    continue
                target = self._origin(tp)
            elif not allow_rf_change:
                # KIP-860, as Kafka's ReplicationControlManager: the count to keep is the
                # one the partition is headed for (an ongoing reassignment's target).
                removing = self.reassigning.get(tp, ((), ()))[1]
                current = len(self.assignments[tp]) - len(removing)
                if len(target) != current:
                    results[tp] = (
                        ErrorCode.invalid_replication_factor,
                        f"The replication factor is changed from {current} to {len(target)}",
                    )
                    continue
            error = self._check_target(target)
            if error is not None:
                results[tp] = (ErrorCode.invalid_replica_assignment, error)
                continue
            moves[tp] = tuple(target)
            results[tp] = (ErrorCode.none, None)
        if moves:
            await self._start_reassignments(moves)
        return results

    def _origin(self, tp: TP) -> tuple[int, ...]:
        adding = self.reassigning.get(tp, ((), ()))[0]
        return tuple(r for r in self.assignments[tp] if r not in adding)

    def _check_target(self, target: Sequence[int]) -> str | None:
        if not target:
            return "Empty replica list specified in partition reassignment."
        if len(set(target)) != len(target):
            return f"Duplicate replica ids in partition reassignment replica list: {list(target)}"
        if any(r not in self.brokers for r in target):
            return (
                f"Replica assignment has brokers that are not alive. Replica list: "
                f"{list(target)}, live broker list: {sorted(self.brokers)}"
            )
        return None

    async def _start_reassignments(self, moves: Mapping[TP, tuple[int, ...]]) -> None:
        """Kafka's onPartitionReassignment: the assignment becomes targets + origin (the
        new replicas start following with a new leader epoch); once every target is in the
        ISR the reassignment completes."""
        batch = RequestBatch()
        dropped: dict[TP, set[int]] = {}
        for tp, target in moves.items():
            origin = self._origin(tp)
            replicas = tuple(dict.fromkeys(target + origin))
            adding = tuple(r for r in replicas if r not in origin)
            removing = tuple(r for r in replicas if r not in target)
            # Replicas an overridden reassignment was adding and this one does not keep.
            dropped[tp] = set(self.assignments[tp]) - set(replicas)
            self.assignments[tp] = replicas
            if adding or removing:
                self.reassigning[tp] = (adding, removing)
            else:
                self.reassigning.pop(tp, None)
            logger.info(
                "Controller %d: reassigning %s-%d to %s (adding %s, removing %s)",
                self.broker_id,
                *tp,
                list(target),
                list(adding),
                list(removing),
            )
        await self._write_assignments({tp[0] for tp in moves})
        complete = [tp for tp in moves if self._reassignment_complete(tp)]
        changes = {}
        for tp in moves:
            state = self.states.get(tp)
            if tp not in complete and state is not None:
                isr = [r for r in state.isr if r not in dropped[tp]] or list(state.isr)
                changes[tp] = _bump(state, self.epoch, isr=isr)
            for broker in dropped[tp]:
                if broker in self.brokers:
                    batch.add_stop_replica(broker, tp, delete=True, leader_epoch=-1)
        await self._commit(changes, batch)
        await self._complete_reassignments(complete, batch)
        self._flush(batch)

    def _reassignment_complete(self, tp: TP) -> bool:
        """Every target replica is in the ISR."""
        state = self.states.get(tp)
        _, removing = self.reassigning.get(tp, ((), ()))
        targets = [r for r in self.assignments[tp] if r not in removing]
        return state is not None and all(r in state.isr for r in targets)

    async def _complete_reassignments(self, partitions: list[TP], batch: RequestBatch) -> None:
        """For each partition whose targets are in sync: lead from a target (a new leader
        epoch either way), the ISR and the assignment become the targets, and the removed
        replicas are deleted."""
        candidates = self._candidates()
        changes: dict[TP, PartitionState] = {}
        removed: dict[TP, tuple[int, ...]] = {}
        for tp in partitions:
            if tp not in self.reassigning or not self._reassignment_complete(tp):
                continue
            _, removing = self.reassigning[tp]
            state = self.states[tp]
            target = tuple(r for r in self.assignments[tp] if r not in removing)
            isr = [r for r in state.isr if r not in removing]
            if state.leader in target and state.leader in candidates:
                changes[tp] = _bump(state, self.epoch, isr=isr)
            else:
                elected = elect_reassigned(target, isr, candidates)
                if elected is None:
                    continue  # no target can lead yet: completed on a later change
                changes[tp] = _with_leader(state, elected, self.epoch)
            self.assignments[tp] = target
            del self.reassigning[tp]
            removed[tp] = removing
        if not changes:
            return
        await self._commit(changes, batch)
        await self._write_assignments({tp[0] for tp in changes})
        for tp, removing in removed.items():
            logger.info("Controller %d: reassignment of %s-%d done", self.broker_id, *tp)
            for broker in removing:
                if broker in self.brokers:
                    batch.add_stop_replica(broker, tp, delete=True, leader_epoch=-1)

    async def _write_assignments(self, topics: Iterable[str]) -> None:
        """The topics' znodes as the context has them (replicas, adding, removing)."""
        for name in sorted(topics):
            indexes = self.topic_partitions[name]
            await self.zk.set_topic_assignment(
                TopicAssignment(
                    name,
                    self.topic_ids[name],
                    {p: list(self.assignments[(name, p)]) for p in indexes},
                    {
                        p: list(self.reassigning[(name, p)][0])
                        for p in indexes
                        if (name, p) in self.reassigning
                    },
                    {
                        p: list(self.reassigning[(name, p)][1])
                        for p in indexes
                        if (name, p) in self.reassigning
                    },
                ),
                self._epoch_version,
            )

    # --- preferred leaders ------------------------------------------------------------------

    async def _rebalance_timer(self) -> None:
        delay = self.config.first_imbalance_check_s
        while True:
            await asyncio.sleep(delay)
            delay = self.config.leader_imbalance_check_interval_s
            self._enqueue(self._check_imbalance)

    async def _check_imbalance(self) -> None:
        """Kafka's auto leader rebalance: for each broker whose share of partitions led by
        another broker, among those it is preferred for, exceeds
        leader.imbalance.per.broker.percentage, move those back to it."""
        if not self.active or self.shutting_down:
            return
        by_preferred: dict[int, list[TP]] = {}
        for tp, replicas in self.assignments.items():
            if tp in self.states and tp[0] not in self.deleting and tp not in self.reassigning:
                by_preferred.setdefault(replicas[0], []).append(tp)
        candidates = self._candidates()
        targets = []
        for broker, tps in by_preferred.items():
            elsewhere = [tp for tp in tps if self.states[tp].leader != broker]
            ratio = len(elsewhere) / len(tps)
            if ratio > self.config.leader_imbalance_per_broker_pct / 100 and broker in candidates:
                targets.extend(elsewhere)
        changes = {}
        for tp in targets:
            elected = elect_preferred(self.assignments[tp], self.states[tp].isr, candidates)
            if elected is not None:
                changes[tp] = _with_leader(self.states[tp], elected, self.epoch)
        if changes:
            logger.info(
                "Controller %d: moving %d leader(s) back to preferred replicas",
                self.broker_id,
                len(changes),
            )
            batch = RequestBatch()
            await self._commit(changes, batch)
            self._flush(batch)

    # --- writing and telling ---------------------------------------------------------------

    async def _create_states(
        self, states: Mapping[TP, PartitionState], batch: RequestBatch
    ) -> None:
        created = await self.zk.create_partition_states(states, self._epoch_version)
        for tp, result in created.items():
            if isinstance(result, StateConflict):
                self._adopt(tp, result, batch)
            else:
                self.states[tp] = result
                batch.add_leader_and_isr(self._live_replicas(tp), tp, self._view(tp), is_new=True)

    def _adopt(self, tp: TP, conflict: StateConflict, batch: RequestBatch) -> None:
        """A write refused because the state znode moved: only a controller writes it, so
        this one's view was stale; take what ZooKeeper holds and tell the replicas."""
        logger.warning(
            "Controller %d: the state of %s-%d changed under it; now %s",
            self.broker_id,
            *tp,
            conflict.current,
        )
        if conflict.current is None:
            self.states.pop(tp, None)
        else:
            self.states[tp] = conflict.current
            batch.add_leader_and_isr(self._live_replicas(tp), tp, self._view(tp))

    async def _commit(
        self,
        changes: Mapping[TP, PartitionState],
        batch: RequestBatch,
        *,
        tell_replicas: bool = True,
        exclude: Mapping[TP, int] = {},
    ) -> set[TP]:
        """Write new states (conditional on each one's partition epoch, fenced by the
        controller epoch) and add them to the batch: LeaderAndIsr to the partition's live
        replicas (but `exclude`), UpdateMetadata to every live broker. The partitions whose
        write was refused (their state moved)."""
        if not changes:
            return set()
        written = await self.zk.write_partition_states(changes, self._epoch_version)
        refused = set()
        for tp, state in written.items():
            if isinstance(state, StateConflict):
                refused.add(tp)
                self._adopt(tp, state, batch)
                continue
            self.states[tp] = state
            if tell_replicas:
                skip = exclude.get(tp)
                recipients = [r for r in self._live_replicas(tp) if r != skip]
                batch.add_leader_and_isr(recipients, tp, self._view(tp))
            else:
                batch.add_update_metadata((), {tp: self._view(tp)})
        return refused

    def _flush(self, batch: RequestBatch) -> None:
        if not batch or self._channel is None:
            return
        batch.send(
            self._channel,
            controller_id=self.broker_id,
            controller_epoch=self.epoch,
            brokers=self.brokers,
            topic_ids=self.topic_ids,
            listener=self.config.inter_broker_listener,
            on_stop_replica=self._on_stop_replica,
        )

    # --- views -----------------------------------------------------------------------------

    def _candidates(self) -> set[int]:
        """Brokers that may lead: live and not shutting down."""
        return {b for b in self.brokers if b not in self.shutting_down}

    def _live_replicas(self, tp: TP) -> list[int]:
        return [r for r in self.assignments[tp] if r in self.brokers]

    def _partitions_on(self, brokers: Collection[int]) -> list[TP]:
        return [
            tp for tp, replicas in self.assignments.items() if any(r in brokers for r in replicas)
        ]

    def _view(self, tp: TP) -> PartitionView:
        s = self.states[tp]
        return PartitionView(
            leader=s.leader,
            leader_epoch=s.leader_epoch,
            isr=tuple(s.isr),
            partition_epoch=s.partition_epoch,
            controller_epoch=s.controller_epoch,
            replicas=self.assignments[tp],
            leader_recovery_state=s.leader_recovery_state,
            adding=self.reassigning.get(tp, ((), ()))[0],
            removing=self.reassigning.get(tp, ((), ()))[1],
        )

    def _views(self) -> dict[TP, PartitionView]:
        return {tp: self._view(tp) for tp in self.states if tp[0] not in self.deleting}


def _with_leader(state: PartitionState, elected: Elected, controller_epoch: int) -> PartitionState:
    return _bump(
        state,
        controller_epoch,
        leader=elected.leader,
        isr=elected.isr,
        leader_recovery_state=RECOVERING if elected.unclean else state.leader_recovery_state,
    )


def _bump(state: PartitionState, controller_epoch: int, **changes: Any) -> PartitionState:
    """A new leader or ISR decided by the controller: a new leader epoch (Kafka's ZooKeeper
    controller bumps it for ISR shrinks too)."""
    return dataclasses.replace(
        state, leader_epoch=state.leader_epoch + 1, controller_epoch=controller_epoch, **changes
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


def _alter_response(
    version: int,
    error: ErrorCode,
    topics: list[tuple[Any, list[tuple[int, ErrorCode, PartitionState | None]]]],
) -> Any:
    schema = alter_v3 if version >= 3 else alter_v2
    return schema.AlterPartitionResponse(
        throttle_time=i32Timedelta.parse(timedelta(0)),
        error_code=error,
        topics=tuple(
            schema.TopicData(
                topic_id=topic_id,
                partitions=tuple(
                    schema.PartitionData(
                        partition_index=i32(index),
                        error_code=code,
                        leader_id=i32(s.leader if s else -1),
                        leader_epoch=i32(s.leader_epoch if s else -1),
                        isr=tuple(i32(r) for r in s.isr) if s else (),
                        leader_recovery_state=i8(s.leader_recovery_state if s else 0),
                        partition_epoch=i32(s.partition_epoch if s else -1),
                    )
                    for index, code, s in parts
                ),
            )
            for topic_id, parts in topics
        ),
    )
