"""Online migration between the classic and the consumer group protocols (KIP-848's
``group.consumer.migration.policy``), as Kafka 4.1's GroupMetadataManager does it.

- Upgrade (``upgrade``): a ConsumerGroupHeartbeat joining a classic group with members
  whose protocol type is "consumer" turns it into a consumer group. The classic members
  become classic members *of the consumer group*, at the classic generation, holding the
  partitions of their last assignment; the join bumps the group epoch, so they rejoin.
- Mixed group (``join``, ``sync``, ``heartbeat``, ``leave``): the classic members of a
  consumer group keep using JoinGroup, SyncGroup, Heartbeat and LeaveGroup. A join is a
  consumer-protocol heartbeat made of the subscription and owned partitions its protocol
  metadata carries, answered at once with the member epoch as generation (the member never
  leads: the coordinator assigns); SyncGroup answers the partitions reconciliation gave the
  member; Heartbeat answers REBALANCE_IN_PROGRESS when the member must rejoin to progress.
  A member that does not rejoin or sync within its rebalance timeout is fenced.
- Downgrade (``downgrade``): when the last consumer-protocol member leaves and classic
  members remain, the group becomes a classic group again (generation = group epoch, each
  member holding its target assignment) and a classic rebalance follows.

The policy gates the two conversions only; a consumer group takes classic members
whatever it is. Committed offsets are keyed by group id, so they stay throughout.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from kio.schema.consumer_protocol_assignment.v0 import data as assignment_v0
from kio.schema.consumer_protocol_assignment.v1 import data as assignment_v1
from kio.schema.consumer_protocol_assignment.v2 import data as assignment_v2
from kio.schema.consumer_protocol_assignment.v3 import data as assignment_v3
from kio.schema.consumer_protocol_subscription.v0 import data as subscription_v0
from kio.schema.consumer_protocol_subscription.v1 import data as subscription_v1
from kio.schema.consumer_protocol_subscription.v2 import data as subscription_v2
from kio.schema.consumer_protocol_subscription.v3 import data as subscription_v3
from kio.schema.errors import ErrorCode
from kio.schema.types import TopicName
from kio.static.primitive import i32

from gregor.coordinator.assignors import Assignment
from gregor.coordinator.consumer_group import ConsumerGroup, ConsumerMember
from gregor.coordinator.consumer_membership import (
    ConsumerMembership,
    TopicInfo,
    as_assignment,
    record,
)
from gregor.coordinator.consumer_records import (
    ClassicMemberMetadata,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
)
from gregor.coordinator.group import Group, GroupState, Member
from gregor.coordinator.membership import JoinResult, Membership, SyncResult
from gregor.coordinator.partitions import Records
from gregor.coordinator.reconciliation import MemberAssignment, MemberState
from gregor.coordinator.records import encode_group_key, encode_group_value
from gregor.coordinator.runtime import (
    CoordinatorRuntime,
    consumer_group_tombstones,
    log_failure,
    replay_group,
)
from gregor.coordinator.settings import Settings
from gregor.wire.errors import KafkaError
from gregor.wire.schema import SchemaDecodeError, decode, encode

logger = logging.getLogger(__name__)

PROTOCOL_TYPE = "consumer"
UPGRADE_POLICIES = frozenset({"bidirectional", "upgrade"})
DOWNGRADE_POLICIES = frozenset({"bidirectional", "downgrade"})


# -- the consumer protocol inside JoinGroup and SyncGroup ------------------------------------
_VERSION = struct.Struct(">h")
_SUBSCRIPTIONS = (
    subscription_v0.ConsumerProtocolSubscription,
    subscription_v1.ConsumerProtocolSubscription,
    subscription_v2.ConsumerProtocolSubscription,
    subscription_v3.ConsumerProtocolSubscription,
)
_ASSIGNMENTS = (assignment_v0, assignment_v1, assignment_v2, assignment_v3)
TopicPartitions = list[tuple[str, list[int]]]  # topic name -> partitions


@dataclass(frozen=True, slots=True)
class Subscription:
    """A ConsumerProtocolSubscription: its version and what the migration reads of it."""

    version: int
    topics: tuple[str, ...]
    owned: TopicPartitions
    rack_id: str | None


def _version(data: bytes) -> int:
    """The int16 version first in the bytes; a version newer than Gregor knows is read
    as the latest (each version only adds fields at the end), as Kafka's client does."""
    if len(data) < _VERSION.size:
        raise SchemaDecodeError("no version")
    version: int = _VERSION.unpack_from(data)[0]
    if version < 0:
        raise SchemaDecodeError(f"version {version}")
    return min(version, len(_SUBSCRIPTIONS) - 1)


