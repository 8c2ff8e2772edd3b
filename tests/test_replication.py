"""Replication between ReplicaManagers in one event loop, over real wire bytes.

Each node has its own LogManager and ReplicaManager. A follower's fetcher sends through
``Cluster.send``, which encodes the request with wire.schema, hands the frame to the
leader's real request dispatcher (the fetch and OffsetForLeaderEpoch handlers a broker
process runs), reads the file regions of the answer and decodes the response bytes. The
controller's part is played by the test: it hands out LeaderAndIsr states and commits
AlterPartition requests as the ZooKeeper controller would (conditional on the leader and
partition epochs).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import re
import struct
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from gregor.apis.context import Services, nested
from gregor.apis.dispatch import Dispatcher
from gregor.controller.metadata.cache import MetadataCache, PartitionInfo, TopicInfo
from gregor.log import LogManager
from gregor.replica.fetch_session import FetchSessions
from gregor.replica.manager import LEADER_AND_ISR_SLICE, ReplicaManager
from gregor.replica.partition import Partition
from gregor.replica.state import CommittedIsr, IsrProposal, LeaderAndIsrState, StopReplicaState
from gregor.server.config import BrokerConfig
from gregor.server.quotas import ClientQuotas
from gregor.wire.headers import skip_tagged_fields
from gregor.wire.records import build_batch
from gregor.wire.schema import decode, is_flexible, request_type, response_type
from gregor.wire.versions import API_VERSIONS, FETCH, OFFSET_FOR_LEADER_EPOCH, PRODUCE
from tests.kafka_wire import request_frame

TOPIC = "t"
TOPIC_ID = uuid.uuid4()
DEADLINE_S = 20.0  # generous: the machine is shared; conditions normally hold in ms


class Channel:
    """The connection a dispatched request came in on: collects the answer's bytes."""

    peer = "in-process"
    listener = "PLAINTEXT"
    principal = "User:ANONYMOUS"

    def __init__(self, answer: asyncio.Future[bytes]) -> None:
        self._answer = answer

    def send(self, parts: list[Any], size: int) -> None:
        if self._answer.done():
            return
        try:  # a region's file may be closed by now when the test is ending
            data = b"".join(
                p if isinstance(p, bytes) else os.pread(p.fd, p.size, p.position) for p in parts
            )
        except OSError as e:
            self._answer.set_exception(ConnectionError(f"sending failed: {e}"))
            return
        assert len(data) == size
        self._answer.set_result(data)

    def done(self) -> None:
        pass

    def close(self) -> None:
        if not self._answer.done():
            self._answer.set_exception(ConnectionError("closed by the broker"))


class Node:
    def __init__(self, cluster: Cluster, broker_id: int, directory: Path) -> None:
        self.broker_id = broker_id
        props = {"broker.id": str(broker_id), "log.dirs": str(directory), **cluster.props}
        self.logs = LogManager([directory], props)
        self.logs.startup(0)
        self.replicas = ReplicaManager(
            broker_id,
            self.logs,
            props,
            send=cluster.send_from(broker_id),
            alter_partition=cluster.alter_partition,
            now_ms=cluster.now_ms,
        )
        metadata = MetadataCache("cluster", 0)
        metadata.put_topic(
            TopicInfo(TOPIC, TOPIC_ID, {0: PartitionInfo(0, 0, 0, [0, 1, 2], [0, 1, 2])})
        )
        self.replicas.metadata = metadata
        services = Services(
            BrokerConfig(props),
            metadata,
            None,  # type: ignore[arg-type]
            self.replicas,
            cluster.now_ms,
            ClientQuotas(11, 1),
        )
        self.dispatcher = Dispatcher(services)
        self.up = True
        self._correlation = 0

    @property
    def partition(self) -> Partition:
        partition = self.replicas.get(TOPIC, 0)
        assert partition is not None
        return partition

    def log_bytes(self) -> bytes:
        """The partition's segment files, in order. Where segments roll may differ between
        replicas (a truncated follower keeps its own rolls, as in Kafka); the bytes not."""
        directory = self.partition.log.directory
        return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))

    async def call(self, api_key: int, version: int, request: Any) -> Any:
        """One request through this node's dispatcher, as bytes both ways."""
        self._correlation += 1
        correlation = self._correlation
        frame = request_frame(api_key, version, correlation, request)[4:]
        answer: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self.dispatcher(Channel(answer), frame)  # type: ignore[arg-type]
        data = await answer
        assert struct.unpack_from(">i", data)[0] == correlation
        pos = 4
        if is_flexible(api_key, version) and api_key != API_VERSIONS:
            pos = skip_tagged_fields(data, pos)
        return decode(response_type(api_key, version), data, pos)


