"""Gregor's own clients over TLS and SASL: the SASL client mechanisms against RFC vectors and
the SASL server mechanisms in process, the client properties they are built from, the
inter-broker client's settings, and both clients and the harness against brokers with SSL
listeners (certificates from server/harness/certs.py) and SASL listeners."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from gregor.controller.scram_credentials import (
    ScramCredential,
    credential_from_password,
    salted_password,
)
from gregor.server.broker_client import InterBrokerClient, inter_broker_client_settings
from gregor.server.cli.client.connection import AuthenticationFailed, Client, ClientError, schema
from gregor.server.config import listener_settings
from gregor.server.harness.broker_process import (
    START_TIMEOUT_S,
    BrokerProcess,
    BrokerProcessError,
)
from gregor.server.harness.certs import (
    CertificateAuthority,
    Identity,
    broker_ssl_properties,
    client_ssl_properties,
)
from gregor.server.security.client_security import ClientSecurity
from gregor.server.security.sasl.mechanism import SaslAuthenticationError
from gregor.server.security.sasl.mechanisms import server_mechanisms
from gregor.server.security.sasl_client import (
    OAuthBearerClient,
    PlainClient,
    SaslAuthenticationFailed,
    SaslConfigError,
    SaslMechanismClient,
    ScramClient,
    mechanism_client_factory,
    unsecured_token,
)
from gregor.wire.schema import request_type
from gregor.wire.versions import API_VERSIONS
from tests.cli_run import gregor, ok

# RFC 7677 section 3: user "user", password "pencil".
RFC7677_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC7677_SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
RFC7677_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC7677_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


def rfc7677_client() -> ScramClient:
    return ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC7677_CLIENT_NONCE)


def test_scram_sha256_client_matches_rfc7677() -> None:
    client = rfc7677_client()
    assert client.initial_response() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    assert client.evaluate(RFC7677_SERVER_FIRST) == RFC7677_CLIENT_FINAL
    assert client.evaluate(RFC7677_SERVER_FINAL) is None


@pytest.mark.parametrize(
    ("server_first", "server_final", "message"),
    [
        (RFC7677_SERVER_FIRST, b"v=" + base64.b64encode(b"x" * 32), "Invalid server signature"),
        (RFC7677_SERVER_FIRST, b"e=invalid-proof", "failed with error: invalid-proof"),
        (RFC7677_SERVER_FIRST.replace(b"r=rOpr", b"r=xOpr"), None, "does not start with"),
        (RFC7677_SERVER_FIRST.replace(b"i=4096", b"i=4095"), None, "less than the minimum"),
        (b"r=rOprNGfwEbeRWgbNEkqO,s=not base64!,i=4096", None, "Invalid SCRAM server first"),
        (b"\xff", None, "Invalid SCRAM server first"),
    ],
)
def test_scram_client_refuses_a_bad_server(
    server_first: bytes, server_final: bytes | None, message: str
) -> None:
    client = rfc7677_client()
    client.initial_response()
    with pytest.raises(SaslAuthenticationFailed, match=message):
        client.evaluate(server_first)
        assert server_final is not None
        client.evaluate(server_final)


def test_scram_client_escapes_the_user_name_and_makes_fresh_nonces() -> None:
    first = ScramClient("SCRAM-SHA-512", "a=b,c", "pw").initial_response()
    assert first.startswith(b"n,,n=a=3Db=2Cc,r=")
    nonces = {ScramClient("SCRAM-SHA-512", "u", "pw").initial_response() for _ in range(3)}
    assert len(nonces) == 3


def test_plain_client_sends_rfc4616_message() -> None:
    client = PlainClient("alice", "alice-secret")
    assert client.initial_response() == b"\0alice\0alice-secret"
    assert client.evaluate(b"") is None
    with pytest.raises(SaslAuthenticationFailed):
        client.evaluate(b"unexpected")


def _claims(token: str) -> dict[str, object]:
    header, payload, signature = token.split(".")
    assert json.loads(base64.urlsafe_b64decode(header + "==")) == {"alg": "none"}
    assert signature == ""
    claims: dict[str, object] = json.loads(base64.urlsafe_b64decode(payload + "=="))
    return claims


def test_unsecured_token_has_kafkas_claims() -> None:
    options = {
        "unsecuredLoginStringClaim_sub": "alice",
        "unsecuredLoginNumberClaim_level": "3",
        "unsecuredLoginListClaim_scope": "|read|write",
        "unsecuredLoginLifetimeSeconds": "60",
        "unsecuredLoginExtension_traceId": "123",
    }
    claims = _claims(unsecured_token(options, now_ms=1_000_500))
    assert claims == {
        "sub": "alice",
        "level": 3,
        "scope": ["read", "write"],
        "iat": 1000.5,
        "exp": 1060.5,
    }
    principal = {
        "unsecuredLoginStringClaim_user": "bob",
        "unsecuredLoginPrincipalClaimName": "user",
    }
    assert _claims(unsecured_token(principal))["user"] == "bob"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "principal claim 'sub'"),
        ({"unsecuredLoginStringClaim_sub": "a", "unsecuredLoginStringClaim_exp": "1"}, "exp"),
        ({"unsecuredLoginStringClaim_sub": "a", "unsecuredLoginLifetimeSeconds": "x"}, "number"),
        ({"unsecuredLoginStringClaim_sub": "a", "unsecuredLoginBadClaim_x": "1"}, "unknown"),
    ],
)
def test_unsecured_token_refuses_bad_options(options: dict[str, str], message: str) -> None:
    with pytest.raises(SaslConfigError, match=message):
        unsecured_token(options)


def test_oauthbearer_client_initial_response_and_refusal() -> None:
    client = OAuthBearerClient("tok.en.", {"b": "2", "a": "1"})
    assert client.initial_response() == b"n,,\x01auth=Bearer tok.en.\x01a=1\x01b=2\x01\x01"
    assert client.evaluate(b"") is None
    # A refusal is a JSON challenge; RFC 7628 answers it with ^A and the server then fails.
    refusing = OAuthBearerClient("tok.en.")
    assert refusing.evaluate(b'{"status":"invalid_token"}') == b"\x01"


def test_jaas_config_errors_name_the_key_and_no_value() -> None:
    jaas = f'{SCRAM_MODULE} required username="u" password="secret"'  # no ';'
    with pytest.raises(SaslConfigError, match="sasl.jaas.config") as raised:
        mechanism_client_factory({"sasl.mechanism": "SCRAM-SHA-256", "sasl.jaas.config": jaas})
    assert "secret" not in str(raised.value)


def test_mechanism_clients_from_client_properties() -> None:
    jaas = f'{PLAIN_MODULE} required username="u" password="p";'
    plain = mechanism_client_factory({"sasl.mechanism": "PLAIN", "sasl.jaas.config": jaas})()
    assert plain.initial_response() == b"\0u\0p"
    librdkafka = {"sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": "u", "sasl.password": "p"}
    scram = mechanism_client_factory(librdkafka)()
    assert scram.mechanism == "SCRAM-SHA-256"
    assert scram.initial_response().startswith(b"n,,n=u,r=")
    oauth = mechanism_client_factory(
        {
            "sasl.mechanism": "OAUTHBEARER",
            "sasl.jaas.config": f"{OAUTH_MODULE} required "
            'unsecuredLoginStringClaim_sub="admin" unsecuredLoginExtension_x="1";',
        }
    )()
    first = oauth.initial_response()
    assert first.startswith(b"n,,\x01auth=Bearer ") and first.endswith(b"\x01x=1\x01\x01")
    token = first.split(b"Bearer ")[1].split(b"\x01")[0].decode()
    assert _claims(token)["sub"] == "admin"


@pytest.mark.parametrize(
    ("properties", "message"),
    [
        ({}, "GSSAPI is not supported"),
        ({"sasl.mechanism": "PLAIN", "sasl.username": "u"}, "needs a username and password"),
        (
            {"sasl.mechanism": "OAUTHBEARER", "sasl.login.callback.handler.class": "x.Y"},
            "sasl.login.callback.handler.class",
        ),
    ],
)
def test_mechanism_client_refuses_incomplete_properties(
    properties: dict[str, str], message: str
) -> None:
    with pytest.raises(SaslConfigError, match=message):
        mechanism_client_factory(properties)


def test_client_security_from_properties() -> None:
    assert ClientSecurity.from_properties(None) == ClientSecurity("PLAINTEXT", None, None)
    sasl = ClientSecurity.from_properties(
        {
            "security.protocol": "sasl_plaintext",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "u",
            "sasl.password": "secret",
        }
    )
    assert sasl.protocol == "SASL_PLAINTEXT" and sasl.tls is None and sasl.sasl is not None
    with pytest.raises(ValueError, match="security.protocol"):
        ClientSecurity.from_properties({"security.protocol": "KERBEROS"})


def test_inter_broker_client_settings_follow_kafka() -> None:
    listener = {
        "ssl.truststore.location": "/t.pem",
        "ssl.keystore.location": "/k.pem",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "scram-sha-512.sasl.jaas.config": 'x.Y required username="b" password="p";',
        "plain.sasl.jaas.config": "x.Z required;",
        "num.io.threads": "8",
    }
    assert inter_broker_client_settings(listener, "SASL_SSL") == {
        "security.protocol": "SASL_SSL",
        "ssl.truststore.location": "/t.pem",
        "ssl.keystore.location": "/k.pem",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": 'x.Y required username="b" password="p";',
    }
    assert inter_broker_client_settings(listener, "SSL") == {
        "security.protocol": "SSL",
        "ssl.truststore.location": "/t.pem",
        "ssl.keystore.location": "/k.pem",
    }


SERVER_SETTINGS = {
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
    "plain.sasl.jaas.config": f'{PLAIN_MODULE} required user_alice="alice-secret";',
    "oauthbearer.sasl.jaas.config": f"{OAUTH_MODULE} required;",
}


def round_trip(client: SaslMechanismClient) -> str:
    """Tokens between ``client`` and the broker's server mechanism (``server_mechanisms``,
    in process) until the client is done; the principal the server authenticated."""

    def credentials(user: str, mechanism: str) -> ScramCredential | None:
        return SCRAM_USERS.get((user, mechanism))

    server = server_mechanisms(SERVER_SETTINGS, credentials, lambda: time.time_ns() // 10**6)[
        client.mechanism
    ]()
    token: bytes | None = client.initial_response()
    while token is not None:
        token = client.evaluate(server.evaluate(token))
    assert server.complete
    return server.principal


SCRAM_USERS = {
    ("bob,=x", m): credential_from_password(m, "bob-secret")
    for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")
}


def test_plain_client_and_server_round_trip() -> None:
    assert round_trip(PlainClient("alice", "alice-secret")) == "User:alice"
    with pytest.raises(SaslAuthenticationError):
        round_trip(PlainClient("alice", "wrong"))


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_client_and_server_round_trip(mechanism: str) -> None:
    assert round_trip(ScramClient(mechanism, "bob,=x", "bob-secret")) == "User:bob,=x"
    for user, password in [("bob,=x", "wrong"), ("nobody", "bob-secret")]:
        with pytest.raises(SaslAuthenticationError):
            round_trip(ScramClient(mechanism, user, password))


def test_oauthbearer_unsecured_token_and_server_round_trip() -> None:
    login = f'{OAUTH_MODULE} required unsecuredLoginStringClaim_sub="carol";'
    properties = {"sasl.mechanism": "OAUTHBEARER", "sasl.jaas.config": login}
    assert round_trip(mechanism_client_factory(properties)()) == "User:carol"
    expired = login.replace(";", ' unsecuredLoginLifetimeSeconds="-60";')
    refused = mechanism_client_factory(properties | {"sasl.jaas.config": expired})()
    with pytest.raises(SaslAuthenticationError):  # after the error challenge and ^A
        round_trip(refused)


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> CertificateAuthority:
    return CertificateAuthority(tmp_path_factory.mktemp("tls"))


def client_ssl(ca: CertificateAuthority, identity: Identity | None = None) -> dict[str, str]:
    return {"security.protocol": "SSL", **client_ssl_properties(ca.truststore, identity, "PEM")}


@pytest.fixture(scope="module")
def mutual_tls_broker(
    ca: CertificateAuthority, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    """A PLAINTEXT and an SSL listener (client certificates required), probed on the SSL one
    by the harness's own client."""
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        **broker_ssl_properties(ca.server("broker"), "PEM", client_auth="required"),
    }
    config = client_ssl(ca, ca.client("harness"))
    directory = tmp_path_factory.mktemp("mutual-tls")
    with BrokerProcess(directory, overrides, client_config=config, probe_listener="SSL") as b:
        yield b


