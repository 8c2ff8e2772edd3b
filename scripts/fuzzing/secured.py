"""The secured broker that ``scripts/fuzz --secured`` attacks, and its well-behaved clients.

Listeners (ports picked up front, so they survive a restart):

- PLAINTEXT: administration only (topics, SCRAM credentials; the harness probes it);
- SSL: ``ssl.client.auth=required``, so a hostile client without a certificate never gets
  past the handshake;
- SASL_PLAINTEXT: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER (unsecured tokens),
  PLAIN sessions of REAUTH_MS (KIP-368), for the re-authentication abuse;
- SASL_SSL: the same four mechanisms over TLS; the canary authenticates here with
  SCRAM-SHA-512;
- JWT: SASL_PLAINTEXT with OAUTHBEARER tokens checked against a JWKS file whose key the
  fuzz holds, so that it can sign tokens of hostile claims the validator must then read.
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from fuzzing.sasl_tokens import MECHANISMS, Signer, b64url, unsecured_jwt
from gregor.server.cli.client.connection import Client
from gregor.server.cli.user_configs import alter_scram
from gregor.server.harness.certs import CertificateAuthority, broker_ssl_properties
from gregor.server.security.sasl_client import (
    OAuthBearerClient,
    PlainClient,
    SaslAuthenticationFailed,
    SaslMechanismClient,
    ScramClient,
    exchange,
)
from tests.kafka_wire import WireClient

SSL, SASL_PLAINTEXT, SASL_SSL, JWT = "SSL", "SASL_PLAINTEXT", "SASL_SSL", "JWT"
PROTOCOLS = {
    "PLAINTEXT": "PLAINTEXT",
    SSL: "SSL",
    SASL_PLAINTEXT: "SASL_PLAINTEXT",
    SASL_SSL: "SASL_SSL",
    JWT: "SASL_PLAINTEXT",
}
TLS_LISTENERS = (SSL, SASL_SSL)
SASL_LISTENERS = (SASL_PLAINTEXT, SASL_SSL, JWT)
USERS = {"alice": "alice-secret", "bob": "bob-secret", "canary": "canary-secret"}
CANARY_USER, CANARY_MECHANISM = "canary", "SCRAM-SHA-512"
REAUTH_MS = 2000
AUDIENCE = "gregor-fuzz"
KEY_ID = "k1"
IO_TIMEOUT_S = 10.0
PLAIN_JAAS = "org.apache.kafka.common.security.plain.PlainLoginModule required " + " ".join(
    f'user_{user}="{password}"' for user, password in USERS.items()
)
OAUTH_JAAS = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
JWT_VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"


@dataclass(frozen=True)
class Targets:
    """What the attackers and the canary need: each listener's port, the CA to trust, the
    key the JWT listener's JWKS publishes (PEM, to sign hostile tokens)."""

    ports: dict[str, int]
    ca_pem: Path
    jwt_key_pem: bytes

    def is_tls(self, listener: str) -> bool:
        return PROTOCOLS[listener] in ("SSL", "SASL_SSL")


