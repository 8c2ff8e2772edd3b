"""One share group (KIP-932): its epochs, members, target assignment, and the share-partitions
whose state it has had initialized.

Pure bookkeeping, as ``consumer_group.py`` is for the consumer protocol: ``share_membership.py``
drives it and writes its records (``share_records.py``, types 10-15); ``replay_share_record``
rebuilds it from those records at load. A share group commits no offsets: its progress is the
share-partitions' state in ``__share_group_state``.
"""

from __future__ import annotations

import asyncio
import enum
import uuid
from dataclasses import dataclass, field

from gregor.coordinator.assignors import Assignment
from gregor.coordinator.partitions import Records
from gregor.coordinator.reconciliation import MemberState
from gregor.coordinator.share_records import (
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupCurrentMemberAssignmentValue,
    ShareGroupMemberMetadataKey,
    ShareGroupMemberMetadataValue,
    ShareGroupMetadataKey,
    ShareGroupMetadataValue,
    ShareGroupStatePartitionMetadataKey,
    ShareGroupStatePartitionMetadataValue,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupTargetAssignmentMemberValue,
    ShareGroupTargetAssignmentMetadataKey,
    ShareGroupTargetAssignmentMetadataValue,
    ShareKey,
    ShareValue,
    TopicInfo,
    TopicPartitionsInfo,
    encode_key,
    encode_value,
)

LEAVE_GROUP_MEMBER_EPOCH = -1


class ShareGroupState(enum.Enum):
    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(eq=False, slots=True)
class ShareMember:
    member_id: str
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    member_epoch: int = 0
    previous_member_epoch: int = 0
    assigned: Assignment = field(default_factory=dict)
    session_timer: asyncio.TimerHandle | None = None
    session_deadline: float = 0.0  # event-loop time

    def metadata_value(self) -> ShareGroupMemberMetadataValue:
        return ShareGroupMemberMetadataValue(
            self.rack_id, self.client_id, self.client_host, self.subscribed_topic_names
        )

    def load_metadata(self, value: ShareGroupMemberMetadataValue) -> None:
        self.rack_id = value.rack_id
        self.client_id = value.client_id
        self.client_host = value.client_host
        self.subscribed_topic_names = tuple(value.subscribed_topic_names)

    def assignment_value(self) -> ShareGroupCurrentMemberAssignmentValue:
        return ShareGroupCurrentMemberAssignmentValue(
            self.member_epoch, self.previous_member_epoch, int(MemberState.STABLE), self.assigned
        )


@dataclass(eq=False)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    metadata_hash: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)  # member id -> its target
    # The share-partitions whose state was asked to be initialized, and those initialized
    # (record type 15), by topic id; topics whose state is being deleted.
    initializing: dict[uuid.UUID, TopicPartitionsInfo] = field(default_factory=dict)
    initialized: dict[uuid.UUID, TopicPartitionsInfo] = field(default_factory=dict)
    deleting: dict[uuid.UUID, TopicInfo] = field(default_factory=dict)
    dead: bool = False

    @property
    def state(self) -> ShareGroupState:
        if self.dead:
            return ShareGroupState.DEAD
        return ShareGroupState.STABLE if self.members else ShareGroupState.EMPTY

    def is_empty(self) -> bool:
        return not self.members

    def subscribed_topic_names(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed_topic_names}

    def state_partitions(self) -> ShareGroupStatePartitionMetadataValue:
        return ShareGroupStatePartitionMetadataValue(
            tuple(self.initializing[t] for t in sorted(self.initializing)),
            tuple(self.initialized[t] for t in sorted(self.initialized)),
            tuple(self.deleting[t] for t in sorted(self.deleting)),
        )

    def load_state_partitions(self, value: ShareGroupStatePartitionMetadataValue | None) -> None:
        if value is None:
            self.initializing, self.initialized, self.deleting = {}, {}, {}
            return
        self.initializing = {t.topic_id: t for t in value.initializing_topics}
        self.initialized = {t.topic_id: t for t in value.initialized_topics}
        self.deleting = {t.topic_id: t for t in value.deleting_topics}

    def known_partitions(self) -> set[tuple[uuid.UUID, int]]:
        """The share-partitions initialized or being initialized."""
        return {
            (topic, p)
            for infos in (self.initializing, self.initialized)
            for topic, info in infos.items()
            for p in info.partitions
        }


