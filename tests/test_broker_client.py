"""The inter-broker client (server/broker_client.py) against a real Gregor process."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import socket
import struct
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from compat_tests.broker import BrokerProcess
from compat_tests.process_pool import ProcessPool
from gregor.apis.context import build, nested
from gregor.server.broker_client import (
    BrokerUnavailable,
    InterBrokerClient,
    RequestTimedOut,
    _Connection,
)
from gregor.server.harness.broker_process import BrokerProcess as SecuredBrokerProcess
from gregor.server.harness.certs import (
    CertificateAuthority,
    broker_ssl_properties,
    client_ssl_properties,
)
from gregor.wire.schema import request_type
from gregor.wire.versions import API_VERSIONS, FETCH, METADATA, PRODUCE
from tests.kafka_wire import create_topics_request
from tests.test_api_behaviour import records

NODE = 0
# Bounds on "promptly": far above any scheduling delay on a loaded machine, far below the
# waits they are compared with (a 60 s request timeout, a 60 s parked fetch).
PROMPT_S = 15


@pytest.fixture(scope="module")
def broker(process_pool: ProcessPool) -> BrokerProcess:
    return process_pool.broker()


class Endpoints:
    """endpoint_of for one broker; counts lookups, made once per connect."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.broker = broker
        self.lookups = 0

    def __call__(self, node_id: int) -> tuple[str, int] | None:
        self.lookups += 1
        return ("127.0.0.1", self.broker.port) if node_id == NODE else None


def run(
    broker: BrokerProcess,
    body: Callable[[InterBrokerClient, Endpoints], Awaitable[None]],
    request_timeout_ms: int = 30_000,
) -> None:
    async def main() -> None:
        endpoints = Endpoints(broker)
        client = InterBrokerClient("broker-0", endpoints, request_timeout_ms)
        try:
            await body(client, endpoints)
        finally:
            await client.close()

    asyncio.run(main())


def api_versions() -> Any:
    return request_type(API_VERSIONS, 3)(client_software_name="gregor", client_software_version="1")


def metadata(*names: str, version: int = 12) -> Any:
    cls = request_type(METADATA, version)
    topic = nested(cls, "MetadataRequestTopic")
    return build(
        cls,
        topics=tuple(build(topic, topic_id=None, name=n) for n in names),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
        include_cluster_authorized_operations=False,
    )


def produce(topic: str, partition: int, batch: bytes) -> Any:
    cls = request_type(PRODUCE, 11)
    t, p = nested(cls, "TopicProduceData"), nested(cls, "PartitionProduceData")
    return cls(
        acks=-1,
        timeout=datetime.timedelta(seconds=10),
        topic_data=(t(name=topic, partition_data=(p(index=partition, records=batch),)),),
    )


def fetch(topic: str, partitions: range, max_wait_ms: int) -> Any:
    cls = request_type(FETCH, 12)
    t, p = nested(cls, "FetchTopic"), nested(cls, "FetchPartition")
    wanted = tuple(p(partition=i, fetch_offset=0, partition_max_bytes=1 << 20) for i in partitions)
    return cls(
        max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=1,
        max_bytes=10 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(t(topic=topic, partitions=wanted),),
        forgotten_topics_data=(),
    )


async def make_topic(client: InterBrokerClient, name: str, partitions: int = 1) -> None:
    result = (await client.send(NODE, create_topics_request((name, partitions, {})), 7)).topics[0]
    assert result.error_code == ErrorCode.none, result


def test_api_versions_and_metadata_are_answered(broker: BrokerProcess) -> None:
    async def body(client: InterBrokerClient, endpoints: Endpoints) -> None:
        versions = await client.send(NODE, api_versions(), 3)  # response header v0 quirk
        assert versions.error_code == ErrorCode.none
        assert {k.api_key for k in versions.api_keys} >= {FETCH, METADATA, PRODUCE}
        await make_topic(client, "described", 2)
        flexible = await client.send(NODE, metadata("described"), 12)
        [topic] = flexible.topics
        assert topic.name == "described" and len(topic.partitions) == 2
        assert [b.port for b in flexible.brokers] == [broker.port]
        legacy = await client.send(NODE, metadata("described", version=1), 1)  # header v1/v0
        assert [len(t.partitions) for t in legacy.topics] == [2]
        assert endpoints.lookups == 1, "all on one connection"

    run(broker, body)


def test_fifty_concurrent_sends_share_one_connection_and_are_matched(
    broker: BrokerProcess,
) -> None:
    names = [f"absent-{i}" for i in range(50)]

    async def body(client: InterBrokerClient, endpoints: Endpoints) -> None:
        answers = await asyncio.gather(*(client.send(NODE, metadata(n), 12) for n in names))
        assert [a.topics[0].name for a in answers] == names
        codes = {a.topics[0].error_code for a in answers}
        assert codes == {ErrorCode.unknown_topic_or_partition}
        assert endpoints.lookups == 1, "one connection, opened once"

    run(broker, body)


