"""The broker's SharePersister (server/share_persister.py) both ways: in process to this
broker's ShareCoordinator (leading a ``__share_group_state`` partition of an in-process
replica manager: the topic created on first need, the state reloaded from the log after a
resign), and through the RPCs to a real broker process that leads the partitions."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from compat_tests.broker import BrokerProcess
from compat_tests.process_pool import ProcessPool
from gregor.apis.context import build
from gregor.controller.metadata.cache import PartitionInfo
from gregor.coordinator.share_coordinator import (
    ShareCoordinator,
    ShareCoordinatorSettings,
    coordinator_key,
)
from gregor.coordinator.share_state_records import SHARE_GROUP_STATE_TOPIC
from gregor.log import LogManager
from gregor.replica.manager import ReplicaManager
from gregor.replica.share_partition import StateBatch
from gregor.replica.share_persister import ShareState, ShareStateError
from gregor.server.broker_client import InterBrokerClient
from gregor.server.share_persister import BrokerSharePersister
from gregor.wire import versions as v
from gregor.wire.schema import request_type
from tests.kafka_wire import WireClient, create_topic
from tests.test_share_coordinator_broker import OVERRIDES

NOW = 1_700_000_000_000
TOPIC = uuid.UUID(int=42)
AVAILABLE, ACKED = 0, 2


@dataclass
class Node:
    replicas: ReplicaManager
    coordinator: ShareCoordinator
    leader: int | None = None  # what leader_of answers: None until the topic exists

    def lead(self) -> None:
        info = PartitionInfo(0, 0, 1, [0], [0])
        self.replicas.become_leader(SHARE_GROUP_STATE_TOPIC, info, {})
        self.coordinator.on_become_leader(0)
        self.leader = 0


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    logs = LogManager([tmp_path], {})
    logs.startup(NOW)
    replicas = ReplicaManager(0, logs, {})
    coordinator = ShareCoordinator(
        ShareCoordinatorSettings(partitions=1, updates_per_snapshot=2),
        replicas,
        replicas.produce_purgatory,
        lambda: NOW,
        lambda topic_id, partition: topic_id == TOPIC,
    )
    yield Node(replicas, coordinator)
    replicas.shutdown()
    logs.shutdown(replicas.high_watermarks())


def local_persister(node: Node, max_attempts: int = 3) -> BrokerSharePersister:
    async def create_topic() -> None:
        node.lead()

    return BrokerSharePersister(
        node.coordinator, 0, lambda _index: node.leader, create_topic, None, max_attempts
    )


def test_local_calls_create_the_topic_write_read_and_reload(node: Node) -> None:
    persister = local_persister(node)

    async def scenario() -> None:
        assert await persister.read("g", TOPIC, 0, 1) is None  # and the topic now exists
        assert node.leader == 0
        await persister.write("g", TOPIC, 0, 0, 1, 0, [StateBatch(0, 9, AVAILABLE, 1)])
        for offset in (0, 1, 2, 7):  # updates, a snapshot, an update
            await persister.write("g", TOPIC, 0, 0, 1, -1, [StateBatch(offset, offset, ACKED, 1)])
        expected = ShareState(
            0,
            1,
            0,
            (
                StateBatch(0, 2, ACKED, 1),
                StateBatch(3, 6, AVAILABLE, 1),
                StateBatch(7, 7, ACKED, 1),
                StateBatch(8, 9, AVAILABLE, 1),
            ),
        )
        assert await persister.read("g", TOPIC, 0, 1) == expected
        with pytest.raises(ShareStateError) as fenced:
            await persister.write("g", TOPIC, 0, 0, 0, 0, [])
        assert fenced.value.error == ErrorCode.fenced_leader_epoch
        # A new leadership of the partition replays the log: the same state.
        node.coordinator.on_resign(0)
        node.coordinator.on_become_leader(0)
        assert await persister.read("g", TOPIC, 0, 1) == expected
        summary = await persister.read_summary("g", TOPIC, 0)
        assert summary == ShareState(0, 1, 0)
        await persister.initialize("g", TOPIC, 0, 1, 40)
        assert await persister.read("g", TOPIC, 0, 1) == ShareState(1, 1, 40)
        await persister.delete("g", TOPIC, 0)
        assert await persister.read_summary("g", TOPIC, 0) is None

    asyncio.run(scenario())


def test_prune_deletes_what_no_state_needs(node: Node) -> None:
    persister = local_persister(node)

    async def scenario() -> None:
        for offset in range(7):  # a snapshot, 2 updates, a snapshot, 2 updates, a snapshot
            await persister.write("g", TOPIC, 0, 0, 1, 0, [StateBatch(offset, offset, ACKED, 1)])
        await persister.write("h", TOPIC, 0, 0, 1, 0, [StateBatch(0, 0, ACKED, 1)])
        expected = await persister.read("g", TOPIC, 0, 1)
        log = node.replicas.get(SHARE_GROUP_STATE_TOPIC, 0)
        assert log is not None
        assert node.coordinator.prune(NOW) == 6  # up to g's last snapshot
        assert log.log.log_start_offset == 6
        assert node.coordinator.prune(NOW) == 0
        node.coordinator.on_resign(0)
        node.coordinator.on_become_leader(0)
        assert await persister.read("g", TOPIC, 0, 1) == expected
        assert await persister.read_summary("h", TOPIC, 0) == ShareState(0, 1, 0)

    asyncio.run(scenario())


def test_a_coordinator_that_does_not_lead_is_retried_then_refused(node: Node) -> None:
    node.lead()
    node.coordinator.on_resign(0)  # the metadata still names this broker
    persister = local_persister(node, max_attempts=2)

    async def scenario() -> None:
        with pytest.raises(ShareStateError) as refused:
            await persister.read("g", TOPIC, 0, 1)
        assert refused.value.error == ErrorCode.not_coordinator
        node.coordinator.on_become_leader(0)
        assert await persister.read("g", TOPIC, 0, 1) is None

    asyncio.run(scenario())


@pytest.fixture(scope="module")
def broker(process_pool: ProcessPool) -> BrokerProcess:
    return process_pool.broker(OVERRIDES)


def test_remote_calls_reach_the_coordinator_of_another_broker(
    broker: BrokerProcess, node: Node
) -> None:
    c = WireClient(broker.port)
    try:
        created = create_topic(c, f"persisted-{uuid.uuid4().hex[:8]}", 1)
        assert created.error_code == ErrorCode.none
        topic_id = created.topic_id
        # FindCoordinator key type 2 creates the state topic, which the broker leads.
        find = build(
            request_type(v.FIND_COORDINATOR, 6),
            key_type=2,
            coordinator_keys=(coordinator_key("g-remote", topic_id, 0),),
        )
        found = c.call(v.FIND_COORDINATOR, 6, find).coordinators[0]
        assert (found.error_code, found.node_id) == (ErrorCode.none, broker.broker_id)
    finally:
        c.close()
    # The in-process coordinator only maps keys to partitions: the broker process leads them.
    mapping = ShareCoordinator(
        ShareCoordinatorSettings(
            partitions=int(OVERRIDES["share.coordinator.state.topic.num.partitions"])
        ),
        node.replicas,
        node.replicas.produce_purgatory,
        lambda: NOW,
        lambda _topic_id, _partition: False,
    )

    async def scenario() -> None:
        client = InterBrokerClient(
            "persister-test",
            lambda n: ("127.0.0.1", broker.port) if n == broker.broker_id else None,
            10_000,
        )

        async def create_topic_unused() -> None:
            raise AssertionError("the broker process already has the topic")

        persister = BrokerSharePersister(
            mapping, -1000, lambda _index: broker.broker_id, create_topic_unused, client.send
        )
        try:
            group = "g-remote"
            await persister.write(group, topic_id, 0, 0, 3, 5, [StateBatch(5, 8, AVAILABLE, 1)])
            await persister.write(group, topic_id, 0, 0, 3, -1, [StateBatch(5, 5, ACKED, 1)])
            state = await persister.read(group, topic_id, 0, 3)
            assert state == ShareState(
                0, 3, 5, (StateBatch(5, 5, ACKED, 1), StateBatch(6, 8, AVAILABLE, 1))
            )
            with pytest.raises(ShareStateError) as fenced:
                await persister.write(group, topic_id, 0, 0, 2, -1, [])
            assert fenced.value.error == ErrorCode.fenced_leader_epoch
            assert await persister.read_summary(group, topic_id, 0) == ShareState(0, 3, 5)
            await persister.delete(group, topic_id, 0)
            assert await persister.read(group, topic_id, 0, -1) is None
            with pytest.raises(ShareStateError) as unknown:
                await persister.write(group, uuid.uuid4(), 0, 0, 0, 0, [])
            assert unknown.value.error == ErrorCode.unknown_topic_or_partition
        finally:
            await client.close()

    asyncio.run(scenario())
