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
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.helpers import create_ssl_context
from confluent_kafka import Consumer, Producer
from kafka import KafkaConsumer, KafkaProducer

from compat_tests import java_client as java
from compat_tests.broker import BrokerProcess
from compat_tests.cluster import ClusterBroker
from compat_tests.conftest import CLUSTER_BROKERS, MODES
from compat_tests.process_pool import ProcessPool
from compat_tests.records import Rec
from gregor.server.harness.certs import (
    CertificateAuthority,
    Identity,
    broker_ssl_properties,
    client_ssl_properties,
)

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


def _identity(secured: Secured, listener: str) -> Identity | None:
    return secured.client if listener == "MTLS" else None


@pytest.mark.parametrize("listener", LISTENERS)
def test_java(secured: Secured, topic: str, listener: str) -> None:
    """kafka-clients: PKCS12 truststore and keystore, as Java clients are set up."""
    configs = {
        "security.protocol": "SSL",
        **client_ssl_properties(secured.ca.truststore, _identity(secured, listener)),
    }
    bootstrap = secured.bootstrap(listener)
    now = int(time.time() * 1000)
    stdin = java.produce_input([Rec(0, None, v, (), now) for v in VALUES])
    java.run("produce", bootstrap, topic, configs={**configs, "acks": "all"}, stdin=stdin)
    lines = java.run("consume", bootstrap, topic, options={"count": str(COUNT)}, configs=configs)
    assert [r.value for r in java.parse_consumed(lines)] == VALUES


def _librdkafka(secured: Secured, listener: str) -> dict[str, str]:
    """librdkafka's style (confluent-kafka, kcat): PEM files by location."""
    conf = {"security.protocol": "SSL", "ssl.ca.location": str(secured.ca.truststore.pem)}
    identity = _identity(secured, listener)
    if identity is not None:
        conf["ssl.certificate.location"] = str(identity.cert)
        conf["ssl.key.location"] = str(identity.key)
        assert identity.key_password is not None
        conf["ssl.key.password"] = identity.key_password
    return conf


@pytest.mark.parametrize("listener", LISTENERS)
def test_confluent(secured: Secured, topic: str, listener: str) -> None:
    conf: dict[str, Any] = {
        "bootstrap.servers": secured.bootstrap(listener),
        **_librdkafka(secured, listener),
    }
    producer = Producer({**conf, "acks": "all"})
    for value in VALUES:
        producer.produce(topic, value)
    assert producer.flush(TIMEOUT_S) == 0
    consumer = Consumer({**conf, "group.id": topic, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(got) < COUNT and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.value())
    finally:
        consumer.close()
    assert got == VALUES


@pytest.mark.parametrize("listener", LISTENERS)
def test_kcat(secured: Secured, topic: str, listener: str) -> None:
    options = [a for k, v in _librdkafka(secured, listener).items() for a in ("-X", f"{k}={v}")]
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


def _python_ssl(secured: Secured, listener: str) -> dict[str, Any]:
    """kafka-python's style: ssl_cafile, ssl_certfile, ssl_keyfile, ssl_password."""
    options: dict[str, Any] = {
        "security_protocol": "SSL",
        "ssl_cafile": str(secured.ca.truststore.pem),
    }
    identity = _identity(secured, listener)
    if identity is not None:
        options |= {
            "ssl_certfile": str(identity.cert),
            "ssl_keyfile": str(identity.key),
            "ssl_password": identity.key_password,
        }
    return options


@pytest.mark.parametrize("listener", LISTENERS)
def test_kafka_python(secured: Secured, topic: str, listener: str) -> None:
    options = {"bootstrap_servers": secured.bootstrap(listener), **_python_ssl(secured, listener)}
    producer = KafkaProducer(acks="all", **options)
    for value in VALUES:
        producer.send(topic, value)
    producer.flush(TIMEOUT_S)
    producer.close()
    consumer = KafkaConsumer(
        topic, auto_offset_reset="earliest", consumer_timeout_ms=int(TIMEOUT_S * 1000), **options
    )
    got = []
    for message in consumer:
        got.append(message.value)
        if len(got) == COUNT:
            break
    consumer.close()
    assert got == VALUES


@pytest.mark.parametrize("listener", LISTENERS)
def test_aiokafka(secured: Secured, topic: str, listener: str) -> None:
    """aiokafka's style: an SSLContext made by its create_ssl_context helper."""
    identity = _identity(secured, listener)
    context = create_ssl_context(
        cafile=str(secured.ca.truststore.pem),
        certfile=None if identity is None else str(identity.cert),
        keyfile=None if identity is None else str(identity.key),
        password=None if identity is None else identity.key_password,
    )
    options: dict[str, Any] = {
        "bootstrap_servers": secured.bootstrap(listener),
        "security_protocol": "SSL",
        "ssl_context": context,
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
        consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **options)
        await consumer.start()
        got: list[bytes] = []
        try:
            async with asyncio.timeout(TIMEOUT_S):
                async for message in consumer:
                    got.append(message.value)
                    if len(got) == COUNT:
                        break
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(round_trip()) == VALUES
