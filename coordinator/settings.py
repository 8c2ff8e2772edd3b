"""The group coordinator's settings, from the broker's config (Kafka's key names)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Settings:
    partitions: int = 50
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3000
    max_group_size: int = 2**31 - 1
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    commit_timeout_ms: int = 5000
    max_metadata_bytes: int = 4096
    # The consumer protocol (KIP-848): group.consumer.*
    consumer_session_timeout_ms: int = 45_000
    consumer_heartbeat_interval_ms: int = 5_000
    consumer_max_size: int = 2**31 - 1
    consumer_assignors: tuple[str, ...] = ("uniform", "range")  # the first is the default
    consumer_migration_policy: str = "bidirectional"  # one of MIGRATION_POLICIES
    # Share groups (KIP-932): group.share.*
    share_session_timeout_ms: int = 45_000
    share_heartbeat_interval_ms: int = 5_000
    share_max_size: int = 200

    @classmethod
    def from_config(cls, config: Any) -> Settings:
        """From a BrokerConfig (Kafka's key names)."""
        return cls(
            partitions=config["offsets.topic.num.partitions"],
            min_session_timeout_ms=config["group.min.session.timeout.ms"],
            max_session_timeout_ms=config["group.max.session.timeout.ms"],
            initial_rebalance_delay_ms=config["group.initial.rebalance.delay.ms"],
            max_group_size=config["group.max.size"],
            offsets_retention_ms=config["offsets.retention.minutes"] * 60_000,
            commit_timeout_ms=config["offsets.commit.timeout.ms"],
            max_metadata_bytes=config["offset.metadata.max.bytes"],
            consumer_session_timeout_ms=config["group.consumer.session.timeout.ms"],
            consumer_heartbeat_interval_ms=config["group.consumer.heartbeat.interval.ms"],
            consumer_max_size=config["group.consumer.max.size"],
            consumer_assignors=tuple(assignor_name(a) for a in config["group.consumer.assignors"]),
            consumer_migration_policy=config["group.consumer.migration.policy"].lower(),
            share_session_timeout_ms=config["group.share.session.timeout.ms"],
            share_heartbeat_interval_ms=config["group.share.heartbeat.interval.ms"],
            share_max_size=config["group.share.max.size"],
        )


# group.consumer.migration.policy's values (case insensitive), as Kafka lists them.
MIGRATION_POLICIES = ("bidirectional", "upgrade", "downgrade", "disabled")

# Kafka names its server assignors by class; group.consumer.assignors takes either form.
ASSIGNOR_CLASSES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
    "org.apache.kafka.coordinator.group.assignor.SimpleAssignor": "simple",
}


def assignor_name(name: str) -> str:
    """The short name ("uniform", "range") of an assignor given by either name."""
    return ASSIGNOR_CLASSES.get(name.strip(), name.strip())
