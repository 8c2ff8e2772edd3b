"""The pytest plugin's secured broker, in a user's suite run by a pytest of its own (the
plugin found as the installed ``pytest11`` entry point): each module overrides
``gregor_broker_security`` (SASL_SSL with SCRAM-SHA-512, mutual TLS, SASL_PLAINTEXT with
PLAIN; the authorizer on) and gets its own broker (``gregor_broker_scope = module``). The
configs it hands out work in confluent-kafka, kafka-python and as Kafka client properties
(``gregor --command-config``); the admin may do anything, ``alice`` only what an ACL
grants her, and nobody gets in without them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CONFTEST = """
import subprocess
import sys

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding, AclOperation, AclPermissionType, AdminClient, ResourcePatternType, ResourceType,
)
from kafka import KafkaProducer
from kafka.errors import KafkaError


def confluent_produce(config, topic, value):
    producer = Producer({**config, "acks": "all", "message.timeout.ms": 10000})
    errors = []
    producer.produce(topic, value, on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(30)
    return errors


def check_the_configs(admin, alice, topic, tmp_path):
    # The admin, a super user: confluent-kafka, then kafka-python.
    assert confluent_produce(admin.confluent(), topic, b"by admin") == [None]
    producer = KafkaProducer(**admin.kafka_python(), acks="all")
    producer.send(topic, b"by admin too", partition=0).get(timeout=30)
    producer.close()
    # alice: refused until an ACL lets her write.
    (error,) = confluent_produce(alice.confluent(), topic, b"by alice")
    assert error is not None and error.name() == "TOPIC_AUTHORIZATION_FAILED"
    acl = AclBinding(
        ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", "*",
        AclOperation.WRITE, AclPermissionType.ALLOW,
    )
    client = AdminClient(admin.confluent())
    for future in client.create_acls([acl]).values():
        future.result(30)
    producer = KafkaProducer(**alice.kafka_python(), acks="all", retries=5)
    producer.send(topic, b"by alice", partition=0).get(timeout=30)
    producer.close()
    # Kafka's client properties: gregor's tools read them (--command-config).
    listing = subprocess.run(
        [sys.executable, "-m", "gregor.server.cli", "topics", "--list",
         "--bootstrap-server", admin.bootstrap, "--command-config",
         str(admin.write(tmp_path / "admin.properties"))],
        capture_output=True, text=True, timeout=60,
    )
    assert topic in listing.stdout.split(), listing.stderr
    # Without credentials: nothing.
    consumer = Consumer({"bootstrap.servers": admin.bootstrap, "group.id": "g"})
    with pytest.raises(KafkaException):
        consumer.list_topics(timeout=1)
    consumer.close()
"""


def suite(security: str) -> str:
    return f"""
import pytest
from conftest import check_the_configs
from gregor.server.harness.secured import BrokerSecurity


@pytest.fixture(scope="module")
def gregor_broker_security():
    return {security}


def test_configs(gregor_admin_config, gregor_client_config, gregor_topic, tmp_path):
    check_the_configs(gregor_admin_config, gregor_client_config, gregor_topic, tmp_path)
"""


def test_secured_brokers_in_a_users_suite(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "pytest.ini").write_text("[pytest]\ngregor_broker_scope = module\n")
    modules = {
        "test_scram_over_tls.py": 'BrokerSecurity(tls=True, sasl_mechanism="SCRAM-SHA-512")',
        "test_mutual_tls.py": "BrokerSecurity(tls=True, sasl_mechanism=None)",
        "test_plain_without_tls.py": 'BrokerSecurity(tls=False, sasl_mechanism="PLAIN")',
    }
    for name, security in modules.items():
        (tmp_path / name).write_text(suite(security))
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA"]
    command += ["-W", "ignore::DeprecationWarning", *modules]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    out = result.stdout + result.stderr
    assert "3 passed" in out, out
    for name in modules:
        assert f"PASSED {name}::test_configs" in out, out
