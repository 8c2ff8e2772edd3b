"""The consumer group protocol (KIP-848) over raw requests against a real broker process:
ConsumerGroupHeartbeat's joins, reconciliation, leaves, static members and timeouts, every
error of Kafka's validation, ConsumerGroupDescribe, the classic group APIs' view of a
consumer group, and offsets checked against member epochs.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from compat_tests.broker import BrokerProcess
from compat_tests.process_pool import ProcessPool
from gregor.apis.context import build, nested
from gregor.coordinator.settings import Settings
from gregor.server.config import BrokerConfig, ConfigError
from gregor.wire import versions as v
from gregor.wire.schema import request_type
from tests.kafka_wire import WireClient, create_topic

TOPIC = "cg-topic"
PARTITIONS = 6
SESSION_MS = 1500
HEARTBEAT_MS = 200
MAX_SIZE = 4
_groups = itertools.count()


def group_overrides(protocol: str, max_size: int) -> dict[str, str]:
    """The broker keys of a suite of ``protocol``'s groups (``consumer``, ``share``): one
    offsets partition, sessions of SESSION_MS, heartbeats every HEARTBEAT_MS."""
    return {
        "offsets.topic.num.partitions": "1",
        f"group.{protocol}.min.session.timeout.ms": "1000",
        f"group.{protocol}.session.timeout.ms": str(SESSION_MS),
        f"group.{protocol}.min.heartbeat.interval.ms": "100",
        f"group.{protocol}.heartbeat.interval.ms": str(HEARTBEAT_MS),
        f"group.{protocol}.max.size": str(max_size),
    }


BROKER_OVERRIDES = {
    **group_overrides("consumer", MAX_SIZE),
    "group.initial.rebalance.delay.ms": "0",
}


@pytest.fixture(scope="module")
def broker(process_pool: ProcessPool) -> BrokerProcess:
    return process_pool.broker(BROKER_OVERRIDES)


def topic_with_coordinator(broker: BrokerProcess, topic: str, partitions: int) -> uuid.UUID:
    """Create ``topic`` and the group coordinator (FindCoordinator creates its topic); the
    topic's id."""
    client = WireClient(broker.port)
    created = create_topic(client, topic, partitions)
    assert created.error_code == ErrorCode.none
    found = client.call(
        v.FIND_COORDINATOR, 0, build(request_type(v.FIND_COORDINATOR, 0), key="any")
    )
    assert found.error_code == ErrorCode.none
    client.close()
    topic_id: uuid.UUID = created.topic_id
    return topic_id


@pytest.fixture(scope="module")
def topic_id(broker: BrokerProcess) -> uuid.UUID:
    return topic_with_coordinator(broker, TOPIC, PARTITIONS)


@pytest.fixture
def client(broker: BrokerProcess, topic_id: uuid.UUID) -> Iterator[WireClient]:
    """A connection to the module's broker, once its topic and coordinator exist."""
    c = WireClient(broker.port)
    yield c
    c.close()


@pytest.fixture
def group() -> str:
    return f"cg-{next(_groups)}"


def heartbeat(
    client: WireClient,
    group: str,
    member_id: str,
    epoch: int,
    *,
    topics: tuple[str, ...] | None = None,
    regex: str | None = None,
    owned: dict[uuid.UUID, list[int]] | None = None,
    instance_id: str | None = None,
    rack: str | None = None,
    rebalance_ms: int = -1,
    assignor: str | None = None,
    version: int = 1,
) -> Any:
    cls = request_type(v.CONSUMER_GROUP_HEARTBEAT, version)
    tp = nested(cls, "TopicPartitions")
    return client.call(
        v.CONSUMER_GROUP_HEARTBEAT,
        version,
        build(
            cls,
            group_id=group,
            member_id=member_id,
            member_epoch=epoch,
            instance_id=instance_id,
            rack_id=rack,
            rebalance_timeout=timedelta(milliseconds=rebalance_ms),
            subscribed_topic_names=topics,
            subscribed_topic_regex=regex,
            server_assignor=assignor,
            topic_partitions=None
            if owned is None
            else tuple(tp(topic_id=t, partitions=tuple(ps)) for t, ps in owned.items()),
        ),
    )


