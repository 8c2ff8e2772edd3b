"""Every client of the compatibility matrix over SASL_PLAINTEXT and SASL_SSL, in its own
configuration style, with PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (credentials made with
AlterUserScramCredentials) and OAUTHBEARER (Kafka's unsecured tokens): each produces,
consumes in a group and, where the client has them, commits a transaction. One broker for
the module (PLAINTEXT too, where topics and credentials are made)."""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid

import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kafka import KafkaProducer

from compat_tests import java_client as java
from compat_tests import security_clients as styles
from compat_tests.broker import BrokerProcess
from compat_tests.matrix import compat
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
OAUTH_JAAS = f"{styles.OAUTH_LOGIN_MODULE} required;"
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


def login(secured: Secured, listener: str, mechanism: str) -> styles.Login:
    truststore = secured.ca.truststore if listener == "SASL_SSL" else None
    return styles.Login(listener, truststore, None, mechanism, USER, PASSWORD)


combos = pytest.mark.parametrize(
    ("listener", "mechanism"), [(listener, m) for listener in LISTENERS for m in MECHANISMS]
)


# -- librdkafka: confluent-kafka and kcat ------------------------------------------------


@compat("confluent", "security")
@combos
def test_confluent(secured: Secured, topic: str, listener: str, mechanism: str) -> None:
    conf = {
        "bootstrap.servers": secured.bootstrap(listener),
        **styles.librdkafka(login(secured, listener, mechanism)),
    }
    producer = Producer({**conf, "transactional.id": topic})
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    for value in VALUES:
        producer.produce(topic, value)
    producer.commit_transaction(TIMEOUT_S)
    got = styles.confluent_consume(conf, topic, COUNT, **{"isolation.level": "read_committed"})
    assert got == VALUES


@compat("kcat", "security")
@combos
def test_kcat(secured: Secured, topic: str, listener: str, mechanism: str) -> None:
    options = [
        "-b",
        secured.bootstrap(listener),
        *styles.kcat_options(login(secured, listener, mechanism)),
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


@compat("java", "security")
@combos
def test_java(secured: Secured, topic: str, listener: str, mechanism: str) -> None:
    """Produce; then a consume-transform-produce loop (a group consumer, a transaction with
    sendOffsetsToTransaction) copies the records to another topic, read back committed."""
    configs = styles.java(login(secured, listener, mechanism))
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


@compat("kafka-python", "security")
@combos
def test_kafka_python(secured: Secured, topic: str, listener: str, mechanism: str) -> None:
    options = {
        "bootstrap_servers": secured.bootstrap(listener),
        **styles.kafka_python(login(secured, listener, mechanism)),
    }
    producer = KafkaProducer(transactional_id=topic, **options)
    producer.init_transactions()
    producer.begin_transaction()
    for value in VALUES:
        producer.send(topic, value)
    producer.commit_transaction()
    producer.close()
    got = styles.kafka_python_consume(
        options, topic, COUNT, group_id=topic, isolation_level="read_committed"
    )
    assert got == VALUES


@compat("aiokafka", "security")
@combos
def test_aiokafka(secured: Secured, topic: str, listener: str, mechanism: str) -> None:
    async def round_trip() -> list[bytes]:
        options = {
            "bootstrap_servers": secured.bootstrap(listener),
            **styles.aiokafka(login(secured, listener, mechanism)),
        }
        producer = AIOKafkaProducer(transactional_id=topic, **options)
        await producer.start()
        try:
            async with producer.transaction():
                for value in VALUES:
                    await producer.send_and_wait(topic, value)
        finally:
            await producer.stop()
        return await styles.aiokafka_consume(
            options, topic, COUNT, group_id=topic, isolation_level="read_committed"
        )

    assert asyncio.run(round_trip()) == VALUES
