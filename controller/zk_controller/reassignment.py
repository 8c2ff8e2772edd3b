"""Partition reassignment (KIP-455; Kafka's onPartitionReassignment).

A reassigned partition's assignment is its target replicas followed by the replicas it
is leaving, written to its topic's znode with the replicas being added and removed. Once
every target is in the ISR the reassignment completes: a target leads, the assignment and
the ISR become the targets, and the replicas left behind are deleted.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping, Sequence

from kio.schema.errors import ErrorCode

from gregor.controller.zk_controller.channel import TP, RequestBatch
from gregor.controller.zk_controller.context import ControllerContext
from gregor.controller.zk_controller.election import elect_reassigned
from gregor.controller.zk_controller.partition_states import (
    PartitionStateMachine,
    bump,
    with_leader,
)
from gregor.controller.zookeeper.data import KafkaZk, PartitionState, TopicAssignment

logger = logging.getLogger(__name__)


class Reassignments:
    def __init__(
        self, context: ControllerContext, zk: KafkaZk, partition_states: PartitionStateMachine
    ) -> None:
        self.context = context
        self.zk = zk
        self.partition_states = partition_states

    def ongoing(
        self, partitions: Collection[TP] | None
    ) -> dict[TP, tuple[list[int], list[int], list[int]]]:
        """The ongoing reassignments among `partitions` (None: all): replicas, adding,
        removing."""
        ctx = self.context
        return {
            tp: (list(ctx.assignments[tp]), list(adding), list(removing))
            for tp, (adding, removing) in ctx.reassigning.items()
            if partitions is None or tp in partitions
        }

    async def alter(
        self,
        targets: Mapping[TP, Sequence[int] | None],
        allow_rf_change: bool,
        batch: RequestBatch,
    ) -> dict[TP, tuple[ErrorCode, str | None]]:
        """AlterPartitionReassignments: start moving each partition to its target replicas
        (None cancels its reassignment, back to the replicas it had); per partition the
        error code and message Kafka gives."""
        ctx = self.context
        results: dict[TP, tuple[ErrorCode, str | None]] = {}
        moves: dict[TP, tuple[int, ...]] = {}
        for tp, target in targets.items():
            if tp not in ctx.assignments or tp[0] in ctx.deleting:
                results[tp] = (
                    ErrorCode.unknown_topic_or_partition,
                    "The partition does not exist.",
                )
                continue
            if target is None:
                if tp not in ctx.reassigning:
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
                removing = ctx.reassigning.get(tp, ((), ()))[1]
                current = len(ctx.assignments[tp]) - len(removing)
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
            await self._start(moves, batch)
        return results

    def _origin(self, tp: TP) -> tuple[int, ...]:
        adding = self.context.reassigning.get(tp, ((), ()))[0]
        return tuple(r for r in self.context.assignments[tp] if r not in adding)

    def _check_target(self, target: Sequence[int]) -> str | None:
        brokers = self.context.brokers
        if not target:
            return "Empty replica list specified in partition reassignment."
        if len(set(target)) != len(target):
            return f"Duplicate replica ids in partition reassignment replica list: {list(target)}"
        if any(r not in brokers for r in target):
            return (
                f"Replica assignment has brokers that are not alive. Replica list: "
                f"{list(target)}, live broker list: {sorted(brokers)}"
            )
        return None

    async def _start(self, moves: Mapping[TP, tuple[int, ...]], batch: RequestBatch) -> None:
        """Kafka's onPartitionReassignment: the assignment becomes targets + origin (the
        new replicas start following with a new leader epoch); once every target is in the
        ISR the reassignment completes."""
        ctx = self.context
        dropped: dict[TP, set[int]] = {}
        for tp, target in moves.items():
            origin = self._origin(tp)
            replicas = tuple(dict.fromkeys(target + origin))
            adding = tuple(r for r in replicas if r not in origin)
            removing = tuple(r for r in replicas if r not in target)
            # Replicas an overridden reassignment was adding and this one does not keep.
            dropped[tp] = set(ctx.assignments[tp]) - set(replicas)
            ctx.assignments[tp] = replicas
            if adding or removing:
                ctx.reassigning[tp] = (adding, removing)
            else:
                ctx.reassigning.pop(tp, None)
            logger.info(
                "Controller %d: reassigning %s-%d to %s (adding %s, removing %s)",
                ctx.broker_id,
                *tp,
                list(target),
                list(adding),
                list(removing),
            )
        await self._write_assignments({tp[0] for tp in moves})
        complete = [tp for tp in moves if self._is_complete(tp)]
        changes = {}
        for tp in moves:
            state = ctx.states.get(tp)
            if tp not in complete and state is not None:
                isr = [r for r in state.isr if r not in dropped[tp]] or list(state.isr)
                changes[tp] = bump(state, ctx.epoch, isr=isr)
            for broker in dropped[tp]:
                if broker in ctx.brokers:
                    batch.add_stop_replica(broker, tp, delete=True, leader_epoch=-1)
        await self.partition_states.commit(changes, batch)
        await self.complete(complete, batch)

    def _is_complete(self, tp: TP) -> bool:
        """Every target replica is in the ISR."""
        state = self.context.states.get(tp)
        _, removing = self.context.reassigning.get(tp, ((), ()))
        targets = [r for r in self.context.assignments[tp] if r not in removing]
        return state is not None and all(r in state.isr for r in targets)

    async def complete(self, partitions: list[TP], batch: RequestBatch) -> None:
        """For each partition whose targets are in sync: lead from a target (a new leader
        epoch either way), the ISR and the assignment become the targets, and the removed
        replicas are deleted."""
        ctx = self.context
        candidates = ctx.candidates()
        changes: dict[TP, PartitionState] = {}
        removed: dict[TP, tuple[int, ...]] = {}
        for tp in partitions:
            if tp not in ctx.reassigning or not self._is_complete(tp):
                continue
            _, removing = ctx.reassigning[tp]
            state = ctx.states[tp]
            target = tuple(r for r in ctx.assignments[tp] if r not in removing)
            isr = [r for r in state.isr if r not in removing]
            if state.leader in target and state.leader in candidates:
                changes[tp] = bump(state, ctx.epoch, isr=isr)
            else:
                elected = elect_reassigned(target, isr, candidates)
                if elected is None:
                    continue  # no target can lead yet: completed on a later change
                changes[tp] = with_leader(state, elected, ctx.epoch)
            ctx.assignments[tp] = target
            del ctx.reassigning[tp]
            removed[tp] = removing
        if not changes:
            return
        await self.partition_states.commit(changes, batch)
        await self._write_assignments({tp[0] for tp in changes})
        for tp, removing in removed.items():
            logger.info("Controller %d: reassignment of %s-%d done", ctx.broker_id, *tp)
            for broker in removing:
                if broker in ctx.brokers:
                    batch.add_stop_replica(broker, tp, delete=True, leader_epoch=-1)

    async def _write_assignments(self, topics: Iterable[str]) -> None:
        """The topics' znodes as the context has them (replicas, adding, removing)."""
        ctx = self.context
        for name in sorted(topics):
            indexes = ctx.topic_partitions[name]
            await self.zk.set_topic_assignment(
                TopicAssignment(
                    name,
                    ctx.topic_ids[name],
                    {p: list(ctx.assignments[(name, p)]) for p in indexes},
                    {
                        p: list(ctx.reassigning[(name, p)][0])
                        for p in indexes
                        if (name, p) in ctx.reassigning
                    },
                    {
                        p: list(ctx.reassigning[(name, p)][1])
                        for p in indexes
                        if (name, p) in ctx.reassigning
                    },
                ),
                ctx.epoch_version,
            )
