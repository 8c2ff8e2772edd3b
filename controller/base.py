"""The controller as the API handlers see it: an asynchronous interface with two
implementations, the embedded single node (`controller/embedded.py`) and a broker of a
ZooKeeper cluster (`controller/zk_broker.py`).

Every operation takes many items at once and answers each one: its result, or a
`TopicError` carrying Kafka's error code, in the order asked. The handlers await these
calls; the embedded node does its work at once, a cluster broker waits for the controller
and for the metadata to come back.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gregor.controller.acls.model import AclBinding, AclBindingFilter
from gregor.controller.metadata.cache import MetadataCache, TopicInfo
from gregor.controller.metadata.config_resource import ConfigResource
from gregor.controller.quota_entities import QuotaConfigs, QuotaEntity
from gregor.controller.scram_alterations import Alteration
from gregor.controller.scram_cache import CredentialCache
from gregor.controller.topics import TopicError
from gregor.wire.errors import KafkaError

TopicPartition = tuple[str, int]
# The bindings one DeleteAcls filter removed, each with the error that kept it, if any.
AclDeletions = list[tuple[AclBinding, KafkaError | None]]


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create. `assignments` (partition -> replica broker ids), when given,
    fixes the partitions and their replicas; otherwise the controller assigns
    `num_partitions` partitions of `replication_factor` replicas (both resolved from the
    broker defaults by the caller)."""

    name: str
    num_partitions: int
    replication_factor: int
    configs: Mapping[str, str] = field(default_factory=dict)
    assignments: Mapping[int, Sequence[int]] | None = None

    @property
    def partition_count(self) -> int:
        return self.num_partitions if self.assignments is None else len(self.assignments)


@dataclass(frozen=True, slots=True)
class NewPartitions:
    """Grow `topic` to `count` partitions; `assignments`, when given, are the replicas of
    each new partition in order."""

    topic: str
    count: int
    assignments: Sequence[Sequence[int]] | None = None


class ElectionType(enum.IntEnum):
    """ElectLeaders' election_type values."""

    PREFERRED = 0
    UNCLEAN = 1


@dataclass(frozen=True, slots=True)
class Reassignment:
    """An ongoing reassignment of one partition, as ListPartitionReassignments shows it."""

    replicas: Sequence[int]
    adding_replicas: Sequence[int]
    removing_replicas: Sequence[int]


class Controller(Protocol):
    cache: MetadataCache
    # This broker's SCRAM credentials; its ``lookup`` is what SASL/SCRAM authenticates with.
    credential_cache: CredentialCache

    @property
    def cluster_id(self) -> str: ...

    async def create_topics(
        self, topics: Sequence[NewTopic], *, validate_only: bool = False
    ) -> list[TopicInfo | TopicError]:
        """Create each topic (or only check it, with `validate_only`); a topic is created
        whole or not at all, and is in `cache` once its result is returned."""
        ...

    async def delete_topics(self, names: Sequence[str]) -> list[TopicInfo | TopicError]:
        """Delete each topic; the result is the topic as it was."""
        ...

    async def create_partitions(
        self, requests: Sequence[NewPartitions], *, validate_only: bool = False
    ) -> list[TopicInfo | TopicError]:
        """Add partitions to each topic; the result is the topic with its new partitions."""
        ...

    async def allocate_producer_id(self) -> int:
        """A producer id never handed out before in this cluster, even across restarts."""
        ...

    async def elect_leaders(
        self, election_type: ElectionType, partitions: Sequence[TopicPartition] | None
    ) -> dict[TopicPartition, TopicError | None]:
        """Elect leaders of the partitions (None: every partition, answering only those
        whose leader changed or could not be elected); None is success, ELECTION_NOT_NEEDED
        a leader that is already the one the election would choose."""
        ...

    async def alter_partition_reassignments(
        self,
        targets: Mapping[TopicPartition, Sequence[int] | None],
        *,
        allow_replication_factor_change: bool = True,
    ) -> dict[TopicPartition, TopicError | None]:
        """Start moving each partition to its target replicas (None cancels its ongoing
        reassignment). Without `allow_replication_factor_change` (KIP-860), a target whose
        length differs from the replica count the partition is headed for is refused
        with INVALID_REPLICATION_FACTOR."""
        ...

    async def list_partition_reassignments(
        self, partitions: Sequence[TopicPartition] | None
    ) -> dict[TopicPartition, Reassignment]:
        """The ongoing reassignments among `partitions` (None: all of them)."""
        ...

    async def alter_configs(
        self,
        changes: Sequence[tuple[ConfigResource, Mapping[str, str]]],
        *,
        validate_only: bool = False,
    ) -> list[TopicError | None]:
        """Replace each resource's dynamic configs with the given ones (all of them),
        persisted and applied by every broker; None is success. BROKER resources are
        validated by the caller, as Kafka's receiving broker does."""
        ...

    async def client_quotas(self) -> QuotaConfigs:
        """Every entity's client quotas, as stored."""
        ...

    async def alter_client_quotas(
        self, changes: Mapping[QuotaEntity, Mapping[str, float | None]]
    ) -> None:
        """Set (a value) or remove (None) each entity's quotas, durably; every broker
        enforces them soon after (this one before returning). Raises KafkaStorageError."""
        ...

    async def alter_scram_credentials(
        self, alterations: Mapping[str, Alteration]
    ) -> dict[str, KafkaError | None]:
        """Make each user's change (checked by controller/scram_alterations.py), durably;
        each user's error (RESOURCE_NOT_FOUND: deleting a credential they lack) or None.
        Every broker's ``credential_cache`` has it soon after, this one's before returning."""
        ...

    async def create_acls(self, bindings: Sequence[AclBinding]) -> list[KafkaError | None]:
        """Store each binding (valid, checked by the caller), in order; every broker's
        authorizer has it soon after, this broker's before the call returns. Only called
        with an authorizer configured."""
        ...

    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[AclDeletions]:
        """Remove every binding each filter (valid, checked by the caller) matches; what
        each filter removed. Only called with an authorizer configured."""
        ...
