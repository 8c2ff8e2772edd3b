"""The transaction coordinator's APIs over a raw socket against a real broker process:
FindCoordinator key type 1, InitProducerId with a transactional id (epochs, KIP-360,
INVALID_TRANSACTION_TIMEOUT), AddPartitionsToTxn (v3 and the batched v4+ with
verify_only), AddOffsetsToTxn, EndTxn's errors, DescribeTransactions and
ListTransactions, and the state surviving a restart of the broker."""

from __future__ import annotations

import datetime
import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from compat_tests.broker import BrokerProcess
from compat_tests.process_pool import ProcessPool
from gregor.apis.context import build, nested
from gregor.wire import versions as v
from gregor.wire.schema import request_type
from tests.kafka_wire import WireClient, create_topic, request_frame

TOPIC = "txn-data"


def req(api: int, version: int, **fields: Any) -> Any:
    return build(request_type(api, version), **fields)


def ms(n: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=n)


OVERRIDES = {
    "transaction.state.log.num.partitions": "3",
    "offsets.topic.num.partitions": "3",
    "transaction.max.timeout.ms": "120000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "100",
}


@pytest.fixture(scope="module")
def broker(process_pool: ProcessPool) -> BrokerProcess:
    b = process_pool.broker(OVERRIDES)
    c = WireClient(b.port)
    assert create_topic(c, TOPIC, 2).error_code == ErrorCode.none
    c.close()
    return b


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[WireClient]:
    c = WireClient(broker.port)
    yield c
    c.close()


def find_txn_coordinator(client: WireClient, txn_id: str) -> Any:
    return client.call(
        v.FIND_COORDINATOR,
        4,
        req(v.FIND_COORDINATOR, 4, key_type=1, coordinator_keys=(txn_id,)),
    ).coordinators[0]


def init(
    client: WireClient, txn_id: str, version: int = 4, timeout: int = 60_000, **fields: Any
) -> Any:
    return client.call(
        v.INIT_PRODUCER_ID,
        version,
        req(
            v.INIT_PRODUCER_ID,
            version,
            transactional_id=txn_id,
            transaction_timeout=ms(timeout),
            producer_id=fields.get("producer_id", -1),
            producer_epoch=fields.get("producer_epoch", -1),
        ),
    )


def add_partitions_v3(client: WireClient, txn_id: str, pid: int, epoch: int, parts: Any) -> Any:
    cls = request_type(v.ADD_PARTITIONS_TO_TXN, 3)
    topic_cls = nested(cls, "AddPartitionsToTxnTopic")
    r = client.call(
        v.ADD_PARTITIONS_TO_TXN,
        3,
        cls(
            v3_and_below_transactional_id=txn_id,
            v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=tuple(topic_cls(name=t, partitions=tuple(p)) for t, p in parts),
        ),
    )
    return {
        (t.name, p.partition_index): p.partition_error_code
        for t in r.results_by_topic_v3_and_below
        for p in t.results_by_partition
    }


def add_partitions_v5(
    client: WireClient, txn_id: str, pid: int, epoch: int, parts: Any, verify_only: bool
) -> Any:
    cls = request_type(v.ADD_PARTITIONS_TO_TXN, 5)
    topic_cls = nested(cls, "AddPartitionsToTxnTopic")
    txn_cls = nested(cls, "AddPartitionsToTxnTransaction")
    r = client.call(
        v.ADD_PARTITIONS_TO_TXN,
        5,
        cls(
            transactions=(
                txn_cls(
                    transactional_id=txn_id,
                    producer_id=pid,
                    producer_epoch=epoch,
                    verify_only=verify_only,
                    topics=tuple(topic_cls(name=t, partitions=tuple(p)) for t, p in parts),
                ),
            )
        ),
    )
    assert r.error_code == ErrorCode.none
    (result,) = r.results_by_transaction
    return {
        (t.name, p.partition_index): p.partition_error_code
        for t in result.topic_results
        for p in t.results_by_partition
    }


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
    ).error_code


def describe(client: WireClient, *txn_ids: str) -> list[Any]:
    return list(
        client.call(
            v.DESCRIBE_TRANSACTIONS,
            0,
            req(v.DESCRIBE_TRANSACTIONS, 0, transactional_ids=txn_ids),
        ).transaction_states
    )


