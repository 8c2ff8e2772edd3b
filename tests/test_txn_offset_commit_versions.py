"""TxnOffsetCommit v0-v5 against a real broker process whose group has a live member
(joined with JoinGroup/SyncGroup, heartbeating on its own connection throughout), and the
transaction protocol version 2 APIs (KIP-890 part 2) over raw frames: EndTxn v5's epoch
bump and its answers to retries, TxnOffsetCommit v5's implicit add of the group's
``__consumer_offsets`` partition, and ListTransactions v2's TransactionalIdPattern
(KIP-1152).

As Kafka's classic group checks a transactional commit (ClassicGroup.validateOffsetCommit
with isTransactional): v0-v2 carry no member fields and commit whatever the group's state;
v3+ member fields are checked when present (KIP-447): an unknown group instance id or
member id is UNKNOWN_MEMBER_ID, an instance id mapped to another member FENCED_INSTANCE_ID,
a wrong generation ILLEGAL_GENERATION; an empty member id with generation -1 and no
instance id is a commit without member fields, as v0-v2's."""

from __future__ import annotations

import asyncio
import datetime
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from compat_tests.broker import BrokerProcess
from compat_tests.process_pool import ProcessPool
from gregor.apis.context import build, nested
from gregor.apis.transactions import transactional_id_pattern
from gregor.coordinator.txn_records import TxnLogValue, TxnState, decode_value, encode_value
from gregor.coordinator.txn_state import (
    MAX_EPOCH,
    AlreadyEnded,
    NeedProducerId,
    Transition,
    TxnMetadata,
    complete_end,
    end_txn_v2,
)
from gregor.wire import versions as v
from gregor.wire.schema import request_type
from tests.kafka_wire import WireClient, create_topic
from tests.test_txn_coordinator_wire import add_partitions_v3

TOPIC = "tocv-in"
GROUP = "tocv-group"
INSTANCE = "tocv-instance"
RETRIABLE = (
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.not_coordinator,
    ErrorCode.coordinator_not_available,
    ErrorCode.concurrent_transactions,
)


def req(api: int, version: int, **fields: Any) -> Any:
    return build(request_type(api, version), **fields)


def ms(n: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=n)


@pytest.fixture(scope="module")
def broker(process_pool: ProcessPool) -> BrokerProcess:
    b = process_pool.broker(
        {
            "transaction.state.log.num.partitions": "1",
            "offsets.topic.num.partitions": "1",
            "group.initial.rebalance.delay.ms": "0",
        }
    )
    c = WireClient(b.port)
    assert create_topic(c, TOPIC, 2).error_code == ErrorCode.none
    c.close()
    return b


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[WireClient]:
    c = WireClient(broker.port)
    yield c
    c.close()


def retried(call: Any, timeout: float = 30.0) -> Any:
    """``call()`` again while it answers a retriable coordinator error."""
    deadline = time.monotonic() + timeout
    while True:
        answer = call()
        error = answer if isinstance(answer, ErrorCode) else answer.error_code
        if error not in RETRIABLE or time.monotonic() > deadline:
            return answer
        time.sleep(0.05)


def find(client: WireClient, key_type: int, key: str) -> None:
    found = retried(
        lambda: client.call(
            v.FIND_COORDINATOR,
            4,
            req(v.FIND_COORDINATOR, 4, key_type=key_type, coordinator_keys=(key,)),
        ).coordinators[0]
    )
    assert found.error_code == ErrorCode.none


def init(client: WireClient, txn_id: str) -> tuple[int, int]:
    find(client, 1, txn_id)
    r = retried(
        lambda: client.call(
            v.INIT_PRODUCER_ID,
            4,
            req(
                v.INIT_PRODUCER_ID,
                4,
                transactional_id=txn_id,
                transaction_timeout=ms(60_000),
                producer_id=-1,
                producer_epoch=-1,
            ),
        )
    )
    assert r.error_code == ErrorCode.none
    return r.producer_id, r.producer_epoch


