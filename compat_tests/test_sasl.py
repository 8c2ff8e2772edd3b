"""Every client of the compatibility matrix over SASL_PLAINTEXT and SASL_SSL, in its own
configuration style, with PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (credentials made with
AlterUserScramCredentials) and OAUTHBEARER (Kafka's unsecured tokens): each produces,
consumes in a group and, where the client has them, commits a transaction. One broker for
the module (PLAINTEXT too, where topics and credentials are made)."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import time
import uuid
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.abc import AbstractTokenProvider
from aiokafka.helpers import create_ssl_context
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kafka import KafkaConsumer, KafkaProducer
from kafka.net.sasl.oauth import AbstractTokenProvider as KafkaPythonTokenProvider

from compat_tests import java_client as java
from compat_tests.broker import BrokerProcess
from compat_tests.process_pool import ProcessPool
from compat_tests.records import Rec
from gregor.server.harness.certs import CertificateAuthority, broker_ssl_properties
from tests.test_tls_listeners import port_of

COUNT = 5
TIMEOUT_S = 60.0
USER, PASSWORD = "client", "client-secret"
PLAIN_JAAS = (
    f'org.apache.kafka.common.security.plain.PlainLoginModule required user_{USER}="{PASSWORD}";'
)
OAUTH_JAAS = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
LISTENERS = ["SASL_PLAINTEXT", "SASL_SSL"]
MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
VALUES = [f"sasl-{i}".encode() for i in range(COUNT)]


class Secured:
    def __init__(self, broker: BrokerProcess, ca: CertificateAuthority) -> None:
        self.broker = broker
        self.ca = ca

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{port_of(self.broker, listener)}"


@pytest.fixture(scope="module")
def secured(process_pool: ProcessPool, tmp_path_factory: pytest.TempPathFactory) -> Secured:
    ca = CertificateAuthority(tmp_path_factory.mktemp("sasl-ca"))
    mechanisms = {
        "sasl.enabled.mechanisms": ",".join(MECHANISMS),
        "plain.sasl.jaas.config": PLAIN_JAAS,
        "oauthbearer.sasl.jaas.config": OAUTH_JAAS,
    }
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "offsets.topic.replication.factor": "1",
        "group.initial.rebalance.delay.ms": "0",
        **{f"listener.name.sasl_plaintext.{k}": v for k, v in mechanisms.items()},
        **{
            f"listener.name.sasl_ssl.{k}": v
            for k, v in {**mechanisms, **broker_ssl_properties(ca.server("broker"))}.items()
        },
    }
    broker = process_pool.broker(overrides)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):  # one user per request (Kafka)
        info = ScramCredentialInfo(ScramMechanism[mechanism.replace("-", "_")], 4096)
        upsertion = UserScramCredentialUpsertion(USER, info, PASSWORD.encode())
        for future in admin.alter_user_scram_credentials([upsertion]).values():
            future.result(TIMEOUT_S)
    return Secured(broker, ca)


@pytest.fixture
def topic(secured: Secured) -> str:
    name = f"sasl-{uuid.uuid4().hex[:12]}"
    secured.broker.create_topic(name)
    return name


def unsecured_token(principal: str) -> str:
    """Kafka's unsecured JWT (alg none), as OAuthBearerUnsecuredLoginCallbackHandler makes."""

    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    now = int(time.time()) - 1  # whole seconds, never ahead of the broker's clock
    claims = {"sub": principal, "iat": now, "exp": now + 3600}
    return f"{part({'alg': 'none'})}.{part(claims)}."


combos = pytest.mark.parametrize(
    ("listener", "mechanism"), [(listener, m) for listener in LISTENERS for m in MECHANISMS]
)


# -- librdkafka: confluent-kafka and kcat ------------------------------------------------


def librdkafka(secured: Secured, listener: str, mechanism: str) -> dict[str, str]:
    conf = {
        "bootstrap.servers": secured.bootstrap(listener),
        "security.protocol": listener,
        "sasl.mechanism": mechanism,
    }
    if mechanism == "OAUTHBEARER":
        conf["enable.sasl.oauthbearer.unsecure.jwt"] = "true"
        conf["sasl.oauthbearer.config"] = f"principal={USER}"
    else:
        conf["sasl.username"], conf["sasl.password"] = USER, PASSWORD
    if listener == "SASL_SSL":
        conf["ssl.ca.location"] = str(secured.ca.truststore.pem)
    return conf


def consume_confluent(conf: dict[str, str], topic: str, **extra: str) -> list[bytes]:
    consumer = Consumer({**conf, "group.id": topic, "auto.offset.reset": "earliest", **extra})
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
    return got


@combos
def test_confluent(secured: Secured, topic: str, listener: str, mechanism: str) -> None:
    conf = librdkafka(secured, listener, mechanism)
    producer = Producer({**conf, "transactional.id": topic})
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    for value in VALUES:
        producer.produce(topic, value)
    producer.commit_transaction(TIMEOUT_S)
    assert consume_confluent(conf, topic, **{"isolation.level": "read_committed"}) == VALUES


@combos
def test_kcat(secured: Secured, topic: str, listener: str, mechanism: str) -> None:
    options = [
        a for k, v in librdkafka(secured, listener, mechanism).items() for a in ("-X", f"{k}={v}")
    ]
    produced = subprocess.run(
        ["kcat", *options, "-t", topic, "-P"],
        input=b"".join(v + b"\n" for v in VALUES),
        capture_output=True,
        timeout=TIMEOUT_S,
    )
    if mechanism.startswith("SCRAM"):
        # librdkafka before 2.6.1 (Debian's kcat has 2.0.2) repeats its own nonce in the
        # client-final message; Kafka 4 checks the nonce strictly (RFC 5802) and so refuses
        # it, and so does Gregor, which serves as 4.1 does.
        assert produced.returncode != 0
        assert b"invalid credentials with SASL mechanism " + mechanism.encode() in produced.stderr
        return
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run(  # a balanced consumer group (-G)
        ["kcat", *options, "-X", "auto.offset.reset=earliest", "-G", topic, topic, "-c", "5"],
        capture_output=True,
        timeout=TIMEOUT_S,
    )
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines() == VALUES


