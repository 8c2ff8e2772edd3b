"""The server assignor of KIP-932 share groups, Kafka 4.1's ``simple`` (group-coordinator's
SimpleAssignor): a pure function from the members' subscriptions and current target
assignments to the next target assignment.

Every subscribed partition is assigned, since a share-partition's records are handed out
record by record and members may share a partition. The members subscribing to the same
topics share those topics' partitions as one pool, as Kafka's homogeneous builder does:
each partition goes to ceil(members / partitions) members (one while there are at least as
many partitions as members), and the members' counts differ by one at most. Balance comes
before stickiness: a member keeps what it has of its current target as far as the balance
allows. Where Kafka tolerates a partition one member short (every member short of
partitions holds it already), a swap with another partition's member fills it here.
Deterministic for the same input (members in member id order, partitions in topic
id then partition order), where Kafka follows its maps' order.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Mapping

from gregor.coordinator.assignors import Assignment

ASSIGNOR = "simple"  # group.share.assignors short name

Partition = tuple[uuid.UUID, int]


def assign_simple(
    subscriptions: Mapping[str, frozenset[uuid.UUID]],
    partitions: Mapping[uuid.UUID, int],
    current: Mapping[str, Assignment],
) -> dict[str, Assignment]:
    """Every member's new target (members with nothing map to ``{}``).

    ``subscriptions``: member id -> subscribed topic ids; ``partitions``: topic id ->
    partition count of every subscribed topic that exists (others are ignored);
    ``current``: each member's current target (stickiness)."""
    pools: dict[tuple[uuid.UUID, ...], list[str]] = defaultdict(list)
    for member_id in sorted(subscriptions):
        topics = tuple(sorted(t for t in subscriptions[member_id] if t in partitions))
        if topics:
            pools[topics].append(member_id)
    held: dict[str, set[Partition]] = defaultdict(set)
    for topics, members in pools.items():
        pool = [(t, p) for t in topics for p in range(partitions[t])]
        previous = {m: _partitions(current.get(m, {}), set(pool)) for m in members}
        for member_id, owned in _balance(pool, members, previous).items():
            held[member_id] |= owned
    out: dict[str, Assignment] = {}
    for member_id in subscriptions:
        assignment: dict[uuid.UUID, set[int]] = defaultdict(set)
        for topic, p in held.get(member_id, ()):
            assignment[topic].add(p)
        out[member_id] = {t: frozenset(ps) for t, ps in assignment.items()}
    return out


def _partitions(assignment: Assignment, pool: set[Partition]) -> list[Partition]:
    return sorted((t, p) for t, ps in assignment.items() for p in ps if (t, p) in pool)


def _balance(
    pool: list[Partition], members: list[str], previous: Mapping[str, list[Partition]]
) -> dict[str, set[Partition]]:
    """Each partition shared by ceil(members / partitions) members, each member's count
    spread evenly (in member order) over the assignments that makes; what members hold
    stays as far as that allows (Kafka's SimpleHomogeneousAssignmentBuilder)."""
    sharing = -(-len(members) // len(pool))
    total = sharing * len(pool)
    desired = {
        m: -(-total * (i + 1) // len(members)) - -(-total * i // len(members))
        for i, m in enumerate(members)
    }
    held = {m: list(previous[m]) for m in members}
    holders: dict[Partition, list[str]] = {p: [] for p in pool}
    for member_id in members:
        for partition in held[member_id]:
            holders[partition].append(member_id)
    # Revoke partitions shared by too many, from members holding too many first.
    for partition, owners in holders.items():
        for overfilled in (True, False):
            for member_id in list(owners):
                if len(owners) <= sharing:
                    break
                if (len(held[member_id]) > desired[member_id]) == overfilled:
                    owners.remove(member_id)
                    held[member_id].remove(partition)
    # Revoke the excess of members still holding too many.
    for member_id in members:
        while len(held[member_id]) > desired[member_id]:
            holders[held[member_id].pop()].remove(member_id)
    # Hand the partitions short of members to the members short of partitions, the
    # neediest first.
    for partition in pool:
        owners = holders[partition]
        while len(owners) < sharing:
            need = [
                (len(held[m]) - desired[m], i)
                for i, m in enumerate(members)
                if len(held[m]) < desired[m] and m not in owners
            ]
            if not need:
                _swap_in(
                    partition,
                    sharing,
                    holders,
                    held,
                    [m for m in members if len(held[m]) < desired[m]],
                )
                break
            taker = members[min(need)[1]]
            owners.append(taker)
            held[taker].append(partition)
    return {m: set(ps) for m, ps in held.items()}


def _swap_in(
    partition: Partition,
    sharing: int,
    holders: dict[Partition, list[str]],
    held: dict[str, list[Partition]],
    unfilled: list[str],
) -> None:
    """The partition is short of members but every member short of partitions holds it
    already (where Kafka leaves it short): a member of another partition takes it over,
    and a short member takes that other partition."""
    owners = holders[partition]
    for short in unfilled:
        if len(owners) >= sharing or short not in owners:
            continue
        for other, others in holders.items():
            if short in others:
                continue
            giver = next((m for m in others if m not in owners), None)
            if giver is None:
                continue
            others.remove(giver)
            held[giver].remove(other)
            others.append(short)
            held[short].append(other)
            owners.append(giver)
            held[giver].append(partition)
            break
