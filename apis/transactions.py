"""The transaction coordinator's APIs: AddPartitionsToTxn (v4+ batched, with verify_only),
AddOffsetsToTxn, EndTxn, DescribeTransactions, ListTransactions, and the group
coordinator's TxnOffsetCommit.

EndTxn v5 and TxnOffsetCommit v5 are transaction protocol version 2 (KIP-890 part 2), chosen
per request by its version as Kafka does: the epoch bumps at every EndTxn v5 (the new id and
epoch answered), and TxnOffsetCommit v5 adds the group's partition to the transaction
itself. ListTransactions v2 filters by a TransactionalIdPattern (KIP-1152).

Authorized as Kafka's handlers: AddPartitionsToTxn v4+ (from brokers) CLUSTER_ACTION, v0-3
WRITE on the transactional id, then WRITE on each topic (an internal topic never: as Kafka,
one refused or unknown partition fails them all, the others OPERATION_NOT_ATTEMPTED);
AddOffsetsToTxn WRITE on the transactional id, then READ on the group; EndTxn WRITE on the
transactional id; TxnOffsetCommit WRITE on the transactional id, READ on the group, READ on
each topic; DescribeTransactions DESCRIBE on each transactional id, its topics without
DESCRIBE left out; ListTransactions only the transactional ids with DESCRIBE."""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, cast

from kio.schema.errors import ErrorCode

from gregor import re2_pattern
from gregor.apis.acl import authorize, authorize_cluster, authorized_names
from gregor.apis.context import NO_THROTTLE, RequestContext, Services, build, later, nested
from gregor.apis.groups import coordinator, may_read_group, then
from gregor.controller.acls.model import AclOperation, ResourceType
from gregor.controller.metadata.topic_names import INTERNAL_TOPICS
from gregor.coordinator.offsets import CommitRequest
from gregor.coordinator.partitions import Producer
from gregor.coordinator.records import OFFSETS_TOPIC
from gregor.coordinator.txn_coordinator import TransactionCoordinator
from gregor.coordinator.txn_records import TxnState
from gregor.coordinator.txn_state import TV_2
from gregor.replica.partition import Partition
from gregor.wire.schema import response_type
from gregor.wire.versions import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    DESCRIBE_TRANSACTIONS,
    END_TXN,
    LIST_TRANSACTIONS,
    TXN_OFFSET_COMMIT,
)

logger = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

# The first versions that know PRODUCER_FENCED (KIP-588); older ones get
# INVALID_PRODUCER_EPOCH, as Kafka answers them.
_FENCED_SINCE = {ADD_PARTITIONS_TO_TXN: 2, ADD_OFFSETS_TO_TXN: 2, END_TXN: 2, TXN_OFFSET_COMMIT: 2}


def transactions(services: Services) -> TransactionCoordinator:
    assert services.transactions is not None
    return services.transactions


def may_write_txn(services: Services, ctx: RequestContext, transactional_id: str) -> bool:
    return authorize(
        services, ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id
    )


def client_error(ctx: RequestContext, error: ErrorCode) -> ErrorCode:
    if error == ErrorCode.producer_fenced and ctx.api_version < _FENCED_SINCE.get(ctx.api_key, 0):
        return ErrorCode.invalid_producer_epoch
    return error


class _ImplicitAdd(Protocol):
    """What coordinator/txn_verifier.py's CoordinatorVerifier adds to apis.context's
    TxnVerifier for TxnOffsetCommit v5 (transaction protocol version 2)."""

    async def add_offset_partition(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partition: tuple[str, int],
    ) -> ErrorCode: ...


# -- AddPartitionsToTxn ---------------------------------------------------------------------
def handle_add_partitions(services: Services, ctx: RequestContext, request: Any) -> Any:
    if ctx.api_version >= 4 and not authorize_cluster(services, ctx, AclOperation.CLUSTER_ACTION):
        # Only brokers send v4+ (to verify or add for their clients): Kafka's top-level error.
        return build(
            response_type(ADD_PARTITIONS_TO_TXN, ctx.api_version),
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.cluster_authorization_failed,
            results_by_transaction=(),
        )
    return later(_add_partitions(services, ctx, request))


