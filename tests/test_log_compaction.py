"""Log compaction against a real broker process, driven by confluent-kafka (librdkafka):
1,000,000 records over 1,000 keys with tombstones while a consumer reads from offset 0, kill -9
at every step of a cleaning pass, and __consumer_offsets bounded under a long commit loop."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.broker import BrokerProcess
from gregor.log.cleaner import CRASH_ENV

TOPIC = "compacted"
KEYS = 1000
# A cleaner that retries at once and cleans whatever is dirty: the tests wait for passes.
BROKER = {"log.cleaner.backoff.ms": "100", "log.retention.check.interval.ms": "1000"}
TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": str(512 * 1024),
    "min.cleanable.dirty.ratio": "0.01",
    # Longer than a scan from offset 0 takes: a reader must reach a tombstone before it goes.
    "delete.retention.ms": "10000",
    "segment.ms": "500",  # the tick producer rolls the tail, so the tombstones get cleaned
    "file.delete.delay.ms": "1000",
}
WAIT_S = 120  # generous: a shared 2-core machine


def create_topic(broker: BrokerProcess, topic: str, config: dict[str, str], parts: int = 1) -> None:
    client = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = client.create_topics([NewTopic(topic, parts, 1, config=config)])
    futures[topic].result(timeout=60)


def producer(broker: BrokerProcess, batch_size: int = 256 * 1024) -> Producer:
    return Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "linger.ms": 20,
            "batch.size": batch_size,
            "queue.buffering.max.messages": 2_000_000,
            "compression.type": "lz4",
            "enable.idempotence": True,
        }
    )


class Produced:
    """Every record produced, by offset (from the delivery reports)."""

    def __init__(self) -> None:
        self.by_offset: dict[int, tuple[bytes, bytes | None]] = {}

    def report(self, err: object, msg: object) -> None:
        assert err is None, err
        self.by_offset[msg.offset()] = (msg.key(), msg.value())  # type: ignore[attr-defined]

    def send(self, p: Producer, key: bytes, value: bytes | None) -> None:
        while True:
            try:
                p.produce(TOPIC, value, key, partition=0, on_delivery=self.report)
                return
            except BufferError:
                p.poll(0.05)

    def state_below(self, end: int) -> dict[bytes, bytes]:
        """Every key's latest value among offsets below `end`; deleted keys absent."""
        state: dict[bytes, bytes | None] = {}
        snapshot = dict(self.by_offset)  # the delivery reports keep coming meanwhile
        for offset in sorted(o for o in snapshot if o < end):
            key, value = snapshot[offset]
            state[key] = value
        return {k: v for k, v in state.items() if v is not None}


