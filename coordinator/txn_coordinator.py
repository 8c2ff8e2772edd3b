"""The transaction coordinator: the transactional ids whose ``__transaction_state``
partition this broker leads, their state machine (``txn_state.py``) and its writes.

It follows the partitions' leadership as the group coordinator follows
``__consumer_offsets``' (``on_become_leader`` with the leader epoch as coordinator epoch,
``on_resign``); a transition is written, pending meanwhile (CONCURRENT_TRANSACTIONS for
the id's other requests), and applied once committed. After PrepareCommit/PrepareAbort
the markers go out (``txn_markers.py``), then CompleteCommit/CompleteAbort is written; a
coordinator that loads a transaction in PrepareX sends its markers again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from gregor.coordinator.loader import PartitionLoader
from gregor.coordinator.partitions import CoordinatorPartitions, Records
from gregor.coordinator.records import partition_for
from gregor.coordinator.txn_markers import TxnMarker, TxnMarkerChannel
from gregor.coordinator.txn_records import (
    TRANSACTION_STATE_TOPIC,
    TxnLogValue,
    TxnState,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from gregor.coordinator.txn_state import (
    PREPARED,
    AlreadyEnded,
    FenceFirst,
    NeedProducerId,
    Transition,
    TxnMetadata,
    add_partitions,
    complete_end,
    end_txn,
    end_txn_v2,
    epoch_exhausted,
    expire,
    init_producer,
    new_metadata,
    prepare_end,
    verify,
)
from gregor.replica.manager import ReplicaManager
from gregor.replica.purgatory import Purgatory

logger = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
# The wait before writing CompleteX again after a failed write.
COMPLETE_RETRY_S = 0.2


@dataclass(frozen=True, slots=True)
class TxnSettings:
    partitions: int = 50
    max_timeout_ms: int = 900_000
    id_expiration_ms: int = 604_800_000
    abort_interval_ms: int = 10_000
    remove_interval_ms: int = 3_600_000
    commit_timeout_ms: int = 5000

    @classmethod
    def from_config(cls, config: Any) -> TxnSettings:
        """From a BrokerConfig (Kafka's key names)."""
        return cls(
            partitions=config["transaction.state.log.num.partitions"],
            max_timeout_ms=config["transaction.max.timeout.ms"],
            id_expiration_ms=config["transactional.id.expiration.ms"],
            abort_interval_ms=config["transaction.abort.timed.out.transaction.cleanup.interval.ms"],
            remove_interval_ms=config["transaction.remove.expired.transaction.cleanup.interval.ms"],
            commit_timeout_ms=config["offsets.commit.timeout.ms"],
        )


@dataclass(frozen=True, slots=True)
class EndResult:
    """EndTxn v5's answer: the error, and the producer id and epoch the producer goes on
    with (-1 and -1 on an error)."""

    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(frozen=True, slots=True)
class InitResult:
    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


class TransactionCoordinator:
    def __init__(
        self,
        settings: TxnSettings,
        replicas: ReplicaManager,
        append_purgatory: Purgatory[Any],
        now_ms: Callable[[], int],
        allocate_producer_id: Callable[[], Awaitable[int]],
        markers: TxnMarkerChannel,
    ) -> None:
        self.settings = settings
        self._now = now_ms
        self._allocate = allocate_producer_id
        self.markers = markers
        self.log = CoordinatorPartitions(
            TRANSACTION_STATE_TOPIC, replicas, append_purgatory, settings.commit_timeout_ms, now_ms
        )
        self.txns: dict[str, TxnMetadata] = {}
        self._epochs: dict[int, int] = {}  # coordinator epoch per partition led
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- ownership --------------------------------------------------------------------------
    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.settings.partitions)

    def owner_error(self, transactional_id: str) -> ErrorCode | None:
        return self.log.owner_error(self.partition_for(transactional_id))

    def loading(self) -> bool:
        return self.log.loading()

    def on_become_leader(self, index: int, coordinator_epoch: int) -> None:
        """Load the partition's ids (COORDINATOR_LOAD_IN_PROGRESS for them meanwhile), then
        resume the markers of transactions it left prepared."""
        if self._epochs.get(index) == coordinator_epoch and index in self.log.partitions():
            return
        self.on_resign(index)
        partition = self.log.get(index)
        if partition is None:
            return
        self._epochs[index] = coordinator_epoch
        loaded: dict[str, TxnLogValue | None] = {}

        def replay(key: bytes, value: bytes | None) -> None:
            loaded[decode_key(key)] = None if value is None else decode_value(value)

        def done() -> None:
            for transactional_id, value in loaded.items():
                if value is None:
                    continue
                meta = TxnMetadata(transactional_id, value, coordinator_epoch=coordinator_epoch)
                self.txns[transactional_id] = meta
                if value.state in PREPARED:
                    self._spawn(self._complete(meta, index, coordinator_epoch))
            if loaded:
                logger.info(
                    "Loaded %d transactional id(s) from %s-%d",
                    len(loaded),
                    TRANSACTION_STATE_TOPIC,
                    index,
                )

        self.log.load(index, PartitionLoader(partition, replay), done)

    def on_resign(self, index: int) -> None:
        """Forget the partition's ids; writes in flight answer NOT_COORDINATOR, markers in
        flight stop (the next coordinator resumes them)."""
        self._epochs.pop(index, None)
        for transactional_id in [t for t in self.txns if self.partition_for(t) == index]:
            del self.txns[transactional_id]
        self.log.unload(index)

    # -- writes -----------------------------------------------------------------------------
    def _write(self, meta: TxnMetadata, transition: Transition) -> asyncio.Future[ErrorCode]:
        """Write the transition; the future answers once it is applied (or failed)."""
        future: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        meta.begin(transition)
        index = self.partition_for(meta.transactional_id)
        record: Records = [(encode_key(meta.transactional_id), encode_value(transition.value))]

        def done(error: ErrorCode) -> None:
            if error != ErrorCode.none and meta.pending is transition:
                meta.abandon()
            if not future.done():
                future.set_result(error)

        self.log.append(index, record, done, meta.complete)
        return future

    def _write_tombstone(self, meta: TxnMetadata, transition: Transition) -> None:
        meta.begin(transition)
        index = self.partition_for(meta.transactional_id)
        transactional_id = meta.transactional_id

        def apply() -> None:
            if self.txns.get(transactional_id) is meta:
                del self.txns[transactional_id]

        def done(error: ErrorCode) -> None:
            if error != ErrorCode.none and meta.pending is transition:
                meta.abandon()

        self.log.append(index, [(encode_key(transactional_id), None)], done, apply)

    def _spawn(self, work: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- InitProducerId ---------------------------------------------------------------------
    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, expected: tuple[int, int] | None
    ) -> InitResult:
        if not transactional_id:
            return InitResult(ErrorCode.invalid_request)
        if not 0 < timeout_ms <= self.settings.max_timeout_ms:
            return InitResult(ErrorCode.invalid_transaction_timeout)
        error = self.owner_error(transactional_id)
        if error is not None:
            return InitResult(error)
        meta = self.txns.get(transactional_id)
        new_producer_id = -1
        if meta is None or epoch_exhausted(meta.producer_epoch):
            new_producer_id = await self._allocate()
            error = self.owner_error(transactional_id)  # the allocation may have taken long
            if error is not None:
                return InitResult(error)
            meta = self.txns.get(transactional_id)
            if meta is None:
                meta = new_metadata(transactional_id, new_producer_id, timeout_ms, self._now())
                meta.coordinator_epoch = self._epochs.get(self.partition_for(transactional_id), 0)
                self.txns[transactional_id] = meta
        outcome = init_producer(meta, timeout_ms, expected, new_producer_id, self._now())
        if isinstance(outcome, ErrorCode):
            return InitResult(outcome)
        if isinstance(outcome, FenceFirst):
            # Kafka aborts the ongoing transaction with the epoch bumped (fencing the
            # producer that owned it); the client retries on CONCURRENT_TRANSACTIONS.
            error = await self._end(meta, commit=False, fence=True)
            return InitResult(
                error if error != ErrorCode.none else ErrorCode.concurrent_transactions
            )
        error = await self._write(meta, outcome)
        if error != ErrorCode.none:
            return InitResult(error)
        return InitResult(ErrorCode.none, outcome.value.producer_id, outcome.value.producer_epoch)

    # -- AddPartitionsToTxn / AddOffsetsToTxn -----------------------------------------------
    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: set[TopicPartition],
        client_transaction_version: int | None = None,
    ) -> ErrorCode:
        """``client_transaction_version`` 2: a broker's implicit add for a client of
        transaction protocol version 2 (AddPartitionsToTxn v5 without verify_only)."""
        error = self._lookup_error(transactional_id)
        if error is not None:
            return error
        meta = self.txns[transactional_id]
        outcome = add_partitions(
            meta, producer_id, producer_epoch, partitions, self._now(), client_transaction_version
        )
        if outcome is None:
            return ErrorCode.none
        if isinstance(outcome, ErrorCode):
            return outcome
        return await self._write(meta, outcome)

    def verify(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: list[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn verify_only: whether each partition is in the producer's
        ongoing transaction."""
        error = self._lookup_error(transactional_id)
        if error is None:
            outcome = verify(self.txns[transactional_id], producer_id, producer_epoch, partitions)
            if isinstance(outcome, dict):
                return outcome
            error = outcome
        return dict.fromkeys(partitions, error)

    def _lookup_error(self, transactional_id: str) -> ErrorCode | None:
        if not transactional_id:
            return ErrorCode.invalid_request
        error = self.owner_error(transactional_id)
        if error is not None:
            return error
        if transactional_id not in self.txns:
            return ErrorCode.invalid_producer_id_mapping
        return None

    # -- EndTxn -----------------------------------------------------------------------------
    async def end_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> ErrorCode:
        error = self._lookup_error(transactional_id)
        if error is not None:
            return error
        meta = self.txns[transactional_id]
        outcome = end_txn(meta, producer_id, producer_epoch, commit, self._now())
        if outcome is None:
            return ErrorCode.none
        if isinstance(outcome, ErrorCode):
            return outcome
        return await self._end(meta, commit, transition=outcome)

    async def end_txn_v2(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> EndResult:
        """EndTxn v5 (transaction protocol version 2): the epoch bumped at every end, the
        new id and epoch answered; an exhausted epoch rotates the producer id."""
        error = self._lookup_error(transactional_id)
        if error is not None:
            return EndResult(error)
        meta = self.txns[transactional_id]
        outcome = end_txn_v2(meta, producer_id, producer_epoch, commit, self._now())
        if isinstance(outcome, NeedProducerId):
            next_producer_id = await self._allocate()
            error = self._lookup_error(transactional_id)  # the allocation may have taken long
            if error is not None:
                return EndResult(error)
            meta = self.txns[transactional_id]
            outcome = end_txn_v2(
                meta, producer_id, producer_epoch, commit, self._now(), next_producer_id
            )
        if isinstance(outcome, ErrorCode):
            return EndResult(outcome)
        if isinstance(outcome, AlreadyEnded):
            return EndResult(ErrorCode.none, outcome.producer_id, outcome.producer_epoch)
        assert not isinstance(outcome, NeedProducerId)
        error = await self._end(meta, commit, transition=outcome)
        if error != ErrorCode.none:
            return EndResult(error)
        # What the producer goes on with is what CompleteX will hold (Kafka answers the
        # pre-send completion's id and epoch): the new id at epoch 0 after an overflow.
        prepared = outcome.value
        if prepared.next_producer_id >= 0:
            return EndResult(ErrorCode.none, prepared.next_producer_id, 0)
        return EndResult(ErrorCode.none, prepared.producer_id, prepared.producer_epoch)

    async def _end(
        self,
        meta: TxnMetadata,
        commit: bool,
        *,
        fence: bool = False,
        transition: Transition | None = None,
    ) -> ErrorCode:
        """Write PrepareX, answer, and complete the transaction in the background."""
        if transition is None:
            transition = prepare_end(meta, commit, self._now(), fence=fence)
        index = self.partition_for(meta.transactional_id)
        coordinator_epoch = self._epochs.get(index, 0)
        error = await self._write(meta, transition)
        if error == ErrorCode.none:
            self._spawn(self._complete(meta, index, coordinator_epoch))
        return error

    async def _complete(self, meta: TxnMetadata, index: int, coordinator_epoch: int) -> None:
        """Markers to every partition of the prepared transaction, then CompleteX."""
        value = meta.value
        marker = TxnMarker(
            value.producer_id,
            value.producer_epoch,
            value.state == TxnState.PREPARE_COMMIT,
            coordinator_epoch,
        )

        def still_owner() -> bool:
            return (
                self._epochs.get(index) == coordinator_epoch
                and self.txns.get(meta.transactional_id) is meta
            )

        if not await self.markers.write(marker, value.topic_partitions(), still_owner):
            return
        while still_owner():
            if meta.pending is None:
                error = await self._write(meta, complete_end(meta, self._now()))
                if error == ErrorCode.none or error == ErrorCode.not_coordinator:
                    return
                logger.warning(
                    "Completing the transaction of %s failed (%s); retrying",
                    meta.transactional_id,
                    error.name,
                )
            await asyncio.sleep(COMPLETE_RETRY_S)

    # -- timeouts and expiry ----------------------------------------------------------------
    def abort_timed_out(self, now_ms: int) -> int:
        """Abort the ongoing transactions past their timeout, fencing their producers'
        epoch as Kafka does; the number aborted."""
        aborted = 0
        for meta in list(self.txns.values()):
            value = meta.value
            if (
                value.state == TxnState.ONGOING
                and meta.pending is None
                and value.start_ms + value.timeout_ms < now_ms
            ):
                logger.info(
                    "Aborting the transaction of %s (producer id %d): it exceeded its "
                    "timeout of %d ms",
                    meta.transactional_id,
                    value.producer_id,
                    value.timeout_ms,
                )
                self._spawn(self._end(meta, commit=False, fence=True))
                aborted += 1
        return aborted

    def expire_ids(self, now_ms: int) -> int:
        """Remove ids idle past transactional.id.expiration.ms (a tombstone each)."""
        expired = 0
        for meta in list(self.txns.values()):
            value = meta.value
            if (
                value.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
                and meta.pending is None
                and value.last_update_ms + self.settings.id_expiration_ms <= now_ms
                and self.log.owner_error(self.partition_for(meta.transactional_id)) is None
            ):
                self._write_tombstone(meta, expire(meta, now_ms))
                expired += 1
        return expired

    def shutdown(self) -> None:
        for index in self.log.partitions():
            self.on_resign(index)
        self.markers.close()
        for task in self._tasks:
            task.cancel()