class Cluster:
    def __init__(self, tmp: Path, size: int, props: dict[str, str]) -> None:
        self.props = {"replica.fetch.wait.max.ms": "100", "replica.fetch.backoff.ms": "50"}
        self.props.update(props)
        self.clock_ms = 1_700_000_000_000
        self.alters: list[tuple[int, list[int]]] = []  # (leader epoch, proposed ISR)
        self.alter_requests: list[int] = []  # partitions in each AlterPartition
        self.fetches: list[tuple[int, int]] = []  # (source broker, partitions in the request)
        # The controller's view: leader epoch, ISR and partition epoch.
        self.leader_epoch, self.isr, self.partition_epoch = 0, [0], 0
        self.nodes = [Node(self, i, tmp / f"broker-{i}") for i in range(size)]

    def now_ms(self) -> int:
        return self.clock_ms

    def send_from(self, source: int) -> Callable[[int, Any, int], Coroutine[Any, Any, Any]]:
        async def send(node_id: int, request: Any, version: int) -> Any:
            node = self.nodes[node_id]
            if not node.up or not self.nodes[source].up:
                await asyncio.sleep(0.01)
                raise ConnectionError(f"broker {node_id} is down")
            self.fetches.append((source, sum(len(t.partitions) for t in request.topics)))
            return await node.call(request.__api_key__, version, request)

        return send

    async def alter_partition(self, proposals: list[IsrProposal]) -> list[CommittedIsr | ErrorCode]:
        self.alter_requests.append(len(proposals))
        await asyncio.sleep(0)
        return [self.alter_one(p) for p in proposals]

    def alter_one(self, p: IsrProposal) -> CommittedIsr | ErrorCode:
        assert (p.topic, p.topic_id, p.partition) == (TOPIC, TOPIC_ID, 0)
        if p.leader_epoch != self.leader_epoch:
            return ErrorCode.fenced_leader_epoch
        if p.partition_epoch != self.partition_epoch:
            return ErrorCode.invalid_update_version
        self.alters.append((p.leader_epoch, list(p.new_isr)))
        self.isr, self.partition_epoch = list(p.new_isr), p.partition_epoch + 1
        return CommittedIsr(p.leader_epoch, list(p.new_isr), self.partition_epoch)

    def elect(
        self, leader: int, isr: list[int], to: list[int] | None = None, replicas: int = 3
    ) -> None:
        """A new leader epoch, told to the nodes in ``to`` (default: all)."""
        self.leader_epoch += 1
        self.isr = list(isr)
        self.partition_epoch += 1
        self.tell(leader, to)

    def tell(self, leader: int, to: list[int] | None = None) -> None:
        state = LeaderAndIsrState(
            TOPIC,
            TOPIC_ID,
            0,
            leader,
            self.leader_epoch,
            list(self.isr),
            self.partition_epoch,
            [n.broker_id for n in self.nodes],
            configs={"segment.bytes": "2048"},
        )
        for node in self.nodes if to is None else [self.nodes[i] for i in to]:
            errors = node.replicas.become_leader_or_follower(1, [state])
            assert errors == {(TOPIC, 0): ErrorCode.none}

    def shutdown(self) -> None:
        for node in self.nodes:
            node.replicas.shutdown()
            node.logs.shutdown(node.replicas.high_watermarks())


def run(
    tmp: Path,
    scenario: Callable[[Cluster], Coroutine[Any, Any, None]],
    size: int = 3,
    **props: str,
) -> None:
    async def main() -> None:
        cluster = Cluster(tmp, size, props)
        try:
            await scenario(cluster)
        finally:
            cluster.shutdown()

    asyncio.run(main())


