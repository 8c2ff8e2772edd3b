"""Quotas that reconnecting cannot evade, against real broker processes.

- A client's throttle follows its identity (user, client id), not the connection its
  response went to: a producer that opens a new connection per request stays within its
  produce quota (a client-id quota, and the default client-id quota).
- KIP-612 connection creation rates: ``connection_creation_rate`` per IP through
  AlterClientQuotas (validated as Kafka does, described, persisted, enforced: a flood of
  connections from 127.0.0.1 is held to the rate while 127.0.0.2 is not), and
  ``max.connection.creation.rate`` broker-wide, from server.properties and dynamically.

Rates are measured with ``quota.window.num=2`` so that a first burst is one window's worth
(with Kafka's 11 windows the first ten seconds' worth may come at once, README).
Also the pure rate and gate logic of server/quotas.py.
"""

from __future__ import annotations

import datetime
import json
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from compat_tests.broker import BrokerProcess
from compat_tests.process_pool import ProcessPool
from gregor.apis.context import build, nested
from gregor.controller.quota_entities import DEFAULT, IpEntity, entity_path, parse_entity_path
from gregor.server.config import BrokerConfig, ConfigError
from gregor.server.quotas import UNLIMITED_RATE, ClientQuotas, ConnectionRates
from gregor.wire.records import build_batch
from gregor.wire.schema import request_type
from gregor.wire.versions import API_VERSIONS, PRODUCE
from tests.kafka_wire import WireClient, create_topic, request_frame
from tests.test_client_quotas import alter, describe
from tests.test_dynamic_broker_configs import delete as delete_broker_config
from tests.test_dynamic_broker_configs import set_one

MIB = 1 << 20
WINDOWS = {"quota.window.num": "2", "quota.window.size.seconds": "1"}


# -- pure ---------------------------------------------------------------------------
def test_ip_entity_paths() -> None:
    assert entity_path(IpEntity("127.0.0.1")) == "ips/127.0.0.1"
    assert parse_entity_path("ips/<default>") == IpEntity(DEFAULT)
    assert parse_entity_path("ips/%3A%3A1") == IpEntity("%3A%3A1")
    assert parse_entity_path("clients/c") == (None, "c")


def test_ip_rate_closes_over_the_quota_and_uncounts_the_connection() -> None:
    rates = ConnectionRates(2, 1)
    rates.set_ip_rates({"10.0.0.1": 5})
    delays = [rates.record_ip("PLAINTEXT", False, "10.0.0.1", 1000) for _ in range(8)]
    # A first span counts as one window: 5 connections pass, the 6th is over.
    assert delays[:5] == [0] * 5 and all(0 < d <= 1000 for d in delays[5:])
    assert rates.ip_throttles == 3
    assert rates.record_ip("PLAINTEXT", False, "10.0.0.2", 1000) == 0  # no default quota
    rates.set_ip_rates({None: 1})
    assert rates.record_ip("PLAINTEXT", False, "10.0.0.2", 1000) == 0
    assert rates.record_ip("PLAINTEXT", False, "10.0.0.2", 1000) > 0
    # Throttled connections were taken back out: two seconds on, the IP is within again.
    rates.set_ip_rates({"10.0.0.1": 5})
    assert rates.record_ip("PLAINTEXT", False, "10.0.0.1", 3500) == 0


def test_broker_and_listener_rates_and_the_protected_listener() -> None:
    rates = ConnectionRates(2, 1)
    rates.set_limits(3, {"CLIENTS": 2})
    assert [rates.record_listener("CLIENTS", False, 0) for _ in range(3)][:2] == [0, 0]
    assert rates.record_listener("CLIENTS", False, 0) > 0
    # The broker-wide rate (3) is used up by now; the inter-broker listener ignores it.
    assert rates.record_listener("INTERNAL", True, 0) == 0
    assert rates.record_listener("OTHER", False, 0) > 0
    rates.set_limits(UNLIMITED_RATE, {})
    assert rates.record_listener("CLIENTS", False, 0) == 0


