"""AlterPartition from partition leaders (KIP-497): the ISR changes they ask for.

A leader's new ISR is written if its epochs are current and the members are live
replicas; the answer carries each partition's state as the controller now has it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from kio.schema.alter_partition.v2 import response as alter_v2
from kio.schema.alter_partition.v3 import response as alter_v3
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32, i32Timedelta

from gregor.controller.zk_controller.channel import TP, RequestBatch
from gregor.controller.zk_controller.context import ControllerContext
from gregor.controller.zk_controller.election import RECOVERED, RECOVERING
from gregor.controller.zk_controller.partition_states import PartitionStateMachine
from gregor.controller.zk_controller.reassignment import Reassignments
from gregor.controller.zookeeper.data import PartitionState

PartitionResults = list[tuple[Any, list[tuple[int, ErrorCode, PartitionState | None]]]]


class AlterPartitionHandler:
    def __init__(
        self,
        context: ControllerContext,
        partition_states: PartitionStateMachine,
        reassignments: Reassignments,
    ) -> None:
        self.context = context
        self.partition_states = partition_states
        self.reassignments = reassignments

    async def handle(self, request: Any, batch: RequestBatch) -> Any:
        """AlterPartition v2/v3; the written states are added to `batch`."""
        ctx = self.context
        version = type(request).__version__
        sender = ctx.brokers.get(request.broker_id)
        if sender is None or request.broker_epoch not in (-1, sender.epoch):
            return alter_response(version, ErrorCode.stale_broker_epoch, [])
        names = {topic_id: name for name, topic_id in ctx.topic_ids.items()}
        results: dict[TP, ErrorCode] = {}
        changes: dict[TP, PartitionState] = {}
        for topic in request.topics:
            name = names.get(topic.topic_id)
            for p in topic.partitions:
                if name is None:
                    results[(str(topic.topic_id), p.partition_index)] = ErrorCode.unknown_topic_id
                    continue
                tp = (name, p.partition_index)
                code, state = self._check(request.broker_id, tp, p, version)
                if state is not None:
                    changes[tp] = state
                results[tp] = code
        for tp in await self.partition_states.commit(changes, batch, tell_replicas=False):
            results[tp] = ErrorCode.invalid_update_version
        response = alter_response(version, ErrorCode.none, self._results(request, names, results))
        # A reassignment's new replicas may all be in sync now.
        await self.reassignments.complete([tp for tp in changes if tp in ctx.reassigning], batch)
        return response

    def _check(
        self, leader: int, tp: TP, p: Any, version: int
    ) -> tuple[ErrorCode, PartitionState | None]:
        ctx = self.context
        state = ctx.states.get(tp)
        if state is None or tp[0] in ctx.deleting:
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
        replicas = ctx.assignments[tp]
        epochs = (
            {b.broker_id: b.broker_epoch for b in p.new_isr_with_epochs} if version >= 3 else {}
        )
        for member in isr:
            broker = ctx.brokers.get(member)
            if (
                member not in replicas
                or broker is None
                or member in ctx.shutting_down
                or epochs.get(member, -1) not in (-1, broker.epoch)
            ):
                return ErrorCode.ineligible_replica, None
        if leader not in isr or len(set(isr)) != len(isr):
            return ErrorCode.invalid_request, None
        return ErrorCode.none, dataclasses.replace(
            state,
            isr=isr,
            leader_recovery_state=p.leader_recovery_state,
            controller_epoch=ctx.epoch,
        )

    def _results(
        self, request: Any, names: Mapping[Any, str], results: Mapping[TP, ErrorCode]
    ) -> PartitionResults:
        out = []
        for topic in request.topics:
            name = names.get(topic.topic_id)
            parts = []
            for p in topic.partitions:
                tp = (name if name is not None else str(topic.topic_id), p.partition_index)
                code = results[tp]
                parts.append(
                    (p.partition_index, code, self.context.states.get(tp) if code == 0 else None)
                )
            out.append((topic.topic_id, parts))
        return out


def alter_response(version: int, error: ErrorCode, topics: PartitionResults) -> Any:
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