# -- Java ------------------------------------------------------------------------------


def java_configs(secured: Secured, listener: str, mechanism: str) -> dict[str, str]:
    if mechanism == "OAUTHBEARER":
        jaas = (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            f'unsecuredLoginStringClaim_sub="{USER}";'
        )
    else:
        module = "plain.PlainLoginModule" if mechanism == "PLAIN" else "scram.ScramLoginModule"
        jaas = (
            f"org.apache.kafka.common.security.{module} required "
            f'username="{USER}" password="{PASSWORD}";'
        )
    configs = {"security.protocol": listener, "sasl.mechanism": mechanism, "sasl.jaas.config": jaas}
    if listener == "SASL_SSL":
        configs |= {
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(secured.ca.truststore.pem),
        }
    return configs


# kafka-clients' OAUTHBEARER login needs jackson-databind, which the driver's classpath
# (scripts/setup-test-deps) lacks: Java runs the other mechanisms.
@pytest.mark.parametrize(
    ("listener", "mechanism"),
    [(listener, m) for listener in LISTENERS for m in MECHANISMS if m != "OAUTHBEARER"],
)
def test_java(secured: Secured, topic: str, listener: str, mechanism: str) -> None:
    """Produce; then a consume-transform-produce loop (a group consumer, a transaction with
    sendOffsetsToTransaction) copies the records to another topic, read back committed."""
    configs = java_configs(secured, listener, mechanism)
    bootstrap = secured.bootstrap(listener)
    copied = f"{topic}-copy"
    secured.broker.create_topic(copied)
    now = int(time.time() * 1000)
    stdin = java.produce_input([Rec(0, None, v, (), now) for v in VALUES])
    java.run("produce", bootstrap, topic, configs={**configs, "acks": "all"}, stdin=stdin)
    java.run(
        "txn-copy",
        bootstrap,
        copied,
        options={
            "input": topic,
            "group": topic,
            "transactional-id": topic,
            "exit-when-caught-up": "true",
            "config": [f"{k}={v}" for k, v in configs.items()],
            "producer-config": [f"{k}={v}" for k, v in configs.items()],
        },
    )
    lines = java.run(
        "consume",
        bootstrap,
        copied,
        options={"count": str(COUNT)},
        configs={**configs, "isolation.level": "read_committed"},
    )
    assert [r.value for r in java.parse_consumed(lines)] == VALUES


# -- kafka-python and aiokafka ----------------------------------------------------------


class _KafkaPythonToken(KafkaPythonTokenProvider):
    def token(self) -> str:
        return unsecured_token(USER)


def kafka_python(secured: Secured, listener: str, mechanism: str) -> dict[str, Any]:
    options: dict[str, Any] = {
        "bootstrap_servers": secured.bootstrap(listener),
        "security_protocol": listener,
        "sasl_mechanism": mechanism,
    }
    if mechanism == "OAUTHBEARER":
        options["sasl_oauth_token_provider"] = _KafkaPythonToken()
    else:
        options["sasl_plain_username"], options["sasl_plain_password"] = USER, PASSWORD
    if listener == "SASL_SSL":
        options["ssl_cafile"] = str(secured.ca.truststore.pem)
    return options


@combos
def test_kafka_python(secured: Secured, topic: str, listener: str, mechanism: str) -> None:
    options = kafka_python(secured, listener, mechanism)
    producer = KafkaProducer(transactional_id=topic, **options)
    producer.init_transactions()
    producer.begin_transaction()
    for value in VALUES:
        producer.send(topic, value)
    producer.commit_transaction()
    producer.close()
    consumer = KafkaConsumer(
        topic,
        group_id=topic,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        consumer_timeout_ms=int(TIMEOUT_S * 1000),
        **options,
    )
    got = []
    for message in consumer:
        got.append(message.value)
        if len(got) == COUNT:
            break
    consumer.close()
    assert got == VALUES


class _AioToken(AbstractTokenProvider):
    async def token(self) -> str:
        return unsecured_token(USER)


def aiokafka(secured: Secured, listener: str, mechanism: str) -> dict[str, Any]:
    options: dict[str, Any] = {
        "bootstrap_servers": secured.bootstrap(listener),
        "security_protocol": listener,
        "sasl_mechanism": mechanism,
    }
    if mechanism == "OAUTHBEARER":
        options["sasl_oauth_token_provider"] = _AioToken()
    else:
        options["sasl_plain_username"], options["sasl_plain_password"] = USER, PASSWORD
    if listener == "SASL_SSL":
        options["ssl_context"] = create_ssl_context(cafile=str(secured.ca.truststore.pem))
    return options


@combos
def test_aiokafka(secured: Secured, topic: str, listener: str, mechanism: str) -> None:
    async def round_trip() -> list[bytes]:
        options = aiokafka(secured, listener, mechanism)
        producer = AIOKafkaProducer(transactional_id=topic, **options)
        await producer.start()
        try:
            async with producer.transaction():
                for value in VALUES:
                    await producer.send_and_wait(topic, value)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic,
            group_id=topic,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            **options,
        )
        await consumer.start()
        got: list[bytes] = []
        try:
            async with asyncio.timeout(TIMEOUT_S):
                async for message in consumer:
                    assert message.value is not None
                    got.append(message.value)
                    if len(got) == COUNT:
                        break
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(round_trip()) == VALUES
