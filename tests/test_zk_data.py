"""The ZooKeeper layer against a real ZooKeeper server: the process, AsyncZk and KafkaZk.

Each test works under its own chroot (``<connect>/<test name>``), so tests sharing the
module's server never see each other's znodes.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.paths import _prefix_root

from gregor.controller.zookeeper.client import (
    AsyncZk,
    EventType,
    SessionState,
    WatchedEvent,
    ZkConnectTimeout,
)
from gregor.controller.zookeeper.data import (
    BrokerIdInUseError,
    BrokerRegistration,
    ControllerMovedError,
    KafkaZk,
    PartitionState,
    StateConflict,
    TopicAssignment,
    TopicExistsError,
    decode_uuid,
    partition_state_path,
    random_uuid,
)
from gregor.server.harness.zookeeper import ZooKeeperProcess, four_letter_word

pytest_plugins = ["tests.zookeeper_fixture"]

# Generous: the machine is shared; a watch or a session change normally takes milliseconds.
WAIT_S = 30.0


@pytest.fixture
def connect(zookeeper: ZooKeeperProcess, request: pytest.FixtureRequest) -> str:
    """The server's connect string with a chroot private to this test."""
    return f"{zookeeper.connect}/{re.sub(r'[^A-Za-z0-9_-]', '_', request.node.name)}"


@asynccontextmanager
async def kafka_zk(connect: str, session_timeout_ms: int = 10000) -> AsyncIterator[KafkaZk]:
    zk = AsyncZk(connect, session_timeout_ms)
    await zk.start()
    try:
        kzk = KafkaZk(zk)
        await kzk.ensure_paths()
        yield kzk
    finally:
        await zk.close()


class Recorder:
    """A watch or state listener that records what it got and on which thread."""

    def __init__(self) -> None:
        self.items: list[object] = []
        self.threads: set[int] = set()
        self._changed = asyncio.Event()

    def __call__(self, item: object) -> None:
        self.items.append(item)
        self.threads.add(threading.get_ident())
        self._changed.set()

    async def wait_for(self, predicate: Callable[[list[object]], bool]) -> None:
        async with asyncio.timeout(WAIT_S):
            while not predicate(self.items):
                self._changed.clear()
                await self._changed.wait()


def broker(broker_id: int, port: int = 9092, rack: str | None = None) -> BrokerRegistration:
    return BrokerRegistration(
        broker_id,
        {"PLAINTEXT": ("127.0.0.1", port), "REPLICATION": ("::1", port + 1)},
        {"PLAINTEXT": "PLAINTEXT", "REPLICATION": "PLAINTEXT"},
        rack,
    )


