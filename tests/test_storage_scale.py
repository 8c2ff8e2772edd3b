"""10,000 partitions on one real broker process: descriptors and memory maps stay bounded by
the segments in use, and the broker starts, serves and restarts (clean and kill -9) with its
data, under a descriptor limit far below three per partition."""

from __future__ import annotations

import contextlib
import os
import resource
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from kio.schema.errors import ErrorCode

from compat_tests.broker import BrokerProcess
from gregor.wire.records import split_batches
from tests.kafka_wire import WireClient, create_topic
from tests.test_api_behaviour import fetch, produce, records

TOPICS = 10
PARTITIONS_PER_TOPIC = 1000  # one CreateTopics request per topic: 10,000 partitions in all
# Below the 20,000 of this machine's default, so the bound shows: the broker keeps a quarter
# of its limit for segment files (log.open_files), the old three per partition would be 30,000.
NOFILE = 4096
OPEN_SEGMENT_CAP = NOFILE // 4
OTHER_FDS = 200  # sockets, the log dir lock, stdio, the event loop's own descriptors
SAMPLE = [(f"many{t}", p) for t in range(TOPICS) for p in (0, 499, PARTITIONS_PER_TOPIC - 1)]


@contextlib.contextmanager
def nofile_limit(soft: int) -> Iterator[None]:
    """Children started meanwhile inherit the soft descriptor limit `soft`."""
    old = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, old[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, old)


def fds_and_maps(broker: BrokerProcess) -> tuple[int, int]:
    assert broker._proc is not None
    pid = broker._proc.pid
    with open(f"/proc/{pid}/maps") as maps:
        return len(os.listdir(f"/proc/{pid}/fd")), sum(1 for _ in maps)


def check_sample(broker: BrokerProcess, expected_batches: int) -> None:
    client = WireClient(broker.port, timeout=60)
    for topic, partition in SAMPLE:
        data = fetch(client, topic, 0, partition=partition)
        assert data.error_code == ErrorCode.none, (topic, partition)
        assert len(split_batches(data.records)) == expected_batches, (topic, partition)
    client.close()


def test_ten_thousand_partitions_start_serve_and_restart(tmp_path: Path) -> None:
    # tmpfs when there is one: this machine's ext4 takes ~2 ms per file created, which alone
    # would make the 30,000 files of the test take minutes; descriptors are the same.
    base = "/dev/shm" if os.path.isdir("/dev/shm") else tmp_path
    with tempfile.TemporaryDirectory(dir=base) as data, nofile_limit(NOFILE):
        # Opening 10,000 logs takes seconds on an idle machine; allow for a loaded one.
        broker = BrokerProcess(Path(data), start_timeout_s=180.0)
        broker.start()
        try:
            _, maps_before = fds_and_maps(broker)
            client = WireClient(broker.port, timeout=120)
            for t in range(TOPICS):
                result = create_topic(client, f"many{t}", partitions=PARTITIONS_PER_TOPIC)
                assert result.error_code == ErrorCode.none, result
            fds, maps = fds_and_maps(broker)
            print(f"10,000 partitions: {fds} descriptors, {maps - maps_before} more maps")
            assert fds <= OPEN_SEGMENT_CAP + OTHER_FDS
            assert maps - maps_before < 50  # no map per partition (indexes are not mapped)
            for topic, partition in SAMPLE:
                response = produce(client, topic, records(3), partition=partition)
                assert response.error_code == ErrorCode.none
            check_sample(broker, 1)

            broker.stop()  # clean restart
            started = time.monotonic()
            broker.start()
            print(f"clean start with 10,000 partitions: {time.monotonic() - started:.1f}s")
            check_sample(broker, 1)
            client = WireClient(broker.port, timeout=60)
            for topic, partition in SAMPLE:
                assert produce(client, topic, records(2), partition=partition).error_code == 0
            client.close()

            broker.kill()  # crash: every log recovers from its recovery point
            started = time.monotonic()
            broker.start()
            print(f"start after kill -9: {time.monotonic() - started:.1f}s")
            check_sample(broker, 2)
            fds, _ = fds_and_maps(broker)
            assert fds <= OPEN_SEGMENT_CAP + OTHER_FDS
        finally:
            broker.kill()
