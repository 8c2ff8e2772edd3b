"""The metadata cache every broker answers Metadata from.

It is written only by the controller side (embedded or, later, the ZooKeeper
controller's UpdateMetadata) and read by the API handlers.
"""

from __future__ import annotations

import uuid
from collections.abc import Container
from dataclasses import dataclass, field

from controller.topics import unify_collision_chars


@dataclass(slots=True)
class BrokerInfo:
    node_id: int
    endpoints: dict[str, tuple[str, int]]  # listener name -> advertised (host, port)
    rack: str | None = None

    def endpoint(self, listener: str) -> tuple[str, int] | None:
        return self.endpoints.get(listener)


@dataclass(slots=True)
class PartitionInfo:
    index: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]


@dataclass(slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionInfo]
    configs: dict[str, str] = field(default_factory=dict)
    internal: bool = False


class MetadataCache:
    def __init__(self, cluster_id: str, controller_id: int) -> None:
        self.cluster_id = cluster_id
        self.controller_id = controller_id
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicInfo] = {}
        self._ids: dict[uuid.UUID, str] = {}
        self._unified: dict[str, str] = {}  # name with '.' as '_' -> the topic holding it

    def put_topic(self, topic: TopicInfo) -> None:
        self.topics[topic.name] = topic
        self._ids[topic.topic_id] = topic.name
        self._unified[unify_collision_chars(topic.name)] = topic.name

    def remove_topic(self, name: str) -> TopicInfo | None:
        topic = self.topics.pop(name, None)
        if topic is not None:
            self._ids.pop(topic.topic_id, None)
            self._unified.pop(unify_collision_chars(name), None)
        return topic

    def colliding_topic(self, name: str) -> str | None:
        """Another topic whose name equals `name` once '.' and '_' are treated alike (they
        would share metric names), as Kafka refuses to create such a pair."""
        other = self._unified.get(unify_collision_chars(name))
        return None if other == name else other

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return self._ids.get(topic_id)

    def partition_indexes(self, topic: str) -> Container[int]:
        """The topic's partition indexes; none for an unknown topic."""
        info = self.topics.get(topic)
        return () if info is None else info.partitions

    def partition(self, topic: str, index: int) -> PartitionInfo | None:
        info = self.topics.get(topic)
        return None if info is None else info.partitions.get(index)