def _free_ports(count: int) -> list[int]:
    socks = [socket.socket() for _ in range(count)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def _prefixed(listener: str, props: dict[str, str]) -> dict[str, str]:
    return {f"listener.name.{listener.lower()}.{k}": v for k, v in props.items()}


def prepare(directory: Path) -> tuple[dict[str, str], Targets]:
    """The broker's overrides and the targets: certificates and the JWKS in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = CertificateAuthority(directory / "tls")
    server_tls = broker_ssl_properties(ca.server("broker"))
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    numbers = key.public_key().public_numbers()
    jwk = (
        f'{{"kty":"RSA","kid":"{KEY_ID}","use":"sig","alg":"RS256",'
        f'"n":"{b64url(numbers.n.to_bytes((numbers.n.bit_length() + 7) // 8, "big"))}",'
        f'"e":"{b64url(numbers.e.to_bytes(3, "big"))}"}}'
    )
    jwks = directory / "jwks.json"
    jwks.write_text(f'{{"keys":[{jwk}]}}')
    ports = dict(zip(PROTOCOLS, _free_ports(len(PROTOCOLS)), strict=True))
    sasl = {
        "sasl.enabled.mechanisms": ",".join(MECHANISMS),
        "plain.sasl.jaas.config": PLAIN_JAAS + ";",
        "oauthbearer.sasl.jaas.config": OAUTH_JAAS,
    }
    overrides = {
        "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
        "listener.security.protocol.map": ",".join(f"{n}:{p}" for n, p in PROTOCOLS.items()),
        **_prefixed(SSL, {**server_tls, "ssl.client.auth": "required"}),
        **_prefixed(SASL_PLAINTEXT, {**sasl, "plain.connections.max.reauth.ms": str(REAUTH_MS)}),
        **_prefixed(SASL_SSL, {**sasl, **server_tls}),
        **_prefixed(
            JWT,
            {
                "sasl.enabled.mechanisms": "OAUTHBEARER",
                "oauthbearer.sasl.jaas.config": OAUTH_JAAS,
                "oauthbearer.sasl.server.callback.handler.class": JWT_VALIDATOR,
                "sasl.oauthbearer.jwks.endpoint.url": jwks.as_uri(),
                "sasl.oauthbearer.expected.audience": AUDIENCE,
            },
        ),
    }
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return overrides, Targets(ports, ca.truststore.pem, pem)


def create_users(targets: Targets) -> None:
    """SCRAM-SHA-256 and -512 credentials for every user, over the PLAINTEXT listener."""
    with Client(f"127.0.0.1:{targets.ports['PLAINTEXT']}", "gregor-fuzz") as client:
        for user, password in USERS.items():
            alter_scram(
                client,
                user,
                {m: f"password={password}" for m in MECHANISMS if m.startswith("SCRAM")},
                [],
            )


@cache
def signer(key_pem: bytes) -> Signer:
    """Signs (header JSON, claims JSON) with ``key_pem`` (Targets.jwt_key_pem, the JWT
    listener's key), whatever they say."""
    key = serialization.load_pem_private_key(key_pem, None)
    assert isinstance(key, rsa.RSAPrivateKey)

    def sign(head: bytes, claims: bytes) -> str:
        signed = f"{b64url(head)}.{b64url(claims)}"
        signature = key.sign(signed.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signed}.{b64url(signature)}"

    return sign


def good_jwt(sign: Signer, subject: str, lifetime_s: int = 300) -> str:
    now = int(time.time())
    claims = f'{{"sub":"{subject}","aud":"{AUDIENCE}","iat":{now},"exp":{now + lifetime_s}}}'
    return sign(f'{{"alg":"RS256","kid":"{KEY_ID}"}}'.encode(), claims.encode())


def client_context(targets: Targets) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(targets.ca_pem))
    context.check_hostname = False  # the certificate names localhost; we dial 127.0.0.1
    return context


def connect(
    targets: Targets,
    listener: str,
    timeout: float = IO_TIMEOUT_S,
    context: ssl.SSLContext | None = None,
) -> socket.socket:
    """A connection to ``listener``, its TLS handshake done on a TLS listener; OSError
    (ssl.SSLError included) if it cannot be made."""
    sock = socket.create_connection(("127.0.0.1", targets.ports[listener]), timeout=timeout)
    if not targets.is_tls(listener):
        return sock
    try:
        return (context or client_context(targets)).wrap_socket(sock, server_hostname="localhost")
    except OSError:
        sock.close()
        raise


class SocketWireClient(WireClient):
    """The raw-protocol client over a socket already connected (and TLS-wrapped)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._next = 0


def call(client: WireClient, request: Any) -> Any:
    return client.call(request.__api_key__, request.__version__, request)


def login(client: WireClient, mechanism: SaslMechanismClient) -> int:
    """SaslHandshake v1 and SaslAuthenticate v2 until done: the session lifetime in ms.
    ConnectionError if the broker refuses (so callers treat it as a failed connection)."""
    steps = exchange(mechanism)
    try:
        request = next(steps)
        while True:
            request = steps.send(call(client, request))
    except StopIteration as done:
        lifetime: int = done.value
        return lifetime
    except SaslAuthenticationFailed as e:
        raise ConnectionError(f"SASL authentication refused: {e}") from None


def mechanism_client(
    mechanism: str, user: str, sign: Callable[[], Signer] | None = None
) -> SaslMechanismClient:
    """A well-behaved client of ``mechanism`` for ``user`` (OAUTHBEARER: an unsecured token,
    or a signed one when ``sign`` is given)."""
    if mechanism == "PLAIN":
        return PlainClient(user, USERS[user])
    if mechanism.startswith("SCRAM-"):
        return ScramClient(mechanism, user, USERS[user])
    if sign is not None:
        return OAuthBearerClient(good_jwt(sign(), user))
    now = int(time.time())
    claims = f'{{"sub":"{user}","iat":{now},"exp":{now + 300}}}'.encode()
    return OAuthBearerClient(unsecured_jwt(claims))


def canary_client(targets: Targets) -> WireClient:
    """The canary's connection: TLS, then SCRAM-SHA-512 as CANARY_USER, on SASL_SSL."""
    client = SocketWireClient(connect(targets, SASL_SSL))
    try:
        login(client, ScramClient(CANARY_MECHANISM, CANARY_USER, USERS[CANARY_USER]))
    except BaseException:
        client.close()
        raise
    return client


def wait_for_canary_login(targets: Targets, deadline_s: float = 30.0) -> None:
    """Until the canary's credentials (just created) authenticate."""
    give_up = time.monotonic() + deadline_s
    while True:
        try:
            canary_client(targets).close()
            return
        except OSError:
            if time.monotonic() > give_up:
                raise
            time.sleep(0.1)
