"""Online migration between the classic and the consumer group protocols
(``group.consumer.migration.policy``) over raw requests against real broker processes: a
classic group upgraded by a ConsumerGroupHeartbeat, classic members served through
JoinGroup/SyncGroup/Heartbeat/LeaveGroup inside a consumer group, the downgrade when the
last consumer-protocol member leaves, committed offsets kept throughout, and each policy's
refusals.
"""

from __future__ import annotations

import itertools
import struct
import uuid
from datetime import timedelta
from typing import Any

import pytest
from kio.schema.consumer_protocol_assignment.v0 import data as assignment_v0
from kio.schema.consumer_protocol_subscription.v1 import data as subscription_v1
from kio.schema.errors import ErrorCode
from kio.schema.types import TopicName
from kio.static.primitive import i32

from compat_tests.broker import BrokerProcess
from compat_tests.process_pool import ProcessPool
from gregor.apis.context import build, nested
from gregor.server.config import BrokerConfig, ConfigError
from gregor.wire import versions as v
from gregor.wire.schema import decode, encode, request_type
from tests.kafka_wire import WireClient, create_topic
from tests.test_consumer_group_protocol import (
    PARTITIONS,
    TOPIC,
    commit,
    describe,
    fetch,
    heartbeat,
    partitions,
    wait_until,
)

SESSION_MS = 1500
_groups = itertools.count()
_VERSION = struct.Struct(">h")


def _broker(pool: ProcessPool, policy: str) -> BrokerProcess:
    broker = pool.broker(
        {
            "offsets.topic.num.partitions": "1",
            "group.initial.rebalance.delay.ms": "0",
            "group.min.session.timeout.ms": "500",
            "group.consumer.min.session.timeout.ms": "1000",
            "group.consumer.session.timeout.ms": str(SESSION_MS),
            "group.consumer.min.heartbeat.interval.ms": "100",
            "group.consumer.heartbeat.interval.ms": "200",
            "group.consumer.migration.policy": policy,
        }
    )
    client = WireClient(broker.port)
    create_topic(client, TOPIC, PARTITIONS)  # TOPIC_ALREADY_EXISTS when reused
    find = build(request_type(v.FIND_COORDINATOR, 0), key="any")  # creates __consumer_offsets
    wait_until(lambda: client.call(v.FIND_COORDINATOR, 0, find).error_code == ErrorCode.none)
    client.close()
    return broker


@pytest.fixture(scope="module")
def broker(process_pool: ProcessPool) -> BrokerProcess:
    return _broker(process_pool, "bidirectional")


@pytest.fixture
def group() -> str:
    return f"mig-{next(_groups)}"


# -- the consumer protocol's bytes, as a classic client builds them ---------------------------
def subscription(owned: list[int] | None = None) -> bytes:
    """ConsumerProtocolSubscription v1: the topic, and the partitions the member owns."""
    owned_cls = subscription_v1.TopicPartition
    body = subscription_v1.ConsumerProtocolSubscription(
        topics=(TOPIC,),
        owned_partitions=(
            (owned_cls(topic=TopicName(TOPIC), partitions=tuple(i32(p) for p in owned)),)
            if owned
            else ()
        ),
    )
    return _VERSION.pack(1) + encode(body)


def assignment_bytes(parts: list[int]) -> bytes:
    body = assignment_v0.ConsumerProtocolAssignment(
        assigned_partitions=(
            assignment_v0.TopicPartition(
                topic=TopicName(TOPIC), partitions=tuple(i32(p) for p in parts)
            ),
        )
    )
    return _VERSION.pack(0) + encode(body)


def assigned(data: bytes) -> list[int]:
    body = decode(assignment_v0.ConsumerProtocolAssignment, data, _VERSION.size)
    return sorted(p for t in body.assigned_partitions if t.topic == TOPIC for p in t.partitions)


