"""Hostile and slow group members against a real broker process (issue #10, items 4, 14).

A JoinGroup naming each protocol twice used to freeze its group in PreparingRebalance
for good; a member parked in SyncGroup past its session timeout used to lose its session
timer and stay in the group for ever.
"""

from __future__ import annotations

import datetime
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from kio.schema.errors import ErrorCode

from compat_tests.broker import BrokerProcess
from compat_tests.group_checks import SESSION_OVERRIDES, create_topic, wait_until
from compat_tests.process_pool import ProcessPool
from gregor.apis.context import build, nested
from gregor.wire import versions as v
from gregor.wire.schema import request_type
from tests.kafka_wire import WireClient, request_frame

JOIN_V = 5
SYNC_V = 3
BEAT_V = 3
SESSION_MS = 1000  # group.min.session.timeout.ms in SESSION_OVERRIDES
REBALANCE_MS = 60_000


@pytest.fixture(scope="module")
def broker(process_pool: ProcessPool) -> BrokerProcess:
    b = process_pool.broker({**SESSION_OVERRIDES, "offsets.topic.num.partitions": "3"})
    # As every client does before its first group request; this creates the offsets topic.
    client = WireClient(b.port)
    found = client.call(
        v.FIND_COORDINATOR, 0, build(request_type(v.FIND_COORDINATOR, 0), key="any")
    )
    client.close()
    assert found.error_code == ErrorCode.none
    return b


def ms(n: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=n)


def join_body(group: str, member: str, protocols: list[str], session_ms: int = SESSION_MS) -> Any:
    cls = request_type(v.JOIN_GROUP, JOIN_V)
    protocol = nested(cls, "JoinGroupRequestProtocol")
    return build(
        cls,
        group_id=group,
        session_timeout=ms(session_ms),
        rebalance_timeout=ms(REBALANCE_MS),
        member_id=member,
        group_instance_id=None,
        protocol_type="consumer",
        protocols=tuple(protocol(name=name, metadata=b"\x00\x00") for name in protocols),
    )


def join(client: WireClient, group: str, protocols: list[str], member: str = "") -> Any:
    return client.call(v.JOIN_GROUP, JOIN_V, join_body(group, member, protocols))


def sync_body(group: str, generation: int, member: str, assignments: dict[str, bytes]) -> Any:
    cls = request_type(v.SYNC_GROUP, SYNC_V)
    entry = nested(cls, "SyncGroupRequestAssignment")
    return build(
        cls,
        group_id=group,
        generation_id=generation,
        member_id=member,
        group_instance_id=None,
        assignments=tuple(entry(member_id=m, assignment=a) for m, a in assignments.items()),
    )


def heartbeat(client: WireClient, group: str, generation: int, member: str) -> ErrorCode:
    body = build(
        request_type(v.HEARTBEAT, BEAT_V),
        group_id=group,
        generation_id=generation,
        member_id=member,
        group_instance_id=None,
    )
    return client.call(v.HEARTBEAT, BEAT_V, body).error_code


def describe(broker: BrokerProcess, group: str) -> Any:
    client = WireClient(broker.port)
    try:
        body = build(request_type(v.DESCRIBE_GROUPS, 0), groups=(group,))
        return client.call(v.DESCRIBE_GROUPS, 0, body).groups[0]
    finally:
        client.close()


# -- item 4: invalid protocol lists -----------------------------------------------------------


def test_duplicate_protocols_do_not_freeze_a_live_group(broker: BrokerProcess) -> None:
    topic = create_topic(broker, "hostile-join", 1)
    group = "live-group"
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 300,
        }
    )
    consumer.subscribe([topic])
    seen: list[bytes] = []

    def produce_and_poll(value: bytes) -> None:
        producer.produce(topic, value)
        producer.flush(10)
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            seen.append(message.value())

    try:
        wait_until(
            lambda: bool(seen),
            60,
            "the live consumer's first message",
            lambda: produce_and_poll(b"before"),
        )
        client = WireClient(broker.port)
        # As the new member the issue used, and through the KIP-394 second join.
        bad = join(client, group, ["range", "range", "roundrobin", "roundrobin"])
        assert bad.error_code == ErrorCode.inconsistent_group_protocol
        first = join(client, group, ["range"])
        assert first.error_code == ErrorCode.member_id_required
        again = join(client, group, ["range", "range"], member=first.member_id)
        assert again.error_code == ErrorCode.inconsistent_group_protocol
        for protocols in ([], ["sticky-only"]):
            assert join(client, group, protocols).error_code == (
                ErrorCode.inconsistent_group_protocol
            )
        client.close()

        # The live consumer keeps consuming, and its group is stable with it alone.
        seen.clear()
        wait_until(
            lambda: b"after" in seen,
            60,
            "the live consumer to keep consuming",
            lambda: produce_and_poll(b"after"),
        )
        described = describe(broker, group)
        assert described.group_state == "Stable"
        assert len(described.members) == 1
    finally:
        consumer.close()

    # A fresh group: the bad member gets the error, the group is not left rebalancing.
    client = WireClient(broker.port)
    bad = join(client, "fresh-group", ["range", "range"])
    client.close()
    assert bad.error_code == ErrorCode.inconsistent_group_protocol
    assert describe(broker, "fresh-group").group_state in ("Empty", "Dead")
    assert "Traceback" not in broker.log_path.read_text(errors="replace")


