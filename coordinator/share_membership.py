"""Share group membership (KIP-932): ShareGroupHeartbeat (joining with epoch 0 and a
client-generated member id, heartbeats, leaving with -1), session timers, the ``simple``
target assignment, ShareGroupDescribe's view, the deletion of empty groups, and the
initialization of the share-partitions' state through the persister.

Kafka 4.1's GroupMetadataManager (its share group parts) is the model. Unlike a consumer
group there is no revocation: a member moves straight to its target, since members may
share a partition. The live groups are in memory (the runtime's ``share_groups``); each
change is applied at once and its records written through the runtime, and the heartbeat is
answered once they are committed (the records are replayed only at load).

Share-partitions of newly subscribed topics (and new partitions of subscribed topics) are
initialized in the background: recorded as initializing (record type 15), initialized
through ``SharePersister.initialize`` (state epoch 0, no start offset: the partition's leader
picks it by ``share.auto.offset.reset``), then recorded as initialized. Assignment does not
wait for it. One whose state exists already (its leader used it first) is only recorded.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from gregor.coordinator import session_timer
from gregor.coordinator.assignors import Assignment, RacksNow
from gregor.coordinator.consumer_membership import GroupTiming, TopicInfo, subscribed_partitions
from gregor.coordinator.partitions import Records
from gregor.coordinator.runtime import CoordinatorRuntime, log_failure
from gregor.coordinator.settings import Settings
from gregor.coordinator.share_assignor import assign_simple
from gregor.coordinator.share_group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    ShareGroup,
    ShareMember,
    member_tombstones,
    record,
)
from gregor.coordinator.share_records import (
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupMemberMetadataKey,
    ShareGroupMetadataKey,
    ShareGroupMetadataValue,
    ShareGroupStatePartitionMetadataKey,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupTargetAssignmentMemberValue,
    ShareGroupTargetAssignmentMetadataKey,
    ShareGroupTargetAssignmentMetadataValue,
    TopicPartitionsInfo,
)
from gregor.replica.share_persister import UNINITIALIZED_OFFSET, SharePersister, ShareStateError
from gregor.wire.errors import KafkaError

logger = logging.getLogger(__name__)

Partitions = dict[uuid.UUID, frozenset[int]]


@dataclass(frozen=True, slots=True)
class ShareHeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None
    subscribed_topic_names: tuple[str, ...] | None  # None: unchanged
    client_id: str
    client_host: str


@dataclass(frozen=True, slots=True)
class ShareHeartbeatResult:
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None  # None: unchanged


def _not_share_group(group_id: str) -> KafkaError:
    return KafkaError(ErrorCode.group_id_not_found, f"Group {group_id} is not a share group.")


class ShareMembership:
    def __init__(
        self,
        settings: Settings,
        runtime: CoordinatorRuntime,
        now_ms: Callable[[], int],
        racks: RacksNow,
        persister: SharePersister | None,
    ) -> None:
        """``racks``: the racks of partitions' replicas (in the subscribed topics' metadata
        hash)."""
        self.settings = settings
        self._racks = racks
        self._runtime = runtime
        self._groups = runtime.share_groups  # the runtime's: loaded and unloaded there
        self._now = now_ms
        self._persister = persister
        self._tasks: set[asyncio.Task[None]] = set()
        # Group epoch bumps by heartbeats.
        self.rebalances = 0

    # -- loading and unloading --------------------------------------------------------------
    def resume(self, group: ShareGroup) -> None:
        """A loaded group's members have a session from now on; initializations cut short
        by the last leader go on."""
        for member in group.members.values():
            self._extend_session(group, member, self.settings.share_session_timeout_ms)
        if group.initializing:
            self._start_initializing(
                group, {t: i.partitions for t, i in group.initializing.items()}
            )

    def unload(self, group: ShareGroup) -> None:
        group.dead = True
        for member in group.members.values():
            _cancel(member)

    # -- ShareGroupHeartbeat ----------------------------------------------------------------
    def heartbeat(
        self, request: ShareHeartbeatRequest, timing: GroupTiming, topics: Mapping[str, TopicInfo]
    ) -> ShareHeartbeatResult | asyncio.Future[ShareHeartbeatResult]:
        """``topics``: the cluster's topics by name (the subscriptions' metadata)."""
        initialize: Partitions = {}
        try:
            _validate(request)
            error = self._runtime.owner_error(request.group_id)
            if error is not None:
                return ShareHeartbeatResult(error)
            if request.member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
                result, records = self._leave(request)
            else:
                result, records, initialize = self._heartbeat(request, timing, topics)
        except KafkaError as e:
            return ShareHeartbeatResult(e.code, e.message)
        if not records:
            return result
        future: asyncio.Future[ShareHeartbeatResult] = asyncio.get_running_loop().create_future()
        group_id = request.group_id

        def done(error: ErrorCode) -> None:
            if error == ErrorCode.none and initialize:
                group = self._groups.get(group_id)
                if group is not None and not group.dead:
                    self._start_initializing(group, initialize)
            if not future.done():
                future.set_result(
                    result if error == ErrorCode.none else ShareHeartbeatResult(error)
                )

        self._runtime.write_records(group_id, records, done)
        return future

    def _heartbeat(
        self, r: ShareHeartbeatRequest, timing: GroupTiming, topics: Mapping[str, TopicInfo]
    ) -> tuple[ShareHeartbeatResult, Records, Partitions]:
        records: Records = []
        group = self._group_for(r)
        limit = self.settings.share_max_size
        if len(group.members) >= limit and r.member_id not in group.members:
            raise KafkaError(
                ErrorCode.group_max_size_reached,
                f"The share group has reached its maximum capacity of {limit} members.",
            )
        member = group.members.get(r.member_id)
        if member is None:
            if r.member_epoch != 0:
                raise KafkaError(
                    ErrorCode.unknown_member_id,
                    f"Member {r.member_id} is not a member of group {group.group_id}.",
                )
            member = ShareMember(r.member_id)
            logger.info("Member %s joins share group %s", r.member_id, group.group_id)
        _check_epoch(member, r.member_epoch)
        previous_assigned = member.assigned

        # The member's metadata: what the request leaves null is unchanged.
        subscription = member.subscribed_topic_names
        metadata = member.metadata_value()
        if r.rack_id is not None:
            member.rack_id = r.rack_id
        if r.subscribed_topic_names is not None:
            member.subscribed_topic_names = tuple(sorted(set(r.subscribed_topic_names)))
        member.client_id, member.client_host = r.client_id, r.client_host
        if member.member_id not in group.members or member.metadata_value() != metadata:
            group.members[member.member_id] = member
            records.append(
                record(
                    ShareGroupMemberMetadataKey(group.group_id, member.member_id),
                    member.metadata_value(),
                )
            )
        bump = member.subscribed_topic_names != subscription

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

        # No revocation: the member moves straight to its target.
        target = group.target.get(member.member_id, {})
        if member.member_epoch != group.assignment_epoch or member.assigned != target:
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = group.assignment_epoch
            member.assigned = target
            records.append(
                record(
                    ShareGroupCurrentMemberAssignmentKey(group.group_id, member.member_id),
                    member.assignment_value(),
                )
            )
        self._extend_session(group, member, timing.session_timeout_ms)
        initialize = self._to_initialize(group, partitions, topics, records)
        send = r.member_epoch == 0 or member.assigned != previous_assigned
        return (
            ShareHeartbeatResult(
                ErrorCode.none,
                None,
                member.member_id,
                member.member_epoch,
                timing.heartbeat_interval_ms,
                member.assigned if send else None,
            ),
            records,
            initialize,
        )

    def _group_for(self, r: ShareHeartbeatRequest) -> ShareGroup:
        """The group, created by a join (epoch 0); a classic or consumer group of the id
        is not a share group (Kafka converts none of them)."""
        group_id = r.group_id
        group = self._groups.get(group_id)
        if group is not None:
            if group.dead:
                raise KafkaError(
                    ErrorCode.coordinator_not_available, "The coordinator is not available."
                )
            return group
        if group_id in self._runtime.consumer_groups or group_id in self._runtime.groups:
            raise _not_share_group(group_id)
        if r.member_epoch != 0:
            raise KafkaError(ErrorCode.group_id_not_found, f"Share group {group_id} not found.")
        return self.create(group_id)

    def _update_target(
        self,
        group: ShareGroup,
        partitions: Mapping[uuid.UUID, int],
        topics: Mapping[str, TopicInfo],
    ) -> Records:
        """The target assignment of the group epoch (the ``simple`` assignor)."""
        subscriptions = {
            member_id: frozenset(
                topics[name].topic_id for name in m.subscribed_topic_names if name in topics
            )
            for member_id, m in group.members.items()
        }
        target = assign_simple(subscriptions, partitions, group.target)
        records: Records = [
            record(
                ShareGroupTargetAssignmentMemberKey(group.group_id, member_id),
                ShareGroupTargetAssignmentMemberValue(assignment),
            )
            for member_id, assignment in target.items()
            if group.target.get(member_id) != assignment
        ]
        group.target = target
        group.assignment_epoch = group.group_epoch
        records.append(
            record(
                ShareGroupTargetAssignmentMetadataKey(group.group_id),
                ShareGroupTargetAssignmentMetadataValue(group.assignment_epoch),
            )
        )
        return records

    def _group_record(self, group: ShareGroup) -> tuple[bytes, bytes | None]:
        return record(
            ShareGroupMetadataKey(group.group_id),
            ShareGroupMetadataValue(group.group_epoch, group.metadata_hash),
        )

    # -- leaving ----------------------------------------------------------------------------
    def _leave(self, r: ShareHeartbeatRequest) -> tuple[ShareHeartbeatResult, Records]:
        group = self._groups.get(r.group_id)
        if group is None or group.dead:
            if r.group_id in self._runtime.consumer_groups or r.group_id in self._runtime.groups:
                raise _not_share_group(r.group_id)
            raise KafkaError(ErrorCode.group_id_not_found, f"Share group {r.group_id} not found.")
        member = group.members.get(r.member_id)
        if member is None:
            raise KafkaError(
                ErrorCode.unknown_member_id,
                f"Member {r.member_id} is not a member of group {group.group_id}.",
            )
        logger.info("Member %s left share group %s", member.member_id, group.group_id)
        result = ShareHeartbeatResult(ErrorCode.none, None, r.member_id, LEAVE_GROUP_MEMBER_EPOCH)
        return result, self._remove_member(group, member)

    def _remove_member(self, group: ShareGroup, member: ShareMember) -> Records:
        """The member is gone (left, or fenced): its records are tombstoned and the group
        epoch bumped, so the others get its partitions."""
        _cancel(member)
        del group.members[member.member_id]
        group.target.pop(member.member_id, None)
        records = member_tombstones(group.group_id, member.member_id)
        group.group_epoch += 1
        records.append(self._group_record(group))
        return records

    def _fence(self, group: ShareGroup, member: ShareMember, why: str) -> None:
        if group.dead or group.members.get(member.member_id) is not member:
            return
        logger.info("Member %s of share group %s fenced: %s", member.member_id, group.group_id, why)
        records = self._remove_member(group, member)
        self._runtime.write_records(group.group_id, records, log_failure(group.group_id))

    # -- timers -----------------------------------------------------------------------------
    def _extend_session(self, group: ShareGroup, member: ShareMember, timeout_ms: int) -> None:
        session_timer.extend_session(
            member, timeout_ms, lambda: self._fence(group, member, "its session expired")
        )

    # -- the share-partitions' state --------------------------------------------------------
    def _to_initialize(
        self,
        group: ShareGroup,
        partitions: Mapping[uuid.UUID, int],
        topics: Mapping[str, TopicInfo],
        records: Records,
    ) -> Partitions:
        """The subscribed share-partitions neither initialized nor being initialized: they
        are recorded as initializing (type 15), and initialized once that is written."""
        if self._persister is None:
            return {}
        known = group.known_partitions()
        new: Partitions = {}
        for topic, count in partitions.items():
            fresh = frozenset(p for p in range(count) if (topic, p) not in known)
            if fresh:
                new[topic] = fresh
        if not new:
            return {}
        names = {info.topic_id: name for name, info in topics.items()}
        now = self._now()
        for topic, fresh in new.items():
            before = group.initializing.get(topic)
            group.initializing[topic] = TopicPartitionsInfo(
                topic,
                names[topic],
                fresh | (before.partitions if before else frozenset()),
                before.create_timestamp if before else now,
            )
        records.append(self._state_partitions_record(group))
        return new

    def _state_partitions_record(self, group: ShareGroup) -> tuple[bytes, bytes | None]:
        return record(ShareGroupStatePartitionMetadataKey(group.group_id), group.state_partitions())

    def _start_initializing(self, group: ShareGroup, partitions: Partitions) -> None:
        if self._persister is None:
            return
        task = asyncio.get_running_loop().create_task(self._initialize(group, partitions))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _initialize(self, group: ShareGroup, partitions: Partitions) -> None:
        """Initialize the share-partitions' state, then record them as initialized; the
        ones that failed leave the initializing set, so a later heartbeat tries again."""
        persister = self._persister
        assert persister is not None
        done: set[tuple[uuid.UUID, int]] = set()
        for topic, parts in partitions.items():
            for p in sorted(parts):
                try:
                    if await persister.read_summary(group.group_id, topic, p) is None:
                        await persister.initialize(
                            group.group_id, topic, p, 0, UNINITIALIZED_OFFSET
                        )
                    done.add((topic, p))
                except ShareStateError as e:
                    logger.warning(
                        "Initializing the state of share group %s's %s-%d failed: %s",
                        group.group_id,
                        topic,
                        p,
                        e.error.name,
                    )
        if group.dead or self._groups.get(group.group_id) is not group:
            return
        for topic, parts in partitions.items():
            info = group.initializing.get(topic)
            if info is None:
                continue  # its topic was deleted meanwhile
            rest = info.partitions - parts
            group.initializing.pop(topic)
            if rest:
                group.initializing[topic] = TopicPartitionsInfo(
                    topic, info.topic_name, rest, info.create_timestamp
                )
            ok = frozenset(p for p in parts if (topic, p) in done)
            if ok:
                before = group.initialized.get(topic)
                group.initialized[topic] = TopicPartitionsInfo(
                    topic,
                    info.topic_name,
                    ok | (before.partitions if before else frozenset()),
                    before.create_timestamp if before else info.create_timestamp,
                )
        self._runtime.write_records(
            group.group_id, [self._state_partitions_record(group)], log_failure(group.group_id)
        )

    def on_topic_deleted(self, topic: str) -> None:
        """A deleted topic's share-partitions leave every share group's record of them (the
        share coordinator forgets their state itself)."""
        for group in list(self._groups.values()):
            doomed = [
                t
                for infos in (group.initializing, group.initialized)
                for t, info in infos.items()
                if info.topic_name == topic
            ]
            if group.dead or not doomed:
                continue
            for topic_id in doomed:
                group.initializing.pop(topic_id, None)
                group.initialized.pop(topic_id, None)
            self._runtime.write_records(
                group.group_id, [self._state_partitions_record(group)], log_failure(group.group_id)
            )

    # -- admin ------------------------------------------------------------------------------
    def describe(self, group_id: str) -> tuple[ErrorCode, str | None, ShareGroup | None]:
        error = self._runtime.owner_error(group_id)
        if error is not None:
            return error, None, None
        group = self._groups.get(group_id)
        if group is None or group.dead:
            if group_id in self._runtime.consumer_groups or group_id in self._runtime.groups:
                return ErrorCode.group_id_not_found, f"Group {group_id} is not a share group.", None
            return ErrorCode.group_id_not_found, f"Group {group_id} not found.", None
        return ErrorCode.none, None, group

    def groups(self) -> list[ShareGroup]:
        return [g for g in self._groups.values() if not g.dead]

    def unused(self, group_id: str) -> bool:
        """No group of any type has the id (nor a share group being deleted)."""
        runtime = self._runtime
        return not any(
            group_id in groups for groups in (self._groups, runtime.consumer_groups, runtime.groups)
        )

    def create(self, group_id: str) -> ShareGroup:
        """A new, empty share group of an unused id; its first record makes it persistent."""
        group = self._groups[group_id] = ShareGroup(group_id)
        return group

    def forget(self, group: ShareGroup) -> None:
        """Drop a group created but never written (nothing to tombstone)."""
        if self._groups.get(group.group_id) is group:
            del self._groups[group.group_id]

    def get(self, group_id: str) -> ShareGroup | None:
        """The live share group of the id (None: none, or being deleted)."""
        group = self._groups.get(group_id)
        return None if group is None or group.dead else group

    def delete(self, group: ShareGroup) -> asyncio.Future[ErrorCode]:
        """DeleteGroups of an empty group: the state of its share-partitions is deleted
        (``SharePersister.delete``), then its records are tombstoned."""
        future: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()

        def done(error: ErrorCode) -> None:
            if not future.done():
                future.set_result(error)

        async def delete_state() -> None:
            if self._persister is not None:
                for topic, p in sorted(group.known_partitions()):
                    try:
                        await self._persister.delete(group.group_id, topic, p)
                    except ShareStateError as e:
                        done(e.error)
                        return
            if self.get(group.group_id) is not group:
                done(ErrorCode.group_id_not_found)
            elif not group.is_empty():
                done(ErrorCode.non_empty_group)  # a member joined meanwhile
            else:
                self._runtime.delete_share_group(group, done)

        task = asyncio.get_running_loop().create_task(delete_state())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return future

    def shutdown(self) -> None:
        for group in self._groups.values():
            for member in group.members.values():
                _cancel(member)
        for task in self._tasks:
            task.cancel()


def _validate(r: ShareHeartbeatRequest) -> None:
    """Kafka's throwIfShareGroupHeartbeatRequestIsInvalid."""

    def invalid(message: str) -> KafkaError:
        return KafkaError(ErrorCode.invalid_request, message)

    if not r.member_id.strip():
        raise invalid("MemberId can't be empty.")
    if not r.group_id.strip():
        raise invalid("GroupId can't be empty.")
    if r.rack_id is not None and not r.rack_id.strip():
        raise invalid("RackId can't be empty.")
    if r.member_epoch == 0:
        if not r.subscribed_topic_names:
            raise invalid("SubscribedTopicNames must be set in first request.")
    elif r.member_epoch < LEAVE_GROUP_MEMBER_EPOCH:
        raise invalid("MemberEpoch is invalid.")


def _check_epoch(member: ShareMember, epoch: int) -> None:
    """Kafka's throwIfShareGroupMemberEpochIsInvalid: a member one epoch behind is accepted
    (the response that moved it on may have been lost)."""
    known = member.member_epoch
    if epoch > known:
        raise KafkaError(
            ErrorCode.fenced_member_epoch,
            f"The share group member has a greater member epoch ({epoch}) than the one known "
            f"by the group coordinator ({known}). The member must abandon all its partitions "
            "and rejoin.",
        )
    if epoch < known and epoch != member.previous_member_epoch:
        raise KafkaError(
            ErrorCode.fenced_member_epoch,
            f"The share group member has a smaller member epoch ({epoch}) than the one known "
            f"by the group coordinator ({known}), and it does not match the previous member "
            f"epoch ({member.previous_member_epoch}). The member must abandon all its "
            "partitions and rejoin.",
        )


def _cancel(member: ShareMember) -> None:
    if member.session_timer is not None:
        member.session_timer.cancel()
        member.session_timer = None
