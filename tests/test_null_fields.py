"""Null where Kafka's schemas forbid it: refused at decode time, never seen by a handler.

Valid requests of every API and version we serve are mutated into null lengths (a compact
0, an int16 or int32 -1) at every position. kio's own reader takes many of these as None
in non-nullable arrays; our decoders (schema-driven and hand-written) must refuse them,
and the broker must close such a connection with one warning and no traceback while a
well-behaved client keeps being answered.
"""

from __future__ import annotations

import asyncio
import functools
import struct
import time
from collections.abc import Iterator
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

import pytest
from kio.serial import entity_reader
from kio.serial._introspect import is_optional

from compat_tests.broker import BrokerProcess
from compat_tests.process_pool import ProcessPool
from gregor.apis.dispatch import FAST_DECODERS
from gregor.wire import versions as v
from gregor.wire.schema import SchemaDecodeError, decode, request_type
from tests.kafka_wire import WireClient, request_frame
from tests.kio_examples import example, kio_encode

# One in this many mutations that leave no forbidden null is sent to the broker too, to
# keep the run short; every mutation is checked against the decoders in-process.
SAMPLE_EVERY = 8


def forbidden_null(entity: Any) -> bool:
    """True if a field the schema does not let be null is None, at any depth."""
    for field in fields(entity):
        value = getattr(entity, field.name)
        if value is None:
            if not is_optional(field):
                return True
        elif is_dataclass(value):
            if forbidden_null(value):
                return True
        elif isinstance(value, tuple):
            if any(is_dataclass(item) and forbidden_null(item) for item in value):
                return True
    return False


def null_mutations() -> Iterator[tuple[int, int, bytes, bool]]:
    """(api, version, body, has a forbidden null as kio reads it) for every mutation of a
    valid request that kio's native reader still accepts."""
    for api, (low, high) in v.SUPPORTED.items():
        for version in range(low, high + 1):
            entity_type = request_type(api, version)
            nulls = (b"\x00",) if entity_type.__flexible__ else (b"\xff\xff", b"\xff" * 4)
            read = entity_reader(entity_type)
            for full in (True, False):
                seed = kio_encode(example(entity_type, full))
                for at in range(len(seed)):
                    for null in nulls:
                        body = seed[:at] + null + seed[at + len(null) :]
                        if body == seed:
                            continue
                        try:
                            native, _ = read(body, 0)
                        except Exception:  # noqa: BLE001 - kio rejects it: not our case
                            continue
                        yield api, version, body, forbidden_null(native)


@functools.cache
def mutations() -> list[tuple[int, int, bytes, bool]]:
    """Computed when a test first asks, not at collection (seconds, in every worker)."""
    return list(null_mutations())


def our_decode(api: int, version: int, body: bytes) -> Any:
    fast = FAST_DECODERS.get(api)
    if fast is not None:
        return fast(version, body, 0)
    return decode(request_type(api, version), body)


def test_every_forbidden_null_is_refused_at_decode_time() -> None:
    offending = [m for m in mutations() if m[3]]
    # Every API with a non-nullable array or string has some; the seeds reach them all.
    assert {m[0] for m in offending} >= {
        v.FIND_COORDINATOR,
        v.DESCRIBE_GROUPS,
        v.LIST_OFFSETS,
        v.DELETE_TOPICS,
        v.CREATE_TOPICS,
        v.DESCRIBE_CONFIGS,
        v.LEAVE_GROUP,
        v.JOIN_GROUP,
        v.SYNC_GROUP,
        v.OFFSET_FETCH,
        v.DELETE_GROUPS,
        v.LIST_GROUPS,
        v.PRODUCE,
        v.FETCH,
        v.OFFSET_COMMIT,
    }
    for api, version, body, _ in offending:
        with pytest.raises(SchemaDecodeError):
            our_decode(api, version, body)
    for api, version, body, _ in mutations():
        try:
            entity = our_decode(api, version, body)
        except SchemaDecodeError:
            continue
        if api not in FAST_DECODERS:
            assert not forbidden_null(entity), (api, version, body)


@pytest.fixture(scope="module")
def broker(process_pool: ProcessPool) -> BrokerProcess:
    return process_pool.broker(
        {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "3"}
    )


async def _send_one(port: int, frame: bytes, gate: asyncio.Semaphore) -> None:
    async with gate:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(frame)
            await writer.drain()
            # An answer, a close, or a request parked in the purgatory (a Fetch, a
            # JoinGroup): any of them will do; what matters is the broker's log.
            try:
                await asyncio.wait_for(reader.read(4), 2.0)
            except (TimeoutError, ConnectionError):
                pass
        finally:
            writer.close()


def _metadata_round_trip(client: WireClient) -> float:
    started = time.monotonic()
    body = request_type(v.METADATA, 1)(topics=None)
    response = client.call(v.METADATA, 1, body)
    assert response.brokers
    return time.monotonic() - started


def test_broker_refuses_null_mutations_without_a_traceback(broker: BrokerProcess) -> None:
    sent = [m for i, m in enumerate(mutations()) if m[3] or i % SAMPLE_EVERY == 0]
    frames = [
        request_frame(api, version, n, body) for n, (api, version, body, _) in enumerate(sent)
    ]

    async def fuzz() -> list[float]:
        gate = asyncio.Semaphore(16)
        tasks = [asyncio.create_task(_send_one(broker.port, f, gate)) for f in frames]
        client = WireClient(broker.port)
        latencies = []
        try:
            while not all(t.done() for t in tasks):
                latencies.append(await asyncio.to_thread(_metadata_round_trip, client))
                await asyncio.sleep(0.05)
        finally:
            client.close()
        await asyncio.gather(*tasks)
        return latencies

    latencies = asyncio.run(fuzz())
    assert broker.running
    log = broker.log_path.read_text(errors="replace")
    assert "Traceback" not in log
    assert " ERROR " not in log
    assert "malformed" in log
    # The well-behaved client was answered throughout (a generous bound: the machine is
    # shared, and the broker serves hundreds of hostile connections meanwhile).
    assert latencies and max(latencies) < 5.0, latencies
    client = WireClient(broker.port)
    assert _metadata_round_trip(client) < 5.0
    client.close()


def test_forbidden_null_closes_the_connection_with_one_warning(tmp_path: Path) -> None:
    # DescribeGroups v0 with a null groups array: the traceback, now one warning.
    # A broker of its own: malformed-request lines are rate-limited, so the module's broker,
    # fuzzed above, may be inside its interval.
    with BrokerProcess(tmp_path) as broker:
        client = WireClient(broker.port)
        client.send(request_frame(v.DESCRIBE_GROUPS, 0, 1, struct.pack(">i", -1)))
        assert client.sock.recv(1) == b""  # closed, with no answer
        client.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            log = broker.log_path.read_text(errors="replace")
            if "malformed" in log:
                break
            time.sleep(0.05)
    assert log.count("malformed") == 1
    line = next(x for x in reversed(log.splitlines()) if "malformed" in x)
    assert "WARNING" in line and "DescribeGroupsRequest v0" in line and "non-nullable" in line