def add_offsets(client: WireClient, txn_id: str, pid: int, epoch: int, group: str) -> ErrorCode:
    return retried(
        lambda: (
            client.call(
                v.ADD_OFFSETS_TO_TXN,
                3,
                req(
                    v.ADD_OFFSETS_TO_TXN,
                    3,
                    transactional_id=txn_id,
                    producer_id=pid,
                    producer_epoch=epoch,
                    group_id=group,
                ),
            ).error_code
        )
    )


def end_txn(
    client: WireClient, txn_id: str, pid: int, epoch: int, commit: bool, version: int = 3
) -> Any:
    return client.call(
        v.END_TXN,
        version,
        req(
            v.END_TXN,
            version,
            transactional_id=txn_id,
            producer_id=pid,
            producer_epoch=epoch,
            committed=commit,
        ),
    )


def txn_commit(
    client: WireClient,
    version: int,
    txn_id: str,
    pid: int,
    epoch: int,
    offset: int,
    *,
    group: str = GROUP,
    member_id: str = "",
    generation: int = -1,
    instance_id: str | None = None,
) -> ErrorCode:
    """TxnOffsetCommit of partition 0 of TOPIC at ``version``; its error."""
    cls = request_type(v.TXN_OFFSET_COMMIT, version)
    topic_cls = nested(cls, "TxnOffsetCommitRequestTopic")
    partition_cls = nested(cls, "TxnOffsetCommitRequestPartition")
    partition = build(
        partition_cls,
        partition_index=0,
        committed_offset=offset,
        committed_leader_epoch=-1,
        committed_metadata="",
    )
    r = client.call(
        v.TXN_OFFSET_COMMIT,
        version,
        build(
            cls,
            transactional_id=txn_id,
            group_id=group,
            producer_id=pid,
            producer_epoch=epoch,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=instance_id,
            topics=(topic_cls(name=TOPIC, partitions=(partition,)),),
        ),
    )
    return r.topics[0].partitions[0].error_code


def stable_offset(client: WireClient, group: str = GROUP) -> int:
    """The group's committed offset of partition 0 once no transaction holds it."""
    cls = request_type(v.OFFSET_FETCH, 8)
    topic = nested(cls, "OffsetFetchRequestTopics")(name=TOPIC, partition_indexes=(0,))
    request = cls(
        groups=(nested(cls, "OffsetFetchRequestGroup")(group_id=group, topics=(topic,)),),
        require_stable=True,
    )
    deadline = time.monotonic() + 30
    while True:
        p = client.call(v.OFFSET_FETCH, 8, request).groups[0].topics[0].partitions[0]
        if p.error_code == ErrorCode.none:
            return p.committed_offset
        assert p.error_code == ErrorCode.unstable_offset_commit, p.error_code
        assert time.monotonic() < deadline
        time.sleep(0.05)


class LiveGroup:
    """A static member (group instance id INSTANCE) joined with JoinGroup v5 and SyncGroup
    v3, heartbeating every 200 ms on its own connection until closed; every heartbeat must
    answer NONE (the member stays in the group, the group Stable)."""

    def __init__(self, port: int, group: str) -> None:
        self.group = group
        self._client = WireClient(port)
        find(self._client, 0, group)
        protocol = nested(request_type(v.JOIN_GROUP, 5), "JoinGroupRequestProtocol")(
            name="range", metadata=b"\x00\x00"
        )
        joined = retried(
            lambda: self._client.call(
                v.JOIN_GROUP,
                5,
                req(
                    v.JOIN_GROUP,
                    5,
                    group_id=group,
                    session_timeout=ms(6_000),
                    rebalance_timeout=ms(6_000),
                    member_id="",
                    group_instance_id=INSTANCE,
                    protocol_type="consumer",
                    protocols=(protocol,),
                ),
            )
        )
        assert joined.error_code == ErrorCode.none
        self.member_id, self.generation = joined.member_id, joined.generation_id
        sync_cls = request_type(v.SYNC_GROUP, 3)
        assignment = nested(sync_cls, "SyncGroupRequestAssignment")(
            member_id=self.member_id, assignment=b""
        )
        synced = self._client.call(
            v.SYNC_GROUP,
            3,
            req(
                v.SYNC_GROUP,
                3,
                group_id=group,
                generation_id=self.generation,
                member_id=self.member_id,
                group_instance_id=INSTANCE,
                assignments=(assignment,),
            ),
        )
        assert synced.error_code == ErrorCode.none
        self.beats: list[ErrorCode] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._heartbeat, daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        request = req(
            v.HEARTBEAT,
            4,
            group_id=self.group,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=INSTANCE,
        )
        self.beats.append(self._client.call(v.HEARTBEAT, 4, request).error_code)

    def _heartbeat(self) -> None:
        while not self._stop.wait(0.2):
            self._beat()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._beat()  # the member is still in its generation after every commit
        self._client.close()
        assert self.beats and set(self.beats) == {ErrorCode.none}, self.beats


