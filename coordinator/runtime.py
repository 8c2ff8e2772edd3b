"""The ``__consumer_offsets`` partitions this broker leads: their groups, and the one place
where a record of theirs is applied to those groups.

Becoming a partition's leader replays its log (``load``: a chunk at a time in a task,
answering COORDINATOR_LOAD_IN_PROGRESS for its groups meanwhile); resigning drops its
groups and fails its writes in flight with NOT_COORDINATOR (``unload``). Offset commits and
tombstones are written with ``write_offsets`` / ``delete_group``: appended, and once
committed (the high watermark has passed them; with one broker at once) applied with the
same ``replay`` the load uses, in log order, then answered. So memory and log agree: a
record is applied if and only if it is committed. Group metadata is the exception Kafka
makes too: the membership keeps the live group in memory, writes its image with
``write_group``, and that record is only ever replayed at load. So are the records of
consumer-protocol groups (KIP-848, ``consumer_groups``): their membership applies each
change to the live group and writes its records with ``write_records``, and so are share
groups' (KIP-932, ``share_groups``).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from gregor.coordinator.consumer_group import (
    CONSUMER_KEYS,
    ConsumerGroup,
    replay_record,
)
from gregor.coordinator.consumer_records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerKey,
    decode_value,
    encode_key,
)
from gregor.coordinator.group import Group, GroupState, TopicPartition
from gregor.coordinator.loader import PartitionLoader
from gregor.coordinator.partitions import CoordinatorPartitions, Done, Producer, Records
from gregor.coordinator.records import (
    OFFSETS_TOPIC,
    GroupKey,
    GroupValue,
    OffsetKey,
    OffsetValue,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
    partition_for,
)
from gregor.coordinator.settings import Settings
from gregor.coordinator.share_group import (
    SHARE_KEYS,
    ShareGroup,
    replay_share_record,
    share_group_tombstones,
)
from gregor.coordinator.share_records import decode_value as decode_share_value
from gregor.replica.manager import ReplicaManager
from gregor.replica.purgatory import Purgatory

logger = logging.getLogger(__name__)

GroupHook = Callable[[Group], None]
ConsumerGroupHook = Callable[[ConsumerGroup], None]
ShareGroupHook = Callable[[ShareGroup], None]
# A partition's transactional offsets of one producer: (group, topic partition) -> when
# the record was applied (a number that grows in log order) and its value, None once a
# commit written after it superseded it.
TxnOffsets = dict[tuple[str, TopicPartition], tuple[int, OffsetValue | None]]


# -- replay: the one place records become state ---------------------------------------------
def replay(
    groups: dict[str, Group],
    key: bytes,
    value: bytes | None,
    txns: dict[int, TxnOffsets] | None = None,
    consumer_groups: dict[str, ConsumerGroup] | None = None,
    share_groups: dict[str, ShareGroup] | None = None,
) -> None:
    """Apply one record read from the log (raises RecordFormatError if it won't parse).
    Records of consumer-protocol groups go to ``consumer_groups``, those of share groups to
    ``share_groups`` (ignored without)."""
    decoded = decode_key(key)
    if isinstance(decoded, OffsetKey):
        offset = None if value is None else decode_offset_value(value)
        tp = (decoded.topic, decoded.partition)
        replay_offsets(groups, decoded.group, ((tp, offset),), txns)
    elif isinstance(decoded, GroupKey):
        replay_group(groups, decoded.group, None if value is None else decode_group_value(value))
    elif consumer_groups is not None and isinstance(decoded, CONSUMER_KEYS):
        replay_record(
            consumer_groups, decoded, None if value is None else decode_value(decoded, value)
        )
    elif share_groups is not None and isinstance(decoded, SHARE_KEYS):
        replay_share_record(
            share_groups, decoded, None if value is None else decode_share_value(decoded, value)
        )


def replay_offsets(
    groups: dict[str, Group],
    group_id: str,
    offsets: Iterable[tuple[TopicPartition, OffsetValue | None]],
    txns: dict[int, TxnOffsets] | None = None,
    *,
    before: int | None = None,
) -> None:
    """Offset commits, and tombstones (None). A group that never had metadata is gone with
    its last offset. ``txns``: the partition's pending transactional offsets, which these
    supersede (those applied before ``before``; all when None) or, deleted, lose."""
    if txns:
        offsets = list(offsets)
        _supersede(txns, group_id, offsets, before)
    group = groups.get(group_id)
    if group is None:
        group = groups[group_id] = Group(group_id)
    stored = group.offsets
    for tp, value in offsets:
        if value is None:
            stored.pop(tp, None)
        else:
            stored[tp] = value
    if not (stored or group.generation or group.protocol_type or group.pending_members):
        del groups[group_id]  # nothing left that a load would bring back


def replay_group(groups: dict[str, Group], group_id: str, value: GroupValue | None) -> None:
    """Group metadata (at load only), or its tombstone: the group is gone, but offsets
    committed after its deletion was written keep it as a group without metadata."""
    group = groups.pop(group_id, None)
    if value is not None:
        group = group or Group(group_id)
        group.load(value)
        groups[group_id] = group
    elif group is not None and group.offsets:
        groups[group_id] = Group(group_id, offsets=group.offsets)


def _supersede(
    txns: dict[int, TxnOffsets],
    group_id: str,
    offsets: list[tuple[TopicPartition, OffsetValue | None]],
    before: int | None,
) -> None:
    """Kafka's rule: a transaction's offset, once committed, does not overwrite a commit
    of the partition written after it; a deleted offset takes pending ones along."""
    for tp, value in offsets:
        key = (group_id, tp)
        for pending in txns.values():
            entry = pending.get(key)
            if entry is None:
                continue
            if value is None:
                del pending[key]
            elif before is None or entry[0] < before:
                pending[key] = (entry[0], None)


def complete_txn_offsets(
    groups: dict[str, Group], txns: dict[int, TxnOffsets], producer_id: int, commit: bool
) -> None:
    """The producer's transaction ended: its offsets are committed, or dropped."""
    pending = txns.pop(producer_id, None)
    if pending and commit:
        for (group_id, tp), (order, value) in sorted(pending.items(), key=lambda e: e[1][0]):
            if value is not None:
                replay_offsets(groups, group_id, ((tp, value),), txns, before=order)


class CoordinatorRuntime:
    def __init__(
        self,
        settings: Settings,
        replicas: ReplicaManager,
        append_purgatory: Purgatory[Any],
        now_ms: Callable[[], int],
    ) -> None:
        self.settings = settings
        self._now = now_ms
        self.log = CoordinatorPartitions(
            OFFSETS_TOPIC, replicas, append_purgatory, settings.commit_timeout_ms, now_ms
        )
        # Classic groups, and every group's committed offsets (a consumer-protocol group's
        # in a Group of its id without metadata).
        self.groups: dict[str, Group] = {}
        self.consumer_groups: dict[str, ConsumerGroup] = {}
        self.share_groups: dict[str, ShareGroup] = {}
        # Per partition, per producer id: offsets a transaction wrote (TxnOffsetCommit),
        # visible once its COMMIT marker is committed, dropped by its ABORT.
        self.txn_offsets: dict[int, dict[int, TxnOffsets]] = {}
        # Numbers transactional offsets in the order they are applied (log order).
        self._txn_order = itertools.count()

    # -- ownership --------------------------------------------------------------------------
    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.settings.partitions)

    def owner_error(self, group_id: str) -> ErrorCode | None:
        """COORDINATOR_LOAD_IN_PROGRESS while the group's partition is being loaded, and
        NOT_COORDINATOR unless this broker leads that partition."""
        return self.log.owner_error(self.partition_for(group_id))

    def loading(self) -> bool:
        return self.log.loading()

    def partitions(self) -> list[int]:
        """The partitions loaded or loading."""
        return self.log.partitions()

    def load(
        self,
        index: int,
        loaded: GroupHook,
        consumer_loaded: ConsumerGroupHook,
        share_loaded: ShareGroupHook,
    ) -> None:
        """Replay the partition's log into its groups; ``loaded`` (``consumer_loaded``,
        ``share_loaded``) is called for each once they are all in place."""
        partition = self.log.get(index)
        if partition is None:
            return
        groups: dict[str, Group] = {}
        consumer_groups: dict[str, ConsumerGroup] = {}
        share_groups: dict[str, ShareGroup] = {}
        txns: dict[int, TxnOffsets] = {}

        def transactional(producer_id: int, key: bytes, value: bytes | None) -> None:
            decoded = decode_key(key)
            if isinstance(decoded, OffsetKey) and value is not None:
                offsets = txns.setdefault(producer_id, {})
                tp = (decoded.topic, decoded.partition)
                offsets[decoded.group, tp] = (next(self._txn_order), decode_offset_value(value))

        def marker(producer_id: int, commit: bool, _offset: int) -> None:
            complete_txn_offsets(groups, txns, producer_id, commit)

        loader = PartitionLoader(
            partition,
            lambda key, value: replay(groups, key, value, txns, consumer_groups, share_groups),
            transactional=transactional,
            marker=marker,
        )

        def done() -> None:
            self.groups.update(groups)
            self.consumer_groups.update(consumer_groups)
            self.share_groups.update(share_groups)
            self.txn_offsets[index] = txns
            for group in groups.values():
                loaded(group)
            for consumer_group in consumer_groups.values():
                consumer_loaded(consumer_group)
            for share_group in share_groups.values():
                share_loaded(share_group)
            if groups or consumer_groups or share_groups:
                logger.info(
                    "Loaded %d group(s) from %s-%d",
                    len(groups.keys() | consumer_groups.keys() | share_groups.keys()),
                    OFFSETS_TOPIC,
                    index,
                )

        self.log.load(index, loader, done)

    def unload(
        self,
        index: int,
        unloaded: GroupHook,
        consumer_unloaded: ConsumerGroupHook,
        share_unloaded: ShareGroupHook,
    ) -> None:
        """Forget the partition: stop its load, drop its groups (``unloaded`` /
        ``consumer_unloaded`` / ``share_unloaded`` is called for each first, so their parked
        requests are answered and their timers stop), and fail its writes in flight with
        NOT_COORDINATOR: what of them the log keeps comes back with the next load."""
        for group_id in [g for g in self.groups if self.partition_for(g) == index]:
            unloaded(self.groups.pop(group_id))
        for group_id in [g for g in self.consumer_groups if self.partition_for(g) == index]:
            consumer_unloaded(self.consumer_groups.pop(group_id))
        for group_id in [g for g in self.share_groups if self.partition_for(g) == index]:
            share_unloaded(self.share_groups.pop(group_id))
        self.txn_offsets.pop(index, None)
        self.log.unload(index)

    # -- transactional offsets --------------------------------------------------------------
    def write_txn_offsets(
        self,
        group_id: str,
        producer: Producer,
        offsets: Mapping[TopicPartition, OffsetValue],
        done: Done,
    ) -> None:
        """TxnOffsetCommit: a transactional batch of the producer; pending until its
        transaction's marker."""
        index = self.partition_for(group_id)
        records: Records = [
            (encode_offset_key(group_id, topic, partition), encode_offset_value(value))
            for (topic, partition), value in offsets.items()
        ]

        def apply() -> None:
            txns = self.txn_offsets.setdefault(index, {})
            pending = txns.setdefault(producer.producer_id, {})
            for tp, value in offsets.items():
                pending[group_id, tp] = (next(self._txn_order), value)

        self.log.append(index, records, done, apply, producer)

    def on_txn_marker(self, index: int, producer_id: int, commit: bool, marker_offset: int) -> None:
        """A COMMIT or ABORT marker was appended to the partition: the producer's pending
        offsets become committed offsets (or are dropped) once the marker is committed."""

        def apply() -> None:
            txns = self.txn_offsets.get(index)
            if txns is not None:
                complete_txn_offsets(self.groups, txns, producer_id, commit)

        self.log.apply_at(index, marker_offset + 1, apply)

    def pending_txn_offsets(self, group_id: str) -> set[TopicPartition]:
        """The group's partitions that an ongoing transaction holds offsets of (OffsetFetch's
        require_stable answers UNSTABLE_OFFSET_COMMIT for them)."""
        txns = self.txn_offsets.get(self.partition_for(group_id))
        if not txns:
            return set()
        return {tp for pending in txns.values() for g, tp in pending if g == group_id}

    # -- writes -----------------------------------------------------------------------------
    def write_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, OffsetValue | None], done: Done
    ) -> None:
        """Commit offsets (a value) or delete them (None)."""
        records: Records = [
            (
                encode_offset_key(group_id, topic, partition),
                None if value is None else encode_offset_value(value),
            )
            for (topic, partition), value in offsets.items()
        ]
        items = offsets.items()
        index = self.partition_for(group_id)

        def apply() -> None:
            replay_offsets(self.groups, group_id, items, self.txn_offsets.get(index))

        self._append(group_id, records, done, apply)

    def delete_group(self, group: Group, done: Done) -> None:
        """Tombstone the group and its offsets. It is Dead at once (no member can join it)
        and gone once they are committed; if nothing could be written it is as it was."""
        group_id = group.group_id
        state, since = group.state, group.state_timestamp
        group.transition(GroupState.DEAD, self._now())
        doomed = dict.fromkeys(group.offsets)
        records: Records = [(encode_offset_key(group_id, t, p), None) for t, p in doomed]
        records.append((encode_group_key(group_id), None))

        def apply() -> None:
            txns = self.txn_offsets.get(self.partition_for(group_id))
            replay_offsets(self.groups, group_id, doomed.items(), txns)
            replay_group(self.groups, group_id, None)

        if not self._append(group_id, records, done, apply):
            group.state, group.state_timestamp = state, since

    def write_records(self, group_id: str, records: Records, done: Done) -> bool:
        """Records of a consumer-protocol or share group, whose live state has them already
        (they are replayed at load only)."""
        return self._append(group_id, records, done, None)

    def delete_consumer_group(self, group: ConsumerGroup, done: Done) -> None:
        """Tombstone an empty consumer-protocol group and its offsets (DeleteGroups). It
        is Dead at once and gone once they are committed; if nothing could be written it
        is as it was."""
        group_id = group.group_id
        stored = self.groups.get(group_id)
        doomed = dict.fromkeys(stored.offsets if stored is not None else ())
        records: Records = [(encode_offset_key(group_id, t, p), None) for t, p in doomed]
        records.extend(consumer_group_tombstones(group))
        group.dead = True

        def apply() -> None:
            txns = self.txn_offsets.get(self.partition_for(group_id))
            replay_offsets(self.groups, group_id, doomed.items(), txns)
            if self.consumer_groups.get(group_id) is group:
                del self.consumer_groups[group_id]

        if not self._append(group_id, records, done, apply):
            group.dead = False

    def delete_share_group(self, group: ShareGroup, done: Done) -> None:
        """Tombstone an empty share group (DeleteGroups). It is Dead at once and gone once
        they are committed; if nothing could be written it is as it was."""
        group.dead = True

        def apply() -> None:
            if self.share_groups.get(group.group_id) is group:
                del self.share_groups[group.group_id]

        if not self._append(group.group_id, share_group_tombstones(group), done, apply):
            group.dead = False

    def drop_consumer_group(self, group: ConsumerGroup, done: Done) -> None:
        """An empty consumer-protocol group makes way for a classic group of its id: its
        records are tombstoned, its offsets stay."""
        del self.consumer_groups[group.group_id]
        group.dead = True
        self._append(group.group_id, consumer_group_tombstones(group), done, None)

    def write_group(
        self, group: Group, done: Done, assignments: dict[str, bytes] | None = None
    ) -> None:
        """The group's metadata record (its image: applied to nothing but a later load)."""
        value = encode_group_value(group.to_value(assignments))
        self._append(group.group_id, [(encode_group_key(group.group_id), value)], done, None)

    def _append(
        self, group_id: str, records: Records, done: Done, apply: Callable[[], None] | None
    ) -> bool:
        return self.log.append(self.partition_for(group_id), records, done, apply)


def consumer_group_tombstones(group: ConsumerGroup) -> Records:
    """Every record of the group, tombstoned in Kafka's order (its members' records, the
    target assignment's, its regexes' resolutions, then the group's metadata)."""
    group_id = group.group_id
    keys: list[ConsumerKey] = []
    for member_id in group.members:
        keys += (
            ConsumerGroupCurrentMemberAssignmentKey(group_id, member_id),
            ConsumerGroupTargetAssignmentMemberKey(group_id, member_id),
            ConsumerGroupMemberMetadataKey(group_id, member_id),
        )
    keys.append(ConsumerGroupTargetAssignmentMetadataKey(group_id))
    keys += (ConsumerGroupRegularExpressionKey(group_id, r) for r in group.resolved_regexes)
    keys.append(ConsumerGroupMetadataKey(group_id))
    return [(encode_key(key), None) for key in keys]


def log_failure(group_id: str) -> Done:
    """The ``done`` of a write nobody waits for: a failure is logged."""

    def done(error: ErrorCode) -> None:
        if error != ErrorCode.none:
            logger.warning("Writing records of group %s failed: %s", group_id, error.name)

    return done
