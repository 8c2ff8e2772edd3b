"""TxnOffsetCommit in the group coordinator: Kafka's rule that a transaction's offset,
once committed, does not overwrite a commit of the partition written after it (unit tests
of the replay), and against a real broker: OffsetFetch's require_stable answering
UNSTABLE_OFFSET_COMMIT while a transaction holds offsets, and the offsets refused when the
group's partition is not in the transaction (KIP-890 part 1's verification)."""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from compat_tests.broker import BrokerProcess
from compat_tests.process_pool import ProcessPool
from gregor.apis.context import build, nested
from gregor.coordinator.group import Group
from gregor.coordinator.records import OffsetValue
from gregor.coordinator.runtime import TxnOffsets, complete_txn_offsets, replay_offsets
from gregor.wire import versions as v
from gregor.wire.schema import request_type
from tests.kafka_wire import WireClient, create_topic
from tests.test_txn_coordinator_wire import add_partitions_v3, init

TP = ("in", 0)


def offset(n: int) -> OffsetValue:
    return OffsetValue(n, -1, "", 0)


def committed(groups: dict[str, Group], group_id: str = "g") -> int | None:
    value = groups[group_id].offsets.get(TP) if group_id in groups else None
    return None if value is None else value.offset


# -- the replay rule ------------------------------------------------------------------------
def test_a_committed_transaction_offset_applies() -> None:
    groups: dict[str, Group] = {}
    txns: dict[int, TxnOffsets] = {7: {("g", TP): (0, offset(10))}}
    complete_txn_offsets(groups, txns, 7, commit=True)
    assert committed(groups) == 10
    assert txns == {}


def test_an_aborted_transaction_offset_is_dropped() -> None:
    groups: dict[str, Group] = {}
    replay_offsets(groups, "g", ((TP, offset(3)),))
    txns: dict[int, TxnOffsets] = {7: {("g", TP): (0, offset(10))}}
    complete_txn_offsets(groups, txns, 7, commit=False)
    assert committed(groups) == 3


def test_a_plain_commit_written_after_the_transaction_offset_wins() -> None:
    groups: dict[str, Group] = {}
    txns: dict[int, TxnOffsets] = {7: {("g", TP): (0, offset(10))}}
    replay_offsets(groups, "g", ((TP, offset(20)),), txns)
    assert committed(groups) == 20
    complete_txn_offsets(groups, txns, 7, commit=True)
    assert committed(groups) == 20


def test_a_transaction_offset_written_after_a_plain_commit_wins() -> None:
    groups: dict[str, Group] = {}
    replay_offsets(groups, "g", ((TP, offset(20)),), {})
    txns: dict[int, TxnOffsets] = {7: {("g", TP): (0, offset(10))}}
    complete_txn_offsets(groups, txns, 7, commit=True)
    assert committed(groups) == 10


def test_a_deleted_offset_takes_the_pending_ones_along() -> None:
    groups: dict[str, Group] = {}
    txns: dict[int, TxnOffsets] = {
        7: {("g", TP): (0, offset(10)), ("g", ("in", 1)): (1, offset(5))}
    }
    replay_offsets(groups, "g", ((TP, None),), txns)
    assert txns == {7: {("g", ("in", 1)): (1, offset(5))}}
    complete_txn_offsets(groups, txns, 7, commit=True)
    assert committed(groups) is None
    assert groups["g"].offsets[("in", 1)].offset == 5


def test_between_transactions_the_later_written_offset_stands() -> None:
    """Producer 8 wrote after producer 7 but committed first: 7's later commit of an
    older record does not overwrite it; the other way round it would."""
    groups: dict[str, Group] = {}
    txns: dict[int, TxnOffsets] = {7: {("g", TP): (0, offset(10))}, 8: {("g", TP): (1, offset(30))}}
    complete_txn_offsets(groups, txns, 8, commit=True)
    complete_txn_offsets(groups, txns, 7, commit=True)
    assert committed(groups) == 30
    groups = {}
    txns = {7: {("g", TP): (0, offset(10))}, 8: {("g", TP): (1, offset(30))}}
    complete_txn_offsets(groups, txns, 7, commit=True)
    assert committed(groups) == 10
    complete_txn_offsets(groups, txns, 8, commit=True)
    assert committed(groups) == 30


