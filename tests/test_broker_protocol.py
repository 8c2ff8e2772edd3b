"""Protocol-level behaviour of a real broker process, driven over raw sockets."""

from __future__ import annotations

import datetime
import random
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from compat_tests.broker import BrokerProcess
from compat_tests.process_pool import ProcessPool
from gregor.wire.schema import request_type
from gregor.wire.versions import SUPPORTED, advertised
from tests.kafka_wire import WireClient, request_frame


@pytest.fixture(scope="module")
def broker(process_pool: ProcessPool) -> BrokerProcess:
    return process_pool.broker({"socket.request.max.bytes": "1048576"})


def api_versions_request(version: int) -> object:
    cls = request_type(18, version)
    if version >= 3:
        return cls(client_software_name="wire-test", client_software_version="1.0")
    return cls()


def metadata_request(version: int, topics: list[str] | None) -> object:
    cls = request_type(3, version)
    topic_cls = __import__(cls.__module__, fromlist=["x"]).MetadataRequestTopic
    entries = (
        None
        if topics is None
        else tuple(
            topic_cls(name=t, **({"topic_id": None} if version >= 10 else {})) for t in topics
        )
    )
    fields = {"topics": entries}
    if version >= 4:
        fields["allow_auto_topic_creation"] = True
    if version >= 8:
        fields["include_topic_authorized_operations"] = False
    if version in (8, 9, 10):
        fields["include_cluster_authorized_operations"] = False
    return cls(**fields)


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_api_versions_lists_what_we_serve(client: WireClient, version: int) -> None:
    response = client.call(18, version, api_versions_request(version))
    assert response.error_code == ErrorCode.none
    # What we serve, but Produce from v0 (Kafka 4's KAFKA-18659 exception).
    assert {k.api_key: (k.min_version, k.max_version) for k in response.api_keys} == advertised()


def test_api_versions_fallback_to_v0_for_unknown_version(client: WireClient) -> None:
    # A v9 request body is unknown to us; the answer must be v0 with UNSUPPORTED_VERSION.
    client.send(request_frame(18, 9, 77, b"\x00\x00\x00"))
    frame = client.read_frame()
    correlation_id, error, count = struct.unpack_from(">ihi", frame)
    assert correlation_id == 77
    assert error == ErrorCode.unsupported_version
    assert count == len(SUPPORTED)
    api_key, lo, hi = struct.unpack_from(">hhh", frame, 10)
    assert (lo, hi) == advertised()[api_key]


def test_pipelined_requests_are_answered_in_order(client: WireClient) -> None:
    versions = [0, 1, 2, 3] * 10
    client.send(
        b"".join(request_frame(18, v, i, api_versions_request(v)) for i, v in enumerate(versions))
    )
    for i, v in enumerate(versions):
        assert client.read_response(18, v, i).error_code == ErrorCode.none


def produce_request(topic: str, batch: bytes) -> object:
    cls = request_type(0, 11)
    pm = __import__(cls.__module__, fromlist=["x"])
    data = pm.PartitionProduceData(index=0, records=batch)
    return cls(
        acks=1,
        timeout=datetime.timedelta(seconds=5),
        topic_data=(pm.TopicProduceData(name=topic, partition_data=(data,)),),
    )


def fetch_request(topic: str, max_wait: datetime.timedelta, min_bytes: int) -> object:
    """Fetch v12 of partition 0 from offset 0."""
    cls = request_type(1, 12)
    fm = __import__(cls.__module__, fromlist=["x"])
    partition = fm.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
    return cls(
        max_wait=max_wait,
        min_bytes=min_bytes,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        forgotten_topics_data=(),
        rack_id="",
        topics=(fm.FetchTopic(topic=topic, partitions=(partition,)),),
    )


def fetch_first_batch(client: WireClient, topic: str) -> bytes:
    request = fetch_request(topic, datetime.timedelta(0), 0)
    [response] = client.call(1, 12, request).responses
    return response.partitions[0].records