def join(
    client: WireClient, group: str, member_id: str | None = None, **options: Any
) -> tuple[str, Any]:
    member_id = member_id or str(uuid.uuid4())
    options.setdefault("topics", (TOPIC,))
    options.setdefault("rebalance_ms", 5000)
    response = heartbeat(client, group, member_id, 0, owned={}, **options)
    return member_id, response


def partitions(response: Any) -> dict[uuid.UUID, list[int]]:
    assert response.assignment is not None
    return {t.topic_id: list(t.partitions) for t in response.assignment.topic_partitions}


def describe(client: WireClient, group: str) -> Any:
    body = build(
        request_type(v.CONSUMER_GROUP_DESCRIBE, 1),
        group_ids=(group,),
        include_authorized_operations=False,
    )
    return client.call(v.CONSUMER_GROUP_DESCRIBE, 1, body).groups[0]


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


class Member:
    """A member driven by hand: heartbeats report what it owns, as a client's would."""

    def __init__(self, client: WireClient, group: str, **options: Any) -> None:
        self.client, self.group = client, group
        self.member_id, response = join(client, group, **options)
        assert response.error_code == ErrorCode.none, response
        self.epoch = response.member_epoch
        self.owned = partitions(response)

    def beat(self) -> Any:
        response = heartbeat(self.client, self.group, self.member_id, self.epoch, owned=self.owned)
        assert response.error_code == ErrorCode.none, response
        self.epoch = response.member_epoch
        if response.assignment is not None:
            self.owned = partitions(response)
        return response

    def count(self) -> int:
        return sum(len(p) for p in self.owned.values())


def settle(members: list[Member]) -> None:
    """Heartbeat round after round until every member is at the group's epoch with
    nothing pending."""
    for _ in range(10):
        for m in members:
            m.beat()
        epochs = {m.epoch for m in members}
        if len(epochs) == 1 and sum(m.count() for m in members) == PARTITIONS:
            return
    raise AssertionError(f"not settled: {[(m.epoch, m.owned) for m in members]}")


# -- joining and reconciling -----------------------------------------------------------------
def test_first_member_gets_every_partition_in_its_join_response(
    client: WireClient, group: str, topic_id: uuid.UUID
) -> None:
    member_id, response = join(client, group)
    assert response.error_code == ErrorCode.none
    assert response.member_id == member_id
    assert response.member_epoch == 1
    assert response.heartbeat_interval == timedelta(milliseconds=HEARTBEAT_MS)
    assert partitions(response) == {topic_id: list(range(PARTITIONS))}
    described = describe(client, group)
    assert described.error_code == ErrorCode.none
    assert (described.group_state, described.group_epoch, described.assignment_epoch) == (
        "Stable",
        1,
        1,
    )
    assert described.assignor_name == "uniform"
    (member,) = described.members
    assert member.member_id == member_id and member.subscribed_topic_names == (TOPIC,)
    assert member.member_type == 1
    assert member.assignment.topic_partitions[0].topic_name == TOPIC


def test_members_split_the_partitions_after_revocation(client: WireClient, group: str) -> None:
    first = Member(client, group)
    second = Member(client, group)
    assert second.epoch == 2 and second.count() == 0  # the partitions are first's still
    response = first.beat()
    assert response.member_epoch == 1  # revoke first, at its epoch
    assert first.count() == PARTITIONS // 2
    assert describe(client, group).group_state == "Reconciling"
    settle([first, second])
    assert first.count() == second.count() == PARTITIONS // 2
    mine = {(t, p) for t, ps in first.owned.items() for p in ps}
    theirs = {(t, p) for t, ps in second.owned.items() for p in ps}
    assert not mine & theirs
    assert describe(client, group).group_state == "Stable"


