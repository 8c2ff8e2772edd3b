"""Kafka's ZooKeeper layout (docs/cluster.md) as typed async calls over AsyncZk.

Paths and JSON are Kafka's own (kafka/zk/ZkData.scala), so Kafka's tools could read them.
Every write the controller makes is a multi that starts with a check of /controller_epoch's
zk version: a controller that lost its election is refused (ControllerMovedError) instead
of overwriting its successor's state. Watches are one-shot, as in ZooKeeper: they fire on
the loop once the watched node changes, or with an EventType.NONE event when the
connection drops (the caller reads again, with a new watch, to see what changed).
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import logging
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from gregor.controller.zookeeper.client import (
    AsyncZk,
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Transaction,
    TransactionFailed,
    Watch,
    ZnodeStat,
)

logger = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

CLUSTER_ID_PATH = "/cluster/id"
BROKER_IDS_PATH = "/brokers/ids"
TOPICS_PATH = "/brokers/topics"
CONTROLLER_PATH = "/controller"
CONTROLLER_EPOCH_PATH = "/controller_epoch"
TOPIC_CONFIGS_PATH = "/config/topics"
CONFIG_PATH = "/config"
CONFIG_CHANGES_PATH = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
BROKER_CONFIGS_PATH = "/config/brokers"
GROUP_CONFIGS_PATH = "/config/groups"  # Gregor's: ZooKeeper-era Kafka had no group configs
CLIENT_CONFIGS_PATH = "/config/clients"  # client quotas: clients/<c>
USER_CONFIGS_PATH = "/config/users"  # users/<u>, users/<u>/clients/<c>
IP_CONFIGS_PATH = "/config/ips"  # IP quotas (KIP-612): ips/<ip>
DELETE_TOPICS_PATH = "/admin/delete_topics"
PRODUCER_ID_BLOCK_PATH = "/latest_producer_id_block"
# The persistent parents Kafka creates at startup, of the paths used here.
PERSISTENT_PATHS = (
    BROKER_IDS_PATH,
    TOPICS_PATH,
    TOPIC_CONFIGS_PATH,
    CONFIG_CHANGES_PATH,
    BROKER_CONFIGS_PATH,
    GROUP_CONFIGS_PATH,
    CLIENT_CONFIGS_PATH,
    USER_CONFIGS_PATH,
    IP_CONFIGS_PATH,
    DELETE_TOPICS_PATH,
    PRODUCER_ID_BLOCK_PATH,
)

PRODUCER_ID_BLOCK_SIZE = 1000
MAX_PRODUCER_ID = 2**63 - 1
# A partition-state set is about 200 bytes on the wire: 1000 of them keep a multi near
# 200 KB, well under jute.maxbuffer (1 MiB), and one multi costs ZooKeeper one commit.
MAX_OPS_PER_MULTI = 1000


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS_PATH}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS_PATH}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{TOPICS_PATH}/{topic}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{TOPICS_PATH}/{topic}/partitions/{partition}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{TOPICS_PATH}/{topic}/partitions/{partition}/state"


def topic_config_path(topic: str) -> str:
    return f"{TOPIC_CONFIGS_PATH}/{topic}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS_PATH}/{topic}"


class BrokerIdInUseError(Exception):
    """Another live ZooKeeper session holds /brokers/ids/<id>."""


class TopicExistsError(Exception):
    """/brokers/topics/<topic> exists already (possibly marked for deletion)."""


class ControllerMovedError(Exception):
    """A write fenced by /controller_epoch's zk version: another controller was elected."""


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """/brokers/ids/<id>. ``endpoints`` maps listener name to (host, port) in listener order;
    ``epoch`` is the znode's czxid (-1 until registered)."""

    id: int
    endpoints: dict[str, tuple[str, int]]
    security_protocol_map: dict[str, str]
    rack: str | None = None
    epoch: int = -1

    def encode(self) -> bytes:
        plaintext = next(
            (
                hp
                for name, hp in self.endpoints.items()
                if self.security_protocol_map.get(name) == "PLAINTEXT"
            ),
            (None, -1),
        )
        return _json(
            {
                "version": 5,
                "host": plaintext[0],
                "port": plaintext[1],
                "endpoints": [
                    f"{name}://{_bracket(host)}:{port}"
                    for name, (host, port) in self.endpoints.items()
                ],
                "listener_security_protocol_map": self.security_protocol_map,
                "rack": self.rack,
                "jmx_port": -1,
                "timestamp": str(_now_ms()),
                "features": {},
            }
        )

    @classmethod
    def decode(cls, broker_id: int, data: bytes, stat: ZnodeStat) -> BrokerRegistration:
        js = json.loads(data)
        endpoints: dict[str, tuple[str, int]] = {}
        if js["version"] == 1:
            endpoints["PLAINTEXT"] = (js["host"], js["port"])
        for endpoint in js.get("endpoints", []):
            name, _, address = endpoint.partition("://")
            host, _, port = address.rpartition(":")
            endpoints[name] = (host.strip("[]"), int(port))
        protocols = js.get("listener_security_protocol_map") or {n: n for n in endpoints}
        return cls(broker_id, endpoints, protocols, js.get("rack"), stat.czxid)

    def describe(self) -> str:
        return ", ".join(f"{n}://{_bracket(h)}:{p}" for n, (h, p) in self.endpoints.items())


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    """/brokers/topics/<name>: the replicas of each partition (and any reassignment)."""

    name: str
    topic_id: uuid.UUID
    partitions: dict[int, list[int]]
    adding_replicas: dict[int, list[int]] = field(default_factory=dict)
    removing_replicas: dict[int, list[int]] = field(default_factory=dict)

    def encode(self) -> bytes:
        return _json(
            {
                "version": 3,
                "topic_id": encode_uuid(self.topic_id),
                "partitions": _by_partition(self.partitions),
                "adding_replicas": _by_partition(self.adding_replicas),
                "removing_replicas": _by_partition(self.removing_replicas),
            }
        )

    @classmethod
    def decode(cls, name: str, data: bytes) -> TopicAssignment:
        js = json.loads(data)
        topic_id = js.get("topic_id")
        return cls(
            name,
            decode_uuid(topic_id) if topic_id else uuid.UUID(int=0),
            _from_partition(js.get("partitions")),
            _from_partition(js.get("adding_replicas")),
            _from_partition(js.get("removing_replicas")),
        )


