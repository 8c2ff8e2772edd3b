"""The group coordinator: the classic, consumer (KIP-848) and share (KIP-932) group protocols
and committed offsets, for the groups whose ``__consumer_offsets`` partition this broker leads.

The parts: the runtime (``runtime.py``) owns those partitions' groups, loads them from
the log and writes and applies their records; the classic membership (``membership.py``),
the consumer-protocol membership (``consumer_membership.py``) and the offsets
(``offsets.py``) serve the API handlers through it. A group id is a classic group, a
consumer group or a share group, never two of them; the migration (``migration.py``)
converts a classic group into a consumer group and back and serves a consumer group's
classic members. Share groups (``share_membership.py``) are never converted. This facade
follows the partitions' leadership and runs the broker's periodic and shutdown work.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from gregor.coordinator.assignors import PartitionRacks
from gregor.coordinator.consumer_membership import ConsumerMembership
from gregor.coordinator.membership import Membership
from gregor.coordinator.migration import Migration
from gregor.coordinator.offsets import Offsets
from gregor.coordinator.runtime import CoordinatorRuntime
from gregor.coordinator.settings import Settings
from gregor.coordinator.share_membership import ShareMembership
from gregor.coordinator.share_offsets import ShareOffsets
from gregor.replica.manager import ReplicaManager
from gregor.replica.purgatory import Purgatory
from gregor.replica.share_persister import SharePersister

if TYPE_CHECKING:
    from gregor.controller.metadata.cache import MetadataCache

__all__ = ["GroupCoordinator", "Settings"]


def replica_racks(
    metadata: MetadataCache | None, topic_id: uuid.UUID, index: int
) -> tuple[str, ...]:
    """The racks (``broker.rack``) of the brokers holding a replica of the partition, one
    per replica, sorted (Kafka's partitionRacks, as its topic hash reads them)."""
    if metadata is None:
        return ()
    name = metadata.topic_name(topic_id)
    partition = None if name is None else metadata.partition(name, index)
    if partition is None:
        return ()
    brokers = (metadata.brokers.get(b) for b in partition.replicas)
    return tuple(sorted(b.rack for b in brokers if b is not None and b.rack))


class GroupCoordinator:
    def __init__(
        self,
        settings: Settings,
        replicas: ReplicaManager,
        append_purgatory: Purgatory[Any],
        now_ms: Callable[[], int],
        share_persister: SharePersister | None = None,
    ) -> None:
        """``share_persister``: where share groups initialize and delete their
        share-partitions' state (None: they do not)."""
        self.runtime = CoordinatorRuntime(settings, replicas, append_purgatory, now_ms)

        def racks() -> PartitionRacks | None:
            metadata = replicas.metadata
            if metadata is None or not any(b.rack for b in metadata.brokers.values()):
                return None
            return partial(replica_racks, metadata)

        self.share_membership = ShareMembership(
            settings, self.runtime, now_ms, racks, share_persister
        )
        self.share_offsets = ShareOffsets(
            self.share_membership, self.runtime, share_persister, now_ms
        )
        self.consumer_membership = ConsumerMembership(settings, self.runtime, now_ms, racks)
        self.membership = Membership(settings, self.runtime, now_ms, self.consumer_membership)
        self.migration = Migration(
            settings,
            self.runtime,
            self.membership,
            self.consumer_membership,
            lambda: replicas.metadata.topics if replicas.metadata is not None else {},
            now_ms,
        )
        self.membership.migration = self.consumer_membership.migration = self.migration
        self.offsets = Offsets(
            settings, self.runtime, self.membership, self.consumer_membership, now_ms
        )

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
        self.runtime.load(
            index,
            self.membership.resume,
            self.consumer_membership.resume,
            self.share_membership.resume,
        )

    def on_resign(self, index: int) -> None:
        """Unload the partition's groups: parked joins and syncs and writes in flight answer
        NOT_COORDINATOR, their timers stop."""
        self.runtime.unload(
            index,
            self.membership.unload,
            self.consumer_membership.unload,
            self.share_membership.unload,
        )

    def on_txn_marker(
        self, partition_index: int, producer_id: int, commit: bool, marker_offset: int
    ) -> None:
        """A COMMIT or ABORT marker was appended to the partition (WriteTxnMarkers): the
        producer's pending transactional offsets apply, or drop, once it is committed."""
        self.runtime.on_txn_marker(partition_index, producer_id, commit, marker_offset)

    def on_topic_deleted(self, topic: str) -> None:
        self.offsets.on_topic_deleted(topic)
        self.share_membership.on_topic_deleted(topic)

    def expire_offsets(self, now_ms: int | None = None) -> int:
        return self.offsets.expire_offsets(now_ms)

    def shutdown(self) -> None:
        for index in self.runtime.partitions():
            self.on_resign(index)
        self.membership.shutdown()
        self.consumer_membership.shutdown()
        self.share_membership.shutdown()
        self.migration.shutdown()