def scan(
    broker: BrokerProcess, end: int | None = None
) -> tuple[list[tuple[int, bytes, bytes | None]], int]:
    """Read the partition from offset 0 to `end` (default: the high watermark now)."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "scanner",
            "enable.auto.commit": False,
            "fetch.max.bytes": 1 << 24,
            "enable.partition.eof": True,
        }
    )
    try:
        if end is None:
            end = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=30)[1]
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        records: list[tuple[int, bytes, bytes | None]] = []
        deadline = time.monotonic() + WAIT_S
        position = 0
        while position < end:
            assert time.monotonic() < deadline, f"scan stuck at {position} of {end}"
            # consume() waits out its timeout unless it fills the batch: the short one ends
            # each scan's last call soon after the end is fetched.
            for msg in consumer.consume(50_000, 0.1):
                if msg.error():
                    continue
                if msg.offset() >= end:
                    position = end
                    break
                records.append((msg.offset(), msg.key(), msg.value()))
                position = msg.offset() + 1
        return records, end
    finally:
        consumer.close()


def check_consistent(
    produced: Produced, records: list, end: int, tombstones_gone: bool, moving: bool = False
) -> None:
    """What a reader from offset 0 up to `end` must see: offsets only increase, each record
    the one produced at its offset, and the latest value of every key below `end` (a deleted
    key at most as its tombstone, none once the tombstones are due). With `moving` (writes
    and cleaning went on during the read) a key may show an older record instead when a
    record at or past `end` superseded its latest one meanwhile, or that one is a tombstone
    (its delete.retention.ms may run out while the reader is on its way to it): Kafka
    promises the final state to a reader that reaches the log end."""
    offsets = [r[0] for r in records]
    assert offsets == sorted(set(offsets)), "offsets must strictly increase"
    for offset, key, value in records:
        assert produced.by_offset.get(offset) == (key, value), f"record at {offset} changed"
    seen: dict[bytes, bytes | None] = {}
    for _, key, value in records:
        seen[key] = value
    live = {k: v for k, v in seen.items() if v is not None}
    expected = produced.state_below(end)
    if moving:
        snapshot = dict(produced.by_offset)
        excused = {k for o, (k, _) in snapshot.items() if o >= end}
        excused |= {k for o, (k, v) in snapshot.items() if o < end and v is None}
        live = {k: v for k, v in live.items() if k not in excused}
        expected = {k: v for k, v in expected.items() if k not in excused}
    assert live == expected
    if tombstones_gone:
        assert None not in seen.values()


def partition_bytes(broker: BrokerProcess, topic: str) -> int:
    """Bytes of the topic's segments; a segment the cleaner swaps away while we look
    (listed, then gone) counts as nothing, as the file that replaced it is counted."""
    total = 0
    for d in broker.data_dir.glob(f"{topic}-*"):
        for segment in d.glob("*.log"):
            try:
                total += segment.stat().st_size
            except FileNotFoundError:
                pass
    return total


# A new broker for each test: each reads the broker-wide cleaner checkpoint and its files.
@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path, BROKER) as b:
        yield b


def test_million_records_compacted_while_read(broker: BrokerProcess) -> None:
    create_topic(broker, TOPIC, TOPIC_CONFIG)
    produced = Produced()
    p = producer(broker)
    rng = random.Random(9)
    deleted = set(rng.sample(range(KEYS), KEYS // 10))
    stop = threading.Event()
    scans: list[int] = []
    failures: list[BaseException] = []

    def reader() -> None:
        # A consumer from offset 0, over and over while the log is written and cleaned.
        try:
            while not stop.is_set():
                records, end = scan(broker)
                while len(produced.by_offset) < end and not stop.is_set():
                    time.sleep(0.05)  # the delivery reports of what it read are on their way
                if stop.is_set():
                    return
                check_consistent(produced, records, end, tombstones_gone=False, moving=True)
                scans.append(len(records))
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            failures.append(exc)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        total = 1_000_000
        for i in range(total):
            key = i % KEYS
            # One record in fifty deletes its key; the last write of a `deleted` key does too.
            last_round = i >= total - KEYS
            tombstone = (last_round and key in deleted) or (not last_round and i % 50 == 7)
            produced.send(p, b"key-%d" % key, None if tombstone else b"value-%d-%d" % (key, i))
            if i % 20_000 == 0:
                p.poll(0)
        assert p.flush(WAIT_S) == 0
        # Dirty the tail until the cleaner has dropped the due tombstones and kept the rest.
        deadline = time.monotonic() + WAIT_S
        while True:
            assert not failures, failures
            assert time.monotonic() < deadline, "the log was not compacted in time"
            produced.send(p, b"tick", b"%d" % time.monotonic_ns())
            assert p.flush(30) == 0
            records, end = scan(broker)
            if len(records) <= KEYS - len(deleted) + 50:
                break
            time.sleep(0.2)
    finally:
        stop.set()
        thread.join()
    assert not failures, failures
    assert scans, "no read from offset 0 finished while writing"
    check_consistent(produced, records, end, tombstones_gone=True)
    keys = {k for _, k, _ in records} - {b"tick"}
    assert keys == {b"key-%d" % k for k in range(KEYS) if k not in deleted}
    assert partition_bytes(broker, TOPIC) < 4 * 1024 * 1024  # of some 30 MB produced
    log = broker.log_path.read_text()
    assert "Cleaned log compacted-0" in log
    checkpoint = (broker.data_dir / "cleaner-offset-checkpoint").read_text().split("\n")
    assert any(line.startswith(f"{TOPIC} 0 ") for line in checkpoint)


CRASH_POINTS = ["mapped", "cleaned", "swap", "deleted", "swapped"]


def test_kill_at_every_step_of_a_pass_loses_nothing(
    broker: BrokerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each round writes with the cleaner off, then restarts the broker with it on and a
    crash point armed (GREGOR_CLEANER_CRASH_AT: SIGKILL at that step of the first pass; or
    kill -9 at a random moment after a pass began), then checks a restarted broker's log."""
    create_topic(broker, TOPIC, {**TOPIC_CONFIG, "segment.bytes": str(16 * 1024)})
    produced = Produced()
    rng = random.Random(5)
    restart(broker, cleaner=False)
    for round_, point in enumerate([*CRASH_POINTS, "random", "random"]):
        p = producer(broker, batch_size=4096)  # many segments of 16 KiB
        for i in range(10_000):
            value = None if i % 40 == 3 else b"r%d-%d" % (round_, i)
            produced.send(p, b"key-%d" % rng.randrange(KEYS), value)
        assert p.flush(WAIT_S) == 0
        if point != "random":
            monkeypatch.setenv(CRASH_ENV, point)
        restart(broker, cleaner=True)
        if point == "random":
            wait_for_log(broker, "Cleaning log compacted-0")
            time.sleep(rng.uniform(0, 0.5))  # the random moment itself, not a wait
            broker.kill()
        else:
            deadline = time.monotonic() + WAIT_S
            while broker.running:
                assert time.monotonic() < deadline, f"no pass reached {point}"
                time.sleep(0.05)
        monkeypatch.delenv(CRASH_ENV, raising=False)
        restart(broker, cleaner=False)  # the log as recovery left it, nothing cleaning it
        names = [f.name for f in (broker.data_dir / f"{TOPIC}-0").iterdir()]
        assert not [n for n in names if n.endswith((".cleaned", ".swap"))], names
        records, end = scan(broker, len(produced.by_offset))
        check_consistent(produced, records, end, tombstones_gone=False)
    # After all that, a pass completes and the log still reads right.
    restart(broker, cleaner=True)
    wait_for_log(broker, "Cleaned log compacted-0")
    records, end = scan(broker, len(produced.by_offset))
    check_consistent(produced, records, end, tombstones_gone=False)


