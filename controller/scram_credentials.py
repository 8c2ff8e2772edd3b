"""SCRAM credentials (RFC 5802, RFC 7677) as Kafka derives and stores them.

A user's credential per mechanism is kept under ``/config/users/<user>`` (ZooKeeper) or in
Gregor's metadata as Kafka's string ``salt=<b64>,stored_key=<b64>,server_key=<b64>,
iterations=N`` (ScramCredentialUtils). The password itself is never stored.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# Kafka's ScramMechanism: the hash behind each mechanism name, and its iteration bounds.
MECHANISMS: dict[str, Callable[..., Any]] = {
    "SCRAM-SHA-256": hashlib.sha256,
    "SCRAM-SHA-512": hashlib.sha512,
}
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384

_KEYS = ("salt", "stored_key", "server_key", "iterations")


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __repr__(self) -> str:
        # The keys are secrets (a stolen stored key lets its holder impersonate the
        # server): never let them reach a log line.
        return f"ScramCredential(iterations={self.iterations})"

    def to_config(self) -> str:
        """Kafka's stored form (ScramCredentialUtils.credentialToString)."""
        return (
            f"salt={_b64(self.salt)},stored_key={_b64(self.stored_key)},"
            f"server_key={_b64(self.server_key)},iterations={self.iterations}"
        )

    @classmethod
    def from_config(cls, value: str) -> ScramCredential:
        """Parse Kafka's stored form; ValueError names what is wrong, never the keys."""
        fields: dict[str, str] = {}
        for token in value.split(","):
            key, eq, field = token.partition("=")
            if not eq or not key:
                raise ValueError("Credentials not valid: expected key=value pairs")
            fields[key] = field
        if sorted(fields) != sorted(_KEYS):
            raise ValueError(
                f"Credentials not valid: expected exactly {', '.join(_KEYS)}, "
                f"got {', '.join(sorted(fields))}"
            )
        try:
            salt, stored, server = (base64.b64decode(fields[k], validate=True) for k in _KEYS[:3])
            iterations = int(fields["iterations"])
        except (binascii.Error, ValueError) as e:
            raise ValueError(f"Credentials not valid: {type(e).__name__}") from None
        return cls(salt, stored, server, iterations)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _hash_name(mechanism: str) -> str:
    try:
        return str(MECHANISMS[mechanism]().name)
    except KeyError:
        raise ValueError(f"Unsupported SCRAM mechanism {mechanism!r}") from None


def hmac_digest(mechanism: str, key: bytes, message: bytes) -> bytes:
    return hmac.digest(key, message, _hash_name(mechanism))


def salted_password(mechanism: str, password: bytes, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i) of RFC 5802: PBKDF2 with the mechanism's HMAC, one block."""
    return hashlib.pbkdf2_hmac(_hash_name(mechanism), password, salt, iterations)


def client_key(mechanism: str, salted: bytes) -> bytes:
    return hmac_digest(mechanism, salted, b"Client Key")


def stored_key(mechanism: str, client_key: bytes) -> bytes:
    return hashlib.new(_hash_name(mechanism), client_key).digest()


def server_key(mechanism: str, salted: bytes) -> bytes:
    return hmac_digest(mechanism, salted, b"Server Key")


def _check_iterations(mechanism: str, iterations: int) -> None:
    if iterations < MIN_ITERATIONS:
        raise ValueError(
            f"Iterations {iterations} is less than the minimum {MIN_ITERATIONS} for {mechanism}"
        )
    if iterations > MAX_ITERATIONS:
        raise ValueError(
            f"Iterations {iterations} is more than the maximum {MAX_ITERATIONS} for {mechanism}"
        )


def credential_from_salted_password(
    mechanism: str, salt: bytes, salted: bytes, iterations: int
) -> ScramCredential:
    """The stored credential from a salted password (what AlterUserScramCredentials carries).
    ValueError if the iterations are outside Kafka's bounds for the mechanism."""
    _check_iterations(mechanism, iterations)
    key = client_key(mechanism, salted)
    return ScramCredential(
        salt, stored_key(mechanism, key), server_key(mechanism, salted), iterations
    )


def credential_from_password(
    mechanism: str, password: str, iterations: int = MIN_ITERATIONS, salt: bytes | None = None
) -> ScramCredential:
    """A new credential for ``password`` (UTF-8, as Kafka's ScramFormatter.normalize), with a
    random salt unless one is given."""
    _check_iterations(mechanism, iterations)
    salt = secrets.token_bytes(32) if salt is None else salt
    salted = salted_password(mechanism, password.encode("utf-8"), salt, iterations)
    return credential_from_salted_password(mechanism, salt, salted, iterations)


ScramCredentialLookup = Callable[[str, str], ScramCredential | None]  # (user, mechanism)