def list_txns(client: WireClient, **filters: Any) -> Any:
    return client.call(
        v.LIST_TRANSACTIONS,
        1,
        req(
            v.LIST_TRANSACTIONS,
            1,
            state_filters=filters.get("states", ()),
            producer_id_filters=filters.get("pids", ()),
            duration_filter=filters.get("duration", -1),
        ),
    )


def test_find_coordinator_key_type_1_creates_the_topic(
    client: WireClient, broker: BrokerProcess
) -> None:
    found = find_txn_coordinator(client, "tx-find")
    assert (found.error_code, found.node_id, found.port) == (ErrorCode.none, 0, broker.port)
    unknown = client.call(
        v.FIND_COORDINATOR, 4, req(v.FIND_COORDINATOR, 4, key_type=7, coordinator_keys=("x",))
    ).coordinators[0]
    assert unknown.error_code == ErrorCode.invalid_request


def ready(client: WireClient, txn_id: str) -> Any:
    """InitProducerId, retried while the coordinator loads its partition."""
    assert find_txn_coordinator(client, txn_id).error_code == ErrorCode.none
    for _ in range(200):
        r = init(client, txn_id)
        if r.error_code not in (
            ErrorCode.coordinator_load_in_progress,
            ErrorCode.not_coordinator,
            ErrorCode.coordinator_not_available,
        ):
            return r
    raise AssertionError(f"InitProducerId kept answering {r.error_code}")


def test_init_producer_id_bumps_epochs_and_checks_timeouts(client: WireClient) -> None:
    first = ready(client, "tx-init")
    assert (first.error_code, first.producer_epoch) == (ErrorCode.none, 0)
    again = init(client, "tx-init")
    assert (again.producer_id, again.producer_epoch) == (first.producer_id, 1)
    assert init(client, "tx-init", timeout=120_001).error_code == (
        ErrorCode.invalid_transaction_timeout
    )
    assert init(client, "", timeout=1000).error_code == ErrorCode.invalid_request
    # KIP-360: the producer names itself and gets its next epoch; a stranger is fenced.
    bumped = init(client, "tx-init", producer_id=first.producer_id, producer_epoch=1)
    assert (bumped.error_code, bumped.producer_epoch) == (ErrorCode.none, 2)
    assert init(
        client, "tx-init", producer_id=first.producer_id + 999, producer_epoch=0
    ).error_code == (ErrorCode.producer_fenced)
    # v3 predates PRODUCER_FENCED (KIP-588).
    stale = init(
        client, "tx-init", version=3, producer_id=first.producer_id + 999, producer_epoch=0
    )
    assert stale.error_code == ErrorCode.invalid_producer_epoch


def test_add_partitions_verify_and_fencing(client: WireClient) -> None:
    r = ready(client, "tx-add")
    pid, epoch = r.producer_id, r.producer_epoch
    parts = [(TOPIC, [0, 1])]
    assert add_partitions_v5(client, "tx-add", pid, epoch, parts, True) == {
        (TOPIC, 0): ErrorCode.invalid_txn_state,
        (TOPIC, 1): ErrorCode.invalid_txn_state,
    }
    assert add_partitions_v3(client, "tx-add", pid, epoch, [(TOPIC, [0])]) == {
        (TOPIC, 0): ErrorCode.none
    }
    assert add_partitions_v5(client, "tx-add", pid, epoch, parts, True) == {
        (TOPIC, 0): ErrorCode.none,
        (TOPIC, 1): ErrorCode.invalid_txn_state,
    }
    assert add_partitions_v5(client, "tx-add", pid, epoch, [(TOPIC, [1])], False) == {
        (TOPIC, 1): ErrorCode.none
    }
    assert add_partitions_v3(client, "tx-add", pid, epoch, [("nope", [0]), (TOPIC, [0])]) == {
        ("nope", 0): ErrorCode.unknown_topic_or_partition,
        (TOPIC, 0): ErrorCode.operation_not_attempted,
    }
    assert add_partitions_v3(client, "tx-add", pid + 1, epoch, parts) == {
        (TOPIC, 0): ErrorCode.invalid_producer_id_mapping,
        (TOPIC, 1): ErrorCode.invalid_producer_id_mapping,
    }
    assert add_partitions_v3(client, "tx-add", pid, epoch + 1, [(TOPIC, [0])]) == {
        (TOPIC, 0): ErrorCode.producer_fenced
    }
    offsets = client.call(
        v.ADD_OFFSETS_TO_TXN,
        3,
        req(
            v.ADD_OFFSETS_TO_TXN,
            3,
            transactional_id="tx-add",
            producer_id=pid,
            producer_epoch=epoch,
            group_id="g",
        ),
    )
    assert offsets.error_code == ErrorCode.none
    (state,) = describe(client, "tx-add")
    assert state.error_code == ErrorCode.none
    assert state.transaction_state == "Ongoing"
    assert (state.producer_id, state.producer_epoch) == (pid, epoch)
    topics = {t.topic: sorted(t.partitions) for t in state.topics}
    assert topics[TOPIC] == [0, 1] and "__consumer_offsets" in topics
    listed = list_txns(client, states=("Ongoing", "Bogus"))
    assert listed.unknown_state_filters == ("Bogus",)
    assert [(t.transactional_id, t.producer_id) for t in listed.transaction_states] == [
        ("tx-add", pid)
    ]
    assert list_txns(client, pids=(pid,), states=("Empty",)).transaction_states == ()
    assert list_txns(client, pids=(pid,), duration=3_600_000).transaction_states == ()
    # A second producer with the same id fences the first: its transaction is aborted
    # with the epoch bumped, and the new producer retries on CONCURRENT_TRANSACTIONS.
    assert init(client, "tx-add").error_code == ErrorCode.concurrent_transactions
    assert end_txn(client, "tx-add", pid, epoch, True) == ErrorCode.producer_fenced
    assert end_txn(client, "tx-add", pid, epoch, True, version=1) == (
        ErrorCode.invalid_producer_epoch
    )
    (state,) = describe(client, "tx-add")
    assert state.transaction_state in ("PrepareAbort", "CompleteAbort")
    assert state.producer_epoch == epoch + 1


