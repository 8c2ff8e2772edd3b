"""The embedded single-node controller used when no ZooKeeper is configured.

This broker is the only one: it leads every partition. Topic metadata and the
producer-id block live in one JSON file in the first log directory, rewritten
atomically on every change, and are replayed into the metadata cache at start-up.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path

from kio.schema.errors import ErrorCode

from controller.metadata import BrokerInfo, MetadataCache, PartitionInfo, TopicInfo
from controller.topics import INTERNAL_TOPICS, TopicError, check_topic_name

logger = logging.getLogger(__name__)

STATE_FILE = "gregor-metadata.json"
PRODUCER_ID_BLOCK = 1000

# Called when this broker must lead (or stop leading) a topic's partitions.
LeadCallback = Callable[[TopicInfo], None]


class EmbeddedController:
    def __init__(
        self, state_dir: Path, broker: BrokerInfo, *, on_lead: LeadCallback, on_delete: LeadCallback
    ) -> None:
        self._path = state_dir / STATE_FILE
        self._broker = broker
        self._on_lead = on_lead
        self._on_delete = on_delete
        state = json.loads(self._path.read_text()) if self._path.exists() else {}
        self.cache = MetadataCache(state.get("cluster_id") or _new_cluster_id(), broker.node_id)
        self.cache.brokers[broker.node_id] = broker
        self._next_producer_id = state.get("producer_id_block_end", 0)
        self._producer_id_block_end = self._next_producer_id
        for name, topic in state.get("topics", {}).items():
            self.cache.put_topic(
                self._topic(
                    name, uuid.UUID(topic["id"]), topic["partitions"], topic.get("configs", {})
                )
            )

    @property
    def cluster_id(self) -> str:
        return self.cache.cluster_id

    def start(self) -> None:
        """Take leadership of every known partition (after the log manager is up)."""
        self._save()
        for topic in self.cache.topics.values():
            self._on_lead(topic)

    def _topic(
        self, name: str, topic_id: uuid.UUID, partitions: int, configs: Mapping[str, str]
    ) -> TopicInfo:
        me = self._broker.node_id
        return TopicInfo(
            name,
            topic_id,
            {i: PartitionInfo(i, me, 0, [me], [me]) for i in range(partitions)},
            dict(configs),
            internal=name in INTERNAL_TOPICS,
        )

    def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        *,
        validate_only: bool = False,
        check_configs: Callable[[Mapping[str, str]], None] | None = None,
    ) -> TopicInfo:
        check_topic_name(name)
        if name in self.cache.topics:
            raise TopicError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
        if partitions < 1:
            raise TopicError(
                ErrorCode.invalid_partitions, "Number of partitions must be larger than 0."
            )
        if replication_factor < 1:
            raise TopicError(
                ErrorCode.invalid_replication_factor, "Replication factor must be larger than 0."
            )
        if replication_factor > len(self.cache.brokers):
            raise TopicError(
                ErrorCode.invalid_replication_factor,
                f"Unable to replicate the partition {replication_factor} time(s): "
                f"The target replication factor of {replication_factor} cannot be "
                f"reached because only {len(self.cache.brokers)} broker(s) are "
                "registered.",
            )
        if check_configs is not None:
            check_configs(configs)
        topic = self._topic(name, uuid.uuid4(), partitions, configs)
        if validate_only:
            return topic
        self.cache.put_topic(topic)
        self._save()
        logger.info(
            "Created topic %s with %d partition(s) and configs %s", name, partitions, dict(configs)
        )
        self._on_lead(topic)
        return topic

    def delete_topic(self, name: str) -> TopicInfo:
        topic = self.cache.topics.get(name)
        if topic is None:
            raise TopicError(
                ErrorCode.unknown_topic_or_partition,
                "This server does not host this topic-partition.",
            )
        self.cache.remove_topic(name)
        self._save()
        logger.info("Deleted topic %s", name)
        self._on_delete(topic)
        return topic

    def allocate_producer_id(self) -> int:
        """A producer id never handed out before, even across restarts."""
        if self._next_producer_id >= self._producer_id_block_end:
            self._producer_id_block_end = self._next_producer_id + PRODUCER_ID_BLOCK
            self._save()
        producer_id = self._next_producer_id
        self._next_producer_id += 1
        return producer_id

    def _save(self) -> None:
        state = {
            "version": 1,
            "cluster_id": self.cache.cluster_id,
            "producer_id_block_end": self._producer_id_block_end,
            "topics": {
                t.name: {
                    "id": str(t.topic_id),
                    "partitions": len(t.partitions),
                    "configs": t.configs,
                }
                for t in self.cache.topics.values()
            },
        }
        tmp = self._path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump(state, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._path)


def _new_cluster_id() -> str:
    """22-character URL-safe base64 of a random UUID, as Kafka generates cluster ids."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
