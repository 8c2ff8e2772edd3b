"""The broker state a scrape reports as gauges (partition counts, log sizes, consumer-group
lag), read on the event loop thread, where that state lives and changes, into plain
tuples, a step at a time (``read_state``), for the exporter to format."""

from __future__ import annotations

import asyncio
import sys
import time
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from typing import NamedTuple

from gregor.controller.metadata.cache import MetadataCache
from gregor.coordinator.group import Group
from gregor.replica.partition import Partition


class LogState(NamedTuple):
    """One hosted replica's log (Kafka's kafka.log:type=Log MBeans)."""

    topic: str
    partition: int
    size: int  # bytes in its segment files
    start_offset: int
    end_offset: int
    segments: int


class Logs:
    """The hosted replicas' logs in columns: a handful of objects however many
    partitions (tuples per partition, kept across the slices of a scrape, would reach
    the garbage collector's oldest generation and bring on full collections of the whole
    broker heap: 100 ms at 41,000 partitions)."""

    __slots__ = ("topics", "partitions", "sizes", "start_offsets", "end_offsets", "segments")

    def __init__(self) -> None:
        self.topics: list[str] = []
        self.partitions = array("q")
        self.sizes = array("q")
        self.start_offsets = array("q")
        self.end_offsets = array("q")
        self.segments = array("q")

    @classmethod
    def of(cls, logs: Iterable[LogState]) -> Logs:
        columns = cls()
        for log in logs:
            columns.append(*log)
        return columns

    def append(
        self, topic: str, partition: int, size: int, start: int, end: int, segments: int
    ) -> None:
        self.topics.append(topic)
        self.partitions.append(partition)
        self.sizes.append(size)
        self.start_offsets.append(start)
        self.end_offsets.append(end)
        self.segments.append(segments)

    def column(self, field: int) -> array[int]:
        """A LogState field's column (2: size ... 5: segments)."""
        return (self.sizes, self.start_offsets, self.end_offsets, self.segments)[field - 2]

    def __len__(self) -> int:
        return len(self.topics)

    def __iter__(self) -> Iterator[LogState]:
        return map(
            LogState,
            self.topics,
            self.partitions,
            self.sizes,
            self.start_offsets,
            self.end_offsets,
            self.segments,
        )


class GroupOffset(NamedTuple):
    """A group's committed offset of a partition this broker hosts, and how far the
    partition's high watermark is ahead of it."""

    group: str
    topic: str
    partition: int
    offset: int
    lag: int


class BrokerState(NamedTuple):
    partitions: int  # hosted replicas
    leaders: int  # of which this broker leads
    under_replicated: int  # led here with an ISR smaller than the replica set
    offline: int  # without a live, online leader (reported by the active controller only)
    active_controller: bool
    logs: Logs
    group_offsets: list[GroupOffset]


class Steps:
    """The slices of one scrape: between two, the event loop serves everything else.
    Times each slice in CPU time of the loop's thread (on a shared machine, wall time
    would count other processes' turns too)."""

    def __init__(self) -> None:
        self.count = 0
        self.longest = 0.0
        self.longest_at = ""  # where the longest slice ended
        self.cpu = 0.0
        self._last = time.thread_time()

    def end_slice(self, depth: int = 1) -> None:
        took = time.thread_time() - self._last
        self.count += 1
        self.cpu += took
        if took > self.longest:
            self.longest = took
            frame = sys._getframe(depth)  # noqa: SLF001
            self.longest_at = f"{frame.f_code.co_name}:{frame.f_lineno}"

    async def pause(self) -> None:
        self.end_slice(3)
        await asyncio.sleep(0)
        self._last = time.thread_time()


STEPS: ContextVar[Steps | None] = ContextVar("metrics_steps", default=None)


async def pause() -> None:
    """Yield to the event loop between two slices of a scrape (timed if the scrape set
    STEPS)."""
    steps = STEPS.get()
    if steps is None:
        await asyncio.sleep(0)
    else:
        await steps.pause()


# Partitions (or group offsets) read per step: a step holds the event loop about 1.5 ms
# (measured at 41,000 partitions), then lets it serve the Kafka port.
STEP = 500


async def read_state(
    replicas: Iterable[Partition],
    cache: MetadataCache,
    groups: Mapping[str, Group],
    active_controller: bool,
    log_offline: Callable[[str, int], bool],
) -> BrokerState:
    """Must run on the event loop. Reads STEP partitions at a time and yields to the loop
    between steps, so a broker with 50,000 partitions is never held for more than a few
    milliseconds; the values of one scrape may then be a few steps apart in time, which
    gauges tolerate (a partition deleted meanwhile may still appear once). ``groups`` are
    those this broker coordinates; lag is known for the partitions it hosts (a
    follower's high watermark trails the leader's by one fetch at most)."""
    # Topic -> partition index -> replica: a few dicts of plain ints (no tuple per key).
    hosted: dict[str, dict[int, Partition]] = {}
    logs = Logs()
    leaders = under_replicated = offline_logs = 0
    partitions = list(replicas)
    for start in range(0, len(partitions), STEP):
        if start:
            await pause()
        for p in partitions[start : start + STEP]:
            topic, index = p.topic, p.index
            by_index = hosted.get(topic)
            if by_index is None:
                by_index = hosted[topic] = {}
            by_index[index] = p
            log = p.log
            logs.append(
                topic,
                index,
                log.size_bytes,
                log.log_start_offset,
                log.log_end_offset,
                len(log.segments),
            )
            if p.is_leader:
                leaders += 1
                if len(p.isr) < len(p.replicas):
                    under_replicated += 1
                if active_controller and log_offline(topic, index):
                    led = cache.partition(topic, index)
                    if led is not None and cache.live_leader(led) is not None:
                        offline_logs += 1  # led here, its log offline: offline too
    offline = offline_logs
    if active_controller:
        done = 0
        for topic_info in list(cache.topics.values()):
            for partition_info in list(topic_info.partitions.values()):
                if cache.live_leader(partition_info) is None:
                    offline += 1
                done += 1
                if done % STEP == 0:
                    await pause()
    group_offsets: list[GroupOffset] = []
    done = 0
    for group in list(groups.values()):
        for (topic, index), committed in list(group.offsets.items()):
            hosted_partition = hosted.get(topic, {}).get(index)
            if hosted_partition is not None:
                group_offsets.append(
                    GroupOffset(
                        group.group_id,
                        topic,
                        index,
                        committed.offset,
                        hosted_partition.high_watermark - committed.offset,
                    )
                )
            done += 1
            if done % STEP == 0:
                await pause()
    return BrokerState(
        len(partitions), leaders, under_replicated, offline, active_controller, logs, group_offsets
    )