def tools_metadata(port: int, config: dict[str, str]) -> list[int]:
    with Client(f"127.0.0.1:{port}", "tls-test", timeout_s=10, config=config) as client:
        return [b.node_id for b in client.metadata([]).brokers]


def test_harness_probes_and_creates_topics_on_the_listener_it_is_told(
    mutual_tls_broker: BrokerProcess, ca: CertificateAuthority
) -> None:
    mutual_tls_broker.create_topic("over-tls", 2)
    listening = re.findall(r"listening on (.*)", mutual_tls_broker.start_output())[-1]
    assert f"SSL://127.0.0.1:{mutual_tls_broker.port}" in listening
    config = client_ssl(ca, ca.client("alice"))
    with Client(mutual_tls_broker.bootstrap, "t", timeout_s=10, config=config) as client:
        [topic] = client.metadata(["over-tls"]).topics
        assert len(topic.partitions) == 2


def test_tools_client_needs_the_trusted_ca_and_its_certificate_for_mutual_tls(
    mutual_tls_broker: BrokerProcess, ca: CertificateAuthority, tmp_path: Path
) -> None:
    port = mutual_tls_broker.port
    assert tools_metadata(port, client_ssl(ca, ca.client("alice"))) == [0]
    stranger = CertificateAuthority(tmp_path / "other")
    with pytest.raises(ClientError, match="CERTIFICATE_VERIFY_FAILED"):
        tools_metadata(port, client_ssl(stranger, stranger.client("alice")))
    with pytest.raises(ClientError, match="closed by the broker|certificate required"):
        tools_metadata(port, client_ssl(ca))
    with pytest.raises(ClientError, match="closed by the broker"):
        tools_metadata(port, {})  # plaintext to a TLS port