def test_end_txn_without_a_transaction(client: WireClient) -> None:
    r = ready(client, "tx-end")
    assert end_txn(client, "tx-end", r.producer_id, r.producer_epoch, True) == (
        ErrorCode.invalid_txn_state
    )
    assert end_txn(client, "tx-unknown", 1, 0, True) == ErrorCode.invalid_producer_id_mapping
    # kio will not decode the start time Kafka sends for no transaction (-1): read the
    # first entry's error code from the frame (header, throttle, compact array length).
    client._next += 1
    body = req(v.DESCRIBE_TRANSACTIONS, 0, transactional_ids=("tx-never",))
    client.send(request_frame(v.DESCRIBE_TRANSACTIONS, 0, client._next, body))
    frame = client.read_frame()
    assert struct.unpack_from(">h", frame, 4 + 1 + 4 + 1)[0] == (
        ErrorCode.transactional_id_not_found
    )


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced(
    client: WireClient,
) -> None:
    assert find_txn_coordinator(client, "tx-timeout").error_code == ErrorCode.none
    ready(client, "tx-timeout")
    r = init(client, "tx-timeout", timeout=300)
    pid, epoch = r.producer_id, r.producer_epoch
    assert add_partitions_v3(client, "tx-timeout", pid, epoch, [(TOPIC, [0])]) == {
        (TOPIC, 0): ErrorCode.none
    }
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        (state,) = describe(client, "tx-timeout")
        if state.transaction_state != "Ongoing":
            break
        time.sleep(0.05)
    assert state.transaction_state in ("PrepareAbort", "CompleteAbort")
    assert (state.producer_id, state.producer_epoch) == (pid, epoch + 1)
    assert end_txn(client, "tx-timeout", pid, epoch, True) == ErrorCode.producer_fenced


def test_state_survives_a_restart(client: WireClient, broker: BrokerProcess) -> None:
    r = ready(client, "tx-restart")
    pid = r.producer_id
    assert add_partitions_v3(client, "tx-restart", pid, 0, [(TOPIC, [1])]) == {
        (TOPIC, 1): ErrorCode.none
    }
    client.close()
    broker.kill()
    broker.start()
    c = WireClient(broker.port)
    try:
        assert find_txn_coordinator(c, "tx-restart").error_code == ErrorCode.none
        for _ in range(200):
            (state,) = describe(c, "tx-restart")
            if state.error_code != ErrorCode.coordinator_load_in_progress:
                break
        assert (state.error_code, state.transaction_state) == (ErrorCode.none, "Ongoing")
        assert (state.producer_id, state.producer_epoch) == (pid, 0)
        assert [(t.topic, tuple(t.partitions)) for t in state.topics] == [(TOPIC, (1,))]
    finally:
        c.close()
