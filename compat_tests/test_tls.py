"""Every client of the compatibility matrix over TLS, in its own configuration style: the SSL
listener (server certificate checked against the test CA) and MTLS, a listener of a custom
name mapped to SSL that requires a client certificate (mutual TLS). Each produces records
and consumes them back, against one broker and against a 3-broker cluster (its brokers
replicate over PLAINTEXT, the inter-broker listener; topics are created there too)."""

from __future__ import annotations

import asyncio
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka import Producer
from kafka import KafkaProducer

from compat_tests import java_client as java
from compat_tests import security_clients as styles
from compat_tests.broker import BrokerProcess
from compat_tests.cluster import ClusterBroker
from compat_tests.conftest import CLUSTER_BROKERS, MODES
from compat_tests.matrix import compat
from compat_tests.process_pool import ProcessPool
from compat_tests.records import Rec
from gregor.server.harness.certs import CertificateAuthority, Identity, broker_ssl_properties

COUNT = 20
TIMEOUT_S = 60.0
Broker = BrokerProcess | ClusterBroker


class Secured:
    """The broker (or cluster) and the certificates its clients use."""

    def __init__(self, broker: Broker, ca: CertificateAuthority, client: Identity) -> None:
        self.broker = broker
        self.ca = ca
        self.client = client
        first = broker.first if isinstance(broker, ClusterBroker) else broker
        self._output = first.start_output()

    def port(self, listener: str) -> int:
        return int(re.findall(rf"\b{listener}://127\.0\.0\.1:(\d+)", self._output)[-1])

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.port(listener)}"


@pytest.fixture(scope="module", params=MODES)
def secured(
    request: pytest.FixtureRequest,
    process_pool: ProcessPool,
    tmp_path_factory: pytest.TempPathFactory,
) -> Secured:
    ca = CertificateAuthority(tmp_path_factory.mktemp("tls"))
    server = ca.server("broker")
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,MTLS://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL",
        **{f"listener.name.ssl.{k}": v for k, v in broker_ssl_properties(server).items()},
        **{
            f"listener.name.mtls.{k}": v
            for k, v in broker_ssl_properties(server, "PEM", "required").items()
        },
    }
    broker: Broker
    if request.param == "cluster":
        broker = process_pool.cluster_broker(overrides, CLUSTER_BROKERS)
    else:
        broker = process_pool.broker(overrides)
    return Secured(broker, ca, ca.client("client", subject="CN=client,O=Gregor"))


@pytest.fixture
def topic(secured: Secured) -> Iterator[str]:
    """A new topic with a replica on every broker, created over PLAINTEXT."""
    name = f"tls-{uuid.uuid4().hex[:12]}"
    java.create_topic(secured.broker, name, 1)  # type: ignore[arg-type]
    secured.broker.wait_for_topic(name, 1)
    yield name


LISTENERS = ["SSL", "MTLS"]
VALUES = [f"record-{i}".encode() * (i + 1) for i in range(COUNT)]


def _login(secured: Secured, listener: str) -> styles.Login:
    """SSL: the server checked against the test CA; MTLS: the client's certificate too."""
    identity = secured.client if listener == "MTLS" else None
    return styles.Login("SSL", secured.ca.truststore, identity)


@compat("java", "security")
@pytest.mark.parametrize("listener", LISTENERS)
def test_java(secured: Secured, topic: str, listener: str) -> None:
    """kafka-clients: PKCS12 truststore and keystore, as Java clients are set up."""
    configs = styles.java(_login(secured, listener))
    bootstrap = secured.bootstrap(listener)
    now = int(time.time() * 1000)
    stdin = java.produce_input([Rec(0, None, v, (), now) for v in VALUES])
    java.run("produce", bootstrap, topic, configs={**configs, "acks": "all"}, stdin=stdin)
    lines = java.run("consume", bootstrap, topic, options={"count": str(COUNT)}, configs=configs)
    assert [r.value for r in java.parse_consumed(lines)] == VALUES


@compat("confluent", "security")
@pytest.mark.parametrize("listener", LISTENERS)
def test_confluent(secured: Secured, topic: str, listener: str) -> None:
    """librdkafka's style: PEM files by location."""
    conf: dict[str, Any] = {
        "bootstrap.servers": secured.bootstrap(listener),
        **styles.librdkafka(_login(secured, listener)),
    }
    producer = Producer({**conf, "acks": "all"})
    for value in VALUES:
        producer.produce(topic, value)
    assert producer.flush(TIMEOUT_S) == 0
    assert styles.confluent_consume(conf, topic, COUNT) == VALUES


@compat("kcat", "security")
@pytest.mark.parametrize("listener", LISTENERS)
def test_kcat(secured: Secured, topic: str, listener: str) -> None:
    options = styles.kcat_options(_login(secured, listener))
    base = ["kcat", "-b", secured.bootstrap(listener), *options, "-t", topic]
    produced = subprocess.run(
        [*base, "-P"], input=b"".join(v + b"\n" for v in VALUES), capture_output=True
    )
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run(
        [*base, "-C", "-o", "beginning", "-e", "-c", str(COUNT)],
        capture_output=True,
        timeout=TIMEOUT_S,
    )
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines() == VALUES


@compat("kafka-python", "security")
@pytest.mark.parametrize("listener", LISTENERS)
def test_kafka_python(secured: Secured, topic: str, listener: str) -> None:
    """kafka-python's style: ssl_cafile, ssl_certfile, ssl_keyfile, ssl_password."""
    options = {
        "bootstrap_servers": secured.bootstrap(listener),
        **styles.kafka_python(_login(secured, listener)),
    }
    producer = KafkaProducer(acks="all", **options)
    for value in VALUES:
        producer.send(topic, value)
    producer.flush(TIMEOUT_S)
    producer.close()
    assert styles.kafka_python_consume(options, topic, COUNT) == VALUES


@compat("aiokafka", "security")
@pytest.mark.parametrize("listener", LISTENERS)
def test_aiokafka(secured: Secured, topic: str, listener: str) -> None:
    """aiokafka's style: an SSLContext made by its create_ssl_context helper."""
    options: dict[str, Any] = {
        "bootstrap_servers": secured.bootstrap(listener),
        **styles.aiokafka(_login(secured, listener)),
    }

    async def round_trip() -> list[bytes]:
        producer = AIOKafkaProducer(acks="all", **options)
        await producer.start()
        try:
            for value in VALUES:
                await producer.send(topic, value)
            await producer.flush()
        finally:
            await producer.stop()
        return await styles.aiokafka_consume(options, topic, COUNT)

    assert asyncio.run(round_trip()) == VALUES
