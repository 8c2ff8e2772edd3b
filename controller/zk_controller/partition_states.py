"""The controller's partition state changes (Kafka's PartitionStateMachine, and the ISR
shrinks of its ReplicaStateMachine, done together in one batched write).

Every leader and ISR the controller decides is written here: to ZooKeeper first (one multi
per batch, each state conditional on its partition epoch and fenced by the controller
epoch's zk version), then added to the event's RequestBatch for the brokers.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Mapping

from kio.schema.errors import ErrorCode

from gregor.controller.base import ElectionType
from gregor.controller.zk_controller.channel import TP, RequestBatch
from gregor.controller.zk_controller.config import ControllerConfig
from gregor.controller.zk_controller.context import ControllerContext
from gregor.controller.zk_controller.election import (
    RECOVERED,
    RECOVERING,
    Elected,
    elect_for_controlled_shutdown,
    elect_offline,
    elect_preferred,
)
from gregor.controller.zookeeper.data import KafkaZk, PartitionState, StateConflict

logger = logging.getLogger(__name__)

NO_LEADER = -1


class PartitionStateMachine:
    def __init__(self, context: ControllerContext, zk: KafkaZk, config: ControllerConfig) -> None:
        self.context = context
        self.zk = zk
        self.config = config

    # --- brokers coming and going ----------------------------------------------------------

    async def react_to_liveness(self, batch: RequestBatch) -> None:
        """Give every partition a live leader if it can have one and drop dead replicas
        from ISRs, in one batched write (Kafka's OnlinePartition and OfflineReplica
        transitions together)."""
        ctx = self.context
        candidates = ctx.candidates()
        new: dict[TP, PartitionState] = {}
        changes: dict[TP, PartitionState] = {}
        need_config: list[TP] = []
        for tp, replicas in ctx.assignments.items():
            if tp[0] in ctx.deleting:
                continue
            state = ctx.states.get(tp)
            if state is None:
                live = [r for r in replicas if r in candidates]
                if live:
                    new[tp] = self._initial_state(live)
                continue
            if state.leader not in ctx.brokers:
                elected = elect_offline(
                    replicas, state.isr, candidates, self.config.unclean_leader_election
                )
                if elected is None and any(r in candidates for r in replicas):
                    need_config.append(tp)  # the topic may allow unclean election
                if elected is not None:
                    changes[tp] = with_leader(state, elected, ctx.epoch)
                elif state.leader != NO_LEADER:
                    # No eligible replica: offline, the ISR kept for a clean election later.
                    changes[tp] = bump(state, ctx.epoch, leader=NO_LEADER)
            else:
                isr = [r for r in state.isr if r in ctx.brokers]
                if len(isr) != len(state.isr):
                    changes[tp] = bump(state, ctx.epoch, isr=isr)
        for tp in await self._unclean_allowed(need_config):
            state = changes.get(tp, ctx.states[tp])
            elected = elect_offline(ctx.assignments[tp], state.isr, candidates, True)
            if elected is not None:
                logger.warning("Unclean leader election for %s-%d: %d", *tp, elected.leader)
                changes[tp] = with_leader(ctx.states[tp], elected, ctx.epoch)
        if new:
            await self._create_states(new, batch)
        await self.commit(changes, batch)

    def _initial_state(self, live: list[int]) -> PartitionState:
        """A new partition: the first live replica leads, the live replicas are the ISR."""
        return PartitionState(
            leader=live[0],
            leader_epoch=0,
            isr=list(live),
            controller_epoch=self.context.epoch,
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

    # --- leaders moved on request ----------------------------------------------------------

    async def controlled_shutdown(self, broker_id: int, batch: RequestBatch) -> list[TP]:
        """Move leadership off a stopping (live) broker and shrink it out of the ISRs of the
        partitions it follows; the partitions it still leads."""
        ctx = self.context
        started = time.monotonic()
        ctx.shutting_down.add(broker_id)
        moved: dict[TP, PartitionState] = {}
        shrunk: dict[TP, PartitionState] = {}
        for tp in ctx.partitions_on({broker_id}):
            replicas = ctx.assignments[tp]
            state = ctx.states.get(tp)
            if len(replicas) < 2 or state is None or tp[0] in ctx.deleting:
                continue
            if state.leader == broker_id:
                elected = elect_for_controlled_shutdown(
                    replicas, state.isr, ctx.brokers, ctx.shutting_down
                )
                if elected is not None:
                    moved[tp] = with_leader(state, elected, ctx.epoch)
            else:
                if broker_id in state.isr and len(state.isr) > 1:  # an ISR is never empty
                    isr = [r for r in state.isr if r != broker_id]
                    shrunk[tp] = bump(state, ctx.epoch, isr=isr)
                epoch = shrunk[tp].leader_epoch if tp in shrunk else state.leader_epoch
                batch.add_stop_replica(broker_id, tp, delete=False, leader_epoch=epoch)
        decided = time.monotonic()
        await self.commit({**moved, **shrunk}, batch, exclude={tp: broker_id for tp in shrunk})
        committed = time.monotonic()
        remaining = [
            tp
            for tp in ctx.partitions_on({broker_id})
            if len(ctx.assignments[tp]) > 1
            and tp in ctx.states
            and ctx.states[tp].leader == broker_id
        ]
        logger.info(
            "Controller %d: controlled shutdown of broker %d moved %d leader(s) and shrank "
            "%d ISR(s), %d remain (elected in %.3f s, states written in %.3f s)",
            ctx.broker_id,
            broker_id,
            len(moved),
            len(shrunk),
            len(remaining),
            decided - started,
            committed - decided,
        )
        return remaining

    async def elect_leaders(
        self, election_type: int, partitions: Collection[TP] | None, batch: RequestBatch
    ) -> dict[TP, tuple[ErrorCode, str | None]]:
        """ElectLeaders: preferred or unclean election for `partitions` (None: all); per
        partition the error code and message Kafka gives."""
        ctx = self.context
        candidates = ctx.candidates()
        results: dict[TP, tuple[ErrorCode, str | None]] = {}
        changes: dict[TP, PartitionState] = {}
        preferred = election_type == ElectionType.PREFERRED
        for tp in ctx.assignments if partitions is None else partitions:
            replicas = ctx.assignments.get(tp)
            state = ctx.states.get(tp)
            if replicas is None:
                results[tp] = (
                    ErrorCode.unknown_topic_or_partition,
                    "The partition does not exist.",
                )
            elif tp[0] in ctx.deleting:
                results[tp] = (ErrorCode.invalid_topic_exception, "The topic is being deleted")
            elif preferred and state is not None and state.leader == replicas[0]:
                results[tp] = (ErrorCode.election_not_needed, "Election not needed")
            elif (
                election_type == ElectionType.UNCLEAN
                and state is not None
                and state.leader in candidates
            ):
                results[tp] = (ErrorCode.election_not_needed, "Election not needed")
            else:
                elected = None
                if state is not None:
                    elected = (
                        elect_preferred(replicas, state.isr, candidates)
                        if preferred
                        else elect_offline(replicas, state.isr, candidates, True)
                    )
                if state is None or elected is None:
                    code = (
                        ErrorCode.preferred_leader_not_available
                        if preferred
                        else ErrorCode.eligible_leaders_not_available
                    )
                    results[tp] = (code, f"Failed to elect leader for partition {tp[0]}-{tp[1]}")
                else:
                    changes[tp] = with_leader(state, elected, ctx.epoch)
                    results[tp] = (ErrorCode.none, None)
        await self.commit(changes, batch)
        return results

    async def rebalance_leaders(self, batch: RequestBatch) -> None:
        """Kafka's auto leader rebalance: for each broker whose share of partitions led by
        another broker, among those it is preferred for, exceeds
        leader.imbalance.per.broker.percentage, move those back to it."""
        ctx = self.context
        by_preferred: dict[int, list[TP]] = {}
        for tp, replicas in ctx.assignments.items():
            if tp in ctx.states and tp[0] not in ctx.deleting and tp not in ctx.reassigning:
                by_preferred.setdefault(replicas[0], []).append(tp)
        candidates = ctx.candidates()
        targets = []
        for broker, tps in by_preferred.items():
            elsewhere = [tp for tp in tps if ctx.states[tp].leader != broker]
            ratio = len(elsewhere) / len(tps)
            if ratio > self.config.leader_imbalance_per_broker_pct / 100 and broker in candidates:
                targets.extend(elsewhere)
        changes = {}
        for tp in targets:
            elected = elect_preferred(ctx.assignments[tp], ctx.states[tp].isr, candidates)
            if elected is not None:
                changes[tp] = with_leader(ctx.states[tp], elected, ctx.epoch)
        if changes:
            logger.info(
                "Controller %d: moving %d leader(s) back to preferred replicas",
                ctx.broker_id,
                len(changes),
            )
            await self.commit(changes, batch)

    # --- writing ---------------------------------------------------------------------------

    async def _create_states(
        self, states: Mapping[TP, PartitionState], batch: RequestBatch
    ) -> None:
        ctx = self.context
        created = await self.zk.create_partition_states(states, ctx.epoch_version)
        for tp, result in created.items():
            if isinstance(result, StateConflict):
                self._adopt(tp, result, batch)
            else:
                ctx.states[tp] = result
                batch.add_leader_and_isr(ctx.live_replicas(tp), tp, ctx.view(tp), is_new=True)

    def _adopt(self, tp: TP, conflict: StateConflict, batch: RequestBatch) -> None:
        """A write refused because the state znode moved: only a controller writes it, so
        this one's view was stale; take what ZooKeeper holds and tell the replicas."""
        ctx = self.context
        logger.warning(
            "Controller %d: the state of %s-%d changed under it; now %s",
            ctx.broker_id,
            *tp,
            conflict.current,
        )
        if conflict.current is None:
            ctx.states.pop(tp, None)
        else:
            ctx.states[tp] = conflict.current
            batch.add_leader_and_isr(ctx.live_replicas(tp), tp, ctx.view(tp))

    async def commit(
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
        ctx = self.context
        written = await self.zk.write_partition_states(changes, ctx.epoch_version)
        refused = set()
        for tp, state in written.items():
            if isinstance(state, StateConflict):
                refused.add(tp)
                self._adopt(tp, state, batch)
                continue
            ctx.states[tp] = state
            if tell_replicas:
                skip = exclude.get(tp)
                recipients = [r for r in ctx.live_replicas(tp) if r != skip]
                batch.add_leader_and_isr(recipients, tp, ctx.view(tp))
            else:
                batch.add_update_metadata((), {tp: ctx.view(tp)})
        return refused


def with_leader(state: PartitionState, elected: Elected, controller_epoch: int) -> PartitionState:
    return bump(
        state,
        controller_epoch,
        leader=elected.leader,
        isr=elected.isr,
        leader_recovery_state=RECOVERING if elected.unclean else state.leader_recovery_state,
    )


def bump(
    state: PartitionState,
    controller_epoch: int,
    *,
    leader: int | None = None,
    isr: list[int] | None = None,
    leader_recovery_state: int | None = None,
) -> PartitionState:
    """A new leader or ISR decided by the controller: a new leader epoch (Kafka's ZooKeeper
    controller bumps it for ISR shrinks too). Built directly: a failover makes 50,000."""
    return PartitionState(
        state.leader if leader is None else leader,
        state.leader_epoch + 1,
        state.isr if isr is None else isr,
        controller_epoch,
        state.leader_recovery_state if leader_recovery_state is None else leader_recovery_state,
        state.partition_epoch,
    )
