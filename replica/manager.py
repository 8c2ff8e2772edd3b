"""The ReplicaManager: every Produce and Fetch goes through it.

It owns the partitions this broker hosts, applies leadership decisions from the
controller, runs the follower fetchers, keeps each led partition's ISR (asking the
controller to change it through the injected ``alter_partition``) and owns the
purgatories of the requests that wait on partitions: fetches (for data) and produces (for
replication, acks=all; the group coordinator's own writes wait there too, as in Kafka,
where they are appends with acks=all). Every change of a partition's data, high
watermark or leadership checks both, for that partition only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from controller.metadata import PartitionInfo
from log.config import LogConfig
from log.errors import KafkaStorageError
from log.log import AppendResult
from log.manager import LogManager
from log.validator import Validated
from replica.delayed_produce import DelayedProduce, ReplicationWait
from replica.fetch_session import FetchSessions
from replica.fetcher import FetcherManager, Send
from replica.partition import Partition
from replica.purgatory import Purgatory
from replica.state import (
    CommittedIsr,
    LeaderAndIsrState,
    ReplicationConfig,
    StopReplicaState,
)

logger = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
# (topic, topic id, partition, leader epoch, new ISR, partition epoch) -> the committed
# state, or the error the controller answered.
AlterPartition = Callable[
    [str, Any, int, int, list[int], int], Awaitable["CommittedIsr | ErrorCode"]
]
# How long a refused ISR change stays pending before it may be proposed again.
ALTER_RETRY_BACKOFF_MS = 500


class ReplicaManager:
    def __init__(
        self,
        broker_id: int,
        logs: LogManager,
        broker_props: Mapping[str, str],
        *,
        send: Send | None = None,
        alter_partition: AlterPartition | None = None,
        now_ms: Callable[[], int] | None = None,
    ) -> None:
        """``send`` (the inter-broker client's) and ``alter_partition`` are given in cluster
        mode only: an embedded node has no followers."""
        self.broker_id = broker_id
        self.logs = logs
        self._broker_props = broker_props
        self.config = ReplicationConfig.from_properties(broker_props)
        self._now_ms = now_ms or _wall_clock_ms
        self.fetch_purgatory: Purgatory[Any] = Purgatory("Fetch")
        self.fetch_sessions = FetchSessions()
        self.produce_purgatory: Purgatory[Any] = Purgatory("Produce")
        self._partitions: dict[TopicPartition, Partition] = {}
        self._checkpointed_hw: dict[TopicPartition, int] = logs.read_high_watermarks()
        self.controller_epoch = 0
        self._alter_partition = alter_partition
        self._tasks: set[asyncio.Task[None]] = set()
        self.fetchers = (
            FetcherManager(self, send, self.config) if send is not None else None
        )

    def get(self, topic: str, index: int) -> Partition | None:
        return self._partitions.get((topic, index))

    def __iter__(self) -> Iterator[Partition]:
        return iter(self._partitions.values())

    def log_config(self, topic_configs: Mapping[str, str]) -> LogConfig:
        return LogConfig.from_properties(self._broker_props, topic_configs)

    def start(self) -> None:
        """Start the ISR expiration check (cluster mode), every replica.lag.time.max.ms / 2
        as in Kafka."""
        if self._alter_partition is not None:
            self._spawn(self._expire_isr())

    # -- leadership ------------------------------------------------------------------------
    def _partition(
        self, topic: str, index: int, configs: Mapping[str, str], topic_id: Any = None
    ) -> Partition:
        """The hosted partition, created (with its log) if new."""
        tp = (topic, index)
        config = self.log_config(configs)
        log = self.logs.get_or_create(topic, index, config)
        if log.config != config:  # opened at start-up, before topic overrides were known
            log.update_config(config)
        partition = self._partitions.get(tp)
        if partition is None:
            hw = min(self._checkpointed_hw.get(tp, 0), log.log_end_offset)
            partition = Partition(
                topic, index, log, -1, -1, [], [], self.broker_id, hw, topic_id
            )
            self._partitions[tp] = partition
        elif topic_id is not None:
            partition.topic_id = topic_id
        return partition

    def become_leader(self, topic: str, info: PartitionInfo, configs: Mapping[str, str]) -> None:
        """The embedded controller's decision: lead ``info``'s partition."""
        partition = self._partition(topic, info.index, configs)
        if self.fetchers is not None:
            self.fetchers.remove([(topic, info.index)])
        partition.make_leader(
            info.leader_epoch, list(info.isr), list(info.replicas), 0, self._now_ms()
        )
        self._on_data((topic, info.index))

    def become_leader_or_follower(
        self, controller_epoch: int, states: Iterable[LeaderAndIsrState]
    ) -> dict[TopicPartition, ErrorCode]:
        """Apply a LeaderAndIsr request; return each partition's error (Kafka's
        ReplicaManager.becomeLeaderOrFollower)."""
        states = list(states)
        if controller_epoch < self.controller_epoch:
            logger.warning(
                "Ignoring LeaderAndIsr from controller epoch %d: the current is %d",
                controller_epoch,
                self.controller_epoch,
            )
            return {(s.topic, s.partition): ErrorCode.stale_controller_epoch for s in states}
        self.controller_epoch = controller_epoch
        errors: dict[TopicPartition, ErrorCode] = {}
        now = self._now_ms()
        follow: dict[int, list[Partition]] = {}
        for s in states:
            tp = (s.topic, s.partition)
            current = self._partitions.get(tp)
            error = self._check_leader_and_isr(s, current)
            if error is not None:
                errors[tp] = error
                continue
            try:
                partition = self._partition(s.topic, s.partition, s.configs, s.topic_id)
            except (OSError, KafkaStorageError) as e:
                logger.error("Creating the log of %s-%d failed: %s", *tp, e)
                errors[tp] = ErrorCode.kafka_storage_error
                continue
            errors[tp] = ErrorCode.none
            if s.partition_epoch < partition.partition_epoch:
                # An AlterPartition answer already brought a newer state (Kafka skips it).
                logger.info("Skipped the LeaderAndIsr of %s-%d: partition epoch is older", *tp)
                continue
            if self.fetchers is not None:
                self.fetchers.remove([tp])
            if s.leader == self.broker_id:
                partition.make_leader(s.leader_epoch, s.isr, s.replicas, s.partition_epoch, now)
            else:
                partition.make_follower(
                    s.leader, s.leader_epoch, s.isr, s.replicas, s.partition_epoch
                )
                if s.leader >= 0:
                    follow.setdefault(s.leader, []).append(partition)
            self._on_data(tp)
        if self.fetchers is not None:
            for leader, partitions in follow.items():
                self.fetchers.add(leader, partitions)
        return errors

    def _check_leader_and_isr(
        self, s: LeaderAndIsrState, current: Partition | None
    ) -> ErrorCode | None:
        """The error refusing one partition of a LeaderAndIsr, or None to apply it: only a
        newer leader epoch is (an equal one is a repeat, as in Kafka)."""
        tp = (s.topic, s.partition)
        if self.logs.is_offline(*tp):
            return ErrorCode.kafka_storage_error
        if current is not None:
            if (
                s.topic_id is not None
                and current.topic_id is not None
                and s.topic_id != current.topic_id
            ):
                return ErrorCode.inconsistent_topic_id
            if s.leader_epoch <= current.leader_epoch:
                logger.info(
                    "Ignoring LeaderAndIsr for %s-%d: its leader epoch %d is not newer than "
                    "the current %d",
                    *tp,
                    s.leader_epoch,
                    current.leader_epoch,
                )
                return ErrorCode.stale_controller_epoch
        if self.broker_id not in s.replicas:
            logger.warning(
                "Ignoring LeaderAndIsr for %s-%d: this broker is not in its replicas %s",
                *tp,
                s.replicas,
            )
            return ErrorCode.unknown_topic_or_partition
        return None

    def stop_replicas(
        self, controller_epoch: int, states: Iterable[StopReplicaState]
    ) -> dict[TopicPartition, ErrorCode]:
        """Apply a StopReplica request (Kafka's ReplicaManager.stopReplicas)."""
        states = list(states)
        if controller_epoch < self.controller_epoch:
            return {(s.topic, s.partition): ErrorCode.stale_controller_epoch for s in states}
        self.controller_epoch = controller_epoch
        errors: dict[TopicPartition, ErrorCode] = {}
        for s in states:
            tp = (s.topic, s.partition)
            current = self._partitions.get(tp)
            # -2 (during deletion) and -1 (no epoch) always stop it; else only a newer epoch.
            if current is not None and 0 <= s.leader_epoch <= current.leader_epoch:
                errors[tp] = ErrorCode.fenced_leader_epoch
                continue
            self.remove(s.topic, s.partition, delete=s.delete)
            errors[tp] = ErrorCode.none
        return errors

    def update_config(self, topic: str, configs: Mapping[str, str]) -> None:
        config = self.log_config(configs)
        for partition in self._partitions.values():
            if partition.topic == topic:
                partition.log.update_config(config)

    def remove(self, topic: str, index: int, *, delete: bool) -> None:
        tp = (topic, index)
        if self.fetchers is not None:
            self.fetchers.remove([tp])
        partition = self._partitions.pop(tp, None)
        if partition is not None:
            partition.leader = -1  # requests still holding it see it is not led here
        if delete and self.logs.get(topic, index) is not None:
            self.logs.delete(topic, index)
        self._on_data(tp)

    # -- appends ---------------------------------------------------------------------------
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

    def wait_for_replication(
        self, waits: list[ReplicationWait], timeout_ms: int, respond: Callable[[], Any]
    ) -> Any:
        """acks=all: ``respond()`` once every partition's high watermark covers its append
        (each wait's ``error`` then says how it ended), now or from the produce purgatory."""
        delayed = DelayedProduce(waits, self.is_current, respond)
        if delayed.ready():
            return respond()
        return self.produce_purgatory.park(delayed.keys, timeout_ms, delayed)

    def is_current(self, partition: Partition) -> bool:
        """Whether ``partition`` is still the one hosted (not removed or re-created)."""
        return self._partitions.get((partition.topic, partition.index)) is partition

    # -- leader: follower fetches and the ISR ------------------------------------------------
    def update_follower_fetch(self, partition: Partition, replica: int, fetch_offset: int) -> None:
        """A follower fetched ``partition`` from ``fetch_offset``: its log end. The high
        watermark may advance (answering parked produces and fetches of this partition)
        and the follower may rejoin the ISR."""
        if partition.update_follower(replica, fetch_offset, self._now_ms()):
            self._on_data((partition.topic, partition.index))
        if self._alter_partition is not None and replica not in partition.isr:
            expanded = partition.isr_to_expand()
            if expanded is not None:
                self._propose_isr(partition, expanded)

    def maybe_shrink_isr(self) -> None:
        """Drop followers that have not caught up for replica.lag.time.max.ms."""
        if self._alter_partition is None:
            return
        now = self._now_ms()
        for partition in list(self._partitions.values()):
            if partition.is_leader:
                shrunk = partition.isr_to_shrink(now, self.config.lag_time_max_ms)
                if shrunk is not None:
                    logger.info(
                        "Shrinking the ISR of %s-%d from %s to %s",
                        partition.topic,
                        partition.index,
                        partition.isr,
                        shrunk,
                    )
                    self._propose_isr(partition, shrunk)

    async def _expire_isr(self) -> None:
        while True:
            await asyncio.sleep(max(self.config.lag_time_max_ms // 2, 1) / 1000)
            try:
                self.maybe_shrink_isr()
            except Exception:
                logger.exception("The ISR expiration check failed")

    def _propose_isr(self, partition: Partition, new_isr: list[int]) -> None:
        partition.pending_isr = new_isr
        self._spawn(self._alter_isr(partition, new_isr))

    async def _alter_isr(self, partition: Partition, new_isr: list[int]) -> None:
        assert self._alter_partition is not None
        epoch = partition.leader_epoch
        try:
            result: CommittedIsr | ErrorCode = await self._alter_partition(
                partition.topic,
                partition.topic_id,
                partition.index,
                epoch,
                new_isr,
                partition.partition_epoch,
            )
        except Exception as e:  # the controller unreachable: proposed again later
            logger.warning(
                "AlterPartition of %s-%d failed: %s", partition.topic, partition.index, e
            )
            result = ErrorCode.request_timed_out
        if isinstance(result, ErrorCode):
            logger.info(
                "AlterPartition of %s-%d to ISR %s refused: %s",
                partition.topic,
                partition.index,
                new_isr,
                result.name,
            )
            await asyncio.sleep(ALTER_RETRY_BACKOFF_MS / 1000)
        if (
            not self.is_current(partition)
            or partition.leader_epoch != epoch
            or partition.pending_isr is not new_isr
        ):
            return  # a LeaderAndIsr came meanwhile and decided
        partition.pending_isr = None
        if (
            isinstance(result, CommittedIsr)
            and result.leader_epoch == epoch
            and result.partition_epoch >= partition.partition_epoch
        ):
            partition.isr = list(result.isr)
            partition.partition_epoch = result.partition_epoch
            logger.info(
                "ISR of %s-%d is now %s (partition epoch %d)",
                partition.topic,
                partition.index,
                partition.isr,
                partition.partition_epoch,
            )
        partition.maybe_advance_high_watermark()
        self._on_data((partition.topic, partition.index))

    def _spawn(self, work: Awaitable[None]) -> None:
        task = asyncio.get_running_loop().create_task(work)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- follower --------------------------------------------------------------------------
    def on_follower_data(self, partition: Partition) -> None:
        self._on_data((partition.topic, partition.index))

    def _on_data(self, tp: TopicPartition) -> None:
        """A partition's data, high watermark or leadership changed."""
        self.fetch_purgatory.check(tp)
        self.produce_purgatory.check(tp)

    def shutdown(self) -> None:
        """Stop the fetchers and ISR work; answer every parked request with what it has."""
        if self.fetchers is not None:
            self.fetchers.shutdown()
        for task in list(self._tasks):
            task.cancel()
        self.fetch_purgatory.expire_all()
        self.produce_purgatory.expire_all()

    def high_watermarks(self) -> dict[TopicPartition, int]:
        return {tp: p.high_watermark for tp, p in self._partitions.items()}


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000
