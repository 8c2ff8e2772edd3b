"""SASL listeners against a real broker process: the exchange on the wire (SaslHandshake v1
with SaslAuthenticate, v0 with raw tokens), PLAIN's good and bad passwords (Kafka's message,
the failure delay, the connection closed), requests before authentication, oversize frames,
unsupported mechanisms; SCRAM-SHA-256/512 with credentials made by
AlterUserScramCredentials and OAUTHBEARER (unsecured, and a JWT checked against a JWKS file)
through confluent-kafka; re-authentication (KIP-368: the session lifetime, expiry, a
principal that may not change); user quotas on authenticated users; SASL_SSL; the
authentication metrics; start-up errors.

The broker also listens on PLAINTEXT, where the tests administer it (topics, credentials,
quotas) and the harness probes it."""

from __future__ import annotations

import base64
import json
import re
import ssl
import struct
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import closing
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from kio.schema.errors import ErrorCode

from compat_tests.broker import BrokerProcess
from gregor.apis.context import build
from gregor.configdef import ConfigError
from gregor.server.config import BrokerConfig
from gregor.server.harness.certs import CertificateAuthority, broker_ssl_properties
from gregor.server.listener_security import listener_securities
from gregor.server.metrics import AuthenticationMetrics
from gregor.wire.schema import request_type
from gregor.wire.versions import (
    API_VERSIONS,
    METADATA,
    PRODUCE,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
)
from tests.kafka_wire import WireClient, create_topic, request_frame
from tests.test_client_quotas import BIG, QUOTA, alter, produce_request
from tests.test_tls_listeners import TlsWireClient, port_of, prefixed