@pytest.fixture(scope="module")
def group(broker: BrokerProcess) -> Iterator[LiveGroup]:
    g = LiveGroup(broker.port, GROUP)
    yield g
    g.close()


def describe_group(client: WireClient) -> Any:
    return client.call(
        v.DESCRIBE_GROUPS,
        5,
        req(v.DESCRIBE_GROUPS, 5, groups=(GROUP,), include_authorized_operations=False),
    ).groups[0]


def begin(client: WireClient, txn_id: str, version: int) -> tuple[int, int]:
    """InitProducerId, and (before v5, which adds the partition itself) AddOffsetsToTxn."""
    pid, epoch = init(client, txn_id)
    if version < 5:
        assert add_offsets(client, txn_id, pid, epoch, GROUP) == ErrorCode.none
    return pid, epoch


def finish(client: WireClient, txn_id: str, pid: int, epoch: int, version: int) -> None:
    """Commit: EndTxn v5 for a v5 (transaction protocol version 2) producer, else v3."""
    end_version = 5 if version >= 5 else 3
    r = retried(lambda: end_txn(client, txn_id, pid, epoch, True, end_version))
    assert r.error_code == ErrorCode.none
    if end_version == 5:
        assert (r.producer_id, r.producer_epoch) == (pid, epoch + 1)


# -- TxnOffsetCommit at every version with a live member -------------------------------------
@pytest.mark.parametrize("version", range(0, 6))
def test_commit_without_member_fields_while_the_group_has_a_live_member(
    client: WireClient, group: LiveGroup, version: int
) -> None:
    """The issue: v0-v2 (no member fields) answered UNKNOWN_MEMBER_ID while the group had
    members. They, and v3+ without member fields, commit."""
    assert describe_group(client).group_state == "Stable"
    txn_id = f"tocv-bare-{version}"
    pid, epoch = begin(client, txn_id, version)
    offset = 100 + version
    assert txn_commit(client, version, txn_id, pid, epoch, offset) == ErrorCode.none
    finish(client, txn_id, pid, epoch, version)
    assert stable_offset(client) == offset
    described = describe_group(client)
    assert described.group_state == "Stable"
    assert [m.member_id for m in described.members] == [group.member_id]


@pytest.mark.parametrize("version", range(3, 6))
def test_commit_with_the_members_fields(client: WireClient, group: LiveGroup, version: int) -> None:
    txn_id = f"tocv-member-{version}"
    pid, epoch = begin(client, txn_id, version)
    offset = 200 + version
    for instance in (None, INSTANCE):
        error = txn_commit(
            client,
            version,
            txn_id,
            pid,
            epoch,
            offset,
            member_id=group.member_id,
            generation=group.generation,
            instance_id=instance,
        )
        assert error == ErrorCode.none
    finish(client, txn_id, pid, epoch, version)
    assert stable_offset(client) == offset


