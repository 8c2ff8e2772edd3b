"""TLS listeners against real broker processes: the SSL listener's configuration
(listener.security.protocol.map, custom names, per-listener keys, the start-up errors of bad
keystores), handshakes and a produce/fetch round trip with confluent-kafka, client
certificates (required, and the principal they map to, seen through a user quota), a
plaintext client and a stalled handshake on a TLS port, certificate reload on a file change
and on AlterConfigs, Metadata answering each listener's own endpoints, and a large fetch
over TLS (no sendfile) intact.

The brokers listen on PLAINTEXT too: the harness probes readiness there, and mixed listeners
are a case of their own."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient
from cryptography import x509
from kio.schema.errors import ErrorCode

from compat_tests.broker import BrokerProcess
from gregor.configdef import ConfigError
from gregor.controller.configs import DELETE, SET
from gregor.controller.metadata.config_resource import BROKER
from gregor.server.config import BrokerConfig, listener_settings
from gregor.server.harness.certs import (
    CertificateAuthority,
    Identity,
    broker_ssl_properties,
)
from gregor.wire.schema import request_type
from gregor.wire.versions import API_VERSIONS, PRODUCE
from tests.kafka_wire import WireClient, create_topic, request_frame
from tests.test_client_quotas import BIG, QUOTA, alter, produce_request
from tests.test_config_apis import errors, incremental

DEADLINE_S = 30.0  # generous: the machine is shared; conditions normally hold at once
RULES = "RULE:^CN=([^,]+),O=Gregor$/$1/L,DEFAULT"
LARGE_BATCH = 12 << 20
IDLE_MS = 1000  # connections.max.idle.ms of the broker whose handshakes are timed


@dataclass
class Tls:
    """A test's certificate authority and the identities it signed."""

    ca: CertificateAuthority
    broker: Identity
    alice: Identity
    bob: Identity


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Tls:
    ca = CertificateAuthority(tmp_path_factory.mktemp("tls"))
    return Tls(
        ca,
        ca.server("broker"),
        ca.client("alice", subject="CN=Alice,O=Gregor"),
        ca.client("bob", subject="CN=bob,O=Gregor"),
    )


def prefixed(listener: str, props: dict[str, str]) -> dict[str, str]:
    return {f"listener.name.{listener}.{k}": v for k, v in props.items()}


@pytest.fixture(scope="module")
def broker(tls: Tls, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """PLAINTEXT, SSL (PKCS12, client certificates requested) and MTLS, a custom name
    mapped to SSL (PEM, client certificates required)."""
    directory = tmp_path_factory.mktemp("tls-broker")
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,MTLS://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL",
        "ssl.principal.mapping.rules": RULES,
        "message.max.bytes": str(LARGE_BATCH + (1 << 20)),
        "group.initial.rebalance.delay.ms": "0",  # the consumers' groups join at once
        **prefixed("ssl", broker_ssl_properties(tls.broker, "PKCS12", "requested")),
        **prefixed("mtls", broker_ssl_properties(tls.broker, "PEM", "required")),
    }
    with BrokerProcess(directory, overrides) as b:
        yield b


def port_of(broker: BrokerProcess, listener: str) -> int:
    """The port a listener bound, from the broker's start-up line."""
    found = re.findall(rf"\b{listener}://127\.0\.0\.1:(\d+)", broker.start_output())
    assert found, f"no {listener} listener in the start-up line"
    return int(found[-1])


def client_context(tls: Tls, identity: Identity | None = None) -> ssl.SSLContext:
    """Python's own TLS client: trusts the test CA, presents ``identity`` if given."""
    context = ssl.create_default_context(cafile=str(tls.ca.truststore.pem))
    if identity is not None:
        context.load_cert_chain(identity.cert, identity.key, identity.key_password)
    return context


