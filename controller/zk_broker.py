"""A broker's ZooKeeper side in cluster mode, and the Controller its API handlers call.

It registers the broker under /brokers/ids, campaigns for the controller and runs the
controller while elected (resigning when the session is lost), registers and campaigns
again after a session loss, and implements the handlers' Controller interface
(controller/base.py) through ZooKeeper as Kafka's ZooKeeper-mode brokers did: a topic is
created by writing its assignment (the controller elects its leaders and tells every
broker), deleted by marking it under /admin/delete_topics; either call returns once this
broker's metadata cache, fed by the controller's UpdateMetadata, shows the outcome.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from gregor.controller.acls.authorizer import AclAuthorizer
from gregor.controller.acls.model import AclBinding, AclBindingFilter
from gregor.controller.acls.zk_store import ZkAclStore
from gregor.controller.acls.zk_sync import ZkAcls
from gregor.controller.assignment import assign_new_partitions, assign_replicas
from gregor.controller.base import (
    AclDeletions,
    ElectionType,
    NewPartitions,
    NewTopic,
    Reassignment,
    TopicPartition,
)
from gregor.controller.configs import check_config_change
from gregor.controller.metadata.cache import MetadataCache, PartitionInfo, TopicInfo
from gregor.controller.metadata.config_resource import BROKER, DEFAULT_BROKER, ConfigResource
from gregor.controller.metadata.topic_names import INTERNAL_TOPICS
from gregor.controller.quota_entities import (
    QuotaConfigs,
    QuotaEntity,
    entity_path,
    parse_entity_path,
    quotas_of,
    with_quotas,
)
from gregor.controller.scram_alterations import Alteration
from gregor.controller.scram_cache import CredentialCache
from gregor.controller.scram_zk import ZkScramStore
from gregor.controller.topics import (
    TopicError,
    check_assignments,
    check_configs,
    check_partition_increase,
    check_topic_name,
    collision_error,
    excessive_partitions,
)
from gregor.controller.zk_controller.controller import ControllerError
from gregor.controller.zookeeper.client import SessionExpiredError, SessionState
from gregor.controller.zookeeper.data import (
    BrokerRegistration,
    KafkaZk,
    ProducerIdBlock,
    TopicAssignment,
    TopicExistsError,
    random_uuid,
)
from gregor.wire.errors import KafkaError

logger = logging.getLogger(__name__)

# How long a config change notification stays under /config/changes (Kafka's 15 minutes).
CONFIG_CHANGE_EXPIRATION_MS = 15 * 60 * 1000
# A write not fenced by the controller epoch (the check of /controller_epoch's version -1
# matches any): a broker adding partitions writes the assignment as Kafka's admin does.
ANY_VERSION = -1


class ActiveController(Protocol):
    """The controller every broker runs (controller/zk_controller/): it campaigns for
    /controller itself and is ``active`` while elected."""

    active: bool

    async def start(self) -> None: ...
    async def stop(self) -> None: ...


class ZkBroker:
    def __init__(
        self,
        kafka_zk: KafkaZk,
        registration: BrokerRegistration,
        cache: MetadataCache,
        controller: ActiveController,
        *,
        topic_wait_ms: int,
        authorizer: AclAuthorizer | None = None,
        group_bounds: Mapping[str, int] | None = None,
    ) -> None:
        """``topic_wait_ms``: how long topic creation and deletion wait for the metadata to
        show them. ``authorizer``: kept equal to the ACLs in ZooKeeper. ``group_bounds``:
        the broker's bounds of group configs (configs.check_group_configs)."""
        self.zk = kafka_zk
        self.registration = registration
        self.cache = cache
        self.broker_id = registration.id
        self.broker_epoch = -1
        self.controller = controller
        self._topic_wait_s = topic_wait_ms / 1000
        self._group_bounds = group_bounds
        self._metadata_changed = asyncio.Event()
        self._producer_ids: ProducerIdBlock | None = None
        self._next_producer_id = 0
        self._pid_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        self._session_lost = False
        # Called after a resource's dynamic configs changed (here or on another broker).
        self.on_configs: Callable[[ConfigResource], None] = lambda _resource: None
        # Called with every entity's client quotas, at start and after each quota change.
        self.on_quotas: Callable[[QuotaConfigs], None] = lambda _quotas: None
        self._last_config_change = -1
        self._config_lock = asyncio.Lock()
        self.credential_cache = CredentialCache()
        self._scram = ZkScramStore(kafka_zk, self.credential_cache)
        self.acls = (
            None if authorizer is None else ZkAcls(ZkAclStore(kafka_zk.zk), authorizer, self._spawn)
        )

    @property
    def cluster_id(self) -> str:
        return self.cache.cluster_id

    @property
    def active_controller(self) -> Any:
        """This broker's controller while it is the elected one, else None."""
        return self.controller if self.controller.active else None

    # -- membership ------------------------------------------------------------------------

    async def join(self) -> None:
        """Register this broker (BrokerIdInUseError if its id is taken) and start the
        controller's campaign; from then on, register again after each session loss."""
        self.zk.zk.add_state_listener(self._on_session_state)
        await self._register()
        await self.controller.start()

    async def _register(self) -> None:
        registered = await self.zk.register_broker(self.registration)
        self.broker_epoch = registered.epoch
        logger.info(
            "Registered broker %d at path /brokers/ids/%d with addresses: %s, czxid (broker "
            "epoch): %d",
            self.broker_id,
            self.broker_id,
            self.registration.describe(),
            self.broker_epoch,
        )

    def _on_session_state(self, state: SessionState) -> None:
        # LOST: the session expired, the registration with it (the controller resigns on its
        # own); CONNECTED again after that: a new session, to register in.
        if state == SessionState.LOST:
            self._session_lost = True
        elif state == SessionState.CONNECTED and self._session_lost:
            self._session_lost = False
            logger.info(
                "Broker %d registering again after the loss of its ZooKeeper session",
                self.broker_id,
            )
            self._spawn(self._register())
            # The watch on /config/changes died with the session (re-arming it may have
            # failed while the session was expired): follow again, quotas read afresh.
            self._spawn(self._apply_config_changes(reread_quotas=True))
            if self.acls is not None:  # so did the ACL watches
                self._spawn(self.acls.load())

    def _spawn(self, work: Awaitable[None]) -> None:
        async def logged() -> None:
            try:
                await work
            except SessionExpiredError:  # the new session redoes it (_on_session_state)
                logger.warning(
                    "Broker %d: ZooKeeper session expired during its work; awaiting a new one",
                    self.broker_id,
                )
            except Exception:
                logger.exception("ZooKeeper work of broker %d failed", self.broker_id)

        task = asyncio.get_running_loop().create_task(logged())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def stop(self) -> None:
        """Stop the controller (resigning if elected) and the membership work; the session
        is closed by the caller."""
        self.zk.zk.remove_state_listener(self._on_session_state)
        for task in list(self._tasks):
            task.cancel()
        await self.controller.stop()

    # -- dynamic configs --------------------------------------------------------------------

    async def load_configs(self) -> None:
        """Read this broker's dynamic configs (its own and the cluster default), the group
        configs and the client quotas, then follow /config/changes: every change made
        through any broker is applied here too (Kafka's DynamicConfigManager); likewise
        every ACL, with an authorizer."""
        async with self._config_lock:
            changes = await self.zk.config_changes(watch=self._on_config_change)
            self._last_config_change = changes[-1][0] if changes else -1
            paths = [f"groups/{g}" for g in await self.zk.group_config_names()]
            resources = [
                ConfigResource(BROKER, DEFAULT_BROKER),
                ConfigResource(BROKER, str(self.broker_id)),
                *filter(None, map(ConfigResource.from_entity_path, paths)),
            ]
            for resource in resources:
                configs = await self.zk.entity_configs(resource.entity_path)
                self.cache.set_dynamic_configs(resource, configs)
            self.on_quotas(await self.client_quotas())
            await self._scram.load()
        if self.acls is not None:
            await self.acls.load()

    def _on_config_change(self, _event: object) -> None:
        self._spawn(self._apply_config_changes())

    async def _apply_config_changes(self, *, reread_quotas: bool = False) -> None:
        """Apply the notifications not seen yet: a config entity is read again; any quota
        entity has every quota read again (they are few, and a full read needs no
        bookkeeping)."""
        async with self._config_lock:
            changes = await self.zk.config_changes(watch=self._on_config_change)
            for sequence, name in changes:
                if sequence <= self._last_config_change:
                    continue
                self._last_config_change = sequence
                path = await self.zk.config_change(name)
                if path is None:
                    continue
                if parse_entity_path(path) is not None:
                    await self._scram.changed(path)  # a user's node holds credentials too
                    reread_quotas = True
                    continue
                resource = ConfigResource.from_entity_path(path)
                if resource is None:
                    continue
                if resource.type == BROKER and resource.name not in (
                    DEFAULT_BROKER,
                    str(self.broker_id),
                ):
                    continue
                self._set_configs(resource, await self.zk.entity_configs(path))
            if reread_quotas:
                self.on_quotas(await self.client_quotas())
            await self.zk.purge_config_changes(
                int(time.time() * 1000) - CONFIG_CHANGE_EXPIRATION_MS
            )

    def _set_configs(self, resource: ConfigResource, configs: Mapping[str, str]) -> None:
        self.cache.set_dynamic_configs(resource, configs)
        self.on_configs(resource)

    async def alter_configs(
        self,
        changes: Sequence[tuple[ConfigResource, Mapping[str, str]]],
        *,
        validate_only: bool = False,
    ) -> list[TopicError | None]:
        """Each written to /config/<entity> with a change notification, as Kafka's
        ZooKeeper-mode brokers did; applied here at once, on the others when they see the
        notification."""
        results: list[TopicError | None] = []
        for resource, configs in changes:
            try:
                check_config_change(resource, configs, self.cache.topics, self._group_bounds)
            except TopicError as e:
                results.append(e)
                continue
            if not validate_only:
                await self.zk.set_entity_configs(resource.entity_path, configs)
                logger.info("Dynamic configs of %s are now %s", resource.entity_path, dict(configs))
                self._set_configs(resource, configs)
            results.append(None)
        return results

    # -- the metadata cache, as the controller's UpdateMetadata feeds it -------------------

    def metadata_updated(self) -> None:
        """Called after each UpdateMetadata: wakes the calls waiting for an outcome."""
        self._metadata_changed.set()
        self._metadata_changed = asyncio.Event()

    async def _await_metadata(self, holds: Callable[[], bool]) -> bool:
        deadline = time.monotonic() + self._topic_wait_s
        while not holds():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            try:
                await asyncio.wait_for(self._metadata_changed.wait(), left)
            except TimeoutError:
                return holds()
        return True

    def _led(self, name: str, partitions: int) -> TopicInfo | None:
        topic = self.cache.topics.get(name)
        if topic is None or len(topic.partitions) < partitions:
            return None
        if any(self.cache.live_leader(p) is None for p in topic.partitions.values()):
            return None
        return topic

    async def topic_configs(self, names: Sequence[str]) -> dict[str, dict[str, str]]:
        """Each topic's config overrides, from /config/topics."""
        found = await asyncio.gather(*(self.zk.topic_configs(n) for n in names))
        return dict(zip(names, found, strict=True))

    # -- the Controller interface ---------------------------------------------------------

    async def create_topics(
        self, topics: Sequence[NewTopic], *, validate_only: bool = False
    ) -> list[TopicInfo | TopicError]:
        error = excessive_partitions(t.partition_count for t in topics)
        if error is not None:
            return [error for _ in topics]
        return list(await asyncio.gather(*(self._create(t, validate_only) for t in topics)))

    async def _create(self, new: NewTopic, validate_only: bool) -> TopicInfo | TopicError:
        try:
            assignment = self._assignment(new)
        except TopicError as e:
            return e
        topic_id = random_uuid()
        if validate_only:
            return _topic_info(new.name, topic_id, assignment, new.configs)
        try:
            await self.zk.create_topic(TopicAssignment(new.name, topic_id, assignment), new.configs)
        except TopicExistsError:
            return TopicError(ErrorCode.topic_already_exists, f"Topic '{new.name}' already exists.")
        logger.info(
            "Creating topic %s with configuration %s and initial partition assignment %s",
            new.name,
            dict(new.configs),
            assignment,
        )
        if not await self._await_metadata(lambda: self._led(new.name, len(assignment)) is not None):
            return TopicError(
                ErrorCode.request_timed_out,
                f"Topic '{new.name}' was created, but not every partition had a leader within "
                f"{self._topic_wait_s * 1000:.0f} ms.",
            )
        topic = self.cache.topics[new.name]
        topic.configs = dict(new.configs)
        return topic

    def _assignment(self, new: NewTopic) -> dict[int, list[int]]:
        check_topic_name(new.name)
        if new.name in self.cache.topics:
            raise TopicError(ErrorCode.topic_already_exists, f"Topic '{new.name}' already exists.")
        colliding = self.cache.colliding_topic(new.name)
        if colliding is not None:
            raise collision_error(new.name, colliding)
        check_configs(new.configs)
        if new.assignments is not None:
            check_assignments(new.assignments, self.cache.brokers)
            return {p: list(r) for p, r in new.assignments.items()}
        racks = {b.node_id: b.rack for b in self.cache.brokers.values()}
        return assign_replicas(racks, new.num_partitions, new.replication_factor)

    async def delete_topics(self, names: Sequence[str]) -> list[TopicInfo | TopicError]:
        return list(await asyncio.gather(*(self._delete(n) for n in names)))

    async def _delete(self, name: str) -> TopicInfo | TopicError:
        topic = self.cache.topics.get(name)
        if topic is None:
            return TopicError(
                ErrorCode.unknown_topic_or_partition,
                "This server does not host this topic-partition.",
            )
        await self.zk.mark_for_deletion(name)
        logger.info("Topic %s marked for deletion", name)
        if not await self._await_metadata(lambda: self.cache.topics.get(name) is not topic):
            return TopicError(
                ErrorCode.request_timed_out,
                f"Topic '{name}' is marked for deletion, but its deletion did not complete "
                f"within {self._topic_wait_s * 1000:.0f} ms.",
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
        return list(
            await asyncio.gather(*(self._add_partitions(r, validate_only) for r in requests))
        )

    async def _add_partitions(
        self, new: NewPartitions, validate_only: bool
    ) -> TopicInfo | TopicError:
        """As Kafka's AdminZkClient.addPartitions: the grown assignment is written to
        /brokers/topics/<t>, whose watch makes the controller create the partitions."""
        try:
            added = self._new_partitions(new)
        except TopicError as e:
            return e
        topic = self.cache.topics[new.topic]
        if validate_only:
            grown = _topic_info(topic.name, topic.topic_id, added, topic.configs)
            return TopicInfo(
                topic.name,
                topic.topic_id,
                {**topic.partitions, **grown.partitions},
                topic.configs,
                topic.internal,
            )
        current = await self.zk.topic_assignment(new.topic)
        if current is None or len(current.partitions) != len(topic.partitions):
            return TopicError(
                ErrorCode.reassignment_in_progress
                if current is not None
                else ErrorCode.unknown_topic_or_partition,
                f"The partitions of topic '{new.topic}' are changing; try again.",
            )
        await self.zk.set_topic_assignment(
            dataclasses.replace(current, partitions={**current.partitions, **added}),
            ANY_VERSION,
        )
        logger.info("Adding partitions %s to topic %s", added, new.topic)
        if not await self._await_metadata(lambda: self._led(new.topic, new.count) is not None):
            return TopicError(
                ErrorCode.request_timed_out,
                f"The new partitions of '{new.topic}' did not all have a leader within "
                f"{self._topic_wait_s * 1000:.0f} ms.",
            )
        return self.cache.topics[new.topic]

    def _new_partitions(self, new: NewPartitions) -> dict[int, list[int]]:
        topic = self.cache.topics.get(new.topic)
        if topic is None:
            raise TopicError(
                ErrorCode.unknown_topic_or_partition,
                "This server does not host this topic-partition.",
            )
        check_partition_increase(topic, new, self.cache.brokers)
        if new.assignments is None:
            racks = {b.node_id: b.rack for b in self.cache.brokers.values()}
            existing = {i: p.replicas for i, p in topic.partitions.items()}
            return assign_new_partitions(racks, existing, new.count)
        current = len(topic.partitions)
        return {current + i: list(r) for i, r in enumerate(new.assignments)}

    async def client_quotas(self) -> QuotaConfigs:
        """Every entity's quotas, from /config/clients and /config/users."""
        found = await self.zk.quota_entity_configs()
        return {
            entity: quotas
            for path, configs in found.items()
            if (entity := parse_entity_path(path)) is not None and (quotas := quotas_of(configs))
        }

    async def alter_client_quotas(
        self, changes: Mapping[QuotaEntity, Mapping[str, float | None]]
    ) -> None:
        """Each entity's znode rewritten (its other keys kept) with a change notification,
        as Kafka's ZooKeeper-mode brokers did; enforced here before returning, on the
        others when they see the notification."""
        for entity, ops in changes.items():
            path = entity_path(entity)
            configs = with_quotas(await self.zk.entity_configs(path), ops)
            await self.zk.set_entity_configs(path, configs)
            logger.info("Client quotas of %s are now %s", path, quotas_of(configs))
        self.on_quotas(await self.client_quotas())

    async def create_acls(self, bindings: Sequence[AclBinding]) -> list[KafkaError | None]:
        assert self.acls is not None
        return await self.acls.create(bindings)

    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[AclDeletions]:
        assert self.acls is not None
        return await self.acls.delete(filters)

    async def alter_scram_credentials(
        self, alterations: Mapping[str, Alteration]
    ) -> dict[str, KafkaError | None]:
        return await self._scram.alter(alterations)

    async def allocate_producer_id(self) -> int:
        """From blocks of 1000 claimed in /latest_producer_id_block."""
        async with self._pid_lock:
            block = self._producer_ids
            if block is None or self._next_producer_id > block.last:
                block = self._producer_ids = await self.zk.allocate_producer_ids(self.broker_id)
                self._next_producer_id = block.first
            producer_id = self._next_producer_id
            self._next_producer_id += 1
            return producer_id

    async def elect_leaders(
        self, election_type: ElectionType, partitions: Sequence[TopicPartition] | None
    ) -> dict[TopicPartition, TopicError | None]:
        """Elections are the controller's: done here when this broker is it (clients send
        ElectLeaders to the controller), else NOT_CONTROLLER. An election of every
        partition answers only those it changed or could not elect, as in Kafka."""
        try:
            outcome = await self._controller().elect_leaders(int(election_type), partitions)
        except ControllerError as e:
            return {tp: TopicError(e.code, e.message) for tp in partitions or ()}
        return {
            tp: None if code == ErrorCode.none else TopicError(code, message or "")
            for tp, (code, message) in outcome.items()
            if partitions is not None or code != ErrorCode.election_not_needed
        }

    async def alter_partition_reassignments(
        self,
        targets: Mapping[TopicPartition, Sequence[int] | None],
        *,
        allow_replication_factor_change: bool = True,
    ) -> dict[TopicPartition, TopicError | None]:
        """The controller's (clients send reassignments to it), else NOT_CONTROLLER."""
        try:
            outcome = await self._controller().alter_partition_reassignments(
                targets, allow_replication_factor_change=allow_replication_factor_change
            )
        except ControllerError as e:
            return {tp: TopicError(e.code, e.message) for tp in targets}
        return {
            tp: None if code == ErrorCode.none else TopicError(code, message or "")
            for tp, (code, message) in outcome.items()
        }

    async def list_partition_reassignments(
        self, partitions: Sequence[TopicPartition] | None
    ) -> dict[TopicPartition, Reassignment]:
        """The controller's ongoing reassignments; raises TopicError(NOT_CONTROLLER)
        elsewhere."""
        try:
            ongoing = await self._controller().list_partition_reassignments(partitions)
        except ControllerError as e:
            raise TopicError(e.code, e.message) from None
        return {
            tp: Reassignment(replicas, adding, removing)
            for tp, (replicas, adding, removing) in ongoing.items()
        }

    def _controller(self) -> Any:
        controller = self.active_controller
        if controller is None:
            raise ControllerError(ErrorCode.not_controller, "This broker is not the controller.")
        return controller


def _topic_info(
    name: str, topic_id: Any, assignment: Mapping[int, list[int]], configs: Mapping[str, str]
) -> TopicInfo:
    return TopicInfo(
        name,
        topic_id,
        {p: PartitionInfo(p, r[0], 0, list(r), list(r)) for p, r in assignment.items()},
        dict(configs),
        internal=name in INTERNAL_TOPICS,
    )
