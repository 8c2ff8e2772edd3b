"""Committed offsets: OffsetCommit, OffsetFetch and OffsetDelete, the offsets a deleted
topic takes along, and their expiry (KIP-211), which also removes the empty groups left
without any. Every change is a write through the runtime, applied once committed.

A consumer-protocol group's offsets are checked against its members' epochs (Kafka's
ConsumerGroup.validateOffsetCommit/validateOffsetFetch): an empty group takes commits
with a negative epoch (admin tools, simple consumers), anything else needs a member at
exactly its epoch (UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH), and its own commits must use
OffsetCommit v9+ (UNSUPPORTED_VERSION).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from kio.schema.errors import ErrorCode

from gregor.coordinator.consumer_group import ConsumerGroup
from gregor.coordinator.consumer_membership import ConsumerMembership
from gregor.coordinator.group import Group, GroupState, TopicPartition
from gregor.coordinator.membership import Membership
from gregor.coordinator.partitions import Producer
from gregor.coordinator.records import OffsetValue
from gregor.coordinator.runtime import CoordinatorRuntime, log_failure
from gregor.coordinator.settings import Settings

logger = logging.getLogger(__name__)

CommitErrors = dict[TopicPartition, ErrorCode]
# (topic, partition, offset, leader epoch, metadata): a plain tuple, one per partition of
# every commit.
CommitRequest = tuple[str, int, int, int, str | None]


class Offsets:
    def __init__(
        self,
        settings: Settings,
        runtime: CoordinatorRuntime,
        membership: Membership,
        consumer_membership: ConsumerMembership,
        now_ms: Callable[[], int],
    ) -> None:
        self.settings = settings
        self._runtime = runtime
        self._groups = runtime.groups  # the runtime's: loaded and unloaded there
        self._consumer_groups = runtime.consumer_groups
        self._membership = membership
        self._consumer_membership = consumer_membership
        self._now = now_ms
        # Kafka's offset-commit-count, offset-expiration-count, offset-deletion-count.
        self.committed = 0
        self.expired = 0
        self.deleted = 0

    def commit_offsets(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        instance_id: str | None,
        offsets: list[CommitRequest],
        retention_ms: int = -1,
        producer: Producer | None = None,
        api_version: int = 0,
    ) -> CommitErrors | asyncio.Future[CommitErrors]:
        """The error per partition, at once when the write committed synchronously (as on
        one broker, the common case, so no future is made), else a future of it.
        ``retention_ms`` is OffsetCommit v2-v4's retention time; -1 means the broker's.
        With ``producer`` (TxnOffsetCommit) the offsets are the producer's transaction's,
        visible once it commits. ``api_version``: OffsetCommit's."""
        if producer is None:
            error = self._commit_error(group_id, generation, member_id, instance_id, api_version)
        else:
            error = self._txn_commit_error(group_id, generation, member_id, instance_id)
        if error is not None:
            return {(o[0], o[1]): error for o in offsets}
        now = self._now()
        expire = now + retention_ms if retention_ms >= 0 else -1
        max_metadata = self.settings.max_metadata_bytes
        results: CommitErrors = {}
        accepted: dict[TopicPartition, OffsetValue] = {}
        for topic, partition, offset, leader_epoch, metadata in offsets:
            metadata = metadata or ""
            # UTF-8 is at most 4 bytes a character: encode only when that could exceed.
            if len(metadata) * 4 > max_metadata and len(metadata.encode()) > max_metadata:
                results[(topic, partition)] = ErrorCode.offset_metadata_too_large
                continue
            accepted[(topic, partition)] = OffsetValue(offset, leader_epoch, metadata, now, expire)
        if not accepted:
            return results
        later: list[asyncio.Future[CommitErrors]] = []

        def stored(error: ErrorCode) -> None:
            if error in (ErrorCode.record_list_too_large, ErrorCode.message_too_large):
                error = ErrorCode.invalid_commit_offset_size
            elif error == ErrorCode.none:
                self.committed += len(accepted)
            for tp in accepted:
                results[tp] = error
            if later:
                later[0].set_result(results)

        if producer is None:
            self._runtime.write_offsets(group_id, accepted, stored)
        else:
            self._runtime.write_txn_offsets(group_id, producer, accepted, stored)
        if next(iter(accepted)) in results:  # stored already ran
            return results
        later.append(asyncio.get_running_loop().create_future())
        return later[0]

    def _commit_group(
        self, group_id: str, generation: int, missing: ErrorCode = ErrorCode.illegal_generation
    ) -> Group | ErrorCode | None:
        """The checks every offset commit starts with: an error, None when the commit is
        accepted as it is (no such group, and no generation given), or the group whose
        member fields the caller checks next. ``missing``: the error for a generation given
        to a group that does not exist."""
        if not group_id:
            return ErrorCode.invalid_group_id
        error = self._runtime.owner_error(group_id)
        if error is not None:
            return error
        if group_id in self._runtime.share_groups:
            return ErrorCode.group_id_not_found  # a share group commits no offsets
        group = self._groups.get(group_id)
        if group_id in self._consumer_groups:
            return group or Group(group_id)  # its offsets' holder; the caller checks members
        if group is None:
            return None if generation < 0 else missing
        if group.is_(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        return group

    def _commit_error(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        instance_id: str | None,
        api_version: int,
    ) -> ErrorCode | None:
        # OffsetCommit v9+ (KIP-848) names a missing group; older versions keep their answer.
        missing = ErrorCode.group_id_not_found if api_version >= 9 else ErrorCode.illegal_generation
        group = self._commit_group(group_id, generation, missing)
        if not isinstance(group, Group):
            return group
        consumer_group = self._consumer_groups.get(group_id)
        if consumer_group is not None:
            return _consumer_member_error(consumer_group, generation, member_id, api_version)
        if group.is_static_member_fenced(instance_id, member_id):
            return ErrorCode.fenced_instance_id
        if generation < 0 and group.is_(GroupState.EMPTY):
            return None
        if group.is_(GroupState.COMPLETING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if generation != group.generation:
            return ErrorCode.illegal_generation
        self._membership.schedule_heartbeat(group, member, member.session_timeout_ms)
        return None

    def _txn_commit_error(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None
    ) -> ErrorCode | None:
        """TxnOffsetCommit's checks, as Kafka's classic group (validateOffsetCommit with
        isTransactional): v0-v2 carry no member fields (member id "", generation -1, no
        instance id), and neither does a v3+ request from a producer that is not given
        the consumer's group metadata; such a commit is accepted whatever the group's
        state. Member fields that are present are checked (KIP-447): the instance id
        first (unknown: UNKNOWN_MEMBER_ID, mapped to another member: FENCED_INSTANCE_ID),
        then the member id, then the generation. The group's state is not enforced: no
        REBALANCE_IN_PROGRESS, and no heartbeat is counted."""
        group = self._commit_group(group_id, generation)
        if not isinstance(group, Group):
            return group
        consumer_group = self._consumer_groups.get(group_id)
        if consumer_group is not None:
            if generation == -1 and not member_id and instance_id is None:
                return None
            return _consumer_member_error(consumer_group, generation, member_id)
        if generation < 0 and group.is_(GroupState.EMPTY):
            return None
        if generation < 0 and not member_id and instance_id is None:
            return None
        if instance_id is not None:
            known = group.static_members.get(instance_id)
            if known is None:
                return ErrorCode.unknown_member_id
            if known != member_id:
                return ErrorCode.fenced_instance_id
        if member_id not in group.members:
            return ErrorCode.unknown_member_id
        if generation != group.generation:
            return ErrorCode.illegal_generation
        return None

    def fetch_offsets(
        self,
        group_id: str,
        partitions: list[TopicPartition] | None,
        member_id: str | None = None,
        member_epoch: int = -1,
    ) -> tuple[ErrorCode, dict[TopicPartition, OffsetValue | None]]:
        """Committed offsets (None where there is none); all of them when ``partitions``
        is None. ``member_id``/``member_epoch``: OffsetFetch v9+'s, checked against a
        consumer-protocol group's members."""
        error = self._runtime.owner_error(group_id)
        if error is not None:
            return error, {}
        if group_id in self._runtime.share_groups:
            return ErrorCode.group_id_not_found, {}
        consumer_group = self._consumer_groups.get(group_id)
        if consumer_group is not None and not (member_id is None and member_epoch < 0):
            error = _consumer_member_error(consumer_group, member_epoch, member_id or "")
            if error is not None:
                return error, {}
        group = self._groups.get(group_id)
        offsets = {} if group is None else group.offsets
        if partitions is None:
            return ErrorCode.none, dict(offsets)
        return ErrorCode.none, {tp: offsets.get(tp) for tp in partitions}

    def unstable_offsets(self, group_id: str) -> set[TopicPartition]:
        """The group's partitions with transactional offsets not yet committed or aborted."""
        return self._runtime.pending_txn_offsets(group_id)

    def delete_offsets(
        self, group_id: str, partitions: list[TopicPartition]
    ) -> asyncio.Future[tuple[ErrorCode, dict[TopicPartition, ErrorCode]]]:
        future: asyncio.Future[tuple[ErrorCode, dict[TopicPartition, ErrorCode]]] = (
            asyncio.get_running_loop().create_future()
        )
        error = self._runtime.owner_error(group_id)
        group = self._groups.get(group_id)
        if error is None and (group is None or group.is_(GroupState.DEAD)):
            error = ErrorCode.group_id_not_found
        if error is not None or group is None:
            future.set_result((error or ErrorCode.group_id_not_found, {}))
            return future
        consumer_group = self._consumer_groups.get(group_id)
        if consumer_group is not None:
            subscribed: set[str] | None = consumer_group.subscribed_topic_names()
        else:
            subscribed = set() if group.is_(GroupState.EMPTY) else group.subscribed_topics()
        if subscribed is None:  # not a consumer group: only an empty one may lose offsets
            future.set_result((ErrorCode.non_empty_group, {}))
            return future
        results = {
            tp: ErrorCode.group_subscribed_to_topic if tp[0] in subscribed else ErrorCode.none
            for tp in partitions
        }
        doomed = [tp for tp, e in results.items() if e == ErrorCode.none and tp in group.offsets]

        def stored(error: ErrorCode) -> None:
            if error == ErrorCode.none:
                self.deleted += len(doomed)
            future.set_result((ErrorCode.none, results) if error == ErrorCode.none else (error, {}))

        if doomed:
            self._runtime.write_offsets(group_id, dict.fromkeys(doomed), stored)
        else:
            stored(ErrorCode.none)
        return future

    def on_topic_deleted(self, topic: str) -> None:
        """A deleted topic takes its committed offsets along, in every group (as Kafka
        does), so a topic created again under the name starts without them."""
        for group in list(self._groups.values()):
            doomed = [tp for tp in group.offsets if tp[0] == topic]
            if doomed:
                self._runtime.write_offsets(
                    group.group_id,
                    dict.fromkeys(doomed),
                    log_failure(group.group_id),
                )

    def expire_offsets(self, now_ms: int | None = None) -> int:
        """Drop offsets past retention, and the empty groups left without any. Returns how
        many offsets went."""
        now = self._now() if now_ms is None else now_ms
        removed = 0
        for consumer_group in list(self._consumer_groups.values()):
            removed += self._expire_consumer_group(consumer_group, now)
        for group in list(self._groups.values()):
            # A member is joining, or the group's deletion is being written: leave it be.
            if (
                group.pending_members
                or group.is_(GroupState.DEAD)
                or group.group_id in self._consumer_groups
            ):
                continue
            expired = self._expired_offsets(group, now)
            removed += len(expired)
            if group.is_(GroupState.EMPTY) and len(expired) == len(group.offsets):
                logger.info(
                    "Removing empty group %s (%d expired offset(s))", group.group_id, len(expired)
                )
                self._runtime.delete_group(group, log_failure(group.group_id))
            elif expired:
                self._runtime.write_offsets(
                    group.group_id,
                    dict.fromkeys(expired),
                    log_failure(group.group_id),
                )
        self.expired += removed
        return removed

    def _expire_consumer_group(self, consumer_group: ConsumerGroup, now: int) -> int:
        """Kafka's rule for a consumer-protocol group: an offset of a topic no member
        subscribes to expires by its commit time; an empty group goes with its last
        offset."""
        if consumer_group.dead:
            return 0
        group_id = consumer_group.group_id
        group = self._groups.get(group_id)
        offsets = {} if group is None else group.offsets
        subscribed = consumer_group.subscribed_topic_names()
        retention = self.settings.offsets_retention_ms
        expired = [
            tp
            for tp, v in offsets.items()
            if tp[0] not in subscribed
            and (
                v.expire_timestamp <= now
                if v.expire_timestamp >= 0
                else v.commit_timestamp + retention <= now
            )
        ]
        if consumer_group.is_empty() and len(expired) == len(offsets):
            logger.info(
                "Removing empty consumer group %s (%d expired offset(s))", group_id, len(expired)
            )
            self._consumer_membership.delete(consumer_group, log_failure(group_id))
        elif expired:
            self._runtime.write_offsets(group_id, dict.fromkeys(expired), log_failure(group_id))
        return len(expired)

    def _expired_offsets(self, group: Group, now: int) -> list[TopicPartition]:
        """Kafka 2.1+ (KIP-211): an offset committed with its own retention (OffsetCommit
        v2-v4) expires then; any other ages from when its group became empty, from its
        commit in a group without group management, and in a stable consumer group only
        once its topic is no longer subscribed. Other offsets of live groups never do."""
        retention = self.settings.offsets_retention_ms

        def due(value: OffsetValue, base: int) -> bool:
            if value.expire_timestamp >= 0:
                return value.expire_timestamp <= now
            return base + retention <= now

        offsets = group.offsets.items()
        if not group.protocol_type:
            return [tp for tp, v in offsets if due(v, v.commit_timestamp)]
        if group.is_(GroupState.EMPTY):
            empty_since = group.state_timestamp
            return [
                tp
                for tp, v in offsets
                if due(v, empty_since if empty_since >= 0 else v.commit_timestamp)
            ]
        if group.is_(GroupState.STABLE) and group.protocol_type == "consumer":
            subscribed = group.subscribed_topics()
            if subscribed is not None:
                stale = [(tp, v) for tp, v in offsets if tp[0] not in subscribed]
                return [tp for tp, v in stale if due(v, v.commit_timestamp)]
        return []


def _consumer_member_error(
    group: ConsumerGroup, epoch: int, member_id: str, commit_version: int | None = None
) -> ErrorCode | None:
    """Kafka's ConsumerGroup.validateOffsetCommit/validateOffsetFetch: a negative epoch in
    an empty group is an admin's or a simple consumer's; else the member must exist and be
    at exactly its epoch. ``commit_version``: a non-transactional OffsetCommit's version,
    which must be 9+ for a consumer-protocol member."""
    if group.dead:
        return ErrorCode.coordinator_not_available
    if epoch < 0 and group.is_empty():
        return None
    member = group.members.get(member_id)
    if member is None:
        return ErrorCode.unknown_member_id
    if member.classic is not None:  # a classic member of the group (migration.py)
        return None if epoch == member.member_epoch else ErrorCode.illegal_generation
    if commit_version is not None and commit_version < 9:
        return ErrorCode.unsupported_version
    if epoch != member.member_epoch:
        return ErrorCode.stale_member_epoch
    return None