@dataclass(frozen=True, slots=True)
class PartitionState:
    """/brokers/topics/<t>/partitions/<p>/state; ``partition_epoch`` is its zk version."""

    leader: int
    leader_epoch: int
    isr: list[int]
    controller_epoch: int
    leader_recovery_state: int = 0
    partition_epoch: int = 0

    def encode(self) -> bytes:
        return _state_json(
            self.controller_epoch,
            self.leader,
            self.leader_epoch,
            tuple(self.isr),
            self.leader_recovery_state,
        )

    @classmethod
    def decode(cls, data: bytes, stat: ZnodeStat) -> PartitionState:
        leader, leader_epoch, isr, controller_epoch, recovery = _state_fields(data)
        return cls(leader, leader_epoch, list(isr), controller_epoch, recovery, stat.version)

    def written(self, version: int) -> PartitionState:
        """This state as written, at zk version ``version``."""
        return PartitionState(
            self.leader,
            self.leader_epoch,
            self.isr,
            self.controller_epoch,
            self.leader_recovery_state,
            version,
        )

    def same_content(self, other: PartitionState) -> bool:
        return other.written(self.partition_epoch) == self


@lru_cache(maxsize=4096)
def _state_json(
    controller_epoch: int, leader: int, leader_epoch: int, isr: tuple[int, ...], recovery: int
) -> bytes:
    """A partition state's JSON: a controller writes 50,000 at once, few distinct."""
    return _json(
        {
            "controller_epoch": controller_epoch,
            "leader": leader,
            "version": 1,
            "leader_epoch": leader_epoch,
            "isr": list(isr),
            "leader_recovery_state": recovery,
        }
    )


