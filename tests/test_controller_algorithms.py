"""Replica assignment, CreatePartitions' rules and leader election: the pure algorithms of
controller/."""

from __future__ import annotations

import random
import uuid
from collections import Counter
from collections.abc import Sequence

import pytest
from kio.schema.errors import ErrorCode

from gregor.controller.assignment import assign_new_partitions, assign_replicas, rack_alternated
from gregor.controller.base import NewPartitions
from gregor.controller.metadata.cache import PartitionInfo, TopicInfo
from gregor.controller.topics import TopicError, check_partition_increase
from gregor.controller.zk_controller.election import (
    Elected,
    elect_for_controlled_shutdown,
    elect_offline,
    elect_preferred,
    elect_reassigned,
)

NO_RACKS = {b: None for b in range(5)}


def test_rack_unaware_matches_kafkas_documented_layout() -> None:
    # AdminUtils' own example: 5 brokers, 10 partitions, RF 3, start 0.
    got = assign_replicas(NO_RACKS, 10, 3, start_index=0)
    assert got[0] == [0, 1, 2]
    assert got[4] == [4, 0, 1]
    # After a full round of the broker list the followers shift by one more.
    assert got[5] == [0, 2, 3]
    assert got[9] == [4, 1, 2]


def test_rack_unaware_spreads_leaders_and_replicas_evenly() -> None:
    racks = {b: None for b in (3, 1, 2)}  # ids out of order: the list is sorted
    got = assign_replicas(racks, 300, 3, rng=random.Random(7))
    assert sorted(got) == list(range(300))
    assert all(len(set(r)) == 3 for r in got.values())
    assert Counter(r[0] for r in got.values()) == {1: 100, 2: 100, 3: 100}
    assert Counter(b for r in got.values() for b in r) == {1: 300, 2: 300, 3: 300}


def test_random_start_varies_the_first_leader() -> None:
    firsts = {assign_replicas(NO_RACKS, 1, 2, rng=random.Random(s))[0][0] for s in range(40)}
    assert len(firsts) > 1


def test_followers_of_a_brokers_partitions_spread_over_the_others() -> None:
    got = assign_replicas({b: None for b in range(4)}, 12, 2, start_index=0)
    followers_of_0 = {r[1] for r in got.values() if r[0] == 0}
    assert followers_of_0 == {1, 2, 3}


def test_rack_alternated_list() -> None:
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated(racks) == [0, 3, 1, 5, 4, 2]
    uneven = {0: "a", 1: "a", 2: "a", 3: "b"}
    assert rack_alternated(uneven) == [0, 3, 1, 2]


def test_rack_aware_matches_kafkas_documented_layout() -> None:
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    got = assign_replicas(racks, 7, 3, start_index=0)
    assert got[0] == [0, 3, 1]
    assert got[1] == [3, 1, 5]
    assert got[2] == [1, 5, 4]
    assert got[5] == [2, 0, 3]
    assert got[6] == [0, 4, 2]


def test_rack_aware_puts_replicas_on_distinct_racks() -> None:
    racks = {b: f"r{b % 3}" for b in range(9)}
    got = assign_replicas(racks, 90, 3, rng=random.Random(1))
    assert all(len({racks[b] for b in r}) == 3 for r in got.values())
    assert Counter(r[0] for r in got.values()) == {b: 10 for b in range(9)}
    # More replicas than racks: every rack still gets one, no broker twice.
    got = assign_replicas({0: "a", 1: "a", 2: "b", 3: "b"}, 8, 3, rng=random.Random(2))
    assert all(len(set(r)) == 3 and {"a", "b"} <= {racks_ab(b) for b in r} for r in got.values())


def racks_ab(broker: int) -> str:
    return "a" if broker < 2 else "b"


def test_racks_ignored_unless_every_broker_has_one() -> None:
    mixed = {0: "a", 1: None, 2: "b"}
    got = assign_replicas(mixed, 3, 3, start_index=0)
    assert got == assign_replicas({0: None, 1: None, 2: None}, 3, 3, start_index=0)


@pytest.mark.parametrize(
    ("partitions", "rf", "code"),
    [
        (0, 1, ErrorCode.invalid_partitions),
        (1, 0, ErrorCode.invalid_replication_factor),
        (1, 6, ErrorCode.invalid_replication_factor),
    ],
)
def test_assignment_errors(partitions: int, rf: int, code: ErrorCode) -> None:
    with pytest.raises(TopicError) as e:
        assign_replicas(NO_RACKS, partitions, rf)
    assert e.value.code == code


