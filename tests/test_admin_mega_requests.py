"""One big admin request does not block everyone, against a real broker process: a
10,000-partition CreateTopics and a +10,000 CreatePartitions are built a slice at a time,
other clients keep being answered promptly meanwhile; a create costs the same with 10 or
2,000 topics (the metadata is an append-only log written off the event loop, not a file
rewritten per change); kill -9 during a big create leaves the topic whole or absent and the
other topics intact; and create/delete churn of 10,000-partition topics keeps the broker's
memory flat. The metadata log's own rules (torn tail, damage, compaction, the old format)
are checked in process."""

from __future__ import annotations

import asyncio
import datetime
import json
import random
import statistics
import threading
import time
import urllib.request
import zlib
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from compat_tests.broker import BrokerProcess
from gregor.apis.context import build, nested
from gregor.controller.metadata_log import COMPACT_AFTER, MetadataStore, encode_line, log_path
from gregor.log.errors import KafkaStorageError
from gregor.wire import versions as v
from gregor.wire.records import split_batches
from gregor.wire.schema import request_type
from tests.kafka_wire import WireClient, create_topic
from tests.test_api_behaviour import fetch, produce, records
from tests.test_internal_topics import delete, metadata, req
from tests.test_metrics_hostile import METRICS_ON_PORT_0, read_metrics_port

BIG = 10_000
# The target is 50 ms; this shared 2-core machine (other test runs, their disk I/O) needs room.
P99_BOUND_S = 0.2


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def create_partitions(client: WireClient, topic: str, count: int) -> Any:
    cls = request_type(v.CREATE_PARTITIONS, 3)
    entry = nested(cls, "CreatePartitionsTopic")(name=topic, count=count, assignments=None)
    request = build(
        cls, topics=(entry,), timeout=datetime.timedelta(seconds=120), validate_only=False
    )
    return client.call(v.CREATE_PARTITIONS, 3, request).results[0]


class Pinger:
    """A well-behaved client: Metadata of a small topic and ApiVersions, back to back with a
    1 ms pause, each round trip timed: a 10,000-partition change can take as little as 1-2 s,
    and the p99 of fewer than a hundred round trips would be their slowest one."""

    def __init__(self, port: int, topic: str) -> None:
        self.port = port
        self.topic = topic
        self.times: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def __enter__(self) -> Pinger:
        self._thread.start()
        while len(self.times) < 5:
            time.sleep(0.01)
        self.times.clear()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        client = WireClient(self.port)
        versions = req(v.API_VERSIONS, 3, client_software_name="t", client_software_version="1")
        i = 0
        while not self._stop.is_set():
            started = time.monotonic()
            if i % 2:
                assert client.call(v.API_VERSIONS, 3, versions).error_code == ErrorCode.none
            else:
                assert metadata(client, self.topic, False).error_code == ErrorCode.none
            self.times.append(time.monotonic() - started)
            i += 1
            time.sleep(0.001)
        client.close()

    def p99(self) -> float:
        ordered = sorted(self.times)
        return ordered[int(len(ordered) * 0.99)]


@pytest.mark.timeout(1200)  # 10,000-partition work on a shared 2-core machine
def test_big_create_and_grow_keep_other_clients_prompt(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path, start_timeout_s=300) as broker:
        # 20,001 logs to close on a loaded 2-core machine: CI saw one close take over 20 s.
        broker.stop_timeout_s = 120
        client = WireClient(broker.port, timeout=300)
        assert create_topic(client, "small").error_code == ErrorCode.none
        with Pinger(broker.port, "small") as pinger:
            started = time.monotonic()
            assert create_topic(client, "big", BIG).error_code == ErrorCode.none
            took = time.monotonic() - started
        print(
            f"CreateTopics of {BIG}: {took:.2f}s; other client: {len(pinger.times)} round "
            f"trips, p99 {pinger.p99() * 1000:.1f} ms, max {max(pinger.times) * 1000:.1f} ms"
        )
        assert pinger.p99() <= P99_BOUND_S
        assert len(pinger.times) > 10

        with Pinger(broker.port, "small") as pinger:
            started = time.monotonic()
            assert create_partitions(client, "big", 2 * BIG).error_code == ErrorCode.none
            took = time.monotonic() - started
        print(
            f"CreatePartitions +{BIG}: {took:.2f}s; other client: {len(pinger.times)} round "
            f"trips, p99 {pinger.p99() * 1000:.1f} ms, max {max(pinger.times) * 1000:.1f} ms"
        )
        assert pinger.p99() <= P99_BOUND_S
        assert len(metadata(client, "big", False).partitions) == 2 * BIG
        assert produce(client, "big", records(2), partition=2 * BIG - 1).error_code == 0
        client.close()

        broker.restart()
        client = WireClient(broker.port, timeout=60)
        assert len(metadata(client, "big", False).partitions) == 2 * BIG
        data = fetch(client, "big", 0, partition=2 * BIG - 1)
        assert len(split_batches(data.records)) == 1
        client.close()
    assert "Traceback" not in broker.log_path.read_text()