def test_a_large_request_dripped_in_pieces_is_stored_intact(client: WireClient) -> None:
    """A frame above the in-place threshold, arriving a few bytes at a time and followed
    in the same segment by the next request, is received whole and stored byte for byte."""
    from gregor.wire.records import build_batch, decode_records, split_batches

    topic = "dripped"
    client.call(3, 12, metadata_request(12, [topic]))
    value = random.Random(7).randbytes(300_000)
    frame = request_frame(0, 11, 1, produce_request(topic, build_batch([(b"k", value, [], 5)])))
    follower = request_frame(18, 3, 2, api_versions_request(3))
    pieces = [frame[:3], frame[3:4], frame[4:1000], frame[1000:70_000], frame[70_000:-10]]
    for piece in pieces:
        client.send(piece)
    client.send(frame[-10:] + follower)
    [produced] = client.read_response(0, 11, 1).responses
    assert produced.partition_responses[0].error_code == ErrorCode.none
    assert client.read_response(18, 3, 2).error_code == ErrorCode.none
    stored = fetch_first_batch(client, topic)
    [header] = split_batches(stored)
    [record] = decode_records(stored, header)
    assert (record.key, record.value, record.timestamp) == (b"k", value, 5)


def test_a_request_before_a_bad_size_is_answered_before_the_close(client: WireClient) -> None:
    client.send(request_frame(18, 3, 1, api_versions_request(3)) + struct.pack(">i", -1))
    assert client.read_response(18, 3, 1).error_code == ErrorCode.none
    assert client.is_closed_by_peer()


@pytest.mark.parametrize("version", [0, 4, 9, 12])
def test_metadata_auto_creates_topics(
    client: WireClient, broker: BrokerProcess, version: int
) -> None:
    name = f"auto-{version}"
    response = client.call(3, version, metadata_request(version, [name]))
    [topic] = response.topics
    assert topic.error_code == ErrorCode.none and topic.name == name
    assert [p.partition_index for p in topic.partitions] == [0]
    assert topic.partitions[0].leader_id == 0
    assert [(b.node_id, b.host, b.port) for b in response.brokers] == [
        (0, "127.0.0.1", broker.port)
    ]


def test_metadata_rejects_illegal_topic_names(client: WireClient) -> None:
    response = client.call(3, 12, metadata_request(12, ["bad name!"]))
    assert response.topics[0].error_code == ErrorCode.invalid_topic_exception


@pytest.mark.parametrize(
    "frame",
    [
        struct.pack(">i", -5),  # negative size
        struct.pack(">i", 2_000_000),  # above socket.request.max.bytes
        request_frame(3, 12, 1, b"\x02\x03"),  # truncated body
        request_frame(999, 0, 1, b""),  # unknown API key
        request_frame(3, 99, 1, b""),  # unknown version
        struct.pack(">i", 3) + b"\x00\x03\x00",  # header shorter than its fixed part
        request_frame(32, 4, 1, b"\xff\xff\xff\xff\x0f\x00\x00\x00"),  # 2**32-element array
    ],
)
def test_hostile_frames_close_the_connection(broker: BrokerProcess, frame: bytes) -> None:
    bad = WireClient(broker.port)
    bad.send(frame)
    assert bad.is_closed_by_peer()
    bad.close()
    good = WireClient(broker.port)
    assert good.call(18, 3, api_versions_request(3)).error_code == ErrorCode.none
    good.close()


def test_random_garbage_never_takes_the_broker_down(broker: BrokerProcess) -> None:
    rng = random.Random(1234)
    valid = request_frame(3, 12, 1, metadata_request(12, ["garbage-topic"]))
    for i in range(200):
        mutated = bytearray(valid)
        for _ in range(rng.randint(1, 8)):
            mutated[rng.randrange(4, len(mutated))] = rng.randrange(256)
        if i % 3 == 0:
            mutated = bytearray(valid[:4]) + bytes(
                rng.randrange(256) for _ in range(len(valid) - 4)
            )
        c = WireClient(broker.port, timeout=5)
        c.send(bytes(mutated))
        c.sock.shutdown(1)  # no more requests: the broker answers or closes, then EOF
        try:
            while c.sock.recv(65536):
                pass
        except ConnectionResetError:
            pass
        c.close()
    good = WireClient(broker.port)
    assert good.call(18, 3, api_versions_request(3)).error_code == ErrorCode.none
    good.close()
    assert "Unexpected error" not in broker.log_tail(100_000)


