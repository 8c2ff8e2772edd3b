"""Transactions on the partition side, across three replicas in one event loop (the harness
of test_replication: real dispatchers, real wire bytes between replicas). The test plays
the transaction coordinator, as it plays the controller there: it answers the produce
path's KIP-890 verification and writes the markers through ``write_txn_markers``."""

from __future__ import annotations

import asyncio
import datetime
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.write_txn_markers.v1.request import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
)

from gregor.apis.context import nested
from gregor.apis.write_txn_markers import write_txn_markers
from gregor.log.txn_index import AbortedTxn
from gregor.wire.records import build_batch, split_batches
from gregor.wire.schema import request_type
from gregor.wire.versions import FETCH, LIST_OFFSETS, PRODUCE
from tests.test_replication import TOPIC, Cluster, Node, in_sync, run, until

TXN_ID = "app-1"
P1, P2 = 5001, 5002


class Coordinator:
    """The test's answers to the verification: partitions in each producer's transaction."""

    def __init__(self) -> None:
        self.added: dict[int, set[tuple[str, int]]] = {}
        self.calls: list[tuple[str, int, int, list[tuple[str, int]]]] = []

    async def verify(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: list[tuple[str, int]],
    ) -> dict[tuple[str, int], ErrorCode]:
        self.calls.append((transactional_id, producer_id, producer_epoch, partitions))
        added = self.added.get(producer_id, set())
        return {
            tp: ErrorCode.none if tp in added else ErrorCode.invalid_txn_state for tp in partitions
        }