def decode_subscription(metadata: bytes) -> Subscription:
    """Raises SchemaDecodeError for malformed metadata."""
    version = _version(metadata)
    body = decode(_SUBSCRIPTIONS[version], metadata, _VERSION.size)
    owned = getattr(body, "owned_partitions", ())
    return Subscription(
        version,
        tuple(body.topics),
        [(t.topic, list(t.partitions)) for t in owned],
        getattr(body, "rack_id", None),
    )


def decode_assignment(data: bytes) -> tuple[TopicPartitions, bytes | None]:
    """A ConsumerProtocolAssignment's partitions and user data; raises SchemaDecodeError."""
    version = _version(data)
    body = decode(_ASSIGNMENTS[version].ConsumerProtocolAssignment, data, _VERSION.size)
    return [(t.topic, list(t.partitions)) for t in body.assigned_partitions], body.user_data


def encode_assignment(version: int, partitions: TopicPartitions) -> bytes:
    """A ConsumerProtocolAssignment of the member's subscription version."""
    version = min(max(version, 0), len(_ASSIGNMENTS) - 1)
    schema = _ASSIGNMENTS[version]
    body = schema.ConsumerProtocolAssignment(
        assigned_partitions=tuple(
            schema.TopicPartition(topic=TopicName(t), partitions=tuple(i32(p) for p in ps))
            for t, ps in partitions
        )
    )
    return _VERSION.pack(version) + encode(body)


def by_id(
    partitions: Iterable[tuple[str, Iterable[int]]], topics: Mapping[str, TopicInfo]
) -> Assignment:
    """Topic names to ids; a topic missing from the metadata is left out (as Kafka does)."""
    return as_assignment((topics[t].topic_id, ps) for t, ps in partitions if t in topics)


def by_name(assignment: Assignment, topics: Mapping[str, TopicInfo]) -> TopicPartitions:
    names = {info.topic_id: name for name, info in topics.items()}
    return sorted((names[t], sorted(ps)) for t, ps in assignment.items() if t in names)


class _UserDataLost(Exception):
    """A classic assignment with user data (a custom assignor's) cannot be carried over."""