def test_invalid_config_stops_startup_naming_the_key(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path, {"num.io.threads": "zero"})
    with pytest.raises(Exception, match="exited with code 1"):
        b.start()
    assert "num.io.threads" in b.log_tail()


def test_unknown_config_is_a_warning(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path, {"no.such.setting": "1"}) as b:
        c = WireClient(b.port)
        assert c.call(18, 3, api_versions_request(3)).error_code == ErrorCode.none
        c.close()
    assert "WARNING Unknown configuration 'no.such.setting'" in b.log_tail()


def test_sigterm_shuts_down_cleanly(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path)
    b.start()
    c = WireClient(b.port)
    c.call(3, 12, metadata_request(12, ["clean"]))
    c.close()
    b.stop()
    assert b._proc is not None and b._proc.returncode == 0
    assert (b.data_dir / ".kafka_cleanshutdown").exists()
    assert "shut down completed" in b.log_tail()


def serve_in_foreground(listener: str, log_dir: Path) -> subprocess.CompletedProcess[str]:
    """Run ``gregor serve`` until it exits (these tests expect it to fail at start-up)."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "gregor.server.cli",
            "serve",
            "--override",
            f"listeners={listener}",
            "--override",
            f"log.dirs={log_dir}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_port_in_use_is_a_clear_fatal_error(tmp_path: Path, broker: BrokerProcess) -> None:
    listener = f"PLAINTEXT://127.0.0.1:{broker.port}"
    result = serve_in_foreground(listener, tmp_path)
    assert result.returncode == 1
    assert "Fatal error" in result.stderr and "address already in use" in result.stderr
    assert "Traceback" not in result.stderr


def test_requests_behind_a_parked_one_are_held_back_not_buffered(
    broker: BrokerProcess,
) -> None:
    """A long-poll fetch parks in the purgatory; the produce requests pipelined behind it
    must wait in the client's socket, not pile up in the broker's memory."""
    import threading

    from gregor.wire.records import build_batch

    setup = WireClient(broker.port)
    setup.call(3, 12, metadata_request(12, ["parked", "behind"]))
    setup.close()
    fetch = fetch_request("parked", datetime.timedelta(seconds=30), 1)
    produce = produce_request("behind", build_batch([(None, bytes(100_000), [], 0)]))
    frames = b"".join(request_frame(0, 11, i, produce) for i in range(10))
    client = WireClient(broker.port)
    client.send(request_frame(1, 12, 0, fetch))
    sent = threading.Event()

    def flood() -> None:
        try:
            for _ in range(100):  # 100 MB behind the parked fetch
                client.send(frames)
        except OSError:
            pass
        sent.set()

    threading.Thread(target=flood, daemon=True).start()
    assert not sent.wait(3)  # held back by TCP flow control
    status = open(f"/proc/{broker._proc.pid}/status").read()  # type: ignore[union-attr]
    peak_kib = int(next(x for x in status.splitlines() if x.startswith("VmHWM")).split()[1])
    assert peak_kib < 150_000, f"broker peak RSS {peak_kib} KiB"
    other = WireClient(broker.port)
    assert other.call(18, 3, api_versions_request(3)).error_code == ErrorCode.none
    other.close()
    client.close()


def test_idle_connections_are_closed(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path, {"connections.max.idle.ms": "300"}) as b:
        c = WireClient(b.port, timeout=20)
        assert c.call(18, 3, api_versions_request(3)).error_code == ErrorCode.none
        assert c.is_closed_by_peer()  # blocks until the broker closes it
        c.close()
    assert "Closing idle connection" in b.log_tail()


def test_log_dir_in_use_is_a_clear_fatal_error(tmp_path: Path, broker: BrokerProcess) -> None:
    listener = "PLAINTEXT://127.0.0.1:0"
    result = serve_in_foreground(listener, broker.data_dir)
    assert result.returncode == 1
    assert "Fatal error" in result.stderr and "locked by another process" in result.stderr
    assert "Traceback" not in result.stderr