def test_server_properties_keys() -> None:
    config = BrokerConfig(
        {
            "max.connection.creation.rate": "30",
            "listener.name.plaintext.max.connection.creation.rate": "7",
        }
    )
    assert config["max.connection.creation.rate"] == 30
    assert config.listener_connection_creation_rates == {"PLAINTEXT": 7}
    assert BrokerConfig({})["max.connection.creation.rate"] == UNLIMITED_RATE
    with pytest.raises(ConfigError, match="listener.name.plaintext.max.connection"):
        BrokerConfig({"listener.name.plaintext.max.connection.creation.rate": "-1"})


def produce_frame(client_id: str, size: int, correlation_id: int = 1) -> bytes:
    cls = request_type(PRODUCE, 9)
    batch = build_batch([(None, b"x" * size, [], int(time.time() * 1000))])
    body = build(
        cls,
        transactional_id=None,
        acks=1,
        timeout=datetime.timedelta(seconds=5),
        topic_data=(
            nested(cls, "TopicProduceData")(
                name="t",
                partition_data=(nested(cls, "PartitionProduceData")(index=0, records=batch),),
            ),
        ),
    )
    return request_frame(PRODUCE, 9, correlation_id, body, client_id=client_id)


def test_gate_mutes_every_request_of_a_throttled_group() -> None:
    quotas = ClientQuotas(2, 1)
    quotas.apply({(None, "app"): {"producer_byte_rate": 1000.0}})
    frame = produce_frame("app", 10)[4:]  # as the network layer holds it: no size prefix
    assert quotas.gate("ANONYMOUS", frame) == 0
    now = time.time_ns() // 1_000_000
    delay = quotas.produce.record("ANONYMOUS", "app", 5000, now)
    assert delay > 0
    assert 0 < quotas.gate("ANONYMOUS", frame) <= delay  # on any connection
    assert quotas.gate("ANONYMOUS", produce_frame("other", 10)[4:]) == 0  # another group
    api_versions = request_frame(
        API_VERSIONS, 0, 1, request_type(API_VERSIONS, 0)(), client_id="app"
    )
    assert quotas.gate("ANONYMOUS", api_versions[4:]) == 0  # only produce waits for produce


# -- against a broker -----------------------------------------------------------------
def read_frame(sock: socket.socket) -> bytes:
    head = sock.recv(4, socket.MSG_WAITALL)
    if len(head) < 4:
        raise ConnectionError("closed")
    (size,) = struct.unpack(">i", head)
    body = sock.recv(size, socket.MSG_WAITALL)
    if len(body) < size:
        raise ConnectionError("closed")
    return body


def reconnecting_producer(
    port: int, client_id: str, seconds: float, size: int, threads: int = 1
) -> tuple[int, float]:
    """A new connection for every produce request (acks=1) for ``seconds``, from
    ``threads`` threads; the bytes acknowledged and the seconds the run took."""
    frame = produce_frame(client_id, size)
    started = time.monotonic()
    acked = [0]
    lock = threading.Lock()

    def run() -> None:
        while time.monotonic() - started < seconds:
            with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
                sock.sendall(frame)
                read_frame(sock)
            with lock:
                acked[0] += len(frame)

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return acked[0], time.monotonic() - started


@pytest.fixture(scope="module")
def broker(process_pool: ProcessPool) -> BrokerProcess:
    proc = process_pool.broker(WINDOWS)
    client = WireClient(proc.port)
    assert create_topic(client, "t", 1).error_code == ErrorCode.none
    client.close()
    return proc


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[WireClient]:
    c = WireClient(broker.port)
    yield c
    c.close()