def test_tools_client_checks_the_broker_host_name(ca: CertificateAuthority, tmp_path: Path) -> None:
    overrides = {
        "listeners": "SSL://127.0.0.1:0",
        **broker_ssl_properties(ca.server("elsewhere", hosts=("broker.example",)), "PEM"),
    }
    unchecked = client_ssl(ca) | {"ssl.endpoint.identification.algorithm": ""}
    with BrokerProcess(tmp_path / "b", overrides, client_config=unchecked) as broker:
        with pytest.raises(ClientError, match="CERTIFICATE_VERIFY_FAILED"):
            tools_metadata(broker.port, client_ssl(ca))
        assert tools_metadata(broker.port, unchecked) == [0]


def test_gregor_topics_with_command_config_over_mutual_tls(
    mutual_tls_broker: BrokerProcess, ca: CertificateAuthority, tmp_path: Path
) -> None:
    config = tmp_path / "client.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in client_ssl(ca, ca.client("cli")).items()))
    secured = ("--bootstrap-server", mutual_tls_broker.bootstrap, "--command-config", str(config))
    ok("topics", *secured, "--create", "--topic", "from-cli", "--partitions", "3")
    assert "from-cli" in ok("topics", *secured, "--list").out.split()
    refused = gregor("topics", "--bootstrap-server", mutual_tls_broker.bootstrap, "--list")
    assert refused.code == 1 and "closed by the broker" in refused.err


