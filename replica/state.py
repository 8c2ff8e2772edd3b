"""The controller's decisions as the ReplicaManager takes them (the cluster mode maps
LeaderAndIsr and StopReplica partition states onto these), and the replication settings."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(slots=True)  # not frozen: a new controller sends 50,000, each set the slow way
class LeaderAndIsrState:
    """One partition of a LeaderAndIsr request."""

    topic: str
    topic_id: uuid.UUID | None
    partition: int
    leader: int
    leader_epoch: int
    isr: Sequence[int]
    partition_epoch: int
    replicas: Sequence[int]
    is_new: bool = False
    configs: Mapping[str, str] = field(default_factory=dict)  # the topic's config overrides


@dataclass(frozen=True, slots=True)
class StopReplicaState:
    """One partition of a StopReplica request; leader_epoch -2 means "during deletion",
    -1 "no epoch" (both always accepted, as in Kafka)."""

    topic: str
    partition: int
    leader_epoch: int
    delete: bool


@dataclass(frozen=True, slots=True)
class IsrProposal:
    """One partition's ISR change, as a leader proposes it in AlterPartition."""

    topic: str
    topic_id: uuid.UUID | None
    partition: int
    leader_epoch: int
    new_isr: list[int]
    partition_epoch: int


@dataclass(frozen=True, slots=True)
class CommittedIsr:
    """The partition state the controller committed for an AlterPartition."""

    leader_epoch: int
    isr: list[int]
    partition_epoch: int


@dataclass(frozen=True, slots=True)
class ReplicationConfig:
    """The broker's replication settings (Kafka's names and defaults)."""

    lag_time_max_ms: int = 30000
    fetch_wait_max_ms: int = 500
    fetch_min_bytes: int = 1
    fetch_max_bytes: int = 1048576
    fetch_response_max_bytes: int = 10485760
    fetch_backoff_ms: int = 1000
    num_fetchers: int = 1

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> ReplicationConfig:
        values = {
            attr: int(props[key]) for key, attr in _KEYS.items() if props.get(key) is not None
        }
        config = cls(**values)
        if config.num_fetchers < 1:
            raise ValueError("num.replica.fetchers must be at least 1")
        return config


_KEYS = {
    "replica.lag.time.max.ms": "lag_time_max_ms",
    "replica.fetch.wait.max.ms": "fetch_wait_max_ms",
    "replica.fetch.min.bytes": "fetch_min_bytes",
    "replica.fetch.max.bytes": "fetch_max_bytes",
    "replica.fetch.response.max.bytes": "fetch_response_max_bytes",
    "replica.fetch.backoff.ms": "fetch_backoff_ms",
    "num.replica.fetchers": "num_fetchers",
}
