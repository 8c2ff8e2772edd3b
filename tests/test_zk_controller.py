"""The ZooKeeper controller in-process against a real ZooKeeper.

Brokers are ZooKeeper registrations, each on its own session (closing it is the broker's
death); the controller's `send` records every request and answers it with success. This
tests the controller's decisions, what it writes to ZooKeeper and what it tells whom;
multi-broker process tests are elsewhere.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from kio.schema.alter_partition.v2 import request as alter_v2
from kio.schema.alter_partition.v3 import request as alter
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32, i64

from gregor.controller.assignment import assign_replicas
from gregor.controller.base import ElectionType
from gregor.controller.zk_controller.channel import (
    Broker,
    ControllerChannel,
    Endpoint,
    PartitionView,
    RequestBatch,
)
from gregor.controller.zk_controller.config import ControllerConfig
from gregor.controller.zk_controller.controller import ZkController
from gregor.controller.zk_controller.election import RECOVERING
from gregor.controller.zookeeper.client import AsyncZk
from gregor.controller.zookeeper.data import (
    BrokerRegistration,
    KafkaZk,
    TopicAssignment,
    random_uuid,
)
from gregor.server.harness.zookeeper import ZooKeeperProcess
from gregor.wire.interbroker import (
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    StopReplicaPartitionError,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)
from gregor.wire.schema import decode, encode

pytest_plugins = ["tests.zookeeper_fixture"]

# Generous: the machine is shared; a watch normally fires within milliseconds.
WAIT_S = 30.0
CONFIG = ControllerConfig(auto_leader_rebalance=False)


class CountingZk(AsyncZk):
    """An AsyncZk counting the multis committed through it."""

    multis = 0

    def transaction(self) -> Any:
        tx = super().transaction()
        commit = tx.commit

        async def counted() -> list[Any]:
            self.multis += 1
            return await commit()

        tx.commit = counted  # type: ignore[method-assign]
        return tx


class Brokers:
    """What the controller sent, answered as a healthy broker would."""

    def __init__(self) -> None:
        self.sent: list[tuple[float, int, Any]] = []
        self.refuse: set[int] = set()  # brokers whose StopReplica fails (replica busy)

    async def send(self, node: int, request: Any, version: int) -> Any:
        self.sent.append((time.monotonic(), node, request))
        if isinstance(request, LeaderAndIsrRequest):
            return LeaderAndIsrResponse(error_code=ErrorCode.none, topics=())
        if isinstance(request, UpdateMetadataRequest):
            return UpdateMetadataResponse(error_code=ErrorCode.none)
        assert isinstance(request, StopReplicaRequest)
        return StopReplicaResponse(
            error_code=ErrorCode.none,
            partition_errors=tuple(
                StopReplicaPartitionError(
                    topic_name=t.topic_name,
                    partition_index=p.partition_index,
                    error_code=ErrorCode.none,
                )
                for t in request.topic_states
                for p in t.partition_states
            ),
        )

    def of(self, kind: type, node: int | None = None, since: float = 0.0) -> list[Any]:
        return [
            r
            for t, n, r in self.sent
            if isinstance(r, kind) and (node is None or n == node) and t >= since
        ]


def partitions_in(request: Any) -> dict[tuple[str, int], Any]:
    return {
        (t.topic_name, p.partition_index): p
        for t in request.topic_states
        for p in t.partition_states
    }


async def wait_for(condition: Callable[[], bool | Awaitable[bool]]) -> None:
    async with asyncio.timeout(WAIT_S):
        while True:
            result = condition()
            if not isinstance(result, bool):
                result = await result
            if result:
                return
            await asyncio.sleep(0.02)


def registration(broker_id: int) -> BrokerRegistration:
    port = 9000 + broker_id
    return BrokerRegistration(
        broker_id, {"PLAINTEXT": ("127.0.0.1", port)}, {"PLAINTEXT": "PLAINTEXT"}
    )


class Cluster:
    """Broker registrations and controllers, each on its own ZooKeeper session."""

    def __init__(self, connect: str, brokers: Brokers) -> None:
        self.connect = connect
        self.brokers = brokers
        self.sessions: dict[int, KafkaZk] = {}
        self.epochs: dict[int, int] = {}
        self.controllers: dict[int, ZkController] = {}

    async def session(self) -> KafkaZk:
        zk = CountingZk(self.connect, 10000)
        await zk.start()
        kzk = KafkaZk(zk)
        await kzk.ensure_paths()
        return kzk

    async def start_broker(self, broker_id: int, config: ControllerConfig = CONFIG) -> None:
        """Register a broker (and run its controller, which campaigns)."""
        kzk = await self.session()
        self.sessions[broker_id] = kzk
        self.epochs[broker_id] = (await kzk.register_broker(registration(broker_id))).epoch
        controller = ZkController(broker_id, kzk, self.brokers.send, config)
        self.controllers[broker_id] = controller
        await controller.start()

    async def kill(self, broker_id: int) -> None:
        """The broker dies: its session ends, with its registration (and /controller)."""
        await self.controllers.pop(broker_id).stop()
        await self.sessions.pop(broker_id).zk.close()

    async def active(self) -> ZkController:
        await wait_for(lambda: any(c.active for c in self.controllers.values()))
        return next(c for c in self.controllers.values() if c.active)

    async def settled(self, controller: ZkController) -> None:
        """The controller has processed every queued event and handed every request it
        queued to `send`."""
        await controller._submit(_noop)
        await wait_for(lambda: controller._channel is None or controller._channel.pending() == 0)

    async def close(self) -> None:
        for broker_id in list(self.sessions):
            await self.kill(broker_id)

    @property
    def zk(self) -> KafkaZk:
        return next(iter(self.sessions.values()))

    async def create_topic(
        self, name: str, partitions: dict[int, list[int]], **configs: str
    ) -> Any:
        topic_id = random_uuid()
        await self.zk.create_topic(TopicAssignment(name, topic_id, partitions), configs)
        return topic_id

    async def states(self, name: str, count: int) -> dict[int, Any]:
        got = await self.zk.partition_states([(name, p) for p in range(count)])
        return {p: s for (_, p), s in got.items()}


async def _noop() -> None:
    return None


@pytest.fixture
def connect(zookeeper: ZooKeeperProcess, request: pytest.FixtureRequest) -> str:
    """The server's connect string with a chroot private to this test."""
    return f"{zookeeper.connect}/{re.sub(r'[^A-Za-z0-9_-]', '_', request.node.name)}"


