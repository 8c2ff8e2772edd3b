"""SASL, client side: the mechanisms Gregor's own clients speak (PLAIN, SCRAM-SHA-256/512,
OAUTHBEARER with Kafka's unsecured token), their credentials from Kafka client properties,
and the SaslHandshake v1 + SaslAuthenticate v2 exchange, free of I/O: ``exchange`` yields
each request and is sent its response, so the tools' blocking client and the inter-broker
asyncio client drive the same steps.

Credentials come from ``sasl.jaas.config`` as Kafka's login modules read it (``username``
and ``password`` options; OAuthBearerLoginModule's ``unsecuredLogin*`` options), or from
librdkafka's ``sasl.username`` / ``sasl.password``. No message here ever holds a secret.
"""

from __future__ import annotations

import base64
import hmac
import json
import random
import secrets
import time
from collections.abc import Callable, Generator, Mapping
from typing import Any, Protocol

from gregor.controller.scram_credentials import MECHANISMS as SCRAM_MECHANISMS
from gregor.controller.scram_credentials import (
    MIN_ITERATIONS,
    client_key,
    hmac_digest,
    salted_password,
    server_key,
    stored_key,
)
from gregor.server.security.sasl.jaas import parse_server_login_module
from gregor.wire.schema import request_type

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
HANDSHAKE_VERSION, AUTHENTICATE_VERSION = 1, 2
MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS, "OAUTHBEARER")
_UNSECURED = "unsecuredLogin"


class SaslAuthenticationFailed(Exception):
    """The broker refused the mechanism or the credentials; the message is the broker's
    error_message (Kafka's SaslAuthenticationException) or names what went wrong."""


class SaslConfigError(ValueError):
    """Client properties that do not make a SASL login; the message names the key."""


class SaslMechanismClient(Protocol):
    mechanism: str

    def initial_response(self) -> bytes:
        """The first token sent."""
        ...

    def evaluate(self, challenge: bytes) -> bytes | None:
        """The token answering the server's ``challenge``; None once the exchange is done
        (the server's last message accepted). Raises SaslAuthenticationFailed."""
        ...


class PlainClient:
    """RFC 4616: ``authzid NUL authcid NUL passwd``, the authzid empty as Kafka sends it."""

    mechanism = "PLAIN"

    def __init__(self, username: str, password: str) -> None:
        self._username = username
        self._password = password

    def initial_response(self) -> bytes:
        return f"\0{self._username}\0{self._password}".encode()

    def evaluate(self, challenge: bytes) -> bytes | None:
        if challenge:
            raise SaslAuthenticationFailed("PLAIN: the server sent an unexpected challenge")
        return None


def _scram_name(username: str) -> str:
    """RFC 5802's saslname: ``=`` and ``,`` escaped."""
    return username.replace("=", "=3D").replace(",", "=2C")


def _scram_attributes(message: bytes, what: str) -> dict[str, str]:
    try:
        text = message.decode()
        return dict(item.split("=", 1) for item in text.split(","))
    except (UnicodeDecodeError, ValueError):
        raise SaslAuthenticationFailed(f"Invalid SCRAM {what} message") from None