def test_replication_factor_message_names_the_broker_count() -> None:
    with pytest.raises(TopicError, match="Replication factor: 6 larger than available brokers: 5"):
        assign_replicas(NO_RACKS, 1, 6)


def test_new_partitions_continue_from_partition_zero() -> None:
    existing = assign_replicas(NO_RACKS, 3, 2, start_index=2)
    added = assign_new_partitions(NO_RACKS, existing, 6)
    assert sorted(added) == [3, 4, 5]
    assert all(len(r) == 2 for r in added.values())
    # Round-robin goes on where partition 0's leader put it: 2, 3, 4 led 0-2; then 0, 1, 2.
    assert [added[p][0] for p in (3, 4, 5)] == [0, 1, 2]


TWO_OF_RF_2 = TopicInfo(
    "t", uuid.uuid4(), {p: PartitionInfo(p, p, 0, [p, p + 1], [p, p + 1]) for p in (0, 1)}
)


@pytest.mark.parametrize(
    "count, assignments, code, message",
    [
        (1, None, ErrorCode.invalid_partitions, "currently has 2 partition(s); 1 would not"),
        (2, None, ErrorCode.invalid_partitions, "Topic already has 2 partition(s)."),
        (4, [[0, 1]], ErrorCode.invalid_replica_assignment, "add 2 additional partition(s)"),
        (3, [[0]], ErrorCode.invalid_replica_assignment, "with 1 replica(s)"),
        (3, [[0, 7]], ErrorCode.invalid_replica_assignment, "broker 7, but no such"),
        (3, [[1, 1]], ErrorCode.invalid_replica_assignment, "broker 1 more than once"),
    ],
)
def test_partition_increase_refused(
    count: int, assignments: Sequence[Sequence[int]] | None, code: ErrorCode, message: str
) -> None:
    """The rules both controllers apply to CreatePartitions, in Kafka's words."""
    with pytest.raises(TopicError) as e:
        check_partition_increase(TWO_OF_RF_2, NewPartitions("t", count, assignments), {0, 1, 2})
    assert e.value.code == code and message in e.value.message


@pytest.mark.parametrize("assignments", [None, [[2, 0], [0, 1]]])
def test_partition_increase_accepted(assignments: Sequence[Sequence[int]] | None) -> None:
    check_partition_increase(TWO_OF_RF_2, NewPartitions("t", 4, assignments), {0, 1, 2})


# Election -----------------------------------------------------------------------------


def test_offline_picks_first_live_isr_member_in_assignment_order() -> None:
    got = elect_offline([1, 2, 3], isr=[3, 2, 1], live={2, 3}, unclean=False)
    assert got == Elected(2, [3, 2])


def test_offline_without_live_isr_member_is_none_unless_unclean() -> None:
    assert elect_offline([1, 2, 3], isr=[1], live={2, 3}, unclean=False) is None
    got = elect_offline([1, 2, 3], isr=[1], live={3, 2}, unclean=True)
    assert got == Elected(2, [2], unclean=True)


def test_offline_unclean_prefers_a_clean_leader() -> None:
    got = elect_offline([1, 2, 3], isr=[1, 3], live={2, 3}, unclean=True)
    assert got == Elected(3, [3])


def test_offline_with_nothing_live() -> None:
    assert elect_offline([1, 2], isr=[1, 2], live=set(), unclean=True) is None


def test_preferred_only_when_first_replica_is_live_and_in_isr() -> None:
    assert elect_preferred([1, 2, 3], isr=[2, 1], live={1, 2}) == Elected(1, [2, 1])
    assert elect_preferred([1, 2, 3], isr=[2, 3], live={1, 2, 3}) is None
    assert elect_preferred([1, 2, 3], isr=[1, 2], live={2, 3}) is None


def test_reassignment_picks_from_the_target_replicas() -> None:
    assert elect_reassigned([4, 5], isr=[1, 4, 5], live={1, 4, 5}) == Elected(4, [1, 4, 5])
    assert elect_reassigned([4, 5], isr=[1, 5], live={1, 4, 5}) == Elected(5, [1, 5])
    assert elect_reassigned([4, 5], isr=[1], live={1, 4, 5}) is None


def test_controlled_shutdown_skips_the_stopping_broker_and_shrinks_it_out() -> None:
    got = elect_for_controlled_shutdown([1, 2, 3], isr=[1, 2, 3], live={1, 2, 3}, shutting_down={1})
    assert got == Elected(2, [2, 3])
    got = elect_for_controlled_shutdown([1, 2, 3], isr=[1, 3], live={1, 3}, shutting_down={1})
    assert got == Elected(3, [3])
    assert elect_for_controlled_shutdown([1, 2], isr=[1], live={1, 2}, shutting_down={1}) is None
