"""The partition side's check of KIP-890 part 1 (``Services.txn``): before a producer's
first transactional write to a partition goes in (a Produce, or the group coordinator's
write of a TxnOffsetCommit to ``__consumer_offsets``), ask the transactional id's
coordinator whether the partition is in the producer's ongoing transaction.

The coordinator is asked in-process when this broker leads the id's ``__transaction_state``
partition, else with AddPartitionsToTxn v4 ``verify_only`` through the inter-broker
client. The answers are mapped to what a producer understands, as Kafka's
AddPartitionsToTxnManager and ReplicaManager do.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from kio.schema.add_partitions_to_txn.v4.request import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
    AddPartitionsToTxnTransaction,
)
from kio.schema.errors import ErrorCode
from kio.schema.types import ProducerId, TopicName, TransactionalId
from kio.static.primitive import i16, i32

from gregor.coordinator.txn_coordinator import TransactionCoordinator
from gregor.coordinator.txn_state import TV_2

logger = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
# (node id, request) -> response, through the inter-broker client.
SendVerify = Callable[[int, AddPartitionsToTxnRequest], Awaitable[Any]]
# The leader of a __transaction_state partition: None or -1 while there is none.
CoordinatorOf = Callable[[int], int | None]

# Retriable coordinator answers an older producer may not retry on a produce: Kafka turns
# them into NOT_ENOUGH_REPLICAS, which every producer retries without a metadata refresh.
_RETRIABLE = frozenset(
    {
        ErrorCode.concurrent_transactions,
        ErrorCode.network_exception,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.coordinator_not_available,
        ErrorCode.not_coordinator,
    }
)


class CoordinatorVerifier:
    def __init__(
        self,
        coordinator: TransactionCoordinator,
        broker_id: int,
        coordinator_of: CoordinatorOf,
        send: SendVerify | None,
    ) -> None:
        self._coordinator = coordinator
        self._broker_id = broker_id
        self._coordinator_of = coordinator_of
        self._send = send

    async def verify(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: list[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        """Per partition: NONE if it is in the producer's ongoing transaction, else the
        error its produce answers (INVALID_TXN_STATE when it is not in the transaction)."""
        errors = await self._ask(transactional_id, producer_id, producer_epoch, partitions)
        return {tp: _for_produce(errors.get(tp, ErrorCode.invalid_txn_state)) for tp in partitions}

    async def verify_offset_commit(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partition: TopicPartition,
    ) -> ErrorCode:
        """NONE if the group's ``__consumer_offsets`` partition is in the producer's ongoing
        transaction (AddOffsetsToTxn put it there), else the error its TxnOffsetCommit
        answers."""
        errors = await self._ask(transactional_id, producer_id, producer_epoch, [partition])
        return _for_offset_commit(errors.get(partition, ErrorCode.invalid_txn_state))

    async def add_offset_partition(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partition: TopicPartition,
    ) -> ErrorCode:
        """TxnOffsetCommit v5 (transaction protocol version 2, KIP-890 part 2): there is no
        AddOffsetsToTxn, so the group's ``__consumer_offsets`` partition is added to the
        producer's transaction here, as Kafka's verification guard does in its
        ``addPartition`` mode (AddPartitionsToTxn without verify_only). NONE once it is
        in the transaction, else the error the TxnOffsetCommit answers."""
        coordinator = self._coordinator
        node = self._coordinator_of(coordinator.partition_for(transactional_id))
        if (
            coordinator.owner_error(transactional_id) != ErrorCode.not_coordinator
            or node == self._broker_id
        ):
            error = await coordinator.add_partitions(
                transactional_id, producer_id, producer_epoch, {partition}, TV_2
            )
        elif node is None or node < 0 or self._send is None:
            error = ErrorCode.coordinator_not_available
        else:
            error = await self._send_add(
                node, transactional_id, producer_id, producer_epoch, partition
            )
        return _for_implicit_add(error)

    async def _send_add(
        self,
        node: int,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partition: TopicPartition,
    ) -> ErrorCode:
        assert self._send is not None
        topic, index = partition
        # v4 without verify_only: Kafka's coordinator takes any AddPartitionsToTxn above v3
        # for transaction version 2 (transactionVersionForAddPartitionsToTxn), and v4 is
        # what the inter-broker client sends.
        request = _request(transactional_id, producer_id, producer_epoch, [partition], False)
        try:
            response = await self._send(node, request)
        except (ConnectionError, TimeoutError) as e:
            logger.warning(
                "Adding %s-%d to the transaction of %r with node %d failed: %s",
                topic,
                index,
                transactional_id,
                node,
                e,
            )
            return ErrorCode.network_exception
        if response.error_code != ErrorCode.none:
            error = ErrorCode(response.error_code)
            return (
                ErrorCode.invalid_txn_state
                if error == ErrorCode.cluster_authorization_failed
                else error
            )
        for result in response.results_by_transaction:
            for t in result.topic_results:
                for p in t.results_by_partition:
                    if (t.name, p.partition_index) == partition:
                        return ErrorCode(p.partition_error_code)
        return ErrorCode.invalid_txn_state

    async def _ask(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: list[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        coordinator = self._coordinator
        node = self._coordinator_of(coordinator.partition_for(transactional_id))
        if (
            coordinator.owner_error(transactional_id) != ErrorCode.not_coordinator
            or node == self._broker_id
        ):
            # Here, loading here, or here before this broker has loaded the partition.
            return coordinator.verify(transactional_id, producer_id, producer_epoch, partitions)
        if node is None or node < 0 or self._send is None:
            return dict.fromkeys(partitions, ErrorCode.coordinator_not_available)
        request = _request(transactional_id, producer_id, producer_epoch, partitions, True)
        try:
            response = await self._send(node, request)
        except (ConnectionError, TimeoutError) as e:
            logger.warning(
                "Verifying the transaction of %r with node %d failed: %s", transactional_id, node, e
            )
            return dict.fromkeys(partitions, ErrorCode.network_exception)
        if response.error_code != ErrorCode.none:
            # A broker must not pass CLUSTER_AUTHORIZATION_FAILED on to a client.
            error = ErrorCode(response.error_code)
            if error == ErrorCode.cluster_authorization_failed:
                error = ErrorCode.invalid_txn_state
            return dict.fromkeys(partitions, error)
        errors: dict[TopicPartition, ErrorCode] = {}
        for result in response.results_by_transaction:
            if result.transactional_id != transactional_id:
                continue
            for topic in result.topic_results:
                for p in topic.results_by_partition:
                    errors[topic.name, p.partition_index] = ErrorCode(p.partition_error_code)
        return errors


def _request(
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    partitions: Iterable[TopicPartition],
    verify_only: bool,
) -> AddPartitionsToTxnRequest:
    by_topic: dict[str, list[i32]] = {}
    for topic, index in partitions:
        by_topic.setdefault(topic, []).append(i32(index))
    return AddPartitionsToTxnRequest(
        transactions=(
            AddPartitionsToTxnTransaction(
                transactional_id=TransactionalId(transactional_id),
                producer_id=ProducerId(producer_id),
                producer_epoch=i16(producer_epoch),
                verify_only=verify_only,
                topics=tuple(
                    AddPartitionsToTxnTopic(name=TopicName(topic), partitions=tuple(indexes))
                    for topic, indexes in by_topic.items()
                ),
            ),
        )
    )


def _for_produce(error: ErrorCode) -> ErrorCode:
    """What a produce answers for the coordinator's error (Kafka: producers expect
    INVALID_PRODUCER_EPOCH where the coordinator says PRODUCER_FENCED)."""
    if error == ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch
    if error in _RETRIABLE:
        return ErrorCode.not_enough_replicas
    return error


def _for_offset_commit(error: ErrorCode) -> ErrorCode:
    """What a TxnOffsetCommit answers for the coordinator's error (Kafka: INVALID_PRODUCER_EPOCH
    for PRODUCER_FENCED as on a produce; a failed network round trip becomes
    COORDINATOR_LOAD_IN_PROGRESS, which every client retries without looking up the group
    coordinator again)."""
    if error == ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch
    if error == ErrorCode.network_exception:
        return ErrorCode.coordinator_load_in_progress
    return error


def _for_implicit_add(error: ErrorCode) -> ErrorCode:
    """What a TxnOffsetCommit v5 answers for the coordinator's error on the implicit add:
    INVALID_PRODUCER_EPOCH for PRODUCER_FENCED, and the retriable ones (the previous
    transaction still completing, the coordinator moving or unreachable) as
    COORDINATOR_LOAD_IN_PROGRESS, which clients retry on the same group coordinator."""
    if error == ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch
    if error in _RETRIABLE:
        return ErrorCode.coordinator_load_in_progress
    return error
