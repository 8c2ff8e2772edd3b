"""coordinator/reconciliation.py: Kafka's CurrentAssignmentBuilderTest cases as a table, and a
simulated group whose members never hold a partition twice and always converge."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from gregor.coordinator.assignors import Assignment
from gregor.coordinator.reconciliation import MemberAssignment, MemberState, reconcile
from gregor.wire.errors import KafkaError

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)

STABLE = MemberState.STABLE
UNREVOKED = MemberState.UNREVOKED_PARTITIONS
UNRELEASED = MemberState.UNRELEASED_PARTITIONS


def parts(t1: tuple[int, ...] = (), t2: tuple[int, ...] = ()) -> Assignment:
    return {t: frozenset(ps) for t, ps in ((T1, t1), (T2, t2)) if ps}


def member(
    state: MemberState,
    epoch: int,
    previous: int,
    assigned: Assignment,
    pending: Assignment | None = None,
) -> MemberAssignment:
    return MemberAssignment(state, epoch, previous, assigned, pending or {})


def epochs(held: dict[tuple[uuid.UUID, int], int]) -> Callable[[uuid.UUID, int], int]:
    return lambda topic, p: held.get((topic, p), -1)


def every(epoch: int) -> Callable[[uuid.UUID, int], int]:
    return lambda topic, p: epoch


# (name, current, target epoch, target, owner epochs, owned, expected)
CASES = [
    (
        "stable to stable",
        member(STABLE, 10, 10, parts((1, 2, 3), (4, 5, 6))),
        11,
        parts((1, 2, 3), (4, 5, 6)),
        every(10),
        None,
        member(STABLE, 11, 10, parts((1, 2, 3), (4, 5, 6))),
    ),
    (
        "stable to stable with new partitions",
        member(STABLE, 10, 10, parts((1, 2, 3), (4, 5, 6))),
        11,
        parts((1, 2, 3, 4), (4, 5, 6, 7)),
        every(-1),
        None,
        member(STABLE, 11, 10, parts((1, 2, 3, 4), (4, 5, 6, 7))),
    ),
    (
        "stable to unrevoked partitions",
        member(STABLE, 10, 10, parts((1, 2, 3), (4, 5, 6))),
        11,
        parts((2, 3, 4), (5, 6, 7)),
        every(-1),
        None,
        member(UNREVOKED, 10, 10, parts((2, 3), (5, 6)), parts((1,), (4,))),
    ),
    (
        "stable to unreleased partitions",
        member(STABLE, 10, 10, parts((1, 2, 3), (4, 5, 6))),
        11,
        parts((1, 2, 3, 4), (4, 5, 6, 7)),
        every(10),
        None,
        member(UNRELEASED, 11, 10, parts((1, 2, 3), (4, 5, 6))),
    ),
    (
        # Partition 6 is revoked but the member no longer reports it: no need to wait.
        "stable to unreleased, owned partitions without the revoked ones",
        member(STABLE, 10, 10, parts((1, 2, 3), (4, 5, 6))),
        11,
        parts((1, 2, 3), (4, 5, 7)),
        lambda topic, p: 10 if topic == T2 else -1,
        {},
        member(UNRELEASED, 11, 10, parts((1, 2, 3), (4, 5))),
    ),
    (
        "unrevoked partitions to stable",
        member(UNREVOKED, 10, 10, parts((2, 3), (5, 6)), parts((1,), (4,))),
        11,
        parts((2, 3), (5, 6)),
        every(-1),
        parts((2, 3), (5, 6)),
        member(STABLE, 11, 10, parts((2, 3), (5, 6))),
    ),
    (
        "unrevoked partitions to unrevoked partitions",
        member(UNREVOKED, 10, 10, parts((2, 3), (5, 6)), parts((1,), (4,))),
        12,
        parts((3,), (6,)),
        every(-1),
        parts((2, 3), (5, 6)),
        member(UNREVOKED, 10, 10, parts((3,), (6,)), parts((2,), (5,))),
    ),
    (
        "unrevoked partitions to unreleased partitions",
        member(UNREVOKED, 11, 10, parts((2, 3), (5, 6))),
        11,
        parts((2, 3, 4), (5, 6, 7)),
        every(10),
        parts((2, 3), (5, 6)),
        member(UNRELEASED, 11, 11, parts((2, 3), (5, 6))),
    ),
    (
        # Partition 4 is pending revocation by this very member and back in its target.
        "unrevoked to stable, a partition pending revocation comes back",
        member(UNREVOKED, 10, 10, parts((2, 3), (5, 6)), parts((4,))),
        12,
        parts((2, 3, 4), (5, 6, 7)),
        epochs({(T1, 2): 10, (T1, 3): 10, (T1, 4): 10, (T2, 5): 10, (T2, 6): 10}),
        parts((2, 3), (5, 6)),
        member(STABLE, 12, 10, parts((2, 3, 4), (5, 6, 7))),
    ),
    (
        "unreleased partitions to stable",
        member(UNRELEASED, 11, 11, parts((2, 3), (5, 6))),
        12,
        parts((2, 3), (5, 6)),
        every(10),
        None,
        member(STABLE, 12, 11, parts((2, 3), (5, 6))),
    ),
    (
        "unreleased partitions to stable with new partitions",
        member(UNRELEASED, 11, 11, parts((2, 3), (5, 6))),
        11,
        parts((2, 3, 4), (5, 6, 7)),
        every(-1),
        None,
        member(STABLE, 11, 11, parts((2, 3, 4), (5, 6, 7))),
    ),
    (
        "unreleased partitions to unreleased partitions",
        member(UNRELEASED, 11, 11, parts((2, 3), (5, 6))),
        11,
        parts((2, 3, 4), (5, 6, 7)),
        every(10),
        None,
        member(UNRELEASED, 11, 11, parts((2, 3), (5, 6))),
    ),
    (
        "unreleased partitions to unrevoked partitions",
        member(UNRELEASED, 11, 11, parts((2, 3), (5, 6))),
        12,
        parts((3,), (6,)),
        every(10),
        None,
        member(UNREVOKED, 11, 11, parts((3,), (6,)), parts((2,), (5,))),
    ),
    (
        "unknown state, the member rejoined owning nothing",
        member(MemberState.UNKNOWN, 11, 11, parts((3,), (6,)), parts((2,), (5,))),
        12,
        parts((3,), (6,)),
        every(11),
        {},
        member(STABLE, 12, 11, parts((3,), (6,))),
    ),
    (
        "stable at the target epoch stays as it is",
        member(STABLE, 12, 11, parts((3,), (6,))),
        12,
        parts((1, 3), (6,)),
        every(-1),
        None,
        member(STABLE, 12, 11, parts((3,), (6,))),
    ),
    (
        "a topic gone from the target is revoked entirely",
        member(STABLE, 5, 4, parts((0, 1), (0,))),
        6,
        parts((0, 1)),
        every(-1),
        parts((0, 1), (0,)),
        member(UNREVOKED, 5, 5, parts((0, 1)), parts(t2=(0,))),
    ),
]


@pytest.mark.parametrize(
    ("current", "target_epoch", "target", "owner_epoch", "owned", "expected"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_kafka_cases(
    current: MemberAssignment,
    target_epoch: int,
    target: Assignment,
    owner_epoch: Callable[[uuid.UUID, int], int],
    owned: Assignment | None,
    expected: MemberAssignment,
) -> None:
    assert reconcile(current, target_epoch, target, owner_epoch, owned) == expected


@pytest.mark.parametrize(
    "owned",
    [None, parts((1, 2, 3), (5, 6)), parts((2, 3), (4, 5, 6))],
    ids=["owned unchanged", "still owns topic 1's", "still owns topic 2's"],
)
def test_remains_in_unrevoked_partitions_while_the_member_owns_one(
    owned: Assignment | None,
) -> None:
    current = member(UNREVOKED, 10, 10, parts((2, 3), (5, 6)), parts((1,), (4,)))
    got = reconcile(current, 12, parts((3,), (6,)), every(-1), owned)
    assert got is current


@pytest.mark.parametrize("owned", [None, parts((3,))], ids=["owned unchanged", "owns one"])
def test_unknown_state_fences_a_member_that_owns_partitions(owned: Assignment | None) -> None:
    current = member(MemberState.UNKNOWN, 11, 11, parts((3,), (6,)), parts((2,), (5,)))
    with pytest.raises(KafkaError) as caught:
        reconcile(current, 12, parts((3,), (6,)), every(10), owned)
    assert caught.value.code == ErrorCode.fenced_member_epoch


# A simulated group: each step either publishes a new target (epoch + 1: every partition
# to one member or to nobody) or lets one member heartbeat. A client that reports (True)
# has first revoked what the previous answer dropped and taken what it added, and reports
# that; one that does not (None) still holds what it held.
MEMBERS = ("a", "b", "c")
PARTITIONS = [(t, p) for t in (T1, T2) for p in range(4)]
targets = st.lists(st.sampled_from((*MEMBERS, None)), min_size=8, max_size=8)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("target"), targets),
        st.tuples(st.just("heartbeat"), st.sampled_from(MEMBERS), st.booleans()),
    ),
    max_size=40,
)


def to_targets(owners: list[str | None]) -> dict[str, Assignment]:
    by_member: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in MEMBERS}
    for (topic, p), m in zip(PARTITIONS, owners, strict=True):
        if m is not None:
            by_member[m].setdefault(topic, set()).add(p)
    return {m: {t: frozenset(ps) for t, ps in a.items()} for m, a in by_member.items()}


def flat(*assignments: Assignment) -> set[tuple[uuid.UUID, int]]:
    return {(t, p) for a in assignments for t, ps in a.items() for p in ps}


class Group:
    def __init__(self) -> None:
        self.epoch = 0
        self.target = to_targets([None] * len(PARTITIONS))
        self.members = {m: member(STABLE, 0, 0, {}) for m in MEMBERS}
        self.answered: dict[str, Assignment] = {m: {} for m in MEMBERS}  # the last answer
        self.holds: dict[str, Assignment] = {m: {} for m in MEMBERS}  # what the client has

    def owner_epoch(self, topic: uuid.UUID, p: int) -> int:
        for state in self.members.values():
            if (topic, p) in flat(state.assigned, state.pending_revocation):
                return state.member_epoch
        return -1

    def heartbeat(self, m: str, report: bool) -> None:
        if report:
            self.holds[m] = self.answered[m]
        owned = self.holds[m] if report else None
        state = reconcile(self.members[m], self.epoch, self.target[m], self.owner_epoch, owned)
        self.members[m] = state
        self.answered[m] = state.assigned

    def check(self) -> None:
        on_server: set[tuple[uuid.UUID, int]] = set()
        on_clients: set[tuple[uuid.UUID, int]] = set()
        for m, state in self.members.items():
            assert state.member_epoch <= self.epoch
            held = flat(state.assigned, state.pending_revocation)
            assert flat(self.holds[m]) <= held, "a client holds what the server does not know"
            assert not held & on_server, "a partition held by two members"
            assert not flat(self.holds[m]) & on_clients, "a partition held by two clients"
            on_server |= held
            on_clients |= flat(self.holds[m])


@settings(max_examples=150, deadline=None)
@given(steps)
def test_members_never_share_a_partition_and_converge(
    events: list[tuple[Any, ...]],
) -> None:
    group = Group()
    for event in events:
        if event[0] == "target":
            group.epoch += 1
            group.target = to_targets(event[1])
        else:
            group.heartbeat(event[1], event[2])
        group.check()
    for _ in range(4):  # revoke, then assign, then pick up the released partitions
        for m in MEMBERS:
            group.heartbeat(m, True)
            group.check()
    for m in MEMBERS:
        state = group.members[m]
        assert (state.state, state.member_epoch) == (STABLE, group.epoch)
        assert state.assigned == group.target[m]
        assert state.pending_revocation == {}
        assert group.holds[m] == group.target[m]
