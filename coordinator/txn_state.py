"""A transactional id's metadata and Kafka's transaction state machine, pure.

Each request is checked against the committed metadata and yields either an error or the
``Transition`` to write (the next ``TxnLogValue``); the coordinator writes it, marks it
pending meanwhile (requests then meet CONCURRENT_TRANSACTIONS), and applies it once
committed. Rules and errors follow Kafka's TransactionCoordinator under transaction
protocol version 1.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kio.schema.errors import ErrorCode

from gregor.coordinator.txn_records import TxnLogValue, TxnState, group_partitions

NO_PRODUCER_EPOCH = -1
NO_PRODUCER_ID = -1
MAX_EPOCH = 32767  # Short.MAX_VALUE
# Kafka's TransactionVersion levels: 2 is KIP-890 part 2 (EndTxn v5, TxnOffsetCommit v5, the
# broker's AddPartitionsToTxn v5 that adds a partition).
TV_2 = 2

# The states each state may be reached from (Kafka's TransactionState.validPreviousStates).
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    TxnState.EMPTY: frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.ONGOING: frozenset(
        {TxnState.ONGOING, TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}
    ),
    TxnState.PREPARE_COMMIT: frozenset({TxnState.ONGOING}),
    # Transaction protocol version 2 may abort with no transaction open (KIP-890 part 2).
    TxnState.PREPARE_ABORT: frozenset(
        {
            TxnState.ONGOING,
            TxnState.PREPARE_EPOCH_FENCE,
            TxnState.EMPTY,
            TxnState.COMPLETE_COMMIT,
            TxnState.COMPLETE_ABORT,
        }
    ),
    TxnState.COMPLETE_COMMIT: frozenset({TxnState.PREPARE_COMMIT}),
    TxnState.COMPLETE_ABORT: frozenset({TxnState.PREPARE_ABORT}),
    TxnState.DEAD: frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.PREPARE_EPOCH_FENCE: frozenset({TxnState.ONGOING}),
}
COMPLETED = frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})
PREPARED = frozenset({TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT})


def epoch_exhausted(epoch: int) -> bool:
    """Kafka bumps no epoch past Short.MAX_VALUE - 1: the producer id is rotated instead."""
    return epoch >= MAX_EPOCH - 1


@dataclass(frozen=True, slots=True)
class Transition:
    """A value to write, and the last epoch to remember once it is applied."""

    value: TxnLogValue
    last_producer_epoch: int


@dataclass(frozen=True, slots=True)
class FenceFirst:
    """InitProducerId met an ongoing transaction: it is aborted with the epoch bumped (the
    old producer fenced); the client retries on CONCURRENT_TRANSACTIONS."""


class InvalidTransition(Exception):
    """A transition the state machine forbids (a bug, never a client's doing)."""


@dataclass(slots=True)
class TxnMetadata:
    transactional_id: str
    value: TxnLogValue  # as committed (or, for a new id, as it will start)
    # Kafka's lastProducerEpoch: the epoch before the last bump, kept in memory only, so
    # that a KIP-360 retry of an InitProducerId whose answer was lost gets the same epoch.
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    pending: Transition | None = None  # written, not yet committed
    # The coordinator epoch of the partition's leadership that loaded or made it.
    coordinator_epoch: int = 0

    @property
    def state(self) -> TxnState:
        return self.value.state

    @property
    def producer_id(self) -> int:
        return self.value.producer_id

    @property
    def producer_epoch(self) -> int:
        return self.value.producer_epoch

    def begin(self, transition: Transition) -> None:
        if self.pending is not None:
            raise InvalidTransition(f"{self.transactional_id} has a transition in flight")
        if self.state not in VALID_PREVIOUS[transition.value.state]:
            raise InvalidTransition(
                f"{self.transactional_id}: {self.state.display} -> {transition.value.state.display}"
            )
        self.pending = transition

    def complete(self) -> None:
        """The pending transition is committed."""
        transition, self.pending = self.pending, None
        if transition is not None:
            self.value = transition.value
            self.last_producer_epoch = transition.last_producer_epoch

    def abandon(self) -> None:
        """The pending transition could not be written."""
        self.pending = None


def new_metadata(
    transactional_id: str, producer_id: int, timeout_ms: int, now_ms: int
) -> TxnMetadata:
    """An id seen for the first time: Empty, at no epoch yet (the first bump makes it 0)."""
    return TxnMetadata(
        transactional_id,
        TxnLogValue(producer_id, NO_PRODUCER_EPOCH, timeout_ms, TxnState.EMPTY, (), now_ms, -1),
    )


def _valid_producer(meta: TxnMetadata, expected: tuple[int, int]) -> bool:
    """Kafka's isValidProducerId: a KIP-360 request names the producer it was."""
    producer_id, epoch = expected
    value = meta.value
    return (
        value.producer_epoch == NO_PRODUCER_EPOCH
        or producer_id == value.producer_id
        or (producer_id == value.previous_producer_id and epoch_exhausted(epoch))
    )


def init_producer(
    meta: TxnMetadata,
    timeout_ms: int,
    expected: tuple[int, int] | None,
    new_producer_id: int,
    now_ms: int,
) -> ErrorCode | Transition | FenceFirst:
    """InitProducerId: the next epoch (or, the epoch exhausted, ``new_producer_id`` at 0)."""
    if meta.pending is not None:
        return ErrorCode.concurrent_transactions
    if expected is not None and not _valid_producer(meta, expected):
        return ErrorCode.producer_fenced
    state = meta.state
    if state in PREPARED:
        return ErrorCode.concurrent_transactions
    if state == TxnState.ONGOING:
        return FenceFirst()
    if state not in COMPLETED:  # Dead, PrepareEpochFence: being removed or fenced
        return ErrorCode.concurrent_transactions
    value = meta.value
    epoch, last_epoch, producer_id, previous = (
        value.producer_epoch,
        meta.last_producer_epoch,
        value.producer_id,
        value.previous_producer_id,
    )
    if expected is not None and expected[0] != producer_id:
        pass  # a retry of the rotation that made the current id: the same id and epoch
    elif epoch_exhausted(epoch):
        previous, producer_id = producer_id, new_producer_id
        last_epoch = epoch if expected is not None else NO_PRODUCER_EPOCH
        epoch = 0
    elif expected is None or expected[1] in (NO_PRODUCER_EPOCH, epoch):
        last_epoch, epoch = epoch if expected is not None else NO_PRODUCER_EPOCH, epoch + 1
    elif expected[1] == last_epoch:
        pass  # a retry of a bump whose answer was lost: the same epoch again
    else:
        return ErrorCode.producer_fenced
    return Transition(
        replace(
            value,
            producer_id=producer_id,
            producer_epoch=epoch,
            timeout_ms=timeout_ms,
            state=TxnState.EMPTY,
            partitions=(),
            last_update_ms=now_ms,
            start_ms=-1,
            previous_producer_id=previous,
        ),
        last_epoch,
    )


def _rotation_pending(meta: TxnMetadata, producer_id: int, epoch: int) -> bool:
    """A version-2 producer already given the id its last EndTxn rotated to, while that
    transaction still completes under the old id: it must wait (CONCURRENT_TRANSACTIONS),
    not be told its id is unknown."""
    value = meta.value
    return (
        value.next_producer_id != NO_PRODUCER_ID
        and producer_id == value.next_producer_id
        and epoch == 0
        and (meta.pending is not None or meta.state in PREPARED)
    )


def _check_producer(meta: TxnMetadata, producer_id: int, epoch: int) -> ErrorCode | None:
    if _rotation_pending(meta, producer_id, epoch):
        return ErrorCode.concurrent_transactions
    if producer_id != meta.producer_id:
        return ErrorCode.invalid_producer_id_mapping
    if epoch != meta.producer_epoch:
        return ErrorCode.producer_fenced
    if meta.pending is not None or meta.state in PREPARED:
        return ErrorCode.concurrent_transactions
    return None


def add_partitions(
    meta: TxnMetadata,
    producer_id: int,
    epoch: int,
    partitions: set[tuple[str, int]],
    now_ms: int,
    client_transaction_version: int | None = None,
) -> ErrorCode | Transition | None:
    """AddPartitionsToTxn (and AddOffsetsToTxn's offsets partition): None when they are
    all in the ongoing transaction already. ``client_transaction_version`` (2 for a
    broker's implicit add of transaction protocol version 2) is recorded with the
    transaction, as Kafka's prepareAddPartitions does."""
    error = _check_producer(meta, producer_id, epoch)
    if error is not None:
        return error
    state = meta.state
    if state not in VALID_PREVIOUS[TxnState.ONGOING]:
        return ErrorCode.invalid_txn_state
    current = meta.value.topic_partitions()
    if state == TxnState.ONGOING and partitions <= current:
        return None
    value = meta.value
    return Transition(
        replace(
            value,
            state=TxnState.ONGOING,
            partitions=group_partitions(current | partitions),
            last_update_ms=now_ms,
            start_ms=value.start_ms if state == TxnState.ONGOING else now_ms,
            client_transaction_version=value.client_transaction_version
            if client_transaction_version is None
            else client_transaction_version,
        ),
        meta.last_producer_epoch,
    )


def verify(
    meta: TxnMetadata, producer_id: int, epoch: int, partitions: list[tuple[str, int]]
) -> ErrorCode | dict[tuple[str, int], ErrorCode]:
    """AddPartitionsToTxn's verify_only (KIP-890): NONE for the partitions of the ongoing
    transaction, INVALID_TXN_STATE for the others."""
    if _rotation_pending(meta, producer_id, epoch):
        return ErrorCode.concurrent_transactions
    if producer_id != meta.producer_id:
        return ErrorCode.invalid_producer_id_mapping
    if epoch != meta.producer_epoch:
        return ErrorCode.producer_fenced
    if meta.state in PREPARED or (meta.pending is not None and meta.state != TxnState.ONGOING):
        return ErrorCode.concurrent_transactions
    current = meta.value.topic_partitions() if meta.state == TxnState.ONGOING else set()
    return {
        tp: ErrorCode.none if tp in current else ErrorCode.invalid_txn_state for tp in partitions
    }


def end_txn(
    meta: TxnMetadata, producer_id: int, epoch: int, commit: bool, now_ms: int
) -> ErrorCode | Transition | None:
    """EndTxn from the client: PrepareCommit or PrepareAbort, None for a retry of one
    already completed."""
    if producer_id != meta.producer_id:
        return ErrorCode.invalid_producer_id_mapping
    if epoch != meta.producer_epoch:
        return ErrorCode.producer_fenced
    if meta.pending is not None:
        return ErrorCode.concurrent_transactions
    state = meta.state
    if state == TxnState.ONGOING:
        return prepare_end(meta, commit, now_ms)
    done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
    preparing = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
    if state == done:
        return None
    if state == preparing:
        return ErrorCode.concurrent_transactions
    return ErrorCode.invalid_txn_state


def prepare_end(meta: TxnMetadata, commit: bool, now_ms: int, *, fence: bool = False) -> Transition:
    """Ongoing -> PrepareCommit/PrepareAbort; ``fence`` (the coordinator's own abort of an
    expired or fenced transaction) bumps the epoch, so the markers fence the producer."""
    value = meta.value
    epoch = value.producer_epoch
    last_epoch = meta.last_producer_epoch
    if fence and not epoch_exhausted(epoch):
        last_epoch, epoch = epoch, epoch + 1
    return Transition(
        replace(
            value,
            producer_epoch=epoch,
            state=TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT,
            last_update_ms=now_ms,
            # Version 1's end (EndTxn v0-v4, and the coordinator's own aborts, as Kafka's
            # run at the cluster's level): no epoch bump at completion, no rotation.
            next_producer_id=NO_PRODUCER_ID,
            client_transaction_version=0,
        ),
        last_epoch,
    )


def complete_end(meta: TxnMetadata, now_ms: int) -> Transition:
    """PrepareCommit/PrepareAbort -> CompleteCommit/CompleteAbort, once every marker is
    written."""
    value = meta.value
    commit = value.state == TxnState.PREPARE_COMMIT
    producer_id, epoch, previous = (
        value.producer_id,
        value.producer_epoch,
        value.previous_producer_id,
    )
    if value.client_transaction_version >= TV_2 and value.next_producer_id != NO_PRODUCER_ID:
        # Version 2's epoch overflow: the markers went out at Short.MAX_VALUE under the old
        # id; the producer carries on with the new id at epoch 0 (Kafka's prepareComplete).
        previous, producer_id, epoch = producer_id, value.next_producer_id, 0
    return Transition(
        replace(
            value,
            producer_id=producer_id,
            producer_epoch=epoch,
            previous_producer_id=previous,
            next_producer_id=NO_PRODUCER_ID,
            state=TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT,
            partitions=(),
            last_update_ms=now_ms,
        ),
        meta.last_producer_epoch,
    )


def expire(meta: TxnMetadata, now_ms: int) -> Transition:
    """An id idle past transactional.id.expiration.ms: Dead, then a tombstone."""
    return Transition(
        replace(meta.value, state=TxnState.DEAD, partitions=(), last_update_ms=now_ms),
        meta.last_producer_epoch,
    )


# -- transaction protocol version 2 (KIP-890 part 2): EndTxn v5 --------------------------
@dataclass(frozen=True, slots=True)
class NeedProducerId:
    """EndTxn v5 bumps an epoch that is exhausted: the coordinator allocates a producer id
    and asks again with it."""


@dataclass(frozen=True, slots=True)
class AlreadyEnded:
    """EndTxn v5 retried after it completed: NONE, with the producer's current id and
    epoch."""

    producer_id: int
    producer_epoch: int


def end_txn_v2(
    meta: TxnMetadata,
    producer_id: int,
    epoch: int,
    commit: bool,
    now_ms: int,
    next_producer_id: int | None = None,
) -> ErrorCode | Transition | AlreadyEnded | NeedProducerId:
    """EndTxn v5, as Kafka's endTransaction under transaction version 2: every end bumps
    the epoch (PrepareX carries epoch + 1, the markers go out with it); an abort is allowed
    with no transaction open; a retry names the epoch before the bump (or, after an epoch
    overflow rotated the id, the old id at Short.MAX_VALUE - 1)."""
    if _rotation_pending(meta, producer_id, epoch):
        return ErrorCode.concurrent_transactions
    value = meta.value
    state = meta.state
    retry_on_overflow = (
        value.previous_producer_id == producer_id
        and epoch == MAX_EPOCH - 1
        and value.producer_epoch == 0
    )
    retry_on_bump = value.producer_epoch == epoch + 1
    if state in PREPARED:
        valid_epoch = retry_on_bump
    elif state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
        valid_epoch = retry_on_bump or retry_on_overflow or epoch == value.producer_epoch
    else:  # Ongoing, Empty (Dead and PrepareEpochFence are never committed states here)
        valid_epoch = epoch == value.producer_epoch
    is_retry = retry_on_bump or retry_on_overflow
    if producer_id != value.producer_id and not retry_on_overflow:
        return ErrorCode.invalid_producer_id_mapping
    if not valid_epoch:
        return ErrorCode.producer_fenced
    if meta.pending is not None:
        return ErrorCode.concurrent_transactions
    if state == TxnState.ONGOING:
        return _prepare_end_v2(meta, commit, now_ms, next_producer_id, no_partition_added=False)
    if state == TxnState.COMPLETE_COMMIT:
        if commit:
            return (
                AlreadyEnded(value.producer_id, value.producer_epoch)
                if is_retry
                else (ErrorCode.invalid_txn_state)
            )
        if is_retry:
            return ErrorCode.invalid_txn_state
        return _prepare_end_v2(meta, False, now_ms, next_producer_id, no_partition_added=True)
    if state == TxnState.COMPLETE_ABORT:
        if commit:
            return ErrorCode.invalid_txn_state
        if is_retry:
            return AlreadyEnded(value.producer_id, value.producer_epoch)
        return _prepare_end_v2(meta, False, now_ms, next_producer_id, no_partition_added=True)
    if state in PREPARED:
        same = (state == TxnState.PREPARE_COMMIT) == commit
        return ErrorCode.concurrent_transactions if same else ErrorCode.invalid_txn_state
    if state == TxnState.EMPTY:
        if commit:
            return ErrorCode.invalid_txn_state
        return _prepare_end_v2(meta, False, now_ms, next_producer_id, no_partition_added=True)
    return ErrorCode.concurrent_transactions  # Dead or PrepareEpochFence: being removed


def _prepare_end_v2(
    meta: TxnMetadata,
    commit: bool,
    now_ms: int,
    next_producer_id: int | None,
    *,
    no_partition_added: bool,
) -> Transition | NeedProducerId:
    """PrepareCommit/PrepareAbort at epoch + 1 (Kafka's prepareAbortOrCommit with epoch
    bump); an exhausted epoch also names the producer id to rotate to once complete."""
    value = meta.value
    next_id = NO_PRODUCER_ID
    if epoch_exhausted(value.producer_epoch):
        if next_producer_id is None:
            return NeedProducerId()
        next_id = next_producer_id
    return Transition(
        replace(
            value,
            producer_epoch=value.producer_epoch + 1,
            next_producer_id=next_id,
            client_transaction_version=TV_2,
            state=TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT,
            start_ms=now_ms if no_partition_added else value.start_ms,
            last_update_ms=now_ms,
        ),
        value.producer_epoch,
    )
