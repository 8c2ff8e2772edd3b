"""The embedded single-node controller used when no ZooKeeper is configured.

This broker is the only one: it leads every partition. Topic metadata, leader epochs
and the producer-id block live in one JSON file in the first log directory, rewritten
atomically on every change, and are replayed into the metadata cache at start-up.

The file is the commit point of every topic change: a topic's logs are created (and their
directory entries made durable) before the file names it, and dropped only after the file
no longer does, so a crash at any instant leaves the whole topic or none of it. Each start
is a new leader election: every partition's leader epoch grows by one, persisted before
this broker leads at it, so the epoch never goes back and clients can tell a restart.
"""

from __future__ import annotations

import base64
import json
import logging
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path

from kio.schema.errors import ErrorCode

from controller.metadata import BrokerInfo, MetadataCache, PartitionInfo, TopicInfo
from controller.topics import INTERNAL_TOPICS, TopicError, check_topic_name, collision_error
from log.checkpoint import write_atomically
from log.errors import KafkaStorageError

logger = logging.getLogger(__name__)

STATE_FILE = "gregor-metadata.json"
PRODUCER_ID_BLOCK = 1000

# Called with a topic's partitions: to create their logs (before the topic is committed;
# raises OSError, leaving nothing behind, if they cannot be created), to drop the logs of a
# topic that could not be committed, to lead them, or to stop leading and delete them.
TopicCallback = Callable[[TopicInfo], None]


class EmbeddedController:
    def __init__(
        self,
        state_dir: Path,
        broker: BrokerInfo,
        *,
        on_create: TopicCallback,
        on_abort: TopicCallback,
        on_lead: TopicCallback,
        on_delete: TopicCallback,
    ) -> None:
        self.path = state_dir / STATE_FILE
        self._broker = broker
        self._on_create = on_create
        self._on_abort = on_abort
        self._on_lead = on_lead
        self._on_delete = on_delete
        # A partial temp file is what a crash mid-save leaves; the file itself is intact.
        self.path.with_name(self.path.name + ".tmp").unlink(missing_ok=True)
        self.fresh = not self.path.exists()
        state = {} if self.fresh else _load(self.path)
        self.cache = MetadataCache(state.get("cluster_id") or _new_cluster_id(), broker.node_id)
        self.cache.brokers[broker.node_id] = broker
        self._next_producer_id = state.get("producer_id_block_end", 0)
        self._producer_id_block_end = self._next_producer_id
        for name, topic in state.get("topics", {}).items():
            self.cache.put_topic(
                self._topic(
                    name,
                    uuid.UUID(topic["id"]),
                    topic["partitions"],
                    topic.get("configs", {}),
                    topic.get("leader_epoch", 0),
                )
            )

    @property
    def cluster_id(self) -> str:
        return self.cache.cluster_id

    def start(self) -> None:
        """Take leadership of every known partition (after the log manager is up), at a
        leader epoch one above the last start's, saved before any append can use it."""
        for topic in self.cache.topics.values():
            for partition in topic.partitions.values():
                partition.leader_epoch += 1
        self._save()
        for topic in self.cache.topics.values():
            self._on_lead(topic)

    def _topic(
        self,
        name: str,
        topic_id: uuid.UUID,
        partitions: int,
        configs: Mapping[str, str],
        leader_epoch: int = 0,
    ) -> TopicInfo:
        me = self._broker.node_id
        return TopicInfo(
            name,
            topic_id,
            {i: PartitionInfo(i, me, leader_epoch, [me], [me]) for i in range(partitions)},
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
        colliding = self.cache.colliding_topic(name)
        if colliding is not None:
            raise collision_error(name, colliding)
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
        try:
            self._on_create(topic)
        except (OSError, KafkaStorageError) as e:
            raise _storage_error(name, e) from None
        self.cache.put_topic(topic)
        try:
            self._save()
        except OSError as e:
            self.cache.remove_topic(name)
            self._on_abort(topic)
            raise _storage_error(name, e) from None
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
        try:
            self._save()
        except OSError as e:
            self.cache.put_topic(topic)
            logger.error("Could not delete topic %s: %s", name, e)
            raise TopicError(
                ErrorCode.kafka_storage_error, f"Could not save the deletion of '{name}': {e}"
            ) from None
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
        """Rewrite the file atomically and durably (temp file, fsync, rename, directory
        fsync): the commit point of every change."""
        state = {
            "version": 1,
            "cluster_id": self.cache.cluster_id,
            "producer_id_block_end": self._producer_id_block_end,
            "topics": {
                t.name: {
                    "id": str(t.topic_id),
                    "partitions": len(t.partitions),
                    "configs": t.configs,
                    # One leader epoch per topic: its partitions are led together.
                    "leader_epoch": max(p.leader_epoch for p in t.partitions.values()),
                }
                for t in self.cache.topics.values()
            },
        }
        write_atomically(self.path, json.dumps(state, indent=1, sort_keys=True).encode())


def _load(path: Path) -> dict:
    """The saved state; a file that does not parse is fatal: starting without it would
    forget every topic and set their logs aside."""
    try:
        state = json.loads(path.read_bytes())
        if not isinstance(state, dict) or not isinstance(state.get("cluster_id"), str):
            raise ValueError("no cluster_id")
        return state
    except (ValueError, UnicodeDecodeError) as e:
        raise KafkaStorageError(
            f"The metadata file {path} is unreadable ({e}); restore it from a backup "
            "or remove the log directories' contents to start a new broker"
        ) from None


def _storage_error(topic: str, error: Exception) -> TopicError:
    logger.error("Could not create topic %s: %s", topic, error)
    return TopicError(
        ErrorCode.kafka_storage_error, f"Could not create the logs of topic '{topic}': {error}"
    )


def _new_cluster_id() -> str:
    """22-character URL-safe base64 of a random UUID, as Kafka generates cluster ids."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