def txn_batch(pid: int, seq: int, n: int = 2, epoch: int = 0) -> bytes:
    return build_batch(
        [(b"k", b"v%d" % i, [], 1_000) for i in range(n)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=True,
    )


async def produce(node: Node, records: bytes, txn_id: str | None = TXN_ID) -> Any:
    cls = request_type(PRODUCE, 11)
    t = nested(cls, "TopicProduceData")
    p = nested(cls, "PartitionProduceData")
    request = cls(
        transactional_id=txn_id,
        acks=-1,
        timeout=datetime.timedelta(seconds=20),
        topic_data=(t(name=TOPIC, partition_data=(p(index=0, records=records),)),),
    )
    return (await node.call(PRODUCE, 11, request)).responses[0].partition_responses[0]


async def fetch_committed(node: Node, offset: int, max_wait_ms: int = 0) -> Any:
    cls = request_type(FETCH, 12)
    t = nested(cls, "FetchTopic")
    p = nested(cls, "FetchPartition")
    request = cls(
        max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=1,
        session_id=0,
        session_epoch=-1,
        topics=(
            t(
                topic=TOPIC,
                partitions=(p(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20),),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
    )
    return (await node.call(FETCH, 12, request)).responses[0].partitions[0]


async def latest(node: Node, isolation_level: int) -> int:
    cls = request_type(LIST_OFFSETS, 7)
    t = nested(cls, "ListOffsetsTopic")
    p = nested(cls, "ListOffsetsPartition")
    request = cls(
        replica_id=-1,
        isolation_level=isolation_level,
        topics=(t(name=TOPIC, partitions=(p(partition_index=0, timestamp=-1),)),),
    )
    answer = (await node.call(LIST_OFFSETS, 7, request)).topics[0].partitions[0]
    assert answer.error_code == ErrorCode.none
    return int(answer.offset)


def markers(pid: int, commit: bool, coordinator_epoch: int = 0, partitions: tuple = (0,)) -> Any:
    return WriteTxnMarkersRequest(
        markers=(
            WritableTxnMarker(
                producer_id=pid,
                producer_epoch=0,
                transaction_result=commit,
                topics=(WritableTxnMarkerTopic(name=TOPIC, partition_indexes=partitions),),
                coordinator_epoch=coordinator_epoch,
            ),
        )
    )


def errors_of(response: Any) -> list[ErrorCode]:
    return [p.error_code for m in response.markers for t in m.topics for p in t.partitions]


def offsets_of(records: Any) -> list[tuple[int, bool]]:
    data = bytes(records) if records else b""
    return [(h.base_offset, h.is_control) for h in split_batches(data)]


def test_verification_markers_and_read_committed_across_replicas(tmp_path: Path) -> None:
    async def scenario(c: Cluster) -> None:
        c.isr = [0, 1, 2]
        c.tell(0)
        leader = c.nodes[0]
        services = leader.dispatcher.services
        # No coordinator: a transactional write cannot be verified.
        answer = await produce(leader, txn_batch(P1, 0))
        assert answer.error_code == ErrorCode.invalid_txn_state
        coordinator = Coordinator()
        services.txn = coordinator
        # A partition not added to the transaction is refused after asking.
        answer = await produce(leader, txn_batch(P1, 0))
        assert answer.error_code == ErrorCode.invalid_txn_state
        assert coordinator.calls == [(TXN_ID, P1, 0, [(TOPIC, 0)])]
        coordinator.added[P1] = {(TOPIC, 0)}
        coordinator.added[P2] = {(TOPIC, 0)}
        assert (await produce(leader, txn_batch(P1, 0))).error_code == ErrorCode.none  # 0-1
        assert (await produce(leader, txn_batch(P2, 0))).error_code == ErrorCode.none  # 2-3
        calls = len(coordinator.calls)
        # A second write of an open transaction goes straight in.
        assert (await produce(leader, txn_batch(P1, 2))).error_code == ErrorCode.none  # 4-5
        assert len(coordinator.calls) == calls
        plain = build_batch([(b"k", b"plain", [], 1_000)])
        assert (await produce(leader, plain, None)).error_code == ErrorCode.none  # 6
        hw = leader.partition.high_watermark
        assert hw == 7
        # Both transactions open: read_committed sees nothing, read_uncommitted all.
        part = await fetch_committed(leader, 0)
        assert (part.high_watermark, part.last_stable_offset) == (7, 0)
        assert offsets_of(part.records) == [] and part.aborted_transactions == ()
        assert (await latest(leader, 1), await latest(leader, 0)) == (0, 7)

        # The coordinator aborts P1's transaction, then commits P2's.
        assert errors_of(await write_txn_markers(services, markers(P1, False))) == [
            ErrorCode.none
        ]  # marker at 7
        part = await fetch_committed(leader, 0)
        assert part.last_stable_offset == 2  # P2's transaction from 2 is still open
        assert offsets_of(part.records) == [(0, False)]
        assert [(a.producer_id, a.first_offset) for a in part.aborted_transactions] == [(P1, 0)]
        assert errors_of(await write_txn_markers(services, markers(P2, True))) == [
            ErrorCode.none
        ]  # marker at 8
        part = await fetch_committed(leader, 0)
        assert part.last_stable_offset == part.high_watermark == 9
        batches = offsets_of(part.records)
        aborted = [(a.producer_id, a.first_offset) for a in part.aborted_transactions]
        assert aborted == [(P1, 0)]
        while batches[-1][0] < 8:  # reads stop at a segment's end (segment.bytes=2048)
            more = await fetch_committed(leader, batches[-1][0] + 1)
            batches += offsets_of(more.records)
        assert batches == [
            (0, False), (2, False), (4, False), (6, False), (7, True), (8, True)
        ]  # fmt: skip
        assert await latest(leader, 1) == 9

        # Every replica indexed the abort the same way.
        await in_sync(c, 0, [1, 2])
        for node in c.nodes:
            entries = [t for s in node.partition.log.segments for t in s.txn_index.entries]
            assert entries == [AbortedTxn(P1, 0, 7, 2)]
        await until(
            lambda: all(n.partition.last_stable_offset() == 9 for n in c.nodes),
            "every replica's LSO is 9",
        )

        # Errors per partition: an older coordinator, a partition unknown, a follower.
        coordinator.added[P1] = {(TOPIC, 0)}
        assert (await produce(leader, txn_batch(P1, 4))).error_code == ErrorCode.none
        fenced = await write_txn_markers(services, markers(P1, True, coordinator_epoch=-1))
        assert errors_of(fenced) == [ErrorCode.transaction_coordinator_fenced]
        assert errors_of(await write_txn_markers(services, markers(P1, True, partitions=(9,)))) == [
            ErrorCode.unknown_topic_or_partition
        ]
        follower = c.nodes[1].dispatcher.services
        assert errors_of(await write_txn_markers(follower, markers(P1, True))) == [
            ErrorCode.not_leader_or_follower
        ]
        # A non-transactional write of a producer with an open transaction.
        plain_p1 = build_batch(
            [(b"k", b"x", [], 1_000)], producer_id=P1, producer_epoch=0, base_sequence=6
        )
        assert (await produce(leader, plain_p1)).error_code == ErrorCode.invalid_txn_state

    run(tmp_path, scenario)


def test_a_write_verified_before_its_transaction_ended_is_refused(tmp_path: Path) -> None:
    """KIP-890's guard: the coordinator aborts the transaction while the partition waits
    for its verification answer; the late write must not open a hanging transaction."""

    class Aborting(Coordinator):
        def __init__(self, services: Any) -> None:
            super().__init__()
            self.services = services

        async def verify(
            self,
            transactional_id: str,
            producer_id: int,
            producer_epoch: int,
            partitions: list[tuple[str, int]],
        ) -> dict[tuple[str, int], ErrorCode]:
            response = await write_txn_markers(self.services, markers(producer_id, False))
            assert errors_of(response) == [ErrorCode.none]
            return dict.fromkeys(partitions, ErrorCode.none)

    async def scenario(c: Cluster) -> None:
        c.isr = [0, 1, 2]
        c.tell(0)
        leader = c.nodes[0]
        leader.dispatcher.services.txn = Aborting(leader.dispatcher.services)
        answer = await produce(leader, txn_batch(P1, 0))
        assert answer.error_code == ErrorCode.invalid_txn_state
        log = leader.partition.log
        assert not log.producer_state.has_ongoing_txn(P1)
        assert log.log_end_offset == 1  # the marker only
        assert leader.partition.last_stable_offset() == leader.partition.high_watermark == 1

    run(tmp_path, scenario)


def test_a_parked_read_committed_fetch_waits_for_the_lso(tmp_path: Path) -> None:
    async def scenario(c: Cluster) -> None:
        c.isr = [0, 1, 2]
        c.tell(0)
        leader = c.nodes[0]
        services = leader.dispatcher.services
        coordinator = Coordinator()
        coordinator.added[P1] = {(TOPIC, 0)}
        services.txn = coordinator
        assert (await produce(leader, txn_batch(P1, 0))).error_code == ErrorCode.none  # 0-1
        await until(lambda: leader.partition.high_watermark == 2, "the HW covers the write")
        parked = asyncio.ensure_future(fetch_committed(leader, 0, max_wait_ms=20_000))
        # Data past the open transaction moves the HW, not the LSO: still parked.
        plain = build_batch([(b"k", b"plain", [], 1_000)])
        assert (await produce(leader, plain, None)).error_code == ErrorCode.none  # 2
        await until(lambda: leader.partition.high_watermark == 3, "the HW covers it")
        await asyncio.sleep(0.2)
        assert not parked.done()
        response = await write_txn_markers(services, markers(P1, True))  # 3
        assert errors_of(response) == [ErrorCode.none]
        part = await asyncio.wait_for(parked, 10)
        assert part.last_stable_offset == 4
        # (The marker may be in the next segment: segment.bytes=2048.)
        assert offsets_of(part.records)[:2] == [(0, False), (2, False)]

    run(tmp_path, scenario)
