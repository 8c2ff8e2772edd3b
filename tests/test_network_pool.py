"""queued.max.request.bytes against a real broker process: 30 connections streaming 90 MiB
produce frames hold the broker's peak RSS to the pool plus 100 MB (before: 403 MB, against
a 100 MiB pool), and a small request on another connection is answered promptly meanwhile
(before: 9 to 11.8 s), because large frames are admitted whole, one reservation at a
time, while small frames keep a reserve of the pool (server/network.py's MemoryPool)."""

from __future__ import annotations

import datetime
import re
import socket
import struct
import threading
import time
from pathlib import Path

from kio.schema.errors import ErrorCode

from compat_tests.broker import BrokerProcess
from gregor.apis.context import nested
from gregor.wire.schema import request_type
from gregor.wire.versions import API_VERSIONS, PRODUCE
from tests.kafka_wire import WireClient, create_topic, request_frame

MIB = 1 << 20
POOL = 100 * MIB  # queued.max.request.bytes, the default


def memory_kib(pid: int) -> dict[str, int]:
    status = Path(f"/proc/{pid}/status").read_text()
    return {k: int(v) for k, v in re.findall(r"^(VmRSS|VmHWM):\s+(\d+) kB", status, re.M)}


def big_produce_frame(size: int) -> bytes:
    """A produce request whose records are ``size`` zero bytes: received whole, then
    refused as corrupt (the broker keeps the connection)."""
    cls = request_type(PRODUCE, 9)
    topic, partition = nested(cls, "TopicProduceData"), nested(cls, "PartitionProduceData")
    request = cls(
        transactional_id=None,
        acks=1,
        timeout=datetime.timedelta(seconds=5),
        topic_data=(
            topic(name="probe", partition_data=(partition(index=0, records=bytes(size)),)),
        ),
    )
    return request_frame(PRODUCE, 9, 1, request)


def read_frame(sock: socket.socket) -> bytes:
    head = sock.recv(4, socket.MSG_WAITALL)
    assert len(head) == 4, "the broker closed the connection"
    return sock.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)


def test_large_frames_stay_within_the_pool_and_small_requests_flow(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path, {"queued.max.request.bytes": str(POOL)}) as broker:
        client = WireClient(broker.port, timeout=60)
        assert create_topic(client, "probe", 1).error_code == ErrorCode.none
        assert broker._proc is not None
        pid = broker._proc.pid
        before = memory_kib(pid)
        frame = big_produce_frame(90 * MIB)
        answered = [0]
        errors: list[BaseException] = []

        def stream() -> None:
            # One frame per connection, all sent at once: the pool admits them one by one,
            # so the last is answered after every other (some 15 s of 90 MiB frames here).
            try:
                with socket.create_connection(("127.0.0.1", broker.port), timeout=120) as sock:
                    sock.sendall(frame)
                    read_frame(sock)
                    answered[0] += 1
            except BaseException as e:  # noqa: BLE001 (reported below)
                errors.append(e)

        streams = [threading.Thread(target=stream) for _ in range(30)]
        for t in streams:
            t.start()
        time.sleep(1)  # every stream has a frame under way
        cls = request_type(API_VERSIONS, 3)
        latencies = []
        while sum(t.is_alive() for t in streams) > 1:  # while frames still queue for the pool
            started = time.monotonic()
            client.call(API_VERSIONS, 3, cls(client_software_name="t", client_software_version="1"))
            latencies.append(time.monotonic() - started)
            time.sleep(0.002)
        for t in streams:
            t.join(timeout=180)
        client.close()
        assert not errors, errors[:3]
        assert len(latencies) >= 10, latencies  # however fast this machine streams
        peak_mb = memory_kib(pid)["VmHWM"] * 1024 / 1e6
        latencies.sort()
        p90 = latencies[int(len(latencies) * 0.9)]
        median = latencies[len(latencies) // 2]
        print(
            f"\n30 x 90 MiB streams: {answered[0]} frames answered; peak RSS {peak_mb:.0f} MB "
            f"(at start {before['VmHWM'] * 1024 / 1e6:.0f} MB, bound {(POOL + 100e6) / 1e6:.0f}"
            f" MB); ApiVersions x{len(latencies)}: median {median * 1000:.0f}"
            f" ms, p90 {p90 * 1000:.0f} ms, max {latencies[-1] * 1000:.0f} ms"
        )
        assert peak_mb <= (POOL + 100e6) / 1e6
        assert answered[0] == 30  # every stream got through
        assert p90 <= 0.1 and latencies[-1] <= 1.0
