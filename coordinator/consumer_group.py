"""One group of the consumer protocol (KIP-848): its epochs, members, target assignment and
which member holds each partition.

Pure bookkeeping, as ``group.py`` is for the classic protocol: ``consumer_membership.py``
drives it and writes its records; ``replay`` rebuilds it from those records at load. The
group's committed offsets stay where every group's are, in the runtime's ``Group`` of the
same id (offsets are keyed by group id whatever the group's type).
"""

from __future__ import annotations

import asyncio
import enum
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from gregor.coordinator.assignors import Assignment
from gregor.coordinator.consumer_records import (
    ClassicMemberMetadata,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
)
from gregor.coordinator.reconciliation import MemberAssignment, MemberState

Partition = tuple[uuid.UUID, int]

# A member that left with epoch -2 (a static member that will be back, KIP-848): it keeps
# its partitions until its session expires.
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
LEAVE_GROUP_MEMBER_EPOCH = -1

NO_ASSIGNMENT = MemberAssignment(MemberState.STABLE, 0, 0, {}, {})


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(eq=False, slots=True)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    assignment: MemberAssignment = NO_ASSIGNMENT
    session_timer: asyncio.TimerHandle | None = None
    session_deadline: float = 0.0  # event-loop time
    rebalance_timer: asyncio.TimerHandle | None = None
    # Set for a member that joined with the classic protocol (JoinGroup; migration.py).
    classic: ClassicMemberMetadata | None = None

    @property
    def member_epoch(self) -> int:
        return self.assignment.member_epoch

    def metadata_value(self) -> ConsumerGroupMemberMetadataValue:
        return ConsumerGroupMemberMetadataValue(
            instance_id=self.instance_id,
            rack_id=self.rack_id,
            client_id=self.client_id,
            client_host=self.client_host,
            subscribed_topic_names=self.subscribed_topic_names,
            subscribed_topic_regex=self.subscribed_topic_regex,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            server_assignor=self.server_assignor,
            classic_member_metadata=self.classic,
        )

    def load_metadata(self, value: ConsumerGroupMemberMetadataValue) -> None:
        self.instance_id = value.instance_id
        self.rack_id = value.rack_id
        self.client_id = value.client_id
        self.client_host = value.client_host
        self.subscribed_topic_names = tuple(value.subscribed_topic_names)
        self.subscribed_topic_regex = value.subscribed_topic_regex
        self.rebalance_timeout_ms = value.rebalance_timeout_ms
        self.server_assignor = value.server_assignor
        self.classic = value.classic_member_metadata

    def assignment_value(self) -> ConsumerGroupCurrentMemberAssignmentValue:
        a = self.assignment
        return ConsumerGroupCurrentMemberAssignmentValue(
            member_epoch=a.member_epoch,
            previous_member_epoch=a.previous_member_epoch,
            state=int(a.state),
            assigned=a.assigned,
            pending_revocation=a.pending_revocation,
        )


@dataclass(eq=False)
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    metadata_hash: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    target: dict[str, Assignment] = field(default_factory=dict)  # member id -> its target
    # Partition -> (member id, member epoch) of the member holding it (assigned, or
    # pending revocation).
    owners: dict[Partition, tuple[str, int]] = field(default_factory=dict)
    # The topics each regex the members subscribe to matched (topic_regex.py), and the
    # metadata cache's count of added topics at the last resolution (-1: none since load).
    resolved_regexes: dict[str, ConsumerGroupRegularExpressionValue] = field(default_factory=dict)
    regex_topics_added: int = -1
    # When the group last became empty (ms), for the expiry of its offsets.
    state_timestamp: int = -1
    dead: bool = False

    @property
    def state(self) -> ConsumerGroupState:
        if self.dead:
            return ConsumerGroupState.DEAD
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        for member in self.members.values():
            a = member.assignment
            if a.state != MemberState.STABLE or a.member_epoch != self.assignment_epoch:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def is_empty(self) -> bool:
        return not self.members

    # -- members ----------------------------------------------------------------------------
    def add(self, member: ConsumerMember) -> None:
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id
        self._hold(member)

    def remove(self, member_id: str) -> ConsumerMember | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self._release(member)
        self.target.pop(member_id, None)
        if (
            member.instance_id is not None
            and self.static_members.get(member.instance_id) == member_id
        ):
            del self.static_members[member.instance_id]
        return member

    def replace_static_member(self, old: ConsumerMember, new_member_id: str) -> ConsumerMember:
        """A static member back with a new member id takes the old one's place and
        partitions, at epoch 0 (its next reconciliation brings it to the target epoch)."""
        self._release(old)
        del self.members[old.member_id]
        member = ConsumerMember(
            new_member_id,
            old.instance_id,
            old.rack_id,
            old.client_id,
            old.client_host,
            old.subscribed_topic_names,
            old.subscribed_topic_regex,
            old.rebalance_timeout_ms,
            old.server_assignor,
            MemberAssignment(MemberState.STABLE, 0, 0, old.assignment.assigned, {}),
        )
        target = self.target.pop(old.member_id, None)
        if target is not None:
            self.target[new_member_id] = target
        self.add(member)
        return member

    def set_assignment(self, member: ConsumerMember, assignment: MemberAssignment) -> None:
        self._release(member)
        member.assignment = assignment
        self._hold(member)

    def _hold(self, member: ConsumerMember) -> None:
        a = member.assignment
        entry = (member.member_id, a.member_epoch)
        for assignment in (a.assigned, a.pending_revocation):
            for topic, partitions in assignment.items():
                for p in partitions:
                    self.owners[(topic, p)] = entry

    def _release(self, member: ConsumerMember) -> None:
        a = member.assignment
        for assignment in (a.assigned, a.pending_revocation):
            for topic, partitions in assignment.items():
                for p in partitions:
                    owner = self.owners.get((topic, p))
                    if owner is not None and owner[0] == member.member_id:
                        del self.owners[(topic, p)]

    def owner_epoch_for(self, member_id: str) -> Callable[[uuid.UUID, int], int]:
        """Reconciliation's view of the partition epochs for one member: the epoch of the
        member holding a partition, -1 when it is free or held by this member itself."""
        owners = self.owners

        def owner_epoch(topic: uuid.UUID, partition: int) -> int:
            owner = owners.get((topic, partition))
            if owner is None or owner[0] == member_id:
                return -1
            return owner[1]

        return owner_epoch

    # -- the group's inputs -----------------------------------------------------------------
    def subscribed_topic_names(self) -> set[str]:
        """The topics the members subscribe to, by name or through a regex."""
        names = {t for m in self.members.values() for t in m.subscribed_topic_names}
        for regex in self.subscribed_regexes():
            resolved = self.resolved_regexes.get(regex)
            if resolved is not None:
                names.update(resolved.topics)
        return names

    def member_topic_names(self, member: ConsumerMember) -> set[str]:
        names = set(member.subscribed_topic_names)
        if member.subscribed_topic_regex is not None:
            resolved = self.resolved_regexes.get(member.subscribed_topic_regex)
            if resolved is not None:
                names.update(resolved.topics)
        return names

    def subscribed_regexes(self) -> Counter[str]:
        """How many members subscribe to each regex."""
        return Counter(
            m.subscribed_topic_regex
            for m in self.members.values()
            if m.subscribed_topic_regex is not None
        )

    def last_regex_refresh_ms(self) -> int:
        return max((r.timestamp_ms for r in self.resolved_regexes.values()), default=0)

    def preferred_assignor(self, default: str) -> str:
        """The server assignor most members ask for (Kafka's choice), else the default."""
        counts: dict[str, int] = {}
        for member in self.members.values():
            if member.server_assignor is not None:
                counts[member.server_assignor] = counts.get(member.server_assignor, 0) + 1
        if not counts:
            return default
        return max(counts, key=lambda name: counts[name])


