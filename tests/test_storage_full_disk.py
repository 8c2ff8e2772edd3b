"""A full disk under a real broker process: producers get KAFKA_STORAGE_ERROR, the log
directory goes offline (Metadata reports its partitions offline), the process lives on and
answers other clients, SIGTERM exits with a clear message, and after space is freed the
next start recovers every acknowledged record."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from compat_tests.broker import BrokerProcess
from gregor.apis.context import build, nested
from gregor.wire.records import build_batch, split_batches
from gregor.wire.schema import request_type
from gregor.wire.versions import METADATA
from tests.kafka_wire import WireClient, create_topic
from tests.test_api_behaviour import fetch, produce

FS_SIZE = "4m"
# A second client's Metadata round trip while the disk is full: generous for a shared
# 2-core machine (the broker does no disk work on that path), far below a hung broker.
PROMPT_S = 2.0


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs (the test runs as root, as the sandbox does)."""
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={FS_SIZE}", "tmpfs", mount_point], check=True
    )
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", mount_point], check=False)


def metadata(client: WireClient, topic: str) -> object:
    cls = request_type(METADATA, 12)
    request = build(
        cls,
        topics=(nested(cls, "MetadataRequestTopic")(name=topic, topic_id=None),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    return client.call(METADATA, 12, request).topics[0]


def incompressible(n_bytes: int, seed: int) -> bytes:
    return build_batch([(b"k", os.urandom(n_bytes), [], 1_000 + seed)])


# Large batches fill the disk from segment writes; small ones with an index entry per batch
# and frequent rolls make index, snapshot and new-segment writes meet the full disk too.
@pytest.mark.parametrize("batch_bytes", [30_000, 2_000])
def test_full_disk_gives_storage_error_and_keeps_acknowledged_data(
    tmp_path: Path, small_fs: Path, batch_bytes: int
) -> None:
    broker = BrokerProcess(tmp_path, {"log.dirs": str(small_fs / "data")})
    broker.data_dir = small_fs / "data"
    broker.start()
    try:
        client = WireClient(broker.port, timeout=30)
        # Small segments so that rolls (new index files, snapshots) happen as the disk fills.
        configs = {"segment.bytes": "100000", "index.interval.bytes": "0"}
        assert create_topic(client, "fill", configs=configs).error_code == 0
        assert create_topic(client, "bystander").error_code == 0
        acknowledged: list[bytes] = []
        for i in range(10_000):
            batch = incompressible(batch_bytes, i)
            response = produce(client, "fill", batch)
            if response.error_code != ErrorCode.none:
                break
            acknowledged.append(batch[16:])
        else:
            pytest.fail("a 4 MiB file system never filled up")
        assert response.error_code == ErrorCode.kafka_storage_error
        assert acknowledged, "nothing fitted before the disk was full"

        # The directory is offline: every partition in it answers KAFKA_STORAGE_ERROR...
        assert produce(client, "bystander", incompressible(10, 0)).error_code == (
            ErrorCode.kafka_storage_error
        )
        assert fetch(client, "fill", 0).error_code == ErrorCode.kafka_storage_error
        # ...Metadata shows it offline, and a second client is answered promptly.
        other = WireClient(broker.port, timeout=10)
        started = time.monotonic()
        entry = metadata(other, "fill")
        assert time.monotonic() - started < PROMPT_S
        (partition,) = entry.partitions  # type: ignore[attr-defined]
        assert partition.error_code == ErrorCode.leader_not_available
        assert partition.leader_id == -1 and list(partition.offline_replicas) == [0]
        other.close()
        client.close()
        assert broker.running

        broker.stop()  # SIGTERM with the disk full: no crash, a clear message
        assert broker._proc is not None and broker._proc.returncode == 0
        log = broker.log_path.read_text()
        assert "shut down with offline log directories" in log
        assert "Traceback" not in log

        subprocess.run(["mount", "-o", "remount,size=64m", small_fs], check=True)
        broker.start()
        client = WireClient(broker.port, timeout=30)
        stored: list[bytes] = []
        offset = 0
        while len(stored) < len(acknowledged):
            data = fetch(client, "fill", offset)
            assert data.error_code == ErrorCode.none
            records = bytes(data.records)
            headers = split_batches(records)
            assert headers, f"fetch at {offset} returned nothing; {len(stored)} batches read"
            stored += [records[h.position + 16 : h.position + h.size] for h in headers]
            offset = headers[-1].next_offset
        assert stored[: len(acknowledged)] == acknowledged
        assert produce(client, "bystander", incompressible(10, 0)).error_code == ErrorCode.none
        client.close()
    finally:
        broker.kill()