def test_leaving_member_partitions_go_to_the_others(client: WireClient, group: str) -> None:
    first, second = Member(client, group), Member(client, group)
    settle([first, second])
    left = heartbeat(client, group, second.member_id, -1)
    assert (left.error_code, left.member_id, left.member_epoch) == (
        ErrorCode.none,
        second.member_id,
        -1,
    )
    response = first.beat()
    assert first.count() == PARTITIONS and response.member_epoch == 3
    assert [m.member_id for m in describe(client, group).members] == [first.member_id]


def test_range_assignor_gives_contiguous_ranges(client: WireClient, group: str) -> None:
    first = Member(client, group, assignor="range")
    second = Member(client, group, assignor="range")
    settle([first, second])
    assert describe(client, group).assignor_name == "range"
    ranges = sorted(sorted(ps) for m in (first, second) for ps in m.owned.values())
    assert ranges == [[0, 1, 2], [3, 4, 5]]


def test_session_timeout_fences_a_silent_member(client: WireClient, group: str) -> None:
    first, second = Member(client, group), Member(client, group)
    settle([first, second])
    deadline = time.monotonic() + SESSION_MS / 1000 * 4
    # Only the first keeps heartbeating.
    while len(describe(client, group).members) > 1:
        assert time.monotonic() < deadline
        first.beat()
        time.sleep(HEARTBEAT_MS / 1000)
    first.beat()
    assert first.count() == PARTITIONS
    fenced = heartbeat(client, group, second.member_id, second.epoch, owned=second.owned)
    assert fenced.error_code == ErrorCode.unknown_member_id


def test_rebalance_timeout_fences_a_member_that_does_not_revoke(
    client: WireClient, group: str
) -> None:
    first = Member(client, group, rebalance_ms=1000)
    Member(client, group)
    asked = heartbeat(client, group, first.member_id, first.epoch, owned=first.owned)
    assert asked.assignment is not None and asked.member_epoch == first.epoch  # revoke some
    # It keeps heartbeating but keeps reporting every partition as owned.
    deadline = time.monotonic() + 10
    while True:
        beat = heartbeat(client, group, first.member_id, first.epoch, owned=first.owned)
        if beat.error_code != ErrorCode.none:
            break
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert beat.error_code == ErrorCode.unknown_member_id


def test_subscribed_topics_created_and_grown_are_assigned(client: WireClient, group: str) -> None:
    late = f"{group}-late"
    member = Member(client, group, topics=(late,))
    assert member.count() == 0
    created = create_topic(client, late, 2)
    assert created.error_code == ErrorCode.none
    member.beat()
    assert member.owned == {created.topic_id: [0, 1]}
    cls = request_type(v.CREATE_PARTITIONS, 3)
    grow = nested(cls, "CreatePartitionsTopic")(name=late, count=3, assignments=None)
    grown = client.call(
        v.CREATE_PARTITIONS,
        3,
        build(cls, topics=(grow,), timeout=timedelta(seconds=10), validate_only=False),
    )
    assert grown.results[0].error_code == ErrorCode.none
    wait_until(lambda: member.beat() is not None and member.count() == 3)
    assert member.owned == {created.topic_id: [0, 1, 2]}


# -- static members ----------------------------------------------------------------------------
def test_static_member_comes_back_to_its_partitions(client: WireClient, group: str) -> None:
    first = Member(client, group, instance_id="a")
    second = Member(client, group, instance_id="b")
    settle([first, second])
    epoch_before = describe(client, group).group_epoch
    kept = second.owned
    left = heartbeat(client, group, second.member_id, -2, instance_id="b")
    assert (left.error_code, left.member_epoch) == (ErrorCode.none, -2)
    # Another process takes the instance id over, with a new member id, and no rebalance.
    back = Member(client, group, instance_id="b")
    assert back.member_id != second.member_id
    assert back.owned == kept
    described = describe(client, group)
    assert described.group_epoch == epoch_before
    assert {m.member_id for m in described.members} == {first.member_id, back.member_id}
    assert first.beat().assignment is None  # nothing changed for the other member