# -- replay: the group as its records describe it (at load) ----------------------------------
ConsumerKey = (
    ConsumerGroupMetadataKey
    | ConsumerGroupMemberMetadataKey
    | ConsumerGroupTargetAssignmentMetadataKey
    | ConsumerGroupTargetAssignmentMemberKey
    | ConsumerGroupCurrentMemberAssignmentKey
    | ConsumerGroupRegularExpressionKey
)
CONSUMER_KEYS = (
    ConsumerGroupMetadataKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupRegularExpressionKey,
)


def replay_record(groups: dict[str, ConsumerGroup], key: ConsumerKey, value: object | None) -> None:
    """Apply one record of a consumer-protocol group; a tombstone of its metadata (type 3)
    removes it."""
    group_id = key.group_id
    group = groups.get(group_id)
    if isinstance(key, ConsumerGroupMetadataKey):
        if value is None:
            groups.pop(group_id, None)
            return
        assert isinstance(value, ConsumerGroupMetadataValue)
        group = group or groups.setdefault(group_id, ConsumerGroup(group_id))
        group.group_epoch, group.metadata_hash = value.epoch, value.metadata_hash
        return
    if group is None:
        if value is None:
            return
        group = groups[group_id] = ConsumerGroup(group_id)
    if isinstance(key, ConsumerGroupTargetAssignmentMetadataKey):
        if isinstance(value, ConsumerGroupTargetAssignmentMetadataValue):
            group.assignment_epoch = value.assignment_epoch
        return
    if isinstance(key, ConsumerGroupRegularExpressionKey):
        if isinstance(value, ConsumerGroupRegularExpressionValue):
            group.resolved_regexes[key.regex] = value
        else:
            group.resolved_regexes.pop(key.regex, None)
        return
    member_id = key.member_id
    if isinstance(key, ConsumerGroupTargetAssignmentMemberKey):
        if isinstance(value, ConsumerGroupTargetAssignmentMemberValue):
            group.target[member_id] = dict(value.assignment)
        else:
            group.target.pop(member_id, None)
        return
    member = group.members.get(member_id)
    if isinstance(key, ConsumerGroupMemberMetadataKey):
        if value is None:
            group.remove(member_id)
            return
        assert isinstance(value, ConsumerGroupMemberMetadataValue)
        if member is None:
            member = ConsumerMember(member_id)
            member.load_metadata(value)
            group.add(member)
        else:
            if member.instance_id is not None:
                group.static_members.pop(member.instance_id, None)
            member.load_metadata(value)
            if member.instance_id is not None:
                group.static_members[member.instance_id] = member_id
        return
    # The member's current assignment (type 8).
    if value is None:
        if member is not None:
            group.set_assignment(member, NO_ASSIGNMENT)
        return
    assert isinstance(value, ConsumerGroupCurrentMemberAssignmentValue)
    if member is None:
        member = ConsumerMember(member_id)
        group.add(member)
    group.set_assignment(
        member,
        MemberAssignment(
            MemberState(value.state),
            value.member_epoch,
            value.previous_member_epoch,
            dict(value.assigned),
            dict(value.pending_revocation),
        ),
    )
