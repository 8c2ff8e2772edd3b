"""Transactions with the official Java client (kafka-clients 4.3.0): commit and abort as
read_committed and read_uncommitted consumers see them, the last stable offset, offsets sent
to a transaction, fencing by a newer producer, and the coordinator's abort of a transaction
left open past transaction.timeout.ms."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from compat_tests import java_client as java
from compat_tests.broker import BrokerProcess
from compat_tests.matrix import compat
from compat_tests.txn_checks import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    TXN_OVERRIDES,
    JavaTxnSession,
    end_offsets,
    fenced,
    group_offsets,
    read_values,
    wait_for,
    wait_for_offsets,
)

pytestmark = compat("java", "transactions")

BROKER_OVERRIDES = TXN_OVERRIDES
PARTITIONS = 2


@pytest.fixture
def topic(broker: BrokerProcess, new_topic: Callable[[str], str]) -> str:
    name = new_topic("java-txn")
    java.create_topic(broker, name, PARTITIONS)
    broker.wait_for_topic(name, PARTITIONS)
    return name


@pytest.fixture
def sessions(broker: BrokerProcess, topic: str) -> Iterator[Callable[..., JavaTxnSession]]:
    started: list[JavaTxnSession] = []

    def make(transactional_id: str, **configs: str) -> JavaTxnSession:
        session = JavaTxnSession(broker, topic, transactional_id, configs)
        started.append(session)
        return session

    yield make
    for session in started:
        session.close()


def test_commit_and_abort(
    broker: BrokerProcess, topic: str, sessions: Callable[..., JavaTxnSession]
) -> None:
    producer = sessions(f"txn-{uuid.uuid4().hex[:8]}")
    producer.ok("init")
    for values, end in ((["c1", "c2"], "commit"), (["a1", "a2"], "abort"), (["c3"], "commit")):
        producer.ok("begin")
        for i, value in enumerate(values):
            producer.ok("send", partition=i % PARTITIONS, value=value)
        producer.ok(end)

    assert read_values(broker, topic, READ_COMMITTED) == ["c1", "c3", "c2"]
    assert read_values(broker, topic, READ_UNCOMMITTED) == ["c1", "a1", "c3", "c2", "a2"]


def test_last_stable_offset_holds_at_an_open_transaction(
    broker: BrokerProcess, topic: str, sessions: Callable[..., JavaTxnSession]
) -> None:
    producer = sessions(f"txn-{uuid.uuid4().hex[:8]}")
    producer.ok("init")
    producer.ok("begin")
    producer.ok("send", partition=0, value="first")
    producer.ok("commit")
    committed_end = end_offsets(broker, topic, READ_COMMITTED)[0]
    assert committed_end == 2  # the record and its COMMIT marker

    producer.ok("begin")
    producer.ok("send", partition=0, value="open")
    # The open transaction's record is above the LSO: only read_uncommitted sees it.
    assert end_offsets(broker, topic, READ_COMMITTED)[0] == committed_end
    assert end_offsets(broker, topic, READ_UNCOMMITTED)[0] == committed_end + 1
    assert read_values(broker, topic, READ_COMMITTED) == ["first"]
    assert read_values(broker, topic, READ_UNCOMMITTED) == ["first", "open"]

    producer.ok("commit")
    assert end_offsets(broker, topic, READ_COMMITTED)[0] == committed_end + 2
    assert read_values(broker, topic, READ_COMMITTED) == ["first", "open"]


def test_offsets_become_visible_on_commit_only(
    broker: BrokerProcess, topic: str, sessions: Callable[..., JavaTxnSession]
) -> None:
    group = f"txn-group-{uuid.uuid4().hex[:8]}"
    producer = sessions(f"txn-{uuid.uuid4().hex[:8]}")
    producer.ok("init")
    producer.ok("begin")
    producer.ok("send", partition=0, value="x")
    producer.ok("offsets", group=group, offsets={"0": 5, "1": 7})
    assert group_offsets(broker, group) == {}
    producer.ok("commit")
    wait_for_offsets(broker, group, {0: 5, 1: 7})

    producer.ok("begin")
    producer.ok("offsets", group=group, offsets={"0": 9})
    producer.ok("abort")
    assert group_offsets(broker, group) == {0: 5, 1: 7}


def test_a_second_producer_fences_the_first(
    broker: BrokerProcess, topic: str, sessions: Callable[..., JavaTxnSession]
) -> None:
    transactional_id = f"txn-{uuid.uuid4().hex[:8]}"
    first = sessions(transactional_id)
    first.ok("init")
    first.ok("begin")
    first.ok("send", partition=0, value="first-open")

    second = sessions(transactional_id)
    second.ok("init")  # aborts the first producer's open transaction and bumps the epoch
    # Its write is refused (INVALID_PRODUCER_EPOCH or PRODUCER_FENCED), its commit fails, and
    # the coordinator's PRODUCER_FENCED reaches it at the latest when it gives up.
    answer = first.call("send", partition=0, value="first-after-fence")
    assert "error" in answer, answer
    answer = first.call("commit")
    assert "error" in answer, answer
    answer = first.call("abort")
    assert fenced(answer), answer

    second.ok("begin")
    second.ok("send", partition=1, value="second")
    second.ok("commit")
    assert read_values(broker, topic, READ_COMMITTED) == ["second"]
    assert "first-open" in read_values(broker, topic, READ_UNCOMMITTED)


def test_coordinator_aborts_a_transaction_past_its_timeout(
    broker: BrokerProcess, topic: str, sessions: Callable[..., JavaTxnSession]
) -> None:
    producer = sessions(f"txn-{uuid.uuid4().hex[:8]}", **{"transaction.timeout.ms": "2000"})
    producer.ok("init")
    producer.ok("begin")
    producer.ok("send", partition=0, value="expires")

    # The coordinator's ABORT marker lands after the record: the LSO passes both.
    wait_for(
        lambda: end_offsets(broker, topic, READ_COMMITTED)[0] == 2,
        "the expired transaction's ABORT marker to move the LSO past it",
    )
    answer = producer.call("commit")
    assert "error" in answer, answer
    assert read_values(broker, topic, READ_COMMITTED) == []
    assert read_values(broker, topic, READ_UNCOMMITTED) == ["expires"]