class TlsWireClient(WireClient):
    """The raw-protocol client over TLS."""

    def __init__(self, port: int, context: ssl.SSLContext) -> None:
        raw = socket.create_connection(("127.0.0.1", port), timeout=10.0)
        self.sock = context.wrap_socket(raw, server_hostname="localhost")
        self._next = 0

    @property
    def server_serial(self) -> int:
        assert isinstance(self.sock, ssl.SSLSocket)
        der = self.sock.getpeercert(binary_form=True)
        assert der is not None
        return x509.load_der_x509_certificate(der).serial_number


def serial_of(identity: Identity) -> int:
    return x509.load_pem_x509_certificate(identity.cert.read_bytes()).serial_number


def api_versions_frame() -> bytes:
    return request_frame(API_VERSIONS, 0, 1, request_type(API_VERSIONS, 0)())


def confluent_ssl(tls: Tls, port: int, identity: Identity | None = None) -> dict[str, Any]:
    """librdkafka's own configuration style: PEM files by location."""
    conf: dict[str, Any] = {
        "bootstrap.servers": f"127.0.0.1:{port}",
        "security.protocol": "SSL",
        "ssl.ca.location": str(tls.ca.truststore.pem),
    }
    if identity is not None:
        conf["ssl.certificate.location"] = str(identity.cert)
        conf["ssl.key.location"] = str(identity.key)
        if identity.key_password is not None:
            conf["ssl.key.password"] = identity.key_password
    return conf


