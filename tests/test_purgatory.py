"""The purgatory and the delayed fetch, in-process over a real ReplicaManager and log."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gregor.apis.dispatch import Dispatcher
from gregor.controller.metadata.cache import PartitionInfo
from gregor.log import LogManager
from gregor.replica.delayed_fetch import DelayedFetch, PartitionFetch
from gregor.replica.manager import ReplicaManager
from gregor.replica.partition import Partition
from gregor.replica.purgatory import DelayedOperation, OperationFailed, Purgatory
from gregor.wire.records import build_batch

NOW = 1_700_000_000_000


def test_purgatory_completes_on_check_and_on_deadline() -> None:
    async def scenario() -> None:
        purgatory: Purgatory = Purgatory("test")
        state = {"ready": False}
        woken = purgatory.park(
            ["a", "b"], 10_000, lambda force: "done" if state["ready"] or force else None
        )
        expired = purgatory.park(["c"], 20, lambda force: "late" if force else None)
        assert purgatory.check("a") == 0 and not woken.done()
        state["ready"] = True
        assert purgatory.check("b") == 1
        assert await woken == "done"
        assert await asyncio.wait_for(expired, 5) == "late"
        assert len(purgatory) == 0

    asyncio.run(scenario())


def test_purgatory_expire_all_answers_everything() -> None:
    async def scenario() -> None:
        purgatory: Purgatory = Purgatory("test")
        futures = [purgatory.park([i], 60_000, lambda force: force or None) for i in range(5)]
        purgatory.expire_all()
        assert [f.result() for f in futures] == [True] * 5

    asyncio.run(scenario())


class Broken(DelayedOperation[str]):
    """Fails its check; its forced completion fails too when ``force_fails``."""

    name = "Broken operation"

    def __init__(self, force_fails: bool) -> None:
        self.force_fails = force_fails

    def try_complete(self, key: Hashable) -> str | None:
        raise StopIteration  # what select_protocol raised inside a callback (issue #10, 4)

    def force_complete(self) -> str:
        if self.force_fails:
            raise KeyError("gone")
        return "forced"


def test_a_failing_check_is_logged_and_answered_and_the_others_are_served(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        purgatory: Purgatory[str] = Purgatory("Test")
        broken = purgatory.park(["k"], 60_000, Broken(force_fails=False))
        hopeless = purgatory.park(["k"], 60_000, Broken(force_fails=True))
        healthy = purgatory.park(["k"], 60_000, lambda force: "healthy")
        assert purgatory.check("k") == 1  # the healthy one; the others failed
        assert broken.result() == "forced"
        assert isinstance(hopeless.exception(), OperationFailed)
        assert healthy.result() == "healthy"
        assert len(purgatory) == 0
        # The purgatory keeps working for operations parked afterwards.
        later = purgatory.park(["k"], 60_000, lambda force: "later")
        assert purgatory.check("k") == 1 and later.result() == "later"

    with caplog.at_level(logging.ERROR, logger="gregor.replica.purgatory"):
        asyncio.run(scenario())
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert all("Test purgatory: Broken operation failed" in line for line in lines)
    assert all("StopIteration" in line and "test_purgatory.py" in line for line in lines)
    assert not any(r.exc_info for r in caplog.records)  # one line each, no traceback


def test_a_failing_deadline_does_not_stop_the_other_timers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        purgatory: Purgatory[str] = Purgatory("Test")
        hopeless = purgatory.park(["a"], 10, Broken(force_fails=True))
        fine = purgatory.park(["b"], 30, lambda force: "expired" if force else None)
        assert await asyncio.wait_for(fine, 10) == "expired"
        assert isinstance(hopeless.exception(), OperationFailed)
        assert len(purgatory) == 0

    with caplog.at_level(logging.ERROR):
        asyncio.run(scenario())
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "Broken operation failed at its deadline" in lines[0], lines


def test_a_failing_condition_is_named_by_its_function(caplog: pytest.LogCaptureFixture) -> None:
    def join_done(force: bool) -> str | None:
        return next(iter(()))  # StopIteration, as a group with no common protocol raised

    async def scenario() -> None:
        purgatory: Purgatory[str | None] = Purgatory("Rebalance")
        future = purgatory.park(["group"], 60_000, join_done)
        purgatory.check("group")
        assert future.done() and len(purgatory) == 0

    with caplog.at_level(logging.ERROR):
        asyncio.run(scenario())
    assert "Rebalance purgatory: " in caplog.text and "join_done failed" in caplog.text


# -- the delayed fetch ----------------------------------------------------------------------


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[ReplicaManager]:
    logs = LogManager([tmp_path], {})
    logs.startup(NOW)
    manager = ReplicaManager(0, logs, {})
    for index in range(2):
        manager.become_leader("t", PartitionInfo(index, 0, 0, [0], [0]), {"segment.bytes": "4096"})
    yield manager
    logs.shutdown(manager.high_watermarks())


def append(replicas: ReplicaManager, partition: Partition, value_size: int) -> int:
    """Append one record; return the batch's size in bytes."""
    batch = build_batch([(None, bytes(value_size), (), NOW)])
    replicas.append(partition, batch, NOW)
    return len(batch)