@pytest.mark.parametrize("version", range(3, 6))
def test_wrong_member_fields_get_kafkas_errors(
    client: WireClient, group: LiveGroup, version: int
) -> None:
    txn_id = f"tocv-wrong-{version}"
    pid, epoch = begin(client, txn_id, version)
    if version >= 5:
        # v5 adds the offsets partition on its first commit; the checks below come first
        # (the group coordinator's own errors are answered unverified), so add it here.
        assert txn_commit(client, version, txn_id, pid, epoch, 1) == ErrorCode.none
    cases = [
        # (member id, generation, group instance id) -> error
        (("no-such-member", group.generation, None), ErrorCode.unknown_member_id),
        ((group.member_id, group.generation + 1, None), ErrorCode.illegal_generation),
        ((group.member_id, group.generation - 1, None), ErrorCode.illegal_generation),
        (("no-such-member", group.generation, INSTANCE), ErrorCode.fenced_instance_id),
        (("", -1, INSTANCE), ErrorCode.fenced_instance_id),
        ((group.member_id, group.generation, "no-such-instance"), ErrorCode.unknown_member_id),
        (("", group.generation, None), ErrorCode.unknown_member_id),
        ((group.member_id, -1, None), ErrorCode.illegal_generation),
    ]
    for (member_id, generation, instance), expected in cases:
        error = txn_commit(
            client,
            version,
            txn_id,
            pid,
            epoch,
            999,
            member_id=member_id,
            generation=generation,
            instance_id=instance,
        )
        assert error == expected, (member_id, generation, instance)
    assert end_txn(client, txn_id, pid, epoch, False, 5 if version >= 5 else 3).error_code == (
        ErrorCode.none
    )
    assert describe_group(client).group_state == "Stable"


# -- EndTxn v5 (transaction protocol version 2) ------------------------------------------------
def test_end_txn_v5_bumps_the_epoch_and_answers_retries(client: WireClient) -> None:
    """Kafka's endTransaction under TV2: PrepareX at epoch + 1, the new epoch answered; a
    retry with the epoch before the bump answers NONE (or CONCURRENT_TRANSACTIONS while the
    markers are written); the same end again at the new epoch is INVALID_TXN_STATE; an
    abort with nothing open bumps the epoch again; older epochs are fenced."""
    txn_id = "tocv-end-v5"
    pid, e = init(client, txn_id)
    tp = (TOPIC, 1)
    assert add_partitions_v3(client, txn_id, pid, e, [(TOPIC, [1])]) == {tp: ErrorCode.none}
    r = end_txn(client, txn_id, pid, e, True, 5)
    assert (r.error_code, r.producer_id, r.producer_epoch) == (ErrorCode.none, pid, e + 1)
    retry = retried(lambda: end_txn(client, txn_id, pid, e, True, 5))
    assert (retry.error_code, retry.producer_id, retry.producer_epoch) == (
        ErrorCode.none,
        pid,
        e + 1,
    )
    # The retry of a commit as an abort, and a second commit at the new epoch: invalid.
    assert end_txn(client, txn_id, pid, e, False, 5).error_code == ErrorCode.invalid_txn_state
    again = end_txn(client, txn_id, pid, e + 1, True, 5)
    assert (again.error_code, again.producer_id, again.producer_epoch) == (
        ErrorCode.invalid_txn_state,
        -1,
        -1,
    )
    # An abort with no transaction open (CompleteCommit): the epoch bumps again.
    aborted = end_txn(client, txn_id, pid, e + 1, False, 5)
    assert (aborted.error_code, aborted.producer_epoch) == (ErrorCode.none, e + 2)
    retry = retried(lambda: end_txn(client, txn_id, pid, e + 1, False, 5))
    assert (retry.error_code, retry.producer_epoch) == (ErrorCode.none, e + 2)
    assert end_txn(client, txn_id, pid, e + 1, True, 5).error_code == ErrorCode.invalid_txn_state
    assert end_txn(client, txn_id, pid, e, False, 5).error_code == ErrorCode.producer_fenced
    assert end_txn(client, txn_id, pid, e + 3, False, 5).error_code == ErrorCode.producer_fenced
    assert end_txn(client, txn_id, pid + 1, e + 2, False, 5).error_code == (
        ErrorCode.invalid_producer_id_mapping
    )
    # The next transaction runs at the bumped epoch; the old one is fenced.
    assert add_partitions_v3(client, txn_id, pid, e + 1, [(TOPIC, [1])]) == {
        tp: ErrorCode.producer_fenced
    }
    assert retried(lambda: add_partitions_v3(client, txn_id, pid, e + 2, [(TOPIC, [1])])[tp]) == (
        ErrorCode.none
    )
    r = end_txn(client, txn_id, pid, e + 2, False, 5)
    assert (r.error_code, r.producer_epoch) == (ErrorCode.none, e + 3)
    state = retried(
        lambda: client.call(
            v.DESCRIBE_TRANSACTIONS,
            0,
            req(v.DESCRIBE_TRANSACTIONS, 0, transactional_ids=(txn_id,)),
        ).transaction_states[0]
    )
    assert (state.producer_id, state.producer_epoch) == (pid, e + 3)