def test_static_instance_ids_are_checked(client: WireClient, group: str) -> None:
    first = Member(client, group, instance_id="x")
    _, taken = join(client, group, instance_id="x")
    assert taken.error_code == ErrorCode.unreleased_instance_id
    fenced = heartbeat(client, group, str(uuid.uuid4()), first.epoch, instance_id="x")
    assert fenced.error_code == ErrorCode.fenced_instance_id
    unknown = heartbeat(client, group, first.member_id, first.epoch, instance_id="y")
    assert unknown.error_code == ErrorCode.unknown_member_id
    wrong_leave = heartbeat(client, group, str(uuid.uuid4()), -2, instance_id="x")
    assert wrong_leave.error_code == ErrorCode.fenced_instance_id


# -- errors ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"member_id": "", "epoch": 0}, "MemberId can't be empty."),
        ({"epoch": 0, "rebalance_ms": -1}, "RebalanceTimeoutMs must be provided in first request."),
        ({"epoch": 0, "owned": None}, "TopicPartitions must be empty when (re-)joining."),
        (
            {"epoch": 0, "topics": None},
            "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.",
        ),
        ({"epoch": -2}, "InstanceId can't be null."),
        ({"epoch": -3}, "MemberEpoch is invalid."),
        ({"epoch": 0, "instance_id": " "}, "InstanceId can't be empty."),
    ],
)
def test_invalid_requests(
    client: WireClient, group: str, options: dict[str, Any], message: str
) -> None:
    args: dict[str, Any] = {"topics": (TOPIC,), "owned": {}, "rebalance_ms": 5000}
    member_id = options.pop("member_id", str(uuid.uuid4()))
    epoch = options.pop("epoch")
    args.update(options)
    response = heartbeat(client, group, member_id, epoch, **args)
    assert (response.error_code, response.error_message) == (ErrorCode.invalid_request, message)


def test_unknown_assignor(client: WireClient, group: str) -> None:
    _, response = join(client, group, assignor="sticky")
    assert response.error_code == ErrorCode.unsupported_assignor


def test_unknown_group_and_member(client: WireClient, group: str) -> None:
    missing = heartbeat(client, group, str(uuid.uuid4()), 1, owned={})
    assert missing.error_code == ErrorCode.group_id_not_found
    Member(client, group)
    stranger = heartbeat(client, group, str(uuid.uuid4()), 1, owned={})
    assert stranger.error_code == ErrorCode.unknown_member_id


def test_epochs_are_fenced(client: WireClient, group: str) -> None:
    first = Member(client, group)
    ahead = heartbeat(client, group, first.member_id, first.epoch + 1, owned=first.owned)
    assert ahead.error_code == ErrorCode.fenced_member_epoch
    Member(client, group)
    first.beat()  # revokes at epoch 1; then moves to epoch 2 once released
    first.beat()
    assert first.epoch == 2
    behind = heartbeat(client, group, first.member_id, 0 + 1, owned={})
    # The previous epoch with owned partitions within the assignment is a lost response.
    assert behind.error_code == ErrorCode.none
    stale = heartbeat(client, group, first.member_id, 1, owned=None)
    assert stale.error_code == ErrorCode.fenced_member_epoch


def test_group_max_size(client: WireClient, group: str) -> None:
    for _ in range(MAX_SIZE):
        Member(client, group)
    _, refused = join(client, group)
    assert refused.error_code == ErrorCode.group_max_size_reached


def classic_join(client: WireClient, group_id: str, protocol_type: str) -> Any:
    """A classic JoinGroup (v9) of a static member."""
    join_cls = request_type(v.JOIN_GROUP, 9)
    protocol = nested(join_cls, "JoinGroupRequestProtocol")
    body = build(
        join_cls,
        group_id=group_id,
        session_timeout=timedelta(seconds=10),
        rebalance_timeout=timedelta(seconds=10),
        member_id="",
        group_instance_id="i",
        protocol_type=protocol_type,
        protocols=(protocol(name="range", metadata=b""),),
        reason=None,
    )
    return client.call(v.JOIN_GROUP, 9, body)