# -- require_stable against a broker ---------------------------------------------------------
def ms(n: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=n)


def req(api: int, version: int, **fields: Any) -> Any:
    return build(request_type(api, version), **fields)


@pytest.fixture(scope="module")
def broker(process_pool: ProcessPool) -> BrokerProcess:
    b = process_pool.broker(
        {"transaction.state.log.num.partitions": "1", "offsets.topic.num.partitions": "1"}
    )
    c = WireClient(b.port)
    assert create_topic(c, TP[0], 2).error_code == ErrorCode.none
    c.close()
    return b


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[WireClient]:
    c = WireClient(broker.port)
    yield c
    c.close()


def begin(
    client: WireClient, txn_id: str, group_id: str, add_offsets: bool = True
) -> tuple[int, int]:
    """InitProducerId, then (with ``add_offsets``) AddOffsetsToTxn for the group:
    (producer id, epoch)."""
    for key_type, key in ((1, txn_id), (0, group_id)):
        found = client.call(
            v.FIND_COORDINATOR,
            4,
            req(v.FIND_COORDINATOR, 4, key_type=key_type, coordinator_keys=(key,)),
        ).coordinators[0]
        assert found.error_code == ErrorCode.none
    r = init(client, txn_id)
    assert r.error_code == ErrorCode.none
    if add_offsets:
        add_offsets_to_txn(client, txn_id, group_id, r.producer_id, r.producer_epoch)
    return r.producer_id, r.producer_epoch


def add_offsets_to_txn(
    client: WireClient, txn_id: str, group_id: str, pid: int, epoch: int
) -> None:
    """AddOffsetsToTxn, retried while the previous transaction completes."""
    deadline = time.monotonic() + 30
    while True:
        error = client.call(
            v.ADD_OFFSETS_TO_TXN,
            3,
            req(
                v.ADD_OFFSETS_TO_TXN,
                3,
                transactional_id=txn_id,
                producer_id=pid,
                producer_epoch=epoch,
                group_id=group_id,
            ),
        ).error_code
        if error != ErrorCode.concurrent_transactions:
            break
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert error == ErrorCode.none


def txn_offset_commit(
    client: WireClient,
    txn_id: str,
    group_id: str,
    pid: int,
    epoch: int,
    *committed: int,
    topic: str = TP[0],
) -> ErrorCode:
    """Offsets ``committed`` for partitions 0, 1, ... of ``topic``; the first error."""
    cls = request_type(v.TXN_OFFSET_COMMIT, 3)
    topic_cls = nested(cls, "TxnOffsetCommitRequestTopic")
    partition_cls = nested(cls, "TxnOffsetCommitRequestPartition")
    r = client.call(
        v.TXN_OFFSET_COMMIT,
        3,
        cls(
            transactional_id=txn_id,
            group_id=group_id,
            producer_id=pid,
            producer_epoch=epoch,
            topics=(
                topic_cls(
                    name=topic,
                    partitions=tuple(
                        partition_cls(
                            partition_index=index,
                            committed_offset=value,
                            committed_leader_epoch=-1,
                            committed_metadata="",
                        )
                        for index, value in enumerate(committed)
                    ),
                ),
            ),
        ),
    )
    errors = [p.error_code for p in r.topics[0].partitions if p.error_code != ErrorCode.none]
    return errors[0] if errors else ErrorCode.none


def fetch(client: WireClient, group_id: str, version: int, require_stable: bool) -> Any:
    """OffsetFetch of TP: (error, committed offset)."""
    cls = request_type(v.OFFSET_FETCH, version)
    if version < 8:
        topic = nested(cls, "OffsetFetchRequestTopic")(name=TP[0], partition_indexes=(TP[1],))
        r = client.call(
            v.OFFSET_FETCH,
            version,
            cls(group_id=group_id, topics=(topic,), require_stable=require_stable),
        )
        p = r.topics[0].partitions[0]
    else:
        topic = nested(cls, "OffsetFetchRequestTopics")(name=TP[0], partition_indexes=(TP[1],))
        group = nested(cls, "OffsetFetchRequestGroup")(group_id=group_id, topics=(topic,))
        r = client.call(
            v.OFFSET_FETCH, version, cls(groups=(group,), require_stable=require_stable)
        )
        p = r.groups[0].topics[0].partitions[0]
    return p.error_code, p.committed_offset


