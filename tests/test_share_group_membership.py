"""Share group membership (KIP-932) over raw requests against a real broker process:
ShareGroupHeartbeat's joins, assignment, leaves, fencing and session expiry,
ShareGroupDescribe, a share group reloaded after a restart, the group APIs' view of share
groups (ListGroups, DeleteGroups, DescribeGroups, OffsetFetch), group ids of another type,
and the gate ``group.share.enable``.
"""

from __future__ import annotations

import itertools
import uuid
from datetime import timedelta
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from compat_tests.broker import BrokerProcess
from compat_tests.process_pool import ProcessPool
from gregor.apis.context import build, nested
from gregor.wire import versions as v
from gregor.wire.schema import request_type
from tests.kafka_wire import WireClient
from tests.share_groups_off import SHARE_GROUPS_OFF
from tests.test_consumer_group_commits_and_configs import alter_group
from tests.test_consumer_group_protocol import (
    HEARTBEAT_MS,
    PARTITIONS,
    client,
    commit,
    fetch_group,
    group_overrides,
    restart_and_check_reloaded,
    topic_with_coordinator,
    wait_until,
)
from tests.test_consumer_group_protocol import join as consumer_join

__all__ = ["client"]  # the fixture, shared with tests/test_consumer_group_protocol.py

TOPIC = "sg-topic"
MAX_SIZE = 10  # Kafka's lowest group.share.max.size
_groups = itertools.count()
BROKER_OVERRIDES = {**group_overrides("share", MAX_SIZE), "group.share.enable": "true"}


@pytest.fixture(scope="module")
def broker(process_pool: ProcessPool) -> BrokerProcess:
    return process_pool.broker(BROKER_OVERRIDES)


@pytest.fixture(scope="module")
def topic_id(broker: BrokerProcess) -> uuid.UUID:
    return topic_with_coordinator(broker, TOPIC, PARTITIONS)


@pytest.fixture
def group() -> str:
    return f"sg-{next(_groups)}"


def heartbeat(
    client: WireClient,
    group: str,
    member_id: str,
    epoch: int,
    topics: tuple[str, ...] | None = None,
) -> Any:
    body = build(
        request_type(v.SHARE_GROUP_HEARTBEAT, 1),
        group_id=group,
        member_id=member_id,
        member_epoch=epoch,
        rack_id=None,
        subscribed_topic_names=topics,
    )
    return client.call(v.SHARE_GROUP_HEARTBEAT, 1, body)


def describe(client: WireClient, group: str) -> Any:
    body = build(
        request_type(v.SHARE_GROUP_DESCRIBE, 1),
        group_ids=(group,),
        include_authorized_operations=False,
    )
    return client.call(v.SHARE_GROUP_DESCRIBE, 1, body).groups[0]


def partitions(response: Any) -> dict[uuid.UUID, set[int]]:
    assert response.assignment is not None
    return {t.topic_id: set(t.partitions) for t in response.assignment.topic_partitions}


class Member:
    """A share group member that joins at once (a client-generated member id)."""

    def __init__(self, client: WireClient, group: str) -> None:
        self.client, self.group = client, group
        self.member_id = str(uuid.uuid4())
        joined = heartbeat(client, group, self.member_id, 0, (TOPIC,))
        assert joined.error_code == ErrorCode.none, joined
        assert joined.member_id == self.member_id
        self.epoch: int = joined.member_epoch
        self.assigned = partitions(joined)

    def beat(self) -> Any:
        response = heartbeat(self.client, self.group, self.member_id, self.epoch)
        assert response.error_code == ErrorCode.none, response
        self.epoch = response.member_epoch
        if response.assignment is not None:
            self.assigned = partitions(response)
        return response


def list_groups(client: WireClient, types: tuple[str, ...], states: tuple[str, ...] = ()) -> Any:
    body = build(request_type(v.LIST_GROUPS, 5), states_filter=states, types_filter=types)
    return client.call(v.LIST_GROUPS, 5, body)


def delete_group(client: WireClient, group: str) -> ErrorCode:
    body = build(request_type(v.DELETE_GROUPS, 2), groups_names=(group,))
    (result,) = client.call(v.DELETE_GROUPS, 2, body).results
    code: ErrorCode = result.error_code
    return code


