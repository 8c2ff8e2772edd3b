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
``write_group``, and that record is only ever replayed at load.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from coordinator.group import Group, GroupState, TopicPartition
from coordinator.loader import PartitionLoader
from coordinator.records import (
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
from coordinator.settings import Settings
from log.errors import LogError
from replica.manager import ReplicaManager
from replica.purgatory import Purgatory
from wire.records import build_batch

logger = logging.getLogger(__name__)

Records = list[tuple[bytes, bytes | None]]
Done = Callable[[ErrorCode], None]
GroupHook = Callable[[Group], None]


# -- replay: the one place records become state ---------------------------------------------
def replay(groups: dict[str, Group], key: bytes, value: bytes | None) -> None:
    """Apply one record read from the log (raises RecordFormatError if it won't parse)."""
    decoded = decode_key(key)
    if isinstance(decoded, OffsetKey):
        offset = None if value is None else decode_offset_value(value)
        replay_offsets(groups, decoded.group, (((decoded.topic, decoded.partition), offset),))
    elif isinstance(decoded, GroupKey):
        replay_group(groups, decoded.group, None if value is None else decode_group_value(value))


def replay_offsets(
    groups: dict[str, Group],
    group_id: str,
    offsets: Iterable[tuple[TopicPartition, OffsetValue | None]],
) -> None:
    """Offset commits, and tombstones (None). A group that never had metadata is gone with
    its last offset."""
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


@dataclass(eq=False, slots=True)
class _Write:
    """A write waiting for the high watermark: ``apply`` runs once it is committed, even if
    ``done`` (its answer, called once) timed out meanwhile."""

    end: int
    apply: Callable[[], None] | None
    done: Done | None


class CoordinatorRuntime:
    def __init__(
        self,
        settings: Settings,
        replicas: ReplicaManager,
        append_purgatory: Purgatory,
        now_ms: Callable[[], int],
    ) -> None:
        self.settings = settings
        self._replicas = replicas
        # Appends park here until committed; it is checked whenever a partition changes.
        self._append_purgatory = append_purgatory
        self._now = now_ms
        self.groups: dict[str, Group] = {}
        self._loading: dict[int, asyncio.Task[None]] = {}
        # Partitions loaded and led, each with its writes waiting to be committed.
        self._pending: dict[int, deque[_Write]] = {}

    # -- ownership --------------------------------------------------------------------------
    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.settings.partitions)

    def owner_error(self, group_id: str) -> ErrorCode | None:
        """COORDINATOR_LOAD_IN_PROGRESS while the group's partition is being loaded, and
        NOT_COORDINATOR unless this broker leads that partition."""
        index = self.partition_for(group_id)
        if index in self._pending:
            return None
        if index in self._loading:
            return ErrorCode.coordinator_load_in_progress
        return ErrorCode.not_coordinator

    def loading(self) -> bool:
        return bool(self._loading)

    def partitions(self) -> list[int]:
        """The partitions loaded or loading."""
        return [*self._pending, *self._loading]

    def load(self, index: int, loaded: GroupHook) -> None:
        """Replay the partition's log into its groups; ``loaded`` is called for each once
        they are all in place."""
        partition = self._replicas.get(OFFSETS_TOPIC, index)
        if partition is None or index in self._pending or index in self._loading:
            return
        started = time.monotonic()
        groups: dict[str, Group] = {}
        loader = PartitionLoader(partition, lambda key, value: replay(groups, key, value))
        if loader.step():  # a small partition (the usual case) is ready at once
            self._loaded(index, groups, loaded, started)
            return
        logger.info("Loading %s-%d in the background", OFFSETS_TOPIC, index)
        self._loading[index] = asyncio.get_running_loop().create_task(
            self._load(index, loader, groups, loaded, started)
        )

    async def _load(
        self,
        index: int,
        loader: PartitionLoader,
        groups: dict[str, Group],
        loaded: GroupHook,
        started: float,
    ) -> None:
        """Replay the rest of the partition, yielding to the event loop between chunks."""
        try:
            while True:
                await asyncio.sleep(0)
                if loader.step():
                    break
        except Exception as e:  # noqa: BLE001 - the partition must not stay "loading"
            self._loading.pop(index, None)
            logger.error(
                "Loading %s-%d failed: %s: %s", OFFSETS_TOPIC, index, type(e).__name__, e
            )
            return
        self._loading.pop(index, None)
        self._loaded(index, groups, loaded, started)

    def _loaded(
        self, index: int, groups: dict[str, Group], loaded: GroupHook, started: float
    ) -> None:
        self.groups.update(groups)
        self._pending[index] = deque()
        for group in groups.values():
            loaded(group)
        if groups:
            logger.info(
                "Loaded %d group(s) from %s-%d in %.3fs",
                len(groups),
                OFFSETS_TOPIC,
                index,
                time.monotonic() - started,
            )

    def unload(self, index: int, unloaded: GroupHook) -> None:
        """Forget the partition: stop its load, drop its groups (``unloaded`` is called for
        each first, so their parked requests are answered), and fail its writes in flight
        with NOT_COORDINATOR: what of them the log keeps comes back with the next load."""
        task = self._loading.pop(index, None)
        if task is not None:
            task.cancel()
        pending = self._pending.pop(index, None)
        for group_id in [g for g in self.groups if self.partition_for(g) == index]:
            unloaded(self.groups.pop(group_id))
        if pending:
            for write in pending:
                _answer(write, ErrorCode.not_coordinator)
            pending.clear()  # nothing of this leadership is applied any more
            # Their parked appends see they are answered and leave the purgatory.
            self._append_purgatory.check((OFFSETS_TOPIC, index))

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
        self._append(group_id, records, done, lambda: replay_offsets(self.groups, group_id, items))

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
            replay_offsets(self.groups, group_id, doomed.items())
            replay_group(self.groups, group_id, None)

        if not self._append(group_id, records, done, apply):
            group.state, group.state_timestamp = state, since

    def write_group(
        self, group: Group, done: Done, assignments: dict[str, bytes] | None = None
    ) -> None:
        """The group's metadata record (its image: applied to nothing but a later load)."""
        value = encode_group_value(group.to_value(assignments))
        self._append(group.group_id, [(encode_group_key(group.group_id), value)], done, None)

    def _append(
        self, group_id: str, records: Records, done: Done, apply: Callable[[], None] | None
    ) -> bool:
        """Append to the group's partition; ``apply`` runs once the records are committed,
        then ``done``. False if nothing was appended (``done`` has had the error)."""
        index = self.partition_for(group_id)
        pending = self._pending.get(index)
        partition = self._replicas.get(OFFSETS_TOPIC, index)
        if pending is None or partition is None or not partition.is_leader:
            done(ErrorCode.not_coordinator)
            return False
        now = self._now()
        batch = build_batch([(key, value, (), now) for key, value in records])
        try:
            appended = self._replicas.append(partition, batch, now, origin_client=False)
        except LogError as e:
            logger.warning("Writing to %s-%d failed: %s", OFFSETS_TOPIC, index, e)
            done(_append_error(ErrorCode(e.error_code)))
            return False
        end = appended.last_offset + 1
        if not pending and partition.high_watermark >= end:  # one broker: at once
            if apply is not None:
                apply()
            done(ErrorCode.none)
            return True
        write = _Write(end, apply, done)
        pending.append(write)

        def try_complete(force: bool) -> bool | None:
            # The partition became a follower before the coordinator was told: its high
            # watermark commits nothing of this leadership; the unload will drop the writes.
            leader = partition.is_leader
            if leader:
                _apply_committed(pending, partition.high_watermark)
            if write.done is None:
                return True
            if not leader:
                _answer(write, ErrorCode.not_coordinator)
            elif force:
                _answer(write, ErrorCode.request_timed_out)
            else:
                return None
            return True

        # Earlier writes whose answers timed out may be waiting in front of this one.
        if try_complete(False) is None:
            self._append_purgatory.park(
                [(OFFSETS_TOPIC, index)], self.settings.commit_timeout_ms, try_complete
            )
        return True


def _apply_committed(pending: deque[_Write], high_watermark: int) -> None:
    """Apply and answer the writes the high watermark has passed, in log order."""
    while pending and high_watermark >= pending[0].end:
        committed = pending.popleft()
        if committed.apply is not None:
            committed.apply()
        _answer(committed, ErrorCode.none)


def log_failure(group_id: str) -> Done:
    """The ``done`` of a write nobody waits for: a failure is logged."""

    def done(error: ErrorCode) -> None:
        if error != ErrorCode.none:
            logger.warning("Writing records of group %s failed: %s", group_id, error.name)

    return done


def _answer(write: _Write, error: ErrorCode) -> None:
    done, write.done = write.done, None
    if done is not None:
        done(error)


def _append_error(code: ErrorCode) -> ErrorCode:
    """Kafka's mapping of a failed __consumer_offsets append to what the client sees."""
    if code in (
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
    ):
        return ErrorCode.coordinator_not_available
    if code in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return ErrorCode.not_coordinator
    if code in (
        ErrorCode.message_too_large,
        ErrorCode.record_list_too_large,
        ErrorCode.invalid_fetch_size,
    ):
        return code
    return ErrorCode.unknown_server_error
