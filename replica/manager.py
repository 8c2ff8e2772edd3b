"""The ReplicaManager: every Produce and Fetch goes through it.

It owns the partitions this broker hosts, applies leadership decisions from the
controller, and owns the purgatories of the requests that wait on partitions: fetches
(for data) and produces (for replication, acks=all; the group coordinator's own writes
wait there too, as in Kafka, where they are appends with acks=all). Every change of a
partition's data or leadership checks both, for that partition only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

from controller.metadata import PartitionInfo
from log.config import LogConfig
from log.log import AppendResult
from log.manager import LogManager
from log.validator import Validated
from replica.partition import Partition
from replica.purgatory import Purgatory

logger = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class ReplicaManager:
    def __init__(
        self,
        broker_id: int,
        logs: LogManager,
        broker_props: Mapping[str, str],
    ) -> None:
        self.broker_id = broker_id
        self.logs = logs
        self._broker_props = broker_props
        self.fetch_purgatory: Purgatory[Any] = Purgatory("Fetch")
        self.produce_purgatory: Purgatory[Any] = Purgatory("Produce")
        self._partitions: dict[TopicPartition, Partition] = {}
        self._checkpointed_hw: dict[TopicPartition, int] = logs.read_high_watermarks()

    def get(self, topic: str, index: int) -> Partition | None:
        return self._partitions.get((topic, index))

    def __iter__(self) -> Iterator[Partition]:
        return iter(self._partitions.values())

    def log_config(self, topic_configs: Mapping[str, str]) -> LogConfig:
        return LogConfig.from_properties(self._broker_props, topic_configs)

    def become_leader(self, topic: str, info: PartitionInfo, configs: Mapping[str, str]) -> None:
        tp = (topic, info.index)
        config = self.log_config(configs)
        log = self.logs.get_or_create(topic, info.index, config)
        if log.config != config:  # opened at start-up, before topic overrides were known
            log.update_config(config)
        partition = self._partitions.get(tp)
        if partition is None:
            hw = min(self._checkpointed_hw.get(tp, 0), log.log_end_offset)
            partition = Partition(
                topic,
                info.index,
                log,
                info.leader,
                info.leader_epoch,
                list(info.replicas),
                list(info.isr),
                self.broker_id,
                hw,
            )
            self._partitions[tp] = partition
        else:
            partition.leader, partition.leader_epoch = info.leader, info.leader_epoch
            partition.replicas, partition.isr = list(info.replicas), list(info.isr)
        partition.maybe_advance_high_watermark()
        self._on_data(tp)

    def update_config(self, topic: str, configs: Mapping[str, str]) -> None:
        config = self.log_config(configs)
        for partition in self._partitions.values():
            if partition.topic == topic:
                partition.log.update_config(config)

    def remove(self, topic: str, index: int, *, delete: bool) -> None:
        tp = (topic, index)
        partition = self._partitions.pop(tp, None)
        if partition is not None:
            partition.leader = -1  # requests still holding it see it is not led here
            if delete:
                self.logs.delete(topic, index)
        self._on_data(tp)

    def append(
        self,
        partition: Partition,
        records: bytes | memoryview,
        now_ms: int,
        *,
        origin_client: bool = True,
    ) -> AppendResult:
        """``origin_client=False`` for batches the broker's coordinators built themselves."""
        result = partition.append_as_leader(records, now_ms, origin_client=origin_client)
        self._on_data((partition.topic, partition.index))
        return result

    def append_validated(
        self, partition: Partition, validated: Validated, now_ms: int
    ) -> AppendResult:
        """Append batches `log.validator.validate` accepted (the produce path)."""
        result = partition.append_validated(validated, now_ms)
        self._on_data((partition.topic, partition.index))
        return result

    def _on_data(self, tp: TopicPartition) -> None:
        """A partition's data, high watermark or leadership changed."""
        self.fetch_purgatory.check(tp)
        self.produce_purgatory.check(tp)

    def shutdown(self) -> None:
        """Answer every parked request with what it has."""
        self.fetch_purgatory.expire_all()
        self.produce_purgatory.expire_all()

    def high_watermarks(self) -> dict[TopicPartition, int]:
        return {tp: p.high_watermark for tp, p in self._partitions.items()}