class Classic:
    """A classic member driven by hand (JoinGroup v9, SyncGroup v5, Heartbeat v4,
    LeaveGroup v5, OffsetCommit v8), eager like the range assignor: it owns nothing when
    it rejoins."""

    def __init__(self, client: WireClient, group: str, session_ms: int = 10_000) -> None:
        self.client, self.group, self.session_ms = client, group, session_ms
        self.member_id = ""
        self.generation = -1
        self.owned: list[int] = []

    def join(self) -> Any:
        cls = request_type(v.JOIN_GROUP, 9)
        protocol = nested(cls, "JoinGroupRequestProtocol")
        for _ in range(2):  # the first join of a new member is answered MEMBER_ID_REQUIRED
            response = self.client.call(
                v.JOIN_GROUP,
                9,
                build(
                    cls,
                    group_id=self.group,
                    session_timeout=timedelta(milliseconds=self.session_ms),
                    rebalance_timeout=timedelta(seconds=10),
                    member_id=self.member_id,
                    group_instance_id=None,
                    protocol_type="consumer",
                    protocols=(protocol(name="range", metadata=subscription()),),
                    reason=None,
                ),
            )
            self.member_id = response.member_id
            if response.error_code != ErrorCode.member_id_required:
                break
        assert response.error_code == ErrorCode.none, response
        self.generation = response.generation_id
        return response

    def sync(self, assignments: dict[str, list[int]] | None = None) -> ErrorCode:
        cls = request_type(v.SYNC_GROUP, 5)
        item = nested(cls, "SyncGroupRequestAssignment")
        response = self.client.call(
            v.SYNC_GROUP,
            5,
            build(
                cls,
                group_id=self.group,
                generation_id=self.generation,
                member_id=self.member_id,
                group_instance_id=None,
                protocol_type="consumer",
                protocol_name="range",
                assignments=tuple(
                    item(member_id=m, assignment=assignment_bytes(ps))
                    for m, ps in (assignments or {}).items()
                ),
            ),
        )
        if response.error_code == ErrorCode.none:
            self.owned = assigned(response.assignment)
        code: ErrorCode = response.error_code
        return code

    def heartbeat(self) -> ErrorCode:
        body = build(
            request_type(v.HEARTBEAT, 4),
            group_id=self.group,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=None,
        )
        code: ErrorCode = self.client.call(v.HEARTBEAT, 4, body).error_code
        return code

    def rejoin(self) -> None:
        """Rejoin and sync, as a client does after REBALANCE_IN_PROGRESS."""
        self.owned = []
        self.join()
        assert self.sync() == ErrorCode.none

    def leave(self) -> ErrorCode:
        cls = request_type(v.LEAVE_GROUP, 5)
        identity = nested(cls, "MemberIdentity")
        response = self.client.call(
            v.LEAVE_GROUP,
            5,
            build(
                cls,
                group_id=self.group,
                members=(identity(member_id=self.member_id, group_instance_id=None, reason=None),),
            ),
        )
        assert response.error_code == ErrorCode.none
        code: ErrorCode = response.members[0].error_code
        return code

    def commit(self, offset: int, generation: int | None = None) -> ErrorCode:
        epoch = self.generation if generation is None else generation
        return commit(self.client, self.group, self.member_id, epoch, version=8, offset=offset)


class Modern:
    """A consumer-protocol member driven by hand."""

    def __init__(self, client: WireClient, group: str) -> None:
        self.client, self.group = client, group
        self.member_id = str(uuid.uuid4())
        self.epoch = 0
        self.owned: dict[uuid.UUID, list[int]] = {}

    def join(self) -> Any:
        response = heartbeat(
            self.client, self.group, self.member_id, 0, topics=(TOPIC,), owned={}, rebalance_ms=9000
        )
        if response.error_code == ErrorCode.none:
            self.epoch = response.member_epoch
            self.owned = partitions(response)
        return response

    def beat(self) -> None:
        response = heartbeat(self.client, self.group, self.member_id, self.epoch, owned=self.owned)
        assert response.error_code == ErrorCode.none, response
        self.epoch = response.member_epoch
        if response.assignment is not None:
            self.owned = partitions(response)

    def count(self) -> int:
        return sum(len(ps) for ps in self.owned.values())

    def leave(self) -> None:
        assert heartbeat(self.client, self.group, self.member_id, -1).error_code == ErrorCode.none


