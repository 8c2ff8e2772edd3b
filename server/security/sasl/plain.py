"""SASL/PLAIN (RFC 4616) with users from the JAAS config, as Kafka's PlainSaslServer and
PlainServerCallbackHandler: ``user_<name>="<password>"`` options of PlainLoginModule."""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from gregor.server.security.sasl.jaas import LoginModule
from gregor.server.security.sasl.mechanism import (
    SaslAuthenticationError,
    invalid_credentials,
    unexpected_token,
)

MECHANISM = "PLAIN"
LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
CALLBACK_HANDLER = "org.apache.kafka.common.security.plain.internals.PlainServerCallbackHandler"
_USER_PREFIX = "user_"


def plain_users(module: LoginModule) -> dict[str, bytes]:
    """The passwords (UTF-8) of the users a PlainLoginModule entry declares."""
    return {
        key[len(_USER_PREFIX) :]: value.encode("utf-8")
        for key, value in module.options.items()
        if key.startswith(_USER_PREFIX)
    }


class PlainServer:
    mechanism = MECHANISM

    def __init__(self, users: Mapping[str, bytes]) -> None:
        self._users = users
        self._user: str | None = None
        self._done = False

    @property
    def complete(self) -> bool:
        return self._user is not None

    @property
    def principal(self) -> str:
        if self._user is None:
            raise RuntimeError("Authentication exchange has not completed")
        return f"User:{self._user}"

    @property
    def session_lifetime_ms(self) -> int | None:
        return None

    def evaluate(self, token: bytes) -> bytes:
        if self._done:
            raise unexpected_token("COMPLETE" if self.complete else "FAILED")
        self._done = True
        # message = [authzid] NUL authcid NUL passwd
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise invalid_credentials(
                MECHANISM, f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}"
            )
        authzid_bytes, user_bytes, password = parts
        try:
            authzid, user = authzid_bytes.decode("utf-8"), user_bytes.decode("utf-8")
        except UnicodeDecodeError:
            raise invalid_credentials(MECHANISM, "Invalid SASL/PLAIN response: not UTF-8") from None
        if not user:
            raise invalid_credentials(MECHANISM, "Authentication failed: username not specified")
        if not password:
            raise invalid_credentials(MECHANISM, "Authentication failed: password not specified")
        expected = self._users.get(user)
        # Compare even for an unknown user, so that the time taken does not tell.
        matches = hmac.compare_digest(password, password if expected is None else expected)
        if expected is None or not matches:
            raise SaslAuthenticationError("Authentication failed: Invalid username or password")
        if authzid and authzid != user:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is "
                "different from username"
            )
        self._user = user
        return b""