def test_inter_broker_client_uses_the_listeners_keystore_for_mutual_tls(
    mutual_tls_broker: BrokerProcess, ca: CertificateAuthority
) -> None:
    identity = ca.server("broker-1")
    raw = {
        "listener.name.ssl.ssl.keystore.type": "PKCS12",
        "listener.name.ssl.ssl.keystore.location": str(identity.pkcs12),
        "listener.name.ssl.ssl.keystore.password": identity.password,
        "ssl.keystore.location": "/nonexistent/the-other-listeners.p12",
        **client_ssl_properties(ca.truststore),
    }
    settings = inter_broker_client_settings(listener_settings(raw, "SSL"), "SSL")
    port = mutual_tls_broker.port

    async def main() -> None:
        client = InterBrokerClient(
            "broker-1", lambda _: ("127.0.0.1", port), 10_000, client_settings=settings
        )
        try:
            request = request_type(API_VERSIONS, 3)(
                client_software_name="gregor", client_software_version="1"
            )
            assert (await client.send(0, request, 3)).error_code == ErrorCode.none
        finally:
            await client.close()

    asyncio.run(main())


JAAS_PLAIN = (
    f'{PLAIN_MODULE} required username="admin" password="admin-secret" '
    'user_admin="admin-secret" user_alice="alice-secret";'
)
REAUTH_MS = 1500  # connections.max.reauth.ms of the SASL broker


