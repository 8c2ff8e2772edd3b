"""A power loss, not just a kill -9: kill -9 keeps the page cache, so it never tears a write.
Here the broker is killed and then the disk is made to look as after a power cut: every
partition log is cut back to its recovery point (the last offset flushed, from
recovery-point-offset-checkpoint) plus a random torn tail, later segments are torn too, and
the files written by rename carry the partial temp files an interrupted write leaves.

Expected, as in Kafka: the broker starts; every record below the recovery point is kept at
its offset; the torn tail is cut cleanly at the last whole batch (what survives is exactly
what was acknowledged at those offsets); new appends follow it. A meta.properties or metadata
file that is itself torn (not possible from the broker's own atomic writes, but from a
non-atomic writer or the disk) stops start-up with one error line naming the file and no
traceback, as Kafka does when its only log dir's meta.properties cannot be read; restoring
the file lets the broker start with everything kept.
"""

from __future__ import annotations

import datetime
import random
import time
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from compat_tests.broker import BrokerProcess
from gregor.log.checkpoint import RECOVERY_POINT_CHECKPOINT, read_checkpoint
from gregor.server.harness.broker_process import BrokerProcessError as BrokerError
from gregor.wire import versions as v
from gregor.wire.records import build_batch, decode_records, split_batches
from gregor.wire.schema import request_type
from tests.kafka_wire import WireClient, fetch_one
from tests.test_internal_topics import create_one
from tests.test_topic_commit import list_offsets

TOPIC = "power"
PARTITIONS = 2
REQUESTS = 60
PER_BATCH = 5
METADATA_FILE = "gregor-metadata.json"
OVERRIDES = {
    "log.segment.bytes": "4096",
    "log.flush.offset.checkpoint.interval.ms": "100",
}


def produce(client: WireClient, partition: int, values: list[bytes]) -> int:
    cls = request_type(v.PRODUCE, 9)
    module = __import__(cls.__module__, fromlist=["x"])
    batch = build_batch([(None, value, [], 1000) for value in values])
    data = module.PartitionProduceData(index=partition, records=batch)
    request = cls(
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(seconds=5),
        topic_data=(module.TopicProduceData(name=TOPIC, partition_data=(data,)),),
    )
    response = client.call(v.PRODUCE, 9, request).responses[0].partition_responses[0]
    assert response.error_code == ErrorCode.none
    return response.base_offset


def read_all(client: WireClient, partition: int) -> dict[int, bytes]:
    found: dict[int, bytes] = {}
    while True:
        response = fetch_one(client, TOPIC, partition, len(found))
        assert response.error_code == ErrorCode.none
        records = response.records or b""
        batches = split_batches(records)
        if not batches:
            return found
        for header in batches:
            for record in decode_records(records, header):
                if record.offset >= len(found):
                    assert record.offset == len(found), "a gap in the recovered log"
                    assert record.value is not None
                    found[record.offset] = record.value


def tear_log(directory: Path, recovery_point: int, rng: random.Random) -> None:
    """Keep what was flushed; of what was not, keep a random prefix of the bytes, as a
    power cut leaves whichever pages reached the disk (a torn batch included)."""
    segments = sorted(directory.glob("*.log"), key=lambda p: int(p.stem))
    bases = [int(p.stem) for p in segments]
    flushed_in = max(i for i, base in enumerate(bases) if base <= recovery_point)
    for i, segment in enumerate(segments):
        data = segment.read_bytes()
        if i < flushed_in:
            continue
        keep = 0
        if i == flushed_in:
            for header in split_batches(data):
                if header.base_offset >= recovery_point:
                    break
                keep = header.position + header.size
        torn = keep + rng.randint(0, len(data) - keep)
        with open(segment, "r+b") as f:
            f.truncate(torn)


def active_base(directory: Path) -> int:
    return max(int(p.stem) for p in directory.glob("*.log"))


