"""One consumer group of the classic protocol: members, generation, state, offsets.

Pure bookkeeping: the coordinator drives the transitions, completes the waiting
requests and writes the records.
"""

from __future__ import annotations

import asyncio
import enum
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from gregor.coordinator.records import GroupValue, MemberValue, OffsetValue
from gregor.wire.reader import BodyDecodeError, Reader

TopicPartition = tuple[str, int]


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(eq=False, slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]  # in the member's order of preference
    assignment: bytes = b""
    # The JoinGroup / SyncGroup request this member has parked, if any.
    join_waiter: asyncio.Future[Any] | None = None
    sync_waiter: asyncio.Future[Any] | None = None
    heartbeat_timer: asyncio.TimerHandle | None = None
    heartbeat_deadline: float = 0.0  # event-loop time
    is_new: bool = False

    def metadata(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str | None:
        return next((name for name, _ in self.protocols if name in candidates), None)


@dataclass(eq=False)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    state_timestamp: int = -1
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending_members: dict[str, asyncio.TimerHandle] = field(default_factory=dict)
    # Members of the current generation that have not sent SyncGroup yet, and the timer
    # that removes them after the rebalance timeout.
    pending_sync: set[str] = field(default_factory=set)
    pending_sync_timer: asyncio.TimerHandle | None = None
    offsets: dict[TopicPartition, OffsetValue] = field(default_factory=dict)
    new_member_added: bool = False
    # Bumped by every rebalance and reset: a delayed join of an earlier one is stale.
    rebalance_id: int = 0

    def is_(self, state: GroupState) -> bool:
        return self.state is state

    def transition(self, state: GroupState, now_ms: int) -> None:
        self.state = state
        self.state_timestamp = now_ms

    # -- membership -----------------------------------------------------------------------
    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self.pending_sync.discard(member_id)
        if member.group_instance_id is not None:
            self.static_members.pop(member.group_instance_id, None)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> Member:
        member = self.members.pop(old_id)
        member.member_id = new_id
        self.members[new_id] = member
        self.static_members[instance_id] = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        if self.leader_id == old_id:
            self.leader_id = new_id
        return member

    def is_static_member_fenced(self, instance_id: str | None, member_id: str) -> bool:
        if instance_id is None:
            return False
        known = self.static_members.get(instance_id)
        return known is not None and known != member_id

    def all_joined(self) -> bool:
        return not self.pending_members and all(
            m.join_waiter is not None for m in self.members.values()
        )

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if m.join_waiter is None]

    def maybe_elect_joined_leader(self) -> None:
        """A leader that has not rejoined (a static member) hands over to one that has."""
        leader = self.members.get(self.leader_id or "")
        if leader is not None and leader.join_waiter is not None:
            return
        joined = next((m for m in self.members.values() if m.join_waiter is not None), None)
        if joined is not None:
            self.leader_id = joined.member_id

    # -- protocols --------------------------------------------------------------------------
    def candidate_protocols(self) -> set[str]:
        counts = Counter(name for m in self.members.values() for name, _ in m.protocols)
        return {name for name, n in counts.items() if n == len(self.members)}

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Kafka's rule for a joining member: a protocol type and at least one protocol,
        each named once; in a group with members, their type and a protocol all of them
        support. Otherwise the join fails with INCONSISTENT_GROUP_PROTOCOL."""
        names = {name for name, _ in protocols}
        if not protocol_type or not protocols or len(names) != len(protocols):
            return False
        if not self.members:
            return True
        return protocol_type == self.protocol_type and not names.isdisjoint(
            self.candidate_protocols()
        )

    def select_protocol(self) -> str | None:
        """The protocol most members prefer among those all support; None if there is no
        such protocol (which the join checks keep from happening)."""
        candidates = self.candidate_protocols()
        votes = Counter(m.vote(candidates) for m in self.members.values())
        votes.pop(None, None)
        if not votes:
            return None
        best = max(votes.values())
        # Ties go to the protocol the earliest member prefers, so the choice is stable.
        return next(
            name
            for m in self.members.values()
            for name, _ in m.protocols
            if name in candidates and votes.get(name) == best
        )

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to, or None when the protocol is not "consumer"."""
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            parsed = parse_subscription_topics(member.metadata(self.protocol_name))
            if parsed is None:
                return None
            topics.update(parsed)
        return topics

    # -- persistence ------------------------------------------------------------------------
    def to_value(self, assignments: dict[str, bytes] | None = None) -> GroupValue:
        """The group metadata record; ``assignments`` overrides the members' current ones."""
        return GroupValue(
            self.protocol_type or "",
            self.generation,
            self.protocol_name,
            self.leader_id,
            self.state_timestamp,
            tuple(
                MemberValue(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.rebalance_timeout_ms,
                    m.session_timeout_ms,
                    m.metadata(self.protocol_name),
                    m.assignment if assignments is None else assignments.get(m.member_id, b""),
                )
                for m in self.members.values()
            ),
        )

    def load(self, value: GroupValue) -> None:
        """Take the state a group metadata record describes (at partition load)."""
        self.members.clear()
        self.static_members.clear()
        self.generation = value.generation
        self.protocol_type = value.protocol_type or None
        self.protocol_name = value.protocol
        self.leader_id = value.leader
        self.state_timestamp = value.state_timestamp
        for m in value.members:
            self.add(
                Member(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.rebalance_timeout_ms,
                    m.session_timeout_ms,
                    value.protocol_type,
                    [(value.protocol or "", m.subscription)],
                    m.assignment,
                )
            )
        self.leader_id = value.leader
        self.state = GroupState.STABLE if self.members else GroupState.EMPTY


def parse_subscription_topics(data: bytes) -> list[str] | None:
    """The topics of a ConsumerProtocolSubscription (any version), None if it won't parse."""
    r = Reader(data, 2)  # after the int16 version
    try:
        return [r.string(False) or "" for _ in range(r.count(2))]
    except BodyDecodeError:
        return None