DEADLINE_S = 30.0
PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret" '
    'user_alice="alice-secret" user_bob="bob-secret";'
)
OAUTH_JAAS = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
JWT_VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
REAUTH_MS = 1500  # the REAUTH listener's sessions
DELAY_MS = 300
AUDIENCE = "gregor-test"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Signer:
    """An RSA key whose public half is the JWKS file the JWT listener trusts."""

    def __init__(self, directory: Path) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        numbers = self.key.public_key().public_numbers()
        jwk = {
            "kty": "RSA",
            "kid": "k1",
            "use": "sig",
            "alg": "RS256",
            "n": b64url(numbers.n.to_bytes((numbers.n.bit_length() + 7) // 8)),
            "e": b64url(numbers.e.to_bytes(3)),
        }
        self.path = directory / "jwks.json"
        self.path.write_text(json.dumps({"keys": [jwk]}))

    def token(self, sub: str, lifetime_s: int, audience: str = AUDIENCE) -> str:
        now = int(time.time())
        header = b64url(json.dumps({"alg": "RS256", "kid": "k1", "typ": "JWT"}).encode())
        claims = {"sub": sub, "aud": audience, "iat": now, "exp": now + lifetime_s}
        body = b64url(json.dumps(claims).encode())
        signed = f"{header}.{body}".encode()
        signature = self.key.sign(signed, padding.PKCS1v15(), hashes.SHA256())
        return f"{header}.{body}.{b64url(signature)}"


@pytest.fixture(scope="module")
def signer(tmp_path_factory: pytest.TempPathFactory) -> Signer:
    return Signer(tmp_path_factory.mktemp("jwks"))


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> CertificateAuthority:
    return CertificateAuthority(tmp_path_factory.mktemp("sasl-tls"))


@pytest.fixture(scope="module")
def broker(
    signer: Signer, ca: CertificateAuthority, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    """PLAINTEXT; SASL_PLAINTEXT with every mechanism; REAUTH (PLAIN, sessions of
    REAUTH_MS); JWT (OAUTHBEARER checked against a JWKS file); SASL_SSL (PLAIN)."""
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,"
        "REAUTH://127.0.0.1:0,JWT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,"
        "REAUTH:SASL_PLAINTEXT,JWT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        "sasl.enabled.mechanisms": "PLAIN",
        "metrics.prometheus.port": "0",
        "metrics.prometheus.host": "127.0.0.1",
        "connection.failed.authentication.delay.ms": str(DELAY_MS),
        "group.initial.rebalance.delay.ms": "0",  # the consumers' groups join at once
        **prefixed(
            "sasl_plaintext",
            {
                "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
                "plain.sasl.jaas.config": PLAIN_JAAS,
                "oauthbearer.sasl.jaas.config": OAUTH_JAAS,
            },
        ),
        **prefixed(
            "reauth",
            {
                "plain.sasl.jaas.config": PLAIN_JAAS,
                "plain.connections.max.reauth.ms": str(REAUTH_MS),
            },
        ),
        **prefixed(
            "jwt",
            {
                "sasl.enabled.mechanisms": "OAUTHBEARER",
                "oauthbearer.sasl.jaas.config": OAUTH_JAAS,
                "oauthbearer.sasl.server.callback.handler.class": JWT_VALIDATOR,
                "sasl.oauthbearer.jwks.endpoint.url": signer.path.as_uri(),
                "sasl.oauthbearer.expected.audience": AUDIENCE,
            },
        ),
        **prefixed(
            "sasl_ssl",
            {"plain.sasl.jaas.config": PLAIN_JAAS, **broker_ssl_properties(ca.server("broker"))},
        ),
    }
    with BrokerProcess(tmp_path_factory.mktemp("sasl-broker"), overrides) as b:
        yield b


# -- the raw exchange -------------------------------------------------------------------


def handshake(client: WireClient, mechanism: str, version: int = 1) -> Any:
    return client.call(
        SASL_HANDSHAKE, version, request_type(SASL_HANDSHAKE, version)(mechanism=mechanism)
    )


def authenticate(client: WireClient, token: bytes, version: int = 2) -> Any:
    return client.call(
        SASL_AUTHENTICATE, version, request_type(SASL_AUTHENTICATE, version)(auth_bytes=token)
    )


def plain(user: str, password: str) -> bytes:
    return f"\0{user}\0{password}".encode()


def oauth(token: str) -> bytes:
    return f"n,,\x01auth=Bearer {token}\x01\x01".encode()


def login(client: WireClient, mechanism: str, token: bytes) -> Any:
    """SaslHandshake v1 and one SaslAuthenticate v2; the latter's response."""
    assert handshake(client, mechanism).error_code == ErrorCode.none
    return authenticate(client, token)


METADATA_REQUEST = build(
    request_type(METADATA, 12),
    topics=None,
    allow_auto_topic_creation=False,
    include_topic_authorized_operations=False,
)


def metadata(client: WireClient) -> Any:
    return client.call(METADATA, 12, METADATA_REQUEST)


def assert_closed(client: WireClient) -> None:
    """The broker closed the connection (reads end; nothing more comes)."""
    client.sock.settimeout(DEADLINE_S)
    try:
        assert client.sock.recv(1) == b""
    except ConnectionResetError:
        pass


def test_plain_authenticates_and_serves_requests(broker: BrokerProcess) -> None:
    with closing(WireClient(port_of(broker, "SASL_PLAINTEXT"))) as client:
        response = handshake(client, "PLAIN")
        assert response.error_code == ErrorCode.none
        assert list(response.mechanisms) == [
            "PLAIN",
            "SCRAM-SHA-256",
            "SCRAM-SHA-512",
            "OAUTHBEARER",
        ]
        response = authenticate(client, plain("alice", "alice-secret"))
        assert response.error_code == ErrorCode.none
        assert response.session_lifetime == timedelta(0)  # connections.max.reauth.ms 0
        assert metadata(client).brokers


def test_a_wrong_password_is_refused_late_and_closed(broker: BrokerProcess) -> None:
    with closing(WireClient(port_of(broker, "SASL_PLAINTEXT"))) as client:
        assert handshake(client, "PLAIN").error_code == ErrorCode.none
        started = time.monotonic()
        response = authenticate(client, plain("alice", "wrong"))
        waited = time.monotonic() - started
        assert response.error_code == ErrorCode.sasl_authentication_failed
        assert response.error_message == "Authentication failed: Invalid username or password"
        assert waited >= DELAY_MS / 1000 * 0.9
        assert_closed(client)
    assert "wrong" not in broker.log_path.read_text()


def test_only_api_versions_and_the_exchange_come_before_authentication(
    broker: BrokerProcess,
) -> None:
    with closing(WireClient(port_of(broker, "SASL_PLAINTEXT"))) as client:
        client.send(request_frame(METADATA, 12, 1, METADATA_REQUEST))
        assert_closed(client)
    with closing(WireClient(port_of(broker, "SASL_PLAINTEXT"))) as client:
        versions = client.call(
            API_VERSIONS,
            3,
            request_type(API_VERSIONS, 3)(client_software_name="t", client_software_version="1"),
        )
        keys = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
        assert keys[SASL_HANDSHAKE] == (0, 1) and keys[SASL_AUTHENTICATE] == (0, 2)
        assert handshake(client, "PLAIN").error_code == ErrorCode.none
        client.send(request_frame(METADATA, 12, 9, METADATA_REQUEST))
        assert_closed(client)  # ILLEGAL_SASL_STATE: not a SaslAuthenticate


def test_an_unsupported_mechanism_is_answered_with_the_enabled_ones(
    broker: BrokerProcess,
) -> None:
    with closing(WireClient(port_of(broker, "REAUTH"))) as client:
        response = handshake(client, "GSSAPI")
        assert response.error_code == ErrorCode.unsupported_sasl_mechanism
        assert list(response.mechanisms) == ["PLAIN"]
        assert_closed(client)


def test_handshake_v0_exchanges_raw_tokens(broker: BrokerProcess) -> None:
    """Old clients: after SaslHandshake v0 the token goes size-prefixed without a header,
    and so does the server's (empty) answer."""
    with closing(WireClient(port_of(broker, "SASL_PLAINTEXT"))) as client:
        assert handshake(client, "PLAIN", version=0).error_code == ErrorCode.none
        token = plain("bob", "bob-secret")
        client.send(struct.pack(">i", len(token)) + token)
        assert client.read_frame() == b""
        assert metadata(client).brokers
    with closing(WireClient(port_of(broker, "SASL_PLAINTEXT"))) as client:
        assert handshake(client, "PLAIN", version=0).error_code == ErrorCode.none
        token = plain("bob", "nope")
        client.send(struct.pack(">i", len(token)) + token)
        assert_closed(client)


def test_an_oversize_frame_before_authentication_closes(broker: BrokerProcess) -> None:
    with closing(WireClient(port_of(broker, "SASL_PLAINTEXT"))) as client:
        client.send(struct.pack(">i", 524_289) + b"\0" * 1024)
        assert_closed(client)
    assert "sasl.server.max.receive.size is 524288" in broker.log_path.read_text()


def test_sasl_requests_elsewhere_are_illegal(broker: BrokerProcess) -> None:
    with closing(WireClient(broker.port)) as client:  # PLAINTEXT
        assert handshake(client, "PLAIN").error_code == ErrorCode.illegal_sasl_state
        assert authenticate(client, b"x").error_code == ErrorCode.illegal_sasl_state
    with closing(WireClient(port_of(broker, "SASL_PLAINTEXT"))) as client:
        assert login(client, "PLAIN", plain("bob", "bob-secret")).error_code == ErrorCode.none
        assert handshake(client, "PLAIN").error_code == ErrorCode.illegal_sasl_state


# -- mechanisms through a real client ----------------------------------------------------


def confluent(broker: BrokerProcess, listener: str, **conf: str) -> dict[str, str]:
    protocol = "SASL_SSL" if listener == "SASL_SSL" else "SASL_PLAINTEXT"
    return {
        "bootstrap.servers": f"127.0.0.1:{port_of(broker, listener)}",
        "security.protocol": protocol,
        **conf,
    }


def round_trip(conf: dict[str, str]) -> None:
    """Produce a record and consume it back in a group."""
    topic = f"sasl-{uuid.uuid4().hex[:8]}"
    producer = Producer(conf)
    delivered: list[Any] = []
    producer.produce(topic, b"v", on_delivery=lambda e, m: delivered.append(e))
    producer.flush(DEADLINE_S)
    assert delivered == [None]
    consumer = Consumer({**conf, "group.id": topic, "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                assert message.value() == b"v"
                return
        pytest.fail("nothing consumed")
    finally:
        consumer.close()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_with_credentials_from_alter_user_scram_credentials(
    broker: BrokerProcess, mechanism: str
) -> None:
    user = f"scram-{mechanism[-3:]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    info = ScramCredentialInfo(ScramMechanism[mechanism.replace("-", "_")], 4096)
    futures = admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion(user, info, b"scram-secret")]
    )
    for future in futures.values():
        future.result(DEADLINE_S)
    conf = confluent(
        broker,
        "SASL_PLAINTEXT",
        **{"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": "scram-secret"},
    )
    round_trip(conf)
    errors: list[str] = []
    wrong = {**conf, "sasl.password": "not-it", "error_cb": lambda e: errors.append(e.str())}
    producer = Producer(wrong)
    deadline = time.monotonic() + DEADLINE_S
    while not errors and time.monotonic() < deadline:
        producer.poll(0.1)
    assert any(
        "Authentication failed during authentication due to invalid credentials with SASL "
        f"mechanism {mechanism}" in e
        for e in errors
    ), errors


def test_oauthbearer_unsecured_tokens(broker: BrokerProcess) -> None:
    round_trip(
        confluent(
            broker,
            "SASL_PLAINTEXT",
            **{
                "sasl.mechanism": "OAUTHBEARER",
                "enable.sasl.oauthbearer.unsecure.jwt": "true",
                "sasl.oauthbearer.config": "principal=carol",
            },
        )
    )


def test_oauthbearer_jwt_checked_against_the_jwks(broker: BrokerProcess, signer: Signer) -> None:
    port = port_of(broker, "JWT")
    with closing(WireClient(port)) as client:
        response = login(client, "OAUTHBEARER", oauth(signer.token("dave", 60)))
        assert response.error_code == ErrorCode.none
        # The token's own lifetime bounds the session (no connections.max.reauth.ms).
        assert 50_000 < response.session_lifetime.total_seconds() * 1000 <= 60_000
        assert metadata(client).brokers
    with closing(WireClient(port)) as client:
        token = signer.token("dave", 60, audience="someone-else")
        response = login(client, "OAUTHBEARER", oauth(token))
        assert response.error_code == ErrorCode.none  # RFC 7628: the error challenge first
        assert json.loads(response.auth_bytes)["status"] == "invalid_token"
        response = authenticate(client, b"\x01")
        assert response.error_code == ErrorCode.sasl_authentication_failed
        assert_closed(client)


def test_sasl_ssl_is_tls_then_sasl(broker: BrokerProcess, ca: CertificateAuthority) -> None:
    context = client_context_for(ca)
    port = port_of(broker, "SASL_SSL")
    with closing(TlsWireClient(port, context)) as client:
        assert login(client, "PLAIN", plain("alice", "alice-secret")).error_code == ErrorCode.none
        assert metadata(client).brokers
    round_trip(
        confluent(
            broker,
            "SASL_SSL",
            **{
                "sasl.mechanism": "PLAIN",
                "sasl.username": "bob",
                "sasl.password": "bob-secret",
                "ssl.ca.location": str(ca.truststore.pem),
            },
        )
    )


def client_context_for(ca: CertificateAuthority) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca.truststore.pem))


