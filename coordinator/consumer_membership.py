"""Group membership of the consumer protocol (KIP-848): ConsumerGroupHeartbeat (joining with
epoch 0, heartbeats, leaving with -1, static members leaving with -2 and taking their place
back), the session and rebalance timers, the target assignment and each member's
reconciliation towards it; ConsumerGroupDescribe's view and the deletion of empty groups.

Kafka's GroupMetadataManager is the model. The live groups are in memory (the runtime's
``consumer_groups``); each change is applied at once and its records written through the
runtime, and the heartbeat is answered once they are committed (the records are replayed
only at load, as a classic group's metadata is).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import struct
import uuid
from collections.abc import Callable, Iterable, Mapping, Sized
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from kio.schema.errors import ErrorCode

from gregor.coordinator import session_timer, topic_regex
from gregor.coordinator.assignors import (
    Assignment,
    MemberSubscription,
    PartitionRacks,
    RacksNow,
    assign,
)
from gregor.coordinator.consumer_group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    NO_ASSIGNMENT,
    ConsumerGroup,
    ConsumerMember,
)
from gregor.coordinator.consumer_records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    ConsumerKey,
    ConsumerValue,
    encode_key,
    encode_value,
)
from gregor.coordinator.partitions import Records
from gregor.coordinator.reconciliation import MemberAssignment, MemberState, reconcile
from gregor.coordinator.records import encode_group_key
from gregor.coordinator.runtime import CoordinatorRuntime, log_failure, replay_group
from gregor.coordinator.settings import Settings
from gregor.coordinator.topic_regex import Describable
from gregor.wire.errors import KafkaError

if TYPE_CHECKING:
    from gregor.coordinator.migration import Migration

logger = logging.getLogger(__name__)

_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_TOPIC_HASH_MAGIC = b"\x01"  # the topic hash's version (Kafka's TOPIC_HASH_MAGIC_BYTE's part)
# The heartbeat interval answered to a member waiting for partitions that others have yet to
# release (Kafka answers the group's interval, 5 s by default): it learns of them only when it
# heartbeats, so three members joining a new group at once would read 5 s later.
WAITING_HEARTBEAT_INTERVAL_MS = 200


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None
    rack_id: str | None
    rebalance_timeout_ms: int  # -1: unchanged
    subscribed_topic_names: tuple[str, ...] | None  # None: unchanged
    subscribed_topic_regex: str | None
    server_assignor: str | None
    owned: Assignment | None  # the partitions the member holds; None: unchanged
    client_id: str
    client_host: str
    api_version: int = 1


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None  # None: unchanged


@dataclass(frozen=True, slots=True)
class GroupTiming:
    """The group's session timeout and heartbeat interval (its group configs, else the
    broker's)."""

    session_timeout_ms: int
    heartbeat_interval_ms: int


class TopicInfo(Protocol):
    """What the coordinator reads of a topic in the broker's metadata (the metadata
    cache's TopicInfo)."""

    @property
    def topic_id(self) -> uuid.UUID: ...

    @property
    def partitions(self) -> Sized: ...


def record(key: ConsumerKey, value: ConsumerValue | None) -> tuple[bytes, bytes | None]:
    return encode_key(key), None if value is None else encode_value(value)


def as_assignment(pairs: Iterable[tuple[uuid.UUID, Iterable[int]]]) -> Assignment:
    """Topic id -> partitions, without empty entries (as every Assignment is kept)."""
    out: Assignment = {}
    for topic, partitions in pairs:
        parts = frozenset(partitions)
        if parts:
            earlier = out.get(topic)
            out[topic] = parts if earlier is None else earlier | parts
    return out


