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
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from kio.schema.errors import ErrorCode

from controller.base import (
    Controller,
    ElectionType,
    NewPartitions,
    NewTopic,
    Reassignment,
    TopicPartition,
)
from controller.configs import ConfigResource, check_config_change
from controller.metadata import BrokerInfo, MetadataCache, PartitionInfo, TopicInfo
from controller.quota_entities import QuotaConfigs, QuotaEntity, entity_path, parse_entity_path
from controller.topics import (
    INTERNAL_TOPICS,
    TopicError,
    check_assignments,
    check_configs,
    check_replicas,
    check_topic_name,
    collision_error,
    excessive_partitions,
)
from log.checkpoint import write_atomically
from log.errors import KafkaStorageError

logger = logging.getLogger(__name__)

STATE_FILE = "gregor-metadata.json"
PRODUCER_ID_BLOCK = 1000

# Called with a topic's partitions: to create their logs (before the topic is committed;
# raises OSError, leaving nothing behind, if they cannot be created), to drop the logs of a
# topic that could not be committed, to lead them, or to stop leading and delete them.
TopicCallback = Callable[[TopicInfo], None]
# Called after a resource's dynamic configs changed, to apply them.
ConfigCallback = Callable[[ConfigResource], None]


class EmbeddedController(Controller):
    def __init__(
        self,
        state_dir: Path,
        broker: BrokerInfo,
        *,
        on_create: TopicCallback,
        on_abort: TopicCallback,
        on_lead: TopicCallback,
        on_delete: TopicCallback,
        on_quotas: Callable[[QuotaConfigs], None],
        on_configs: ConfigCallback = lambda _resource: None,
    ) -> None:
        self.path = state_dir / STATE_FILE
        self._on_quotas = on_quotas
        self._broker = broker
        self._on_create = on_create
        self._on_abort = on_abort
        self._on_lead = on_lead
        self._on_delete = on_delete
        self._on_configs = on_configs
        # A partial temp file is what a crash mid-save leaves; the file itself is intact.
        self.path.with_name(self.path.name + ".tmp").unlink(missing_ok=True)
        self.fresh = not self.path.exists()
        state = {} if self.fresh else _load(self.path)
        self.cache = MetadataCache(state.get("cluster_id") or _new_cluster_id(), broker.node_id)
        self.cache.brokers[broker.node_id] = broker
        self._next_producer_id = state.get("producer_id_block_end", 0)
        self._producer_id_block_end = self._next_producer_id
        self._quotas: QuotaConfigs = {
            entity: {k: float(v) for k, v in values.items()}
            for path, values in state.get("client_quotas", {}).items()
            if (entity := parse_entity_path(path)) is not None
        }
        for name, topic in state.get("topics", {}).items():
            self.cache.put_topic(
                self._topic(
                    name,
                    uuid.UUID(topic["id"]),
                    range(topic["partitions"]),
                    topic.get("configs", {}),
                    topic.get("leader_epoch", 0),
                )
            )
        for path, configs in state.get("configs", {}).items():
            resource = ConfigResource.from_entity_path(path)
            if resource is not None:
                self.cache.set_dynamic_configs(resource, configs)

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
        self._on_quotas(self._quotas)
        for topic in self.cache.topics.values():
            self._on_lead(topic)

    def _topic(
        self,
        name: str,
        topic_id: uuid.UUID,
        indexes: Iterable[int],
        configs: Mapping[str, str],
        leader_epoch: int = 0,
    ) -> TopicInfo:
        me = self._broker.node_id
        return TopicInfo(
            name,
            topic_id,
            {i: PartitionInfo(i, me, leader_epoch, [me], [me]) for i in indexes},
            dict(configs),
            internal=name in INTERNAL_TOPICS,
        )

    async def create_topics(
        self, topics: Sequence[NewTopic], *, validate_only: bool = False
    ) -> list[TopicInfo | TopicError]:
        error = excessive_partitions(t.partition_count for t in topics)
        if error is not None:
            return [error for _ in topics]
        return [_attempt(self._create_topic, new, validate_only) for new in topics]

    def _create_topic(self, new: NewTopic, validate_only: bool) -> TopicInfo:
        name = new.name
        check_topic_name(name)
        if name in self.cache.topics:
            raise TopicError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
        colliding = self.cache.colliding_topic(name)
        if colliding is not None:
            raise collision_error(name, colliding)
        if new.assignments is not None:
            check_assignments(new.assignments, self.cache.brokers)
            partitions = len(new.assignments)
        else:
            partitions = new.num_partitions
            if partitions < 1:
                raise TopicError(
                    ErrorCode.invalid_partitions, "Number of partitions must be larger than 0."
                )
            self._check_replication_factor(new.replication_factor)
        check_configs(new.configs)
        topic = self._topic(name, uuid.uuid4(), range(partitions), new.configs)
        if validate_only:
            return topic
        self._add_logs(topic)
        self.cache.put_topic(topic)
        try:
            self._save()
        except OSError as e:
            self.cache.remove_topic(name)
            self._on_abort(topic)
            raise _storage_error(name, e) from None
        logger.info(
            "Created topic %s with %d partition(s) and configs %s",
            name,
            partitions,
            dict(new.configs),
        )
        self._on_lead(topic)
        return topic

    def _check_replication_factor(self, replication_factor: int) -> None:
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

    def _add_logs(self, topic: TopicInfo) -> None:
        """Create the logs of `topic`'s partitions, before the file names them."""
        try:
            self._on_create(topic)
        except (OSError, KafkaStorageError) as e:
            raise _storage_error(topic.name, e) from None

    async def delete_topics(self, names: Sequence[str]) -> list[TopicInfo | TopicError]:
        return [_attempt(self._delete_topic, name) for name in names]

    def _delete_topic(self, name: str) -> TopicInfo:
        topic = self._existing(name)
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

    def _existing(self, name: str) -> TopicInfo:
        topic = self.cache.topics.get(name)
        if topic is None:
            raise TopicError(
                ErrorCode.unknown_topic_or_partition,
                "This server does not host this topic-partition.",
            )
        return topic

    async def create_partitions(
        self, requests: Sequence[NewPartitions], *, validate_only: bool = False
    ) -> list[TopicInfo | TopicError]:
        error = excessive_partitions(
            r.count - len(self.cache.partition_indexes(r.topic)) for r in requests
        )
        if error is not None:
            return [error for _ in requests]
        return [_attempt(self._create_partitions, new, validate_only) for new in requests]

    def _create_partitions(self, new: NewPartitions, validate_only: bool) -> TopicInfo:
        """New partitions are committed as a new topic is: logs first, then the file."""
        topic = self._existing(new.topic)
        current = len(topic.partitions)
        if new.count < current:
            raise TopicError(
                ErrorCode.invalid_partitions,
                f"The topic {topic.name} currently has {current} partition(s); {new.count} "
                "would not be an increase.",
            )
        if new.count == current:
            raise TopicError(
                ErrorCode.invalid_partitions, f"Topic already has {current} partition(s)."
            )
        if new.assignments is not None:
            if len(new.assignments) != new.count - current:
                raise TopicError(
                    ErrorCode.invalid_replica_assignment,
                    f"Attempted to add {new.count - current} additional partition(s), but "
                    f"only {len(new.assignments)} assignment(s) were specified.",
                )
            replication = len(topic.partitions[0].replicas)
            for replicas in new.assignments:
                check_replicas(replicas, self.cache.brokers, replication)
        epoch = max(p.leader_epoch for p in topic.partitions.values())
        added = self._topic(
            topic.name, topic.topic_id, range(current, new.count), topic.configs, epoch
        )
        if validate_only:
            return _grown(topic, added)
        self._add_logs(added)
        topic.partitions.update(added.partitions)
        try:
            self._save()
        except OSError as e:
            for index in added.partitions:
                del topic.partitions[index]
            self._on_abort(added)
            raise _storage_error(topic.name, e) from None
        logger.info("Increased the partitions of topic %s to %d", topic.name, new.count)
        self._on_lead(added)
        return topic

    async def allocate_producer_id(self) -> int:
        if self._next_producer_id >= self._producer_id_block_end:
            self._producer_id_block_end = self._next_producer_id + PRODUCER_ID_BLOCK
            self._save()
        producer_id = self._next_producer_id
        self._next_producer_id += 1
        return producer_id

    async def elect_leaders(
        self, election_type: ElectionType, partitions: Sequence[TopicPartition] | None
    ) -> dict[TopicPartition, TopicError | None]:
        """This broker is every partition's only replica, its preferred one and its leader:
        no election is ever needed (and an election of all partitions answers none)."""
        if partitions is None:
            return {}
        return {tp: self._not_needed(tp) for tp in partitions}

    def _not_needed(self, tp: TopicPartition) -> TopicError:
        if self.cache.partition(*tp) is None:
            return _unknown_partition(tp)
        return TopicError(
            ErrorCode.election_not_needed,
            "Leader election not needed for topic partition.",
        )

    async def alter_partition_reassignments(
        self,
        targets: Mapping[TopicPartition, Sequence[int] | None],
        *,
        allow_replication_factor_change: bool = True,
    ) -> dict[TopicPartition, TopicError | None]:
        """None is ever ongoing: a valid target is this broker alone, the replicas already."""
        return {
            tp: self._reassign(tp, target, allow_replication_factor_change)
            for tp, target in targets.items()
        }

    def _reassign(
        self, tp: TopicPartition, target: Sequence[int] | None, allow_rf_change: bool
    ) -> TopicError | None:
        partition = self.cache.partition(*tp)
        if partition is None:
            return _unknown_partition(tp)
        if target is None:
            return TopicError(
                ErrorCode.no_reassignment_in_progress,
                f"No partition reassignment is in progress for {tp[0]}:{tp[1]}.",
            )
        if not allow_rf_change and len(target) != len(partition.replicas):
            return TopicError(
                ErrorCode.invalid_replication_factor,
                "The replication factor is changed from "
                f"{len(partition.replicas)} to {len(target)}",
            )
        try:
            check_replicas(target, self.cache.brokers, None)
        except TopicError as e:
            return e
        return None

    async def list_partition_reassignments(
        self, partitions: Sequence[TopicPartition] | None
    ) -> dict[TopicPartition, Reassignment]:
        return {}

    async def alter_configs(
        self,
        changes: Sequence[tuple[ConfigResource, Mapping[str, str]]],
        *,
        validate_only: bool = False,
    ) -> list[TopicError | None]:
        """The valid changes are committed together: one save of the file."""
        results = [_attempt(check_config_change, r, c, self.cache.topics) for r, c in changes]
        valid = [change for change, error in zip(changes, results, strict=True) if error is None]
        if validate_only or not valid:
            return results
        previous = [(r, dict(self.cache.dynamic_configs(r))) for r, _ in valid]
        for resource, configs in valid:
            self.cache.set_dynamic_configs(resource, configs)
        try:
            self._save()
        except OSError as e:
            for resource, configs in previous:
                self.cache.set_dynamic_configs(resource, configs)
            logger.error("Could not save config changes: %s", e)
            failed = TopicError(ErrorCode.kafka_storage_error, f"Could not save the configs: {e}")
            return [failed if error is None else error for error in results]
        for resource, configs in valid:
            logger.info("Dynamic configs of %s are now %s", resource.entity_path, dict(configs))
            self._on_configs(resource)
        return results

    async def client_quotas(self) -> QuotaConfigs:
        return {entity: dict(values) for entity, values in self._quotas.items()}

    async def alter_client_quotas(
        self, changes: Mapping[QuotaEntity, Mapping[str, float | None]]
    ) -> None:
        """Set (a value) or remove (None) quotas of each entity; saved before they apply."""
        before = {entity: dict(values) for entity, values in self._quotas.items()}
        for entity, ops in changes.items():
            values = self._quotas.setdefault(entity, {})
            for key, value in ops.items():
                if value is None:
                    values.pop(key, None)
                else:
                    values[key] = value
            if not values:
                del self._quotas[entity]
        try:
            self._save()
        except OSError as e:
            self._quotas = before
            raise KafkaStorageError(f"Could not save the client quotas: {e}") from None
        self._on_quotas(self._quotas)

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
            "configs": {r.entity_path: c for r, c in self.cache.configs.items()},
            "client_quotas": {entity_path(e): values for e, values in self._quotas.items()},
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


T = TypeVar("T")


def _attempt(operation: Callable[..., T], *args: object) -> T | TopicError:
    try:
        return operation(*args)
    except TopicError as e:
        return e


def _grown(topic: TopicInfo, added: TopicInfo) -> TopicInfo:
    """`topic` as it would be with the `added` partitions."""
    return TopicInfo(
        topic.name,
        topic.topic_id,
        {**topic.partitions, **added.partitions},
        topic.configs,
        topic.internal,
    )


def _unknown_partition(tp: TopicPartition) -> TopicError:
    return TopicError(
        ErrorCode.unknown_topic_or_partition, f"Unable to find partition {tp[0]}:{tp[1]}."
    )


def _storage_error(topic: str, error: Exception) -> TopicError:
    logger.error("Could not create topic %s: %s", topic, error)
    return TopicError(
        ErrorCode.kafka_storage_error, f"Could not create the logs of topic '{topic}': {error}"
    )


def _new_cluster_id() -> str:
    """22-character URL-safe base64 of a random UUID, as Kafka generates cluster ids."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