class ScramClient:
    """RFC 5802 / RFC 7677 client: client-first, client-final with the proof, then the
    server's signature checked, as Kafka's ScramSaslClient."""

    def __init__(
        self, mechanism: str, username: str, password: str, nonce: str | None = None
    ) -> None:
        if mechanism not in SCRAM_MECHANISMS:
            raise SaslConfigError(f"Unsupported SCRAM mechanism {mechanism}")
        self.mechanism = mechanism
        self._password = password.encode()
        self._nonce = nonce or secrets.token_urlsafe(24)
        self._first_bare = f"n={_scram_name(username)},r={self._nonce}"
        self._server_signature: bytes | None = None

    def initial_response(self) -> bytes:
        return f"n,,{self._first_bare}".encode()

    def evaluate(self, challenge: bytes) -> bytes | None:
        if self._server_signature is None:
            return self._client_final(challenge)
        attributes = _scram_attributes(challenge, "server final")
        if "e" in attributes:
            raise SaslAuthenticationFailed(
                f"Sasl authentication using {self.mechanism} failed with error: {attributes['e']}"
            )
        signature = base64.b64decode(attributes.get("v", ""))
        if not hmac.compare_digest(signature, self._server_signature):
            raise SaslAuthenticationFailed("Invalid server signature in server final message")
        return None

    def _client_final(self, server_first: bytes) -> bytes:
        attributes = _scram_attributes(server_first, "server first")
        try:
            nonce, salt = attributes["r"], base64.b64decode(attributes["s"], validate=True)
            iterations = int(attributes["i"])
        except (KeyError, ValueError):
            raise SaslAuthenticationFailed("Invalid SCRAM server first message") from None
        if not nonce.startswith(self._nonce):
            raise SaslAuthenticationFailed("Invalid server nonce: does not start with client nonce")
        if iterations < MIN_ITERATIONS:
            raise SaslAuthenticationFailed(
                f"Requested iterations {iterations} is less than the minimum "
                f"{MIN_ITERATIONS} for {self.mechanism}"
            )
        without_proof = f"c=biws,r={nonce}"  # biws: base64 of the gs2 header "n,,"
        auth_message = f"{self._first_bare},{server_first.decode()},{without_proof}".encode()
        salted = salted_password(self.mechanism, self._password, salt, iterations)
        key = client_key(self.mechanism, salted)
        signature = hmac_digest(self.mechanism, stored_key(self.mechanism, key), auth_message)
        proof = bytes(a ^ b for a, b in zip(key, signature, strict=True))
        self._server_signature = hmac_digest(
            self.mechanism, server_key(self.mechanism, salted), auth_message
        )
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


class OAuthBearerClient:
    """RFC 7628 client initial response ``n,,^Aauth=Bearer <token>[^Aext=v...]^A^A``. A
    refusal arrives as a JSON challenge, answered with ``^A`` as the RFC asks; the broker
    then fails the exchange with its error_message."""

    mechanism = "OAUTHBEARER"

    def __init__(self, token: str, extensions: Mapping[str, str] | None = None) -> None:
        self._token = token
        self._extensions = dict(extensions or {})
        self._refused = False

    def initial_response(self) -> bytes:
        extensions = "".join(f"\x01{k}={v}" for k, v in sorted(self._extensions.items()))
        return f"n,,\x01auth=Bearer {self._token}{extensions}\x01\x01".encode()

    def evaluate(self, challenge: bytes) -> bytes | None:
        if not challenge:
            return None
        if self._refused:
            raise SaslAuthenticationFailed("OAUTHBEARER: unexpected challenge after refusal")
        self._refused = True
        return b"\x01"