@asynccontextmanager
async def cluster(
    connect: str, *broker_ids: int, config: ControllerConfig = CONFIG
) -> AsyncIterator[Cluster]:
    c = Cluster(connect, Brokers())
    try:
        for broker_id in broker_ids:
            await c.start_broker(broker_id, config)
        yield c
    finally:
        await c.close()


def run(body: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(body())


# --- the channel -----------------------------------------------------------------------


def test_batch_makes_one_request_per_broker_that_encodes_and_decodes() -> None:
    async def body() -> None:
        brokers = Brokers()
        channel = ControllerChannel(brokers.send)
        live = {
            b: Broker(
                b, 100 + b, (Endpoint("PLAINTEXT", "127.0.0.1", 9000 + b, "PLAINTEXT"),), None
            )
            for b in (1, 2)
        }
        for b in live:
            channel.add_broker(b)
        batch = RequestBatch()
        topic_id = random_uuid()
        for p in range(50):
            view = PartitionView(1, 3, (1, 2), 7, 2, (1, 2, 3))
            batch.add_leader_and_isr([1, 2], ("t", p), view, is_new=p == 0)
        batch.add_stop_replica(2, ("u", 0), delete=True, leader_epoch=4)
        batch.send(
            channel,
            controller_id=1,
            controller_epoch=2,
            brokers=live,
            topic_ids={"t": topic_id},
            listener="PLAINTEXT",
        )
        await wait_for(lambda: channel.pending() == 0 and len(brokers.sent) == 5)
        kinds = [(n, type(r).__name__) for _, n, r in brokers.sent]
        # Per broker: LeaderAndIsr, then UpdateMetadata, then StopReplica.
        assert [k for k in kinds if k[0] == 2] == [
            (2, "LeaderAndIsrRequest"),
            (2, "UpdateMetadataRequest"),
            (2, "StopReplicaRequest"),
        ]
        for _, node, request in brokers.sent:
            again = decode(type(request), encode(request))
            assert again == request
            assert request.broker_epoch == 100 + node
        [lai] = brokers.of(LeaderAndIsrRequest, 1)
        assert [t.topic_id for t in lai.topic_states] == [topic_id]
        assert len(partitions_in(lai)) == 50 and partitions_in(lai)[("t", 0)].is_new
        assert [(x.broker_id, x.port) for x in lai.live_leaders] == [(1, 9001)]
        [um] = brokers.of(UpdateMetadataRequest, 2)
        assert list(partitions_in(um)[("t", 1)].offline_replicas) == [3]
        [stop] = brokers.of(StopReplicaRequest, 2)
        assert partitions_in(stop)[("u", 0)].leader_epoch == -2  # EpochDuringDelete
        await channel.close()

    run(body)


def test_channel_retries_until_answered_and_keeps_order() -> None:
    async def body() -> None:
        answered: list[int] = []
        failures = 3

        async def flaky(node: int, request: Any, version: int) -> Any:
            nonlocal failures
            if failures:
                failures -= 1
                raise ConnectionError("refused")
            answered.append(request)
            return None

        channel = ControllerChannel(flaky, backoff_s=0.01)
        channel.add_broker(1)
        for i in range(5):
            channel.send(1, i, 0)
        await wait_for(lambda: len(answered) == 5)
        assert answered == [0, 1, 2, 3, 4]
        await channel.remove_broker(1)
        channel.send(1, 5, 0)  # not live: dropped
        assert channel.pending() == 0
        await channel.close()

    run(body)


# --- election --------------------------------------------------------------------------


def test_one_controller_is_elected_and_requests_carry_its_epoch(connect: str) -> None:
    async def body() -> None:
        async with cluster(connect, 1, 2, 3) as c:
            controller = await c.active()
            assert controller.broker_id == 1  # the first to campaign
            assert [b for b, x in c.controllers.items() if x.active] == [1]
            assert controller.context.epoch == 1
            assert (await c.zk.controller_epoch()).epoch == 1
            await wait_for(lambda: set(controller.brokers) == {1, 2, 3})
            await c.settled(controller)
            await wait_for(lambda: len(c.brokers.of(UpdateMetadataRequest, 3)) > 0)
            assert {r.controller_epoch for _, _, r in c.brokers.sent} == {1}
            assert all(r.controller_id == 1 for _, _, r in c.brokers.sent)
            # Each request carries the epoch of the broker it is sent to.
            for _, node, r in c.brokers.sent:
                assert r.broker_epoch == c.epochs[node]

    run(body)


def test_new_topic_gets_first_live_replica_as_leader_and_live_replicas_as_isr(
    connect: str,
) -> None:
    async def body() -> None:
        async with cluster(connect, 1, 2, 3) as c:
            controller = await c.active()
            await wait_for(lambda: len(controller.brokers) == 3)
            assignment = assign_replicas({1: None, 2: None, 3: None}, 6, 3, start_index=0)
            topic_id = await c.create_topic("t", assignment)
            await wait_for(lambda: len(controller.context.states) == 6)
            states = await c.states("t", 6)
            for p, replicas in assignment.items():
                assert states[p].leader == replicas[0]
                assert states[p].isr == replicas
                assert states[p].leader_epoch == 0
                assert states[p].controller_epoch == 1
            await c.settled(controller)
            for broker in (1, 2, 3):
                told = {}
                for r in c.brokers.of(LeaderAndIsrRequest, broker):
                    assert all(t.topic_id == topic_id for t in r.topic_states)
                    told.update(partitions_in(r))
                assert set(told) == {("t", p) for p in range(6)}  # RF 3: every broker
                assert all(s.is_new for s in told.values())
                metadata = {}
                for r in c.brokers.of(UpdateMetadataRequest, broker):
                    metadata.update(partitions_in(r))
                assert {tp: s.leader for tp, s in metadata.items()} == {
                    ("t", p): r[0] for p, r in assignment.items()
                }

    run(body)


def test_partitions_added_to_a_topic_are_initialised(connect: str) -> None:
    async def body() -> None:
        async with cluster(connect, 1, 2) as c:
            controller = await c.active()
            await c.create_topic("t", {0: [1, 2]})
            await wait_for(lambda: len(controller.context.states) == 1)
            topic = await c.zk.topic_assignment("t")
            grown = TopicAssignment("t", topic.topic_id, {0: [1, 2], 1: [2, 1]})
            await c.zk.set_topic_assignment(grown, controller.context.epoch_version)
            await wait_for(lambda: ("t", 1) in controller.context.states)
            assert (await c.states("t", 2))[1].leader == 2

    run(body)


# --- brokers dying ---------------------------------------------------------------------


def test_dead_broker_partitions_reelected_in_one_batch(connect: str) -> None:
    async def body() -> None:
        async with cluster(connect, 1, 2, 3) as c:
            controller = await c.active()
            await wait_for(lambda: len(controller.brokers) == 3)
            assignment = assign_replicas({1: None, 2: None, 3: None}, 30, 3, start_index=0)
            await c.create_topic("t", assignment)
            await wait_for(lambda: len(controller.context.states) == 30)
            await c.settled(controller)
            zk = controller.zk.zk
            multis, since = zk.multis, time.monotonic()
            await c.kill(3)
            await wait_for(lambda: 3 not in controller.brokers)
            await c.settled(controller)
            assert zk.multis - multis == 1  # every state change in one write
            states = await c.states("t", 30)
            for p, replicas in assignment.items():
                s = states[p]
                assert 3 not in s.isr and s.leader != 3
                if replicas[0] == 3:
                    assert s.leader == replicas[1]  # first live ISR member in order
                else:
                    assert s.leader == replicas[0]
                assert s.leader_epoch == 1  # re-elected or shrunk: the epoch moves
                assert s.partition_epoch == 1
            for broker in (1, 2):
                [lai] = c.brokers.of(LeaderAndIsrRequest, broker, since)
                assert len(partitions_in(lai)) == 30
                [um] = c.brokers.of(UpdateMetadataRequest, broker, since)
                assert {tp: s.leader for tp, s in partitions_in(um).items()} == {
                    ("t", p): s.leader for p, s in states.items()
                }
                assert {b.id for b in um.live_brokers} == {1, 2}
            assert c.brokers.of(LeaderAndIsrRequest, 3, since) == []

    run(body)


def test_partition_with_no_live_isr_member_goes_offline_unless_unclean(connect: str) -> None:
    async def body() -> None:
        async with cluster(connect, 1, 2, 3) as c:
            controller = await c.active()
            await wait_for(lambda: len(controller.brokers) == 3)
            for name in ("clean", "unclean"):
                extra = {"unclean.leader.election.enable": "true"} if name == "unclean" else {}
                topic_id = await c.create_topic(name, {0: [3, 1, 2]}, **extra)
                await wait_for(lambda n=name: (n, 0) in controller.context.states)
                # The leader shrinks the ISR to itself (its followers lag).
                response = await controller.handle_alter_partition(
                    alter_request(3, c.epochs, topic_id, controller.context.states[(name, 0)], [3])
                )
                assert response.topics[0].partitions[0].error_code == ErrorCode.none
            await c.kill(3)
            await wait_for(lambda: 3 not in controller.brokers)
            await c.settled(controller)
            clean = (await c.states("clean", 1))[0]
            assert (clean.leader, clean.isr) == (-1, [3])  # offline, ISR kept
            unclean = (await c.states("unclean", 1))[0]
            assert (unclean.leader, unclean.isr) == (1, [1])
            assert unclean.leader_recovery_state == RECOVERING
            # ElectLeaders (unclean) for the offline one; the other needs none.
            results = await controller.elect_leaders(
                ElectionType.UNCLEAN, [("clean", 0), ("unclean", 0)]
            )
            assert results[("clean", 0)] == (ErrorCode.none, None)
            assert results[("unclean", 0)][0] == ErrorCode.election_not_needed
            clean = (await c.states("clean", 1))[0]
            assert (clean.leader, clean.isr) == (1, [1])

    run(body)


def test_returning_broker_is_told_everything_and_offline_partition_comes_back(
    connect: str,
) -> None:
    async def body() -> None:
        async with cluster(connect, 1, 2) as c:
            controller = await c.active()
            await wait_for(lambda: len(controller.brokers) == 2)
            await c.create_topic("t", {0: [2], 1: [1, 2]})
            await wait_for(lambda: len(controller.context.states) == 2)
            await c.kill(2)
            await wait_for(lambda: 2 not in controller.brokers)
            await c.settled(controller)
            assert (await c.states("t", 2))[0].leader == -1
            since = time.monotonic()
            await c.start_broker(2)
            await wait_for(lambda: 2 in controller.brokers)
            await c.settled(controller)
            states = await c.states("t", 2)
            assert states[0].leader == 2  # the last ISR member is back: clean election
            told = {}
            for r in c.brokers.of(LeaderAndIsrRequest, 2, since):
                told.update(partitions_in(r))
            assert set(told) == {("t", 0), ("t", 1)}
            [um] = c.brokers.of(UpdateMetadataRequest, 2, since)[:1]
            assert set(partitions_in(um)) == {("t", 0), ("t", 1)}
            # It learns the leaders' endpoints before it is told to follow them (Kafka's
            # onBrokerStartup), and the other broker learns of it.
            first = next(r for t, n, r in c.brokers.sent if n == 2 and t >= since)
            assert first is um and {b.id for b in um.live_brokers} == {1, 2}
            [um1] = c.brokers.of(UpdateMetadataRequest, 1, since)[:1]
            assert {b.id for b in um1.live_brokers} == {1, 2}

    run(body)


def test_bounced_broker_loses_its_leaderships_before_rejoining(connect: str) -> None:
    async def body() -> None:
        async with cluster(connect, 1, 2, 3) as c:
            controller = await c.active()
            await wait_for(lambda: len(controller.brokers) == 3)
            await c.create_topic("t", {0: [3, 1, 2], 1: [1, 2, 3]})
            await wait_for(lambda: len(controller.context.states) == 2)
            await c.settled(controller)
            old_epoch = c.epochs[3]
            # Killed and back at once: the controller may see one change (a new epoch).
            await c.kill(3)
            await c.start_broker(3)
            await wait_for(
                lambda: (
                    controller.brokers.get(3) is not None
                    and controller.brokers[3].epoch != old_epoch
                )
            )
            await c.settled(controller)
            states = await c.states("t", 2)
            assert states[0].leader == 1 and 3 not in states[0].isr
            assert 3 not in states[1].isr
            assert states[0].leader_epoch == 1

    run(body)


# --- AlterPartition --------------------------------------------------------------------


def alter_request(
    leader: int, epochs: dict[int, int], topic_id: Any, state: Any, isr: list[int], **changes: Any
) -> alter.AlterPartitionRequest:
    fields = {
        "leader_epoch": state.leader_epoch,
        "partition_epoch": state.partition_epoch,
        "leader_recovery_state": 0,
    } | changes
    return alter.AlterPartitionRequest(
        broker_id=i32(leader),
        broker_epoch=i64(epochs[leader]),
        topics=(
            alter.TopicData(
                topic_id=topic_id,
                partitions=(
                    alter.PartitionData(
                        partition_index=i32(0),
                        leader_epoch=i32(fields["leader_epoch"]),
                        new_isr_with_epochs=tuple(
                            alter.BrokerState(broker_id=i32(b), broker_epoch=i64(epochs.get(b, -1)))
                            for b in isr
                        ),
                        leader_recovery_state=i8(fields["leader_recovery_state"]),
                        partition_epoch=i32(fields["partition_epoch"]),
                    ),
                ),
            ),
        ),
    )


def test_alter_partition_accepted_and_stale_refused(connect: str) -> None:
    async def body() -> None:
        async with cluster(connect, 1, 2, 3) as c:
            controller = await c.active()
            await wait_for(lambda: len(controller.brokers) == 3)
            topic_id = await c.create_topic("t", {0: [1, 2, 3]})
            await wait_for(lambda: ("t", 0) in controller.context.states)
            await c.settled(controller)
            state = controller.context.states[("t", 0)]
            since = time.monotonic()
            shrink = alter_request(1, c.epochs, topic_id, state, [1, 2])
            response = await controller.handle_alter_partition(shrink)
            [p] = response.topics[0].partitions
            assert p.error_code == ErrorCode.none
            assert (list(p.isr), p.leader_id, p.leader_epoch) == ([1, 2], 1, 0)
            assert p.partition_epoch == state.partition_epoch + 1
            await c.settled(controller)
            written = (await c.states("t", 1))[0]
            assert written.isr == [1, 2] and written.partition_epoch == p.partition_epoch
            for broker in (1, 2, 3):  # every broker's metadata learns the ISR
                [um] = c.brokers.of(UpdateMetadataRequest, broker, since)
                assert list(partitions_in(um)[("t", 0)].isr) == [1, 2]
            assert c.brokers.of(LeaderAndIsrRequest, None, since) == []
            # The same request again (a retry after a lost answer): the current state.
            again = await controller.handle_alter_partition(shrink)
            assert again.topics[0].partitions[0].error_code == ErrorCode.none
            # An old partition epoch: another change came in between.
            stale = alter_request(1, c.epochs, topic_id, state, [1])
            assert error_of(await controller.handle_alter_partition(stale)) == (
                ErrorCode.invalid_update_version
            )
            current = controller.context.states[("t", 0)]
            fenced = alter_request(1, c.epochs, topic_id, current, [1], leader_epoch=5)
            assert error_of(await controller.handle_alter_partition(fenced)) == (
                ErrorCode.fenced_leader_epoch
            )
            not_leader = alter_request(2, c.epochs, topic_id, current, [2])
            assert error_of(await controller.handle_alter_partition(not_leader)) == (
                ErrorCode.not_leader_or_follower
            )
            await c.kill(3)
            await wait_for(lambda: 3 not in controller.brokers)
            await c.settled(controller)
            current = controller.context.states[("t", 0)]
            expand = alter_request(1, c.epochs, topic_id, current, [1, 2, 3])
            assert error_of(await controller.handle_alter_partition(expand)) == (
                ErrorCode.ineligible_replica
            )
            assert (await c.states("t", 1))[0].isr == [1, 2]
            # Version 2 names the ISR without broker epochs.
            v2 = alter_v2.AlterPartitionRequest(
                broker_id=i32(1),
                broker_epoch=i64(c.epochs[1]),
                topics=(
                    alter_v2.TopicData(
                        topic_id=topic_id,
                        partitions=(
                            alter_v2.PartitionData(
                                partition_index=i32(0),
                                leader_epoch=i32(current.leader_epoch),
                                new_isr=(i32(1),),
                                partition_epoch=i32(current.partition_epoch),
                            ),
                        ),
                    ),
                ),
            )
            response = await controller.handle_alter_partition(v2)
            assert type(response).__version__ == 2
            assert list(response.topics[0].partitions[0].isr) == [1]
            assert (await c.states("t", 1))[0].isr == [1]

    run(body)


def error_of(response: Any) -> ErrorCode:
    assert response.error_code == ErrorCode.none
    return response.topics[0].partitions[0].error_code


# --- controlled shutdown, preferred leaders ----------------------------------------------


def test_controlled_shutdown_moves_leadership_and_shrinks_isrs(connect: str) -> None:
    async def body() -> None:
        async with cluster(connect, 1, 2, 3) as c:
            controller = await c.active()
            await wait_for(lambda: len(controller.brokers) == 3)
            assignment = assign_replicas({1: None, 2: None, 3: None}, 9, 3, start_index=0)
            assignment[9] = [3]  # a single replica cannot move
            await c.create_topic("t", assignment)
            await wait_for(lambda: len(controller.context.states) == 10)
            await c.settled(controller)
            since = time.monotonic()
            remaining = await controller.handle_controlled_shutdown(3, c.epochs[3])
            assert remaining == []
            states = await c.states("t", 10)
            for p in range(9):
                assert states[p].leader != 3 and 3 not in states[p].isr
            assert states[9].leader == 3
            stops = {}
            for r in c.brokers.of(StopReplicaRequest, 3, since):
                stops.update(partitions_in(r))
            followed = {("t", p) for p, r in assignment.items() if 3 in r[1:]}
            assert set(stops) == followed
            assert not any(s.delete_partition for s in stops.values())
            # The partitions it led were moved: it is told it follows them now.
            led = {("t", p) for p, r in assignment.items() if r[0] == 3 and len(r) > 1}
            told = {}
            for r in c.brokers.of(LeaderAndIsrRequest, 3, since):
                told.update(partitions_in(r))
            assert set(told) == led and all(s.leader != 3 for s in told.values())
            # Stale broker epoch, and an unknown broker.
            with pytest.raises(Exception) as e:
                await controller.handle_controlled_shutdown(3, c.epochs[3] - 1)
            assert e.value.code == ErrorCode.stale_broker_epoch
            with pytest.raises(Exception) as e:
                await controller.handle_controlled_shutdown(7, -1)
            assert e.value.code == ErrorCode.broker_not_available

    run(body)


def test_preferred_leaders_return(connect: str) -> None:
    async def body() -> None:
        # The imbalance check every 0.1 s instead of 300 s.
        config = ControllerConfig(
            leader_imbalance_check_interval_s=0.1, first_imbalance_check_s=0.1
        )
        async with cluster(connect, 1, 2, config=config) as c:
            controller = await c.active()
            await wait_for(lambda: len(controller.brokers) == 2)
            topic_id = await c.create_topic("t", {0: [2, 1], 1: [1, 2]})
            await wait_for(lambda: len(controller.context.states) == 2)
            await c.kill(2)
            await wait_for(lambda: 2 not in controller.brokers)
            await c.start_broker(2, config)
            await wait_for(lambda: 2 in controller.brokers)
            await c.settled(controller)
            state = controller.context.states[("t", 0)]
            assert state.leader == 1 and state.isr == [1]
            results = await controller.elect_leaders(
                ElectionType.PREFERRED, [("t", 0), ("t", 1), ("u", 0)]
            )
            assert results[("t", 0)][0] == ErrorCode.preferred_leader_not_available
            assert results[("t", 1)][0] == ErrorCode.election_not_needed
            assert results[("u", 0)][0] == ErrorCode.unknown_topic_or_partition
            # Broker 2 catches up: the leader adds it back to the ISR.
            request = alter_request(1, c.epochs, topic_id, state, [1, 2])
            assert error_of(await controller.handle_alter_partition(request)) == ErrorCode.none

            async def preferred_leads() -> bool:
                return (await c.states("t", 2))[0].leader == 2

            await wait_for(preferred_leads)
            assert (await c.states("t", 2))[1].leader == 1

    run(body)


# --- reassignment ----------------------------------------------------------------------


def test_reassignment_adds_then_removes_replicas(connect: str) -> None:
    async def body() -> None:
        async with cluster(connect, 1, 2, 3) as c:
            controller = await c.active()
            await wait_for(lambda: len(controller.brokers) == 3)
            topic_id = await c.create_topic("t", {0: [1, 2]})
            await wait_for(lambda: ("t", 0) in controller.context.states)
            await c.settled(controller)
            since = time.monotonic()
            results = await controller.alter_partition_reassignments(
                {("t", 0): [2, 3], ("t", 1): [1], ("t", 5): [1]}
            )
            assert results[("t", 0)] == (ErrorCode.none, None)
            assert results[("t", 1)][0] == ErrorCode.unknown_topic_or_partition
            # Phase one: the assignment is targets + origin, the new replica follows.
            ongoing = await controller.list_partition_reassignments(None)
            assert ongoing == {("t", 0): ([2, 3, 1], [3], [1])}
            topic = await c.zk.topic_assignment("t")
            assert topic.partitions == {0: [2, 3, 1]}
            assert (topic.adding_replicas, topic.removing_replicas) == ({0: [3]}, {0: [1]})
            state = controller.context.states[("t", 0)]
            assert (state.leader, state.isr, state.leader_epoch) == (1, [1, 2], 1)
            await c.settled(controller)
            told = partitions_in(c.brokers.of(LeaderAndIsrRequest, 3, since)[-1])[("t", 0)]
            assert (list(told.replicas), list(told.adding_replicas)) == ([2, 3, 1], [3])
            # Broker 3 catches up: the leader adds it to the ISR, which completes the move.
            since = time.monotonic()
            response = await controller.handle_alter_partition(
                alter_request(1, c.epochs, topic_id, state, [1, 2, 3])
            )
            assert error_of(response) == ErrorCode.none
            assert list(response.topics[0].partitions[0].isr) == [1, 2, 3]
            await c.settled(controller)
            state = (await c.states("t", 1))[0]
            assert (state.leader, state.isr, state.leader_epoch) == (2, [2, 3], 2)
            topic = await c.zk.topic_assignment("t")
            assert topic.partitions == {0: [2, 3]} and topic.adding_replicas == {}
            assert await controller.list_partition_reassignments(None) == {}
            [stop] = c.brokers.of(StopReplicaRequest, 1, since)
            assert partitions_in(stop)[("t", 0)].delete_partition

    run(body)


def test_reassignment_cancelled_and_refused(connect: str) -> None:
    async def body() -> None:
        async with cluster(connect, 1, 2, 3) as c:
            controller = await c.active()
            await wait_for(lambda: len(controller.brokers) == 3)
            await c.create_topic("t", {0: [1, 2]})
            await wait_for(lambda: ("t", 0) in controller.context.states)
            results = await controller.alter_partition_reassignments({("t", 0): None})
            assert results[("t", 0)][0] == ErrorCode.no_reassignment_in_progress
            for bad in ([], [1, 1], [1, 7]):
                results = await controller.alter_partition_reassignments({("t", 0): bad})
                assert results[("t", 0)][0] == ErrorCode.invalid_replica_assignment
            await controller.alter_partition_reassignments({("t", 0): [3, 2]})
            assert (await controller.list_partition_reassignments([("t", 0)])) == {
                ("t", 0): ([3, 2, 1], [3], [1])
            }
            await c.settled(controller)
            since = time.monotonic()
            results = await controller.alter_partition_reassignments({("t", 0): None})
            assert results[("t", 0)] == (ErrorCode.none, None)
            assert await controller.list_partition_reassignments(None) == {}
            # Back to the original replicas, in the order they had in the reassignment's
            # assignment (Kafka's originReplicas: replicas less the ones being added).
            assert (await c.zk.topic_assignment("t")).partitions == {0: [2, 1]}
            await c.settled(controller)
            [stop] = c.brokers.of(StopReplicaRequest, 3, since)  # the replica being added
            assert partitions_in(stop)[("t", 0)].delete_partition
            state = (await c.states("t", 1))[0]
            assert (state.leader, state.isr) == (1, [1, 2])

    run(body)


def test_new_controller_resumes_a_reassignment(connect: str) -> None:
    async def body() -> None:
        async with cluster(connect, 1, 2, 3) as c:
            first = await c.active()
            await wait_for(lambda: len(first.brokers) == 3)
            topic_id = await c.create_topic("t", {0: [2, 3]})
            await wait_for(lambda: ("t", 0) in first.context.states)
            await first.alter_partition_reassignments({("t", 0): [3, 2, 1]})
            await c.kill(1)  # broker 1 (the new replica) and the controller go
            second = await c.active()
            await c.settled(second)
            assert await second.list_partition_reassignments(None) == {
                ("t", 0): ([3, 2, 1], [1], [])
            }
            await c.start_broker(1)
            await wait_for(lambda: 1 in second.brokers)
            await c.settled(second)
            state = second.context.states[("t", 0)]
            request = alter_request(state.leader, c.epochs, topic_id, state, [*state.isr, 1])
            assert error_of(await second.handle_alter_partition(request)) == ErrorCode.none
            await c.settled(second)
            assert (await c.zk.topic_assignment("t")).partitions == {0: [3, 2, 1]}
            assert await second.list_partition_reassignments(None) == {}

    run(body)


# --- deletion --------------------------------------------------------------------------


def test_deletion_waits_for_a_replica_that_is_down(connect: str) -> None:
    async def body() -> None:
        async with cluster(connect, 1, 2, 3) as c:
            controller = await c.active()
            await wait_for(lambda: len(controller.brokers) == 3)
            await c.create_topic("t", {0: [1, 2, 3], 1: [2, 3, 1]})
            await wait_for(lambda: len(controller.context.states) == 2)
            await c.kill(3)
            await wait_for(lambda: 3 not in controller.brokers)
            await c.settled(controller)  # the ISR shrink's UpdateMetadata goes before `since`
            since = time.monotonic()
            await c.zk.mark_for_deletion("t")
            await wait_for(lambda: len(c.brokers.of(StopReplicaRequest, None, since)) == 2)
            await c.settled(controller)
            for broker in (1, 2):
                [stop] = c.brokers.of(StopReplicaRequest, broker, since)
                assert set(partitions_in(stop)) == {("t", 0), ("t", 1)}
                assert all(p.delete_partition for p in partitions_in(stop).values())
                [um] = c.brokers.of(UpdateMetadataRequest, broker, since)[:1]
                assert {s.leader for s in partitions_in(um).values()} == {-2}
            # Broker 3's replicas are not deleted yet: the topic stays.
            assert await c.zk.topic_assignment("t") is not None
            assert await c.zk.topics_to_delete() == ["t"]
            await c.start_broker(3)

            async def gone() -> bool:
                return await c.zk.topic_assignment("t") is None

            await wait_for(gone)
            [stop] = c.brokers.of(StopReplicaRequest, 3, since)
            assert set(partitions_in(stop)) == {("t", 0), ("t", 1)}
            assert await c.zk.topics_to_delete() == []
            assert await c.zk.topic_names() == []
            await c.settled(controller)
            assert controller.context.assignments == {}

    run(body)


# --- failover --------------------------------------------------------------------------


def test_second_controller_takes_over_and_rebuilds_the_same_state(connect: str) -> None:
    async def body() -> None:
        async with cluster(connect, 1, 2, 3) as c:
            first = await c.active()
            await wait_for(lambda: len(first.brokers) == 3)
            assignment = assign_replicas({1: None, 2: None, 3: None}, 12, 3, start_index=1)
            await c.create_topic("t", assignment)
            await wait_for(lambda: len(first.context.states) == 12)
            await c.settled(first)
            topic_id = first.context.topic_ids["t"]
            before = dict(first.context.states)
            since = time.monotonic()
            await c.kill(1)
            second = await c.active()
            assert second.broker_id in (2, 3)
            assert second.context.epoch == 2
            await c.settled(second)
            assert second.context.topic_ids == {"t": topic_id}
            assert second.context.assignments == first_assignments(assignment)
            for tp, s in before.items():
                now = second.context.states[tp]
                if 1 in s.isr:  # broker 1 died with the controller
                    assert 1 not in now.isr and now.leader != 1
                    assert now.leader_epoch == s.leader_epoch + 1
                else:
                    assert now == s
            assert second.context.states == {
                ("t", p): s for p, s in (await c.states("t", 12)).items()
            }
            for broker in (2, 3):
                told = {}
                for r in c.brokers.of(LeaderAndIsrRequest, broker, since):
                    assert r.controller_epoch == 2
                    told.update(partitions_in(r))
                assert set(told) == {("t", p) for p in range(12)}

    run(body)


def first_assignments(assignment: dict[int, list[int]]) -> dict[tuple[str, int], tuple[int, ...]]:
    return {("t", p): tuple(r) for p, r in assignment.items()}


def test_controller_resigns_when_controller_znode_is_no_longer_its_own(connect: str) -> None:
    async def body() -> None:
        async with cluster(connect, 1) as c:
            controller = await c.active()
            await c.settled(controller)
            # Another broker's name in /controller (as after this one lost its session).
            await c.sessions[1].zk.set("/controller", b'{"version":1,"brokerid":9}')
            await wait_for(lambda: not controller.active)
            assert controller._channel is None and controller.context.states == {}
            response = await controller.handle_alter_partition(
                alter.AlterPartitionRequest(broker_id=i32(1), broker_epoch=i64(-1), topics=())
            )
            assert response.error_code == ErrorCode.not_controller
            with pytest.raises(Exception) as e:
                await controller.elect_leaders(ElectionType.PREFERRED, None)
            assert e.value.code == ErrorCode.not_controller

    run(body)


def test_controller_resigns_on_session_loss_and_campaigns_again(
    connect: str, zookeeper: ZooKeeperProcess
) -> None:
    async def body() -> None:
        async with cluster(connect, 1) as c:
            controller = await c.active()
            await c.settled(controller)
            channel = controller._channel
            zk = c.sessions[1].zk
            session_id, _ = zk.client_id
            await asyncio.to_thread(zookeeper.expire_session, zk.client_id)
            await wait_for(lambda: controller.context.epoch == 2 and controller.active)
            assert controller._channel is not channel  # resigned, then a new term
            assert zk.session_id != session_id

    run(body)


# --- scale -----------------------------------------------------------------------------


def test_10000_partitions(connect: str) -> None:
    """10,000 partitions, RF 3 over 3 brokers: a broker's death, its return (the leaders
    add it back to their ISRs), preferred election, its controlled shutdown, and the
    controller's death. Prints how long each took to have every new state written and
    every request handed to `send` (figures, not assertions: the machine is shared)."""

    async def body() -> None:
        async with cluster(connect, 1, 2, 3) as c:
            controller = await c.active()
            await wait_for(lambda: len(controller.brokers) == 3)
            racks = {1: None, 2: None, 3: None}
            for t in range(20):
                await c.create_topic(f"t{t}", assign_replicas(racks, 500, 3))
            await wait_for(lambda: len(controller.context.states) == 10_000)
            await c.settled(controller)
            zk = controller.zk.zk
            report = ["", "10,000 partitions, RF 3, 3 brokers:"]

            def done(what: str, since: float) -> None:
                last_send = max(t for t, _, _ in c.brokers.sent)
                report.append(f"  {what}: {last_send - since:.3f} s")

            # Broker 3 dies: every partition changes (led: re-elected, followed: shrunk).
            multis = zk.multis
            started = time.monotonic()
            await c.kill(3)
            closed = time.monotonic()
            await wait_for(lambda: 3 not in controller.brokers)
            await c.settled(controller)
            done(
                f"broker 3's registration gone (session closed in {closed - started:.3f} s)"
                " -> all re-elected",
                closed,
            )
            assert zk.multis - multis == 10  # 10,000 writes in multis of 1,000
            for broker in (1, 2):
                [lai] = c.brokers.of(LeaderAndIsrRequest, broker, started)
                assert len(partitions_in(lai)) == 10_000
            assert all(3 not in s.isr and s.leader != 3 for s in controller.context.states.values())

            # It returns and catches up: each leader adds it back in one AlterPartition.
            await c.start_broker(3)
            await wait_for(lambda: 3 in controller.brokers)
            await c.settled(controller)
            started = time.monotonic()
            for leader in (1, 2):
                response = await controller.handle_alter_partition(
                    expand_all(controller, c.epochs, leader, 3)
                )
                assert all(
                    p.error_code == ErrorCode.none for t in response.topics for p in t.partitions
                )
            await c.settled(controller)
            done("AlterPartition adding it back to 10,000 ISRs (2 requests)", started)
            assert all(3 in s.isr for s in controller.context.states.values())

            # Preferred leaders return.
            started = time.monotonic()
            results = await controller.elect_leaders(ElectionType.PREFERRED, None)
            await c.settled(controller)
            done("preferred leader election of all partitions", started)
            assert sum(code == ErrorCode.none for code, _ in results.values()) > 3000
            led = sum(s.leader == 3 for s in controller.context.states.values())
            assert led > 3000

            # Controlled shutdown of broker 3, leading a third of them.
            started = time.monotonic()
            remaining = await controller.handle_controlled_shutdown(3, c.epochs[3])
            await c.settled(controller)
            done(f"controlled shutdown of broker 3 (leading {led})", started)
            assert remaining == []

            # The controller (broker 1) dies: broker 2 takes over, rebuilds everything from
            # ZooKeeper and re-elects the partitions broker 1 led.
            started = time.monotonic()
            await c.kill(1)
            closed = time.monotonic()
            successor = await c.active()
            await c.settled(successor)
            done(
                "controller failover: broker 1's session gone -> broker 2 active, all "
                "partitions led by live brokers and every broker told",
                closed,
            )
            [lai] = c.brokers.of(LeaderAndIsrRequest, 2, started)
            assert len(partitions_in(lai)) == 10_000
            assert all(s.leader in (2, 3) for s in successor.context.states.values())
            print("\n".join(report))

    run(body)


def expand_all(
    controller: ZkController, epochs: dict[int, int], leader: int, joining: int
) -> alter.AlterPartitionRequest:
    """One AlterPartition from `leader` adding `joining` to the ISR of every partition it
    leads and `joining` replicates."""
    by_topic: dict[str, list[alter.PartitionData]] = {}
    for (topic, index), s in sorted(controller.context.states.items()):
        if s.leader == leader and joining in controller.context.assignments[(topic, index)]:
            by_topic.setdefault(topic, []).append(
                alter.PartitionData(
                    partition_index=i32(index),
                    leader_epoch=i32(s.leader_epoch),
                    new_isr_with_epochs=tuple(
                        alter.BrokerState(broker_id=i32(b), broker_epoch=i64(epochs[b]))
                        for b in [*s.isr, joining]
                    ),
                    partition_epoch=i32(s.partition_epoch),
                )
            )
    return alter.AlterPartitionRequest(
        broker_id=i32(leader),
        broker_epoch=i64(epochs[leader]),
        topics=tuple(
            alter.TopicData(topic_id=controller.context.topic_ids[t], partitions=tuple(ps))
            for t, ps in by_topic.items()
        ),
    )
