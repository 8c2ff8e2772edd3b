"""The share groups' ``simple`` assignor (coordinator/share_assignor.py), and a share group's
records replayed into the group they describe (coordinator/share_group.py)."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from gregor.coordinator.records import decode_key
from gregor.coordinator.share_assignor import assign_simple
from gregor.coordinator.share_group import (
    ShareGroup,
    ShareMember,
    replay_share_record,
    share_group_tombstones,
)
from gregor.coordinator.share_records import (
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupMemberMetadataKey,
    ShareGroupMetadataKey,
    ShareGroupMetadataValue,
    ShareGroupStatePartitionMetadataKey,
    ShareGroupStatePartitionMetadataValue,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupTargetAssignmentMemberValue,
    ShareGroupTargetAssignmentMetadataKey,
    ShareGroupTargetAssignmentMetadataValue,
    TopicPartitionsInfo,
    decode_value,
    encode_value,
)

A = uuid.UUID(int=1)
B = uuid.UUID(int=2)


def count(assignment: dict[str, dict[uuid.UUID, frozenset[int]]]) -> dict[str, int]:
    return {m: sum(len(ps) for ps in a.values()) for m, a in assignment.items()}


def test_partitions_are_spread_over_members() -> None:
    target = assign_simple({"m1": frozenset({A}), "m2": frozenset({A})}, {A: 6}, {})
    assert count(target) == {"m1": 3, "m2": 3}
    assert target["m1"][A] | target["m2"][A] == frozenset(range(6))
    assert not target["m1"][A] & target["m2"][A]


def test_more_members_than_partitions_share_partitions() -> None:
    members = {f"m{i}": frozenset({A}) for i in range(5)}
    target = assign_simple(members, {A: 2}, {})
    # Each partition is shared by ceil(5 / 2) members: one member has both.
    assert sorted(count(target).values()) == [1, 1, 1, 1, 2]
    holders = [sum(1 for a in target.values() if p in a[A]) for p in range(2)]
    assert holders == [3, 3]


def test_it_is_sticky() -> None:
    subscriptions = {"m1": frozenset({A}), "m2": frozenset({A})}
    first = assign_simple(subscriptions, {A: 4}, {})
    subscriptions["m3"] = frozenset({A})
    second = assign_simple(subscriptions, {A: 4}, first)
    assert sorted(count(second).values()) == [1, 1, 2]
    for member in ("m1", "m2"):
        assert second[member][A] <= first[member][A]  # nothing moved between old members


def test_heterogeneous_subscriptions_assign_each_topic_to_its_subscribers() -> None:
    target = assign_simple(
        {"m1": frozenset({A}), "m2": frozenset({B}), "m3": frozenset({uuid.uuid4()})},
        {A: 2, B: 3},
        {},
    )
    assert target == {"m1": {A: frozenset({0, 1})}, "m2": {B: frozenset({0, 1, 2})}, "m3": {}}


@given(
    st.dictionaries(
        st.text("abc", min_size=1, max_size=3),
        st.sets(st.sampled_from([A, B]), min_size=1),
        min_size=1,
        max_size=8,
    ),
    st.integers(1, 7),
    st.integers(1, 7),
)
def test_every_subscribed_partition_is_assigned_deterministically(
    subscriptions: dict[str, set[uuid.UUID]], a: int, b: int
) -> None:
    frozen = {m: frozenset(t) for m, t in subscriptions.items()}
    target = assign_simple(frozen, {A: a, B: b}, {})
    assert target == assign_simple(dict(reversed(frozen.items())), {A: a, B: b}, {})
    for topic, n in ((A, a), (B, b)):
        if any(topic in t for t in frozen.values()):
            held = set().union(*(x.get(topic, frozenset()) for x in target.values()))
            assert held == set(range(n))
    for member, assignment in target.items():
        assert set(assignment) <= frozen[member]
    # Balanced within each pool of identical subscriptions.
    pools: dict[frozenset[uuid.UUID], list[int]] = {}
    for member, topics in frozen.items():
        pools.setdefault(topics, []).append(count(target)[member])
    for counts in pools.values():
        assert max(counts) - min(counts) <= 1


@given(
    st.integers(1, 9),
    st.integers(1, 9),
    st.dictionaries(st.integers(0, 8), st.sets(st.integers(0, 8)), max_size=9),
)
def test_any_current_assignment_comes_out_balanced(
    members: int, n: int, current: dict[int, set[int]]
) -> None:
    subscriptions = {f"m{i}": frozenset({A}) for i in range(members)}
    previous = {f"m{i}": {A: frozenset(ps)} for i, ps in current.items() if ps}
    target = assign_simple(subscriptions, {A: n}, previous)
    sharing = -(-members // n)
    assert [sum(1 for a in target.values() if p in a.get(A, ())) for p in range(n)] == [sharing] * n
    counts = count(target).values()
    assert max(counts) - min(counts) <= 1


def test_records_replay_into_the_group() -> None:
    group_id = "sg"
    info = TopicPartitionsInfo(A, "t", frozenset({0, 1}), 5)
    member = ShareMember("m1", None, "client", "/127.0.0.1", ("t",), 3, 2, {A: frozenset({0})})
    written = [
        (ShareGroupMetadataKey(group_id), ShareGroupMetadataValue(3, 99)),
        (ShareGroupMemberMetadataKey(group_id, "m1"), member.metadata_value()),
        (
            ShareGroupTargetAssignmentMemberKey(group_id, "m1"),
            ShareGroupTargetAssignmentMemberValue({A: frozenset({0})}),
        ),
        (
            ShareGroupTargetAssignmentMetadataKey(group_id),
            ShareGroupTargetAssignmentMetadataValue(3),
        ),
        (ShareGroupCurrentMemberAssignmentKey(group_id, "m1"), member.assignment_value()),
        (
            ShareGroupStatePartitionMetadataKey(group_id),
            ShareGroupStatePartitionMetadataValue((), (info,), ()),
        ),
    ]
    groups: dict[str, ShareGroup] = {}
    for key, value in written:
        replay_share_record(groups, key, decode_value(key, encode_value(value)))
    group = groups[group_id]
    assert (group.group_epoch, group.assignment_epoch, group.metadata_hash) == (3, 3, 99)
    loaded = group.members["m1"]
    assert (loaded.member_epoch, loaded.previous_member_epoch, loaded.assigned) == (
        3,
        2,
        {A: frozenset({0})},
    )
    assert loaded.metadata_value() == member.metadata_value()
    assert group.known_partitions() == {(A, 0), (A, 1)}
    assert group.state.value == "Stable"
    # Its tombstones take it away again.
    for key_bytes, value in share_group_tombstones(group):
        assert value is None
        replay_share_record(groups, decode_key(key_bytes), None)  # type: ignore[arg-type]
    assert groups == {}