class ConsumerMembership:
    def __init__(
        self,
        settings: Settings,
        runtime: CoordinatorRuntime,
        now_ms: Callable[[], int],
        racks: RacksNow,
    ) -> None:
        """``racks``: the racks of partitions' replicas, from the broker's metadata (the
        rack-aware assignors' input, and part of the subscriptions' metadata hash)."""
        self.settings = settings
        self._racks = racks
        self._runtime = runtime
        self._groups = runtime.consumer_groups  # the runtime's: loaded and unloaded there
        self._now = now_ms
        # Group epoch bumps by heartbeats (Kafka's consumer-group-rebalance-count).
        self.rebalances = 0
        # The online migration between the protocols (migration.py), wired by the coordinator.
        self.migration: Migration | None = None

    # -- loading and unloading --------------------------------------------------------------
    def resume(self, group: ConsumerGroup) -> None:
        """A loaded group's members have a session from now on (a classic member's own)."""
        for member in group.members.values():
            timeout_ms = self.settings.consumer_session_timeout_ms
            if member.classic is not None:
                timeout_ms = member.classic.session_timeout_ms
            self.extend_session(group, member, timeout_ms)

    def unload(self, group: ConsumerGroup) -> None:
        group.dead = True
        for member in group.members.values():
            _cancel(member)

    # -- ConsumerGroupHeartbeat -------------------------------------------------------------
    def heartbeat(
        self,
        request: HeartbeatRequest,
        timing: GroupTiming,
        topics: Mapping[str, TopicInfo],
        topics_added: int,
        describable: Describable | None,
    ) -> HeartbeatResult | asyncio.Future[HeartbeatResult]:
        """``topics``: the cluster's topics by name (the subscriptions' metadata);
        ``topics_added`` and ``describable``: what regex subscriptions are resolved with
        (``topic_regex.update``)."""
        try:
            self._validate(request)
            error = self._runtime.owner_error(request.group_id)
            if error is not None:
                return HeartbeatResult(error)
            if request.member_epoch < 0:
                result, records = self._leave(request)
            else:
                result, records = self._heartbeat(
                    request, timing, topics, topics_added, describable
                )
        except KafkaError as e:
            return HeartbeatResult(e.code, e.message)
        return self._write(request.group_id, records, result)

    def _write(
        self, group_id: str, records: Records, result: HeartbeatResult
    ) -> HeartbeatResult | asyncio.Future[HeartbeatResult]:
        """Answer once the records are committed (at once when there are none)."""
        if not records:
            return result
        future: asyncio.Future[HeartbeatResult] = asyncio.get_running_loop().create_future()

        def done(error: ErrorCode) -> None:
            if future.done():
                return
            future.set_result(result if error == ErrorCode.none else HeartbeatResult(error))

        self._runtime.write_records(group_id, records, done)
        return future

    def _validate(self, r: HeartbeatRequest) -> None:
        """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid."""

        def invalid(message: str) -> KafkaError:
            return KafkaError(ErrorCode.invalid_request, message)

        if not r.group_id.strip():
            raise invalid("GroupId can't be empty.")
        if r.instance_id is not None and not r.instance_id.strip():
            raise invalid("InstanceId can't be empty.")
        if r.rack_id is not None and not r.rack_id.strip():
            raise invalid("RackId can't be empty.")
        if (
            r.api_version >= 1 or r.member_epoch > 0 or r.member_epoch == LEAVE_GROUP_MEMBER_EPOCH
        ) and not r.member_id.strip():
            raise invalid("MemberId can't be empty.")
        if r.member_epoch == 0:
            if r.rebalance_timeout_ms == -1:
                raise invalid("RebalanceTimeoutMs must be provided in first request.")
            if r.owned is None or r.owned:
                raise invalid("TopicPartitions must be empty when (re-)joining.")
            if r.subscribed_topic_names is None and r.subscribed_topic_regex is None:
                raise invalid(
                    "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
                )
        elif r.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if r.instance_id is None:
                raise invalid("InstanceId can't be null.")
        elif r.member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise invalid("MemberEpoch is invalid.")
        if r.subscribed_topic_regex:
            topic_regex.validate(r.subscribed_topic_regex)
        assignors = self.settings.consumer_assignors
        if r.server_assignor is not None and r.server_assignor not in assignors:
            raise KafkaError(
                ErrorCode.unsupported_assignor,
                f"ServerAssignor {r.server_assignor} is not supported. "
                f"Supported assignors: {', '.join(assignors)}.",
            )

    def _heartbeat(
        self,
        r: HeartbeatRequest,
        timing: GroupTiming,
        topics: Mapping[str, TopicInfo],
        topics_added: int,
        describable: Describable | None,
    ) -> tuple[HeartbeatResult, Records]:
        records: Records = []
        group = self._group_for(r, records)
        member, replaced = self._member_for(group, r, records)
        member_id = member.member_id
        previous = member.assignment

        # The member's metadata: what the request leaves null is unchanged.
        subscription = (member.subscribed_topic_names, member.subscribed_topic_regex)
        metadata = member.metadata_value()
        if r.instance_id is not None:
            member.instance_id = r.instance_id
        if r.rack_id is not None:
            member.rack_id = r.rack_id
        if r.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = r.rebalance_timeout_ms
        if r.subscribed_topic_names is not None:
            member.subscribed_topic_names = tuple(sorted(set(r.subscribed_topic_names)))
        if r.subscribed_topic_regex is not None:
            member.subscribed_topic_regex = r.subscribed_topic_regex or None
        if r.server_assignor is not None:
            member.server_assignor = r.server_assignor
        member.client_id, member.client_host = r.client_id, r.client_host
        if replaced or member.metadata_value() != metadata or member_id not in group.members:
            if member_id not in group.members:
                group.add(member)
            records.append(
                record(
                    ConsumerGroupMemberMetadataKey(group.group_id, member_id),
                    member.metadata_value(),
                )
            )
        bump = (member.subscribed_topic_names, member.subscribed_topic_regex) != subscription
        regexes_changed, regex_records = topic_regex.update(
            group, topics.keys(), topics_added, self._now(), describable
        )
        records.extend(regex_records)
        bump |= regexes_changed

        updated = self.advance(group, member, bump, replaced, r.owned, topics, records)
        self.extend_session(group, member, timing.session_timeout_ms)
        send = (
            r.member_epoch == 0
            or replaced
            or updated.assigned != previous.assigned
            or (r.owned is not None and r.owned != updated.assigned)
        )
        interval = timing.heartbeat_interval_ms
        if updated.state == MemberState.UNRELEASED_PARTITIONS:
            interval = min(interval, WAITING_HEARTBEAT_INTERVAL_MS)
        return HeartbeatResult(
            ErrorCode.none,
            None,
            member_id,
            updated.member_epoch,
            interval,
            updated.assigned if send else None,
        ), records

    def advance(
        self,
        group: ConsumerGroup,
        member: ConsumerMember,
        bump: bool,
        replaced: bool,
        owned: Assignment | None,
        topics: Mapping[str, TopicInfo],
        records: Records,
    ) -> MemberAssignment:
        """What follows a member's update, for ConsumerGroupHeartbeat and a classic member's
        JoinGroup (migration.py) alike: the group epoch (bumped by ``bump`` or a change of
        the subscribed topics' metadata), the target assignment, and one reconciliation step
        of the member towards its target; returns the member's new assignment."""
        previous = member.assignment
        # The group epoch moves with its members' subscriptions and their topics' metadata.
        partitions, metadata_hash = subscribed_partitions(
            group.subscribed_topic_names(), topics, self._racks()
        )
        if bump or metadata_hash != group.metadata_hash:
            group.group_epoch += 1
            self.rebalances += 1
            group.metadata_hash = metadata_hash
            records.append(self._group_record(group))
        if group.group_epoch > group.assignment_epoch:
            records.extend(self._update_target(group, partitions, topics))

        # One step of the member towards its target.
        updated = reconcile(
            member.assignment,
            group.assignment_epoch,
            group.target.get(member.member_id, {}),
            group.owner_epoch_for(member.member_id),
            owned,
        )
        if replaced or updated != member.assignment:
            group.set_assignment(member, updated)
            records.append(
                record(
                    ConsumerGroupCurrentMemberAssignmentKey(group.group_id, member.member_id),
                    member.assignment_value(),
                )
            )
        self._schedule_rebalance_timeout(group, member, previous)
        return updated

    def _group_for(self, r: HeartbeatRequest, records: Records) -> ConsumerGroup:
        """The group, created by a join (epoch 0); an empty classic group of the id makes
        way for it (its offsets stay), a classic group with members does not."""
        group_id = r.group_id
        group = self._groups.get(group_id)
        if group is not None:
            if group.dead:
                raise KafkaError(
                    ErrorCode.coordinator_not_available, "The coordinator is not available."
                )
            return group
        if group_id in self._runtime.share_groups:
            raise KafkaError(
                ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group."
            )
        classic = self._runtime.groups.get(group_id)
        if classic is not None and (classic.members or classic.pending_members):
            if classic.members and r.member_epoch == 0 and self.migration is not None:
                return self.migration.upgrade(classic, records)  # the online upgrade
            raise KafkaError(
                ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group."
            )
        if r.member_epoch != 0:
            raise KafkaError(ErrorCode.group_id_not_found, f"Consumer group {group_id} not found.")
        if classic is not None and (classic.protocol_type or classic.generation):
            records.append((encode_group_key(group_id), None))
            replay_group(self._runtime.groups, group_id, None)
        group = self._groups[group_id] = ConsumerGroup(group_id, state_timestamp=self._now())
        return group

    def _member_for(
        self, group: ConsumerGroup, r: HeartbeatRequest, records: Records
    ) -> tuple[ConsumerMember, bool]:
        """The member the request is from (a new one when it joins), and whether it is a
        static member that took its place back under a new member id (the old id's records
        are tombstoned, its target moves to the new one)."""
        member_id = r.member_id or str(uuid.uuid4())  # v0 joins may leave it to us
        if r.instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                if r.member_epoch != 0:
                    raise KafkaError(
                        ErrorCode.unknown_member_id,
                        f"Member {member_id} is not a member of group {group.group_id}.",
                    )
                self.check_capacity(group)
                return ConsumerMember(member_id), False
            self._check_epoch(group, member, r)
            return member, False
        old_id = group.static_members.get(r.instance_id)
        old = None if old_id is None else group.members.get(old_id)
        if r.member_epoch == 0:
            if old is None:
                self.check_capacity(group)
                return ConsumerMember(member_id, r.instance_id), False
            # A classic member's instance is taken over at once (migration), as Kafka does.
            if old.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH and old.classic is None:
                raise KafkaError(
                    ErrorCode.unreleased_instance_id,
                    f"Static member {member_id} with instance id {r.instance_id} cannot join "
                    f"the group because the instance id is owned by {old.member_id} member.",
                )
            return self.take_over_instance(group, old, member_id, records), True
        if old is None:
            raise KafkaError(
                ErrorCode.unknown_member_id,
                f"Instance id {r.instance_id} is unknown in group {group.group_id}.",
            )
        if old.member_id != member_id:
            raise KafkaError(
                ErrorCode.fenced_instance_id,
                f"Static member {member_id} with instance id {r.instance_id} was fenced by "
                f"member {old.member_id}.",
            )
        self._check_epoch(group, old, r)
        return old, False

    def check_capacity(self, group: ConsumerGroup) -> None:
        limit = self.settings.consumer_max_size
        if len(group.members) >= limit:
            raise KafkaError(
                ErrorCode.group_max_size_reached,
                f"The consumer group has reached its maximum capacity of {limit} members.",
            )

    def take_over_instance(
        self, group: ConsumerGroup, old: ConsumerMember, member_id: str, records: Records
    ) -> ConsumerMember:
        """A static member rejoining under a new member id takes its instance's place: the old
        id's timers stop, its records are tombstoned and its target moves to the new id."""
        _cancel(old)
        member = group.replace_static_member(old, member_id)
        records.extend(_member_tombstones(group.group_id, old.member_id))
        records.append(
            record(
                ConsumerGroupTargetAssignmentMemberKey(group.group_id, member_id),
                ConsumerGroupTargetAssignmentMemberValue(group.target.get(member_id, {})),
            )
        )
        return member

    def _check_epoch(
        self, group: ConsumerGroup, member: ConsumerMember, r: HeartbeatRequest
    ) -> None:
        """Kafka's throwIfConsumerGroupMemberEpochIsInvalid; epoch 0 rejoins: the member
        gives up what it held."""
        epoch, known = r.member_epoch, member.member_epoch
        if epoch == 0:
            group.set_assignment(member, NO_ASSIGNMENT)
            return
        if epoch > known:
            raise KafkaError(
                ErrorCode.fenced_member_epoch,
                f"The consumer group member has a greater member epoch ({epoch}) than the one "
                f"known by the group coordinator ({known}). The member must abandon all its "
                "partitions and rejoin.",
            )
        if epoch < known:
            previous = member.assignment.previous_member_epoch
            if epoch != previous or r.owned is None or not _within(r.owned, member.assignment):
                raise KafkaError(
                    ErrorCode.fenced_member_epoch,
                    f"The consumer group member has a smaller member epoch ({epoch}) than the "
                    f"one known by the group coordinator ({known}). The member must abandon "
                    "all its partitions and rejoin.",
                )

    def _update_target(
        self,
        group: ConsumerGroup,
        partitions: Mapping[uuid.UUID, int],
        topics: Mapping[str, TopicInfo],
    ) -> Records:
        """The target assignment of the group epoch, with the assignor most members ask
        for (else ``group.consumer.assignors``' first)."""
        assignor = group.preferred_assignor(self.settings.consumer_assignors[0])
        subscriptions = {
            member_id: MemberSubscription(
                member_id,
                m.instance_id,
                m.rack_id,
                frozenset(
                    topics[name].topic_id for name in group.member_topic_names(m) if name in topics
                ),
                group.target.get(member_id, {}),
            )
            for member_id, m in group.members.items()
        }
        target = assign(assignor, subscriptions, partitions, self._racks())
        records: Records = [
            record(
                ConsumerGroupTargetAssignmentMemberKey(group.group_id, member_id),
                ConsumerGroupTargetAssignmentMemberValue(assignment),
            )
            for member_id, assignment in target.items()
            if group.target.get(member_id, {}) != assignment
        ]
        group.target = {member_id: target.get(member_id, {}) for member_id in group.members}
        group.assignment_epoch = group.group_epoch
        records.append(
            record(
                ConsumerGroupTargetAssignmentMetadataKey(group.group_id),
                ConsumerGroupTargetAssignmentMetadataValue(group.assignment_epoch),
            )
        )
        return records

    def _group_record(self, group: ConsumerGroup) -> tuple[bytes, bytes | None]:
        return record(
            ConsumerGroupMetadataKey(group.group_id),
            ConsumerGroupMetadataValue(group.group_epoch, group.metadata_hash),
        )

    # -- leaving ----------------------------------------------------------------------------
    def _leave(self, r: HeartbeatRequest) -> tuple[HeartbeatResult, Records]:
        group = self._groups.get(r.group_id)
        if group is None or group.dead:
            raise KafkaError(
                ErrorCode.group_id_not_found, f"Consumer group {r.group_id} not found."
            )
        if r.instance_id is None:
            member = group.members.get(r.member_id)
            if member is None:
                raise KafkaError(
                    ErrorCode.unknown_member_id,
                    f"Member {r.member_id} is not a member of group {group.group_id}.",
                )
        else:
            member_id = group.static_members.get(r.instance_id)
            if member_id is None:
                raise KafkaError(
                    ErrorCode.unknown_member_id,
                    f"Instance id {r.instance_id} is unknown in group {group.group_id}.",
                )
            if member_id != r.member_id:
                raise KafkaError(
                    ErrorCode.fenced_instance_id,
                    f"Static member {r.member_id} with instance id {r.instance_id} was fenced "
                    f"by member {member_id}.",
                )
            member = group.members[member_id]
        result = HeartbeatResult(ErrorCode.none, None, r.member_id, r.member_epoch)
        if r.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            return result, self._leave_temporarily(group, member)
        logger.info("Member %s left consumer group %s", member.member_id, group.group_id)
        return result, self.remove_member(group, member)

    def _leave_temporarily(self, group: ConsumerGroup, member: ConsumerMember) -> Records:
        """A static member left to come back: it keeps its partitions (no rebalance) until
        its session expires."""
        a = member.assignment
        group.set_assignment(
            member,
            MemberAssignment(
                MemberState.STABLE, LEAVE_GROUP_STATIC_MEMBER_EPOCH, a.member_epoch, a.assigned, {}
            ),
        )
        if member.rebalance_timer is not None:
            member.rebalance_timer.cancel()
            member.rebalance_timer = None
        return [
            record(
                ConsumerGroupCurrentMemberAssignmentKey(group.group_id, member.member_id),
                member.assignment_value(),
            )
        ]

    def remove_member(self, group: ConsumerGroup, member: ConsumerMember) -> Records:
        """The member is gone (left, or fenced): its records are tombstoned and the group
        epoch bumped, so the others get its partitions. The last consumer-protocol member
        gone, the group may downgrade to a classic group instead (migration.py)."""
        if self.migration is not None:
            downgraded = self.migration.downgrade(group, member)
            if downgraded is not None:
                return downgraded
        _cancel(member)
        group.remove(member.member_id)
        records = _member_tombstones(group.group_id, member.member_id)
        records.extend(topic_regex.forget_unused(group))
        group.group_epoch += 1
        records.append(self._group_record(group))
        if group.is_empty():
            group.state_timestamp = self._now()
        return records

    def fence(self, group: ConsumerGroup, member: ConsumerMember, why: str) -> None:
        if group.dead or group.members.get(member.member_id) is not member:
            return
        logger.info(
            "Member %s of consumer group %s fenced: %s", member.member_id, group.group_id, why
        )
        records = self.remove_member(group, member)
        self._runtime.write_records(group.group_id, records, log_failure(group.group_id))

    # -- timers -----------------------------------------------------------------------------
    def extend_session(self, group: ConsumerGroup, member: ConsumerMember, timeout_ms: int) -> None:
        session_timer.extend_session(
            member, timeout_ms, lambda: self.fence(group, member, "its session expired")
        )

    def _schedule_rebalance_timeout(
        self, group: ConsumerGroup, member: ConsumerMember, previous: MemberAssignment
    ) -> None:
        """A member asked to revoke partitions must do so within its rebalance timeout
        (per epoch), or it is fenced."""
        now = member.assignment
        if now.state != MemberState.UNREVOKED_PARTITIONS:
            if member.rebalance_timer is not None:
                member.rebalance_timer.cancel()
                member.rebalance_timer = None
            return
        if (
            previous.state == MemberState.UNREVOKED_PARTITIONS
            and previous.member_epoch == now.member_epoch
            and member.rebalance_timer is not None
        ):
            return
        if member.rebalance_timer is not None:
            member.rebalance_timer.cancel()
        epoch = now.member_epoch

        def expired() -> None:
            member.rebalance_timer = None
            a = member.assignment
            if a.state == MemberState.UNREVOKED_PARTITIONS and a.member_epoch == epoch:
                self.fence(group, member, "it did not revoke its partitions in time")

        member.rebalance_timer = asyncio.get_running_loop().call_later(
            max(member.rebalance_timeout_ms, 0) / 1000, expired
        )

    # -- admin ------------------------------------------------------------------------------
    def describe(self, group_id: str) -> tuple[ErrorCode, str | None, ConsumerGroup | None]:
        error = self._runtime.owner_error(group_id)
        if error is not None:
            return error, None, None
        group = self._groups.get(group_id)
        if group is None or group.dead:
            classic = self._runtime.groups.get(group_id)
            if (
                classic is not None and classic.protocol_type
            ) or group_id in self._runtime.share_groups:
                return (
                    ErrorCode.group_id_not_found,
                    f"Group {group_id} is not a consumer group.",
                    None,
                )
            return ErrorCode.group_id_not_found, f"Group {group_id} not found.", None
        return ErrorCode.none, None, group

    def groups(self) -> list[ConsumerGroup]:
        return [g for g in self._groups.values() if not g.dead]

    def delete(self, group: ConsumerGroup, done: Callable[[ErrorCode], None]) -> None:
        """DeleteGroups of an empty group: its records and offsets are tombstoned."""
        self._runtime.delete_consumer_group(group, done)

    def make_way_for_classic(self, group_id: str) -> bool:
        """A classic JoinGroup for this id: an empty consumer group is deleted (its offsets
        stay) and the join may go on; False while the group has members."""
        group = self._groups.get(group_id)
        if group is None:
            return True
        if not group.is_empty():
            return False
        self._runtime.drop_consumer_group(group, log_failure(group_id))
        return True

    def shutdown(self) -> None:
        for group in self._groups.values():
            for member in group.members.values():
                _cancel(member)