async def _add_partitions(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(ADD_PARTITIONS_TO_TXN, ctx.api_version)
    topic_cls = nested(cls, "AddPartitionsToTxnTopicResult")
    partition_cls = nested(cls, "AddPartitionsToTxnPartitionResult")

    def topic_results(errors: dict[TopicPartition, ErrorCode]) -> tuple[Any, ...]:
        by_topic: dict[str, list[Any]] = defaultdict(list)
        for (topic, index), error in errors.items():
            by_topic[topic].append(partition_cls(partition_index=index, partition_error_code=error))
        return tuple(
            topic_cls(name=t, results_by_partition=tuple(ps)) for t, ps in by_topic.items()
        )

    if ctx.api_version < 4:
        errors = await _add_one(
            services,
            ctx,
            request.v3_and_below_transactional_id,
            request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch,
            request.v3_and_below_topics,
            verify_only=False,
        )
        return build(
            cls, throttle_time=NO_THROTTLE, results_by_topic_v3_and_below=topic_results(errors)
        )
    result_cls = nested(cls, "AddPartitionsToTxnResult")
    outcomes = await asyncio.gather(
        *(
            _add_one(
                services,
                ctx,
                t.transactional_id,
                t.producer_id,
                t.producer_epoch,
                t.topics,
                verify_only=t.verify_only,
            )
            for t in request.transactions
        )
    )
    return build(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        results_by_transaction=tuple(
            result_cls(transactional_id=t.transactional_id, topic_results=topic_results(errors))
            for t, errors in zip(request.transactions, outcomes, strict=True)
        ),
    )


async def _add_one(
    services: Services,
    ctx: RequestContext,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    topics: Any,
    *,
    verify_only: bool,
) -> dict[TopicPartition, ErrorCode]:
    wanted = list(dict.fromkeys((t.name, p) for t in topics for p in t.partitions))
    if verify_only:
        return transactions(services).verify(transactional_id, producer_id, producer_epoch, wanted)
    refused: set[str] = set()
    if ctx.api_version < 4:  # from a client: its own rights are checked
        if not may_write_txn(services, ctx, transactional_id):
            return dict.fromkeys(wanted, ErrorCode.transactional_id_authorization_failed)
        names = {t for t, _ in wanted}
        refused = names - authorized_names(
            services, ctx, AclOperation.WRITE, ResourceType.TOPIC, names - INTERNAL_TOPICS
        )
    # As Kafka: refused and unknown partitions fail the request, the others are not
    # attempted.
    failed = {
        tp: ErrorCode.topic_authorization_failed
        if tp[0] in refused
        else ErrorCode.unknown_topic_or_partition
        for tp in wanted
        if tp[0] in refused or services.metadata.partition(*tp) is None
    }
    if failed:
        return {tp: failed.get(tp, ErrorCode.operation_not_attempted) for tp in wanted}
    # As Kafka's transactionVersionForAddPartitionsToTxn: v4+ (sent by brokers adding a
    # partition for a client of transaction protocol version 2) is version 2.
    error = await transactions(services).add_partitions(
        transactional_id,
        producer_id,
        producer_epoch,
        set(wanted),
        TV_2 if ctx.api_version > 3 else 0,
    )
    return dict.fromkeys(wanted, client_error(ctx, error))


# -- AddOffsetsToTxn / EndTxn ---------------------------------------------------------------
def handle_add_offsets(services: Services, ctx: RequestContext, request: Any) -> Any:
    return later(_add_offsets(services, ctx, request))


async def _add_offsets(services: Services, ctx: RequestContext, request: Any) -> Any:
    if not may_write_txn(services, ctx, request.transactional_id):
        error = ErrorCode.transactional_id_authorization_failed
    elif not may_read_group(services, ctx, request.group_id):
        error = ErrorCode.group_authorization_failed
    else:
        partition = (OFFSETS_TOPIC, coordinator(services).partition_for(request.group_id))
        error = await transactions(services).add_partitions(
            request.transactional_id, request.producer_id, request.producer_epoch, {partition}, 0
        )
    return build(
        response_type(ADD_OFFSETS_TO_TXN, ctx.api_version),
        throttle_time=NO_THROTTLE,
        error_code=client_error(ctx, error),
    )


def handle_end_txn(services: Services, ctx: RequestContext, request: Any) -> Any:
    if not may_write_txn(services, ctx, request.transactional_id):
        return build(
            response_type(END_TXN, ctx.api_version),
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.transactional_id_authorization_failed,
            producer_id=-1,
            producer_epoch=-1,
        )
    return later(_end_txn(services, ctx, request))


async def _end_txn(services: Services, ctx: RequestContext, request: Any) -> Any:
    if ctx.api_version >= 5:
        # Transaction protocol version 2 (KIP-890 part 2), chosen by the request's version
        # as Kafka's transactionVersionForEndTxn does: the epoch bumped at every end and
        # the producer's new id and epoch in the answer.
        result = await transactions(services).end_txn_v2(
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            request.committed,
        )
        return build(
            response_type(END_TXN, ctx.api_version),
            throttle_time=NO_THROTTLE,
            error_code=result.error,
            producer_id=result.producer_id,
            producer_epoch=result.producer_epoch,
        )
    error = await transactions(services).end_txn(
        request.transactional_id, request.producer_id, request.producer_epoch, request.committed
    )
    return build(
        response_type(END_TXN, ctx.api_version),
        throttle_time=NO_THROTTLE,
        error_code=client_error(ctx, error),
    )


# -- TxnOffsetCommit ------------------------------------------------------------------------
def handle_txn_offset_commit(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(TXN_OFFSET_COMMIT, ctx.api_version)
    topic_cls = nested(cls, "TxnOffsetCommitResponseTopic")
    partition_cls = nested(cls, "TxnOffsetCommitResponsePartition")
    unknown: dict[TopicPartition, ErrorCode] = {}
    wanted: list[CommitRequest] = []
    refused: ErrorCode | None = None
    readable: set[str] | None = None
    if services.authorizer is not None:
        if not may_write_txn(services, ctx, request.transactional_id):
            refused = ErrorCode.transactional_id_authorization_failed
        elif not may_read_group(services, ctx, request.group_id):
            refused = ErrorCode.group_authorization_failed
        else:
            readable = authorized_names(
                services,
                ctx,
                AclOperation.READ,
                ResourceType.TOPIC,
                (t.name for t in request.topics),
            )
    for topic in request.topics:
        for p in topic.partitions:
            if refused is not None:
                unknown[(topic.name, p.partition_index)] = refused
            elif readable is not None and topic.name not in readable:
                unknown[(topic.name, p.partition_index)] = ErrorCode.topic_authorization_failed
            elif services.metadata.partition(topic.name, p.partition_index) is None:
                unknown[(topic.name, p.partition_index)] = ErrorCode.unknown_topic_or_partition
            else:
                wanted.append(
                    (
                        topic.name,
                        p.partition_index,
                        p.committed_offset,
                        getattr(p, "committed_leader_epoch", -1),
                        p.committed_metadata,
                    )
                )

    def respond(errors: dict[TopicPartition, ErrorCode]) -> Any:
        errors = {**errors, **unknown}
        return build(
            cls,
            throttle_time=NO_THROTTLE,
            topics=tuple(
                topic_cls(
                    name=t.name,
                    partitions=tuple(
                        partition_cls(
                            partition_index=p.partition_index,
                            error_code=client_error(ctx, errors[(t.name, p.partition_index)]),
                        )
                        for p in t.partitions
                    ),
                )
                for t in request.topics
            ),
        )

    group = coordinator(services)

    def commit(verified: ErrorCode) -> Any:
        if verified != ErrorCode.none:
            return respond({(o[0], o[1]): verified for o in wanted})
        if not wanted and (refused is not None or readable is not None):
            return respond({})  # as Kafka: nothing authorized, the coordinator is not asked
        result = group.offsets.commit_offsets(
            request.group_id,
            getattr(request, "generation_id", -1),
            getattr(request, "member_id", ""),
            getattr(request, "group_instance_id", None),
            wanted,
            producer=Producer(request.producer_id, request.producer_epoch),
        )
        return then(result, respond)

    # KIP-890 part 1, as Kafka 3.6+: the producer's first offsets in a transaction go to
    # the group's __consumer_offsets partition only if the transaction coordinator says
    # AddOffsetsToTxn put that partition in the ongoing transaction. The group
    # coordinator's own errors come first, unverified.
    offsets_partition = services.replicas.get(OFFSETS_TOPIC, group.partition_for(request.group_id))
    if (
        not wanted
        or not request.group_id
        or group.owner_error(request.group_id) is not None
        or offsets_partition is None
        or _in_transaction(offsets_partition, request, ctx.api_version)
    ):
        return commit(ErrorCode.none)
    if services.txn is None:
        return commit(ErrorCode.invalid_txn_state)
    # v5 is transaction protocol version 2 (KIP-890 part 2): no AddOffsetsToTxn comes, the
    # guard adds the partition to the transaction itself (Kafka's txnOffsetCommit request
    # version to "addPartition").
    add = ctx.api_version >= 5
    return later(_verify_offsets(services, request, offsets_partition, commit, add=add))


def _in_transaction(partition: Partition, request: Any, version: int) -> bool:
    """Whether the producer already has an ongoing transaction in the group's partition (no
    need to ask the coordinator). From v5 (transaction protocol version 2, whose epoch
    bumps at every end) only at the request's epoch, as Kafka 4's
    hasOngoingTransaction(producerId, producerEpoch): the previous transaction's marker may
    not be written yet when the next one's first offsets come."""
    state = partition.log.producer_state
    if version < 5:
        return state.has_ongoing_txn(request.producer_id)
    entry = state.producers.get(request.producer_id)
    return (
        entry is not None
        and entry.current_txn_first_offset >= 0
        and entry.producer_epoch == request.producer_epoch
    )


async def _verify_offsets(
    services: Services,
    request: Any,
    partition: Partition,
    commit: Callable[[ErrorCode], Any],
    *,
    add: bool = False,
) -> Any:
    """Ask the transaction coordinator about the TxnOffsetCommit's ``__consumer_offsets``
    partition (with ``add``, have it added to the transaction), then ``commit`` with what
    it answered."""
    assert services.txn is not None
    producer_id = request.producer_id
    state = partition.log.producer_state
    guard = state.begin_verification(producer_id)
    ask = (
        cast(_ImplicitAdd, services.txn).add_offset_partition
        if add
        else services.txn.verify_offset_commit
    )
    try:
        error = await ask(
            request.transactional_id,
            producer_id,
            request.producer_epoch,
            (partition.topic, partition.index),
        )
    except Exception:
        # The coordinator could not be asked: a retriable error, as Kafka answers then.
        logger.exception("Verifying the transaction of %r failed", request.transactional_id)
        error = ErrorCode.coordinator_load_in_progress
    if not state.end_verification(producer_id, guard) and error == ErrorCode.none:
        # The transaction ended (a marker came) while the coordinator was asked. Under
        # version 2 that is the previous transaction's marker, written while this one's
        # add was under way: the client retries, and the next attempt is verified afresh.
        error = ErrorCode.coordinator_load_in_progress if add else ErrorCode.invalid_txn_state
    # No await from here to the append: no marker can come in between.
    answer = commit(error)
    return await answer if isinstance(answer, asyncio.Future) else answer


# -- DescribeTransactions / ListTransactions ------------------------------------------------
def handle_describe(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(DESCRIBE_TRANSACTIONS, ctx.api_version)
    state_cls = nested(cls, "TransactionState")
    topic_cls = nested(cls, "TopicData")
    txn = transactions(services)
    described = []
    for transactional_id in request.transactional_ids:
        if not authorize(
            services, ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, transactional_id
        ):
            error: ErrorCode | None = ErrorCode.transactional_id_authorization_failed
            meta = None
        else:
            error = txn.owner_error(transactional_id)
            meta = txn.txns.get(transactional_id) if error is None else None
        if error is None and (meta is None or meta.producer_epoch < 0):
            error = ErrorCode.transactional_id_not_found
        if meta is None or error is not None:
            described.append(
                state_cls(
                    error_code=error,
                    transactional_id=transactional_id,
                    transaction_state="",
                    transaction_timeout=timedelta(0),
                    transaction_start_time=_time(-1),
                    producer_id=-1,
                    producer_epoch=-1,
                    topics=(),
                )
            )
            continue
        value = meta.value
        described.append(
            state_cls(
                error_code=ErrorCode.none,
                transactional_id=transactional_id,
                transaction_state=value.state.display,
                transaction_timeout=timedelta(milliseconds=value.timeout_ms),
                transaction_start_time=_time(value.start_ms),
                producer_id=value.producer_id,
                producer_epoch=value.producer_epoch,
                # Only the topics the request may DESCRIBE, as Kafka answers.
                topics=tuple(
                    topic_cls(topic=topic, partitions=parts)
                    for topic, parts in value.partitions
                    if authorize(services, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, topic)
                ),
            )
        )
    return build(cls, throttle_time=NO_THROTTLE, transaction_states=tuple(described))


def _time(ms: int) -> datetime:
    """kio's TZAware timestamps: -1 (none) is one millisecond before the epoch."""
    return datetime.fromtimestamp(0, UTC) + timedelta(milliseconds=ms)


def handle_list(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(LIST_TRANSACTIONS, ctx.api_version)
    listed_cls = nested(cls, "TransactionState")
    txn = transactions(services)
    states: set[TxnState] = set()
    unknown_states: list[str] = []
    for name in request.state_filters:
        state = TxnState.from_display(name)
        if state is None:
            unknown_states.append(name)
        else:
            states.add(state)
    producer_ids = set(request.producer_id_filters)
    duration_ms = getattr(request, "duration_filter", -1)
    pattern_text = getattr(request, "transactional_id_pattern", None)
    pattern: re2_pattern.Pattern | None = None
    error = ErrorCode.coordinator_load_in_progress if txn.loading() else ErrorCode.none
    if pattern_text and error == ErrorCode.none:
        pattern = transactional_id_pattern(pattern_text)
        if pattern is None:
            return build(
                cls,
                throttle_time=NO_THROTTLE,
                error_code=ErrorCode.invalid_regular_expression,
                unknown_state_filters=(),
                transaction_states=(),
            )
    now = services.now_ms()
    listed = []
    for meta in txn.txns.values():
        value = meta.value
        if value.producer_epoch < 0 or value.state == TxnState.DEAD:
            continue  # initialising, or being removed
        if states and value.state not in states:
            continue
        if producer_ids and value.producer_id not in producer_ids:
            continue
        if duration_ms >= 0 and now - value.start_ms <= duration_ms:
            continue
        if pattern is not None and not pattern.matches(meta.transactional_id):
            continue
        if not authorize(
            services,
            ctx,
            AclOperation.DESCRIBE,
            ResourceType.TRANSACTIONAL_ID,
            meta.transactional_id,
        ):
            continue
        listed.append(
            listed_cls(
                transactional_id=meta.transactional_id,
                producer_id=value.producer_id,
                transaction_state=value.state.display,
            )
        )
    return build(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=error,
        unknown_state_filters=tuple(unknown_states),
        transaction_states=tuple(listed),
    )


def transactional_id_pattern(text: str) -> re2_pattern.Pattern | None:
    """ListTransactions v2's TransactionalIdPattern (KIP-1152): an RE2/J regular expression
    the whole transactional id must match; None when it does not compile, which Kafka
    answers with INVALID_REGULAR_EXPRESSION."""
    return re2_pattern.compile(text)
