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
assignment.

Both are rack-aware (Kafka 4.1's are not) when members give a rack id and the partitions'
replicas are on brokers with ``broker.rack``, under KIP-881's condition: some member rack holds
a replica of some partition, and some partition has no replica in some member rack (else racks
cannot improve anything and the result is exactly the rack-unaware one). As in KIP-881 and
KAFKA-19909 (apache/kafka PR 20000, the planned rack-aware UniformHomogeneousAssignmentBuilder)
the priority is balance, then rack locality, then stickiness: every member gets the same number
of partitions (per topic for ``range`` and heterogeneous ``uniform``) as without racks; only
which partitions it gets changes. Homogeneous ``uniform`` keeps a member's rack-matched
partitions (and those without racks; a member without a rack all its partitions) up to its
quota and releases the others (PR 20000's revocation), gives the free
partitions to rack-matched members with room first, then the rest to their previous owner if
it has room, else in turn. Heterogeneous ``uniform`` keeps what members hold (no revocation)
and matches free partitions to the same recipients the rack-unaware pass picks, rack-matched
first; its balancing moves a partition the taker's rack holds (or the giver's does not) first.
``range`` (KIP-881's RangeAssignor) gives each member the same count per topic, first the
partitions of its rack in order, then the remaining ones in order; topics with the same
partition count and subscribers are assigned together (partition p of each to the same
member), the racks of p being those common to all of them, so co-partitioning is kept.
"""

from __future__ import annotations

import heapq
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

Assignment = dict[uuid.UUID, frozenset[int]]  # topic id -> partitions; no empty sets kept
# The racks of the brokers holding a replica of (topic id, partition): one per replica, sorted.
PartitionRacks = Callable[[uuid.UUID, int], tuple[str, ...]]
# The partitions' racks now; None while no broker has a rack (nothing per partition to read).
RacksNow = Callable[[], PartitionRacks | None]
# The racks of the partitions of the subscribed topics, when rack-aware assignment applies.
_Racks = dict[tuple[uuid.UUID, int], frozenset[str]]

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
    assignor: str,
    members: Mapping[str, MemberSubscription],
    partitions: Mapping[uuid.UUID, int],
    partition_racks: PartitionRacks | None = None,
) -> dict[str, Assignment]:
    """Every member's new target assignment (members with nothing map to ``{}``).

    ``partitions``: topic id -> partition count of every subscribed topic that exists;
    subscriptions to other topics are ignored. ``partition_racks``: the racks of each
    partition's replicas (None: unknown). Deterministic for the same input. Raises
    KeyError for an unknown assignor name."""
    racks = _rack_aware(members, partitions, partition_racks)
    return _ASSIGNORS[assignor](members, partitions, racks)


def _rack_aware(
    members: Mapping[str, MemberSubscription],
    partitions: Mapping[uuid.UUID, int],
    partition_racks: PartitionRacks | None,
) -> _Racks | None:
    """The partitions' racks if racks can improve the assignment (KIP-881's condition), else
    None."""
    member_racks = {m.rack_id for m in members.values() if m.rack_id is not None}
    if partition_racks is None or not member_racks:
        return None
    racks = {
        (t, p): frozenset(partition_racks(t, p))
        for t, count in partitions.items()
        for p in range(count)
    }
    if any(r & member_racks for r in racks.values()) and any(
        not member_racks <= r for r in racks.values()
    ):
        return racks
    return None


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
    members: Mapping[str, MemberSubscription],
    partitions: Mapping[uuid.UUID, int],
    racks: _Racks | None,
) -> dict[str, Assignment]:
    subscriptions = _subscriptions(members, partitions)
    if len({tuple(topics) for topics in subscriptions.values()}) <= 1:
        return _uniform_homogeneous(members, subscriptions, partitions, racks)
    return _uniform_heterogeneous(members, subscriptions, partitions, racks)


def _uniform_homogeneous(
    members: Mapping[str, MemberSubscription],
    subscriptions: Mapping[str, list[uuid.UUID]],
    partitions: Mapping[uuid.UUID, int],
    racks: _Racks | None,
) -> dict[str, Assignment]:
    """UniformHomogeneousAssignmentBuilder: each member floor or ceiling of all partitions,
    keeping what it has up to its quota. The ceiling goes to the members that keep the most
    (then by member id), so a balanced current assignment is kept as it is and a new member
    takes only its floor from the others. With racks a member keeps only its rack-matched
    partitions (module docstring)."""
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
    previous: dict[tuple[uuid.UUID, int], str] = {}  # released for a rack mismatch
    for member_id, held in retained.items():
        if racks is not None:
            for tp in held:
                previous[tp] = member_id
            rack = members[member_id].rack_id
            held = [tp for tp in held if rack is None or not racks[tp] or rack in racks[tp]]
        owned[member_id] = held[: quota[member_id]]
        kept.update(owned[member_id])
    free = [(t, p) for t in topics for p in range(partitions[t]) if (t, p) not in kept]
    if racks is not None:
        free = _deal_by_rack(members, racks, free, owned, quota, previous)
    # Dealt one at a time in turn so that each topic is spread over the members too.
    unfilled = deque(m for m in retained if len(owned[m]) < quota[m])
    for tp in free:
        member_id = unfilled.popleft()
        owned[member_id].append(tp)
        if len(owned[member_id]) < quota[member_id]:
            unfilled.append(member_id)
    return {member_id: _freeze(owned[member_id]) for member_id in retained}


def _deal_by_rack(
    members: Mapping[str, MemberSubscription],
    racks: _Racks,
    free: list[tuple[uuid.UUID, int]],
    owned: dict[str, list[tuple[uuid.UUID, int]]],
    quota: Mapping[str, int],
    previous: Mapping[tuple[uuid.UUID, int], str],
) -> list[tuple[uuid.UUID, int]]:
    """Give each free partition to the least filled rack-matched member with room, else to
    its previous owner if it has room; returns the partitions left."""
    by_rack: dict[str, list[str]] = {}
    for member_id in owned:
        rack = members[member_id].rack_id
        if rack is not None:
            by_rack.setdefault(rack, []).append(member_id)
    unmatched = []
    for tp in free:
        candidates = [
            m
            for rack in sorted(racks[tp])
            for m in by_rack.get(rack, ())
            if len(owned[m]) < quota[m]
        ]
        if candidates:
            owned[min(candidates, key=lambda m: (len(owned[m]) - quota[m], m))].append(tp)
        else:
            unmatched.append(tp)
    left = []
    for tp in unmatched:
        owner = previous.get(tp)
        if owner is not None and len(owned[owner]) < quota[owner]:
            owned[owner].append(tp)
        else:
            left.append(tp)
    return left


def _uniform_heterogeneous(
    members: Mapping[str, MemberSubscription],
    subscriptions: Mapping[str, list[uuid.UUID]],
    partitions: Mapping[uuid.UUID, int],
    racks: _Racks | None,
) -> dict[str, Assignment]:
    """UniformHeterogeneousAssignmentBuilder: keep every partition of a still subscribed
    topic, give the free ones to the least loaded subscribers of their topic, then move
    partitions from the most to the least loaded subscribers of each topic, topic by topic,
    until a whole pass over the topics moves nothing. Racks choose only which partitions
    (module docstring)."""
    member_ids = list(subscriptions)  # index = position in member id order
    rack_of = [members[m].rack_id if racks is not None else None for m in member_ids]
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
        free = [p for p, current in enumerate(owners) if current == -1]
        recipients = []
        for _ in free:
            size, m = heap[0]
            recipients.append(m)
            sizes[m] = size + 1
            heapq.heapreplace(heap, (size + 1, m))
        for p, m in zip(free, _match(recipients, free, rack_of, topic, racks), strict=True):
            owners[p] = m

    movable = [t for t in topics if len(subscribers[t]) > 1]
    quiet = 0  # topics in a row whose balancing moved nothing
    for step in range(_MAX_BALANCE_PASSES * len(movable)):
        if quiet == len(movable):
            break
        topic = movable[step % len(movable)]
        moved = _balance_topic(owner[topic], subscribers[topic], sizes, rack_of, topic, racks)
        quiet = 0 if moved else quiet + 1

    owned: list[dict[uuid.UUID, set[int]]] = [{} for _ in member_ids]
    for topic, owners in owner.items():
        for p, m in enumerate(owners):
            owned[m].setdefault(topic, set()).add(p)
    return {
        member_id: {topic: frozenset(ps) for topic, ps in owned[index].items()}
        for index, member_id in enumerate(member_ids)
    }


def _match(
    recipients: list[int],
    free: list[int],
    rack_of: list[str | None],
    topic: uuid.UUID,
    racks: _Racks | None,
) -> list[int]:
    """The recipient of each free partition of ``topic``: without racks the k-th free
    partition goes to the k-th recipient; with racks each recipient in turn takes first the
    lowest free partition its rack holds, the others the rest in order."""
    if racks is None:
        return recipients
    owner: dict[int, int] = {}
    waiting = []
    for m in recipients:
        rack = rack_of[m]
        p = next((p for p in free if p not in owner and rack in racks[topic, p]), None)
        if p is None:
            waiting.append(m)
        else:
            owner[p] = m
    rest = iter(waiting)
    return [owner[p] if p in owner else next(rest) for p in free]


def _balance_topic(
    owners: list[int],
    subscribers: list[int],
    sizes: list[int],
    rack_of: list[str | None],
    topic: uuid.UUID,
    racks: _Racks | None,
) -> int:
    """Move partitions of one topic from its most loaded subscribers (by total partitions,
    then the last by member id; their highest partition, with racks the highest one the
    taker's rack holds, else one the giver's does not) to its least loaded ones (then the
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
        p = held[giver].pop(_to_move(held[giver], rack_of[giver], rack_of[taker], topic, racks))
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


def _to_move(
    held: list[int], giver: str | None, taker: str | None, topic: uuid.UUID, racks: _Racks | None
) -> int:
    """The index in ``held`` of the partition to move from giver to taker (their racks)."""
    if racks is None:
        return -1

    def rank(i: int) -> tuple[bool, bool, int]:
        r = racks[topic, held[i]]
        return (taker in r, giver not in r, i)

    return max(range(len(held)), key=rank)


def _range(
    members: Mapping[str, MemberSubscription],
    partitions: Mapping[uuid.UUID, int],
    racks: _Racks | None,
) -> dict[str, Assignment]:
    """RangeAssignor: per topic, its subscribers in order (static members by instance id,
    then the others by member id) take contiguous ranges, the first ``count % subscribers``
    of them one partition more; with racks, the same counts (module docstring)."""

    def order(member_id: str) -> tuple[bool, str, str]:
        instance_id = members[member_id].instance_id
        return (instance_id is None, instance_id or "", member_id)

    ordered = sorted(members, key=order)
    subscribers: dict[uuid.UUID, list[str]] = {}
    for member_id in ordered:
        for topic in members[member_id].topics:
            if topic in partitions:
                subscribers.setdefault(topic, []).append(member_id)
    # Co-partitioned topics (same partition count and subscribers) are assigned together.
    together: dict[tuple[int, tuple[str, ...]], list[uuid.UUID]] = {}
    for topic, members_of in subscribers.items():
        together.setdefault((partitions[topic], tuple(members_of)), []).append(topic)
    result: dict[str, Assignment] = {member_id: {} for member_id in ordered}
    for (count, subscribed), topics in together.items():
        floor, extra = divmod(count, len(subscribed))
        quotas = [floor + (i < extra) for i in range(len(subscribed))]
        if racks is None:
            owners = [i for i, q in enumerate(quotas) for _ in range(q)]
        else:
            common = [frozenset.intersection(*(racks[t, p] for t in topics)) for p in range(count)]
            owners = _range_by_rack([members[m].rack_id for m in subscribed], quotas, common)
        by_member: dict[int, list[int]] = {}
        for p, i in enumerate(owners):
            by_member.setdefault(i, []).append(p)
        for i, ps in by_member.items():
            for topic in topics:
                result[subscribed[i]][topic] = frozenset(ps)
    return result


def _range_by_rack(
    member_racks: list[str | None], quotas: list[int], partition_racks: list[frozenset[str]]
) -> list[int]:
    """The owner (index into the subscribers) of each partition: each subscriber in order
    takes the partitions its rack holds, lowest first, up to its quota; then each fills its
    quota with the lowest partitions left."""
    owners = [-1] * len(partition_racks)
    taken = [0] * len(quotas)
    for i, rack in enumerate(member_racks):
        for p, r in enumerate(partition_racks):
            if taken[i] == quotas[i]:
                break
            if owners[p] == -1 and rack in r:
                owners[p] = i
                taken[i] += 1
    left = iter(p for p, i in enumerate(owners) if i == -1)
    for i, quota in enumerate(quotas):
        for _ in range(quota - taken[i]):
            owners[next(left)] = i
    return owners


_ASSIGNORS: dict[
    str,
    Callable[
        [Mapping[str, MemberSubscription], Mapping[uuid.UUID, int], _Racks | None],
        dict[str, Assignment],
    ],
] = {"uniform": _uniform, "range": _range}