@pytest.mark.parametrize(
    "entity,threads",
    [
        ({"client-id": "recon"}, 1),
        ({"client-id": "recon"}, 4),
        ({"client-id": None}, 1),
        ({"user": None}, 1),  # every plaintext client is ANONYMOUS: the default user's quota
    ],
)
def test_reconnecting_producer_stays_within_its_quota(
    broker: BrokerProcess, client: WireClient, entity: dict[str, str | None], threads: int
) -> None:
    quota = MIB
    assert alter(client, [(entity, {"producer_byte_rate": quota})]) == [(ErrorCode.none, None)]
    try:
        acked, elapsed = reconnecting_producer(broker.port, "recon", 5.0, 256 << 10, threads)
    finally:
        assert alter(client, [(entity, {"producer_byte_rate": None})])[0][0] == ErrorCode.none
    rate = acked / elapsed
    print(f"reconnecting producer x{threads} under {entity}: {rate / MIB:.2f} MiB/s (quota 1)")
    # One window's burst (quota.window.size.seconds), then the quota: unthrottled, a
    # connection per request would be acknowledged tens of MiB a second here.
    window_s = int(WINDOWS["quota.window.size.seconds"])
    assert acked <= 1.2 * quota * (elapsed + window_s), f"{rate / MIB:.2f} MiB/s"
    assert rate >= 0.5 * quota  # held to the quota, not starved


def connect_and_ask(port: int, source: str, timeout: float) -> bool:
    """Connect from ``source``, send ApiVersions; True if answered within ``timeout``."""
    try:
        with socket.create_connection(
            ("127.0.0.1", port), timeout=timeout, source_address=(source, 0)
        ) as sock:
            sock.sendall(request_frame(API_VERSIONS, 0, 1, request_type(API_VERSIONS, 0)()))
            read_frame(sock)
            return True
    except (OSError, ConnectionError):
        return False


def flood(port: int, source: str, seconds: float, threads: int = 8) -> tuple[int, int]:
    """Connections opened as fast as ``threads`` threads can for ``seconds``: how many
    were answered and how many were not (closed or timed out)."""
    counts = [0, 0]
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def run() -> None:
        while time.monotonic() < deadline:
            ok = connect_and_ask(port, source, max(0.05, deadline - time.monotonic()))
            with lock:
                counts[0 if ok else 1] += 1

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return counts[0], counts[1]


def entries(response: Any) -> dict[frozenset, dict[str, float]]:
    return {
        frozenset((e.entity_type, e.entity_name) for e in entry.entity): {
            v.key: v.value for v in entry.values
        }
        for entry in response.entries
    }


def test_ip_connection_creation_rate(broker: BrokerProcess, client: WireClient) -> None:
    rate = 5
    assert alter(client, [({"ip": "127.0.0.1"}, {"connection_creation_rate": rate})]) == [
        (ErrorCode.none, None)
    ]
    try:
        shown = entries(describe(client, [("ip", 0, "127.0.0.1")]))
        assert shown == {frozenset({("ip", "127.0.0.1")}): {"connection_creation_rate": 5.0}}
        assert entries(describe(client, [("ip", 2, None)])) == shown
        assert entries(describe(client, [("client-id", 2, None)])) == {}
        seconds = 4.0
        answered, refused = flood(broker.port, "127.0.0.1", seconds)
        other, _ = flood(broker.port, "127.0.0.2", 1.0, threads=2)  # not limited
    finally:
        assert alter(client, [({"ip": "127.0.0.1"}, {"connection_creation_rate": None})]) == [
            (ErrorCode.none, None)
        ]
    print(f"IP flood at {rate}/s for {seconds}s: {answered} answered, {refused} refused")
    # One window's burst, then the rate (the throttled are closed after their delay).
    assert answered <= rate * (seconds + 1) * 1.2 + 2, (answered, refused)
    assert answered >= rate and refused > 0
    assert other > 3 * rate
    assert "over its connection_creation_rate quota" in broker.log_path.read_text()
    assert entries(describe(client, [("ip", 2, None)])) == {}


def test_default_ip_quota_is_described_and_persisted(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path, WINDOWS) as b:
        c = WireClient(b.port)
        assert alter(c, [({"ip": None}, {"connection_creation_rate": 2})]) == [
            (ErrorCode.none, None)
        ]
        assert alter(c, [({"ip": "::1"}, {"connection_creation_rate": 7})]) == [
            (ErrorCode.none, None)
        ]
        c.close()
        b.restart()
        c = WireClient(b.port)
        want = {
            frozenset({("ip", None)}): {"connection_creation_rate": 2.0},
            frozenset({("ip", "::1")}): {"connection_creation_rate": 7.0},
        }
        assert entries(describe(c, [])) == want
        assert entries(describe(c, [("ip", 1, None)])) == {
            frozenset({("ip", None)}): {"connection_creation_rate": 2.0}
        }
        c.close()
        answered, refused = flood(b.port, "127.0.0.2", 3.0, threads=4)
        assert answered <= 2 * 4 * 1.2 + 2 and refused > 0, (answered, refused)


