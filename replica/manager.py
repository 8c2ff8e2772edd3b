"""The ReplicaManager: every Produce and Fetch goes through it.

It reads partitions for Fetch and parks the fetches that wait for data
(replica/fetch_messages.py), validates and appends Produce's batches
(replica/append_records.py), owns the partitions this broker hosts, applies leadership
decisions from the controller, runs the follower fetchers, keeps each led partition's ISR
(asking the controller to change it through the injected ``alter_partition``) and owns the
purgatories of the requests that wait on partitions: fetches (for data) and produces (for
replication, acks=all; the group coordinator's own writes wait there too, as in Kafka,
where they are appends with acks=all). Every change of a partition's data, high
watermark or leadership checks both, for that partition only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from kio.schema.errors import ErrorCode

from gregor.log.config import LogConfig
from gregor.log.errors import KafkaStorageError, LogError
from gregor.log.log import AppendResult
from gregor.log.manager import LogManager
from gregor.log.txn_index import build_marker_batch
from gregor.log.validator import Validated
from gregor.replica.append_records import append_records
from gregor.replica.delayed_produce import DelayedProduce, ReplicationWait
from gregor.replica.fetch_messages import fetch_messages
from gregor.replica.fetch_session import FetchSessions
from gregor.replica.fetcher import FetcherManager, Send
from gregor.replica.log_mover import move_log
from gregor.replica.partition import Partition
from gregor.replica.purgatory import Purgatory
from gregor.replica.sampled import sampled
from gregor.replica.state import (
    CommittedIsr,
    IsrProposal,
    LeaderAndIsrState,
    ReplicationConfig,
    StopReplicaState,
)

if TYPE_CHECKING:
    from gregor.controller.metadata.cache import MetadataCache, PartitionInfo

logger = logging.getLogger(__name__)

R = TypeVar("R")

TopicPartition = tuple[str, int]
# ISR changes of many partitions, sent in one AlterPartition -> per proposal, the committed
# state or the error the controller answered. Raises if the controller did not answer.
AlterPartition = Callable[[list[IsrProposal]], Awaitable[list["CommittedIsr | ErrorCode"]]]
# How long a refused ISR change stays pending before it may be proposed again.
ALTER_RETRY_BACKOFF_MS = 500
# How long creating new partitions' logs may hold the event loop before it yields.
LOG_CREATION_SLICE_S = 0.005
LEADER_AND_ISR_SLICE = 1000  # partitions: 20-40 ms of work on a small machine
# Resolved LogConfigs kept, one per distinct set of topic overrides (most topics share none).
_LOG_CONFIGS_KEPT = 1024


@dataclass(slots=True)
class MarkerAppend:
    """One transaction marker for one partition (WriteTxnMarkers); ``error`` and ``offset``
    (the marker's) are set by ``append_markers``."""

    partition: Partition
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    error: ErrorCode | None = None
    offset: int = -1


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
        validation_pool: Executor | None = None,
    ) -> None:
        """``send`` (the inter-broker client's) and ``alter_partition`` are given in cluster
        mode only: an embedded node has no followers. ``validation_pool`` validates
        Produce's heavy batches (compressed or large) off the event loop; its owner sizes and
        shuts it down (None: the event loop's default executor)."""
        self.broker_id = broker_id
        self.validation_pool = validation_pool
        # The broker's metadata cache, once it has one (at start): it tells a partition the
        # cluster has elsewhere from one it does not have, and resolves topic ids.
        self.metadata: MetadataCache | None = None
        self.logs = logs
        self._broker_props = broker_props
        self._log_configs: dict[tuple[tuple[str, str], ...], LogConfig] = {}
        self.config = ReplicationConfig.from_properties(broker_props)
        self.now_ms: Callable[[], int] = now_ms or _wall_clock_ms  # the broker's clock (ms)
        self.fetch_purgatory: Purgatory[Any] = Purgatory("Fetch")
        self.fetch_sessions = FetchSessions()
        self.produce_purgatory: Purgatory[Any] = Purgatory("Produce")
        self.delete_records_purgatory: Purgatory[Any] = Purgatory("DeleteRecords")
        self._partitions: dict[TopicPartition, Partition] = {}
        self._checkpointed_hw: dict[TopicPartition, int] = logs.read_high_watermarks()
        self.controller_epoch = 0
        self._alter_partition = alter_partition
        # ISR changes not sent yet, by partition; one AlterPartition is in flight at a time
        # (Kafka's AlterPartitionManager), carrying every change proposed meanwhile.
        self._proposed: dict[TopicPartition, tuple[Partition, IsrProposal]] = {}
        self._altering = False
        self._tasks: set[asyncio.Task[None]] = set()
        self.fetchers = FetcherManager(self, send, self.config) if send is not None else None
        # Told of every change _on_data sees (the share-partition manager's windows).
        self.change_listeners: list[Callable[[TopicPartition], None]] = []

    def get(self, topic: str, index: int) -> Partition | None:
        return self._partitions.get((topic, index))

    def not_hosted(self, topic: str, index: int) -> ErrorCode:
        """The error for a partition this broker has no replica of."""
        if self.metadata is None or self.metadata.partition(topic, index) is None:
            return ErrorCode.unknown_topic_or_partition
        return ErrorCode.not_leader_or_follower

    # -- the request paths: Kafka's fetchMessages and appendRecords, each in its module -----
    fetch_messages = fetch_messages
    append_records = append_records

    def __iter__(self) -> Iterator[Partition]:
        return iter(self._partitions.values())

    def log_config(self, topic_configs: Mapping[str, str]) -> LogConfig:
        """The topic's overrides resolved over the broker's props; the same overrides
        resolve once (a topic's partitions share them), until the broker's props change."""
        key = tuple(sorted(topic_configs.items()))
        config = self._log_configs.get(key)
        if config is None:
            if len(self._log_configs) >= _LOG_CONFIGS_KEPT:
                self._log_configs.clear()
            config = LogConfig.from_properties(self._broker_props, topic_configs)
            self._log_configs[key] = config
        return config

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
        # A log opened at start-up, before its topic's overrides were known, takes them.
        log = self.logs.get_or_create(topic, index, self.log_config(configs))
        partition = self._partitions.get(tp)
        if partition is None:
            hw = min(self._checkpointed_hw.get(tp, 0), log.log_end_offset)
            partition = Partition(topic, index, log, -1, -1, [], [], self.broker_id, hw, topic_id)
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
            info.leader_epoch, list(info.isr), list(info.replicas), 0, self.now_ms()
        )
        self._on_data((topic, info.index))

    async def create_logs(self, states: Iterable[LeaderAndIsrState]) -> None:
        """Before a LeaderAndIsr is applied: create the logs of the partitions new to this
        broker a slice at a time, yielding to the event loop between slices (10,000 new
        partitions take seconds of file creation), so that applying it (at once, in
        become_leader_or_follower) finds them made. A log that fails here is left to that
        pass, which reports its error."""
        started = time.monotonic()
        for s in states:
            tp = (s.topic, s.partition)
            if tp in self._partitions or self.broker_id not in s.replicas:
                continue
            if self.logs.get(*tp) is not None or self.logs.is_offline(*tp):
                continue
            try:
                self.logs.get_or_create(s.topic, s.partition, self.log_config(s.configs))
            except (OSError, KafkaStorageError):
                continue
            if time.monotonic() - started >= LOG_CREATION_SLICE_S:
                await asyncio.sleep(0)
                started = time.monotonic()

    async def apply_leader_and_isr(
        self, controller_epoch: int, states: list[LeaderAndIsrState]
    ) -> dict[TopicPartition, ErrorCode]:
        """``become_leader_or_follower`` a slice at a time, yielding to the event loop
        between slices: 50,000 partitions take seconds, and meanwhile nothing else of this
        broker would run, a controller's own requests to the other brokers (still being
        written) included. Each partition changes at once, as under Kafka's lock."""
        errors: dict[TopicPartition, ErrorCode] = {}
        for start in range(0, len(states), LEADER_AND_ISR_SLICE):
            if start:
                await asyncio.sleep(0)
            applied = states[start : start + LEADER_AND_ISR_SLICE]
            errors.update(self.become_leader_or_follower(controller_epoch, applied))
        return errors

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
        now = self.now_ms()
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
                logger.debug(  # counted in one line per request: a new controller repeats all
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

    def set_broker_props(
        self, broker_props: Mapping[str, str], configs_of: Callable[[str], Mapping[str, str]]
    ) -> None:
        """New broker-level defaults (dynamic broker configs): every log takes its topic's
        config (`configs_of(topic)`: its overrides) resolved over them, at once."""
        self._broker_props = broker_props
        self._log_configs.clear()
        configs: dict[str, LogConfig] = {}
        for partition in self._partitions.values():
            config = configs.get(partition.topic)
            if config is None:
                config = configs[partition.topic] = self.log_config(configs_of(partition.topic))
            if partition.log.config != config:
                partition.log.update_config(config)

    def remove(self, topic: str, index: int, *, delete: bool) -> None:
        tp = (topic, index)
        if self.fetchers is not None:
            self.fetchers.remove([tp])
        partition = self._partitions.pop(tp, None)
        if partition is not None:
            partition.leader = -1  # requests still holding it see it is not led here
        self._proposed.pop(tp, None)
        if delete:
            self._checkpointed_hw.pop(tp, None)  # a topic created again starts at 0
            if self.logs.get(topic, index) is not None:
                self.logs.delete(topic, index)
        self._on_data(tp)

    def move_to_log_dir(self, partition: Partition, log_dir: Path) -> None:
        """AlterReplicaLogDirs: move the partition's log to ``log_dir`` in the background
        (a move elsewhere under way is cancelled; to its current directory: none)."""
        topic, index = partition.topic, partition.index
        moving = self.logs.future_of(topic, index)
        if moving is not None and moving[0] == log_dir:
            return
        self.logs.abandon_future(topic, index)
        if self.logs.log_dir_of(topic, index) == log_dir:
            return
        future = self.logs.start_future(topic, index, log_dir)
        self._spawn(move_log(self.logs, partition, future, self.is_current))

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
        """Append batches `gregor.log.validator.validate` accepted (the produce path)."""
        result = partition.append_validated(validated, now_ms)
        self._on_data((partition.topic, partition.index))
        return result

    async def append_markers(self, markers: list[MarkerAppend], timeout_ms: int) -> None:
        """WriteTxnMarkers' work: append each marker as a control batch to its partition as
        leader (the broker's own batch: no client checks), then wait until the ISR has them
        all (acks=all, up to ``timeout_ms``). Each marker's ``error`` says how it ended."""
        now_ms = self.now_ms()
        waits: list[tuple[MarkerAppend, ReplicationWait]] = []
        for marker in markers:
            partition = marker.partition
            if not self.is_current(partition) or not partition.is_leader:
                marker.error = ErrorCode.not_leader_or_follower
                continue
            if len(partition.isr) < partition.log.config.min_insync_replicas:
                marker.error = ErrorCode.not_enough_replicas
                continue
            batch = build_marker_batch(
                marker.producer_id,
                marker.producer_epoch,
                marker.commit,
                marker.coordinator_epoch,
                now_ms,
            )
            try:
                appended = self.append(partition, batch, now_ms, origin_client=False)
            except LogError as e:
                marker.error = e.code
                continue
            marker.offset = appended.first_offset
            waits.append((marker, ReplicationWait(partition, appended.last_offset + 1)))
        if waits:
            # (The purgatory takes None for "not complete": the answer is True.)
            answer = self.wait_for_replication([w for _, w in waits], timeout_ms, lambda: True)
            if isinstance(answer, asyncio.Future):
                await answer
        for marker, wait in waits:
            marker.error = wait.outcome

    def wait_for_replication(
        self, waits: list[ReplicationWait], timeout_ms: int, respond: Callable[[], R]
    ) -> R | asyncio.Future[R]:
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
    def update_follower_fetch(
        self, partition: Partition, replica: int, fetch_offset: int, log_start_offset: int = -1
    ) -> None:
        """A follower fetched ``partition`` from ``fetch_offset``: its log end. The high
        watermark may advance (answering parked produces and fetches of this partition)
        and the follower may rejoin the ISR; parked DeleteRecords see its log start."""
        tp = (partition.topic, partition.index)
        if partition.update_follower(replica, fetch_offset, self.now_ms(), log_start_offset):
            self._on_data(tp)
        else:
            self.delete_records_purgatory.check(tp)
        if self._alter_partition is not None and replica not in partition.isr:
            expanded = partition.isr_to_expand()
            if expanded is not None:
                self._propose_isr(partition, expanded)

    def maybe_shrink_isr(self) -> None:
        """Drop followers that have not caught up for replica.lag.time.max.ms."""
        if self._alter_partition is None:
            return
        self._settle_quiet_followers()
        now = self.now_ms()
        shrinking: list[tuple[Partition, list[int], list[int]]] = []
        for partition in list(self._partitions.values()):
            if partition.is_leader:
                shrunk = partition.isr_to_shrink(now, self.config.lag_time_max_ms)
                if shrunk is not None:
                    shrinking.append((partition, partition.isr, shrunk))
                    self._propose_isr(partition, shrunk)
        if shrinking:
            logger.info(
                "Shrinking the ISR of %d partition(s): %s",
                len(shrinking),
                sampled(shrinking, lambda s: f"{s[0].topic}-{s[0].index} {s[1]} to {s[2]}"),
            )

    async def _expire_isr(self) -> None:
        while True:
            await asyncio.sleep(max(self.config.lag_time_max_ms // 2, 1) / 1000)
            try:
                self.maybe_shrink_isr()
            except Exception:
                logger.exception("The ISR expiration check failed")

    def _propose_isr(self, partition: Partition, new_isr: list[int]) -> None:
        partition.pending_isr = new_isr
        proposal = IsrProposal(
            partition.topic,
            partition.topic_id,
            partition.index,
            partition.leader_epoch,
            new_isr,
            partition.partition_epoch,
        )
        self._proposed[(partition.topic, partition.index)] = (partition, proposal)
        if not self._altering:
            self._altering = True
            self._spawn(self._alter_isrs())

    async def _alter_isrs(self) -> None:
        """Send the proposed ISR changes, all pending ones in each AlterPartition, until
        none is left."""
        assert self._alter_partition is not None
        try:
            while self._proposed:
                await asyncio.sleep(0)  # the changes proposed in this pass go together
                batch = list(self._proposed.values())
                self._proposed.clear()
                proposals = [proposal for _, proposal in batch]
                try:
                    results = await self._alter_partition(proposals)
                except Exception as e:  # the controller unreachable: proposed again later
                    logger.warning("AlterPartition of %d partition(s) failed: %s", len(batch), e)
                    results = [ErrorCode.request_timed_out] * len(batch)
                refused: list[tuple[Partition, IsrProposal, ErrorCode]] = []
                changed: list[Partition] = []
                for (partition, proposal), result in zip(batch, results, strict=True):
                    if isinstance(result, ErrorCode):
                        refused.append((partition, proposal, result))
                    elif self._isr_answered(partition, proposal, result):
                        changed.append(partition)
                if changed:
                    logger.info(
                        "ISR of %d partition(s) now: %s",
                        len(changed),
                        sampled(
                            changed,
                            lambda p: (
                                f"{p.topic}-{p.index} {p.isr} (partition epoch {p.partition_epoch})"
                            ),
                        ),
                    )
                if refused:
                    logger.info(
                        "AlterPartition of %d partition(s) refused: %s",
                        len(refused),
                        sampled(
                            refused,
                            lambda r: f"{r[0].topic}-{r[0].index} to {r[1].new_isr} ({r[2].name})",
                        ),
                    )
                    await asyncio.sleep(ALTER_RETRY_BACKOFF_MS / 1000)
                    for partition, proposal, _ in refused:
                        self._isr_answered(partition, proposal, None)
        finally:
            self._altering = False

    def _isr_answered(
        self, partition: Partition, proposal: IsrProposal, result: CommittedIsr | None
    ) -> bool:
        """Apply the controller's answer to a proposal (None: refused; it may be proposed
        again), unless a LeaderAndIsr or a newer proposal came meanwhile; whether the ISR
        changed."""
        if (
            not self.is_current(partition)
            or partition.leader_epoch != proposal.leader_epoch
            or partition.pending_isr is not proposal.new_isr
        ):
            return False  # a LeaderAndIsr came meanwhile and decided
        partition.pending_isr = None
        changed = False
        if (
            result is not None
            and result.leader_epoch == proposal.leader_epoch
            and result.partition_epoch >= partition.partition_epoch
        ):
            partition.isr = list(result.isr)
            partition.partition_epoch = result.partition_epoch
            changed = True
        partition.maybe_advance_high_watermark()
        self._on_data((partition.topic, partition.index))
        return changed

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- follower --------------------------------------------------------------------------
    def on_follower_data(self, partition: Partition) -> None:
        self._on_data((partition.topic, partition.index))

    def on_log_start_moved(self, partition: Partition) -> None:
        """DeleteRecords or retention moved a partition's log start: a leader's followers
        are told it, a follower tells its leader."""
        tp = (partition.topic, partition.index)
        if self.fetchers is not None:
            self.fetchers.touch(tp)
        self._on_data(tp)

    def _on_data(self, tp: TopicPartition) -> None:
        """A partition's data, high watermark or leadership changed."""
        for session, was_quiet in self.fetch_sessions.touch(tp):
            if was_quiet:  # its fetches skipped it: it was caught up at the session's last
                self._caught_up(tp, session.replica_id, session.last_fetch_ms)
            self.fetch_purgatory.check(session)
        self.fetch_purgatory.check(tp)
        self.produce_purgatory.check(tp)
        for listener in self.change_listeners:
            listener(tp)
        self.delete_records_purgatory.check(tp)

    def caught_up_ms(self, partition: Partition, replica: int) -> int:
        """When a follower last caught up with a led partition (-1: not a follower of it),
        counting the fetches of its session that skipped the partition as quiet."""
        state = partition.followers.get(replica)
        if state is None:
            return -1
        at_ms = state.last_caught_up_ms
        for session in self.fetch_sessions.holding((partition.topic, partition.index)):
            cached = session.partitions[(partition.topic, partition.index)]
            if session.replica_id == replica and cached.quiet:
                at_ms = max(at_ms, session.last_fetch_ms)
        return at_ms

    def _settle_quiet_followers(self) -> None:
        """Before the ISR is checked: a follower's session fetches skip its quiet
        partitions (it had the whole log then), so they count as caught up as of its last
        fetch."""
        for session in self.fetch_sessions.followers():
            for tp, cached in session.partitions.items():
                if cached.quiet:
                    self._caught_up(tp, session.replica_id, session.last_fetch_ms)

    def _caught_up(self, tp: TopicPartition, replica: int, at_ms: int) -> None:
        partition = self._partitions.get(tp)
        state = None if partition is None else partition.followers.get(replica)
        if state is not None and at_ms > state.last_caught_up_ms:
            state.last_caught_up_ms = at_ms

    def shutdown(self) -> None:
        """Stop the fetchers and ISR work; answer every parked request with what it has."""
        if self.fetchers is not None:
            self.fetchers.shutdown()
        for task in list(self._tasks):
            task.cancel()
        self.fetch_purgatory.expire_all()
        self.produce_purgatory.expire_all()
        self.delete_records_purgatory.expire_all()

    def high_watermarks(self) -> dict[TopicPartition, int]:
        return {tp: p.high_watermark for tp, p in self._partitions.items()}


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000