# -- joining and assignment -------------------------------------------------------------------
def test_a_member_joins_and_gets_every_partition(
    client: WireClient, group: str, topic_id: uuid.UUID
) -> None:
    member = Member(client, group)
    assert member.epoch == 1
    assert member.assigned == {topic_id: set(range(PARTITIONS))}
    beat = member.beat()
    assert beat.heartbeat_interval.total_seconds() == HEARTBEAT_MS / 1000
    assert beat.assignment is None  # unchanged
    described = describe(client, group)
    assert (described.error_code, described.group_state, described.assignor_name) == (
        ErrorCode.none,
        "Stable",
        "simple",
    )
    assert (described.group_epoch, described.assignment_epoch) == (1, 1)
    (m,) = described.members
    assert (m.member_id, m.member_epoch, m.subscribed_topic_names) == (
        member.member_id,
        1,
        (TOPIC,),
    )
    assert [(t.topic_name, set(t.partitions)) for t in m.assignment.topic_partitions] == [
        (TOPIC, set(range(PARTITIONS)))
    ]


def test_two_members_split_the_partitions_without_revocation(
    client: WireClient, group: str, topic_id: uuid.UUID
) -> None:
    first = Member(client, group)
    second = Member(client, group)
    # The newcomer has its target at once; the first moves straight to its own.
    assert second.epoch == 2
    first.beat()
    assert first.epoch == 2
    assert first.assigned[topic_id] | second.assigned[topic_id] == set(range(PARTITIONS))
    assert len(first.assigned[topic_id]) == len(second.assigned[topic_id]) == PARTITIONS // 2
    assert describe(client, group).group_state == "Stable"


def test_a_leaving_member_hands_its_partitions_back(
    client: WireClient, group: str, topic_id: uuid.UUID
) -> None:
    first, second = Member(client, group), Member(client, group)
    first.beat()
    left = heartbeat(client, group, second.member_id, -1)
    assert (left.error_code, left.member_id, left.member_epoch) == (
        ErrorCode.none,
        second.member_id,
        -1,
    )
    first.beat()
    assert first.assigned == {topic_id: set(range(PARTITIONS))}
    heartbeat(client, group, first.member_id, -1)
    described = describe(client, group)
    assert (described.group_state, described.members) == ("Empty", ())


# -- Kafka's validation and fencing -----------------------------------------------------------
def test_invalid_requests(client: WireClient, group: str) -> None:
    member_id = str(uuid.uuid4())
    no_topics = "SubscribedTopicNames must be set in first request."
    cases = [
        (heartbeat(client, group, "", 0, (TOPIC,)), "MemberId can't be empty."),
        (heartbeat(client, "", member_id, 0, (TOPIC,)), "GroupId can't be empty."),
        (heartbeat(client, group, member_id, 0), no_topics),
        (heartbeat(client, group, member_id, 0, ()), no_topics),
        (heartbeat(client, group, member_id, -2), "MemberEpoch is invalid."),
    ]  # fmt: skip
    for response, message in cases:
        assert (response.error_code, response.error_message) == (
            ErrorCode.invalid_request,
            message,
        )


def test_epochs_are_checked(client: WireClient, group: str) -> None:
    missing = heartbeat(client, group, str(uuid.uuid4()), 1)
    assert missing.error_code == ErrorCode.group_id_not_found
    first, second = Member(client, group), Member(client, group)
    stale_epoch = first.epoch
    first.beat()  # now at the second member's epoch; its previous one is still accepted
    assert heartbeat(client, group, first.member_id, stale_epoch).error_code == ErrorCode.none
    ahead = heartbeat(client, group, first.member_id, first.epoch + 1)
    assert ahead.error_code == ErrorCode.fenced_member_epoch
    Member(client, group)
    first.beat()
    behind = heartbeat(client, group, first.member_id, stale_epoch)
    assert behind.error_code == ErrorCode.fenced_member_epoch
    stranger = heartbeat(client, group, str(uuid.uuid4()), second.epoch)
    assert stranger.error_code == ErrorCode.unknown_member_id
    assert heartbeat(client, group, "nobody", -1).error_code == ErrorCode.unknown_member_id