def restart(broker: BrokerProcess, *, cleaner: bool) -> None:
    """kill -9 (what was written is acknowledged) and start with the cleaner on or off."""
    if broker.running:
        broker.kill()
    broker.overrides["log.cleaner.enable"] = "true" if cleaner else "false"
    broker.start()


def wait_for_log(broker: BrokerProcess, line: str) -> None:
    """Until `line` is in the log of the broker's current run."""
    deadline = time.monotonic() + WAIT_S
    while True:
        text = broker.log_path.read_text()
        tail = text.split("==== start:")[-1]
        if line in tail:
            return
        assert time.monotonic() < deadline, f"no {line!r} in the log"
        time.sleep(0.05)


def test_consumer_offsets_stay_bounded_under_a_long_commit_loop(tmp_path: Path) -> None:
    overrides = {
        **BROKER,
        "offsets.topic.num.partitions": "1",
        "offsets.topic.segment.bytes": str(1024 * 1024),
    }
    with BrokerProcess(tmp_path, overrides) as broker:
        create_topic(broker, "committed", {}, parts=100)
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "committer"})
        try:
            # The cleaner's worker process starts with its first pass (a second or so
            # while this loop takes both cores): the bound below is of the passes that
            # follow, so the first has been made.
            for n in range(1000):
                offsets = [TopicPartition("committed", i, n) for i in range(100)]
                consumer.commit(offsets=offsets, asynchronous=False)
            wait_for_log(broker, "Cleaned log __consumer_offsets-0")
            sizes = []
            commits = 6000
            for n in range(commits):
                offsets = [TopicPartition("committed", i, n) for i in range(100)]
                consumer.commit(offsets=offsets, asynchronous=False)
                if n % 50 == 0:
                    sizes.append(partition_bytes(broker, "__consumer_offsets"))
            consumer.commit(offsets=offsets, asynchronous=False)
            # 600,000 offset records (36 MB uncompacted) against a bound of half of that,
            # which only repeated passes keep to: on an idle machine the partition stays
            # under 10 MiB (a few 1 MiB segments: the active one and the dirty ones waiting
            # for a pass); a cleaner sharing two loaded cores with this loop lags further.
            assert sizes[-1] > 0 and max(sizes) < 18 * 1024 * 1024, sizes
        finally:
            consumer.close()
        broker.restart()
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "committer"})
        try:
            committed = consumer.committed(
                [TopicPartition("committed", i) for i in range(100)], timeout=30
            )
            assert {tp.offset for tp in committed} == {commits - 1}
        finally:
            consumer.close()
        assert "Cleaned log __consumer_offsets-0" in broker.log_path.read_text()
