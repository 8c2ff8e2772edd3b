"""The embedded single-node controller used when no ZooKeeper is configured.

This broker is the only one: it leads every partition. Topic metadata, leader epochs
and the producer-id block live in the first log directory as a snapshot
(``gregor-metadata.json``) and a log of changes after it (``controller/metadata_log.py``),
written and fsynced by a worker thread, and are replayed into the metadata cache at
start-up.

A change's durable line in that log is the commit point of every topic change: a topic's
logs are created (and their directory entries made durable) before the change naming it is
written, and dropped only after the change removing it is durable, so a crash at any instant
leaves the whole topic or none of it; the answer goes out after the commit. Topic changes
are serialised (one at a time, as Kafka's controller queue runs them), and the per-partition
work of a big one (10,000 partitions' logs, their leadership, their deletion) is done in
slices of about ``SLICE_S`` that yield to the event loop, so other clients are served
meanwhile. Each start is a new leader election: every partition's leader epoch grows by
one, persisted before this broker leads at it, so the epoch never goes back and clients can
tell a restart.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from gregor.controller.acls import changes
from gregor.controller.acls.authorizer import AclAuthorizer
from gregor.controller.acls.metadata_format import TABLE as ACL_TABLE
from gregor.controller.acls.metadata_format import acl_change, load_bindings
from gregor.controller.acls.model import AclBinding, AclBindingFilter, ResourcePattern
from gregor.controller.base import (
    AclDeletions,
    Controller,
    ElectionType,
    NewPartitions,
    NewTopic,
    Reassignment,
    TopicPartition,
)
from gregor.controller.configs import check_config_change
from gregor.controller.metadata.cache import BrokerInfo, MetadataCache, PartitionInfo, TopicInfo
from gregor.controller.metadata.config_resource import TOPIC, ConfigResource
from gregor.controller.metadata.topic_names import INTERNAL_TOPICS
from gregor.controller.metadata_log import Change, MetadataStore
from gregor.controller.quota_entities import (
    QuotaConfigs,
    QuotaEntity,
    entity_path,
    parse_entity_path,
)
from gregor.controller.scram_alterations import Alteration
from gregor.controller.scram_cache import CredentialCache
from gregor.controller.scram_metadata import TABLE as SCRAM_TABLE
from gregor.controller.scram_metadata import MetadataScramStore
from gregor.controller.topics import (
    TopicError,
    check_assignments,
    check_configs,
    check_partition_increase,
    check_replicas,
    check_topic_name,
    collision_error,
    excessive_partitions,
)
from gregor.log.errors import KafkaStorageError
from gregor.wire.errors import KafkaError

logger = logging.getLogger(__name__)

STATE_FILE = "gregor-metadata.json"
PRODUCER_ID_BLOCK = 1000
# How long one slice of a big topic change may hold the event loop before it yields.
SLICE_S = 0.005

# Called with some of a topic's partitions (a slice of a big topic at a time): to create
# their logs (before the topic is committed; raises OSError, leaving nothing of the slice
# behind, if they cannot be created), to drop the logs of a topic that could not be
# committed, to lead them, or to stop leading and delete them.
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
        log_dirs: Sequence[Path] = (),
        authorizer: AclAuthorizer | None = None,
        group_bounds: Mapping[str, int] | None = None,
    ) -> None:
        """``log_dirs``: where ``on_create`` makes logs; the metadata writer fsyncs them
        before it writes the change naming the new logs. ``authorizer``: given the stored
        ACLs now and every change to them. ``group_bounds``: the broker's bounds of group
        configs (configs.check_group_configs)."""
        self._store = MetadataStore(state_dir)
        self._log_dirs = tuple(log_dirs)
        self.path = self._store.path
        self._on_quotas = on_quotas
        self._broker = broker
        self._on_create = on_create
        self._on_abort = on_abort
        self._on_lead = on_lead
        self._on_delete = on_delete
        self._on_configs = on_configs
        self._group_bounds = group_bounds
        # One topic change at a time (each commits before the next starts); producer-id
        # blocks and quotas have their own order.
        self._topics_lock = asyncio.Lock()
        self._producer_ids_lock = asyncio.Lock()
        self._quotas_lock = asyncio.Lock()
        self._acls_lock = asyncio.Lock()
        self.fresh = self._store.fresh
        state = self._store.state
        self.cache = MetadataCache(state.get("cluster_id") or _new_cluster_id(), broker.node_id)
        self.credential_cache = CredentialCache()
        self._scram = MetadataScramStore(
            self.credential_cache, state.get(SCRAM_TABLE, {}), self._commit
        )
        self.cache.brokers[broker.node_id] = broker
        self._next_producer_id: int = state.get("producer_id_block_end", 0)
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
        # Kept (and saved) as stored even without an authorizer to enforce them.
        self._acls: dict[str, Any] = dict(state.get(ACL_TABLE, {}))
        self._authorizer = authorizer
        if authorizer is not None:
            authorizer.replace(load_bindings(self._acls))
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
            topic.partitions = {
                i: PartitionInfo(i, p.leader, p.leader_epoch + 1, p.replicas, p.isr)
                for i, p in topic.partitions.items()
            }
        self._store.write_snapshot(self._state())
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
        async with self._topics_lock:
            return [await _attempt_async(self._create_topic, new, validate_only) for new in topics]

    async def _create_topic(self, new: NewTopic, validate_only: bool) -> TopicInfo:
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
        await self._add_logs(topic)
        try:
            await self._commit([_topic_change(topic)], self._log_dirs)
        except OSError as e:
            await _in_slices(topic, self._on_abort)
            raise _storage_error(name, e) from None
        logger.info(
            "Created topic %s with %d partition(s) and configs %s",
            name,
            partitions,
            dict(new.configs),
        )
        await _in_slices(topic, self._on_lead)
        self.cache.put_topic(topic)
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

    async def _add_logs(self, topic: TopicInfo) -> None:
        """Create the logs of `topic`'s partitions, a slice at a time, before a change names
        them; if a slice fails, all are dropped, in one call (every log is closed before any
        directory is removed: removing takes descriptors, which may have run out)."""
        try:
            await _in_slices(topic, self._on_create)
        except (OSError, KafkaStorageError) as e:
            self._on_abort(topic)
            raise _storage_error(topic.name, e) from None

    async def _commit(self, changes: list[Change], sync_first: Sequence[Path] = ()) -> None:
        """Durably append ``changes`` (after fsyncing the directories ``sync_first``): the
        commit point. Raises OSError if it failed."""
        await self._store.commit(changes, sync_first)

    async def delete_topics(self, names: Sequence[str]) -> list[TopicInfo | TopicError]:
        async with self._topics_lock:
            return [await _attempt_async(self._delete_topic, name) for name in names]

    async def _delete_topic(self, name: str) -> TopicInfo:
        topic = self._existing(name)
        self.cache.remove_topic(name)
        try:
            await self._commit([{"op": "topic", "name": name, "value": None}])
        except OSError as e:
            self.cache.put_topic(topic)
            logger.error("Could not delete topic %s: %s", name, e)
            raise TopicError(
                ErrorCode.kafka_storage_error, f"Could not save the deletion of '{name}': {e}"
            ) from None
        logger.info("Deleted topic %s", name)
        await _in_slices(topic, self._on_delete)
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
        async with self._topics_lock:
            return [
                await _attempt_async(self._create_partitions, new, validate_only)
                for new in requests
            ]

    async def _create_partitions(self, new: NewPartitions, validate_only: bool) -> TopicInfo:
        """New partitions are committed as a new topic is: logs first, then the file."""
        topic = self._existing(new.topic)
        check_partition_increase(topic, new, self.cache.brokers)
        current = len(topic.partitions)
        epoch = max(p.leader_epoch for p in topic.partitions.values())
        added = self._topic(
            topic.name, topic.topic_id, range(current, new.count), topic.configs, epoch
        )
        if validate_only:
            return _grown(topic, added)
        await self._add_logs(added)
        try:
            await self._commit([_topic_change(_grown(topic, added))], self._log_dirs)
        except OSError as e:
            await _in_slices(added, self._on_abort)
            raise _storage_error(topic.name, e) from None
        logger.info("Increased the partitions of topic %s to %d", topic.name, new.count)
        await _in_slices(added, self._on_lead)
        topic.partitions.update(added.partitions)
        return topic

    async def allocate_producer_id(self) -> int:
        async with self._producer_ids_lock:
            if self._next_producer_id >= self._producer_id_block_end:
                end = self._next_producer_id + PRODUCER_ID_BLOCK
                await self._commit([{"op": "producer_id_block_end", "value": end}])
                self._producer_id_block_end = end
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
        """The valid changes are committed together: one line of the metadata log."""
        async with self._topics_lock:
            return await self._alter_configs(changes, validate_only)

    async def _alter_configs(
        self, changes: Sequence[tuple[ConfigResource, Mapping[str, str]]], validate_only: bool
    ) -> list[TopicError | None]:
        results = [
            _attempt(check_config_change, r, c, self.cache.topics, self._group_bounds)
            for r, c in changes
        ]
        valid = [change for change, error in zip(changes, results, strict=True) if error is None]
        if validate_only or not valid:
            return results
        previous = [(r, dict(self.cache.dynamic_configs(r))) for r, _ in valid]
        for resource, configs in valid:
            self.cache.set_dynamic_configs(resource, configs)
        try:
            await self._commit([self._config_change(r) for r, _ in valid])
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
        async with self._quotas_lock:
            await self._alter_client_quotas(changes)

    async def _alter_client_quotas(
        self, changes: Mapping[QuotaEntity, Mapping[str, float | None]]
    ) -> None:
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
            await self._commit(
                [
                    {"op": "quota", "name": entity_path(e), "value": self._quotas.get(e, {})}
                    for e in changes
                ]
            )
        except OSError as e:
            self._quotas = before
            raise KafkaStorageError(f"Could not save the client quotas: {e}") from None
        self._on_quotas(self._quotas)

    async def create_acls(self, bindings: Sequence[AclBinding]) -> list[KafkaError | None]:
        """The new ACLs committed together: one line of the metadata log."""
        authorizer = self._authorizer
        assert authorizer is not None
        async with self._acls_lock:
            added = changes.grouped(bindings).items()
            error = await self._commit_acls({p: authorizer.acls(p) | e for p, e in added})
        return [error for _ in bindings]

    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[AclDeletions]:
        """The deletions of all the filters committed together."""
        authorizer = self._authorizer
        assert authorizer is not None
        async with self._acls_lock:
            deleted: list[list[AclBinding]] = [[] for _ in filters]
            remaining = {}
            for pattern in changes.candidates(authorizer.patterns(), filters):
                remaining[pattern], found = changes.delete(
                    pattern, authorizer.acls(pattern), filters
                )
                for bindings, more in zip(deleted, found, strict=True):
                    bindings.extend(more)
            error = await self._commit_acls(remaining)
        return [[(b, error) for b in bindings] for bindings in deleted]

    async def _commit_acls(
        self, acls: Mapping[ResourcePattern, changes.Entries]
    ) -> KafkaError | None:
        """Make ``acls`` the ACLs of their patterns: committed, then applied."""
        authorizer = self._authorizer
        assert authorizer is not None
        new = {p: e for p, e in acls.items() if e != authorizer.acls(p)}
        if not new:
            return None
        acl_changes = [acl_change(p, e) for p, e in new.items()]
        try:
            await self._commit(acl_changes)
        except OSError as e:
            logger.error("Could not save ACL changes: %s", e)
            return KafkaError(ErrorCode.kafka_storage_error, f"Could not save the ACLs: {e}")
        for change in acl_changes:
            if change["value"]:
                self._acls[change["name"]] = change["value"]
            else:
                self._acls.pop(change["name"], None)
        for pattern, entries in new.items():
            authorizer.set_acls(pattern, entries)
            logger.info("Updated ACLs for %s: %d ACL(s)", pattern, len(entries))
        return None

    async def alter_scram_credentials(
        self, alterations: Mapping[str, Alteration]
    ) -> dict[str, KafkaError | None]:
        return await self._scram.alter(alterations)

    def _config_change(self, resource: ConfigResource) -> Change:
        if resource.type == TOPIC:
            topic = self.cache.topics.get(resource.name)
            if topic is not None:
                return _topic_change(topic)
        return {
            "op": "config",
            "name": resource.entity_path,
            "value": dict(self.cache.dynamic_configs(resource)),
        }

    def _state(self) -> dict[str, Any]:
        """Everything, in the snapshot's layout."""
        return {
            "version": 1,
            "cluster_id": self.cache.cluster_id,
            "producer_id_block_end": self._producer_id_block_end,
            "topics": {t.name: _topic_entry(t) for t in self.cache.topics.values()},
            "configs": {r.entity_path: c for r, c in self.cache.configs.items()},
            "client_quotas": {entity_path(e): values for e, values in self._quotas.items()},
            SCRAM_TABLE: self._scram.table(),
            ACL_TABLE: self._acls,
        }

    def close(self) -> None:
        """Write the changes still queued and stop the metadata writer."""
        self._store.close()