async def until(condition: Callable[[], bool], what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_S
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        await asyncio.sleep(0.005)


def batch(n: int, tag: bytes) -> bytes:
    return build_batch([(b"k%d" % i, tag * 40, [], 1_000 + i) for i in range(n)])


def append(node: Node, n: int, tag: bytes) -> int:
    """Append as leader; return the new log end."""
    node.replicas.append(node.partition, batch(n, tag), node.replicas.now_ms())
    return node.partition.log.log_end_offset


async def append_and_copy(
    leader: Node, follower: Node, topic: str, index: int, records: bytes, *, end: int
) -> Partition:
    """Append ``records`` to the leader's ``topic``-``index`` and wait until the follower's
    copy ends at ``end``; the leader's partition."""
    part = leader.replicas.get(topic, index)
    assert part is not None
    leader.replicas.append(part, records, 0)
    copy = follower.replicas.get(topic, index)
    assert copy is not None
    await until(lambda: copy.log.log_end_offset == end, f"{topic}-{index} is copied")
    return part


async def in_sync(cluster: Cluster, leader: int, followers: list[int]) -> None:
    """Wait until the followers have the leader's whole log, then compare the bytes."""
    lead = cluster.nodes[leader]
    expected = lead.log_bytes()
    await until(
        lambda: all(cluster.nodes[f].log_bytes() == expected for f in followers),
        f"followers {followers} hold the leader's bytes",
    )


def produce_request(records: bytes, acks: int, timeout_ms: int) -> Any:
    cls = request_type(PRODUCE, 11)
    t = nested(cls, "TopicProduceData")
    p = nested(cls, "PartitionProduceData")
    return cls(
        acks=acks,
        timeout=datetime.timedelta(milliseconds=timeout_ms),
        topic_data=(t(name=TOPIC, partition_data=(p(index=0, records=records),)),),
    )


# -- the scenarios -----------------------------------------------------------------------------


def test_followers_copy_the_leader_and_the_hw_waits_for_them(tmp_path: Path) -> None:
    async def scenario(c: Cluster) -> None:
        c.isr = [0, 1, 2]
        c.tell(0, to=[0])  # only the leader knows: no follower fetches yet
        leader = c.nodes[0]
        for i in range(20):
            end = append(leader, 5, b"%d" % i)
        assert end == 100
        assert leader.partition.high_watermark == 0  # the followers have nothing yet
        c.tell(0, to=[1, 2])
        await in_sync(c, 0, [1, 2])
        assert len(list(leader.partition.log.segments)) > 1  # segment.bytes=2048: rolled
        await until(lambda: leader.partition.high_watermark == 100, "the HW reaches 100")
        # The followers learn the HW with their next fetch, bounded by their own log end.
        await until(
            lambda: all(c.nodes[f].partition.high_watermark == 100 for f in (1, 2)),
            "the followers' HW reaches 100",
        )
        assert c.nodes[1].replicas.high_watermarks() == {(TOPIC, 0): 100}

    run(tmp_path, scenario)


def test_isr_changes_of_many_partitions_go_in_one_alter_partition(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """... and are logged in one line each way (a returning broker rejoins tens of
    thousands of ISRs at once)."""

    async def scenario(c: Cluster) -> None:
        count = 50
        states = [
            LeaderAndIsrState("many", None, p, 0, 0, [0, 1, 2], 0, [0, 1, 2]) for p in range(count)
        ]

        def commit(p: IsrProposal) -> CommittedIsr:  # the controller accepts every change
            return CommittedIsr(p.leader_epoch, list(p.new_isr), p.partition_epoch + 1)

        c.alter_one = commit  # type: ignore[method-assign]
        for node in c.nodes:
            node.replicas.become_leader_or_follower(1, states)
        leader = c.nodes[0].replicas
        partitions = [leader.get("many", p) for p in range(count)]
        c.nodes[2].up = False  # broker 2 stops fetching
        c.clock_ms += 1_000  # past replica.lag.time.max.ms
        await until(
            lambda: all(p.followers[1].last_caught_up_ms == c.clock_ms for p in partitions),
            "broker 1 fetches every partition again",
        )
        with caplog.at_level(logging.INFO, logger="gregor.replica.manager"):
            leader.maybe_shrink_isr()
            await until(
                lambda: all(p.isr == [0, 1] for p in partitions), "broker 2 leaves every ISR"
            )
        assert c.alter_requests == [count]
        lines = [r.message for r in caplog.records if r.name == "gregor.replica.manager"]
        assert lines == [
            f"Shrinking the ISR of {count} partition(s): many-0 [0, 1, 2] to [0, 1], "
            f"many-1 [0, 1, 2] to [0, 1], many-2 [0, 1, 2] to [0, 1] and {count - 3} more",
            f"ISR of {count} partition(s) now: many-0 [0, 1] (partition epoch 1), "
            f"many-1 [0, 1] (partition epoch 1), many-2 [0, 1] (partition epoch 1) "
            f"and {count - 3} more",
        ]

    run(tmp_path, scenario, **{"replica.lag.time.max.ms": "400"})


def test_acks_all_waits_for_every_isr_member(tmp_path: Path) -> None:
    async def scenario(c: Cluster) -> None:
        c.isr = [0, 1, 2]
        c.tell(0, to=[0, 1])  # broker 2 does not fetch yet
        leader = c.nodes[0]
        request = produce_request(batch(3, b"a"), -1, 30_000)
        answer = asyncio.ensure_future(leader.call(PRODUCE, 11, request))
        await until(lambda: c.nodes[1].partition.log.log_end_offset == 3, "broker 1 copies")
        await asyncio.sleep(0.2)  # broker 1 has fetched again meanwhile; 2 has not
        assert not answer.done() and leader.partition.high_watermark == 0
        c.tell(0, to=[2])
        response = (await asyncio.wait_for(answer, DEADLINE_S)).responses[0]
        assert response.partition_responses[0].error_code == ErrorCode.none
        assert leader.partition.high_watermark == 3
        # Nobody fetches: the produce times out, the data stays appended.
        c.nodes[1].up = c.nodes[2].up = False
        late = await leader.call(PRODUCE, 11, produce_request(batch(2, b"b"), -1, 100))
        part = late.responses[0].partition_responses[0]
        assert (part.error_code, part.base_offset) == (ErrorCode.request_timed_out, 3)
        assert leader.partition.log.log_end_offset == 5

    run(tmp_path, scenario)


def test_isr_shrinks_when_a_follower_stops_and_expands_when_it_catches_up(
    tmp_path: Path,
) -> None:
    async def scenario(c: Cluster) -> None:
        c.isr = [0, 1, 2]
        c.tell(0)
        leader = c.nodes[0]
        append(leader, 4, b"x")
        await in_sync(c, 0, [1, 2])
        c.nodes[2].up = False  # broker 2 stops fetching
        append(leader, 4, b"y")
        await in_sync(c, 0, [1])
        c.clock_ms += 1_000  # past replica.lag.time.max.ms
        await until(
            lambda: leader.replicas.caught_up_ms(leader.partition, 1) == c.clock_ms,
            "broker 1 fetches again",
        )
        leader.replicas.maybe_shrink_isr()  # broker 1 caught up since: only 2 is dropped
        await until(lambda: leader.partition.isr == [0, 1], "broker 2 leaves the ISR")
        assert c.alters[-1] == (c.leader_epoch, [0, 1])
        # min.insync.replicas=2 is still met: acks=all works with broker 1 alone.
        ok = await leader.call(PRODUCE, 11, produce_request(batch(1, b"z"), -1, 30_000))
        assert ok.responses[0].partition_responses[0].error_code == ErrorCode.none
        c.nodes[2].up = True
        await until(lambda: leader.partition.isr == [0, 1, 2], "broker 2 rejoins the ISR")
        await in_sync(c, 0, [1, 2])
        # Broker 1 stops too: below min.insync.replicas, acks=all is refused, acks=1 works.
        c.nodes[1].up = c.nodes[2].up = False
        c.clock_ms += 1_000
        assert leader.partition.isr_to_shrink(c.clock_ms, 400) is None  # they have it all
        append(leader, 1, b"m")
        leader.replicas.start()  # the periodic ISR expiration check finds them lagging
        await until(lambda: leader.partition.isr == [0], "the ISR is the leader alone")
        refused = await leader.call(PRODUCE, 11, produce_request(batch(1, b"n"), -1, 30_000))
        end = leader.partition.log.log_end_offset
        assert refused.responses[0].partition_responses[0].error_code == (
            ErrorCode.not_enough_replicas
        )
        ok = await leader.call(PRODUCE, 11, produce_request(batch(1, b"o"), 1, 30_000))
        assert ok.responses[0].partition_responses[0].base_offset == end

    run(tmp_path, scenario, **{"replica.lag.time.max.ms": "400", "min.insync.replicas": "2"})


def test_a_leader_replaced_before_appending_drops_its_epoch_as_a_follower(
    tmp_path: Path,
) -> None:
    """Broker 1 leads epoch 1 (its epoch cache starts epoch 1 at its log end) and is
    replaced before anything is appended. Following broker 2, whose log never had epoch 1,
    its fetches diverge at epoch 1 with nothing to truncate: it drops the epoch entry at its
    log end (as Kafka's truncateTo always does) and catches up, instead of diverging at
    every fetch."""

    async def scenario(c: Cluster) -> None:
        c.isr = [0, 1, 2]
        c.tell(0)
        append(c.nodes[0], 4, b"a")
        await in_sync(c, 0, [1, 2])
        c.elect(1, [0, 1, 2])
        assert c.nodes[1].partition.log.leader_epochs.entries() == [(0, 0), (1, 4)]
        c.elect(2, [0, 1, 2])
        append(c.nodes[2], 3, b"b")
        await in_sync(c, 2, [0, 1])
        assert c.nodes[1].partition.log.leader_epochs.entries() == [(0, 0), (2, 4)]

    run(tmp_path, scenario)


def test_follower_keeps_its_uncommitted_tail_and_can_lead_with_it(tmp_path: Path) -> None:
    """KIP-101's first case: a follower that has data beyond its HW does not truncate it
    (no truncation to the HW), so electing it loses nothing the old leader acknowledged."""

    async def scenario(c: Cluster) -> None:
        c.isr = [0, 1]
        c.tell(0)
        append(c.nodes[0], 3, b"a")
        append(c.nodes[0], 3, b"b")
        await in_sync(c, 0, [1])
        c.nodes[0].up = False  # the leader dies
        c.elect(1, [1], to=[1])
        assert c.nodes[1].partition.log.log_end_offset == 6
        append(c.nodes[1], 2, b"c")
        c.nodes[0].up = True
        c.tell(1, to=[0])
        await in_sync(c, 1, [0])
        assert c.nodes[0].partition.log.log_end_offset == 8

    run(tmp_path, scenario, size=2)


def test_divergent_uncommitted_tail_is_truncated_and_replaced(tmp_path: Path) -> None:
    """KIP-101's second case: the old leader's uncommitted tail differs from what the new
    leader wrote at the same offsets; it truncates to where epoch 0 ends on the new leader
    and copies the rest, ending byte-identical."""

    async def scenario(c: Cluster) -> None:
        c.isr = [0, 1]
        c.tell(0)
        append(c.nodes[0], 3, b"a")
        await in_sync(c, 0, [1])
        c.nodes[1].up = False
        append(c.nodes[0], 4, b"uncommitted")  # only the leader has offsets 3-6
        c.nodes[0].up = False
        c.nodes[1].up = True
        c.elect(1, [1], to=[1])
        append(c.nodes[1], 2, b"new")  # offsets 3-4 in epoch 1
        append(c.nodes[1], 2, b"newer")
        c.nodes[0].up = True
        c.tell(1, to=[0])
        await in_sync(c, 1, [0])
        assert c.nodes[0].partition.log.leader_epochs.entries() == [(0, 0), (1, 3)]

    run(tmp_path, scenario, size=2)


def test_truncation_through_an_epoch_the_follower_never_had(tmp_path: Path) -> None:
    """KIP-279: the follower's last epoch (2) is unknown to the leader, whose answer names
    an epoch (1) the follower lacks; the follower truncates step by step, never below what
    both logs share, and ends byte-identical."""

    async def scenario(c: Cluster) -> None:
        a, b, cc = c.nodes
        c.isr = [0, 1, 2]
        c.tell(0)
        append(a, 3, b"x")  # epoch 0: offsets 0-2 everywhere
        await in_sync(c, 0, [1, 2])
        cc.up = False
        c.elect(1, [0, 1], to=[0, 1])  # epoch 1: leader b, a follows
        append(b, 2, b"y")  # offsets 3-4
        await in_sync(c, 1, [0])
        a.up = b.up = False
        cc.up = True
        c.elect(2, [2], to=[2])  # epoch 2: c alone (unclean), writes what nobody copies
        append(cc, 4, b"w")  # offsets 3-6
        cc.up = False
        a.up = b.up = True
        c.elect(0, [0, 1], to=[0, 1])  # epoch 3: leader a
        append(a, 3, b"z")  # offsets 5-7
        await in_sync(c, 0, [1])
        cc.up = True
        c.tell(0, to=[2])
        await in_sync(c, 0, [2])
        assert cc.partition.log.leader_epochs.entries() == [(0, 0), (1, 3), (3, 5)]

    run(tmp_path, scenario)


def test_stale_leader_and_isr_and_stop_replica(tmp_path: Path) -> None:
    async def scenario(c: Cluster) -> None:
        c.isr = [0, 1]
        c.elect(0, [0, 1])
        c.elect(0, [0, 1])
        node = c.nodes[1]

        def state(epoch: int) -> LeaderAndIsrState:
            return LeaderAndIsrState(TOPIC, TOPIC_ID, 0, 1, epoch, [1], 9, [0, 1])

        for epoch in (c.leader_epoch - 1, c.leader_epoch):  # older, or a repeat
            assert node.replicas.become_leader_or_follower(1, [state(epoch)]) == {
                (TOPIC, 0): ErrorCode.stale_controller_epoch
            }
        # A newer leader epoch from a controller older than one already heard from.
        assert node.replicas.become_leader_or_follower(0, [state(c.leader_epoch + 1)]) == {
            (TOPIC, 0): ErrorCode.stale_controller_epoch
        }
        other_id = LeaderAndIsrState(TOPIC, uuid.uuid4(), 0, 1, 99, [1], 9, [0, 1])
        assert node.replicas.become_leader_or_follower(1, [other_id]) == {
            (TOPIC, 0): ErrorCode.inconsistent_topic_id
        }
        not_mine = LeaderAndIsrState("u", None, 0, 0, 0, [0], 0, [0])
        assert node.replicas.become_leader_or_follower(1, [not_mine]) == {
            ("u", 0): ErrorCode.unknown_topic_or_partition
        }
        assert not node.partition.is_leader and node.partition.leader == 0
        for epoch in (c.leader_epoch - 1, c.leader_epoch):
            stale = StopReplicaState(TOPIC, 0, epoch, delete=False)
            assert node.replicas.stop_replicas(1, [stale]) == {
                (TOPIC, 0): ErrorCode.fenced_leader_epoch
            }
        directory = node.partition.log.directory
        deleting = StopReplicaState(TOPIC, 0, -2, delete=True)
        assert node.replicas.stop_replicas(1, [deleting]) == {(TOPIC, 0): ErrorCode.none}
        assert node.replicas.get(TOPIC, 0) is None
        await until(lambda: not directory.exists(), "the log is deleted")

    run(tmp_path, scenario, size=2)


def test_requests_to_a_follower_or_with_a_stale_epoch(tmp_path: Path) -> None:
    """Consumers and OffsetForLeaderEpoch go to the leader only, with a current epoch."""

    async def scenario(c: Cluster) -> None:
        c.isr = [0, 1]
        c.elect(0, [0, 1])
        append(c.nodes[0], 3, b"a")
        await in_sync(c, 0, [1])
        epoch = c.leader_epoch
        leader, follower = c.nodes
        assert (await fetch(follower, 0)).error_code == ErrorCode.not_leader_or_follower
        assert (await fetch(leader, 0, epoch - 1)).error_code == ErrorCode.fenced_leader_epoch
        assert (await fetch(leader, 0, epoch + 1)).error_code == ErrorCode.unknown_leader_epoch
        ok = await fetch(leader, 0, epoch)
        assert ok.error_code == ErrorCode.none and ok.high_watermark == 3
        assert (await end_offset(follower, 0)).error_code == ErrorCode.not_leader_or_follower
        fenced = await end_offset(leader, 0, epoch - 1)
        assert fenced.error_code == ErrorCode.fenced_leader_epoch
        # A follower fetch past the log end is refused and not taken for its log end.
        follower.up = False
        state = leader.partition.followers[1]
        known = state.log_end_offset
        beyond = await fetch(leader, 10, epoch, replica_id=1)
        assert beyond.error_code == ErrorCode.offset_out_of_range
        assert state.log_end_offset == known == 3
        answer = await end_offset(leader, 0, epoch)
        # Epoch 0 is older than any here: it ends where the first known epoch starts.
        assert (answer.error_code, answer.leader_epoch, answer.end_offset) == (0, 0, 0)

    run(tmp_path, scenario, size=2)


async def fetch(
    node: Node, offset: int, current_leader_epoch: int = -1, replica_id: int = -1
) -> Any:
    cls = request_type(FETCH, 12)
    t = nested(cls, "FetchTopic")
    p = nested(cls, "FetchPartition")
    request = cls(
        replica_id=replica_id,
        max_wait=datetime.timedelta(0),
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(
            t(
                topic=TOPIC,
                partitions=(
                    p(
                        partition=0,
                        fetch_offset=offset,
                        current_leader_epoch=current_leader_epoch,
                        partition_max_bytes=1 << 20,
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
    )
    return (await node.call(FETCH, 12, request)).responses[0].partitions[0]


async def end_offset(node: Node, epoch: int, current_leader_epoch: int = -1) -> Any:
    cls = request_type(OFFSET_FOR_LEADER_EPOCH, 4)
    t = nested(cls, "OffsetForLeaderTopic")
    p = nested(cls, "OffsetForLeaderPartition")
    part = p(partition=0, current_leader_epoch=current_leader_epoch, leader_epoch=epoch)
    request = cls(replica_id=-1, topics=(t(topic=TOPIC, partitions=(part,)),))
    response = await node.call(OFFSET_FOR_LEADER_EPOCH, 4, request)
    return response.topics[0].partitions[0]


def test_idempotent_producer_state_follows_the_leader(tmp_path: Path) -> None:
    """A retry of an acknowledged batch sent to the new leader after a failover is known
    there as a duplicate: the producer state was replicated with the data."""

    async def scenario(c: Cluster) -> None:
        c.isr = [0, 1]
        c.elect(0, [0, 1])

        def idempotent(sequence: int) -> bytes:
            return build_batch(
                [(b"k", b"v%d" % sequence, [], 1_000)],
                producer_id=7,
                producer_epoch=0,
                base_sequence=sequence,
            )

        first = await c.nodes[0].call(PRODUCE, 11, produce_request(idempotent(0), -1, 30_000))
        second = await c.nodes[0].call(PRODUCE, 11, produce_request(idempotent(1), -1, 30_000))
        assert second.responses[0].partition_responses[0].base_offset == 1
        assert first.responses[0].partition_responses[0].error_code == ErrorCode.none
        await in_sync(c, 0, [1])
        c.nodes[0].up = False
        c.elect(1, [1], to=[1])
        retry = await c.nodes[1].call(PRODUCE, 11, produce_request(idempotent(1), 1, 30_000))
        answer = retry.responses[0].partition_responses[0]
        assert (answer.error_code, answer.base_offset) == (ErrorCode.none, 1)
        assert c.nodes[1].partition.log.log_end_offset == 2  # nothing appended again
        out_of_order = await c.nodes[1].call(PRODUCE, 11, produce_request(idempotent(5), 1, 30_000))
        assert out_of_order.responses[0].partition_responses[0].error_code == (
            ErrorCode.out_of_order_sequence_number
        )

    run(tmp_path, scenario, size=2)


def test_follower_high_watermark_is_checkpointed(tmp_path: Path) -> None:
    async def scenario(c: Cluster) -> None:
        c.isr = [0, 1]
        c.elect(0, [0, 1])
        append(c.nodes[0], 5, b"a")
        await in_sync(c, 0, [1])
        follower = c.nodes[1]
        await until(lambda: follower.partition.high_watermark == 5, "the follower's HW is 5")
        follower.replicas.fetchers.shutdown()  # type: ignore[union-attr]
        follower.logs.checkpoint(follower.replicas.high_watermarks())
        reopened = LogManager([follower.partition.log.directory.parent], {})
        assert reopened.read_high_watermarks() == {(TOPIC, 0): 5}

    run(tmp_path, scenario, size=2)


@pytest.mark.parametrize("fetchers", [1, 3])
def test_one_fetch_per_fetcher_for_all_its_partitions(tmp_path: Path, fetchers: int) -> None:
    """num.replica.fetchers fetchers per source broker, each sending one Fetch for all the
    partitions hashed to it, long-polled: idle, they do not spin."""

    async def scenario(c: Cluster) -> None:
        states = [
            LeaderAndIsrState("m", None, p, 0, 0, [0, 1], 0, [0, 1], configs={}) for p in range(6)
        ]
        for node in c.nodes:
            assert set(node.replicas.become_leader_or_follower(1, states).values()) == {0}
        leader, follower = c.nodes
        for p in range(6):
            part = leader.replicas.get("m", p)
            assert part is not None
            leader.replicas.append(part, batch(2, b"m"), 0)
        await until(
            lambda: all(
                follower.replicas.get("m", p).log.log_end_offset == 2  # type: ignore[union-attr]
                for p in range(6)
            ),
            "every partition is copied",
        )
        manager = follower.replicas.fetchers
        assert manager is not None and len(manager._fetchers) == fetchers
        # The first request of each fetcher names all of its partitions (a new session).
        assert c.fetches[0] == (1, 6 // fetchers)
        assert len(leader.replicas.fetch_sessions) == fetchers
        before = len(c.fetches)
        await asyncio.sleep(1.0)
        idle = [n for source, n in c.fetches[before:] if source == 1]
        # Idle, a session's requests name no partition (KIP-227); they are long polls of
        # replica.fetch.wait.max.ms=100, about 10 per fetcher in a second, where a spinning
        # fetcher would send thousands.
        assert idle and set(idle) == {0}
        assert len(idle) <= 40 * fetchers
        # The leader forgets the sessions (a restart, say): the fetchers start new ones.
        leader.replicas.fetch_sessions = FetchSessions()
        await append_and_copy(leader, follower, "m", 5, batch(3, b"n"), end=5)
        await until(
            lambda: len(leader.replicas.fetch_sessions) == fetchers, "every fetcher has a session"
        )

    run(tmp_path, scenario, size=2, **{"num.replica.fetchers": str(fetchers)})


def test_a_fenced_answer_is_one_log_line_not_one_per_partition(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A leader that applied a new epoch before its follower answers the follower's fetch
    FENCED_LEADER_EPOCH for every partition the change moved (a failover: tens of
    thousands): the follower logs each answer once, and fetches again once told."""

    async def scenario(c: Cluster) -> None:
        count = 6

        def states(epoch: int) -> list[LeaderAndIsrState]:
            return [
                LeaderAndIsrState("f", None, p, 0, epoch, [0, 1], epoch, [0, 1], configs={})
                for p in range(count)
            ]

        leader, follower = c.nodes
        leader.replicas.become_leader_or_follower(1, states(1))
        with caplog.at_level(logging.INFO, logger="gregor.replica.fetcher"):
            follower.replicas.become_leader_or_follower(1, states(0))  # an epoch behind
            await until(
                lambda: any("fenced_leader_epoch" in r.message for r in caplog.records),
                "an answer fenced",
            )
        fenced = [r.message for r in caplog.records if "fenced_leader_epoch" in r.message]
        assert re.fullmatch(
            rf"Fetch of {count} partition\(s\) from broker 0 failed: fenced_leader_epoch "
            r"\((f-\d, ){2}f-\d and 3 more\); retrying after back-off",
            fenced[0],
        ), fenced
        follower.replicas.become_leader_or_follower(1, states(1))
        await append_and_copy(leader, follower, "f", 5, batch(2, b"f"), end=2)

    run(tmp_path, scenario, size=2)


def test_follower_behind_the_leaders_log_start_starts_over_there(tmp_path: Path) -> None:
    async def scenario(c: Cluster) -> None:
        c.isr = [0]
        c.elect(0, [0], to=[0])
        leader, follower = c.nodes
        append(leader, 5, b"a")
        append(leader, 5, b"b")
        leader.partition.log.advance_log_start_offset(5)  # DeleteRecords, say
        c.tell(0, to=[1])  # an empty follower: its fetch at 0 is out of range
        await until(lambda: follower.partition.log.log_end_offset == 10, "the follower copies")
        assert follower.partition.log.log_start_offset == 5
        await until(lambda: leader.partition.isr == [0, 1], "the follower joins the ISR")

    run(tmp_path, scenario, size=2)


def test_parked_acks_all_answers_after_append_errors(tmp_path: Path) -> None:
    """A produce waiting for replication gets NOT_ENOUGH_REPLICAS_AFTER_APPEND when the
    ISR shrinks below min.insync.replicas meanwhile (the data stays written), and
    NOT_LEADER_OR_FOLLOWER when this broker stops leading."""

    async def scenario(c: Cluster) -> None:
        c.isr = [0, 1, 2]
        c.nodes[1].up = c.nodes[2].up = False  # in the ISR, but they never fetch
        c.tell(0)
        leader = c.nodes[0]
        request = produce_request(batch(2, b"a"), -1, 60_000)
        waiting = asyncio.ensure_future(leader.call(PRODUCE, 11, request))
        await until(lambda: leader.partition.log.log_end_offset == 2, "the append")
        assert not waiting.done()
        c.clock_ms += 1_000
        leader.replicas.maybe_shrink_isr()
        answer = (await asyncio.wait_for(waiting, DEADLINE_S)).responses[0]
        part = answer.partition_responses[0]
        assert (part.error_code, part.base_offset) == (
            ErrorCode.not_enough_replicas_after_append,
            0,
        )
        assert leader.partition.isr == [0] and leader.partition.high_watermark == 2
        # ISR [0]: acks=all is refused before the append from now on...
        refused = await leader.call(PRODUCE, 11, request)
        assert refused.responses[0].partition_responses[0].error_code == (
            ErrorCode.not_enough_replicas
        )
        assert leader.partition.log.log_end_offset == 2
        # ...and a produce parked when leadership moves away is told so.
        c.elect(0, [0, 1, 2], to=[0])
        parked = asyncio.ensure_future(leader.call(PRODUCE, 11, request))
        await until(lambda: leader.partition.log.log_end_offset == 4, "the second append")
        c.elect(1, [1, 2], to=[0])
        moved = (await asyncio.wait_for(parked, DEADLINE_S)).responses[0]
        assert moved.partition_responses[0].error_code == ErrorCode.not_leader_or_follower

    run(tmp_path, scenario, **{"replica.lag.time.max.ms": "400", "min.insync.replicas": "2"})


def test_a_partition_no_longer_followed_leaves_the_session(tmp_path: Path) -> None:
    async def scenario(c: Cluster) -> None:
        states = [LeaderAndIsrState("m", None, p, 0, 0, [0, 1], 0, [0, 1]) for p in range(3)]
        for node in c.nodes:
            node.replicas.become_leader_or_follower(1, states)
        leader, follower = c.nodes
        sessions = leader.replicas.fetch_sessions
        await until(lambda: len(sessions) == 1, "a session exists")
        (session,) = sessions._sessions.values()
        await until(lambda: len(session.partitions) == 3, "the session holds 3 partitions")
        follower.replicas.stop_replicas(1, [StopReplicaState("m", 2, 1, delete=False)])
        await until(lambda: len(session.partitions) == 2, "partition 2 is forgotten")
        assert ("m", 2) not in session.partitions

    run(tmp_path, scenario, size=2)


def test_an_idle_follower_session_reads_only_what_changed(tmp_path: Path) -> None:
    """The leader reads a follower session's partitions only when they change (or the
    follower names them): idle, every one is quiet and a long poll reads none; an append
    makes that one partition dirty, wakes the parked fetch and is copied."""

    async def scenario(c: Cluster) -> None:
        states = [LeaderAndIsrState("m", None, p, 0, 0, [0, 1], 0, [0, 1]) for p in range(4)]
        for node in c.nodes:
            node.replicas.become_leader_or_follower(1, states)
        leader, follower = c.nodes
        sessions = leader.replicas.fetch_sessions
        await until(lambda: len(sessions) == 1, "a session exists")
        (session,) = sessions._sessions.values()
        await until(
            lambda: (
                len(session.partitions) == 4
                and all(cached.quiet for cached in session.partitions.values())
            ),
            "every partition is quiet",
        )
        assert not session.dirty
        part = await append_and_copy(leader, follower, "m", 2, batch(3, b"q"), end=3)
        await until(lambda: part.high_watermark == 3, "the high watermark follows")
        await until(
            lambda: all(cached.quiet for cached in session.partitions.values()),
            "quiet again",
        )
        others = [leader.replicas.get("m", p) for p in (0, 1, 3)]
        assert all(p is not None and p.log.log_end_offset == 0 for p in others)

    run(tmp_path, scenario, size=2)


def test_a_followers_own_log_start_move_reaches_its_leader(tmp_path: Path) -> None:
    """An idle follower's fetches name no partition; when its own retention moves a log
    start, its next fetch names that partition, so the leader (whose DeleteRecords waits
    for its followers' log starts) learns it."""

    async def scenario(c: Cluster) -> None:
        c.isr = [0, 1]
        c.tell(0)
        leader, follower = c.nodes
        for tag in (b"a", b"b", b"c"):
            append(leader, 20, tag)
        await in_sync(c, 0, [1])
        seen = leader.partition.followers[1]
        await until(lambda: seen.log_start_offset == 0, "the leader has the follower's start")
        await until(lambda: follower.partition.high_watermark == 60, "the follower's HW")
        follower.partition.log.advance_log_start_offset(20)  # as its retention would
        follower.replicas.on_log_start_moved(follower.partition)
        await until(lambda: seen.log_start_offset == 20, "the leader learns the new start")

    run(tmp_path, scenario, size=2)


def test_a_big_leader_and_isr_lets_other_tasks_run_between_slices(tmp_path: Path) -> None:
    """A LeaderAndIsr of many partitions is applied a slice at a time: the broker's other
    work (clients, a controller's requests still being written) runs in between."""

    async def scenario(c: Cluster) -> None:
        count = 2 * LEADER_AND_ISR_SLICE + 1
        states = [
            LeaderAndIsrState("big", None, p, 0, 0, [0, 1], 0, [0, 1], configs={})
            for p in range(count)
        ]
        turns = 0

        async def other_work() -> None:
            nonlocal turns
            while True:
                turns += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(other_work())
        await asyncio.sleep(0)
        before = turns
        errors = await c.nodes[0].replicas.apply_leader_and_isr(1, states)
        task.cancel()
        assert turns - before >= 2  # once after each of the first two slices
        assert errors == {("big", p): ErrorCode.none for p in range(count)}
        leads = [c.nodes[0].replicas.get("big", p) for p in range(count)]
        assert all(p is not None and p.is_leader for p in leads)

    run(tmp_path, scenario, size=2)