# -- item 14: a SyncGroup parked past the session timeout ------------------------------------


@pytest.mark.parametrize("b_keeps_beating", [False, True])
def test_slow_sync_rearms_the_session(broker: BrokerProcess, b_keeps_beating: bool) -> None:
    group = f"slow-sync-{b_keeps_beating}"
    a_conn, b_conn = WireClient(broker.port), WireClient(broker.port)
    try:
        # A joins alone and is stable in generation 1.
        a_id = join(a_conn, group, ["range"]).member_id
        a = join(a_conn, group, ["range"], member=a_id)
        assert (a.error_code, a.generation_id) == (ErrorCode.none, 1)
        synced = a_conn.call(v.SYNC_GROUP, SYNC_V, sync_body(group, 1, a_id, {a_id: b"a1"}))
        assert synced.error_code == ErrorCode.none

        # B joins (parked) and A rejoins: generation 2, A leads.
        b_id = join(b_conn, group, ["range"]).member_id
        b_conn.send(request_frame(v.JOIN_GROUP, JOIN_V, 101, join_body(group, b_id, ["range"])))
        wait_until(
            lambda: heartbeat(a_conn, group, 1, a_id) == ErrorCode.rebalance_in_progress,
            30,
            "the rebalance B's join starts",
        )
        a2 = join(a_conn, group, ["range"], member=a_id)
        b2 = b_conn.read_response(v.JOIN_GROUP, JOIN_V, 101)
        assert a2.error_code == b2.error_code == ErrorCode.none
        generation = a2.generation_id
        assert a2.leader == a_id

        # B's SyncGroup waits for three of its session timeouts (its session timer fires
        # meanwhile) while A heartbeats; then A assigns.
        b_sync = sync_body(group, generation, b_id, {})
        b_conn.send(request_frame(v.SYNC_GROUP, SYNC_V, 102, b_sync))
        parked_until = time.monotonic() + 3 * SESSION_MS / 1000
        while time.monotonic() < parked_until:
            assert heartbeat(a_conn, group, generation, a_id) == ErrorCode.none
            time.sleep(0.2)
        done = a_conn.call(
            v.SYNC_GROUP,
            SYNC_V,
            sync_body(group, generation, a_id, {a_id: b"a2", b_id: b"b2"}),
        )
        assert done.error_code == ErrorCode.none
        b_synced = b_conn.read_response(v.SYNC_GROUP, SYNC_V, 102)
        assert (b_synced.error_code, b_synced.assignment) == (ErrorCode.none, b"b2")
        assert describe(broker, group).group_state == "Stable"

        if b_keeps_beating:
            # While B heartbeats it stays, for three more session timeouts.
            stay_until = time.monotonic() + 3 * SESSION_MS / 1000
            while time.monotonic() < stay_until:
                assert heartbeat(a_conn, group, generation, a_id) == ErrorCode.none
                assert heartbeat(b_conn, group, generation, b_id) == ErrorCode.none
                time.sleep(0.2)
            described = describe(broker, group)
            assert described.group_state == "Stable" and len(described.members) == 2
        else:
            # B never heartbeats: it is removed after its session timeout (A sees the
            # rebalance). The bound is generous; the session is one second.
            wait_until(
                lambda: (
                    heartbeat(a_conn, group, generation, a_id) == ErrorCode.rebalance_in_progress
                ),
                30,
                "B's session to expire",
                lambda: time.sleep(0.2),
            )
            assert b_id not in {m.member_id for m in describe(broker, group).members}
    finally:
        a_conn.close()
        b_conn.close()
