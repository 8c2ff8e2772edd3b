"""Group membership of the classic protocol: JoinGroup, SyncGroup, Heartbeat and
LeaveGroup, the rebalance, session and pending-sync timers, static membership, and the
admin views and deletion of groups.

The live group is kept here in memory and its metadata record written through the runtime
(which only replays it at load). JoinGroup waits for the rest of the group in the purgatory
(the delayed join, keyed by group id); session timeouts are per-member timers rescheduled
by every heartbeat.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import traceback
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from kio.schema.errors import ErrorCode

from gregor.coordinator.consumer_membership import ConsumerMembership
from gregor.coordinator.group import Group, GroupState, Member
from gregor.coordinator.runtime import CoordinatorRuntime, log_failure
from gregor.coordinator.settings import Settings
from gregor.replica.purgatory import Purgatory

if TYPE_CHECKING:
    from gregor.coordinator.migration import Migration

logger = logging.getLogger(__name__)

_R = TypeVar("_R")

# A new member that never completes its first join is dropped after this long.
NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    member_id: str
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: tuple[tuple[str, str | None, bytes], ...] = ()  # id, instance id, metadata
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


class Membership:
    def __init__(
        self,
        settings: Settings,
        runtime: CoordinatorRuntime,
        now_ms: Callable[[], int],
        consumer: ConsumerMembership,
    ) -> None:
        self.settings = settings
        self._runtime = runtime
        self._consumer = consumer  # the consumer-protocol groups, which an id may be
        self._groups = runtime.groups  # the runtime's: loaded and unloaded there
        self._now = now_ms
        self._join_purgatory: Purgatory[bool] = Purgatory("Rebalance")
        # The online migration between the protocols (migration.py), wired by the coordinator:
        # it serves the classic members of a consumer group.
        self.migration: Migration | None = None

    # -- loading and unloading --------------------------------------------------------------
    def resume(self, group: Group) -> None:
        """A loaded group's members have a session from now on."""
        for member in group.members.values():
            self.schedule_heartbeat(group, member, member.session_timeout_ms)

    def unload(self, group: Group, error: ErrorCode = ErrorCode.not_coordinator) -> None:
        """The group's partition is no longer led here: its parked joins and syncs answer
        NOT_COORDINATOR (the members find the new coordinator) and its timers stop. An
        upgrade to a consumer group (migration.py) retires it so too, with
        REBALANCE_IN_PROGRESS (the members rejoin the consumer group)."""
        group.transition(GroupState.DEAD, self._now())
        for timer in group.pending_members.values():
            timer.cancel()
        group.pending_members.clear()
        self._cancel_pending_sync(group)
        for member in group.members.values():
            self._cancel_heartbeat(member)
            _resolve(member.join_waiter, JoinResult(error, member.member_id))
            _resolve(member.sync_waiter, SyncResult(error))
            member.join_waiter = member.sync_waiter = None
        self._join_purgatory.check(group.group_id)  # its delayed join is stale: drop it

    def shutdown(self) -> None:
        self._join_purgatory.expire_all()

    def adopt(self, group: Group, reason: str) -> None:
        """A consumer group downgraded to this classic group (migration.py): its members'
        sessions run from now, and a rebalance follows."""
        for member in group.members.values():
            self.schedule_heartbeat(group, member, member.session_timeout_ms)
        self._prepare_rebalance(group, reason)

    # -- JoinGroup --------------------------------------------------------------------------
    def join(
        self,
        group_id: str,
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
        future: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()

        def fail(error: ErrorCode) -> asyncio.Future[JoinResult]:
            future.set_result(JoinResult(error, member_id))
            return future

        if not group_id:
            return fail(ErrorCode.invalid_group_id)
        error = self._runtime.owner_error(group_id)
        if error is not None:
            return fail(error)
        if not (
            self.settings.min_session_timeout_ms
            <= session_timeout_ms
            <= self.settings.max_session_timeout_ms
        ):
            return fail(ErrorCode.invalid_session_timeout)
        if group_id in self._runtime.share_groups:
            return fail(ErrorCode.inconsistent_group_protocol)  # a share group's id
        if not self._consumer.make_way_for_classic(group_id):
            migration = self.migration
            consumer_group = None if migration is None else migration.serves(group_id)
            if migration is None or consumer_group is None:
                return fail(ErrorCode.inconsistent_group_protocol)  # a consumer group's id
            return migration.join(  # a classic member of a consumer group
                consumer_group,
                member_id,
                instance_id,
                client_id,
                client_host,
                protocol_type,
                protocols,
                session_timeout_ms,
                rebalance_timeout_ms,
                require_known_member_id,
            )
        group = self._groups.get(group_id)
        if group is None:
            if member_id:
                return fail(ErrorCode.unknown_member_id)
            group = self._groups[group_id] = Group(group_id, state_timestamp=self._now())
        if group.is_(GroupState.DEAD):
            return fail(ErrorCode.coordinator_not_available)
        known = member_id in group.members or member_id in group.pending_members
        if (
            not known
            and len(group.members) + len(group.pending_members) >= self.settings.max_group_size
        ):
            return fail(ErrorCode.group_max_size_reached)
        member = Member(
            member_id,
            instance_id,
            client_id,
            client_host,
            rebalance_timeout_ms,
            session_timeout_ms,
            protocol_type,
            protocols,
            join_waiter=future,
        )
        if not member_id:
            self._join_new(group, member, require_known_member_id)
        else:
            self._join_known(group, member)
        if group.is_(GroupState.PREPARING_REBALANCE):
            self._join_purgatory.check(group_id)
        return future

    def _join_new(self, group: Group, joining: Member, require_known_member_id: bool) -> None:
        future = joining.join_waiter
        assert future is not None
        if not group.supports(joining.protocol_type, joining.protocols):
            future.set_result(JoinResult(ErrorCode.inconsistent_group_protocol, ""))
            return
        joining.member_id = f"{joining.client_id}-{uuid.uuid4()}"
        instance_id = joining.group_instance_id
        if instance_id is not None and instance_id in group.static_members:
            self._replace_static_member(group, joining)
        elif instance_id is None and require_known_member_id:
            # KIP-394: hand out the id first, take the member in on its second join.
            loop = asyncio.get_running_loop()
            group.pending_members[joining.member_id] = loop.call_later(
                joining.session_timeout_ms / 1000,
                self._guarded,
                group,
                "Expiring pending member",
                self._expire_pending,
                group,
                joining.member_id,
            )
            future.set_result(JoinResult(ErrorCode.member_id_required, joining.member_id))
        else:
            self._add_member_and_rebalance(group, joining)

    def _join_known(self, group: Group, joining: Member) -> None:
        future = joining.join_waiter
        assert future is not None
        member_id = joining.member_id
        timer = group.pending_members.pop(member_id, None)
        if timer is not None:
            timer.cancel()
            if not group.supports(joining.protocol_type, joining.protocols):
                future.set_result(JoinResult(ErrorCode.inconsistent_group_protocol, member_id))
                return
            self._add_member_and_rebalance(group, joining)
            return
        if group.is_static_member_fenced(joining.group_instance_id, member_id):
            future.set_result(JoinResult(ErrorCode.fenced_instance_id, member_id))
            return
        member = group.members.get(member_id)
        if member is None or group.state in (GroupState.EMPTY, GroupState.DEAD):
            future.set_result(JoinResult(ErrorCode.unknown_member_id, member_id))
            return
        if not group.supports(joining.protocol_type, joining.protocols):
            future.set_result(JoinResult(ErrorCode.inconsistent_group_protocol, member_id))
            return
        is_leader = group.leader_id == member_id
        if (
            group.is_(GroupState.PREPARING_REBALANCE)
            or not member.matches(joining.protocols)
            or (group.is_(GroupState.STABLE) and is_leader)
        ):
            self._update_member_and_rebalance(group, member, joining)
        else:
            # Nothing changed: answer with the current generation again.
            future.set_result(
                self._join_result(
                    group,
                    member,
                    with_members=is_leader and group.is_(GroupState.COMPLETING_REBALANCE),
                )
            )

    def _add_member_and_rebalance(self, group: Group, member: Member) -> None:
        member.is_new = True
        group.add(member)
        if group.is_(GroupState.PREPARING_REBALANCE) and group.generation == 0:
            group.new_member_added = True
        # The member cannot heartbeat before its join answers; bound how long that may be.
        self.schedule_heartbeat(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance(group, f"member {member.member_id} joined")

    def _update_member_and_rebalance(self, group: Group, member: Member, joining: Member) -> None:
        member.protocols = joining.protocols
        member.rebalance_timeout_ms = joining.rebalance_timeout_ms
        member.session_timeout_ms = joining.session_timeout_ms
        # A retried join (e.g. on a new connection) supersedes the earlier one.
        _resolve(member.join_waiter, JoinResult(ErrorCode.rebalance_in_progress, member.member_id))
        member.join_waiter = joining.join_waiter
        self._maybe_prepare_rebalance(group, f"member {member.member_id} rejoined")

    def _replace_static_member(self, group: Group, joining: Member) -> None:
        """A static member came back with a new id: take its place, and rebalance only if
        the group's protocol would change."""
        instance_id = joining.group_instance_id
        assert instance_id is not None and joining.join_waiter is not None
        old_id = group.static_members[instance_id]
        old = group.members[old_id]
        _resolve(old.join_waiter, JoinResult(ErrorCode.fenced_instance_id, old_id))
        _resolve(old.sync_waiter, SyncResult(ErrorCode.fenced_instance_id))
        old.join_waiter = old.sync_waiter = None
        previous_leader = group.leader_id
        previous_protocols = old.protocols
        member = group.replace_static_member(instance_id, old_id, joining.member_id)
        member.client_id, member.client_host = joining.client_id, joining.client_host
        member.protocols = joining.protocols
        member.rebalance_timeout_ms = joining.rebalance_timeout_ms
        member.session_timeout_ms = joining.session_timeout_ms
        member.join_waiter = joining.join_waiter
        self.schedule_heartbeat(group, member, member.session_timeout_ms)
        if group.is_(GroupState.STABLE):
            if group.select_protocol() != group.protocol_name:
                self._maybe_prepare_rebalance(
                    group, f"static member {instance_id} rejoined with other protocols"
                )
                return
            generation = group.generation
            is_leader = group.leader_id == member.member_id

            def stored(error: ErrorCode) -> None:
                waiter = member.join_waiter
                member.join_waiter = None
                if error != ErrorCode.none:
                    logger.warning(
                        "Storing static member %s of group %s failed: %s",
                        instance_id,
                        group.group_id,
                        error.name,
                    )
                    if group.members.get(member.member_id) is member:
                        group.replace_static_member(instance_id, member.member_id, old_id)
                        member.protocols = previous_protocols
                    _resolve(waiter, JoinResult(error, ""))
                    return
                self.schedule_heartbeat(group, member, member.session_timeout_ms)
                # The old leader id tells a returning follower not to assign; a returning
                # leader learns the members but skips assigning (KIP-814).
                _resolve(
                    waiter,
                    JoinResult(
                        ErrorCode.none,
                        member.member_id,
                        generation,
                        group.protocol_type,
                        group.protocol_name,
                        member.member_id if is_leader else previous_leader or "",
                        self._member_list(group) if is_leader else (),
                        skip_assignment=is_leader,
                    ),
                )

            self._runtime.write_group(group, stored)
        elif group.is_(GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(
                group,
                f"static member {instance_id} rejoined while the group was completing a rebalance",
            )

    def _expire_pending(self, group: Group, member_id: str) -> None:
        if group.pending_members.pop(member_id, None) is not None and group.is_(
            GroupState.PREPARING_REBALANCE
        ):
            self._join_purgatory.check(group.group_id)

    # -- resilience -------------------------------------------------------------------------
    def _guarded(
        self, group: Group, what: str, callback: Callable[..., _R], *args: Any
    ) -> _R | bool:
        """Run a timer's or a parked join's callback. A fault in it must not leave the group
        stuck (in PreparingRebalance, or with a member never removed): log one line and
        reset the group's membership, so that its members join again."""
        try:
            return callback(*args)
        except Exception as e:  # noqa: BLE001 - any fault; the group must recover
            frame = traceback.extract_tb(e.__traceback__)[-1]
            self._reset_membership(
                group,
                f"{what} failed with {type(e).__name__}: {e} "
                f"({Path(frame.filename).name}:{frame.lineno})",
            )
            return True

    def _reset_membership(self, group: Group, reason: str) -> None:
        """Drop every member (their parked requests get UNKNOWN_MEMBER_ID, so they rejoin)
        and leave the group Empty in a new generation; its committed offsets stay."""
        if group.is_(GroupState.DEAD):
            return
        logger.error(
            "Resetting group %s (generation %d, %d member(s)): %s",
            group.group_id,
            group.generation,
            len(group.members),
            reason,
        )
        # Makes any parked join of this group stale.
        group.rebalance_id += 1
        for timer in group.pending_members.values():
            timer.cancel()
        group.pending_members.clear()
        self._cancel_pending_sync(group)
        for member in group.members.values():
            self._cancel_heartbeat(member)
            _resolve(member.join_waiter, JoinResult(ErrorCode.unknown_member_id, member.member_id))
            _resolve(member.sync_waiter, SyncResult(ErrorCode.unknown_member_id))
            member.join_waiter = member.sync_waiter = None
        group.members.clear()
        group.static_members.clear()
        group.leader_id = group.protocol_name = None
        group.new_member_added = False
        group.generation += 1
        group.transition(GroupState.EMPTY, self._now())
        self._runtime.write_group(group, log_failure(group.group_id))

    # -- rebalance --------------------------------------------------------------------------
    def _maybe_prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY):
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.is_(GroupState.COMPLETING_REBALANCE):
            self._propagate_assignment_error(group, ErrorCode.rebalance_in_progress)
        initial = group.is_(GroupState.EMPTY)
        self._cancel_pending_sync(group)
        group.transition(GroupState.PREPARING_REBALANCE, self._now())
        logger.info(
            "Preparing to rebalance group %s in state PreparingRebalance with old "
            "generation %d (reason: %s)",
            group.group_id,
            group.generation,
            reason,
        )
        group.rebalance_id += 1
        rebalance_id = group.rebalance_id
        timeout = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
        if initial:
            delay = self.settings.initial_rebalance_delay_ms
            self._park_initial_join(group, rebalance_id, delay, max(timeout - delay, 0))
        else:
            self._park_join(group, rebalance_id, timeout)

    def _current(self, group: Group, rebalance_id: int) -> bool:
        return group.rebalance_id == rebalance_id and group.is_(GroupState.PREPARING_REBALANCE)

    def _park_join(self, group: Group, rebalance_id: int, timeout_ms: int) -> None:
        def try_complete(force: bool) -> bool | None:
            if not self._current(group, rebalance_id):
                return True
            if force or group.all_joined():
                self._complete_join(group)
                return True
            return None

        def guarded(force: bool) -> bool | None:
            return self._guarded(group, "Completing the join", try_complete, force)

        if guarded(False) is None:  # e.g. the last member left: complete at once
            self._join_purgatory.park([group.group_id], timeout_ms, guarded)

    def _park_initial_join(
        self, group: Group, rebalance_id: int, delay_ms: int, remaining_ms: int
    ) -> None:
        """The first rebalance of an empty group waits group.initial.rebalance.delay.ms,
        longer while members keep arriving (up to the rebalance timeout)."""

        def try_complete(force: bool) -> bool | None:
            if not self._current(group, rebalance_id):
                return True
            if not force:
                return None
            if group.new_member_added and remaining_ms > 0:
                group.new_member_added = False
                delay = min(self.settings.initial_rebalance_delay_ms, remaining_ms)
                self._park_initial_join(group, rebalance_id, delay, remaining_ms - delay)
            else:
                self._complete_join(group)
            return True

        self._join_purgatory.park(
            [group.group_id],
            delay_ms,
            lambda force: self._guarded(group, "Completing the join", try_complete, force),
        )

    def _complete_join(self, group: Group) -> None:
        dropped = [m for m in group.not_yet_rejoined() if m.group_instance_id is None]
        for member in dropped:  # static members keep their place
            self._cancel_heartbeat(member)
            group.remove(member.member_id)
        if dropped:
            logger.info(
                "Group %s removed dynamic members who had not rejoined in the rebalance "
                "timeout: %s",
                group.group_id,
                ", ".join(m.member_id for m in dropped),
            )
        group.maybe_elect_joined_leader()
        group.generation += 1
        now = self._now()
        if not group.members:
            group.protocol_name = None
            group.leader_id = None
            group.transition(GroupState.EMPTY, now)
            logger.info(
                "Group %s with generation %d is now empty", group.group_id, group.generation
            )
            self._runtime.write_group(group, log_failure(group.group_id))
            return
        protocol = group.select_protocol()
        if protocol is None:  # the join checks keep this from happening
            self._reset_membership(group, "its members have no protocol in common")
            return
        group.protocol_name = protocol
        group.transition(GroupState.COMPLETING_REBALANCE, now)
        logger.info(
            "Stabilized group %s generation %d with %d member(s)",
            group.group_id,
            group.generation,
            len(group.members),
        )
        for member in group.members.values():
            waiter = member.join_waiter
            if waiter is None:
                continue
            member.join_waiter = None
            member.is_new = False
            _resolve(
                waiter,
                self._join_result(group, member, with_members=member.member_id == group.leader_id),
            )
            self.schedule_heartbeat(group, member, member.session_timeout_ms)
        self._schedule_pending_sync(group)

    def _schedule_pending_sync(self, group: Group) -> None:
        """Members that joined this generation must send SyncGroup within the rebalance
        timeout, or they are removed so the group does not wait for them for ever."""
        self._cancel_pending_sync(group)
        group.pending_sync = set(group.members)
        timeout_ms = max(m.rebalance_timeout_ms for m in group.members.values())
        group.pending_sync_timer = asyncio.get_running_loop().call_later(
            timeout_ms / 1000,
            self._guarded,
            group,
            "Expiring pending syncs",
            self._pending_sync_expired,
            group,
            group.generation,
        )

    @staticmethod
    def _cancel_pending_sync(group: Group) -> None:
        if group.pending_sync_timer is not None:
            group.pending_sync_timer.cancel()
            group.pending_sync_timer = None
        group.pending_sync.clear()

    def _pending_sync_expired(self, group: Group, generation: int) -> None:
        group.pending_sync_timer = None
        if group.generation != generation or group.state not in (
            GroupState.COMPLETING_REBALANCE,
            GroupState.STABLE,
        ):
            return
        pending = [group.members[m] for m in group.pending_sync if m in group.members]
        group.pending_sync.clear()
        for member in pending:
            logger.info(
                "Member %s in group %s did not sync within the rebalance timeout, removing it",
                member.member_id,
                group.group_id,
            )
            self._remove_member_and_update(group, member, "pending sync expired")

    def _member_list(self, group: Group) -> tuple[tuple[str, str | None, bytes], ...]:
        return tuple(
            (m.member_id, m.group_instance_id, m.metadata(group.protocol_name))
            for m in group.members.values()
        )

    def _join_result(self, group: Group, member: Member, *, with_members: bool) -> JoinResult:
        return JoinResult(
            ErrorCode.none,
            member.member_id,
            group.generation,
            group.protocol_type,
            group.protocol_name,
            group.leader_id or "",
            self._member_list(group) if with_members else (),
        )

    # -- SyncGroup --------------------------------------------------------------------------
    def sync(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> asyncio.Future[SyncResult]:
        future: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        if (
            self.migration is not None
            and (consumer_group := self.migration.serves(group_id)) is not None
        ):  # a classic member of a consumer group
            future.set_result(
                self.migration.sync(
                    consumer_group, generation, member_id, instance_id, protocol_type, protocol_name
                )
            )
            return future
        error = self._member_error(group_id, generation, member_id, instance_id)
        group = self._groups.get(group_id)
        if error is None and group is not None:
            if (protocol_type is not None and protocol_type != group.protocol_type) or (
                protocol_name is not None and protocol_name != group.protocol_name
            ):
                error = ErrorCode.inconsistent_group_protocol
            elif group.is_(GroupState.EMPTY):
                error = ErrorCode.unknown_member_id
            elif group.is_(GroupState.PREPARING_REBALANCE):
                error = ErrorCode.rebalance_in_progress
        if error is not None or group is None:
            future.set_result(SyncResult(error or ErrorCode.unknown_member_id))
            return future
        member = group.members[member_id]
        self.schedule_heartbeat(group, member, member.session_timeout_ms)
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            self._cancel_pending_sync(group)
        if group.is_(GroupState.STABLE):
            future.set_result(
                SyncResult(
                    ErrorCode.none, group.protocol_type, group.protocol_name, member.assignment
                )
            )
            return future
        _resolve(member.sync_waiter, SyncResult(ErrorCode.rebalance_in_progress))
        member.sync_waiter = future
        if member_id == group.leader_id:
            complete = {mid: assignments.get(mid, b"") for mid in group.members}

            def stored(error: ErrorCode) -> None:
                if not (
                    group.is_(GroupState.COMPLETING_REBALANCE) and group.generation == generation
                ):
                    return
                if error != ErrorCode.none:
                    self._propagate_assignment_error(group, error)
                    self._maybe_prepare_rebalance(
                        group, f"storing the assignment failed ({error.name})"
                    )
                    return
                for mid, member in group.members.items():
                    member.assignment = complete[mid]
                self._propagate_assignment(group)
                group.transition(GroupState.STABLE, self._now())

            self._runtime.write_group(group, stored, complete)
        return future

    def _propagate_assignment(self, group: Group) -> None:
        for member in group.members.values():
            self._answer_sync(
                group,
                member,
                SyncResult(
                    ErrorCode.none, group.protocol_type, group.protocol_name, member.assignment
                ),
            )

    def _propagate_assignment_error(self, group: Group, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
            self._answer_sync(group, member, SyncResult(error))

    def _answer_sync(self, group: Group, member: Member, result: SyncResult) -> None:
        """Answer a parked SyncGroup and restart the member's session from now: its timer
        may have fired while the request was parked, and must be armed again (as Kafka
        does when it propagates the assignment)."""
        waiter, member.sync_waiter = member.sync_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(result)
            self.schedule_heartbeat(group, member, member.session_timeout_ms)

    def _member_error(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None
    ) -> ErrorCode | None:
        """The checks Heartbeat and SyncGroup share, in Kafka's order."""
        error = self._runtime.owner_error(group_id)
        if error is not None:
            return error
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        if group.is_(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        if group.is_static_member_fenced(instance_id, member_id):
            return ErrorCode.fenced_instance_id
        if member_id not in group.members:
            return ErrorCode.unknown_member_id
        if generation != group.generation:
            return ErrorCode.illegal_generation
        return None

    # -- Heartbeat and LeaveGroup -----------------------------------------------------------
    def heartbeat(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None
    ) -> ErrorCode:
        if (
            self.migration is not None
            and (consumer_group := self.migration.serves(group_id)) is not None
        ):  # a classic member of a consumer group
            return self.migration.heartbeat(consumer_group, generation, member_id, instance_id)
        error = self._member_error(group_id, generation, member_id, instance_id)
        if error == ErrorCode.coordinator_load_in_progress:
            return ErrorCode.none  # as Kafka: the group is loading, answer blindly
        if error is not None:
            return error
        group = self._groups[group_id]
        if group.is_(GroupState.EMPTY):
            return ErrorCode.unknown_member_id
        member = group.members[member_id]
        self.schedule_heartbeat(group, member, member.session_timeout_ms)
        if group.is_(GroupState.PREPARING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave(
        self, group_id: str, leaving: Iterable[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """Remove members (id, instance id); a group-level error and one per member."""
        leaving = list(leaving)
        error = self._runtime.owner_error(group_id)
        group = self._groups.get(group_id)
        if error is None and group is not None and group.is_(GroupState.DEAD):
            error = ErrorCode.coordinator_not_available
        if error is not None:
            return error, [error] * len(leaving)
        if (
            self.migration is not None
            and (consumer_group := self.migration.serves(group_id)) is not None
        ):  # classic members of a consumer group
            return ErrorCode.none, self.migration.leave(consumer_group, leaving)
        if group is None:
            return ErrorCode.none, [ErrorCode.unknown_member_id] * len(leaving)
        return ErrorCode.none, [
            self._leave_one(group, member_id, instance_id) for member_id, instance_id in leaving
        ]

    def _leave_one(self, group: Group, member_id: str, instance_id: str | None) -> ErrorCode:
        if not member_id and instance_id is not None:
            member_id = group.static_members.get(instance_id, "")
            if not member_id:
                return ErrorCode.unknown_member_id
        if group.is_static_member_fenced(instance_id, member_id):
            return ErrorCode.fenced_instance_id
        timer = group.pending_members.pop(member_id, None)
        if timer is not None:
            timer.cancel()
            if group.is_(GroupState.PREPARING_REBALANCE):
                self._join_purgatory.check(group.group_id)
            return ErrorCode.none
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        self._remove_member_and_update(group, member, "the consumer is leaving the group")
        return ErrorCode.none

    def _remove_member_and_update(self, group: Group, member: Member, reason: str) -> None:
        _resolve(member.join_waiter, JoinResult(ErrorCode.unknown_member_id, member.member_id))
        _resolve(member.sync_waiter, SyncResult(ErrorCode.unknown_member_id))
        member.join_waiter = member.sync_waiter = None
        self._cancel_heartbeat(member)
        group.remove(member.member_id)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, f"removing member {member.member_id}: {reason}")
        elif group.is_(GroupState.PREPARING_REBALANCE):
            self._join_purgatory.check(group.group_id)

    def schedule_heartbeat(self, group: Group, member: Member, timeout_ms: int) -> None:
        """Push the member's session deadline out. Heartbeats and commits come often, so the
        timer is only re-armed when it fires early, not moved on every call."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        member.heartbeat_deadline = deadline
        timer = member.heartbeat_timer
        if timer is not None:
            if timer.when() <= deadline:
                return
            timer.cancel()
        self._arm_heartbeat(group, member, deadline)

    def _arm_heartbeat(self, group: Group, member: Member, deadline: float) -> None:
        member.heartbeat_timer = asyncio.get_running_loop().call_at(
            deadline, self._guarded, group, "Session expiry", self._heartbeat_expired, group, member
        )

    @staticmethod
    def _cancel_heartbeat(member: Member) -> None:
        if member.heartbeat_timer is not None:
            member.heartbeat_timer.cancel()
            member.heartbeat_timer = None

    def _heartbeat_expired(self, group: Group, member: Member) -> None:
        member.heartbeat_timer = None
        if group.members.get(member.member_id) is not member:
            return
        loop = asyncio.get_running_loop()
        if member.heartbeat_deadline > loop.time():
            self._arm_heartbeat(group, member, member.heartbeat_deadline)
            return
        # A member waiting in a join or sync is alive (its request is parked), unless it
        # never completed its first join.
        if not member.is_new and (member.join_waiter is not None or member.sync_waiter is not None):
            return
        logger.info(
            "Member %s in group %s has failed, removing it from the group",
            member.member_id,
            group.group_id,
        )
        self._remove_member_and_update(group, member, "session timeout expired")

    # -- admin ------------------------------------------------------------------------------
    def describe(self, group_id: str) -> tuple[ErrorCode, Group | None]:
        error = self._runtime.owner_error(group_id)
        if error is not None:
            return error, None
        group = self._groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return ErrorCode.group_id_not_found, None
        return ErrorCode.none, group

    def groups(self) -> list[Group]:
        """The classic groups (and those with offsets only), not a consumer group's
        offsets."""
        consumer = self._runtime.consumer_groups
        return [
            g
            for g in self._groups.values()
            if not g.is_(GroupState.DEAD) and g.group_id not in consumer
        ]

    def delete_groups(self, group_ids: Iterable[str]) -> asyncio.Future[dict[str, ErrorCode]]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[dict[str, ErrorCode]] = loop.create_future()
        results: dict[str, ErrorCode] = {}
        waiting = 0

        def finish() -> None:
            if waiting == 0 and not future.done():
                future.set_result(results)

        def deleted(error: ErrorCode, group_id: str) -> None:
            nonlocal waiting
            waiting -= 1
            results[group_id] = error
            finish()

        for group_id in group_ids:
            error = self._runtime.owner_error(group_id) if group_id else ErrorCode.invalid_group_id
            consumer_group = self._runtime.consumer_groups.get(group_id)
            if error is None and consumer_group is not None and not consumer_group.dead:
                if not consumer_group.is_empty():
                    results[group_id] = ErrorCode.non_empty_group
                    continue
                waiting += 1
                self._consumer.delete(consumer_group, functools.partial(deleted, group_id=group_id))
                continue
            group = self._groups.get(group_id)
            if error is None:
                if group is None or group.is_(GroupState.DEAD):
                    error = ErrorCode.group_id_not_found
                elif not group.is_(GroupState.EMPTY):
                    error = ErrorCode.non_empty_group
            if error is not None or group is None:
                results[group_id] = error or ErrorCode.group_id_not_found
                continue
            waiting += 1
            self._runtime.delete_group(group, functools.partial(deleted, group_id=group_id))
        finish()
        return future


def _resolve(future: asyncio.Future[Any] | None, result: Any) -> None:
    if future is not None and not future.done():
        future.set_result(result)
