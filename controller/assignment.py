"""Replica assignment for new topics and partitions, as Kafka's AdminUtils does it.

Goals (Kafka's): spread replicas evenly over the brokers; spread the other replicas of the
partitions a broker holds over the other brokers; put each partition's replicas on distinct
racks when every broker has one. The first replica (the preferred leader) goes round-robin
over the broker list from a random start; the others follow at a shift from it that grows
by one after each full round of the list, so successive rounds do not repeat the same
replica sets. With racks, the list is first rearranged to alternate racks.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from kio.schema.errors import ErrorCode

from gregor.controller.topics import TopicError

# broker id -> rack (None when the broker has no broker.rack)
Racks = Mapping[int, str | None]
Assignment = dict[int, list[int]]


def assign_replicas(
    racks: Racks,
    partitions: int,
    replication_factor: int,
    *,
    start_index: int = -1,
    first_partition: int = 0,
    rng: random.Random | None = None,
) -> Assignment:
    """Replicas for partitions `first_partition ..` of a topic, over the registered brokers.

    A negative `start_index` draws the start and the first shift at random, as Kafka does;
    a fixed one uses it for both (Kafka's fixedStartIndex). Racks are used only when every
    broker has one (Kafka's RackAwareMode.Safe)."""
    if partitions <= 0:
        raise TopicError(
            ErrorCode.invalid_partitions, "Number of partitions must be larger than 0."
        )
    if replication_factor <= 0:
        raise TopicError(
            ErrorCode.invalid_replication_factor, "Replication factor must be larger than 0."
        )
    if replication_factor > len(racks):
        raise TopicError(
            ErrorCode.invalid_replication_factor,
            f"Replication factor: {replication_factor} larger than available brokers: "
            f"{len(racks)}.",
        )
    rng = rng or random.Random()
    rack_aware = all(rack is not None for rack in racks.values())
    brokers = rack_alternated(racks) if rack_aware else sorted(racks)
    n = len(brokers)
    start = start_index if start_index >= 0 else rng.randrange(n)
    shift = start_index if start_index >= 0 else rng.randrange(n)
    result: Assignment = {}
    for p in range(first_partition, first_partition + partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        if rack_aware:
            result[p] = _rack_aware_replicas(brokers, racks, first, shift, replication_factor)
        else:
            result[p] = [brokers[first]] + [
                brokers[_follower_index(first, shift, j, n)] for j in range(replication_factor - 1)
            ]
    return result


def assign_new_partitions(
    racks: Racks, existing: Mapping[int, Sequence[int]], total: int
) -> Assignment:
    """Replicas for the partitions CreatePartitions adds to a topic (up to `total`): the
    topic's replication factor, continuing the round-robin from partition 0's first replica
    (Kafka's addPartitions)."""
    replicas0 = existing[0]
    brokers = sorted(racks)
    start = next((i for i, b in enumerate(brokers) if b >= replicas0[0]), 0)
    return assign_replicas(
        racks,
        total - len(existing),
        len(replicas0),
        start_index=start,
        first_partition=len(existing),
    )


def rack_alternated(racks: Racks) -> list[int]:
    """Brokers taken one per rack in turn (racks sorted, brokers sorted within each):
    rack a: 0 1 2, rack b: 3 4 5 -> 0 3 1 4 2 5."""
    by_rack: dict[str, list[int]] = {}
    for broker in sorted(racks):
        by_rack.setdefault(racks[broker] or "", []).append(broker)
    columns = [by_rack[rack] for rack in sorted(by_rack)]
    return [col[i] for i in range(max(map(len, columns))) for col in columns if i < len(col)]


def _follower_index(first: int, shift: int, j: int, n: int) -> int:
    """The j-th follower's index: never the first replica's, and distinct for j < n - 1."""
    return (first + 1 + (shift + j) % (n - 1)) % n


def _rack_aware_replicas(
    brokers: list[int], racks: Racks, first: int, shift: int, replication_factor: int
) -> list[int]:
    """Followers walk the alternated list as in the rack-unaware case (the shift scaled by the
    rack count), skipping a broker already chosen, and one whose rack already has a replica
    while some rack has none."""
    n = len(brokers)
    rack_count = len(set(racks.values()))
    leader = brokers[first]
    replicas = [leader]
    racks_used = {racks[leader]}
    k = 0
    while len(replicas) < replication_factor:
        broker = brokers[_follower_index(first, shift * rack_count, k, n)]
        k += 1
        rack = racks[broker]
        if (rack not in racks_used or len(racks_used) == rack_count) and broker not in replicas:
            replicas.append(broker)
            racks_used.add(rack)
    return replicas