# -- the migration --------------------------------------------------------------------------
class Migration:
    def __init__(
        self,
        settings: Settings,
        runtime: CoordinatorRuntime,
        classic: Membership,
        consumer: ConsumerMembership,
        topics: Callable[[], Mapping[str, TopicInfo]],
        now_ms: Callable[[], int],
    ) -> None:
        self.settings = settings
        self._runtime = runtime
        self._classic = classic
        self._consumer = consumer
        self._topics = topics  # the broker's metadata: topic name -> its info
        self._now = now_ms
        # A classic member's join and sync deadlines (Kafka's join and sync timeouts),
        # by (kind, group id, member id).
        self._timers: dict[tuple[str, str, str], asyncio.TimerHandle] = {}

    def serves(self, group_id: str) -> ConsumerGroup | None:
        """The live consumer group of this id: JoinGroup (when it has members), SyncGroup,
        Heartbeat and LeaveGroup of its classic members come here."""
        group = self._runtime.consumer_groups.get(group_id)
        return None if group is None or group.dead else group

    # -- upgrade ----------------------------------------------------------------------------
    def upgrade(self, classic: Group, records: Records) -> ConsumerGroup:
        """Kafka's validateOnlineUpgrade and convertToConsumerGroup: the classic group with
        members becomes a consumer group (its records appended), or GROUP_ID_NOT_FOUND."""
        group_id = classic.group_id
        reason = None
        if self.settings.consumer_migration_policy not in UPGRADE_POLICIES:
            reason = "the online upgrade is disabled"
        elif classic.protocol_type != PROTOCOL_TYPE:
            reason = "the group does not use the consumer embedded protocol"
        elif len(classic.members) >= self.settings.consumer_max_size:
            # The joining member would not fit either (GROUP_MAX_SIZE_REACHED after the
            # conversion): refuse before changing anything.
            reason = "the group size exceeds the consumer group maximum size"
        if reason is not None:
            logger.info(
                "Cannot upgrade classic group %s to consumer group because %s.", group_id, reason
            )
            raise KafkaError(
                ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group."
            )
        try:
            group = self._from_classic(classic)
        except SchemaDecodeError as e:
            logger.warning(
                "Cannot upgrade classic group %s: malformed consumer protocol (%s)", group_id, e
            )
            raise KafkaError(
                ErrorCode.group_id_not_found,
                f"Cannot upgrade the classic group {group_id} to consumer group because the "
                "embedded consumer protocol is malformed.",
            ) from e
        except _UserDataLost as e:
            raise KafkaError(
                ErrorCode.group_id_not_found,
                f"Cannot upgrade the classic group {group_id} to consumer group: userData "
                "from a custom assignor would be lost.",
            ) from e
        # Its parked joins and syncs rejoin the consumer group; its offsets stay.
        self._classic.unload(classic, ErrorCode.rebalance_in_progress)
        replay_group(self._runtime.groups, group_id, None)
        records.append((encode_group_key(group_id), None))
        records.extend(_creation_records(group))
        self._runtime.consumer_groups[group_id] = group
        for member in group.members.values():
            assert member.classic is not None
            self._consumer.extend_session(group, member, member.classic.session_timeout_ms)
        logger.info(
            "Upgraded classic group %s (generation %d, %d member(s)) to a consumer group",
            group_id,
            classic.generation,
            len(group.members),
        )
        return group

    def _from_classic(self, classic: Group) -> ConsumerGroup:
        """Kafka's ConsumerGroup.fromClassicGroup: every member Stable at the generation,
        its last assignment as both its target and its current assignment."""
        topics = self._topics()
        generation = classic.generation
        group = ConsumerGroup(
            classic.group_id,
            group_epoch=generation,
            assignment_epoch=generation,
            state_timestamp=self._now(),
        )
        for m in classic.members.values():
            assigned: Assignment = {}
            if m.assignment:  # empty when it joined and never synced
                partitions, user_data = decode_assignment(m.assignment)
                if user_data:
                    raise _UserDataLost
                assigned = by_id(partitions, topics)
            metadata = (
                m.metadata(classic.protocol_name) if classic.protocol_name else m.protocols[0][1]
            )
            subscription = decode_subscription(metadata)
            member = ConsumerMember(
                m.member_id,
                m.group_instance_id,
                subscription.rack_id,
                m.client_id,
                m.client_host,
                tuple(sorted(set(subscription.topics))),
                None,
                m.rebalance_timeout_ms,
                None,
                MemberAssignment(MemberState.STABLE, generation, generation, assigned, {}),
                classic=ClassicMemberMetadata(m.session_timeout_ms, tuple(m.protocols)),
            )
            group.target[m.member_id] = assigned
            group.add(member)
        return group

    # -- downgrade --------------------------------------------------------------------------
    def downgrade(self, group: ConsumerGroup, leaving: ConsumerMember) -> Records | None:
        """Kafka's validateOnlineDowngradeWithFencedMember and convertToClassicGroup: the
        member leaves (or is fenced) and only classic members remain. Returns the records
        (the consumer group's tombstones, then the classic group's), None when the group
        stays a consumer group."""
        remaining = [m for m in group.members.values() if m is not leaving]
        if not remaining or any(m.classic is None for m in remaining):
            return None
        group_id = group.group_id
        if self.settings.consumer_migration_policy not in DOWNGRADE_POLICIES:
            logger.info(
                "Cannot downgrade consumer group %s to classic group because the online "
                "downgrade is disabled.",
                group_id,
            )
            return None
        if len(remaining) > self.settings.max_group_size:
            logger.info(
                "Cannot downgrade consumer group %s to classic group because its group size "
                "is greater than classic group max size.",
                group_id,
            )
            return None
        records = consumer_group_tombstones(group)
        classic = self._to_classic(group, remaining)
        self._consumer.unload(group)
        del self._runtime.consumer_groups[group_id]
        for key in [k for k in self._timers if k[1] == group_id]:
            self._timers.pop(key).cancel()
        records.append((encode_group_key(group_id), encode_group_value(classic.to_value())))
        self._runtime.groups[group_id] = classic
        logger.info(
            "Downgraded consumer group %s (epoch %d, %d member(s)) to a classic group",
            group_id,
            group.group_epoch,
            len(remaining),
        )
        self._classic.adopt(classic, f"Downgrade group {group_id} from consumer to classic.")
        return records

    def _to_classic(self, group: ConsumerGroup, members: list[ConsumerMember]) -> Group:
        """Kafka's ClassicGroup.fromConsumerGroup: Stable at the group epoch, each member
        holding its target assignment; the group's offsets come along."""
        topics = self._topics()
        holder = self._runtime.groups.get(group.group_id)
        classic = Group(
            group.group_id,
            generation=group.group_epoch,
            protocol_type=PROTOCOL_TYPE,
            offsets=holder.offsets if holder is not None else {},
        )
        for m in members:
            assert m.classic is not None
            protocols = list(m.classic.supported_protocols)
            classic.add(
                Member(
                    m.member_id,
                    m.instance_id,
                    m.client_id,
                    m.client_host,
                    m.rebalance_timeout_ms,
                    m.classic.session_timeout_ms,
                    PROTOCOL_TYPE,
                    protocols,
                )
            )
        classic.protocol_name = classic.select_protocol()
        for member in classic.members.values():
            version = decode_subscription(member.metadata(classic.protocol_name)).version
            target = by_name(group.target.get(member.member_id, {}), topics)
            member.assignment = encode_assignment(version, target)
        classic.transition(GroupState.STABLE, self._now())
        return classic

    # -- JoinGroup of a classic member --------------------------------------------------------
    def join(
        self,
        group: ConsumerGroup,
        member_id: str,
        instance_id: str | None,
        client_id: str,
        client_host: str,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        require_known_member_id: bool,
    ) -> asyncio.Future[JoinResult]:
        """Kafka's classicGroupJoinToConsumerGroup."""
        future: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        unknown = not member_id
        if unknown:
            member_id = str(uuid.uuid4())
        records: Records = []
        try:
            if member_id not in group.members:
                self._consumer.check_capacity(group)
            if not _supports(group, protocol_type, protocols):
                raise KafkaError(
                    ErrorCode.inconsistent_group_protocol,
                    f"Member {member_id}'s protocols are not supported.",
                )
            if require_known_member_id and unknown:
                future.set_result(JoinResult(ErrorCode.member_id_required, member_id))
                return future
            try:
                subscription = decode_subscription(protocols[0][1])
            except SchemaDecodeError as e:
                raise KafkaError(
                    ErrorCode.inconsistent_group_protocol,
                    "Malformed embedded consumer protocol in subscription deserialization.",
                ) from e
            member, replaced = self._member_for_join(
                group, member_id, instance_id, unknown, records
            )
        except KafkaError as e:
            future.set_result(JoinResult(e.code, member_id))
            return future

        topics = self._topics()
        known = member.member_id in group.members
        subscribed = (member.subscribed_topic_names, member.subscribed_topic_regex)
        metadata = member.metadata_value()
        if instance_id is not None:
            member.instance_id = instance_id
        if subscription.rack_id is not None:
            member.rack_id = subscription.rack_id
        if rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = rebalance_timeout_ms
        member.subscribed_topic_names = tuple(sorted(set(subscription.topics)))
        member.client_id, member.client_host = client_id, client_host
        member.classic = ClassicMemberMetadata(session_timeout_ms, tuple(protocols))
        if replaced or not known or member.metadata_value() != metadata:
            if not known:
                group.add(member)
            records.append(
                record(
                    ConsumerGroupMemberMetadataKey(group.group_id, member.member_id),
                    member.metadata_value(),
                )
            )
        bump = (member.subscribed_topic_names, member.subscribed_topic_regex) != subscribed
        owned = by_id(subscription.owned, topics)
        updated = self._consumer.advance(group, member, bump, replaced, owned, topics, records)
        result = JoinResult(
            ErrorCode.none,
            member.member_id,
            updated.member_epoch,
            PROTOCOL_TYPE,
            protocols[0][0],
        )

        def written(error: ErrorCode) -> None:
            if error != ErrorCode.none:
                _resolve(future, JoinResult(error, member.member_id))
                return
            self._cancel_timer("join", group, member)
            if group.members.get(member.member_id) is member:
                self._consumer.extend_session(group, member, session_timeout_ms)
                self._arm_timer("sync", group, member, rebalance_timeout_ms)
            _resolve(future, result)

        if records:
            self._runtime.write_records(group.group_id, records, written)
        else:
            written(ErrorCode.none)
        return future

    def _member_for_join(
        self,
        group: ConsumerGroup,
        member_id: str,
        instance_id: str | None,
        unknown: bool,
        records: Records,
    ) -> tuple[ConsumerMember, bool]:
        """The joining member (a new one when the group does not know it) and whether it is
        a static member taking an earlier instance's place under a new member id."""
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                return ConsumerMember(member_id), False
            _require_classic(member)
            return member, False
        old_id = group.static_members.get(instance_id)
        old = None if old_id is None else group.members.get(old_id)
        if unknown:
            if old is None:
                return ConsumerMember(member_id, instance_id), False
            return self._consumer.take_over_instance(group, old, member_id, records), True
        if old is None:
            raise KafkaError(ErrorCode.unknown_member_id, f"Instance id {instance_id} is unknown.")
        _check_instance(old, group, member_id, instance_id)
        _require_classic(old)
        return old, False

    # -- SyncGroup, Heartbeat and LeaveGroup of a classic member ------------------------------
    def sync(
        self,
        group: ConsumerGroup,
        generation: int,
        member_id: str,
        instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
    ) -> SyncResult:
        """Kafka's classicGroupSyncToConsumerGroup: the member's assigned partitions."""
        try:
            member = _classic_member(group, member_id, instance_id)
            _check_generation(member, generation)
            assert member.classic is not None
            name, metadata = member.classic.supported_protocols[0]
            if (protocol_type is not None and protocol_type != PROTOCOL_TYPE) or (
                protocol_name is not None and protocol_name != name
            ):
                raise KafkaError(
                    ErrorCode.inconsistent_group_protocol,
                    f"The protocol of member {member_id} is not the one its join answered.",
                )
            if group.group_epoch > member.member_epoch and (
                member.assignment.state != MemberState.UNREVOKED_PARTITIONS
            ):
                self._arm_timer("join", group, member, member.rebalance_timeout_ms)
                raise KafkaError(
                    ErrorCode.rebalance_in_progress,
                    f"A new rebalance is triggered in group {group.group_id} and member "
                    f"{member_id} should rejoin to catch up.",
                )
            version = decode_subscription(metadata).version
        except KafkaError as e:
            return SyncResult(e.code)
        self._cancel_timer("sync", group, member)
        self._consumer.extend_session(group, member, member.classic.session_timeout_ms)
        assigned = by_name(member.assignment.assigned, self._topics())
        return SyncResult(
            ErrorCode.none, protocol_type, protocol_name, encode_assignment(version, assigned)
        )

    def heartbeat(
        self, group: ConsumerGroup, generation: int, member_id: str, instance_id: str | None
    ) -> ErrorCode:
        """Kafka's classicGroupHeartbeatToConsumerGroup: REBALANCE_IN_PROGRESS when the
        group epoch moved past the member, it must revoke partitions, or partitions it
        waits for are free."""
        try:
            member = _classic_member(group, member_id, instance_id)
            _check_generation(member, generation)
        except KafkaError as e:
            return e.code
        assert member.classic is not None
        self._consumer.extend_session(group, member, member.classic.session_timeout_ms)
        state = member.assignment.state
        if (
            member.member_epoch < group.group_epoch
            or state == MemberState.UNREVOKED_PARTITIONS
            or (state == MemberState.UNRELEASED_PARTITIONS and not _waiting(group, member))
        ):
            self._arm_timer("join", group, member, member.rebalance_timeout_ms)
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave(
        self, group: ConsumerGroup, leaving: Iterable[tuple[str, str | None]]
    ) -> list[ErrorCode]:
        """Kafka's classicGroupLeaveToConsumerGroup: each valid member is removed (the last
        consumer-protocol member gone, the group may downgrade)."""
        errors: list[ErrorCode] = []
        records: Records = []
        for member_id, instance_id in leaving:
            live = self.serves(group.group_id)
            if live is not group:  # downgraded by an earlier member of this request
                errors.append(self._classic.leave(group.group_id, [(member_id, instance_id)])[1][0])
                continue
            try:
                if instance_id is None:
                    member = _classic_member(group, member_id, None)
                else:
                    static_id = group.static_members.get(instance_id)
                    if static_id is None:
                        raise KafkaError(
                            ErrorCode.unknown_member_id, f"Instance id {instance_id} is unknown."
                        )
                    member = group.members[static_id]
                    if member_id:
                        _check_instance(member, group, member_id, instance_id)
                    _require_classic(member)
            except KafkaError as e:
                errors.append(e.code)
                continue
            logger.info(
                "Classic member %s left consumer group %s", member.member_id, group.group_id
            )
            records += self._consumer.remove_member(group, member)
            errors.append(ErrorCode.none)
        if records:
            self._runtime.write_records(group.group_id, records, log_failure(group.group_id))
        return errors

    # -- join and sync timeouts ---------------------------------------------------------------
    def _arm_timer(
        self, kind: str, group: ConsumerGroup, member: ConsumerMember, timeout_ms: int
    ) -> None:
        """A join timeout is armed if absent (Kafka's scheduleConsumerGroupJoinTimeoutIfAbsent),
        a sync timeout afresh; either fences the member when it fires."""
        key = (kind, group.group_id, member.member_id)
        timer = self._timers.get(key)
        if timer is not None:
            if kind == "join":
                return
            timer.cancel()

        def expired() -> None:
            self._timers.pop(key, None)
            self._consumer.fence(group, member, f"it did not {kind} within its rebalance timeout")

        self._timers[key] = asyncio.get_running_loop().call_later(
            max(timeout_ms, 0) / 1000, expired
        )

    def _cancel_timer(self, kind: str, group: ConsumerGroup, member: ConsumerMember) -> None:
        timer = self._timers.pop((kind, group.group_id, member.member_id), None)
        if timer is not None:
            timer.cancel()

    def shutdown(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()


def _creation_records(group: ConsumerGroup) -> Records:
    """Kafka's ConsumerGroup.createConsumerGroupRecords, in its order: the members, the
    group epoch, the target assignment, then the members' current assignments."""
    group_id = group.group_id
    records: Records = [
        record(ConsumerGroupMemberMetadataKey(group_id, m.member_id), m.metadata_value())
        for m in group.members.values()
    ]
    records.append(
        record(
            ConsumerGroupMetadataKey(group_id),
            ConsumerGroupMetadataValue(group.group_epoch, group.metadata_hash),
        )
    )
    records += [
        record(
            ConsumerGroupTargetAssignmentMemberKey(group_id, member_id),
            ConsumerGroupTargetAssignmentMemberValue(group.target.get(member_id, {})),
        )
        for member_id in group.members
    ]
    records.append(
        record(
            ConsumerGroupTargetAssignmentMetadataKey(group_id),
            ConsumerGroupTargetAssignmentMetadataValue(group.assignment_epoch),
        )
    )
    records += [
        record(ConsumerGroupCurrentMemberAssignmentKey(group_id, m.member_id), m.assignment_value())
        for m in group.members.values()
    ]
    return records


def _supports(group: ConsumerGroup, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
    """Kafka's ConsumerGroup.supportsClassicProtocols: the "consumer" protocol type and a
    protocol every classic member of the group supports."""
    if protocol_type != PROTOCOL_TYPE or not protocols:
        return False
    classic = [m.classic for m in group.members.values() if m.classic is not None]
    return any(
        all(any(n == name for n, _ in c.supported_protocols) for c in classic)
        for name, _ in protocols
    )


def _classic_member(
    group: ConsumerGroup, member_id: str, instance_id: str | None
) -> ConsumerMember:
    """Kafka's validateConsumerGroupMember, then the member must use the classic protocol."""
    if instance_id is None:
        member = group.members.get(member_id)
        if member is None:
            raise KafkaError(
                ErrorCode.unknown_member_id,
                f"Member {member_id} is not a member of group {group.group_id}.",
            )
    else:
        static_id = group.static_members.get(instance_id)
        if static_id is None:
            raise KafkaError(
                ErrorCode.unknown_member_id,
                f"Member with instance id {instance_id} is not a member of group {group.group_id}.",
            )
        member = group.members[static_id]
        _check_instance(member, group, member_id, instance_id)
    _require_classic(member)
    return member


def _check_instance(
    member: ConsumerMember, group: ConsumerGroup, member_id: str, instance_id: str
) -> None:
    if member.member_id != member_id:
        raise KafkaError(
            ErrorCode.fenced_instance_id,
            f"Static member {member_id} with instance id {instance_id} was fenced by member "
            f"{member.member_id}.",
        )


def _require_classic(member: ConsumerMember) -> None:
    if member.classic is None:
        raise KafkaError(
            ErrorCode.unknown_member_id,
            f"Member {member.member_id} does not use the classic protocol.",
        )


def _check_generation(member: ConsumerMember, generation: int) -> None:
    if generation != member.member_epoch:
        raise KafkaError(
            ErrorCode.illegal_generation,
            f"The member {member.member_id} has an illegal generation {generation}.",
        )


def _waiting(group: ConsumerGroup, member: ConsumerMember) -> bool:
    """Kafka's waitingOnUnreleasedPartition: a partition of the member's target that
    another member still holds."""
    owner_epoch = group.owner_epoch_for(member.member_id)
    assigned = member.assignment.assigned
    return any(
        p not in assigned.get(topic, frozenset()) and owner_epoch(topic, p) != -1
        for topic, partitions in group.target.get(member.member_id, {}).items()
        for p in partitions
    )


def _resolve(future: asyncio.Future[JoinResult], result: JoinResult) -> None:
    if not future.done():
        future.set_result(result)
