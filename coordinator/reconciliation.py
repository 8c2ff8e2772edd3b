"""One member's reconciliation towards its target assignment: one step of Kafka's
CurrentAssignmentBuilder (group-coordinator modern/consumer/, 4.1), run on every heartbeat.

A member first gives up (revokes) what its target no longer holds, keeping its epoch, and
only then moves to the target epoch and receives the new partitions; a partition still held
by another member (revoking it) is *unreleased* and comes on a later heartbeat once freed.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum

from kio.schema.errors import ErrorCode

from gregor.coordinator.assignors import Assignment
from gregor.wire.errors import KafkaError


class MemberState(IntEnum):
    """The state in ConsumerGroupCurrentMemberAssignmentValue (record type 8)."""

    STABLE = 0  # reconciled to its epoch's target
    UNREVOKED_PARTITIONS = 1  # waiting for the member to revoke pending_revocation
    UNRELEASED_PARTITIONS = 2  # at the target epoch, waiting for others to release partitions
    UNKNOWN = 127  # a state written by a newer coordinator


@dataclass(frozen=True)
class MemberAssignment:
    state: MemberState
    member_epoch: int
    previous_member_epoch: int
    assigned: Assignment
    pending_revocation: Assignment


def reconcile(
    current: MemberAssignment,
    target_epoch: int,
    target: Assignment,
    owner_epoch: Callable[[uuid.UUID, int], int],
    owned: Assignment | None,
) -> MemberAssignment:
    """The member's next assignment, ``current`` itself when nothing changes.

    ``owner_epoch(topic, partition)``: the member epoch of the member holding the partition
    (assigned or pending revocation), -1 when nobody does. ``owned``: the partitions the
    heartbeat reports, None when unchanged since the last one (then the member is taken to
    still own everything it was asked to revoke). Raises FENCED_MEMBER_EPOCH for a member in
    the UNKNOWN state that still owns partitions: it must rejoin with none."""
    match current.state:
        case MemberState.STABLE:
            if current.member_epoch == target_epoch:
                return current
            return _next(current, current.member_epoch, target_epoch, target, owner_epoch, owned)
        case MemberState.UNREVOKED_PARTITIONS:
            if _owns_any(owned, current.pending_revocation):
                return current
            return _next(current, current.member_epoch, target_epoch, target, owner_epoch, owned)
        case MemberState.UNRELEASED_PARTITIONS:
            return _next(current, current.member_epoch, target_epoch, target, owner_epoch, owned)
        case _:
            if owned is None or any(owned.values()):
                raise KafkaError(
                    ErrorCode.fenced_member_epoch,
                    "The consumer group member is in a unknown state. "
                    "The member must abandon all its partitions and rejoin.",
                )
            return _next(current, target_epoch, target_epoch, target, owner_epoch, owned)


def _owns_any(owned: Assignment | None, partitions: Assignment) -> bool:
    if owned is None:
        return True
    return any(not ps.isdisjoint(partitions.get(topic, ())) for topic, ps in owned.items())


def _next(
    current: MemberAssignment,
    member_epoch: int,
    target_epoch: int,
    target: Assignment,
    owner_epoch: Callable[[uuid.UUID, int], int],
    owned: Assignment | None,
) -> MemberAssignment:
    """CurrentAssignmentBuilder.computeNextAssignment: keep ``assigned ∩ target``, revoke
    the rest; if the member still owns some of the revoked partitions it stays at
    ``member_epoch`` until it reports them gone, else it moves to ``target_epoch`` and gets
    the target's other partitions that nobody else holds."""
    kept: Assignment = {}
    revoking: Assignment = {}
    adding: Assignment = {}
    unreleased = False
    for topic in current.assigned.keys() | target.keys():
        wanted = target.get(topic, frozenset())
        held = current.assigned.get(topic, frozenset())
        keep = held & wanted
        # The member's own pending revocation is no other member's: it may take it back.
        own_revoking = current.pending_revocation.get(topic, frozenset())
        free = frozenset(
            p for p in wanted - keep if p in own_revoking or owner_epoch(topic, p) == -1
        )
        unreleased = unreleased or len(free) < len(wanted) - len(keep)
        for parts, ps in ((kept, keep), (revoking, held - keep), (adding, free)):
            if ps:
                parts[topic] = ps

    if revoking and _owns_any(owned, revoking):
        return MemberAssignment(
            MemberState.UNREVOKED_PARTITIONS, member_epoch, current.member_epoch, kept, revoking
        )
    for topic, ps in adding.items():
        kept[topic] = kept.get(topic, frozenset()) | ps
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return MemberAssignment(state, target_epoch, current.member_epoch, kept, {})