def test_end_txn_v5_on_an_empty_transactional_id(client: WireClient) -> None:
    txn_id = "tocv-end-empty"
    pid, e = init(client, txn_id)
    commit = end_txn(client, txn_id, pid, e, True, 5)
    assert (commit.error_code, commit.producer_id, commit.producer_epoch) == (
        ErrorCode.invalid_txn_state,
        -1,
        -1,
    )
    abort = end_txn(client, txn_id, pid, e, False, 5)
    assert (abort.error_code, abort.producer_id, abort.producer_epoch) == (
        ErrorCode.none,
        pid,
        e + 1,
    )
    # Version 1's EndTxn at the new epoch: its CompleteAbort answers a repeated abort.
    assert retried(lambda: end_txn(client, txn_id, pid, e + 1, False, 3)).error_code == (
        ErrorCode.none
    )


def test_txn_offset_commit_v5_adds_the_offsets_partition(
    client: WireClient, group: LiveGroup
) -> None:
    """No AddOffsetsToTxn: TxnOffsetCommit v5 puts the group's partition in the
    transaction (an abort drops the offsets, a commit shows them), while v4 without it is
    still refused (INVALID_TXN_STATE, KIP-890 part 1)."""
    txn_id = "tocv-implicit"
    pid, e = init(client, txn_id)
    before = stable_offset(client)
    assert txn_commit(client, 4, txn_id, pid, e, 7) == ErrorCode.invalid_txn_state
    assert txn_commit(client, 5, txn_id, pid, e, 7) == ErrorCode.none
    state = client.call(
        v.DESCRIBE_TRANSACTIONS, 0, req(v.DESCRIBE_TRANSACTIONS, 0, transactional_ids=(txn_id,))
    ).transaction_states[0]
    assert (state.transaction_state, [t.topic for t in state.topics]) == (
        "Ongoing",
        ["__consumer_offsets"],
    )
    r = end_txn(client, txn_id, pid, e, False, 5)
    assert (r.error_code, r.producer_epoch) == (ErrorCode.none, e + 1)
    assert stable_offset(client) == before
    # A stale epoch is fenced (the coordinator's PRODUCER_FENCED, as on a produce).
    assert retried(lambda: txn_commit(client, 5, txn_id, pid, e, 8)) == (
        ErrorCode.invalid_producer_epoch
    )
    assert retried(lambda: txn_commit(client, 5, txn_id, pid, e + 1, 8)) == ErrorCode.none
    r = end_txn(client, txn_id, pid, e + 1, True, 5)
    assert (r.error_code, r.producer_epoch) == (ErrorCode.none, e + 2)
    assert stable_offset(client) == 8


# -- ListTransactions v2 -----------------------------------------------------------------------
def list_v2(client: WireClient, pattern: str | None, version: int = 2, **filters: Any) -> Any:
    return retried(
        lambda: client.call(
            v.LIST_TRANSACTIONS,
            version,
            req(
                v.LIST_TRANSACTIONS,
                version,
                state_filters=filters.get("states", ()),
                producer_id_filters=filters.get("pids", ()),
                duration_filter=-1,
                transactional_id_pattern=pattern,
            ),
        )
    )