def park_fetch(replicas: ReplicaManager, min_bytes: int) -> tuple[asyncio.Future[Any], list[int]]:
    """A consumer fetch of both partitions from their ends, parked; its answers counted."""
    answers: list[int] = []
    states = []
    for index in range(2):
        partition = replicas.get("t", index)
        assert partition is not None
        end = partition.high_watermark
        region = partition.read(end, 1 << 20, min_one_batch=True)
        states.append(PartitionFetch.after_read(partition, end, region, 1 << 20))
    delayed = DelayedFetch(states, min_bytes, lambda: answers.append(1) or "ok")
    assert not delayed.ready()
    return replicas.fetch_purgatory.park(delayed.keys, 60_000, delayed), answers


def no_reads(partition: Partition, monkeypatch: pytest.MonkeyPatch) -> None:
    def read(*args: object, **kwargs: object) -> None:
        raise AssertionError("a parked fetch re-read the log")

    monkeypatch.setattr(partition.log, "read", read)


def test_a_parked_fetch_counts_appended_bytes_without_reading(
    replicas: ReplicaManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        p0, p1 = replicas.get("t", 0), replicas.get("t", 1)
        assert p0 is not None and p1 is not None
        first = append(replicas, p0, 10)
        future, answers = park_fetch(replicas, min_bytes=first + 700)
        for partition in (p0, p1):
            no_reads(partition, monkeypatch)
        second = append(replicas, p0, 100)
        assert not future.done()
        third = append(replicas, p1, 100)
        assert not future.done() and answers == []
        assert second + third < first + 700
        monkeypatch.undo()  # completion reads once
        append(replicas, p1, 600)
        assert future.done() and answers == [1]
        assert len(replicas.fetch_purgatory) == 0

    asyncio.run(scenario())


def test_a_parked_fetch_that_found_nothing_reads_again_only_the_partitions_that_changed(
    replicas: ReplicaManager,
) -> None:
    """A follower's fetch of many idle partitions is woken by an append to one of them
    (with acks=all, once per produce): only that one is read again, not every partition."""

    def park(min_bytes: int, timeout_ms: int) -> asyncio.Future[Any]:
        states = []
        for index in range(2):
            partition = replicas.get("t", index)
            assert partition is not None
            end = partition.high_watermark
            region = partition.read(end, 1 << 20, min_one_batch=True)
            states.append(PartitionFetch.after_read(partition, end, region, 1 << 20))
        delayed = DelayedFetch(
            states, min_bytes, lambda: "read all again", refresh=lambda keys: sorted(keys)
        )
        return replicas.fetch_purgatory.park(delayed.keys, timeout_ms, delayed)

    async def scenario() -> None:
        assert await park(1, 50) == []  # idle until the deadline: no second read
        p0 = replicas.get("t", 0)
        assert p0 is not None
        small = park(1 << 20, 50)
        append(replicas, p0, 10)  # data, though not enough to answer at once
        assert not small.done()
        assert await small == [("t", 0)]
        woken = park(1, 60_000)
        append(replicas, p0, 10)
        assert woken.done() and woken.result() == [("t", 0)]

    asyncio.run(scenario())


def test_a_parked_fetch_is_answered_when_its_segment_rolls(replicas: ReplicaManager) -> None:
    async def scenario() -> None:
        p0 = replicas.get("t", 0)
        assert p0 is not None
        append(replicas, p0, 3000)
        future, _ = park_fetch(replicas, min_bytes=1 << 20)
        segment = p0.log.active_segment.base_offset
        append(replicas, p0, 3000)  # does not fit in segment.bytes=4096: rolls
        assert p0.log.active_segment.base_offset != segment
        assert future.done()

    asyncio.run(scenario())


def test_a_parked_fetch_is_answered_on_a_leader_change_or_deletion(
    replicas: ReplicaManager,
) -> None:
    async def scenario() -> None:
        moved, _ = park_fetch(replicas, min_bytes=1 << 20)
        replicas.become_leader("t", PartitionInfo(0, 0, 1, [0], [0]), {"segment.bytes": "4096"})
        assert moved.done()
        deleted, _ = park_fetch(replicas, min_bytes=1 << 20)
        replicas.remove("t", 1, delete=True)
        assert deleted.done()

    asyncio.run(scenario())


def test_a_request_whose_parked_operation_failed_gets_its_connection_closed() -> None:
    class Channel:
        peer = "test"
        listener = "PLAINTEXT"

        def __init__(self) -> None:
            self.closed = False
            self.sent: list[object] = []

        def send(self, parts: list[object], size: int) -> None:
            self.sent.append(parts)

        def done(self) -> None:
            pass

        def close(self) -> None:
            self.closed = True

    async def scenario() -> Channel:
        purgatory: Purgatory[str] = Purgatory("Test")
        future = purgatory.park(["k"], 60_000, Broken(force_fails=True))
        purgatory.check("k")
        channel = Channel()
        Dispatcher(None)._complete(channel, 1, False, future)  # type: ignore[arg-type]
        return channel

    channel = asyncio.run(scenario())
    assert channel.closed and channel.sent == []
