"""SASL/PLAIN server (server/security/sasl/plain.py) driven with client messages built here."""

from __future__ import annotations

import pytest

from gregor.server.security.sasl.mechanism import IllegalSaslStateError, SaslAuthenticationError
from gregor.server.security.sasl.plain import PlainServer

USERS = {"alice": b"alice-secret", "bob": "pässword".encode()}
GENERIC = (
    "Authentication failed during authentication due to invalid credentials with SASL "
    "mechanism PLAIN"
)


def test_valid_user_authenticates_with_or_without_authzid() -> None:
    for message in (b"\0alice\0alice-secret", b"alice\0alice\0alice-secret"):
        server = PlainServer(USERS)
        assert not server.complete
        assert server.evaluate(message) == b""
        assert server.complete
        assert server.principal == "User:alice"
        assert server.session_lifetime_ms is None
    server = PlainServer(USERS)
    server.evaluate("\0bob\0pässword".encode())
    assert server.principal == "User:bob"


@pytest.mark.parametrize(
    "message", [b"\0alice\0wrong", b"\0alice\0alice-secre", b"\0carol\0alice-secret"]
)
def test_bad_password_or_unknown_user_is_kafkas_message(message: bytes) -> None:
    server = PlainServer(USERS)
    with pytest.raises(SaslAuthenticationError) as info:
        server.evaluate(message)
    assert str(info.value) == "Authentication failed: Invalid username or password"
    assert not server.complete


def test_authzid_other_than_the_user_is_refused() -> None:
    with pytest.raises(SaslAuthenticationError) as info:
        PlainServer(USERS).evaluate(b"bob\0alice\0alice-secret")
    assert str(info.value) == (
        "Authentication failed: Client requested an authorization id that is different "
        "from username"
    )


@pytest.mark.parametrize(
    ("message", "detail"),
    [
        (b"alice-secret", "expected 3 tokens, got 1"),
        (b"\0alice\0alice-secret\0", "expected 3 tokens, got 4"),
        (b"\0\0alice-secret", "username not specified"),
        (b"\0alice\0", "password not specified"),
        (b"\0\xff\0x", "not UTF-8"),
    ],
)
def test_malformed_messages_fail_with_kafkas_generic_message(message: bytes, detail: str) -> None:
    with pytest.raises(SaslAuthenticationError) as info:
        PlainServer(USERS).evaluate(message)
    assert str(info.value) == GENERIC
    assert detail in info.value.detail


def test_no_second_token_after_success_or_failure() -> None:
    server = PlainServer(USERS)
    server.evaluate(b"\0alice\0alice-secret")
    with pytest.raises(IllegalSaslStateError, match="state COMPLETE"):
        server.evaluate(b"\0alice\0alice-secret")
    failed = PlainServer(USERS)
    with pytest.raises(SaslAuthenticationError):
        failed.evaluate(b"\0alice\0wrong")
    # A retry on the same exchange is refused even with the right password.
    with pytest.raises(IllegalSaslStateError, match="state FAILED") as info:
        failed.evaluate(b"\0alice\0alice-secret")
    assert info.value.error_code == 34
    assert not failed.complete


def test_the_password_never_appears_in_an_error() -> None:
    with pytest.raises(SaslAuthenticationError) as info:
        PlainServer(USERS).evaluate(b"\0alice\0hunter2\0")
    assert "hunter2" not in str(info.value) + info.value.detail