def paced(port: int, seconds: float) -> int:
    """Connections answered in ``seconds`` (each waits as long as it must)."""
    answered, _ = flood(port, "127.0.0.1", seconds, threads=8)
    return answered


@pytest.mark.parametrize(
    "key", ["max.connection.creation.rate", "listener.name.plaintext.max.connection.creation.rate"]
)
def test_max_connection_creation_rate_from_server_properties(tmp_path: Path, key: str) -> None:
    with BrokerProcess(tmp_path, {**WINDOWS, key: "10"}) as b:
        seconds = 4.0
        started = time.monotonic()
        answered = paced(b.port, seconds)
        elapsed = time.monotonic() - started
        print(f"{key}=10: {answered} connections in {elapsed:.1f}s")
        assert answered <= 10 * (elapsed + 1) * 1.2 + 2
        assert answered >= 10 * (seconds - 1)  # delayed, not refused


@pytest.mark.parametrize(
    "name,key",
    [
        ("", "max.connection.creation.rate"),  # the cluster default
        ("0", "listener.name.plaintext.max.connection.creation.rate"),  # this broker's
    ],
)
def test_max_connection_creation_rate_dynamically(
    broker: BrokerProcess, client: WireClient, name: str, key: str
) -> None:
    free = paced(broker.port, 1.0)
    assert free > 40  # unlimited: as fast as the threads go
    assert set_one(client, name, key, "10")[0] == ErrorCode.none
    try:
        started = time.monotonic()
        answered = paced(broker.port, 3.0)
        elapsed = time.monotonic() - started
    finally:
        delete_broker_config(client, name, key)
    print(f"dynamic {key}=10: {answered} in {elapsed:.1f}s (unlimited: {free} in 1s)")
    assert answered <= 10 * (elapsed + 1) * 1.2 + 2
    time.sleep(1.0)  # the rate's window passes
    assert paced(broker.port, 1.0) > 40


def test_ip_quotas_go_through_zookeeper(tmp_path: Path) -> None:
    """Cluster mode: /config/ips/<ip> as Kafka's ZooKeeper-mode brokers wrote it, with a
    change notification; the other broker describes and enforces it. (127.0.0.2: the
    brokers' own connections come from 127.0.0.1.)"""
    from kazoo.client import KazooClient

    from gregor.server.harness.cluster import Cluster

    with Cluster(tmp_path, brokers=2, overrides=WINDOWS) as cluster:
        first, second = cluster.brokers[1], cluster.brokers[2]
        one = WireClient(first.port)
        assert alter(one, [({"ip": "127.0.0.2"}, {"connection_creation_rate": 3})]) == [
            (ErrorCode.none, None)
        ]
        one.close()
        zk = KazooClient(hosts=cluster.zookeeper.connect)
        zk.start(10)
        try:
            data, _ = zk.get("/config/ips/127.0.0.2")
            assert json.loads(data) == {
                "version": 1,
                "config": {"connection_creation_rate": "3"},
            }
            notices = sorted(zk.get_children("/config/changes"))
            last = json.loads(zk.get(f"/config/changes/{notices[-1]}")[0])
            assert last["entity_path"] == "ips/127.0.0.2"
        finally:
            zk.stop()
            zk.close()
        two = WireClient(second.port)
        want = {frozenset({("ip", "127.0.0.2")}): {"connection_creation_rate": 3.0}}
        deadline = time.monotonic() + 15
        while entries(describe(two, [("ip", 0, "127.0.0.2")])) != want:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        two.close()
        time.sleep(0.5)  # the notification is applied by the follower of /config/changes
        answered, refused = flood(second.port, "127.0.0.2", 3.0, threads=4)
        assert answered <= 3 * 4 * 1.2 + 2 and refused > 0, (answered, refused)
        assert flood(second.port, "127.0.0.1", 1.0, threads=2)[0] > 20
