"""Partition leader election, as Kafka's PartitionLeaderElectionAlgorithms and Election do it.

Each election looks at the partition's assignment (its replicas in preference order), its
current ISR and the live brokers, and returns the new leader with the ISR to write, or None
when no replica qualifies. The leader epoch is bumped by the caller on writing.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

# leader_recovery_state (KIP-704): an unclean leader starts RECOVERING until it reports back.
RECOVERED = 0
RECOVERING = 1


@dataclass(frozen=True, slots=True)
class Elected:
    leader: int
    isr: list[int]
    # True when the leader was not in the ISR (an unclean election): the new state is
    # RECOVERING; otherwise the partition keeps its leader recovery state.
    unclean: bool = False


def offline_leader(
    assignment: Sequence[int], isr: Collection[int], live: Collection[int], unclean: bool
) -> int | None:
    """The first live ISR member in assignment order; failing that, if unclean election is
    allowed, the first live replica (which may lack acknowledged data)."""
    leader = next((r for r in assignment if r in live and r in isr), None)
    if leader is None and unclean:
        leader = next((r for r in assignment if r in live), None)
    return leader


def reassignment_leader(
    target: Sequence[int], isr: Collection[int], live: Collection[int]
) -> int | None:
    """The first live ISR member of the reassignment's target replicas."""
    return next((r for r in target if r in live and r in isr), None)


def preferred_leader(
    assignment: Sequence[int], isr: Collection[int], live: Collection[int]
) -> int | None:
    """The preferred replica (the first assigned), only if it is live and in the ISR."""
    if assignment and assignment[0] in live and assignment[0] in isr:
        return assignment[0]
    return None


def controlled_shutdown_leader(
    assignment: Sequence[int],
    isr: Collection[int],
    live: Collection[int],
    shutting_down: Collection[int],
) -> int | None:
    """The first live ISR member in assignment order that is not shutting down."""
    return next((r for r in assignment if r in live and r in isr and r not in shutting_down), None)


def elect_offline(
    assignment: Sequence[int], isr: Sequence[int], live: Collection[int], unclean: bool
) -> Elected | None:
    """For a partition whose leader is gone: the ISR keeps its live members; an unclean
    leader becomes the whole ISR."""
    leader = offline_leader(assignment, isr, live, unclean)
    if leader is None:
        return None
    if leader in isr:
        return Elected(leader, [r for r in isr if r in live])
    return Elected(leader, [leader], unclean=True)


def elect_reassigned(
    target: Sequence[int], isr: Sequence[int], live: Collection[int]
) -> Elected | None:
    leader = reassignment_leader(target, isr, live)
    return None if leader is None else Elected(leader, list(isr))


def elect_preferred(
    assignment: Sequence[int], isr: Sequence[int], live: Collection[int]
) -> Elected | None:
    leader = preferred_leader(assignment, isr, live)
    return None if leader is None else Elected(leader, list(isr))


def elect_for_controlled_shutdown(
    assignment: Sequence[int],
    isr: Sequence[int],
    live: Collection[int],
    shutting_down: Collection[int],
) -> Elected | None:
    """`live` includes the brokers shutting down (they still serve until they stop); the
    new ISR leaves them out."""
    leader = controlled_shutdown_leader(assignment, isr, live, shutting_down)
    if leader is None:
        return None
    return Elected(leader, [r for r in isr if r not in shutting_down])