@lru_cache(maxsize=4096)
def _state_fields(data: bytes) -> tuple[int, int, tuple[int, ...], int, int]:
    """A partition state's fields, from its JSON (a new controller reads 50,000 at once)."""
    js = json.loads(data)
    return (
        js["leader"],
        js["leader_epoch"],
        tuple(js["isr"]),
        js["controller_epoch"],
        js.get("leader_recovery_state", 0),
    )


@dataclass(frozen=True, slots=True)
class StateConflict:
    """A conditional partition-state write refused; ``current`` is the state ZooKeeper holds
    (None if the znode is gone, or for a create: the state that already exists)."""

    current: PartitionState | None


@dataclass(frozen=True, slots=True)
class ControllerEpoch:
    """/controller_epoch: the epoch and the zk version every controller write checks."""

    epoch: int
    zk_version: int


@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    broker_id: int
    first: int
    size: int = PRODUCER_ID_BLOCK_SIZE

    @property
    def last(self) -> int:
        return self.first + self.size - 1


class KafkaZk:
    """Kafka's znodes, read and written through one AsyncZk session; ``ensure_paths()``
    once at startup creates the parents the other calls expect."""

    def __init__(self, zk: AsyncZk) -> None:
        self.zk = zk

    async def ensure_paths(self) -> None:
        """Create the persistent parents (empty), as every Kafka broker does at startup."""
        await asyncio.gather(*(self.zk.ensure_path(p) for p in PERSISTENT_PATHS))

    async def cluster_id(self) -> str:
        """The cluster id, created (a random 22-character uuid) by whoever asks first."""
        while True:
            try:
                data, _ = await self.zk.get(CLUSTER_ID_PATH)
                cluster_id: str = json.loads(data)["id"]
                return cluster_id
            except NoNodeError:
                pass
            new_id = encode_uuid(random_uuid())
            try:
                await self.zk.create(
                    CLUSTER_ID_PATH, _json({"version": "1", "id": new_id}), makepath=True
                )
                return new_id
            except NodeExistsError:
                continue

    # --- brokers -------------------------------------------------------------------------

    async def register_broker(self, registration: BrokerRegistration) -> BrokerRegistration:
        """Create the ephemeral /brokers/ids/<id>; the registration with its epoch (czxid).

        Raises BrokerIdInUseError while another session holds the id.
        """
        path = broker_path(registration.id)
        while True:
            try:
                _, stat = await self.zk.create(path, registration.encode(), ephemeral=True)
                return dataclasses.replace(registration, epoch=stat.czxid)
            except NodeExistsError:
                pass
            try:
                data, stat = await self.zk.get(path)
            except NoNodeError:
                continue  # its session just ended: try again
            existing = BrokerRegistration.decode(registration.id, data, stat)
            if stat.ephemeralOwner == self.zk.session_id:
                return existing  # ours: a create resent after a lost connection
            raise BrokerIdInUseError(
                f"broker id {registration.id} is already registered in ZooKeeper by "
                f"{existing.describe()} (session 0x{stat.ephemeralOwner:x}); "
                "another broker is using this broker.id, or this broker's previous "
                "session has not expired yet"
            )

    async def brokers(self, watch: Watch | None = None) -> dict[int, BrokerRegistration]:
        """The live brokers by id; ``watch`` fires when one registers or goes away."""
        ids = sorted(int(c) for c in await self.zk.get_children(BROKER_IDS_PATH, watch))
        found = await self.zk.get_many([broker_path(i) for i in ids])
        return {
            i: BrokerRegistration.decode(i, *got)
            for i, got in zip(ids, found, strict=True)
            if got is not None
        }

    # --- controller ----------------------------------------------------------------------

    async def elect_controller(self, broker_id: int) -> ControllerEpoch | None:
        """Campaign: create the ephemeral /controller and bump /controller_epoch in one
        multi. The new epoch and its zk version if this broker won, else None."""
        while True:
            current = await self._controller_epoch_or_create()
            tx = self.zk.transaction()
            tx.create(CONTROLLER_PATH, _controller_json(broker_id), ephemeral=True)
            tx.set_data(CONTROLLER_EPOCH_PATH, b"%d" % (current.epoch + 1), current.zk_version)
            try:
                results = await tx.commit()
                return ControllerEpoch(current.epoch + 1, results[1].version)
            except TransactionFailed as e:
                if isinstance(e.cause, BadVersionError):
                    continue  # another controller came and went meanwhile: campaign again
                if not isinstance(e.cause, NodeExistsError):
                    raise
            return await self._own_controller_epoch(broker_id)

    async def controller_id(self, watch: Watch | None = None) -> int | None:
        """The active controller's broker id, or None; ``watch`` fires when /controller is
        created, changed or deleted."""
        if await self.zk.exists(CONTROLLER_PATH, watch) is None:
            return None
        try:
            data, _ = await self.zk.get(CONTROLLER_PATH)
        except NoNodeError:
            return None
        controller: int = json.loads(data)["brokerid"]
        return controller

    async def controller_epoch(self) -> ControllerEpoch | None:
        try:
            data, stat = await self.zk.get(CONTROLLER_EPOCH_PATH)
        except NoNodeError:
            return None
        return ControllerEpoch(int(data), stat.version)

    async def resign_controller(self, controller_epoch_zk_version: int) -> None:
        """Delete /controller, unless another controller has been elected since."""
        tx = self.zk.transaction()
        tx.check(CONTROLLER_EPOCH_PATH, controller_epoch_zk_version)
        tx.delete(CONTROLLER_PATH)
        await self._fenced_commit(tx)

    async def _controller_epoch_or_create(self) -> ControllerEpoch:
        while True:
            current = await self.controller_epoch()
            if current is not None:
                return current
            try:
                _, stat = await self.zk.create(CONTROLLER_EPOCH_PATH, b"0")
                return ControllerEpoch(0, stat.version)
            except NodeExistsError:
                continue

    async def _own_controller_epoch(self, broker_id: int) -> ControllerEpoch | None:
        """/controller exists: the epoch if it is this session's (a resent campaign)."""
        try:
            data, stat = await self.zk.get(CONTROLLER_PATH)
        except NoNodeError:
            return None
        if stat.ephemeralOwner != self.zk.session_id or json.loads(data)["brokerid"] != broker_id:
            return None
        return await self.controller_epoch()

    # --- topics --------------------------------------------------------------------------

    async def create_topic(self, assignment: TopicAssignment, configs: Mapping[str, str]) -> None:
        """Write the assignment and the topic's config overrides in one multi.

        Raises TopicExistsError if the topic exists (also while marked for deletion).
        """
        config = _json({"version": 1, "config": dict(configs)})
        overwrite_config = False
        while True:
            tx = self.zk.transaction()
            tx.create(topic_path(assignment.name), assignment.encode())
            if overwrite_config:
                tx.set_data(topic_config_path(assignment.name), config)
            else:
                tx.create(topic_config_path(assignment.name), config)
            try:
                await tx.commit()
                return
            except TransactionFailed as e:
                if e.index == 0 and isinstance(e.cause, NodeExistsError):
                    raise TopicExistsError(f"topic '{assignment.name}' already exists") from None
                # A config left by a topic deleted before is overwritten (as Kafka does);
                # if it vanishes meanwhile, it is created again.
                expected = NoNodeError if overwrite_config else NodeExistsError
                if e.index == 1 and isinstance(e.cause, expected):
                    overwrite_config = not overwrite_config
                    continue
                raise

    async def set_topic_assignment(
        self, assignment: TopicAssignment, controller_epoch_zk_version: int
    ) -> None:
        """Replace a topic's assignment (new partitions, reassignment), as the controller."""
        tx = self.zk.transaction()
        tx.check(CONTROLLER_EPOCH_PATH, controller_epoch_zk_version)
        tx.set_data(topic_path(assignment.name), assignment.encode())
        await self._fenced_commit(tx)

    async def topic_names(self, watch: Watch | None = None) -> list[str]:
        """Every topic; ``watch`` fires when one is created or deleted."""
        return sorted(await self.zk.get_children(TOPICS_PATH, watch))

    async def topic_assignments(self, watch: Watch | None = None) -> dict[str, TopicAssignment]:
        """Every topic's assignment; ``watch`` fires when a topic is created or deleted."""
        names = await self.topic_names(watch)
        found = await self.zk.get_many([topic_path(n) for n in names])
        return {
            n: TopicAssignment.decode(n, got[0])
            for n, got in zip(names, found, strict=True)
            if got is not None
        }

    async def topic_assignment(
        self, name: str, watch: Watch | None = None
    ) -> TopicAssignment | None:
        """One topic's assignment; ``watch`` fires when it changes (partitions added)."""
        try:
            data, _ = await self.zk.get(topic_path(name), watch)
        except NoNodeError:
            return None
        return TopicAssignment.decode(name, data)

    async def topic_configs(self, name: str) -> dict[str, str]:
        """The topic's config overrides ({} when it has none)."""
        return await self.entity_configs(f"topics/{name}")

    # --- dynamic configs (Kafka's /config/<entity> znodes and change notifications) --------

    async def entity_configs(self, entity_path: str) -> dict[str, str]:
        """The configs of `topics/<t>`, `brokers/<id>`, `brokers/<default>`, `groups/<g>`
        or a client quota entity ({} when none are set)."""
        try:
            data, _ = await self.zk.get(f"{CONFIG_PATH}/{entity_path}")
        except NoNodeError:
            return {}
        return _decode_config(entity_path, data)

    async def quota_entity_configs(self) -> dict[str, dict[str, str]]:
        """The configs of every client quota entity by entity path: `clients/<c>`,
        `users/<u>`, `users/<u>/clients/<c>` and `ips/<ip>` (read whole: such entities
        are few)."""
        users = await self.zk.get_children(USER_CONFIGS_PATH)
        clients = await self.zk.get_children(CLIENT_CONFIGS_PATH)
        (ips,) = await self.zk.get_children_many([IP_CONFIGS_PATH])  # absent before 2.7
        user_clients = await self.zk.get_children_many(
            [f"{USER_CONFIGS_PATH}/{u}/clients" for u in users]
        )
        paths = [f"users/{u}" for u in users] + [f"clients/{c}" for c in clients]
        paths += [f"ips/{ip}" for ip in ips or ()]
        for user, names in zip(users, user_clients, strict=True):
            paths += [f"users/{user}/clients/{c}" for c in names or ()]
        found = await self.zk.get_many([f"{CONFIG_PATH}/{p}" for p in paths])
        return {
            path: _decode_config(path, node[0])
            for path, node in zip(paths, found, strict=True)
            if node is not None
        }

    async def set_entity_configs(self, entity_path: str, configs: Mapping[str, str]) -> None:
        """Replace an entity's configs, then notify every broker under /config/changes
        (a sequential `config_change_` znode naming the entity), as Kafka's AdminZkClient."""
        path = f"{CONFIG_PATH}/{entity_path}"
        data = _json({"version": 1, "config": dict(configs)})
        try:
            await self.zk.set(path, data)
        except NoNodeError:
            try:
                await self.zk.create(path, data, makepath=True)
            except NodeExistsError:
                await self.zk.set(path, data)
        await self.zk.create(
            f"{CONFIG_CHANGES_PATH}/{CONFIG_CHANGE_PREFIX}",
            _json({"version": 2, "entity_path": entity_path}),
            sequence=True,
        )

    async def config_changes(self, watch: Watch | None = None) -> list[tuple[int, str]]:
        """The pending change notifications as (sequence number, znode name), in order;
        `watch` fires when one is added."""
        names = await self.zk.get_children(CONFIG_CHANGES_PATH, watch)
        found = [
            (int(n[len(CONFIG_CHANGE_PREFIX) :]), n)
            for n in names
            if n.startswith(CONFIG_CHANGE_PREFIX) and n[len(CONFIG_CHANGE_PREFIX) :].isdigit()
        ]
        return sorted(found)

    async def config_change(self, name: str) -> str | None:
        """The entity path a change notification names (None if it is gone or unreadable)."""
        try:
            data, _ = await self.zk.get(f"{CONFIG_CHANGES_PATH}/{name}")
            path = json.loads(data).get("entity_path")
        except (NoNodeError, ValueError, AttributeError):
            return None
        return path if isinstance(path, str) else None

    async def purge_config_changes(self, older_than_ms: int) -> None:
        """Delete the change notifications created before `older_than_ms` (epoch ms): every
        broker has long applied them (Kafka keeps them 15 minutes)."""
        for _, name in await self.config_changes():
            path = f"{CONFIG_CHANGES_PATH}/{name}"
            stat = await self.zk.exists(path)
            if stat is not None and stat.ctime < older_than_ms:
                try:
                    await self.zk.delete(path)
                except NoNodeError:
                    pass  # another broker purged it first

    async def group_config_names(self) -> list[str]:
        return sorted(await self.zk.get_children(GROUP_CONFIGS_PATH))

    # --- partition states ----------------------------------------------------------------

    async def partition_states(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, PartitionState]:
        """The states of the given partitions, read in batches; absent ones are left out."""
        tps = list(partitions)
        found = await self.zk.get_many([partition_state_path(t, p) for t, p in tps])
        return {
            tp: PartitionState.decode(*got)
            for tp, got in zip(tps, found, strict=True)
            if got is not None
        }

    async def create_partition_states(
        self, states: Mapping[TopicPartition, PartitionState], controller_epoch_zk_version: int
    ) -> dict[TopicPartition, PartitionState | StateConflict]:
        """Create the first state of new partitions (the controller, on topic creation).

        Per partition: the created state (partition_epoch 0), or a StateConflict holding the
        state that exists already (None if the topic is gone). Raises ControllerMovedError
        if fenced.
        """
        topics = sorted({t for t, _ in states})
        made = await asyncio.gather(
            *(self._create_if_absent(partitions_path(t)) for t in topics), return_exceptions=True
        )
        for outcome in made:
            if isinstance(outcome, Exception) and not isinstance(outcome, NoNodeError):
                raise outcome
        gone = {t for t, outcome in zip(topics, made, strict=True) if outcome is not None}
        results: dict[TopicPartition, PartitionState | StateConflict] = {
            tp: StateConflict(None)
            for tp in states
            if tp[0] in gone  # topic deleted
        }
        live = {tp: state for tp, state in states.items() if tp[0] not in gone}
        return results | await self._write_states(live, controller_epoch_zk_version, create=True)

    async def write_partition_states(
        self, states: Mapping[TopicPartition, PartitionState], controller_epoch_zk_version: int
    ) -> dict[TopicPartition, PartitionState | StateConflict]:
        """Write new states, each conditional on its ``partition_epoch`` (the version it was
        read at), in multis checking /controller_epoch's version.

        Per partition: the new state (partition_epoch incremented), or a StateConflict with
        the state ZooKeeper holds. Raises ControllerMovedError if fenced.
        """
        return await self._write_states(states, controller_epoch_zk_version, create=False)

    async def _write_states(
        self,
        states: Mapping[TopicPartition, PartitionState],
        controller_epoch_zk_version: int,
        create: bool,
    ) -> dict[TopicPartition, PartitionState | StateConflict]:
        items = list(states.items())
        results: dict[TopicPartition, PartitionState | StateConflict] = {}
        await asyncio.gather(
            *(
                self._write_state_chunk(
                    dict(items[i : i + MAX_OPS_PER_MULTI]),
                    controller_epoch_zk_version,
                    create,
                    results,
                )
                for i in range(0, len(items), MAX_OPS_PER_MULTI)
            )
        )
        return results

    async def _write_state_chunk(
        self,
        pending: dict[TopicPartition, PartitionState],
        controller_epoch_zk_version: int,
        create: bool,
        results: dict[TopicPartition, PartitionState | StateConflict],
    ) -> None:
        # A create also makes the missing /partitions/<p> parents, in the same multi.
        parentless = await self._missing_partition_znodes(pending) if create else set()
        failed_before: set[TopicPartition] = set()
        while pending:
            order = list(pending)
            tx = self.zk.transaction()
            tx.check(CONTROLLER_EPOCH_PATH, controller_epoch_zk_version)
            op_owner: list[TopicPartition | None] = [None]
            for tp in order:
                state = pending[tp]
                if not create:
                    tx.set_data(partition_state_path(*tp), state.encode(), state.partition_epoch)
                elif tp in parentless:
                    tx.create(partition_path(*tp))
                    op_owner.append(tp)
                    tx.create(partition_state_path(*tp), state.encode())
                else:
                    tx.create(partition_state_path(*tp), state.encode())
                op_owner.append(tp)
            try:
                written = await tx.commit()
            except TransactionFailed as e:
                if e.index == 0:
                    raise _fenced(controller_epoch_zk_version) from None
                if not isinstance(e.cause, BadVersionError | NoNodeError | NodeExistsError):
                    raise
                # Nothing was applied: read again, set aside every partition whose state
                # moved (or that failed twice), keep the rest for the next multi.
                failed = op_owner[e.index]
                current = await self.partition_states(order)
                if create:
                    parentless = await self._missing_partition_znodes(order)
                for tp in order:
                    state, now = pending[tp], current.get(tp)
                    expected = None if create else state.partition_epoch
                    moved = (now.partition_epoch if now else None) != expected
                    if moved or (tp == failed and tp in failed_before):
                        del pending[tp]
                        results[tp] = _own_write_or_conflict(state, now, create)
                if failed is not None:
                    failed_before.add(failed)
                continue
            # a partition's last op is its state's (after its parent's create, if any)
            state_op = {tp: i for i, tp in enumerate(op_owner) if tp is not None}
            for tp, i in state_op.items():
                version = 0 if create else written[i].version
                results[tp] = pending[tp].written(version)
            return

    async def _missing_partition_znodes(
        self, partitions: Iterable[TopicPartition]
    ) -> set[TopicPartition]:
        """The partitions without a /brokers/topics/<t>/partitions/<p> znode."""
        tps = list(partitions)
        topics = sorted({t for t, _ in tps})
        listings = await self.zk.get_children_many([partitions_path(t) for t in topics])
        existing = {t: set(kids or ()) for t, kids in zip(topics, listings, strict=True)}
        return {(t, p) for t, p in tps if str(p) not in existing[t]}

    # --- deletion ------------------------------------------------------------------------

    async def mark_for_deletion(self, topic: str) -> None:
        """Ask the controller to delete the topic (/admin/delete_topics/<topic>)."""
        await self._create_if_absent(delete_topic_path(topic))

    async def topics_to_delete(self, watch: Watch | None = None) -> list[str]:
        """Topics marked for deletion; ``watch`` fires when one is marked or unmarked."""
        return sorted(await self.zk.get_children(DELETE_TOPICS_PATH, watch))

    async def delete_topic(self, topic: str, controller_epoch_zk_version: int) -> None:
        """Remove the topic's znodes (assignment, partition states, config, deletion mark)
        once its replicas are deleted; leaves first, in fenced multis."""
        while True:
            paths = await self._topic_znodes(topic)
            try:
                for i in range(0, len(paths), MAX_OPS_PER_MULTI):
                    tx = self.zk.transaction()
                    tx.check(CONTROLLER_EPOCH_PATH, controller_epoch_zk_version)
                    for path in paths[i : i + MAX_OPS_PER_MULTI]:
                        tx.delete(path)
                    await self._fenced_commit(tx)
                return
            except TransactionFailed as e:
                if not isinstance(e.cause, NoNodeError | NotEmptyError):
                    raise
                # the tree changed under us (a partition state created late): list it again

    async def _topic_znodes(self, topic: str) -> list[str]:
        """The topic's existing znodes, every child before its parent."""
        try:
            partitions = await self.zk.get_children(partitions_path(topic))
        except NoNodeError:
            partitions = []
        children = await self.zk.get_children_many(
            [partition_path(topic, int(p)) for p in partitions]
        )
        paths: list[str] = []
        for p, kids in zip(partitions, children, strict=True):
            if kids is not None:
                paths += [f"{partition_path(topic, int(p))}/{k}" for k in kids]
                paths.append(partition_path(topic, int(p)))
        if partitions:
            paths.append(partitions_path(topic))
        candidates = [topic_path(topic), topic_config_path(topic), delete_topic_path(topic)]
        present = await asyncio.gather(*(self.zk.exists(p) for p in candidates))
        return paths + [p for p, stat in zip(candidates, present, strict=True) if stat]

    # --- producer ids --------------------------------------------------------------------

    async def allocate_producer_ids(self, broker_id: int) -> ProducerIdBlock:
        """Claim the next block of PRODUCER_ID_BLOCK_SIZE producer ids for ``broker_id``:
        a conditional set on /latest_producer_id_block, retried when another won."""
        while True:
            try:
                data, stat = await self.zk.get(PRODUCER_ID_BLOCK_PATH)
            except NoNodeError:
                data, stat = b"", None
            first = int(json.loads(data)["block_end"]) + 1 if data else 0
            block = ProducerIdBlock(broker_id, first)
            if block.last > MAX_PRODUCER_ID:
                raise RuntimeError("all producer ids have been allocated")
            payload = _json(
                {
                    "version": 1,
                    "broker": broker_id,
                    "block_start": str(block.first),
                    "block_end": str(block.last),
                }
            )
            try:
                if stat is None:
                    await self.zk.create(PRODUCER_ID_BLOCK_PATH, payload)
                else:
                    await self.zk.set(PRODUCER_ID_BLOCK_PATH, payload, stat.version)
                return block
            except (BadVersionError, NodeExistsError):
                continue  # another broker took this block

    # --- helpers -------------------------------------------------------------------------

    async def _create_if_absent(self, path: str) -> None:
        try:
            await self.zk.create(path)
        except NodeExistsError:
            pass

    async def _fenced_commit(self, tx: Transaction) -> list[Any]:
        """Commit a multi whose first op checks /controller_epoch."""
        try:
            return await tx.commit()
        except TransactionFailed as e:
            if e.index == 0:
                raise _fenced(None) from None
            raise


