"""The metadata cache every broker answers Metadata from.

It is written only by the controller side (the embedded controller, or in cluster mode the
controller's UpdateMetadata requests through ``apply_update_metadata``) and read by the API
handlers.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from gregor.controller.metadata.config_resource import BROKER, DEFAULT_BROKER, TOPIC, ConfigResource
from gregor.controller.metadata.topic_names import INTERNAL_TOPICS, unify_collision_chars

# The leader an UpdateMetadata names for a partition of a topic being deleted (Kafka's
# LeaderAndIsr.LeaderDuringDelete): the partition leaves the cache.
LEADER_DURING_DELETE = -2
NO_LEADER = -1
ZERO_UUID = uuid.UUID(int=0)


@dataclass(slots=True)
class BrokerInfo:
    node_id: int
    endpoints: dict[str, tuple[str, int]]  # listener name -> advertised (host, port)
    rack: str | None = None

    def endpoint(self, listener: str) -> tuple[str, int] | None:
        return self.endpoints.get(listener)


@dataclass(slots=True)
class PartitionInfo:
    """A partition's state as the controller last sent it; replaced, never changed, when
    that state changes (so what is derived from it can be kept on it)."""

    index: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline_replicas: list[int] = field(default_factory=list)
    # Its last Metadata entry, encoded, with what that encoding depended on (apis/metadata.py).
    encoded: tuple[Any, bytes] | None = field(default=None, compare=False, repr=False)


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
        # Dynamic configs of brokers (per id, and the cluster default) and groups; a topic's
        # are its TopicInfo.configs.
        self.configs: dict[ConfigResource, dict[str, str]] = {}
        # Grows with each topic this cache learns of (not with partition changes): what
        # consumer groups' regex subscriptions check before scanning the topic names again.
        self.topics_added = 0

    def put_topic(self, topic: TopicInfo) -> None:
        if topic.topic_id not in self._ids:
            self.topics_added += 1
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

    def dynamic_configs(self, resource: ConfigResource) -> dict[str, str]:
        if resource.type == TOPIC:
            topic = self.topics.get(resource.name)
            return {} if topic is None else topic.configs
        return self.configs.get(resource, {})

    def set_dynamic_configs(self, resource: ConfigResource, configs: Mapping[str, str]) -> None:
        """Replace a resource's dynamic configs (a topic's only if it exists)."""
        if resource.type == TOPIC:
            topic = self.topics.get(resource.name)
            if topic is not None:
                topic.configs = dict(configs)
        elif configs:
            self.configs[resource] = dict(configs)
        else:
            self.configs.pop(resource, None)

    def broker_props(self, static: Mapping[str, str], broker_id: int) -> dict[str, str]:
        """A broker's effective properties: its dynamic configs over the cluster defaults
        over its server.properties (Kafka's KIP-226 precedence)."""
        return {
            **static,
            **self.configs.get(ConfigResource(BROKER, DEFAULT_BROKER), {}),
            **self.configs.get(ConfigResource(BROKER, str(broker_id)), {}),
        }

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return self._ids.get(topic_id)

    def partition_indexes(self, topic: str) -> Collection[int]:
        """The topic's partition indexes; none for an unknown topic."""
        info = self.topics.get(topic)
        return () if info is None else info.partitions

    def partition(self, topic: str, index: int) -> PartitionInfo | None:
        info = self.topics.get(topic)
        return None if info is None else info.partitions.get(index)

    def live_leader(self, partition: PartitionInfo) -> BrokerInfo | None:
        """The partition's leader if it is a live broker, else None (no leader elected, or
        the leader died and the controller has not yet moved the partition)."""
        return self.brokers.get(partition.leader)


def apply_update_metadata(cache: MetadataCache, request: Any) -> set[tuple[str, int]]:
    """Apply a controller's UpdateMetadata (v5+ layout: topic states with topic ids, live
    brokers with endpoints) as Kafka's ZooKeeper-mode metadata cache does: the live brokers
    and controller are replaced, the partitions named are added or updated, those whose
    leader is LEADER_DURING_DELETE removed (with their topic once it has none left), and
    partitions not named are kept. Returns the (topic, partition) pairs removed."""
    cache.controller_id = request.controller_id
    cache.brokers = {
        b.id: BrokerInfo(
            b.id,
            {e.listener.upper(): (e.host, e.port) for e in b.endpoints},
            b.rack,
        )
        for b in request.live_brokers
    }
    deleted: set[tuple[str, int]] = set()
    for state in request.topic_states:
        name = state.topic_name
        existing = cache.topics.get(name)
        topic_id = state.topic_id
        if topic_id is None or topic_id == ZERO_UUID:
            topic_id = existing.topic_id if existing is not None else ZERO_UUID
        if existing is not None and existing.topic_id != topic_id:
            # The topic was deleted and created again under the same name: a new topic.
            deleted.update((name, i) for i in existing.partitions)
            cache.remove_topic(name)
            existing = None
        partitions = dict(existing.partitions) if existing is not None else {}
        for p in state.partition_states:
            if p.leader == LEADER_DURING_DELETE:
                if partitions.pop(p.partition_index, None) is not None:
                    deleted.add((name, p.partition_index))
                continue
            partitions[p.partition_index] = PartitionInfo(
                p.partition_index,
                p.leader,
                p.leader_epoch,
                list(p.replicas),
                list(p.isr),
                list(p.offline_replicas),
            )
        if existing is not None:
            cache.remove_topic(name)
        if partitions:
            cache.put_topic(
                TopicInfo(
                    name,
                    topic_id,
                    partitions,
                    existing.configs if existing is not None else {},
                    internal=name in INTERNAL_TOPICS,
                )
            )
    return deleted