def test_the_group_has_a_maximum_size(client: WireClient, group: str, topic_id: uuid.UUID) -> None:
    members = [Member(client, group) for _ in range(MAX_SIZE)]
    full = heartbeat(client, group, str(uuid.uuid4()), 0, (TOPIC,))
    assert full.error_code == ErrorCode.group_max_size_reached
    assert members[0].beat().error_code == ErrorCode.none  # members go on
    # With more members than partitions, each partition is shared by ceil(10 / 6) members.
    for member in members:
        member.beat()
    sharing = [sum(1 for m in members if p in m.assigned[topic_id]) for p in range(PARTITIONS)]
    assert sharing == [2] * PARTITIONS


def test_a_silent_member_is_fenced_when_its_session_expires(
    client: WireClient, group: str, topic_id: uuid.UUID
) -> None:
    first, second = Member(client, group), Member(client, group)
    wait_until(lambda: len(describe(client, group).members) == 1 or not first.beat())
    (survivor,) = describe(client, group).members
    assert survivor.member_id == first.member_id
    first.beat()
    assert first.assigned == {topic_id: set(range(PARTITIONS))}
    assert heartbeat(client, group, second.member_id, second.epoch).error_code == (
        ErrorCode.unknown_member_id
    )


def test_group_configs_set_the_session_and_heartbeat(client: WireClient, group: str) -> None:
    configs = {"share.session.timeout.ms": "1000", "share.heartbeat.interval.ms": "300"}
    assert alter_group(client, group, configs) == (ErrorCode.none, None)
    member = Member(client, group)
    assert member.beat().heartbeat_interval.total_seconds() == 0.3
    below = {"share.session.timeout.ms": "999"}
    assert alter_group(client, group, below)[0] == ErrorCode.invalid_config


# -- restart ----------------------------------------------------------------------------------
def test_a_share_group_reloads_after_a_restart(broker: BrokerProcess, topic_id: uuid.UUID) -> None:
    group = f"sg-restart-{next(_groups)}"
    client = WireClient(broker.port)
    first, second = Member(client, group), Member(client, group)
    first.beat()
    before = describe(client, group)
    client.close()
    client = restart_and_check_reloaded(broker, group, before, describe)
    for m in (first, second):
        m.client = client
        assert m.beat().member_epoch == before.group_epoch
    client.close()


# -- the group APIs and group ids of another type ---------------------------------------------
def test_list_groups_filters_share_groups(client: WireClient, group: str) -> None:
    member = Member(client, group)
    listed = list_groups(client, ("share",))
    assert (group, "share", "share", "Stable") in {
        (g.group_id, g.group_type, g.protocol_type, g.group_state) for g in listed.groups
    }
    assert group not in {g.group_id for g in list_groups(client, ("consumer",)).groups}
    assert group not in {g.group_id for g in list_groups(client, ("share",), ("empty",)).groups}
    heartbeat(client, group, member.member_id, -1)
    empty = list_groups(client, ("SHARE",), ("Empty",))
    assert group in {g.group_id for g in empty.groups}


def test_delete_groups_deletes_an_empty_share_group(client: WireClient, group: str) -> None:
    member = Member(client, group)
    assert delete_group(client, group) == ErrorCode.non_empty_group
    heartbeat(client, group, member.member_id, -1)
    assert delete_group(client, group) == ErrorCode.none
    assert describe(client, group).error_code == ErrorCode.group_id_not_found
    assert delete_group(client, group) == ErrorCode.group_id_not_found


def test_group_ids_of_another_type(client: WireClient, group: str) -> None:
    Member(client, group)
    _, consumer = consumer_join(client, group)
    assert (consumer.error_code, consumer.error_message) == (
        ErrorCode.group_id_not_found,
        f"Group {group} is not a consumer group.",
    )
    assert fetch_group(client, group).error_code == ErrorCode.group_id_not_found
    body = build(
        request_type(v.DESCRIBE_GROUPS, 5), groups=(group,), include_authorized_operations=False
    )
    (classic,) = client.call(v.DESCRIBE_GROUPS, 5, body).groups
    assert classic.group_state == "Dead"
    body = build(
        request_type(v.DESCRIBE_GROUPS, 6), groups=(group,), include_authorized_operations=False
    )
    (classic,) = client.call(v.DESCRIBE_GROUPS, 6, body).groups
    assert (classic.error_code, classic.error_message) == (
        ErrorCode.group_id_not_found,
        f"Group {group} is not a classic group.",
    )
    join_cls = request_type(v.JOIN_GROUP, 9)
    protocol = nested(join_cls, "JoinGroupRequestProtocol")(name="range", metadata=b"")
    body = build(
        join_cls,
        group_id=group,
        session_timeout=timedelta(seconds=10),
        rebalance_timeout=timedelta(seconds=10),
        member_id="",
        group_instance_id=None,
        protocol_type="consumer",
        protocols=(protocol,),
        reason=None,
    )
    joined = client.call(v.JOIN_GROUP, 9, body)
    assert joined.error_code == ErrorCode.inconsistent_group_protocol
    consumer_group = f"{group}-consumer"
    _, joined = consumer_join(client, consumer_group)
    assert joined.error_code == ErrorCode.none
    share = heartbeat(client, consumer_group, str(uuid.uuid4()), 0, (TOPIC,))
    assert (share.error_code, share.error_message) == (
        ErrorCode.group_id_not_found,
        f"Group {consumer_group} is not a share group.",
    )
    assert describe(client, consumer_group).error_code == ErrorCode.group_id_not_found