def wait_for_recovery_points(data_dir: Path) -> dict[tuple[str, int], int]:
    """Wait until each partition is flushed up to its active segment, as the flush owed
    after a roll does; the active segment (never empty after an append) stays unflushed."""
    deadline = time.monotonic() + 30  # the checkpoint is written every 100 ms
    while True:
        points = read_checkpoint(data_dir / RECOVERY_POINT_CHECKPOINT)
        if all(
            points.get((TOPIC, p), 0) >= active_base(data_dir / f"{TOPIC}-{p}")
            for p in range(PARTITIONS)
        ):
            return points
        assert time.monotonic() < deadline, f"recovery points stayed at {points}"
        time.sleep(0.05)


def start_fails_naming(broker: BrokerProcess, path: Path) -> None:
    with pytest.raises(BrokerError):
        broker.start()
    tail = broker.log_tail(5)
    assert str(path) in tail
    text = broker.log_path.read_text()
    assert "Traceback" not in text


@pytest.mark.parametrize("seed", [1, 2])
def test_power_loss_keeps_flushed_data_and_cuts_torn_tails(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    broker = BrokerProcess(tmp_path, OVERRIDES)
    acked: dict[int, dict[int, bytes]] = {p: {} for p in range(PARTITIONS)}
    with broker:
        client = WireClient(broker.port)
        assert create_one(client, TOPIC, PARTITIONS).error_code == ErrorCode.none
        for i in range(REQUESTS):
            for p in range(PARTITIONS):
                values = [b"p%d-r%d-%d" % (p, i, j) for j in range(PER_BATCH)]
                base = produce(client, p, values)
                acked[p].update({base + j: value for j, value in enumerate(values)})
        client.close()
        total = REQUESTS * PER_BATCH
        points = wait_for_recovery_points(broker.data_dir)
        broker.kill()

        data = broker.data_dir
        for p in range(PARTITIONS):
            assert points[(TOPIC, p)] < total  # there is an unflushed tail to tear
            tear_log(data / f"{TOPIC}-{p}", points[(TOPIC, p)], rng)
        # A save interrupted before its rename: a partial temp file beside the intact file.
        for name in ("meta.properties", METADATA_FILE):
            good = (data / name).read_bytes()
            (data / f"{name}.tmp").write_bytes(good[: rng.randint(0, len(good) - 1)])

        broker.start()
        client = WireClient(broker.port)
        for p in range(PARTITIONS):
            found = read_all(client, p)
            point = points[(TOPIC, p)]
            assert len(found) >= point, "flushed records were lost"
            assert found == {o: acked[p][o] for o in range(len(found))}
            # The log takes new appends right after what was recovered.
            assert produce(client, p, [b"after"]) == len(found)
            assert read_all(client, p)[len(found)] == b"after"
        client.close()
        assert not (data / "meta.properties.tmp").exists()
        assert not (data / f"{METADATA_FILE}.tmp").exists()
        broker.stop()

        # Torn files of their own (a truncated write that reached the disk half done).
        for name in ("meta.properties", METADATA_FILE):
            good = (data / name).read_bytes()
            for torn in (b"", good[: len(good) // 2]):
                (data / name).write_bytes(torn)
                start_fails_naming(broker, data / name)
            (data / name).write_bytes(good)
        broker.start()
        client = WireClient(broker.port)
        assert len(read_all(client, 0)) >= points[(TOPIC, 0)] + 1
        client.close()


def test_metadata_file_lost_but_meta_properties_kept_is_refused(tmp_path: Path) -> None:
    """A broker whose metadata file is gone must not start as a new, empty cluster over its
    logs: the cluster id of meta.properties no longer matches, and the error says why."""
    with BrokerProcess(tmp_path) as broker:
        client = WireClient(broker.port)
        assert create_one(client, TOPIC, 1).error_code == ErrorCode.none
        client.close()
    saved = broker.data_dir / METADATA_FILE
    content = saved.read_bytes()
    saved.unlink()
    start_fails_naming(broker, saved)
    assert "is missing" in broker.log_tail(5)
    saved.write_bytes(content)
    broker.start()
    client = WireClient(broker.port)
    assert list_offsets(client, TOPIC, -1).error_code == ErrorCode.none
    client.close()
    broker.stop()
