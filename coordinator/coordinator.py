"""The group coordinator: the classic group protocol and committed offsets, for the groups
whose ``__consumer_offsets`` partition this broker leads.

Three parts: the runtime (``runtime.py``) owns those partitions' groups, loads them from
the log and writes and applies their records; the membership (``membership.py``) and the
offsets (``offsets.py``) serve the API handlers through it. This facade follows the
partitions' leadership and runs the broker's periodic and shutdown work.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from gregor.coordinator.membership import Membership
from gregor.coordinator.offsets import Offsets
from gregor.coordinator.runtime import CoordinatorRuntime
from gregor.coordinator.settings import Settings
from gregor.replica.manager import ReplicaManager
from gregor.replica.purgatory import Purgatory

__all__ = ["GroupCoordinator", "Settings"]


class GroupCoordinator:
    def __init__(
        self,
        settings: Settings,
        replicas: ReplicaManager,
        append_purgatory: Purgatory[Any],
        now_ms: Callable[[], int],
    ) -> None:
        self.runtime = CoordinatorRuntime(settings, replicas, append_purgatory, now_ms)
        self.membership = Membership(settings, self.runtime, now_ms)
        self.offsets = Offsets(settings, self.runtime, self.membership, now_ms)

    def partition_for(self, group_id: str) -> int:
        return self.runtime.partition_for(group_id)

    def owner_error(self, group_id: str) -> ErrorCode | None:
        """COORDINATOR_LOAD_IN_PROGRESS or NOT_COORDINATOR; None when this broker serves
        the group."""
        return self.runtime.owner_error(group_id)

    def loading(self) -> bool:
        return self.runtime.loading()

    def on_become_leader(self, index: int) -> None:
        """Load the partition's groups (COORDINATOR_LOAD_IN_PROGRESS for them meanwhile)."""
        self.runtime.load(index, self.membership.resume)

    def on_resign(self, index: int) -> None:
        """Unload the partition's groups: parked joins and syncs and writes in flight answer
        NOT_COORDINATOR, their timers stop."""
        self.runtime.unload(index, self.membership.unload)

    def on_txn_marker(
        self, partition_index: int, producer_id: int, commit: bool, marker_offset: int
    ) -> None:
        """A COMMIT or ABORT marker was appended to the partition (WriteTxnMarkers): the
        producer's pending transactional offsets apply, or drop, once it is committed."""
        self.runtime.on_txn_marker(partition_index, producer_id, commit, marker_offset)

    def on_topic_deleted(self, topic: str) -> None:
        self.offsets.on_topic_deleted(topic)

    def expire_offsets(self, now_ms: int | None = None) -> int:
        return self.offsets.expire_offsets(now_ms)

    def shutdown(self) -> None:
        for index in self.runtime.partitions():
            self.on_resign(index)
        self.membership.shutdown()
