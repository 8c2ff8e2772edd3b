"""The server-side assignors of KIP-848 consumer groups, Kafka 4.1's ``uniform`` and ``range``
(group-coordinator's UniformAssignor and RangeAssignor): pure functions from the members'
subscriptions and current target assignments to the next target assignment.

``uniform`` balances the number of partitions per member (floor or ceiling of the share) and
is sticky: a member keeps what it has of its current target, only the excess moves. With
identical subscriptions (homogeneous) the balance is exact over all topics; otherwise
(heterogeneous) partitions go to the least loaded subscribers of their topic and are then
moved from the most to the least loaded subscribers until each topic's subscribers differ by
at most one. ``range`` gives each topic's subscribers contiguous ranges, static members first
(by instance id), then the others by member id, the first members one partition more, so that
co-partitioned topics line up; it is sticky through that order, not through the current
assignment. Neither looks at racks (as in 4.1).
"""

from __future__ import annotations

import heapq
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

Assignment = dict[uuid.UUID, frozenset[int]]  # topic id -> partitions; no empty sets kept

ASSIGNORS: tuple[str, ...] = ("uniform", "range")  # group.consumer.assignors short names

# The heterogeneous balancing passes over all topics at most this often (Kafka's
# MAX_ITERATION_COUNT): overlapping subscriptions converge slowly, each pass roughly halves
# the imbalance.
_MAX_BALANCE_PASSES = 16


@dataclass(frozen=True)
class MemberSubscription:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    topics: frozenset[uuid.UUID]  # resolved subscription (names and regex -> ids)
    assignment: Assignment  # its current *target* assignment (stickiness)


def assign(
    assignor: str, members: Mapping[str, MemberSubscription], partitions: Mapping[uuid.UUID, int]
) -> dict[str, Assignment]:
    """Every member's new target assignment (members with nothing map to ``{}``).

    ``partitions``: topic id -> partition count of every subscribed topic that exists;
    subscriptions to other topics are ignored. Deterministic for the same input. Raises
    KeyError for an unknown assignor name."""
    return _ASSIGNORS[assignor](members, partitions)


def _subscriptions(
    members: Mapping[str, MemberSubscription], partitions: Mapping[uuid.UUID, int]
) -> dict[str, list[uuid.UUID]]:
    """Each member's subscribed topics that exist, sorted; members in member id order."""
    return {
        member_id: sorted(t for t in members[member_id].topics if t in partitions)
        for member_id in sorted(members)
    }


def _retained(
    members: Mapping[str, MemberSubscription],
    subscriptions: Mapping[str, list[uuid.UUID]],
    partitions: Mapping[uuid.UUID, int],
) -> dict[str, list[tuple[uuid.UUID, int]]]:
    """What each member may keep of its current target: partitions of topics it still
    subscribes to that still exist, each kept by one member only (the first by member id),
    sorted."""
    taken: set[tuple[uuid.UUID, int]] = set()
    retained: dict[str, list[tuple[uuid.UUID, int]]] = {}
    for member_id, topics in subscriptions.items():
        current = members[member_id].assignment
        kept = retained[member_id] = []
        for topic in topics:
            count = partitions[topic]
            for p in sorted(current.get(topic, ())):
                if p < count and (topic, p) not in taken:
                    taken.add((topic, p))
                    kept.append((topic, p))
    return retained


def _freeze(owned: Iterable[tuple[uuid.UUID, int]]) -> Assignment:
    by_topic: dict[uuid.UUID, set[int]] = {}
    for topic, p in owned:
        by_topic.setdefault(topic, set()).add(p)
    return {topic: frozenset(ps) for topic, ps in by_topic.items()}


def _uniform(
    members: Mapping[str, MemberSubscription], partitions: Mapping[uuid.UUID, int]
) -> dict[str, Assignment]:
    subscriptions = _subscriptions(members, partitions)
    if len({tuple(topics) for topics in subscriptions.values()}) <= 1:
        return _uniform_homogeneous(members, subscriptions, partitions)
    return _uniform_heterogeneous(members, subscriptions, partitions)


def _uniform_homogeneous(
    members: Mapping[str, MemberSubscription],
    subscriptions: Mapping[str, list[uuid.UUID]],
    partitions: Mapping[uuid.UUID, int],
) -> dict[str, Assignment]:
    """UniformHomogeneousAssignmentBuilder: each member floor or ceiling of all partitions,
    keeping what it has up to its quota. The ceiling goes to the members that keep the most
    (then by member id), so a balanced current assignment is kept as it is and a new member
    takes only its floor from the others."""
    if not members:
        return {}
    topics = next(iter(subscriptions.values()))
    retained = _retained(members, subscriptions, partitions)
    total = sum(partitions[t] for t in topics)
    floor, extra = divmod(total, len(members))
    by_holdings = sorted(retained, key=lambda m: (-len(retained[m]), m))
    quota = {m: floor + (i < extra) for i, m in enumerate(by_holdings)}

    owned: dict[str, list[tuple[uuid.UUID, int]]] = {}
    kept: set[tuple[uuid.UUID, int]] = set()
    for member_id, held in retained.items():
        owned[member_id] = held[: quota[member_id]]
        kept.update(owned[member_id])
    # Dealt one at a time in turn so that each topic is spread over the members too.
    unfilled = deque(m for m in retained if len(owned[m]) < quota[m])
    for topic in topics:
        for p in range(partitions[topic]):
            if (topic, p) in kept:
                continue
            member_id = unfilled.popleft()
            owned[member_id].append((topic, p))
            if len(owned[member_id]) < quota[member_id]:
                unfilled.append(member_id)
    return {member_id: _freeze(owned[member_id]) for member_id in retained}