def run(body: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(body())


def raw_get(zookeeper: ZooKeeperProcess, path: str) -> bytes | None:
    """Read a znode with a plain kazoo client (the whole tree, chroot included)."""
    client = KazooClient(hosts=zookeeper.connect, timeout=10)
    client.start(timeout=15)
    try:
        return client.get(path)[0] if client.exists(path) else None
    finally:
        client.stop()
        client.close()


def test_zookeeper_process_serves_and_keeps_its_data_across_restart(
    zookeeper: ZooKeeperProcess,
) -> None:
    client = KazooClient(hosts=zookeeper.connect, timeout=10)
    client.start(timeout=15)
    try:
        client.create("/restart-probe", b"kept", makepath=True)
    finally:
        client.stop()
        client.close()
    zookeeper.restart()
    assert four_letter_word(zookeeper.port, "ruok") == "imok"
    assert raw_get(zookeeper, "/restart-probe") == b"kept"
    assert "binding to port" in zookeeper.log_path.read_text()


def test_connect_times_out_without_a_server() -> None:
    async def body() -> None:
        with socket.socket() as unused:
            unused.bind(("127.0.0.1", 0))
            port = unused.getsockname()[1]
        zk = AsyncZk(f"127.0.0.1:{port}", session_timeout_ms=4000, connection_timeout_ms=1000)
        with pytest.raises(ZkConnectTimeout, match="1000 ms"):
            await zk.start()

    run(body)


def test_a_multi_too_large_for_jute_maxbuffer_is_refused_before_sending(connect: str) -> None:
    async def body() -> None:
        async with kafka_zk(connect) as kzk:
            tx = kzk.zk.transaction()
            for i in range(1100):
                tx.create(f"/big-{i}", b"x" * 1000)
            with pytest.raises(ValueError, match="split it"):
                await tx.commit()
            assert await kzk.zk.exists("/big-0") is None

    run(body)


def test_cluster_id_created_once_in_kafkas_format(
    zookeeper: ZooKeeperProcess, connect: str
) -> None:
    async def body() -> None:
        async with kafka_zk(connect) as a, kafka_zk(connect) as b:
            ids = await asyncio.gather(a.cluster_id(), b.cluster_id(), a.cluster_id())
            assert len(set(ids)) == 1
            assert len(ids[0]) == 22
            decode_uuid(ids[0])
            return ids[0]

    cluster_id = asyncio.run(body())
    chroot = connect.partition("/")[2]
    raw = json.loads(raw_get(zookeeper, f"/{chroot}/cluster/id"))
    assert raw == {"version": "1", "id": cluster_id}


def test_register_broker_json_epoch_and_chroot(zookeeper: ZooKeeperProcess, connect: str) -> None:
    chroot = connect.partition("/")[2]

    async def body() -> None:
        async with kafka_zk(connect) as kzk:
            registered = await kzk.register_broker(broker(1, 9092, rack="r1"))
            assert registered.epoch > 0
            _, stat = await kzk.zk.get("/brokers/ids/1")
            assert registered.epoch == stat.czxid
            assert stat.ephemeralOwner == kzk.zk.session_id
            assert await kzk.brokers() == {1: registered}
            raw = json.loads(raw_get(zookeeper, f"/{chroot}/brokers/ids/1"))
            assert raw["version"] == 5
            assert (raw["host"], raw["port"]) == ("127.0.0.1", 9092)
            assert raw["endpoints"] == ["PLAINTEXT://127.0.0.1:9092", "REPLICATION://[::1]:9093"]
            assert raw["listener_security_protocol_map"] == {
                "PLAINTEXT": "PLAINTEXT",
                "REPLICATION": "PLAINTEXT",
            }
            assert raw["rack"] == "r1" and raw["jmx_port"] == -1 and raw["features"] == {}
            assert abs(int(raw["timestamp"]) - time.time() * 1000) < 600_000
            # a second broker registered later has a later epoch
            second = await kzk.register_broker(broker(2, 9192))
            assert second.epoch > registered.epoch
            assert sorted(await kzk.brokers()) == [1, 2]

    run(body)


def test_duplicate_broker_id_refused_until_the_first_session_ends(connect: str) -> None:
    async def body() -> None:
        async with kafka_zk(connect) as second:
            first = KafkaZk(AsyncZk(connect, 10000))
            await first.zk.start()
            await first.register_broker(broker(7, 9092))
            with pytest.raises(BrokerIdInUseError) as refused:
                await second.register_broker(broker(7, 9999))
            message = str(refused.value)
            assert "broker id 7" in message and "127.0.0.1:9092" in message
            # the first broker is untouched
            assert (await second.brokers())[7].endpoints["PLAINTEXT"] == ("127.0.0.1", 9092)
            # closing the session removes its ephemeral registration at once
            await first.zk.close()
            assert await second.brokers() == {}
            taken_over = await second.register_broker(broker(7, 9999))
            assert (await second.brokers())[7] == taken_over
            assert taken_over.endpoints["PLAINTEXT"] == ("127.0.0.1", 9999)

    run(body)


def test_broker_watch_fires_on_the_loop_thread(connect: str) -> None:
    async def body() -> None:
        async with kafka_zk(connect) as watcher, kafka_zk(connect) as other:
            loop_thread = threading.get_ident()
            changes = Recorder()
            assert await watcher.brokers(watch=changes) == {}
            await other.register_broker(broker(3))
            await changes.wait_for(lambda items: len(items) == 1)
            event = changes.items[0]
            assert isinstance(event, WatchedEvent) and event.type == EventType.CHILD
            assert changes.threads == {loop_thread}
            assert list(await watcher.brokers()) == [3]

    run(body)


def test_a_watch_set_twice_before_it_fires_is_called_once(connect: str) -> None:
    async def body() -> None:
        async with kafka_zk(connect) as watcher, kafka_zk(connect) as other:
            changes = Recorder()
            await watcher.brokers(watch=changes)
            await watcher.brokers(watch=changes)  # as a controller re-reading on an event
            await other.register_broker(broker(3))
            await changes.wait_for(lambda items: len(items) >= 1)
            # kazoo delivers events in order: once a later event is seen, a duplicate of
            # the first would have been delivered before it.
            later = Recorder()
            await watcher.brokers(watch=later)
            await other.register_broker(broker(4))
            await later.wait_for(lambda items: len(items) == 1)
            assert len(changes.items) == 1

    run(body)


def test_controller_election_one_winner_then_failover_with_the_next_epoch(connect: str) -> None:
    async def body() -> None:
        async with kafka_zk(connect) as observer:
            a = KafkaZk(AsyncZk(connect, 10000))
            b = KafkaZk(AsyncZk(connect, 10000))
            await asyncio.gather(a.zk.start(), b.zk.start())
            won = await asyncio.gather(a.elect_controller(1), b.elect_controller(2))
            winners = [w for w in won if w is not None]
            assert len(winners) == 1 and winners[0].epoch == 1
            winner_id, winner, loser, loser_id = (
                (1, a, b, 2) if won[0] is not None else (2, b, a, 1)
            )
            assert await observer.controller_id() == winner_id
            assert await observer.controller_epoch() == winners[0]
            # campaigning again while the winner lives changes nothing
            assert await loser.elect_controller(loser_id) is None
            assert await winner.elect_controller(winner_id) == winners[0]
            # the winner's session ends: the loser's watch fires and it wins epoch 2
            moved = Recorder()
            assert await loser.controller_id(watch=moved) == winner_id
            await winner.zk.close()
            await moved.wait_for(lambda items: bool(items))
            assert await loser.controller_id() is None
            second = await loser.elect_controller(loser_id)
            assert second is not None
            assert second.epoch == 2 and second.zk_version == winners[0].zk_version + 1
            assert await observer.controller_id() == loser_id
            await loser.zk.close()

    run(body)


async def make_topic(kzk: KafkaZk, name: str, partitions: int, epoch_version: int) -> dict:
    assignment = TopicAssignment(name, random_uuid(), {p: [1, 2, 3] for p in range(partitions)})
    await kzk.create_topic(assignment, {"cleanup.policy": "compact"})
    states = {(name, p): PartitionState(1, 0, [1, 2, 3], 1) for p in range(partitions)}
    return await kzk.create_partition_states(states, epoch_version)


def test_a_zombie_controller_is_fenced(connect: str) -> None:
    async def body() -> None:
        async with kafka_zk(connect) as old, kafka_zk(connect) as new:
            old_epoch = await old.elect_controller(1)
            assert old_epoch is not None
            created = await make_topic(old, "fenced", 2, old_epoch.zk_version)
            # the old controller loses /controller (as if its session had expired) while its
            # process lives on, and a new controller is elected
            await new.zk.delete("/controller")
            new_epoch = await new.elect_controller(2)
            assert new_epoch is not None and new_epoch.epoch == old_epoch.epoch + 1
            stale = {
                tp: PartitionState(3, 1, [3], old_epoch.epoch, 0, s.partition_epoch)
                for tp, s in created.items()
            }
            with pytest.raises(ControllerMovedError):
                await old.write_partition_states(stale, old_epoch.zk_version)
            with pytest.raises(ControllerMovedError):
                await old.delete_topic("fenced", old_epoch.zk_version)
            with pytest.raises(ControllerMovedError):
                await old.resign_controller(old_epoch.zk_version)
            assert await new.partition_states(created) == created
            assert await new.controller_id() == 2
            # the new controller's writes go through
            fresh = {tp: PartitionState(2, 1, [2], new_epoch.epoch, 0, 0) for tp in created}
            written = await new.write_partition_states(fresh, new_epoch.zk_version)
            assert all(s.partition_epoch == 1 for s in written.values())
            await new.resign_controller(new_epoch.zk_version)
            assert await old.controller_id() is None

    run(body)


def test_conditional_partition_state_writes(zookeeper: ZooKeeperProcess, connect: str) -> None:
    chroot = connect.partition("/")[2]

    async def body() -> None:
        async with kafka_zk(connect) as kzk:
            epoch = await kzk.elect_controller(1)
            assert epoch is not None
            created = await make_topic(kzk, "states", 3, epoch.zk_version)
            assert created == {
                ("states", p): PartitionState(1, 0, [1, 2, 3], 1, 0, 0) for p in range(3)
            }
            raw = json.loads(raw_get(zookeeper, f"/{chroot}{partition_state_path('states', 0)}"))
            assert raw == {
                "controller_epoch": 1,
                "leader": 1,
                "version": 1,
                "leader_epoch": 0,
                "isr": [1, 2, 3],
                "leader_recovery_state": 0,
            }
            # creating again: the existing state comes back as a conflict
            again = await kzk.create_partition_states(
                {("states", 0): PartitionState(9, 9, [9], 1)}, epoch.zk_version
            )
            assert again == {("states", 0): StateConflict(created[("states", 0)])}
            # shrink the ISR of partition 0 (a leader's AlterPartition)
            shrunk = PartitionState(1, 0, [1, 2], 1, 0, 0)
            first = await kzk.write_partition_states({("states", 0): shrunk}, epoch.zk_version)
            assert first == {("states", 0): PartitionState(1, 0, [1, 2], 1, 0, 1)}
            # a batch with one stale partition epoch: the others are written, it conflicts
            batch = {
                ("states", 0): PartitionState(2, 1, [2], 1, 0, 0),  # stale: now 1
                ("states", 1): PartitionState(2, 1, [2, 3], 1, 0, 0),
                ("states", 2): PartitionState(3, 1, [3], 1, 0, 0),
            }
            result = await kzk.write_partition_states(batch, epoch.zk_version)
            assert result[("states", 0)] == StateConflict(first[("states", 0)])
            assert result[("states", 1)] == PartitionState(2, 1, [2, 3], 1, 0, 1)
            assert result[("states", 2)] == PartitionState(3, 1, [3], 1, 0, 1)
            assert await kzk.partition_states(batch) == {
                ("states", 0): first[("states", 0)],
                ("states", 1): result[("states", 1)],
                ("states", 2): result[("states", 2)],
            }
            # a partition whose state znode does not exist conflicts with None
            missing = await kzk.write_partition_states(
                {("states", 7): PartitionState(1, 0, [1], 1)}, epoch.zk_version
            )
            assert missing == {("states", 7): StateConflict(None)}
            # so does creating the state of a topic that does not exist (deleted meanwhile)
            orphan = await kzk.create_partition_states(
                {("gone", 0): PartitionState(1, 0, [1], 1), ("states", 3): created[("states", 0)]},
                epoch.zk_version,
            )
            assert orphan == {
                ("gone", 0): StateConflict(None),
                ("states", 3): created[("states", 0)],
            }
            assert await kzk.topic_names() == ["states"]

    run(body)


def test_topics_configs_and_deletion(connect: str) -> None:
    async def body() -> None:
        async with kafka_zk(connect) as controller, kafka_zk(connect) as broker_side:
            epoch = await controller.elect_controller(1)
            assert epoch is not None
            topics_changed = Recorder()
            assert await controller.topic_assignments(watch=topics_changed) == {}
            assignment = TopicAssignment(
                "orders", uuid.uuid4(), {0: [1, 2], 1: [2, 1]}, adding_replicas={1: [3]}
            )
            await broker_side.create_topic(assignment, {"retention.ms": "1000"})
            await topics_changed.wait_for(lambda items: bool(items))
            assert topics_changed.threads == {threading.get_ident()}
            assert await controller.topic_assignments() == {"orders": assignment}
            assert await controller.topic_configs("orders") == {"retention.ms": "1000"}
            data, _ = await controller.zk.get("/brokers/topics/orders")
            raw = json.loads(data)
            assert list(raw) == [
                "version",
                "topic_id",
                "partitions",
                "adding_replicas",
                "removing_replicas",
            ]
            assert raw["partitions"] == {"0": [1, 2], "1": [2, 1]}
            assert raw["adding_replicas"] == {"1": [3]} and raw["removing_replicas"] == {}
            assert decode_uuid(raw["topic_id"]) == assignment.topic_id
            with pytest.raises(TopicExistsError):
                await broker_side.create_topic(assignment, {})
            # the controller adds a partition; a watch on the topic sees it
            grown = Recorder()
            assert await broker_side.topic_assignment("orders", watch=grown) == assignment
            bigger = TopicAssignment("orders", assignment.topic_id, {0: [1, 2], 1: [2, 1], 2: [1]})
            await controller.set_topic_assignment(bigger, epoch.zk_version)
            await grown.wait_for(lambda items: bool(items))
            assert await broker_side.topic_assignment("orders") == bigger
            await controller.create_partition_states(
                {("orders", p): PartitionState(1, 0, [1, 2], 1) for p in (0, 1, 2)},
                epoch.zk_version,
            )
            # deletion: marked by a broker, seen by the controller, znodes removed
            marked = Recorder()
            assert await controller.topics_to_delete(watch=marked) == []
            await broker_side.mark_for_deletion("orders")
            await marked.wait_for(lambda items: bool(items))
            assert await controller.topics_to_delete() == ["orders"]
            await controller.delete_topic("orders", epoch.zk_version)
            assert await controller.topic_names() == []
            assert await controller.topics_to_delete() == []
            assert await controller.topic_configs("orders") == {}
            assert await controller.partition_states([("orders", p) for p in range(3)]) == {}
            # the name is free again
            await broker_side.create_topic(assignment, {})
            assert await controller.topic_configs("orders") == {}

    run(body)


def test_producer_id_blocks_never_overlap(connect: str) -> None:
    async def body() -> None:
        async with kafka_zk(connect) as a, kafka_zk(connect) as b:
            blocks = await asyncio.gather(
                *(a.allocate_producer_ids(1) for _ in range(15)),
                *(b.allocate_producer_ids(2) for _ in range(15)),
            )
            assert {blk.broker_id for blk in blocks[:15]} == {1}
            ranges = sorted((blk.first, blk.last) for blk in blocks)
            assert ranges == [(i * 1000, i * 1000 + 999) for i in range(30)]
            data, _ = await a.zk.get("/latest_producer_id_block")
            raw = json.loads(data)
            assert raw["version"] == 1 and raw["broker"] in (1, 2)
            assert (raw["block_start"], raw["block_end"]) == ("29000", "29999")

    run(body)


def test_a_short_zookeeper_pause_suspends_but_keeps_the_session(
    zookeeper: ZooKeeperProcess, connect: str
) -> None:
    # kazoo pings every third of the session timeout and drops the connection when a ping
    # is still unanswered at the next one: SUSPENDED comes at most 2/3 of the timeout after
    # the last ping ZooKeeper heard, which leaves a third (3 s; reconnect attempts are at
    # most 1 s apart) to resume it before the session could expire.
    session_timeout_ms = 9000

    async def body() -> None:
        async with kafka_zk(connect, session_timeout_ms) as kzk:
            states = Recorder()
            kzk.zk.add_state_listener(states)
            registered = await kzk.register_broker(broker(4))
            session = kzk.zk.session_id
            zookeeper.pause()
            try:
                await states.wait_for(lambda items: SessionState.SUSPENDED in items)
            finally:
                zookeeper.resume()
            await states.wait_for(lambda items: items[-1] == SessionState.CONNECTED)
            assert SessionState.LOST not in states.items
            assert kzk.zk.session_id == session
            assert await kzk.brokers() == {4: registered}

    run(body)


def test_session_loss_is_seen_and_the_broker_registers_again(
    zookeeper: ZooKeeperProcess, connect: str
) -> None:
    async def body() -> None:
        async with kafka_zk(connect, 4000) as kzk, kafka_zk(connect) as observer:
            states = Recorder()
            kzk.zk.add_state_listener(states)
            registered = await kzk.register_broker(broker(5))
            old_session = kzk.zk.session_id
            await asyncio.to_thread(zookeeper.expire_session, kzk.zk.client_id)
            await states.wait_for(
                lambda items: SessionState.LOST in items and items[-1] == SessionState.CONNECTED
            )
            assert states.threads == {threading.get_ident()}
            assert kzk.zk.session_id not in (None, old_session)
            # the ephemeral registration died with the session; registering again works
            assert await observer.brokers() == {}
            again = await kzk.register_broker(broker(5))
            assert again.epoch > registered.epoch
            assert await observer.brokers() == {5: again}

    run(body)


def test_ten_thousand_partition_states_written_and_read_back(connect: str) -> None:
    """A measurement (printed; run with -s) more than a test; the bound is only a guard."""
    topics, per_topic = 100, 100

    async def body() -> None:
        async with kafka_zk(connect, 30000) as kzk:
            epoch = await kzk.elect_controller(1)
            assert epoch is not None
            replicas = {p: [1, 2, 3] for p in range(per_topic)}
            await asyncio.gather(
                *(
                    kzk.create_topic(TopicAssignment(f"t{t}", random_uuid(), replicas), {})
                    for t in range(topics)
                )
            )
            start = time.perf_counter()
            initial = {
                (f"t{t}", p): PartitionState(1, 0, [1, 2, 3], 1)
                for t in range(topics)
                for p in range(per_topic)
            }
            created = await kzk.create_partition_states(initial, epoch.zk_version)
            create_s = time.perf_counter() - start
            start = time.perf_counter()
            moved = {tp: PartitionState(2, 1, [2, 3], 1, 0, 0) for tp in created}
            written = await kzk.write_partition_states(moved, epoch.zk_version)
            write_s = time.perf_counter() - start
            start = time.perf_counter()
            read = await kzk.partition_states(initial)
            read_s = time.perf_counter() - start
            assert read == written
            assert all(s.partition_epoch == 1 for s in read.values()) and len(read) == 10_000
            print(
                f"\n10,000 partition states: create {create_s:.2f} s (partition znodes "
                f"included), conditional write {write_s:.2f} s, read back {read_s:.2f} s"
            )
            # Seconds on a shared 2-core machine; the guard only catches pathologies.
            assert create_s + write_s + read_s < 180

    run(body)


def test_entity_configs_with_change_notifications_as_kafka_writes_them(connect: str) -> None:
    async def body() -> None:
        async with kafka_zk(connect) as kzk:
            await kzk.set_entity_configs("brokers/<default>", {"log.retention.ms": "1"})
            await kzk.set_entity_configs("topics/t", {"retention.ms": "2"})
            await kzk.set_entity_configs("topics/t", {"retention.ms": "3"})
            assert await kzk.entity_configs("topics/t") == {"retention.ms": "3"}
            data, _ = await kzk.zk.get("/config/brokers/<default>")
            assert json.loads(data) == {"version": 1, "config": {"log.retention.ms": "1"}}
            changes = await kzk.config_changes()
            assert [s for s, _ in changes] == sorted(s for s, _ in changes)
            assert [await kzk.config_change(n) for _, n in changes] == [
                "brokers/<default>",
                "topics/t",
                "topics/t",
            ]
            await kzk.purge_config_changes(older_than_ms=0)  # none that old
            assert len(await kzk.config_changes()) == 3
            await kzk.purge_config_changes(older_than_ms=int(time.time() * 1000) + 60_000)
            assert await kzk.config_changes() == []

            # Client quota entities: the same writer, and one read of them all.
            await kzk.set_entity_configs("clients/c", {"producer_byte_rate": "1024"})
            await kzk.set_entity_configs("users/u/clients/<default>", {"request_percentage": "5"})
            await kzk.zk.create("/config/users/bad", b"{not json")
            assert await kzk.quota_entity_configs() == {
                "clients/c": {"producer_byte_rate": "1024"},
                "users/u": {},
                "users/bad": {},
                "users/u/clients/<default>": {"request_percentage": "5"},
            }
            assert [await kzk.config_change(n) for _, n in await kzk.config_changes()] == [
                "clients/c",
                "users/u/clients/<default>",
            ]

    asyncio.run(body())


def test_requests_outstanding_at_once_stay_within_max_in_flight(connect: str) -> None:
    """zookeeper.max.in.flight.requests: the controller's write of 10,000 partition states
    (ten multis) and reads issued beside it never have more than the bound at the server."""
    bound = 3

    async def body() -> None:
        zk = AsyncZk(connect, 30000, max_in_flight=bound)
        await zk.start()
        outstanding, peak = 0, 0
        counting = threading.Lock()  # sent on the loop, answered on kazoo's thread
        # Answers are held until `bound` requests are out: the loop is free meanwhile to send
        # all twenty, were they not bounded (a fast server otherwise answers the first before
        # the third goes out, and the peak says nothing).
        reached = threading.Event()
        send = zk._client._call  # kazoo queues each request to the server here

        def counted(request: object, result: Any) -> object:
            nonlocal outstanding, peak
            with counting:
                outstanding += 1
                peak = max(peak, outstanding)
                if outstanding >= bound:
                    reached.set()

            def answered(_: object) -> None:
                nonlocal outstanding
                reached.wait(10)
                with counting:
                    outstanding -= 1

            result.rawlink(answered)
            return send(request, result)

        try:
            kzk = KafkaZk(zk)
            await kzk.ensure_paths()
            epoch = await kzk.elect_controller(1)
            assert epoch is not None
            replicas = {p: [1, 2, 3] for p in range(1000)}
            names = [f"t{t}" for t in range(10)]
            for name in names:
                await kzk.create_topic(TopicAssignment(name, random_uuid(), replicas), {})
            states = {(n, p): PartitionState(1, 0, [1, 2, 3], 1) for n in names for p in replicas}
            zk._client._call = counted
            created, *reads = await asyncio.gather(
                kzk.create_partition_states(states, epoch.zk_version),
                *(zk.exists(f"/brokers/topics/{n}") for n in names),
            )
            assert len(created) == 10_000 and all(reads)
            assert peak == bound
        finally:
            zk._client._call = send
            await zk.close()

    run(body)


@pytest.mark.parametrize("connect", ["h:2181", "h:2181/", "h:1/kafka", "h:1/kafka/", "h:1,h:2/a/b"])
def test_a_chrooted_path_is_the_one_kazoo_would_send(connect: str) -> None:
    """``AsyncZk.chrooted`` skips kazoo's normalising for normal absolute paths only."""
    zk = AsyncZk(connect)
    paths = [
        "/",
        "/brokers/topics/t/partitions/0/state",
        "/a//b",
        "/a/b/",
        "a/b",
        "/x/.y",
        "/u%2Fx",
    ]
    for path in paths:
        assert zk.chrooted(path) == _prefix_root(zk._client.chroot, path), path