def _topic_entry(topic: TopicInfo) -> dict[str, Any]:
    return {
        "id": str(topic.topic_id),
        "partitions": len(topic.partitions),
        "configs": dict(topic.configs),
        # One leader epoch per topic: its partitions are led together.
        "leader_epoch": max(p.leader_epoch for p in topic.partitions.values()),
    }


def _topic_change(topic: TopicInfo) -> Change:
    return {"op": "topic", "name": topic.name, "value": _topic_entry(topic)}


def _part(topic: TopicInfo, indexes: Iterable[int]) -> TopicInfo:
    """`topic` with only the partitions `indexes`."""
    return TopicInfo(
        topic.name,
        topic.topic_id,
        {i: topic.partitions[i] for i in indexes},
        topic.configs,
        topic.internal,
    )


async def _in_slices(topic: TopicInfo, action: Callable[[TopicInfo], None]) -> None:
    """``action`` on the topic's partitions, a slice at a time, each sized (from the last
    one's pace) to take about SLICE_S, yielding to the event loop between slices."""
    indexes = sorted(topic.partitions)
    if len(indexes) <= 1:
        if indexes:
            action(topic)
        return
    size, done = 8, 0
    while done < len(indexes):
        part = indexes[done : done + size]
        started = time.monotonic()
        action(_part(topic, part))
        done += len(part)
        elapsed = time.monotonic() - started
        size = max(1, min(4 * size, int(len(part) * SLICE_S / max(elapsed, 1e-6)), 1000))
        if done < len(indexes):
            await asyncio.sleep(0)


T = TypeVar("T")


def _attempt(operation: Callable[..., T], *args: object) -> T | TopicError:
    try:
        return operation(*args)
    except TopicError as e:
        return e


async def _attempt_async(operation: Callable[..., Awaitable[T]], *args: object) -> T | TopicError:
    try:
        return await operation(*args)
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