# -- re-authentication -------------------------------------------------------------------


def test_the_session_lifetime_and_re_authentication(broker: BrokerProcess) -> None:
    with closing(WireClient(port_of(broker, "REAUTH"))) as client:
        response = login(client, "PLAIN", plain("alice", "alice-secret"))
        assert response.session_lifetime == timedelta(milliseconds=REAUTH_MS)
        # v0 has no lifetime field (and its client cannot re-authenticate): still set.
        # The first re-authentication may come at once (Kafka spaces the later ones by 1 s).
        response = login(client, "PLAIN", plain("alice", "alice-secret"))
        assert response.error_code == ErrorCode.none
        assert response.session_lifetime == timedelta(milliseconds=REAUTH_MS)
        assert metadata(client).brokers


def test_a_re_authentication_may_not_change_the_principal(broker: BrokerProcess) -> None:
    with closing(WireClient(port_of(broker, "REAUTH"))) as client:
        assert login(client, "PLAIN", plain("alice", "alice-secret")).error_code == ErrorCode.none
        response = login(client, "PLAIN", plain("bob", "bob-secret"))
        assert response.error_code == ErrorCode.sasl_authentication_failed
        assert response.error_message == (
            "Cannot change principals during re-authentication from User.alice: User.bob"
        )
        assert_closed(client)