@pytest.mark.parametrize("version", [7, 8])
def test_require_stable_while_a_transaction_holds_offsets(client: WireClient, version: int) -> None:
    txn_id, group_id = f"stable-{version}", f"stable-group-{version}"
    pid, epoch = begin(client, txn_id, group_id)
    assert fetch(client, group_id, version, require_stable=True) == (ErrorCode.none, -1)
    assert txn_offset_commit(client, txn_id, group_id, pid, epoch, 42) == ErrorCode.none
    assert fetch(client, group_id, version, require_stable=True) == (
        ErrorCode.unstable_offset_commit,
        -1,
    )
    # Without require_stable: the committed offset, which the transaction has not changed.
    assert fetch(client, group_id, version, require_stable=False) == (ErrorCode.none, -1)


def end_txn(client: WireClient, txn_id: str, pid: int, epoch: int, commit: bool) -> ErrorCode:
    return client.call(
        v.END_TXN,
        3,
        req(
            v.END_TXN,
            3,
            transactional_id=txn_id,
            producer_id=pid,
            producer_epoch=epoch,
            committed=commit,
        ),
    ).error_code


def wait_stable(client: WireClient, group_id: str) -> int:
    """The group's committed offset of TP once no transaction holds it."""
    deadline = time.monotonic() + 30
    while True:
        error, committed = fetch(client, group_id, 8, require_stable=True)
        if error == ErrorCode.none:
            return committed
        assert error == ErrorCode.unstable_offset_commit and time.monotonic() < deadline
        time.sleep(0.05)


def test_offsets_of_a_partition_not_in_the_transaction_are_refused(client: WireClient) -> None:
    """KIP-890 part 1 (Kafka 3.6+): without AddOffsetsToTxn the group's __consumer_offsets
    partition is not in the transaction, so the coordinator verifies and refuses the
    offsets, and committing the transaction does not make them visible. The next
    transaction, with AddOffsetsToTxn, commits its offsets as before."""
    txn_id, group_id = "unverified", "unverified-group"
    pid, epoch = begin(client, txn_id, group_id, add_offsets=False)
    # The transaction is ongoing with TP but without the offsets partition.
    assert add_partitions_v3(client, txn_id, pid, epoch, [(TP[0], [TP[1]])]) == {TP: ErrorCode.none}
    assert (
        txn_offset_commit(client, txn_id, group_id, pid, epoch, 42) == ErrorCode.invalid_txn_state
    )
    # A stale or future epoch is the coordinator's fencing, as a produce is answered.
    assert (
        txn_offset_commit(client, txn_id, group_id, pid, epoch + 1, 42)
        == ErrorCode.invalid_producer_epoch
    )
    assert fetch(client, group_id, 8, require_stable=True) == (ErrorCode.none, -1)
    assert end_txn(client, txn_id, pid, epoch, commit=True) == ErrorCode.none
    assert wait_stable(client, group_id) == -1

    add_offsets_to_txn(client, txn_id, group_id, pid, epoch)
    assert txn_offset_commit(client, txn_id, group_id, pid, epoch, 42) == ErrorCode.none
    assert end_txn(client, txn_id, pid, epoch, commit=True) == ErrorCode.none
    assert wait_stable(client, group_id) == 42


def test_two_offset_commits_in_one_transaction_survive_a_crash(broker: BrokerProcess) -> None:
    """The coordinator writes each TxnOffsetCommit at base sequence 0, as Kafka's does: the
    log neither takes the second for a duplicate of the first (which a restart would then
    forget) nor refuses it as out of order. Last in the file: it kills the module's broker."""
    client = WireClient(broker.port)
    txn_id, group_id = "twice", "twice-group"
    pid, epoch = begin(client, txn_id, group_id)
    assert txn_offset_commit(client, txn_id, group_id, pid, epoch, 5) == ErrorCode.none
    assert txn_offset_commit(client, txn_id, group_id, pid, epoch, 12) == ErrorCode.none
    assert end_txn(client, txn_id, pid, epoch, commit=True) == ErrorCode.none
    assert wait_stable(client, group_id) == 12
    client.close()
    broker.kill()
    broker.start()
    client = WireClient(broker.port)
    try:
        assert wait_stable(client, group_id) == 12
    finally:
        client.close()