def test_large_fetch_responses_arrive_whole(broker: BrokerProcess) -> None:
    """Six ~900 KB batches in one Fetch v12 answer of about 5.4 MB."""
    batch = records(1, size=900_000)

    async def body(client: InterBrokerClient, endpoints: Endpoints) -> None:
        await make_topic(client, "bulk", 6)
        for partition in range(6):
            answer = await client.send(NODE, produce("bulk", partition, batch), 11)
            assert answer.responses[0].partition_responses[0].error_code == ErrorCode.none
        response = await client.send(NODE, fetch("bulk", range(6), 0), 12)
        parts = response.responses[0].partitions
        assert [p.high_watermark for p in parts] == [1] * 6
        assert [len(p.records) for p in parts] == [len(batch)] * 6
        assert all(bytes(p.records)[-1000:] == batch[-1000:] for p in parts)
        # The records are views of the one buffer the frame was received into, not copies.
        frame = parts[0].records.obj
        assert isinstance(frame, bytearray) and all(p.records.obj is frame for p in parts)

    run(broker, body)


def test_a_request_timeout_closes_the_connection_and_the_next_send_reconnects(
    broker: BrokerProcess,
) -> None:
    async def body(client: InterBrokerClient, endpoints: Endpoints) -> None:
        await make_topic(client, "quiet")
        started = time.monotonic()
        with pytest.raises(RequestTimedOut):
            # Parked for 60 s by the broker (no data), so only our 1 s timeout can end it.
            await client.send(NODE, fetch("quiet", range(1), 60_000), 12)
        assert time.monotonic() - started < PROMPT_S
        assert isinstance(RequestTimedOut(), TimeoutError)
        versions = await client.send(NODE, api_versions(), 3)
        assert versions.error_code == ErrorCode.none
        assert endpoints.lookups == 2, "the timed-out connection was replaced"

    run(broker, body, request_timeout_ms=1000)