def median_create_s(client: WireClient, prefix: str, n: int = 15) -> float:
    times = []
    for i in range(n):
        started = time.monotonic()
        assert create_topic(client, f"{prefix}{i}").error_code == ErrorCode.none
        times.append(time.monotonic() - started)
    return statistics.median(times)


@pytest.mark.timeout(1200)  # 10,000-partition work on a shared 2-core machine
def test_create_costs_the_same_with_ten_or_two_thousand_topics(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path) as broker:
        client = WireClient(broker.port, timeout=60)
        for i in range(10):
            assert create_topic(client, f"first{i}").error_code == ErrorCode.none
        with_ten = median_create_s(client, "a")
        for i in range(2000):
            assert create_topic(client, f"filler{i}").error_code == ErrorCode.none
        with_2000 = median_create_s(client, "b")
        print(f"one create: {with_ten * 1000:.1f} ms with ~10 topics, {with_2000 * 1000:.1f} ms")
        # Flat within 2x (and a couple of ms of noise on this shared machine).
        assert with_2000 <= 2 * with_ten + 0.003
        client.close()
        snapshot = json.loads((broker.data_dir / "gregor-metadata.json").read_text())
        assert snapshot["log_generation"] > 1  # compacted along the way

        broker.kill()
        broker.start()
        client = WireClient(broker.port, timeout=60)
        for name in ("first0", "a14", "filler0", "filler1999", "b14"):
            assert metadata(client, name, False).error_code == ErrorCode.none, name
        client.close()
    assert "Traceback" not in broker.log_path.read_text()


def create_big(port: int, name: str, answer: list[Any]) -> None:
    try:
        client = WireClient(port, timeout=300)
        answer.append(create_topic(client, name, BIG))
        client.close()
    except OSError:  # the broker died under the request
        pass


@pytest.mark.timeout(1200)  # 10,000-partition work on a shared 2-core machine
def test_kill_9_during_a_big_create_leaves_it_whole_or_absent(tmp_path: Path) -> None:
    rng = random.Random(11)
    with BrokerProcess(tmp_path, start_timeout_s=300) as broker:
        client = WireClient(broker.port)
        for name in ("kept0", "kept1"):
            assert create_topic(client, name, 3).error_code == ErrorCode.none
            assert produce(client, name, records(3), partition=2).error_code == ErrorCode.none
        client.close()
        outcomes = []
        # Killed early in the create, later in it, and right after its answer.
        for round_, wait in enumerate((rng.uniform(0, 1), rng.uniform(1, 3), None)):
            name = f"big{round_}"
            answer: list[Any] = []
            creator = threading.Thread(target=create_big, args=(broker.port, name, answer))
            creator.start()
            deadline = time.monotonic() + 60
            while not list(broker.data_dir.glob(f"{name}-*")):  # its logs are being made
                assert time.monotonic() < deadline
                time.sleep(0.005)
            if wait is None:
                creator.join()
            else:
                time.sleep(wait)
            broker.kill()
            creator.join()
            broker.start()

            client = WireClient(broker.port, timeout=60)
            topic = metadata(client, name, False)
            if answer:
                assert answer[0].error_code == ErrorCode.none
            if topic.error_code == ErrorCode.none:
                outcomes.append("whole")
                assert len(topic.partitions) == BIG
                assert len(list(broker.data_dir.glob(f"{name}-*[0-9]"))) == BIG
                assert delete(client, name).error_code == ErrorCode.none  # lighter restarts
            else:
                assert wait is not None
                outcomes.append("absent")
                assert not answer, "acknowledged, then lost"
                assert topic.error_code == ErrorCode.unknown_topic_or_partition
                assert not list(broker.data_dir.glob(f"{name}-*[0-9]"))  # set aside
            for kept in ("kept0", "kept1"):
                data = fetch(client, kept, 0, partition=2)
                assert data.error_code == ErrorCode.none
                assert len(split_batches(data.records)) == 1
            client.close()
        print("kill -9 during a big create:", outcomes)
    assert "Traceback" not in broker.log_path.read_text()


CYCLES = 6
# Twelve cycles on the slower 2-core machine: 97, 108, 111, 120, 124, 130, then 129-132 MB;
# the working size can take five cycles to reach, 21 MB above the first half's peak in one
# CI run. The leak this guards against added 47 MB a cycle.
RSS_SLACK_MB = 30