def test_an_expired_session_is_closed_at_its_next_request(broker: BrokerProcess) -> None:
    with closing(WireClient(port_of(broker, "REAUTH"))) as client:
        assert login(client, "PLAIN", plain("bob", "bob-secret")).error_code == ErrorCode.none
        assert metadata(client).brokers
        time.sleep(REAUTH_MS / 1000 + 0.2)
        client.send(request_frame(METADATA, 12, 99, METADATA_REQUEST))
        assert_closed(client)


# -- quotas and metrics ------------------------------------------------------------------


def test_user_quotas_apply_to_authenticated_users(broker: BrokerProcess) -> None:
    topic = f"sasl-quota-{uuid.uuid4().hex[:8]}"
    with closing(WireClient(broker.port)) as admin:
        assert create_topic(admin, topic).error_code == ErrorCode.none
        assert alter(admin, [({"user": "alice"}, {"producer_byte_rate": QUOTA})]) == [
            (ErrorCode.none, None)
        ]
    try:
        for user, throttled in (("bob", False), ("alice", True)):
            with closing(WireClient(port_of(broker, "SASL_PLAINTEXT"))) as client:
                token = plain(user, f"{user}-secret")
                assert login(client, "PLAIN", token).error_code == ErrorCode.none
                response = client.call(PRODUCE, 11, produce_request(11, topic, BIG))
            assert response.responses[0].partition_responses[0].error_code == ErrorCode.none
            assert (response.throttle_time.total_seconds() > 0) == throttled, user
    finally:
        with closing(WireClient(broker.port)) as admin:
            alter(admin, [({"user": "alice"}, {"producer_byte_rate": None})])