def test_unknown_node_is_unavailable_and_the_request_is_not_encoded(
    broker: BrokerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    encoded: list[object] = []
    monkeypatch.setattr("gregor.server.broker_client.encode", lambda r: encoded.append(r) or b"")

    async def body(client: InterBrokerClient, endpoints: Endpoints) -> None:
        with pytest.raises(BrokerUnavailable):
            await client.send(7, api_versions(), 3)
        assert isinstance(BrokerUnavailable(), ConnectionError)
        assert encoded == []  # a controller's retries to a restarting broker cost no encoding

    run(broker, body)


def test_killed_broker_is_unavailable_promptly_then_usable_after_restart(
    tmp_path: Path,
) -> None:
    with BrokerProcess(tmp_path) as victim:

        async def body(client: InterBrokerClient, endpoints: Endpoints) -> None:
            await make_topic(client, "parked")
            parked = asyncio.ensure_future(client.send(NODE, fetch("parked", range(1), 60_000), 12))
            # One turn of the loop lets the send write the request; it then awaits the
            # answer. (A request pipelined behind it to prove that would wait 60 s too:
            # a broker answers each connection's requests in order.)
            await asyncio.sleep(0)
            assert not parked.done()
            started = time.monotonic()
            victim.kill()
            with pytest.raises(BrokerUnavailable):
                await parked  # in flight: failed by the lost connection, not a timeout
            with pytest.raises(BrokerUnavailable):
                await client.send(NODE, api_versions(), 3)  # connect refused
            assert time.monotonic() - started < PROMPT_S
            await asyncio.to_thread(victim.start)  # same port, same data
            versions = await client.send(NODE, api_versions(), 3)
            assert versions.error_code == ErrorCode.none
            topics = (await client.send(NODE, metadata("parked"), 12)).topics
            assert topics[0].error_code == ErrorCode.none

        run(victim, body, request_timeout_ms=60_000)


def test_sends_queued_behind_a_refused_connect_fail_with_it_then_back_off() -> None:
    """A bound, never-listening socket refuses connects (and keeps its port ours)."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        lookups = []

        def endpoint_of(node_id: int) -> tuple[str, int]:
            lookups.append(node_id)
            return ("127.0.0.1", port)

        async def main() -> None:
            client = InterBrokerClient("broker-0", endpoint_of, 30_000)
            started = time.monotonic()
            sends = [client.send(NODE, api_versions(), 3) for _ in range(20)]
            results = await asyncio.gather(*sends, return_exceptions=True)
            assert all(isinstance(r, BrokerUnavailable) for r in results), results
            assert len(lookups) == 1, "one connect attempt for all twenty"
            assert time.monotonic() - started < PROMPT_S
            # reconnect.backoff.ms 50 then 100, less the 20% jitter: lower bounds only, from
            # the start of the attempt before (its failure, where the back-off begins, comes
            # after it; timed from this send, a loaded machine showed 32 ms of the 40).
            for least in (0.04, 0.08):
                previous, started = started, time.monotonic()
                with pytest.raises(BrokerUnavailable):
                    await client.send(NODE, api_versions(), 3)
                assert time.monotonic() - previous >= least
            await client.close()

        asyncio.run(main())


def test_close_fails_waiting_and_later_sends(broker: BrokerProcess) -> None:
    async def body(client: InterBrokerClient, endpoints: Endpoints) -> None:
        await make_topic(client, "closing")
        parked = asyncio.ensure_future(client.send(NODE, fetch("closing", range(1), 60_000), 12))
        await asyncio.sleep(0)  # one turn of the loop: the request is written
        started = time.monotonic()
        await client.close()
        with pytest.raises(BrokerUnavailable):
            await parked
        assert time.monotonic() - started < PROMPT_S
        with pytest.raises(BrokerUnavailable):
            await client.send(NODE, api_versions(), 3)

    run(broker, body)


def frame(correlation: int, body: bytes) -> bytes:
    return struct.pack(">ii", 4 + len(body), correlation) + body


@pytest.mark.parametrize("read_size", [1, 3, 4, 5, 4096])
def test_frames_split_across_reads_are_delivered_whole(read_size: int) -> None:
    """The transport hands over what the socket has: parts of a size prefix, a frame's end
    with the next one's start. Each response arrives whole, in a buffer of its own size."""
    bodies = [b"", b"x" * 10, bytes(range(256)) * 40]
    stream = b"".join(frame(i, body) for i, body in enumerate(bodies))

    async def main() -> None:
        connection = _Connection(NODE, 1 << 20)
        loop = asyncio.get_running_loop()
        waiters = [loop.create_future() for _ in bodies]
        connection.in_flight = dict(enumerate(waiters))
        pos = 0
        while pos < len(stream):
            buffer = connection.get_buffer(-1)
            n = min(len(buffer), read_size, len(stream) - pos)
            buffer[:n] = stream[pos : pos + n]
            connection.buffer_updated(n)
            pos += n
        frames = [w.result() for w in waiters]
        assert frames == [struct.pack(">i", i) + body for i, body in enumerate(bodies)]
        assert all(isinstance(f, bytearray) for f in frames)
        assert connection.open and not connection.in_flight

    asyncio.run(main())


@pytest.mark.parametrize("size", [(1 << 31) - 1, (1 << 20) + 1, 3, -1])
def test_a_response_size_out_of_bounds_closes_the_connection_unallocated(
    size: int, caplog: pytest.LogCaptureFixture
) -> None:
    """A peer announcing more than max_response_bytes (or less than a correlation id) is cut
    off at its size prefix, and the request in flight fails at once."""

    async def main() -> None:
        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            (length,) = struct.unpack(">i", await reader.readexactly(4))
            await reader.readexactly(length)
            writer.write(struct.pack(">i", size) + b"\0" * 64)
            await writer.drain()
            with contextlib.suppress(ConnectionError):
                assert await reader.read() == b"", "the client closed the connection"
            writer.close()

        server = await asyncio.start_server(answer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = InterBrokerClient(
            "broker-0", lambda _: ("127.0.0.1", port), 60_000, max_response_bytes=1 << 20
        )
        started = time.monotonic()
        try:
            with pytest.raises(BrokerUnavailable, match=f"a response frame of {size} bytes"):
                await client.send(NODE, api_versions(), 3)
        finally:
            await client.close()
            server.close()
            await server.wait_closed()
        assert time.monotonic() - started < PROMPT_S

    with caplog.at_level("WARNING", "gregor.server.broker_client"):
        asyncio.run(main())
    assert f"node 0 sent a response frame of {size} bytes (at most 1048576)" in caplog.text


def test_large_fetch_responses_arrive_whole_over_tls(tmp_path: Path) -> None:
    """asyncio's TLS transport decrypts into the frame's buffer, record by record."""
    ca = CertificateAuthority(tmp_path / "ca")
    overrides = {"listeners": "SSL://127.0.0.1:0", **broker_ssl_properties(ca.server("broker"))}
    settings = {"security.protocol": "SSL", **client_ssl_properties(ca.truststore)}
    batch = records(1, size=900_000)
    with SecuredBrokerProcess(tmp_path / "broker", overrides, client_config=settings) as tls:

        async def main() -> None:
            client = InterBrokerClient(
                "broker-0", lambda _: ("127.0.0.1", tls.port), 30_000, client_settings=settings
            )
            try:
                await make_topic(client, "sealed", 3)
                for partition in range(3):
                    answer = await client.send(NODE, produce("sealed", partition, batch), 11)
                    assert answer.responses[0].partition_responses[0].error_code == ErrorCode.none
                response = await client.send(NODE, fetch("sealed", range(3), 0), 12)
                parts = response.responses[0].partitions
                assert [len(p.records) for p in parts] == [len(batch)] * 3
                assert all(p.records[-1000:] == batch[-1000:] for p in parts)
            finally:
                await client.close()

        asyncio.run(main())