def test_classic_and_consumer_groups_keep_to_their_protocol(client: WireClient, group: str) -> None:
    Member(client, group)
    refused = classic_join(client, group, "consumer")
    assert refused.error_code == ErrorCode.inconsistent_group_protocol
    classic = f"{group}-classic"  # of another protocol type: never upgraded
    joined = classic_join(client, classic, "connect")
    assert joined.error_code == ErrorCode.none
    _, response = join(client, classic)
    assert (response.error_code, response.error_message) == (
        ErrorCode.group_id_not_found,
        f"Group {classic} is not a consumer group.",
    )


# -- the group APIs' view ---------------------------------------------------------------------
def test_list_describe_and_delete(client: WireClient, group: str) -> None:
    first = Member(client, group)
    listed = client.call(
        v.LIST_GROUPS,
        5,
        build(request_type(v.LIST_GROUPS, 5), states_filter=(), types_filter=("consumer",)),
    )
    mine = [g for g in listed.groups if g.group_id == group]
    assert [(g.group_type, g.protocol_type, g.group_state) for g in mine] == [
        ("consumer", "consumer", "Stable")
    ]
    classic_view = client.call(
        v.DESCRIBE_GROUPS,
        6,
        build(
            request_type(v.DESCRIBE_GROUPS, 6),
            groups=(group,),
            include_authorized_operations=False,
        ),
    ).groups[0]
    assert (classic_view.error_code, classic_view.error_message) == (
        ErrorCode.group_id_not_found,
        f"Group {group} is not a classic group.",
    )
    delete_body = build(request_type(v.DELETE_GROUPS, 2), groups_names=(group,))
    busy = client.call(v.DELETE_GROUPS, 2, delete_body).results[0]
    assert busy.error_code == ErrorCode.non_empty_group
    assert heartbeat(client, group, first.member_id, -1).error_code == ErrorCode.none
    assert describe(client, group).group_state == "Empty"
    deleted = client.call(v.DELETE_GROUPS, 2, delete_body).results[0]
    assert deleted.error_code == ErrorCode.none
    gone = describe(client, group)
    assert gone.error_code == ErrorCode.group_id_not_found


# -- offsets -----------------------------------------------------------------------------------
def commit(
    client: WireClient,
    group: str,
    member_id: str,
    epoch: int,
    *,
    version: int = 9,
    topic: str = TOPIC,
    offset: int = 7,
) -> ErrorCode:
    """OffsetCommit of one offset of the topic's partition 0; its error."""
    cls = request_type(v.OFFSET_COMMIT, version)
    partition = nested(cls, "OffsetCommitRequestPartition")
    topic_cls = nested(cls, "OffsetCommitRequestTopic")
    fields = {
        "partition_index": 0,
        "committed_offset": offset,
        "committed_leader_epoch": -1,
        "committed_metadata": "",
    }
    body = build(
        cls,
        group_id=group,
        generation_id_or_member_epoch=epoch,
        member_id=member_id,
        group_instance_id=None,
        retention_time_ms=-1,  # versions 2-4 only
        topics=(topic_cls(name=topic, partitions=(build(partition, **fields),)),),
    )
    response = client.call(v.OFFSET_COMMIT, version, body)
    code: ErrorCode = response.topics[0].partitions[0].error_code
    return code


def fetch_group(
    client: WireClient, group: str, member_id: str | None = None, epoch: int = -1
) -> Any:
    cls = request_type(v.OFFSET_FETCH, 9)
    group_cls = nested(cls, "OffsetFetchRequestGroup")
    topic_cls = nested(cls, "OffsetFetchRequestTopics")
    body = build(
        cls,
        groups=(
            build(
                group_cls,
                group_id=group,
                member_id=member_id,
                member_epoch=epoch,
                topics=(topic_cls(name=TOPIC, partition_indexes=(0,)),),
            ),
        ),
        require_stable=False,
    )
    return client.call(v.OFFSET_FETCH, 9, body).groups[0]