def subscribed_partitions(
    names: Iterable[str], topics: Mapping[str, TopicInfo], partition_racks: PartitionRacks | None
) -> tuple[dict[uuid.UUID, int], int]:
    """The partition count of each subscribed topic (``names``) that exists, and a hash of
    the subscriptions' metadata: a change bumps the group epoch (of consumer and share
    groups alike). What is hashed is what Kafka 4.1+ hashes (KIP-1101, its Utils'
    computeTopicHash and computeGroupHash): per topic its id, name, partition count and
    each partition's replica racks, so a rack that changes (a broker restarted with another
    ``broker.rack``, a reassignment) is a new assignment; then the topics' hashes in name
    order. Without racks (``partition_racks`` None) the partitions are not read one by one:
    a heartbeat of a member subscribed to many partitions stays cheap. The hash function is
    Gregor's (BLAKE2b, not Kafka's XXH3): the value is only compared with itself."""
    partitions: dict[uuid.UUID, int] = {}
    group_digest = hashlib.blake2b(digest_size=8)
    for name in sorted(names):
        info = topics.get(name)
        if info is None:
            continue
        count = partitions[info.topic_id] = len(info.partitions)
        digest = hashlib.blake2b(digest_size=8)
        encoded = name.encode()
        digest.update(_TOPIC_HASH_MAGIC + info.topic_id.bytes + _I32.pack(len(encoded)))
        digest.update(encoded + _I32.pack(count))
        if partition_racks is not None:
            for index in range(count):
                digest.update(_I32.pack(index))
                for rack in partition_racks(info.topic_id, index):
                    rack_bytes = rack.encode()  # length-prefixed: no separator to collide with
                    digest.update(_I32.pack(len(rack_bytes)) + rack_bytes)
        group_digest.update(digest.digest())
    if not partitions:
        return partitions, 0
    return partitions, _I64.unpack(group_digest.digest())[0]


def _member_tombstones(group_id: str, member_id: str) -> Records:
    """In Kafka's order: current assignment, target assignment, member metadata."""
    return [
        record(ConsumerGroupCurrentMemberAssignmentKey(group_id, member_id), None),
        record(ConsumerGroupTargetAssignmentMemberKey(group_id, member_id), None),
        record(ConsumerGroupMemberMetadataKey(group_id, member_id), None),
    ]


def _within(owned: Assignment, assignment: MemberAssignment) -> bool:
    """Every partition the member says it owns is assigned to it."""
    return all(
        parts <= assignment.assigned.get(topic, frozenset()) for topic, parts in owned.items()
    )


def _cancel(member: ConsumerMember) -> None:
    for timer in (member.session_timer, member.rebalance_timer):
        if timer is not None:
            timer.cancel()
    member.session_timer = member.rebalance_timer = None