def unsecured_token(options: Mapping[str, str], now_ms: int | None = None) -> str:
    """The unsigned JWT Kafka's OAuthBearerUnsecuredLoginCallbackHandler builds from
    OAuthBearerLoginModule's options: ``unsecuredLoginStringClaim_<name>``,
    ``unsecuredLoginNumberClaim_<name>``, ``unsecuredLoginListClaim_<name>`` (its first
    character is the separator), ``unsecuredLoginLifetimeSeconds`` (3600),
    ``unsecuredLoginPrincipalClaimName`` (sub); ``iat`` and ``exp`` are added."""
    # Whole milliseconds, as Kafka's: a finer iat could be ahead of the broker's clock in ms.
    issued = (time.time_ns() // 1_000_000 if now_ms is None else now_ms) / 1000
    lifetime = _number(options, f"{_UNSECURED}LifetimeSeconds", "3600")
    claims: dict[str, Any] = {"exp": issued + lifetime, "iat": issued}
    for key, value in options.items():
        kind, _, name = key.removeprefix(_UNSECURED).partition("Claim_")
        if not key.startswith(_UNSECURED) or not name:
            continue
        if name in ("iat", "exp"):
            raise SaslConfigError(f"sasl.jaas.config: option {key} cannot set the {name} claim")
        if kind == "String":
            claims[name] = value
        elif kind == "Number":
            claims[name] = _number(options, key, value)
        elif kind == "List":
            claims[name] = [item for item in value[1:].split(value[:1]) if item] if value else []
        else:
            raise SaslConfigError(f"sasl.jaas.config: unknown option {key}")
    principal = options.get(f"{_UNSECURED}PrincipalClaimName", "sub")
    if not isinstance(claims.get(principal), str) or not claims[principal].strip():
        raise SaslConfigError(
            f"sasl.jaas.config: the unsecured token needs the principal claim {principal!r} "
            f"({_UNSECURED}StringClaim_{principal}=...)"
        )
    header = json.dumps({"alg": "none"}, separators=(",", ":"))
    return f"{_b64url(header)}.{_b64url(json.dumps(claims, separators=(',', ':')))}."


def _b64url(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).rstrip(b"=").decode()


def _number(options: Mapping[str, str], key: str, default: str) -> float:
    text = options.get(key, default)
    try:
        return float(text) if "." in text else int(text)
    except ValueError:
        raise SaslConfigError(f"sasl.jaas.config: option {key} must be a number") from None


def mechanism_client_factory(properties: Mapping[str, str]) -> Callable[[], SaslMechanismClient]:
    """A new mechanism client per connection, from ``sasl.mechanism`` (librdkafka:
    ``sasl.mechanisms``) and the credentials the properties hold. Raises SaslConfigError."""
    mechanism = properties.get("sasl.mechanism", properties.get("sasl.mechanisms", "GSSAPI"))
    mechanism = mechanism.strip().upper()
    if mechanism not in MECHANISMS:
        raise SaslConfigError(
            f"sasl.mechanism {mechanism} is not supported by Gregor's clients "
            f"(it takes {', '.join(MECHANISMS)})"
        )
    options: dict[str, str] = {}
    if "sasl.jaas.config" in properties:
        try:
            options = parse_server_login_module(properties["sasl.jaas.config"]).options
        except ValueError as e:
            raise SaslConfigError(f"sasl.jaas.config: {e}") from None
    if mechanism == "OAUTHBEARER":
        if "sasl.login.callback.handler.class" in properties:
            raise SaslConfigError(
                "sasl.login.callback.handler.class is not supported by Gregor's clients "
                "(OAUTHBEARER uses the unsecured token of OAuthBearerLoginModule's options)"
            )
        unsecured_token(options)  # refuse options that make no token now, not per connection
        prefix = f"{_UNSECURED}Extension_"
        extensions = {k.removeprefix(prefix): v for k, v in options.items() if k.startswith(prefix)}
        return lambda: OAuthBearerClient(unsecured_token(options), extensions)
    username = options.get("username", properties.get("sasl.username"))
    password = options.get("password", properties.get("sasl.password"))
    if username is None or password is None:
        raise SaslConfigError(
            f"sasl.mechanism {mechanism} needs a username and password: sasl.jaas.config "
            'with username="..." password="..." (or sasl.username and sasl.password)'
        )
    if mechanism == "PLAIN":
        return lambda: PlainClient(username, password)
    return lambda: ScramClient(mechanism, username, password)


def reauthentication_delay_s(session_lifetime_ms: int) -> float:
    """When to re-authenticate (KIP-368): at a random 85-95% of the session's lifetime, as
    Kafka's clients do, so that many connections do not all re-authenticate at once."""
    return session_lifetime_ms / 1000 * random.uniform(0.85, 0.95)


def exchange(client: SaslMechanismClient) -> Generator[Any, Any, int]:
    """SaslHandshake v1 then SaslAuthenticate v2 until ``client`` is done: yields each
    request, is sent its decoded response, returns the session lifetime in ms (0: none).
    Raises SaslAuthenticationFailed."""
    handshake = request_type(SASL_HANDSHAKE, HANDSHAKE_VERSION)
    answer = yield handshake(mechanism=client.mechanism)
    if answer.error_code.value != 0:
        enabled = ", ".join(answer.mechanisms)
        raise SaslAuthenticationFailed(
            f"Client SASL mechanism '{client.mechanism}' not enabled in the server, "
            f"enabled mechanisms are [{enabled}] ({answer.error_code.name.upper()})"
        )
    authenticate = request_type(SASL_AUTHENTICATE, AUTHENTICATE_VERSION)
    token: bytes | None = client.initial_response()
    while token is not None:
        answer = yield authenticate(auth_bytes=token)
        if answer.error_code.value != 0:
            raise SaslAuthenticationFailed(
                answer.error_message
                or f"Authentication failed with SASL mechanism {client.mechanism} "
                f"({answer.error_code.name.upper()})"
            )
        token = client.evaluate(answer.auth_bytes)
    return int(answer.session_lifetime.total_seconds() * 1000)
