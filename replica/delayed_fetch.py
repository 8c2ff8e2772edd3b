"""A fetch parked until enough bytes are available (Kafka's DelayedFetch).

Each partition of the fetch keeps where its fetch offset lies in the log, so that when a
partition changes, the bytes now available there are a subtraction of two positions in
one segment, and only that partition is looked at. The data is read again when the fetch
completes; when nothing was found at first, only the partitions that changed since are
(the others' first, empty answers stand). A follower's fetch of thousands of partitions,
woken by an append to one of them, so reads that one, not all of them: with acks=all
there is such a round per produce. Consumers wait on the high watermark, followers
(replica fetchers) on the log end; both fetch through this, except a follower in a fetch
session, which parks on its session (``SessionFetch``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TypeVar

from gregor.log.log import ReadResult
from gregor.replica.fetch_session import FetchSession
from gregor.replica.partition import LogPosition, Partition
from gregor.replica.purgatory import DelayedOperation
from gregor.wire.fetch import FetchTopic

R = TypeVar("R")


@dataclass(slots=True)
class PartitionFetch:
    """One partition of a parked fetch."""

    partition: Partition
    leader_epoch: int  # the partition's when the fetch was read: a change completes it
    start: LogPosition | None  # None: not known, nothing is counted until completion
    max_bytes: int
    follower: bool  # waits on the log end instead of the high watermark
    available: int = 0
    answer_now: bool = False  # as read: it must be answered at once
    read_committed: bool = False  # waits on the last stable offset

    def _end(self) -> LogPosition:
        partition = self.partition
        if self.follower:
            return partition.log_end_position()
        if self.read_committed:
            return partition.last_stable_position()
        return partition.high_watermark_position()

    @classmethod
    def after_read(
        cls,
        partition: Partition,
        offset: int,
        region: ReadResult,
        max_bytes: int,
        *,
        follower: bool = False,
        read_committed: bool = False,
    ) -> PartitionFetch:
        """The state of a partition just read from ``offset``."""
        state = cls(
            partition,
            partition.leader_epoch,
            None,
            max_bytes,
            follower,
            read_committed=read_committed,
        )
        end = state._end()
        if region.size:
            state.start = LogPosition(offset, region.segment_base, region.position)
        elif offset == end.offset:  # at the end, just read: nothing yet (most partitions)
            state.start = end
            return state
        available = state.bytes_available()
        state.available = available or 0
        state.answer_now = available is None
        return state

    def bytes_available(self) -> int | None:
        """Bytes readable now from the fetch offset; None when the fetch must be answered
        at once (leadership changed or the partition was removed, or the offset is no
        longer in the end's segment: a roll, retention or truncation)."""
        partition = self.partition
        if partition.leader_epoch != self.leader_epoch or not partition.is_leader:
            return None
        start = self.start
        if start is None:
            return 0
        end = self._end()
        if end.offset == start.offset:  # also just after a roll: the end is on the old segment
            return 0
        if end.segment_base != start.segment_base:
            return None
        if start.offset < end.offset:
            return min(end.position - start.position, self.max_bytes)
        return 0


class DelayedFetch(DelayedOperation[R]):
    def __init__(
        self,
        partitions: list[PartitionFetch],
        min_bytes: int,
        respond: Callable[[], R],
        name: str = "fetch",
        *,
        refresh: Callable[[set[Hashable]], R] | None = None,
    ) -> None:
        """``respond`` reads the partitions again and answers; ``refresh`` (given when the
        first read found nothing) answers with the first read, the partitions of the keys
        it is given read again: those that changed since (every change of a partition's
        data, high watermark or leadership is checked here)."""
        self.name = f"{name} of {len(partitions)} partition(s)"
        self._by_key: dict[Hashable, list[PartitionFetch]] = {}
        for state in partitions:
            self._by_key.setdefault((state.partition.topic, state.partition.index), []).append(
                state
            )
        self._min_bytes = min_bytes
        self._respond = respond
        self._refresh = refresh
        self._changed: set[Hashable] = set()
        self.accumulated = sum(state.available for state in partitions)

    @property
    def keys(self) -> list[Hashable]:
        return list(self._by_key)

    def ready(self) -> bool:
        """Whether the fetch can be answered now, as first read (before parking)."""
        return self.accumulated >= self._min_bytes or any(
            s.answer_now for states in self._by_key.values() for s in states
        )

    def try_complete(self, key: Hashable) -> R | None:
        self._changed.add(key)
        for state in self._by_key.get(key, ()):
            available = state.bytes_available()
            if available is None:
                return self.force_complete()
            self.accumulated += available - state.available
            state.available = available
        if self.accumulated >= self._min_bytes:
            return self.force_complete()
        return None

    def force_complete(self) -> R:
        if self._refresh is not None:
            return self._refresh(self._changed)
        return self._respond()


class SessionFetch(DelayedOperation[R]):
    """A follower's fetch parked on its fetch session (the one key it watches): every
    change of one of the session's partitions makes it dirty there and checks this, which
    reads the partitions changed since it last looked (one, usually) to count their bytes;
    it answers once they hold ``min_bytes``, or at a leadership change or an error, with
    every dirty partition read then."""

    def __init__(
        self,
        session: FetchSession,
        min_bytes: int,
        read: Callable[[list[tuple[str, int]] | None], tuple[list[FetchTopic], int]],
        respond: Callable[[list[FetchTopic]], R],
        name: str = "fetch",
    ) -> None:
        """``read(keys)`` reads those partitions, or (None) takes and reads the session's
        dirty ones; -1 bytes: an error or a diverging epoch. ``respond`` answers with the
        partitions read last, besides the first read."""
        self.name = f"{name} of {len(session.partitions)} partition(s) in session {session.id}"
        self._session = session
        self._min_bytes = min_bytes
        self._read = read
        self._respond = respond
        self._available: dict[tuple[str, int], int] = {}
        self._total = 0
        session.changed = set()

    def try_complete(self, key: Hashable) -> R | None:
        changed = self._session.take_changed()
        if not changed:
            return None
        topics, available = self._read(changed)
        if available < 0:
            return self.force_complete()
        for topic in topics:
            for p in topic.partitions:
                records = p.records  # never None here: a read sets b"" or a region
                size = len(records) if isinstance(records, bytes) else records.size  # type: ignore[union-attr]
                tp = (topic.name, p.index)
                self._total += size - self._available.get(tp, 0)
                self._available[tp] = size
        if self._total >= self._min_bytes:
            return self.force_complete()
        return None

    def force_complete(self) -> R:
        return self._respond(self._read(None)[0])