def classic_group(client: WireClient, group: str) -> Classic:
    """A classic group of one member that took every partition."""
    member = Classic(client, group)
    joined = member.join()
    assert joined.leader == member.member_id
    assert member.sync({member.member_id: list(range(PARTITIONS))}) == ErrorCode.none
    assert member.owned == list(range(PARTITIONS))
    return member


def settle(classic: Classic, modern: Modern) -> None:
    """Heartbeats, and the classic member's rejoins when it is asked to, until the two
    hold every partition between them."""
    for _ in range(20):
        modern.beat()
        if classic.heartbeat() == ErrorCode.rebalance_in_progress:
            classic.rejoin()
        if classic.owned and modern.count() + len(classic.owned) == PARTITIONS:
            return
    raise AssertionError(f"not settled: {classic.owned} {modern.owned}")


def describe_classic(client: WireClient, group: str) -> Any:
    body = build(
        request_type(v.DESCRIBE_GROUPS, 5), groups=(group,), include_authorized_operations=False
    )
    return client.call(v.DESCRIBE_GROUPS, 5, body).groups[0]


# -- upgrade and a mixed group ------------------------------------------------------------------
def test_consumer_member_upgrades_a_classic_group_and_shares_it(
    client: WireClient, group: str
) -> None:
    classic = classic_group(client, group)
    assert classic.commit(5) == ErrorCode.none
    modern = Modern(client, group)
    joined = modern.join()
    assert joined.error_code == ErrorCode.none, joined
    # The classic member still holds every partition: the new member waits for its share.
    assert modern.count() == 0
    described = describe(client, group)
    assert described.error_code == ErrorCode.none
    types = {m.member_id: m.member_type for m in described.members}
    assert types == {classic.member_id: 0, modern.member_id: 1}
    # Its generation is its member epoch; the group moved on, so it rejoins.
    assert classic.heartbeat() == ErrorCode.rebalance_in_progress
    settle(classic, modern)
    mine = set(classic.owned)
    theirs = {p for ps in modern.owned.values() for p in ps}
    assert mine.isdisjoint(theirs) and len(mine) == len(theirs) == PARTITIONS // 2
    # Offsets: the classic member commits at its generation (the member epoch).
    assert classic.commit(7) == ErrorCode.none
    assert classic.commit(8, classic.generation - 1) == ErrorCode.illegal_generation
    assert fetch(client, group) == 7
    # The classic member leaves: the consumer member gets every partition.
    assert classic.leave() == ErrorCode.none
    wait_until(lambda: modern.beat() or modern.count() == PARTITIONS)
    assert [m.member_id for m in describe(client, group).members] == [modern.member_id]
    assert fetch(client, group) == 7


def test_classic_member_of_a_consumer_group_is_fenced_by_its_session(
    client: WireClient, group: str
) -> None:
    modern = Modern(client, group)
    assert modern.join().error_code == ErrorCode.none
    classic = Classic(client, group, session_ms=1000)
    classic.join()
    assert classic.sync() == ErrorCode.none
    assert {m.member_id for m in describe(client, group).members} == {
        modern.member_id,
        classic.member_id,
    }
    # Silent, it is fenced after its own session timeout.
    wait_until(lambda: len(describe(client, group).members) == 1, timeout=5)
    assert classic.heartbeat() == ErrorCode.unknown_member_id
    wait_until(lambda: modern.beat() or modern.count() == PARTITIONS)


