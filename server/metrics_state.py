"""The broker state a scrape reports as gauges (partition counts, log sizes, consumer-group
lag), read in one go on the event loop thread, where that state lives and changes, into
plain tuples the scrape thread may then read at leisure."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple

from controller.metadata import MetadataCache
from coordinator.group import Group
from replica.partition import Partition


class LogState(NamedTuple):
    """One hosted replica's log (Kafka's kafka.log:type=Log MBeans)."""

    topic: str
    partition: int
    size: int  # bytes in its segment files
    start_offset: int
    end_offset: int
    segments: int


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
    logs: list[LogState]
    group_offsets: list[GroupOffset]


def read_state(
    replicas: Iterable[Partition],
    cache: MetadataCache,
    groups: Mapping[str, Group],
    active_controller: bool,
    log_offline: Callable[[str, int], bool],
) -> BrokerState:
    """Must run on the event loop thread. ``groups`` are those this broker coordinates;
    lag is known for the partitions it hosts (a follower's high watermark trails the
    leader's by one fetch at most)."""
    hosted: dict[tuple[str, int], Partition] = {}
    logs = []
    leaders = under_replicated = 0
    for p in replicas:
        hosted[(p.topic, p.index)] = p
        log = p.log
        logs.append(
            LogState(
                p.topic,
                p.index,
                log.size_bytes,
                log.log_start_offset,
                log.log_end_offset,
                len(log.segments),
            )
        )
        if p.is_leader:
            leaders += 1
            if len(p.isr) < len(p.replicas):
                under_replicated += 1
    offline = 0
    if active_controller:
        for topic in cache.topics.values():
            for info in topic.partitions.values():
                led_here = hosted.get((topic.name, info.index))
                if cache.live_leader(info) is None or (
                    led_here is not None
                    and led_here.is_leader
                    and log_offline(topic.name, info.index)
                ):
                    offline += 1
    group_offsets = []
    for group in groups.values():
        for (topic, index), committed in group.offsets.items():
            partition = hosted.get((topic, index))
            if partition is not None:
                group_offsets.append(
                    GroupOffset(
                        group.group_id,
                        topic,
                        index,
                        committed.offset,
                        partition.high_watermark - committed.offset,
                    )
                )
    return BrokerState(
        len(hosted), leaders, under_replicated, offline, active_controller, logs, group_offsets
    )