def test_list_transactions_v2_filters_by_pattern(client: WireClient) -> None:
    ids = ["lt2-a", "lt2-b", "x-lt2-c"]
    pids = {txn_id: init(client, txn_id)[0] for txn_id in ids}

    def listed(pattern: str | None, version: int = 2, **filters: Any) -> list[str]:
        r = list_v2(client, pattern, version, **filters)
        assert r.error_code == ErrorCode.none
        return sorted(t.transactional_id for t in r.transaction_states if t.transactional_id in ids)

    assert listed("lt2-.*") == ["lt2-a", "lt2-b"]
    assert listed(".*lt2-[b-z]") == ["lt2-b", "x-lt2-c"]
    assert listed("lt2") == []  # the whole id must match
    assert listed("lt2-a|x-.*") == ["lt2-a", "x-lt2-c"]
    assert listed(None) == listed("") == ids  # no pattern, no filter
    assert listed("lt2-.*", states=("Ongoing",)) == []
    assert listed(".*", pids=(pids["lt2-b"],)) == ["lt2-b"]
    assert listed("lt2-.*", version=1) == ids  # v1 has no pattern field
    for bad in ("lt2-(unclosed", "(?=lt2)lt2-a", "(lt2)-\\1"):
        r = list_v2(client, bad)
        assert (r.error_code, r.transaction_states) == (ErrorCode.invalid_regular_expression, ())


def test_pattern_syntax() -> None:
    assert transactional_id_pattern("[a-z]+-\\d{2}") is not None
    assert transactional_id_pattern("a\\++") is not None  # an escaped +, quantified
    for bad in ("(", "a**", "(?!x)", "(?<=x)y", "(?>x)", "x++", "x{2}+", "(a)\\1"):
        assert transactional_id_pattern(bad) is None, bad


# -- the epoch overflow, on the state machine ------------------------------------------------
def test_end_txn_v5_rotates_the_producer_id_when_the_epoch_overflows() -> None:
    """Kafka's TV2 overflow: the end at epoch Short.MAX_VALUE - 1 prepares at MAX with the
    next producer id, completes with that id at epoch 0, and a retry naming the old id at
    MAX - 1 answers the new id and epoch."""
    value = TxnLogValue(
        producer_id=10,
        producer_epoch=MAX_EPOCH - 1,
        timeout_ms=60_000,
        state=TxnState.ONGOING,
        partitions=(("t", (0,)),),
        last_update_ms=1,
        start_ms=1,
    )
    meta = TxnMetadata("overflow", value)
    assert isinstance(end_txn_v2(meta, 10, MAX_EPOCH - 1, True, 5), NeedProducerId)
    prepared = end_txn_v2(meta, 10, MAX_EPOCH - 1, True, 5, next_producer_id=11)
    assert isinstance(prepared, Transition)
    assert (prepared.value.producer_id, prepared.value.producer_epoch) == (10, MAX_EPOCH)
    assert (prepared.value.next_producer_id, prepared.value.client_transaction_version) == (
        11,
        2,
    )
    # Written as TransactionLogValue v1, its tagged fields read back.
    assert decode_value(encode_value(prepared.value)) == prepared.value
    meta.begin(prepared)
    meta.complete()
    # While the markers are written: a retry waits, the new id waits too.
    assert end_txn_v2(meta, 10, MAX_EPOCH - 1, True, 6) == ErrorCode.concurrent_transactions
    assert end_txn_v2(meta, 11, 0, False, 6) == ErrorCode.concurrent_transactions
    completed = complete_end(meta, 7)
    assert (completed.value.producer_id, completed.value.producer_epoch) == (11, 0)
    assert (completed.value.previous_producer_id, completed.value.next_producer_id) == (10, -1)
    meta.begin(completed)
    meta.complete()
    assert end_txn_v2(meta, 10, MAX_EPOCH - 1, True, 8) == AlreadyEnded(11, 0)
    assert end_txn_v2(meta, 10, MAX_EPOCH - 1, False, 8) == ErrorCode.invalid_txn_state
    assert end_txn_v2(meta, 10, MAX_EPOCH - 2, True, 8) == ErrorCode.invalid_producer_id_mapping
    # The next end under the new id bumps it as usual.
    nxt = end_txn_v2(meta, 11, 0, False, 9)
    assert isinstance(nxt, Transition)
    assert (nxt.value.producer_id, nxt.value.producer_epoch, nxt.value.next_producer_id) == (
        11,
        1,
        -1,
    )