def _uniform_heterogeneous(
    members: Mapping[str, MemberSubscription],
    subscriptions: Mapping[str, list[uuid.UUID]],
    partitions: Mapping[uuid.UUID, int],
) -> dict[str, Assignment]:
    """UniformHeterogeneousAssignmentBuilder: keep every partition of a still subscribed
    topic, give the free ones to the least loaded subscribers of their topic, then move
    partitions from the most to the least loaded subscribers of each topic, topic by topic,
    until a whole pass over the topics moves nothing."""
    member_ids = list(subscriptions)  # index = position in member id order
    subscribers: dict[uuid.UUID, list[int]] = {}
    for index, topics in enumerate(subscriptions.values()):
        for topic in topics:
            subscribers.setdefault(topic, []).append(index)
    owner = {topic: [-1] * partitions[topic] for topic in subscribers}
    sizes = [0] * len(member_ids)
    for index, held in enumerate(_retained(members, subscriptions, partitions).values()):
        for topic, p in held:
            owner[topic][p] = index
        sizes[index] = len(held)

    # Topics with the most partitions per subscriber first: they are the hardest to balance.
    def topic_order(topic: uuid.UUID) -> tuple[float, int, uuid.UUID]:
        count = len(subscribers[topic])
        return (-partitions[topic] / count, count, topic)

    topics = sorted(subscribers, key=topic_order)
    for topic in topics:
        heap = [(sizes[m], m) for m in subscribers[topic]]
        heapq.heapify(heap)
        owners = owner[topic]
        for p, current in enumerate(owners):
            if current == -1:
                size, m = heap[0]
                owners[p] = m
                sizes[m] = size + 1
                heapq.heapreplace(heap, (size + 1, m))

    movable = [t for t in topics if len(subscribers[t]) > 1]
    quiet = 0  # topics in a row whose balancing moved nothing
    for step in range(_MAX_BALANCE_PASSES * len(movable)):
        if quiet == len(movable):
            break
        topic = movable[step % len(movable)]
        quiet = 0 if _balance_topic(owner[topic], subscribers[topic], sizes) else quiet + 1

    owned: list[dict[uuid.UUID, set[int]]] = [{} for _ in member_ids]
    for topic, owners in owner.items():
        for p, m in enumerate(owners):
            owned[m].setdefault(topic, set()).add(p)
    return {
        member_id: {topic: frozenset(ps) for topic, ps in owned[index].items()}
        for index, member_id in enumerate(member_ids)
    }


def _balance_topic(owners: list[int], subscribers: list[int], sizes: list[int]) -> int:
    """Move partitions of one topic from its most loaded subscribers (by total partitions,
    then the last by member id; their highest partition) to its least loaded ones (then the
    first by member id) while they differ by more than one. Returns the number moved."""
    held: dict[int, list[int]] = {m: [] for m in subscribers}
    for p, m in enumerate(owners):
        held[m].append(p)
    # Lazy heaps: an entry is current while its size is the member's size.
    givers = [(-sizes[m], -m) for m in subscribers if held[m]]
    takers = [(sizes[m], m) for m in subscribers]
    heapq.heapify(givers)
    heapq.heapify(takers)
    moved = 0
    while givers and takers:
        giver_size, giver = -givers[0][0], -givers[0][1]
        if giver_size != sizes[giver] or not held[giver]:
            heapq.heappop(givers)
            continue
        taker_size, taker = takers[0]
        if taker_size != sizes[taker]:
            heapq.heappop(takers)
            continue
        if giver_size - taker_size <= 1:
            break
        p = held[giver].pop()
        owners[p] = taker
        sizes[giver] -= 1
        sizes[taker] += 1
        moved += 1
        heapq.heapreplace(takers, (sizes[taker], taker))
        heapq.heappush(takers, (sizes[giver], giver))
        if held[giver]:
            heapq.heappush(givers, (-sizes[giver], -giver))
        if held[taker]:
            heapq.heappush(givers, (-sizes[taker], -taker))
    return moved


def _range(
    members: Mapping[str, MemberSubscription], partitions: Mapping[uuid.UUID, int]
) -> dict[str, Assignment]:
    """RangeAssignor: per topic, its subscribers in order (static members by instance id,
    then the others by member id) take contiguous ranges, the first ``count % subscribers``
    of them one partition more."""

    def order(member_id: str) -> tuple[bool, str, str]:
        instance_id = members[member_id].instance_id
        return (instance_id is None, instance_id or "", member_id)

    ordered = sorted(members, key=order)
    subscribers: dict[uuid.UUID, list[str]] = {}
    for member_id in ordered:
        for topic in members[member_id].topics:
            if topic in partitions:
                subscribers.setdefault(topic, []).append(member_id)
    result: dict[str, Assignment] = {member_id: {} for member_id in ordered}
    for topic, subscribed in subscribers.items():
        floor, extra = divmod(partitions[topic], len(subscribed))
        start = 0
        for i, member_id in enumerate(subscribed):
            end = start + floor + (i < extra)
            if end > start:
                result[member_id][topic] = frozenset(range(start, end))
            start = end
    return result


_ASSIGNORS: dict[
    str,
    Callable[[Mapping[str, MemberSubscription], Mapping[uuid.UUID, int]], dict[str, Assignment]],
] = {"uniform": _uniform, "range": _range}
