"""The controller's settings, from the broker's configuration (Kafka's key names)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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