def consume(conf: dict[str, Any], topic: str, count: int) -> list[bytes]:
    consumer = Consumer(
        {**conf, "group.id": f"g-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(values) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    return values


def produce(conf: dict[str, Any], topic: str, values: list[bytes]) -> None:
    producer = Producer(conf)
    failures: list[Any] = []
    for value in values:
        producer.produce(topic, value, on_delivery=lambda e, _m: e and failures.append(e))
    assert producer.flush(DEADLINE_S) == 0 and failures == []


# -- configuration ------------------------------------------------------------------------


def test_listener_settings_take_the_listener_prefix_first() -> None:
    props = {
        "ssl.client.auth": "none",
        "ssl.keystore.type": "PKCS12",
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.other.ssl.keystore.type": "PEM",
        "listener.name.mtls.plain.sasl.jaas.config": "x",
    }
    settings = listener_settings(props, "MTLS")
    assert settings["ssl.client.auth"] == "required"
    assert settings["ssl.keystore.type"] == "PKCS12"
    assert settings["plain.sasl.jaas.config"] == "x"
    assert not any(k.startswith("listener.name.") for k in settings)


def test_ssl_listeners_custom_names_and_inter_broker_ssl_are_accepted() -> None:
    config = BrokerConfig(
        {
            "listeners": "INTERNAL://:9093,EXTERNAL://:9094,PLAINTEXT://:9092",
            "listener.security.protocol.map": "INTERNAL:SSL,EXTERNAL:SSL,PLAINTEXT:PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
            "zookeeper.connect": "127.0.0.1:2181",
            "listener.name.internal.ssl.client.auth": "required",
        }
    )
    assert config.security_protocols["INTERNAL"] == "SSL"
    assert config.inter_broker_listener == "INTERNAL"
    by_protocol = BrokerConfig(
        {
            "listeners": "SSL://:9093",
            "security.inter.broker.protocol": "SSL",
            "zookeeper.connect": "127.0.0.1:2181",
        }
    )
    assert by_protocol.inter_broker_listener == "SSL"


@pytest.mark.parametrize(
    ("props", "message"),
    [
        (
            {"listeners": "A://:1", "listener.security.protocol.map": "A:TLS"},
            "Invalid security protocol `TLS` defined in listener.security.protocol.map",
        ),
        (
            {"listener.name.ssl.ssl.client.auth": "always"},
            "Invalid value always for configuration listener.name.ssl.ssl.client.auth",
        ),
        ({"listeners": "SSL://:1,SSL://:2"}, "Each listener must have a different name"),
        ({"principal.builder.class": "a.B"}, "custom principal builders are not supported"),
        ({"sasl.enabled.mechanisms": "GSSAPI"}, "does not support Kerberos (GSSAPI)"),
        ({"authorizer.class.name": "a.B"}, "value a.B for configuration authorizer.class.name"),
        (
            {"security.inter.broker.protocol": "TLS"},
            "String must be one of: PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL",
        ),
    ],
)
def test_what_is_not_built_or_not_valid_stops_start_up(props: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        BrokerConfig(props)


def serve(tmp_path: Path, overrides: dict[str, str]) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "gregor.server.cli", "serve"]
    for key, value in {"log.dirs": str(tmp_path / "data"), **overrides}.items():
        args += ["--override", f"{key}={value}"]
    return subprocess.run(args, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("case", ["bad-password", "missing-file", "jks"])
def test_a_bad_keystore_stops_start_up_naming_the_key(tls: Tls, tmp_path: Path, case: str) -> None:
    ssl_props = broker_ssl_properties(tls.broker, "PKCS12")
    if case == "bad-password":
        ssl_props["ssl.keystore.password"] = "wrong"
    elif case == "missing-file":
        ssl_props["ssl.keystore.location"] = str(tmp_path / "missing.p12")
    else:
        jks = tmp_path / "keystore.jks"
        jks.write_bytes(b"\xfe\xed\xfe\xed" + bytes(64))
        ssl_props.update({"ssl.keystore.type": "JKS", "ssl.keystore.location": str(jks)})
    result = serve(
        tmp_path,
        {"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0", **prefixed("ssl", ssl_props)},
    )
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if "Fatal error during startup" in line]
    assert len(lines) == 1, result.stderr
    assert "ssl.keystore" in lines[0] and "(listener SSL)" in lines[0]
    assert "Traceback" not in result.stderr


# -- connections ----------------------------------------------------------------------------


def test_produce_and_fetch_over_tls(tls: Tls, broker: BrokerProcess) -> None:
    topic = f"tls-{uuid.uuid4().hex[:8]}"
    conf = confluent_ssl(tls, port_of(broker, "SSL"))
    values = [f"value-{i}".encode() * (i + 1) for i in range(200)]
    produce(conf, topic, values)
    assert consume(conf, topic, len(values)) == values


def test_mutual_tls_round_trip_on_a_custom_listener(tls: Tls, broker: BrokerProcess) -> None:
    topic = f"mtls-{uuid.uuid4().hex[:8]}"
    conf = confluent_ssl(tls, port_of(broker, "MTLS"), tls.alice)
    values = [os.urandom(100) for _ in range(50)]
    produce(conf, topic, values)
    assert consume(conf, topic, len(values)) == values


def test_a_large_batch_is_fetched_intact_over_tls(tls: Tls, broker: BrokerProcess) -> None:
    """One batch of 12 MiB, sent in chunks through TLS (sendfile cannot encrypt)."""
    topic = f"tls-large-{uuid.uuid4().hex[:8]}"
    conf = confluent_ssl(tls, port_of(broker, "SSL"))
    values = [os.urandom(256 << 10) for _ in range(LARGE_BATCH // (256 << 10) - 1)]
    producer_conf = {
        **conf,
        "message.max.bytes": LARGE_BATCH + (1 << 20),
        "batch.size": LARGE_BATCH,
        "linger.ms": 1000,
        "compression.type": "none",
    }
    produce(producer_conf, topic, values)
    got = consume(
        {**conf, "fetch.max.bytes": 4 * LARGE_BATCH},
        topic,
        len(values),
    )
    assert len(got) == len(values)
    digest = hashlib.sha256(b"".join(values)).hexdigest()
    assert hashlib.sha256(b"".join(got)).hexdigest() == digest


def test_client_auth_required_refuses_a_client_without_a_certificate(
    tls: Tls, broker: BrokerProcess
) -> None:
    """TLS 1.3 finishes the client's side of the handshake before the server checks the
    client's certificate: the refusal is the connection closed before any answer."""
    with pytest.raises((ssl.SSLError, ConnectionError)):
        client = TlsWireClient(port_of(broker, "MTLS"), client_context(tls))
        try:
            client.call(API_VERSIONS, 0, request_type(API_VERSIONS, 0)())
        finally:
            client.close()
    wait_for_log(broker, "Failed authentication with 127.0.0.1 on listener MTLS")
    with closing(TlsWireClient(port_of(broker, "MTLS"), client_context(tls, tls.bob))) as client:
        response = client.call(API_VERSIONS, 0, request_type(API_VERSIONS, 0)())
        assert response.error_code == ErrorCode.none


def test_the_certificate_principal_is_the_user_quotas_match(
    tls: Tls, broker: BrokerProcess
) -> None:
    """CN=Alice,O=Gregor maps to alice (ssl.principal.mapping.rules): a produce quota of
    the user alice throttles her, not bob nor a client without a certificate."""
    topic = f"tls-quota-{uuid.uuid4().hex[:8]}"
    with closing(WireClient(broker.port)) as admin:
        assert create_topic(admin, topic).error_code == ErrorCode.none
        assert alter(admin, [({"user": "alice"}, {"producer_byte_rate": QUOTA})]) == [
            (ErrorCode.none, None)
        ]
    try:
        for port, identity, throttled in (
            (port_of(broker, "SSL"), None, False),
            (port_of(broker, "MTLS"), tls.bob, False),
            (port_of(broker, "MTLS"), tls.alice, True),
        ):
            with closing(TlsWireClient(port, client_context(tls, identity))) as client:
                response = client.call(PRODUCE, 11, produce_request(11, topic, BIG))
            assert response.responses[0].partition_responses[0].error_code == ErrorCode.none
            assert (response.throttle_time.total_seconds() > 0) == throttled, identity
    finally:
        with closing(WireClient(broker.port)) as admin:
            alter(admin, [({"user": "alice"}, {"producer_byte_rate": None})])


def test_metadata_answers_with_the_endpoints_of_the_listener_asked(
    tls: Tls, broker: BrokerProcess
) -> None:
    for listener, conf in (
        ("PLAINTEXT", {"bootstrap.servers": broker.bootstrap}),
        ("SSL", confluent_ssl(tls, port_of(broker, "SSL"))),
        ("MTLS", confluent_ssl(tls, port_of(broker, "MTLS"), tls.alice)),
    ):
        brokers = AdminClient(conf).list_topics(timeout=DEADLINE_S).brokers
        assert [(b.host, b.port) for b in brokers.values()] == [
            ("127.0.0.1", port_of(broker, listener))
        ], listener


def wait_for_log(broker: BrokerProcess, text: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while text not in broker.log_path.read_text():
        assert time.monotonic() < deadline, f"the broker never logged {text!r}"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def short_idle_broker(
    tls: Tls, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    """connections.max.idle.ms of IDLE_MS bounds the TLS handshake to as long."""
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "connections.max.idle.ms": str(IDLE_MS),
        **prefixed("ssl", broker_ssl_properties(tls.broker, "PEM")),
    }
    with BrokerProcess(tmp_path_factory.mktemp("tls-idle"), overrides) as b:
        yield b


def closed_by_peer(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_a_plaintext_client_on_a_tls_port_is_closed_and_logged_once(
    short_idle_broker: BrokerProcess,
) -> None:
    port = port_of(short_idle_broker, "SSL")
    for _ in range(5):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(api_versions_frame())
            assert closed_by_peer(sock)
    log = short_idle_broker.log_path.read_text()
    assert log.count("it does not speak TLS (a plaintext client?)") == 1


def test_a_stalled_handshake_is_closed(short_idle_broker: BrokerProcess) -> None:
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port_of(short_idle_broker, "SSL"))) as sock:
        sock.settimeout(DEADLINE_S)
        assert closed_by_peer(sock)
    assert time.monotonic() - started >= IDLE_MS / 1000 * 0.75  # not before the bound
    wait_for_log(short_idle_broker, f"SSL handshake is taking longer than {IDLE_MS / 1000} seconds")


# -- certificate reload -------------------------------------------------------------------


@pytest.fixture(scope="module")
def reload_broker(tls: Tls, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """An SSL listener whose PEM keystore is a file of the test's own (unencrypted key)."""
    directory = tmp_path_factory.mktemp("tls-reload")
    keystore = directory / "keystore.pem"
    shutil.copy(
        tls.ca.server("first", subject="CN=broker", encrypt_key=False).pem_keystore, keystore
    )
    ssl_props = broker_ssl_properties(tls.broker, "PEM")
    ssl_props.pop("ssl.key.password", None)
    ssl_props["ssl.keystore.location"] = str(keystore)
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        **prefixed("ssl", ssl_props),
    }
    with BrokerProcess(directory / "broker", overrides) as b:
        yield b


def wait_for_serial(tls: Tls, port: int, serial: int) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        with closing(TlsWireClient(port, client_context(tls))) as client:
            if client.server_serial == serial:
                return
        assert time.monotonic() < deadline, "the new certificate was never served"
        time.sleep(0.2)


def test_a_changed_keystore_file_is_reloaded(tls: Tls, reload_broker: BrokerProcess) -> None:
    port = port_of(reload_broker, "SSL")
    keystore = reload_broker.directory.parent / "keystore.pem"
    renewed = tls.ca.server("renewed", subject="CN=broker", encrypt_key=False)
    with closing(TlsWireClient(port, client_context(tls))) as before:
        assert before.server_serial != serial_of(renewed)
        staged = keystore.with_suffix(".new")
        shutil.copy(renewed.pem_keystore, staged)
        staged.rename(keystore)
        wait_for_serial(tls, port, serial_of(renewed))
        # The connection made before the swap keeps working.
        assert before.call(API_VERSIONS, 0, request_type(API_VERSIONS, 0)()).error_code == 0


def test_alter_configs_swaps_the_keystore_or_answers_invalid_config(
    tls: Tls, reload_broker: BrokerProcess
) -> None:
    port = port_of(reload_broker, "SSL")
    altered = tls.ca.server("altered", subject="CN=broker")
    prefix = "listener.name.ssl."
    with closing(WireClient(reload_broker.port)) as admin:
        missing = str(reload_broker.directory / "missing.p12")
        [(code, message)] = errors(
            incremental(admin, [(BROKER, "0", [(prefix + "ssl.keystore.location", SET, missing)])])
        )
        assert code == ErrorCode.invalid_config
        assert message is not None and "ssl.keystore.location" in message
        changes = [
            (prefix + "ssl.keystore.type", SET, "PKCS12"),
            (prefix + "ssl.keystore.location", SET, str(altered.pkcs12)),
            (prefix + "ssl.keystore.password", SET, altered.password),
        ]
        assert errors(incremental(admin, [(BROKER, "0", changes)])) == [(ErrorCode.none, None)]
        wait_for_serial(tls, port, serial_of(altered))
        other = tls.ca.server("other", subject="CN=someone-else", encrypt_key=False)
        [(code, message)] = errors(
            incremental(
                admin,
                [
                    (
                        BROKER,
                        "0",
                        [
                            (prefix + "ssl.keystore.type", SET, "PEM"),
                            (prefix + "ssl.keystore.location", SET, str(other.pem_keystore)),
                            (prefix + "ssl.keystore.password", DELETE, None),
                        ],
                    )
                ],
            )
        )
        assert code == ErrorCode.invalid_config
        assert message is not None and "DistinguishedName does not match" in message
        with closing(TlsWireClient(port, client_context(tls))) as client:
            assert client.server_serial == serial_of(altered)
        deletes = [(name, DELETE, None) for name, _, _ in changes]
        assert errors(incremental(admin, [(BROKER, "0", deletes)])) == [(ErrorCode.none, None)]