def record(key: ShareKey, value: ShareValue | None) -> tuple[bytes, bytes | None]:
    return encode_key(key), None if value is None else encode_value(value)


def member_tombstones(group_id: str, member_id: str) -> Records:
    """In Kafka's order: current assignment, target assignment, member metadata."""
    return [
        record(ShareGroupCurrentMemberAssignmentKey(group_id, member_id), None),
        record(ShareGroupTargetAssignmentMemberKey(group_id, member_id), None),
        record(ShareGroupMemberMetadataKey(group_id, member_id), None),
    ]


def share_group_tombstones(group: ShareGroup) -> Records:
    """Every record of the group, tombstoned: its members', the target assignment's, the
    share-partitions' and then the group's metadata."""
    group_id = group.group_id
    records: Records = []
    for member_id in group.members:
        records += member_tombstones(group_id, member_id)
    records.append(record(ShareGroupTargetAssignmentMetadataKey(group_id), None))
    records.append(record(ShareGroupStatePartitionMetadataKey(group_id), None))
    records.append(record(ShareGroupMetadataKey(group_id), None))
    return records


# -- replay: the group as its records describe it (at load) ----------------------------------
SHARE_KEYS = (
    ShareGroupMemberMetadataKey,
    ShareGroupMetadataKey,
    ShareGroupTargetAssignmentMetadataKey,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupStatePartitionMetadataKey,
)


def replay_share_record(groups: dict[str, ShareGroup], key: ShareKey, value: object | None) -> None:
    """Apply one record of a share group; a tombstone of its metadata (type 11) removes it."""
    group_id = key.group_id
    group = groups.get(group_id)
    if isinstance(key, ShareGroupMetadataKey):
        if value is None:
            groups.pop(group_id, None)
            return
        assert isinstance(value, ShareGroupMetadataValue)
        group = group or groups.setdefault(group_id, ShareGroup(group_id))
        group.group_epoch, group.metadata_hash = value.epoch, value.metadata_hash
        return
    if group is None:
        if value is None:
            return
        group = groups[group_id] = ShareGroup(group_id)
    if isinstance(key, ShareGroupTargetAssignmentMetadataKey):
        if isinstance(value, ShareGroupTargetAssignmentMetadataValue):
            group.assignment_epoch = value.assignment_epoch
        return
    if isinstance(key, ShareGroupStatePartitionMetadataKey):
        assert value is None or isinstance(value, ShareGroupStatePartitionMetadataValue)
        group.load_state_partitions(value)
        return
    member_id = key.member_id
    if isinstance(key, ShareGroupTargetAssignmentMemberKey):
        if isinstance(value, ShareGroupTargetAssignmentMemberValue):
            group.target[member_id] = dict(value.assignment)
        else:
            group.target.pop(member_id, None)
        return
    member = group.members.get(member_id)
    if value is None:
        if isinstance(key, ShareGroupMemberMetadataKey):
            group.members.pop(member_id, None)
        elif member is not None:
            member.member_epoch = member.previous_member_epoch = 0
            member.assigned = {}
        return
    if member is None:
        member = group.members[member_id] = ShareMember(member_id)
    if isinstance(value, ShareGroupMemberMetadataValue):
        member.load_metadata(value)
    elif isinstance(value, ShareGroupCurrentMemberAssignmentValue):
        member.member_epoch = value.member_epoch
        member.previous_member_epoch = value.previous_member_epoch
        member.assigned = dict(value.assigned)