def test_authentications_are_counted_per_listener_and_mechanism(broker: BrokerProcess) -> None:
    def counter(name: str, listener: str) -> float:
        url = f"http://127.0.0.1:{broker.metrics_port}/metrics"
        text = urllib.request.urlopen(url, timeout=10).read().decode()
        found = re.search(
            rf"^kafka_server_socket_server_metrics_{name}_total"
            rf'\{{listener="{listener}",mechanism="PLAIN"\}} (\S+)$',
            text,
            re.MULTILINE,
        )
        return float(found.group(1)) if found else 0.0

    before = (
        counter("successful_authentication", "REAUTH"),
        counter("failed_authentication", "REAUTH"),
    )
    with closing(WireClient(port_of(broker, "REAUTH"))) as client:
        assert login(client, "PLAIN", plain("bob", "bob-secret")).error_code == ErrorCode.none
    with closing(WireClient(port_of(broker, "REAUTH"))) as client:
        assert login(client, "PLAIN", plain("bob", "x")).error_code != ErrorCode.none
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        after = (
            counter("successful_authentication", "REAUTH"),
            counter("failed_authentication", "REAUTH"),
        )
        if after == (before[0] + 1, before[1] + 1):
            return
        time.sleep(0.2)
    pytest.fail(f"counters {before} -> {after}")


# -- start-up ----------------------------------------------------------------------------


def securities(props: dict[str, str]) -> object:
    return listener_securities(
        BrokerConfig(props), lambda user, mechanism: None, lambda: 0, AuthenticationMetrics()
    )


@pytest.mark.parametrize(
    ("props", "message"),
    [
        (
            {"listeners": "SASL_PLAINTEXT://:1"},
            "sasl.enabled.mechanisms includes GSSAPI (Kafka's default when unset)",
        ),
        (
            {"listeners": "SASL_PLAINTEXT://:1", "sasl.enabled.mechanisms": "PLAIN"},
            "Could not find a 'KafkaServer' entry in the JAAS configuration for SASL "
            "mechanism PLAIN",
        ),
        (
            {
                "listeners": "A://:1",
                "listener.security.protocol.map": "A:SASL_PLAINTEXT",
                "listener.name.a.sasl.enabled.mechanisms": "PLAIN",
                "listener.name.a.plain.sasl.jaas.config": PLAIN_JAAS,
                "listener.name.a.plain.sasl.server.callback.handler.class": "com.example.X",
            },
            "com.example.X is not supported for PLAIN",
        ),
    ],
)
def test_what_a_sasl_listener_cannot_run_stops_start_up(
    props: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)) as raised:
        listener_securities(
            BrokerConfig(props), lambda u, m: None, lambda: 0, AuthenticationMetrics()
        )
    assert "(listener " in str(raised.value)


def test_kerberos_keys_stop_start_up() -> None:
    with pytest.raises(ConfigError, match="does not support Kerberos"):
        BrokerConfig({"sasl.kerberos.service.name": "kafka"})


def test_the_inter_broker_mechanism_must_be_enabled() -> None:
    props = {
        "zookeeper.connect": "127.0.0.1:2181",
        "listeners": "SASL_PLAINTEXT://:1",
        "security.inter.broker.protocol": "SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
    }
    with pytest.raises(ConfigError, match="must be included in sasl.enabled.mechanisms"):
        listener_securities(
            BrokerConfig(props), lambda u, m: None, lambda: 0, AuthenticationMetrics()
        )