def test_classic_requests_on_a_share_group_leave_it_alone(client: WireClient, group: str) -> None:
    """Kafka's GroupMetadataManager: SyncGroup and Heartbeat answer UNKNOWN_MEMBER_ID,
    LeaveGroup UNKNOWN_MEMBER_ID per member; OffsetCommit is refused by
    ShareGroup.validateOffsetCommit (GROUP_ID_NOT_FOUND); the share group is untouched. And
    ShareGroupHeartbeat does not take a classic group's id."""
    member = Member(client, group)
    before = describe(client, group)
    sync_cls = request_type(v.SYNC_GROUP, 5)
    synced = client.call(
        v.SYNC_GROUP,
        5,
        build(
            sync_cls,
            group_id=group,
            generation_id=before.group_epoch,
            member_id=member.member_id,
            group_instance_id=None,
            protocol_type="consumer",
            protocol_name="range",
            assignments=(),
        ),
    )
    assert synced.error_code == ErrorCode.unknown_member_id
    beat = client.call(
        v.HEARTBEAT,
        4,
        build(
            request_type(v.HEARTBEAT, 4),
            group_id=group,
            generation_id=before.group_epoch,
            member_id=member.member_id,
            group_instance_id=None,
        ),
    )
    assert beat.error_code == ErrorCode.unknown_member_id
    leave_cls = request_type(v.LEAVE_GROUP, 5)
    identity = nested(leave_cls, "MemberIdentity")
    left = client.call(
        v.LEAVE_GROUP,
        5,
        build(
            leave_cls,
            group_id=group,
            members=(build(identity, member_id=member.member_id, group_instance_id=None),),
        ),
    )
    assert left.error_code == ErrorCode.none
    assert [m.error_code for m in left.members] == [ErrorCode.unknown_member_id]
    for epoch in (-1, before.group_epoch):
        assert commit(client, group, member.member_id, epoch, topic=TOPIC) == (
            ErrorCode.group_id_not_found
        )
    after = describe(client, group)
    assert (after.group_state, after.group_epoch, [m.member_id for m in after.members]) == (
        "Stable",
        before.group_epoch,
        [member.member_id],
    )
    assert member.beat().member_epoch == before.group_epoch
    assert group not in {g.group_id for g in list_groups(client, ("classic",)).groups}

    classic = f"{group}-classic"  # a simple classic group: offsets committed, no members
    assert commit(client, classic, "", -1, topic=TOPIC) == ErrorCode.none
    share = heartbeat(client, classic, str(uuid.uuid4()), 0, (TOPIC,))
    assert (share.error_code, share.error_message) == (
        ErrorCode.group_id_not_found,
        f"Group {classic} is not a share group.",
    )


# -- the gate ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def share_disabled(process_pool: ProcessPool) -> BrokerProcess:
    return process_pool.broker(SHARE_GROUPS_OFF)


def test_without_group_share_enable_the_apis_answer_unsupported_version(
    share_disabled: BrokerProcess,
) -> None:
    client = WireClient(share_disabled.port)
    try:
        response = heartbeat(client, "g", str(uuid.uuid4()), 0, (TOPIC,))
        assert response.error_code == ErrorCode.unsupported_version
        assert describe(client, "g").error_code == ErrorCode.unsupported_version
    finally:
        client.close()