# -- downgrade -----------------------------------------------------------------------------------
def test_last_consumer_member_leaving_downgrades_the_group(client: WireClient, group: str) -> None:
    modern = Modern(client, group)
    assert modern.join().error_code == ErrorCode.none
    assert modern.count() == PARTITIONS
    classic = Classic(client, group)
    classic.join()
    assert classic.sync() == ErrorCode.none
    settle(classic, modern)
    assert classic.commit(9) == ErrorCode.none
    modern.leave()
    # A classic group again, rebalancing; its offsets stayed.
    gone = describe(client, group)
    assert gone.error_code == ErrorCode.group_id_not_found
    described = describe_classic(client, group)
    assert (described.error_code, described.group_state, described.protocol_type) == (
        ErrorCode.none,
        "PreparingRebalance",
        "consumer",
    )
    assert [m.member_id for m in described.members] == [classic.member_id]
    assert fetch(client, group) == 9
    # The member's generation is the group's epoch: it is asked to rejoin, and leads.
    assert classic.heartbeat() == ErrorCode.rebalance_in_progress
    rejoined = classic.join()
    assert rejoined.leader == classic.member_id
    assert [m.member_id for m in rejoined.members] == [classic.member_id]
    assert classic.sync({classic.member_id: list(range(PARTITIONS))}) == ErrorCode.none
    assert describe_classic(client, group).group_state == "Stable"
    assert classic.commit(10) == ErrorCode.none
    assert fetch(client, group) == 10


def test_mixed_and_downgraded_groups_reload_after_a_restart(
    broker: BrokerProcess, group: str
) -> None:
    client = WireClient(broker.port)
    classic = classic_group(client, group)
    modern = Modern(client, group)
    modern.join()
    settle(classic, modern)
    before = describe(client, group)
    downgraded = f"{group}-down"
    leaving = Modern(client, downgraded)
    leaving.join()
    staying = Classic(client, downgraded)
    staying.join()
    settle(staying, leaving)
    leaving.leave()
    client.close()
    broker.restart()
    client = WireClient(broker.port)
    classic.client = staying.client = client
    wait_until(lambda: describe(client, group).error_code == ErrorCode.none)
    after = describe(client, group)
    assert (after.group_epoch, after.assignment_epoch) == (
        before.group_epoch,
        before.assignment_epoch,
    )

    def members(described: Any) -> list[Any]:
        return sorted(
            (m.member_id, m.member_epoch, m.member_type, m.assignment) for m in described.members
        )

    assert members(after) == members(before)
    # The classic member carries on at its generation, with its partitions.
    assert classic.heartbeat() == ErrorCode.none
    owned = classic.owned
    assert classic.sync() == ErrorCode.none and classic.owned == owned
    # The downgraded group is a classic group, its member at the same generation.
    described = describe_classic(client, downgraded)
    assert (described.error_code, described.protocol_type) == (ErrorCode.none, "consumer")
    assert [m.member_id for m in described.members] == [staying.member_id]
    assert describe(client, downgraded).error_code == ErrorCode.group_id_not_found
    assert staying.heartbeat() == ErrorCode.none
    client.close()


# -- the policy ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("policy", "upgrades", "downgrades"),
    [("disabled", False, False), ("upgrade", True, False), ("downgrade", False, True)],
)
def test_migration_policy(
    process_pool: ProcessPool, policy: str, upgrades: bool, downgrades: bool
) -> None:
    broker = _broker(process_pool, policy)
    client = WireClient(broker.port)
    try:
        group = f"mig-{policy}-{next(_groups)}"
        classic_group(client, group)
        joined = Modern(client, group).join()
        if upgrades:
            assert joined.error_code == ErrorCode.none
        else:
            assert (joined.error_code, joined.error_message) == (
                ErrorCode.group_id_not_found,
                f"Group {group} is not a consumer group.",
            )
        # A consumer group takes classic members whatever the policy.
        group = f"mig-{policy}-{next(_groups)}"
        modern = Modern(client, group)
        assert modern.join().error_code == ErrorCode.none
        classic = Classic(client, group)
        classic.join()
        modern.leave()
        if downgrades:
            assert describe_classic(client, group).group_state == "PreparingRebalance"
        else:
            described = describe(client, group)
            assert described.error_code == ErrorCode.none
            assert [(m.member_id, m.member_type) for m in described.members] == [
                (classic.member_id, 0)
            ]
    finally:
        client.close()


def test_migration_policy_is_validated() -> None:
    assert BrokerConfig({"group.consumer.migration.policy": "Upgrade"})
    with pytest.raises(ConfigError, match=r"must be one of \(case insensitive\): BIDIRECTIONAL"):
        BrokerConfig({"group.consumer.migration.policy": "sideways"})
