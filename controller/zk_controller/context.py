"""The controller's view of the cluster (Kafka's ControllerContext).

Rebuilt from ZooKeeper on each failover and forgotten on resignation; between the two the
controller's events are its only writers, one at a time.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from gregor.controller.zk_controller.channel import TP, Broker, PartitionView
from gregor.controller.zookeeper.data import PartitionState


class ControllerContext:
    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id
        # The controller epoch won in the last election and its znode's version, which
        # fences every write: both outlive a resignation (the next election replaces them).
        self.epoch = 0
        self.epoch_version = -1
        self.reset()

    def reset(self) -> None:
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

    def forget_topic(self, name: str) -> None:
        for index in self.topic_partitions.pop(name, []):
            self.assignments.pop((name, index), None)
            self.states.pop((name, index), None)
            self.reassigning.pop((name, index), None)
        self.topic_ids.pop(name, None)
        self.deleting.pop(name, None)

    def candidates(self) -> set[int]:
        """Brokers that may lead: live and not shutting down."""
        return {b for b in self.brokers if b not in self.shutting_down}

    def live_replicas(self, tp: TP) -> list[int]:
        return [r for r in self.assignments[tp] if r in self.brokers]

    def partitions_on(self, brokers: Collection[int]) -> list[TP]:
        return [
            tp for tp, replicas in self.assignments.items() if any(r in brokers for r in replicas)
        ]

    def view(self, tp: TP) -> PartitionView:
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

    def views(self) -> dict[TP, PartitionView]:
        return {tp: self.view(tp) for tp in self.states if tp[0] not in self.deleting}