def fetch(client: WireClient, group: str) -> int:
    (partition,) = fetch_group(client, group).topics[0].partitions
    offset: int = partition.committed_offset
    return offset


def test_offset_commits_check_the_member_epoch(client: WireClient, group: str) -> None:
    member = Member(client, group)
    assert commit(client, group, member.member_id, member.epoch) == ErrorCode.none
    assert commit(client, group, member.member_id, member.epoch - 1) == ErrorCode.stale_member_epoch
    assert commit(client, group, "stranger", member.epoch) == ErrorCode.unknown_member_id
    # An admin's commit (epoch -1) needs an empty group.
    assert commit(client, group, "", -1) == ErrorCode.unknown_member_id
    assert fetch_group(client, group, member.member_id, member.epoch).error_code == ErrorCode.none
    stale = fetch_group(client, group, member.member_id, member.epoch - 1)
    assert stale.error_code == ErrorCode.stale_member_epoch
    assert fetch_group(client, group, "stranger", 1).error_code == ErrorCode.unknown_member_id
    assert fetch(client, group) == 7  # an admin's fetch (no member) is accepted
    heartbeat(client, group, member.member_id, -1)
    assert commit(client, group, "", -1) == ErrorCode.none


def test_group_and_offsets_reload_after_a_restart(
    broker: BrokerProcess, topic_id: uuid.UUID, group: str
) -> None:
    client = WireClient(broker.port)
    first, second = Member(client, group), Member(client, group)
    settle([first, second])
    assert commit(client, group, first.member_id, first.epoch) == ErrorCode.none
    before = describe(client, group)
    client.close()
    client = restart_and_check_reloaded(broker, group, before, describe)
    assert fetch(client, group) == 7
    for m in (first, second):
        m.client = client
        assert m.beat().member_epoch == before.group_epoch
    client.close()


def restart_and_check_reloaded(
    broker: BrokerProcess, group: str, before: Any, describe: Callable[[WireClient, str], Any]
) -> WireClient:
    """Restart the broker and check the group reloads as ``describe`` showed it ``before``
    (its epochs and members' assignments, Stable); a client of the restarted broker."""
    broker.restart()
    client = WireClient(broker.port)
    wait_until(lambda: describe(client, group).error_code == ErrorCode.none)
    after = describe(client, group)
    assert (after.group_epoch, after.assignment_epoch, after.group_state) == (
        before.group_epoch,
        before.assignment_epoch,
        "Stable",
    )
    assert sorted((m.member_id, m.member_epoch, m.assignment) for m in after.members) == sorted(
        (m.member_id, m.member_epoch, m.assignment) for m in before.members
    )
    return client


# -- the broker's keys --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            {"group.consumer.session.timeout.ms": "30000"},
            "group.consumer.session.timeout.ms must be greater than or equal to "
            "group.consumer.min.session.timeout.ms",
        ),
        (
            {"group.consumer.heartbeat.interval.ms": "20000"},
            "group.consumer.heartbeat.interval.ms must be less than or equal to "
            "group.consumer.max.heartbeat.interval.ms",
        ),
        (
            {
                "group.consumer.min.session.timeout.ms": "1000",
                "group.consumer.session.timeout.ms": "5000",
            },
            "group.consumer.heartbeat.interval.ms must be less than "
            "group.consumer.session.timeout.ms",
        ),
        ({"group.consumer.assignors": "sticky"}, "unknown assignor"),
        ({"group.coordinator.rebalance.protocols": "consumer"}, "must contain classic"),
    ],
)
def test_consumer_group_keys_are_validated(raw: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        BrokerConfig(raw)


def test_assignors_by_class_or_short_name() -> None:
    assert Settings.from_config(BrokerConfig({})).consumer_assignors == ("uniform", "range")
    short = BrokerConfig({"group.consumer.assignors": "range"})
    assert Settings.from_config(short).consumer_assignors == ("range",)