@pytest.mark.timeout(1200)  # 10,000-partition work on a shared 2-core machine
def test_topic_churn_keeps_memory_flat(tmp_path: Path) -> None:
    """Each cycle is a new topic (so nothing keyed by name is merely overwritten), written
    to, read from and scraped (so its metric series exist) before it is deleted."""
    with BrokerProcess(tmp_path, METRICS_ON_PORT_0) as broker:
        client = WireClient(broker.port, timeout=300)
        scrape_port = read_metrics_port(broker)
        seen = []
        for cycle in range(CYCLES):
            name = f"churn-{cycle}"
            assert create_topic(client, name, BIG).error_code == ErrorCode.none
            for partition in range(0, BIG, BIG // 20):
                produce(client, name, records(3), partition)
                fetch(client, name, 0, partition=partition)
            with urllib.request.urlopen(f"http://127.0.0.1:{scrape_port}/metrics") as answer:
                assert f'topic="{name}"'.encode() in answer.read()
            assert delete(client, name).error_code == ErrorCode.none
            seen.append(round(rss_mb(broker.pid)))
        print(f"VmRSS after each create+delete of {BIG} partitions (MB): {seen}")
        # The first cycles reach the working size (the allocator keeps what it grew to, and
        # RSS wanders by a few MB with garbage collection); from then on nothing accumulates:
        # the second half of the run peaks no higher than the first (it was +47 MB a cycle).
        half = CYCLES // 2
        assert max(seen[half:]) - max(seen[:half]) <= RSS_SLACK_MB, seen
        assert seen[-1] - seen[1] <= 2 * RSS_SLACK_MB, seen
        gone = metadata(client, f"churn-{CYCLES - 1}", False)
        assert gone.error_code == ErrorCode.unknown_topic_or_partition
        client.close()
    assert "Traceback" not in broker.log_path.read_text()


# -- the metadata log, in process ------------------------------------------------------------


def commit(store: MetadataStore, *changes: dict[str, Any]) -> None:
    """Each change as a commit (a line) of its own, all queued at once."""

    async def go() -> None:
        await asyncio.gather(*(store.commit([change]) for change in changes))

    asyncio.run(go())


def topic(n: int) -> dict[str, Any]:
    return {"id": f"00000000-0000-0000-0000-{n:012d}", "partitions": n, "configs": {}}


def fresh_store(path: Path) -> MetadataStore:
    store = MetadataStore(path)
    assert store.fresh
    store.write_snapshot({"version": 1, "cluster_id": "c", "topics": {}})
    return store


def test_metadata_log_replays_and_cuts_a_torn_tail(tmp_path: Path) -> None:
    store = fresh_store(tmp_path)
    commit(store, {"op": "topic", "name": "a", "value": topic(1)})
    commit(store, {"op": "topic", "name": "b", "value": topic(2)})
    commit(store, {"op": "topic", "name": "a", "value": None})
    commit(store, {"op": "producer_id_block_end", "value": 2000})
    store.close()
    path = log_path(tmp_path, store.generation)
    whole = path.read_bytes()
    path.write_bytes(whole + encode_line([{"op": "topic", "name": "c", "value": topic(3)}])[:-9])

    again = MetadataStore(tmp_path)
    assert set(again.state["topics"]) == {"b"}
    assert again.state["producer_id_block_end"] == 2000
    assert path.read_bytes() == whole  # the torn line is cut off


def test_metadata_log_refuses_damage_before_good_lines(tmp_path: Path) -> None:
    store = fresh_store(tmp_path)
    for name in ("a", "b"):
        commit(store, {"op": "topic", "name": name, "value": topic(1)})
    store.close()
    path = log_path(tmp_path, store.generation)
    data = bytearray(path.read_bytes())
    data[12] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(KafkaStorageError, match="damaged"):
        MetadataStore(tmp_path)


def test_metadata_log_compacts_into_a_new_snapshot(tmp_path: Path) -> None:
    store = fresh_store(tmp_path)
    first = store.generation
    commit(
        store,
        *({"op": "topic", "name": f"t{i}", "value": topic(i + 1)} for i in range(COMPACT_AFTER)),
    )
    commit(
        store,
        *(
            {"op": "topic", "name": f"t{i}", "value": topic(i + 1)}
            for i in range(COMPACT_AFTER, COMPACT_AFTER + 5)
        ),
    )
    store.close()
    assert store.generation == first + 1
    assert not log_path(tmp_path, first).exists()
    snapshot = json.loads((tmp_path / "gregor-metadata.json").read_text())
    assert snapshot["log_generation"] == store.generation
    assert len(snapshot["topics"]) == COMPACT_AFTER
    again = MetadataStore(tmp_path)
    assert len(again.state["topics"]) == COMPACT_AFTER + 5
    # A crash after the new snapshot's rename, before the old log went: that log is ignored.
    log_path(tmp_path, first).write_bytes(
        encode_line([{"op": "topic", "name": "t0", "value": None}])
    )
    again = MetadataStore(tmp_path)
    assert "t0" in again.state["topics"]
    assert not log_path(tmp_path, first).exists()


def test_an_old_metadata_file_loads_as_it_is(tmp_path: Path) -> None:
    old = {
        "version": 1,
        "cluster_id": "abc",
        "producer_id_block_end": 3000,
        "topics": {"t": {"id": topic(1)["id"], "partitions": 4, "configs": {}, "leader_epoch": 2}},
        "configs": {},
        "client_quotas": {},
    }
    (tmp_path / "gregor-metadata.json").write_text(json.dumps(old))
    store = MetadataStore(tmp_path)
    assert not store.fresh
    assert store.state["topics"]["t"]["partitions"] == 4
    assert store.generation == 0
    line = encode_line([{"op": "quota", "name": "user=x", "value": {"a": 1.0}}])
    crc, _, payload = line.rstrip(b"\n").partition(b" ")
    assert int(crc, 16) == zlib.crc32(payload)
