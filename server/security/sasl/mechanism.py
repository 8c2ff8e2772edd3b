"""What every SASL mechanism's server shares: the protocol, the errors, the settings lookup."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

# Kafka's error codes for SaslAuthenticate.
SASL_AUTHENTICATION_FAILED = 58
ILLEGAL_SASL_STATE = 34


class SaslAuthenticationError(Exception):
    """Authentication failed. ``str(e)`` is the message Kafka puts in SaslAuthenticate's
    error_message; ``detail`` says why for the broker's log (never a secret, never sent)."""

    error_code = SASL_AUTHENTICATION_FAILED

    def __init__(self, message: str, detail: str | None = None) -> None:
        super().__init__(message)
        self.detail = detail or message


class IllegalSaslStateError(SaslAuthenticationError):
    """A token arrived when the exchange expects none (Kafka's IllegalSaslStateException)."""

    error_code = ILLEGAL_SASL_STATE


def invalid_credentials(mechanism: str, detail: str) -> SaslAuthenticationError:
    """What Kafka answers for a SaslException: a fixed message, so that the reason (an
    unknown user, a wrong proof) never reaches an unauthenticated client."""
    return SaslAuthenticationError(
        "Authentication failed during authentication due to invalid credentials with SASL "
        f"mechanism {mechanism}",
        detail,
    )


def unexpected_token(state: str) -> IllegalSaslStateError:
    return IllegalSaslStateError(f"Unexpected challenge in Sasl server state {state}")


class SaslServer(Protocol):
    """One authentication exchange on one connection, created by a factory per exchange."""

    mechanism: str

    def evaluate(self, token: bytes) -> bytes:
        """The next challenge (b"" for none); raises SaslAuthenticationError."""
        ...

    @property
    def complete(self) -> bool: ...

    @property
    def principal(self) -> str:
        """``User:<name>`` once complete."""
        ...

    @property
    def session_lifetime_ms(self) -> int | None:
        """The credential's own limit (OAUTHBEARER token expiry minus now, 0 if already past),
        None if the credential has none."""
        ...


def mechanism_setting(settings: Mapping[str, str], mechanism: str, key: str) -> str | None:
    """``key`` for ``mechanism``: Kafka's mechanism-prefixed form (``plain.sasl.jaas.config``,
    what remains of ``listener.name.<l>.plain.sasl.jaas.config``) first, then ``key``."""
    value = settings.get(f"{mechanism.lower()}.{key}")
    return settings.get(key) if value is None else value
