"""Every version of every group API, over a raw socket against a real broker process."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from compat_tests.broker import BrokerProcess
from compat_tests.process_pool import ProcessPool
from gregor.apis.context import build, nested
from gregor.wire import versions as v
from gregor.wire.schema import request_type
from tests.kafka_wire import WireClient, create_topic


@pytest.fixture(scope="module")
def broker(process_pool: ProcessPool) -> BrokerProcess:
    b = process_pool.broker(
        {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "5"}
    )
    # As every client does before its first group request; this creates the offsets topic.
    c = WireClient(b.port)
    found = c.call(v.FIND_COORDINATOR, 0, req(v.FIND_COORDINATOR, 0, key="any"))
    c.close()
    assert found.error_code == ErrorCode.none
    return b


def req(api: int, version: int, **fields: Any) -> Any:
    return build(request_type(api, version), **fields)


def ms(n: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=n)


@pytest.mark.parametrize("version", range(0, 7))
def test_find_coordinator(client: WireClient, broker: BrokerProcess, version: int) -> None:
    if version < 4:
        r = client.call(v.FIND_COORDINATOR, version, req(v.FIND_COORDINATOR, version, key="g"))
        assert (r.error_code, r.node_id, r.port) == (ErrorCode.none, 0, broker.port)
        return
    r = client.call(
        v.FIND_COORDINATOR,
        version,
        req(v.FIND_COORDINATOR, version, key_type=0, coordinator_keys=("a", "b")),
    )
    assert [(c.key, c.error_code, c.port) for c in r.coordinators] == [
        ("a", ErrorCode.none, broker.port),
        ("b", ErrorCode.none, broker.port),
    ]


def join(client: WireClient, version: int, group: str, member: str) -> Any:
    cls = request_type(v.JOIN_GROUP, version)
    protocol = nested(cls, "JoinGroupRequestProtocol")(name="range", metadata=b"\x00\x00")
    return client.call(
        v.JOIN_GROUP,
        version,
        req(
            v.JOIN_GROUP,
            version,
            group_id=group,
            session_timeout=ms(10_000),
            rebalance_timeout=ms(10_000),
            member_id=member,
            group_instance_id=None,
            protocol_type="consumer",
            protocols=(protocol,),
            reason=None,
        ),
    )


@pytest.mark.parametrize("version", range(0, 10))
def test_member_lifecycle_in_every_version(client: WireClient, version: int) -> None:
    group = f"wire-{version}"
    joined = join(client, version, group, "")
    if version >= 4:
        assert joined.error_code == ErrorCode.member_id_required
        joined = join(client, version, group, joined.member_id)
    assert joined.error_code == ErrorCode.none
    assert (joined.generation_id, joined.leader) == (1, joined.member_id)
    assert [m.member_id for m in joined.members] == [joined.member_id]
    member, generation = joined.member_id, joined.generation_id

    sv = min(version, 5)
    sync_cls = request_type(v.SYNC_GROUP, sv)
    assignment = nested(sync_cls, "SyncGroupRequestAssignment")(
        member_id=member, assignment=b"mine"
    )
    synced = client.call(
        v.SYNC_GROUP,
        sv,
        req(
            v.SYNC_GROUP,
            sv,
            group_id=group,
            generation_id=generation,
            member_id=member,
            group_instance_id=None,
            protocol_type="consumer",
            protocol_name="range",
            assignments=(assignment,),
        ),
    )
    assert (synced.error_code, synced.assignment) == (ErrorCode.none, b"mine")

    hv = min(version, 4)
    beat = client.call(
        v.HEARTBEAT,
        hv,
        req(
            v.HEARTBEAT,
            hv,
            group_id=group,
            generation_id=generation,
            member_id=member,
            group_instance_id=None,
        ),
    )
    assert beat.error_code == ErrorCode.none
    stale = client.call(
        v.HEARTBEAT,
        hv,
        req(
            v.HEARTBEAT,
            hv,
            group_id=group,
            generation_id=generation + 1,
            member_id=member,
            group_instance_id=None,
        ),
    )
    assert stale.error_code == ErrorCode.illegal_generation

    lv = min(version, 5)
    if lv < 3:
        left = client.call(
            v.LEAVE_GROUP, lv, req(v.LEAVE_GROUP, lv, group_id=group, member_id=member)
        )
        assert left.error_code == ErrorCode.none
    else:
        identity = nested(request_type(v.LEAVE_GROUP, lv), "MemberIdentity")
        left = client.call(
            v.LEAVE_GROUP,
            lv,
            req(
                v.LEAVE_GROUP,
                lv,
                group_id=group,
                members=(
                    build(identity, member_id=member, group_instance_id=None, reason="bye"),
                    build(identity, member_id="ghost", group_instance_id=None, reason=None),
                ),
            ),
        )
        assert [m.error_code for m in left.members] == [ErrorCode.none, ErrorCode.unknown_member_id]


def commit(client: WireClient, version: int, group: str, topic: str, offset: int) -> Any:
    cls = request_type(v.OFFSET_COMMIT, version)
    part = build(
        nested(cls, "OffsetCommitRequestPartition"),
        partition_index=1,
        committed_offset=offset,
        committed_leader_epoch=-1,
        committed_metadata="m",
        commit_timestamp=-1,
    )
    topic_entry = nested(cls, "OffsetCommitRequestTopic")(name=topic, partitions=(part,))
    return client.call(
        v.OFFSET_COMMIT,
        version,
        req(
            v.OFFSET_COMMIT,
            version,
            group_id=group,
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            retention_time=ms(-1),
            topics=(topic_entry,),
        ),
    )


def fetch(client: WireClient, version: int, group: str, topic: str) -> dict[int, int]:
    cls = request_type(v.OFFSET_FETCH, version)
    if version < 8:
        t = nested(cls, "OffsetFetchRequestTopic")(name=topic, partition_indexes=(0, 1))
        r = client.call(
            v.OFFSET_FETCH,
            version,
            req(v.OFFSET_FETCH, version, group_id=group, topics=(t,), require_stable=False),
        )
        topics = r.topics
    else:
        t = nested(cls, "OffsetFetchRequestTopics")(name=topic, partition_indexes=(0, 1))
        g = build(nested(cls, "OffsetFetchRequestGroup"), group_id=group, topics=(t,))
        r = client.call(
            v.OFFSET_FETCH, version, req(v.OFFSET_FETCH, version, groups=(g,), require_stable=False)
        )
        (entry,) = r.groups
        assert entry.group_id == group and entry.error_code == ErrorCode.none
        topics = entry.topics
    return {p.partition_index: p.committed_offset for t in topics for p in t.partitions}


@pytest.mark.parametrize("version", range(2, 10))
def test_commit_and_fetch_every_version(client: WireClient, version: int) -> None:
    topic = f"offsets-{version}"
    assert create_topic(client, topic, 2).error_code == ErrorCode.none
    r = commit(client, version, f"simple-{version}", topic, 40 + version)
    assert [(t.name, [p.error_code for p in t.partitions]) for t in r.topics] == [
        (topic, [ErrorCode.none])
    ]
    unknown = commit(client, version, f"simple-{version}", "no-such-topic", 1)
    assert unknown.topics[0].partitions[0].error_code == ErrorCode.unknown_topic_or_partition
    for fetch_version in {1, version}:
        assert fetch(client, fetch_version, f"simple-{version}", topic) == {0: -1, 1: 40 + version}


def test_admin_apis_every_version(client: WireClient) -> None:
    topic = "admin-wire"
    assert create_topic(client, topic, 2).error_code == ErrorCode.none
    commit(client, 9, "admin-g", topic, 5)
    for version in range(0, 7):
        r = client.call(
            v.DESCRIBE_GROUPS,
            version,
            req(
                v.DESCRIBE_GROUPS,
                version,
                groups=("admin-g", "absent"),
                include_authorized_operations=False,
            ),
        )
        found, absent = r.groups
        assert (found.error_code, found.group_state) == (ErrorCode.none, "Empty")
        expected = ErrorCode.group_id_not_found if version >= 6 else ErrorCode.none
        assert absent.error_code == expected
    for version in range(0, 6):
        r = client.call(
            v.LIST_GROUPS,
            version,
            req(v.LIST_GROUPS, version, states_filter=("empty",), types_filter=()),
        )
        assert "admin-g" in {g.group_id for g in r.groups}
        if version >= 4:
            none = client.call(
                v.LIST_GROUPS,
                version,
                req(v.LIST_GROUPS, version, states_filter=("Stable",), types_filter=()),
            )
            assert "admin-g" not in {g.group_id for g in none.groups}

    cls = request_type(v.OFFSET_DELETE, 0)
    part = nested(cls, "OffsetDeleteRequestPartition")(partition_index=1)
    entry = nested(cls, "OffsetDeleteRequestTopic")(name=topic, partitions=(part,))
    r = client.call(v.OFFSET_DELETE, 0, cls(group_id="admin-g", topics=(entry,)))
    assert r.error_code == ErrorCode.none
    assert r.topics[0].partitions[0].error_code == ErrorCode.none
    assert fetch(client, 9, "admin-g", topic) == {0: -1, 1: -1}

    for version in range(0, 3):
        commit(client, 9, f"doomed-{version}", topic, 1)
        r = client.call(
            v.DELETE_GROUPS,
            version,
            req(v.DELETE_GROUPS, version, groups_names=(f"doomed-{version}", "absent")),
        )
        assert [(x.group_id, x.error_code) for x in r.results] == [
            (f"doomed-{version}", ErrorCode.none),
            ("absent", ErrorCode.group_id_not_found),
        ]