def test_version_1_values_stay_version_0() -> None:
    value = TxnLogValue(3, 4, 1000, TxnState.EMPTY, (), 1, -1)
    assert encode_value(value)[:2] == b"\x00\x00"
    assert encode_value(replace(value, client_transaction_version=2))[:2] == b"\x00\x01"


# -- the implicit add through another broker's coordinator -----------------------------------
class _ElsewhereCoordinator:
    """A transaction coordinator that does not own the id (another broker does)."""

    def partition_for(self, transactional_id: str) -> int:
        return 0

    def owner_error(self, transactional_id: str) -> ErrorCode | None:
        return ErrorCode.not_coordinator


def test_implicit_add_asks_the_owning_broker_with_add_partitions_to_txn() -> None:
    """In a cluster the group coordinator sends AddPartitionsToTxn v4 without verify_only
    (Kafka's coordinator takes v4+ for transaction version 2) to the id's coordinator and
    answers its partition error as a TxnOffsetCommit does."""
    from kio.schema.add_partitions_to_txn.v4 import response as r4

    from gregor.coordinator.txn_verifier import CoordinatorVerifier

    sent: list[Any] = []
    answers = iter([ErrorCode.none, ErrorCode.producer_fenced, ErrorCode.concurrent_transactions])

    async def send(node: int, request: Any) -> Any:
        sent.append((node, request))
        return r4.AddPartitionsToTxnResponse(
            throttle_time=ms(0),
            error_code=ErrorCode.none,
            results_by_transaction=(
                r4.AddPartitionsToTxnResult(
                    transactional_id="t",
                    topic_results=(
                        r4.AddPartitionsToTxnTopicResult(
                            name="__consumer_offsets",
                            results_by_partition=(
                                r4.AddPartitionsToTxnPartitionResult(
                                    partition_index=3, partition_error_code=next(answers)
                                ),
                            ),
                        ),
                    ),
                ),
            ),
        )

    verifier = CoordinatorVerifier(_ElsewhereCoordinator(), 0, lambda index: 1, send)  # type: ignore[arg-type]
    partition = ("__consumer_offsets", 3)
    results = [asyncio.run(verifier.add_offset_partition("t", 5, 2, partition)) for _ in range(3)]
    assert results == [
        ErrorCode.none,
        ErrorCode.invalid_producer_epoch,
        ErrorCode.coordinator_load_in_progress,
    ]
    node, request = sent[0]
    (txn,) = request.transactions
    assert (node, request.__version__, txn.verify_only) == (1, 4, False)
    assert (txn.transactional_id, txn.producer_id, txn.producer_epoch) == ("t", 5, 2)
    assert [(t.name, t.partitions) for t in txn.topics] == [("__consumer_offsets", (3,))]


def test_back_to_back_version_2_transactions(client: WireClient, group: LiveGroup) -> None:
    """A TV2 producer starts its next transaction as soon as EndTxn v5 answers, while the
    previous one's markers may still be under way: its first TxnOffsetCommit v5 at the new
    epoch is retried (a retriable error) until it is in, never appended to the old one."""
    txn_id = "tocv-back-to-back"
    pid, epoch = init(client, txn_id)
    for n in range(1, 8):
        first = retried(lambda e=epoch, n=n: txn_commit(client, 5, txn_id, pid, e, 300 + n))
        assert first == ErrorCode.none
        r = end_txn(client, txn_id, pid, epoch, commit=n % 3 != 0, version=5)
        assert (r.error_code, r.producer_id, r.producer_epoch) == (ErrorCode.none, pid, epoch + 1)
        epoch = r.producer_epoch
    assert stable_offset(client) == 307