def sasl_config(mechanism: str, user: str, password: str) -> dict[str, str]:
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.jaas.config": f'{SCRAM_MODULE} required username="{user}" password="{password}";',
    }


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A SASL_PLAINTEXT listener with every mechanism, sessions of REAUTH_MS; probed as the
    PLAIN user admin, and bob given SCRAM credentials."""
    overrides = {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS_PLAIN,
        "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": f"{OAUTH_MODULE} required;",
        "connections.max.reauth.ms": str(REAUTH_MS),
    }
    admin = sasl_config("PLAIN", "admin", "admin-secret")
    directory = tmp_path_factory.mktemp("sasl")
    with BrokerProcess(directory, overrides, client_config=admin) as broker:
        with Client(broker.bootstrap, "t", timeout_s=10, config=admin) as client:
            upsert = schema(51, 0, "ScramCredentialUpsertion")
            salt = b"pepper"
            # One request per mechanism: Kafka refuses a user named twice in one request.
            for code, mechanism in [(1, "SCRAM-SHA-256"), (2, "SCRAM-SHA-512")]:
                salted = salted_password(mechanism, b"bob-secret", salt, 4096)
                bob = upsert(
                    name="bob", mechanism=code, iterations=4096, salt=salt, salted_password=salted
                )
                request = schema(51, 0)(deletions=(), upsertions=(bob,))
                [result] = client.call_controller(request).results
                assert result.error_code == ErrorCode.none, result
        yield broker


@pytest.mark.parametrize(
    "config",
    [
        sasl_config("PLAIN", "alice", "alice-secret"),
        sasl_config("SCRAM-SHA-256", "bob", "bob-secret"),
        sasl_config("SCRAM-SHA-512", "bob", "bob-secret"),
        {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER",
            "sasl.jaas.config": f'{OAUTH_MODULE} required unsecuredLoginStringClaim_sub="carol";',
        },
    ],
    ids=["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"],
)
def test_tools_client_authenticates_with_each_mechanism(
    sasl_broker: BrokerProcess, config: dict[str, str]
) -> None:
    assert tools_metadata(sasl_broker.port, config) == [0]
    wrong = config | {"sasl.jaas.config": config["sasl.jaas.config"].replace("-secret", "-x")}
    if wrong != config:
        with pytest.raises(AuthenticationFailed, match="Authentication failed") as refused:
            tools_metadata(sasl_broker.port, wrong)
        assert "-x" not in str(refused.value)


def test_harness_fails_at_once_with_credentials_the_broker_refuses(
    sasl_broker: BrokerProcess, tmp_path: Path
) -> None:
    overrides = {k: v for k, v in sasl_broker.overrides.items() if k != "log.dirs"}
    wrong = sasl_config("PLAIN", "admin", "not-it")
    started = time.monotonic()
    with pytest.raises(BrokerProcessError, match="authentication with .* failed"):
        with BrokerProcess(tmp_path / "b", overrides, client_config=wrong):
            pass
    assert time.monotonic() - started < START_TIMEOUT_S


def test_tools_connection_reauthenticates_before_its_session_expires(
    sasl_broker: BrokerProcess,
) -> None:
    config = sasl_config("SCRAM-SHA-512", "bob", "bob-secret")
    with Client(sasl_broker.bootstrap, "t", timeout_s=10, config=config) as client:
        connection = client.bootstrap()
        assert client.metadata([]).brokers
        for _ in range(2):  # each past the last session's end: the broker would close it
            time.sleep(REAUTH_MS / 1000 * 1.2)
            assert client.metadata([]).brokers
        assert client.bootstrap() is connection and not connection.broken


def test_inter_broker_client_authenticates_and_reauthenticates(
    sasl_broker: BrokerProcess,
) -> None:
    raw = {
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS_PLAIN,
    }
    listener = listener_settings(raw, "SASL_PLAINTEXT")
    settings = inter_broker_client_settings(listener, "SASL_PLAINTEXT")
    port = sasl_broker.port
    connects = 0

    def endpoint_of(_: int) -> tuple[str, int]:
        nonlocal connects
        connects += 1
        return ("127.0.0.1", port)

    async def main() -> None:
        client = InterBrokerClient("broker-1", endpoint_of, 10_000, client_settings=settings)
        try:
            request = request_type(API_VERSIONS, 3)(
                client_software_name="gregor", client_software_version="1"
            )
            assert (await client.send(0, request, 3)).error_code == ErrorCode.none
            for _ in range(2):  # each past the last session's end
                await asyncio.sleep(REAUTH_MS / 1000 * 1.2)
                assert (await client.send(0, request, 3)).error_code == ErrorCode.none
        finally:
            await client.close()

    asyncio.run(main())
    assert connects == 1, "one connection, re-authenticated in band"
