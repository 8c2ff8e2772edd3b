"""A fetch parked until enough bytes are available (Kafka's DelayedFetch).

Each partition of the fetch keeps where its fetch offset lies in the log, so that when a
partition changes, the bytes now available there are a subtraction of two positions in
one segment, and only that partition is looked at. The data is read once, when the fetch
completes. Consumers wait on the high watermark, followers (replica fetchers) on the log
end; both fetch through this.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TypeVar

from log.log import ReadResult
from replica.partition import LogPosition, Partition
from replica.purgatory import DelayedOperation

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

    @classmethod
    def after_read(
        cls,
        partition: Partition,
        offset: int,
        region: ReadResult,
        max_bytes: int,
        *,
        follower: bool = False,
    ) -> PartitionFetch:
        """The state of a partition just read from ``offset``."""
        end = partition.log_end_position() if follower else partition.high_watermark_position()
        if region.size:
            start: LogPosition | None = LogPosition(offset, region.segment_base, region.position)
        elif offset == end.offset:
            start = end
        else:
            start = None
        state = cls(partition, partition.leader_epoch, start, max_bytes, follower)
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
        end = (
            partition.log_end_position() if self.follower else partition.high_watermark_position()
        )
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
    ) -> None:
        self.name = f"{name} of {len(partitions)} partition(s)"
        self._by_key: dict[Hashable, list[PartitionFetch]] = {}
        for state in partitions:
            self._by_key.setdefault((state.partition.topic, state.partition.index), []).append(
                state
            )
        self._min_bytes = min_bytes
        self._respond = respond
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
        for state in self._by_key.get(key, ()):
            available = state.bytes_available()
            if available is None:
                return self._respond()
            self.accumulated += available - state.available
            state.available = available
        if self.accumulated >= self._min_bytes:
            return self._respond()
        return None

    def force_complete(self) -> R:
        return self._respond()