def _own_write_or_conflict(
    state: PartitionState, now: PartitionState | None, create: bool
) -> PartitionState | StateConflict:
    """A refused write whose content is already there, one version on, was ours: sent
    again after a lost connection. Anything else is a conflict."""
    if now is not None and now.same_content(state):
        if now.partition_epoch == (0 if create else state.partition_epoch + 1):
            return now
    return StateConflict(now)


def _fenced(version: int | None) -> ControllerMovedError:
    detail = "" if version is None else f" (expected zk version {version})"
    return ControllerMovedError(
        f"{CONTROLLER_EPOCH_PATH} has moved{detail}: another controller was elected"
    )


def _decode_config(entity_path: str, data: bytes) -> dict[str, str]:
    """The "config" of a /config/<entity> znode; {} (and a warning) if it is unreadable."""
    try:
        config = json.loads(data).get("config") if data else None
        return {str(k): str(v) for k, v in (config or {}).items()}
    except (ValueError, AttributeError):
        logger.warning("Ignoring the unreadable configs of %s: %r", entity_path, data[:200])
        return {}


def _controller_json(broker_id: int) -> bytes:
    return _json({"version": 1, "brokerid": broker_id, "timestamp": str(_now_ms())})


def random_uuid() -> uuid.UUID:
    """A topic or cluster id as Kafka makes them: never zero, never starting with '-'."""
    while True:
        u = uuid.uuid4()
        if not encode_uuid(u).startswith("-"):
            return u


def encode_uuid(u: uuid.UUID) -> str:
    """Kafka's Uuid.toString(): url-safe base64 of the 16 bytes, unpadded (22 chars)."""
    return base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


def decode_uuid(text: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))


def _by_partition(replicas: Mapping[int, list[int]]) -> dict[str, list[int]]:
    return {str(p): list(r) for p, r in sorted(replicas.items())}


def _from_partition(js: Mapping[str, list[int]] | None) -> dict[int, list[int]]:
    return {int(p): list(r) for p, r in (js or {}).items()}


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _now_ms() -> int:
    return int(time.time() * 1000)
