"""SCRAM-SHA-256/512 server (server/security/sasl/scram.py): RFC 7677's exchange byte for
byte, a small SCRAM client for SHA-512, and the ways an exchange must fail."""

from __future__ import annotations

import base64
import secrets

import pytest

from gregor.controller.scram_credentials import (
    ScramCredential,
    ScramCredentialLookup,
    client_key,
    credential_from_password,
    hmac_digest,
    salted_password,
    server_key,
    stored_key,
)
from gregor.server.security.sasl.mechanism import IllegalSaslStateError, SaslAuthenticationError
from gregor.server.security.sasl.scram import ScramServer

RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"


def generic(mechanism: str) -> str:
    return (
        "Authentication failed during authentication due to invalid credentials with SASL "
        f"mechanism {mechanism}"
    )


def store(mechanism: str, users: dict[str, str]) -> ScramCredentialLookup:
    creds = {(u, mechanism): credential_from_password(mechanism, p) for u, p in users.items()}
    return lambda user, mech: creds.get((user, mech))


def test_rfc7677_exchange_byte_for_byte() -> None:
    cred = credential_from_password("SCRAM-SHA-256", "pencil", 4096, RFC_SALT)
    server = ScramServer(
        "SCRAM-SHA-256",
        lambda user, mech: cred if (user, mech) == ("user", "SCRAM-SHA-256") else None,
        nonce=lambda: RFC_SERVER_NONCE,
    )
    assert server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO") == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    assert not server.complete
    final = server.evaluate(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete
    assert server.principal == "User:user"
    assert server.session_lifetime_ms is None


class ScramClient:
    """RFC 5802's client side, enough to drive the server."""

    def __init__(self, mechanism: str, user: str, password: str, authzid: str = "") -> None:
        self.mechanism, self.password = mechanism, password.encode()
        name = user.replace("=", "=3D").replace(",", "=2C")
        self.gs2 = f"n,{'a=' + authzid if authzid else ''},"
        self.bare = f"n={name},r={secrets.token_urlsafe(18)}"
        self.server_signature = b""

    def first(self) -> bytes:
        return (self.gs2 + self.bare).encode()

    def final(
        self, server_first: bytes, *, nonce_suffix: str = "", channel: str | None = None
    ) -> bytes:
        fields = dict(f.split("=", 1) for f in server_first.decode().split(","))
        salted = salted_password(
            self.mechanism, self.password, base64.b64decode(fields["s"]), int(fields["i"])
        )
        c = channel or base64.b64encode(self.gs2.encode()).decode()
        without_proof = f"c={c},r={fields['r']}{nonce_suffix}"
        auth = f"{self.bare},{server_first.decode()},{without_proof}".encode()
        ckey = client_key(self.mechanism, salted)
        signature = hmac_digest(self.mechanism, stored_key(self.mechanism, ckey), auth)
        proof = bytes(a ^ b for a, b in zip(ckey, signature, strict=True))
        skey = server_key(self.mechanism, salted)
        self.server_signature = hmac_digest(self.mechanism, skey, auth)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


@pytest.mark.parametrize("user", ["alice", "we,ird=name", "zoë"])
def test_sha512_exchange_with_the_test_client(user: str) -> None:
    server = ScramServer("SCRAM-SHA-512", store("SCRAM-SHA-512", {user: "s3cret"}))
    client = ScramClient("SCRAM-SHA-512", user, "s3cret")
    server_first = server.evaluate(client.first())
    assert server_first.startswith(b"r=" + client.bare.split("r=")[1].encode())
    server_final = server.evaluate(client.final(server_first))
    assert server_final == b"v=" + base64.b64encode(client.server_signature)
    assert server.principal == f"User:{user}"


def test_authzid_equal_to_the_user_is_accepted_another_is_refused() -> None:
    lookup = store("SCRAM-SHA-512", {"alice": "pw"})
    ok = ScramServer("SCRAM-SHA-512", lookup)
    client = ScramClient("SCRAM-SHA-512", "alice", "pw", authzid="alice")
    ok.evaluate(client.final(ok.evaluate(client.first())))
    assert ok.complete
    other = ScramServer("SCRAM-SHA-512", lookup)
    with pytest.raises(SaslAuthenticationError) as info:
        other.evaluate(ScramClient("SCRAM-SHA-512", "alice", "pw", authzid="bob").first())
    assert "authorization id that is different from username" in str(info.value)


def test_bad_password_fails_at_the_proof_with_the_generic_message() -> None:
    server = ScramServer("SCRAM-SHA-256", store("SCRAM-SHA-256", {"alice": "right"}))
    client = ScramClient("SCRAM-SHA-256", "alice", "wrong")
    server_first = server.evaluate(client.first())
    with pytest.raises(SaslAuthenticationError) as info:
        server.evaluate(client.final(server_first))
    assert str(info.value) == generic("SCRAM-SHA-256")
    assert info.value.detail == "Invalid client credentials"
    assert not server.complete


def test_unknown_user_and_other_mechanism_fail_with_the_same_message() -> None:
    lookup = store("SCRAM-SHA-256", {"alice": "pw"})
    for mechanism, user in (("SCRAM-SHA-256", "carol"), ("SCRAM-SHA-512", "alice")):
        server = ScramServer(mechanism, lookup)
        with pytest.raises(SaslAuthenticationError) as info:
            server.evaluate(ScramClient(mechanism, user, "pw").first())
        assert str(info.value) == generic(mechanism)


def test_wrong_nonce_and_wrong_channel_binding_fail() -> None:
    lookup = store("SCRAM-SHA-256", {"alice": "pw"})
    for kwargs in ({"nonce_suffix": "x"}, {"channel": base64.b64encode(b"y,,").decode()}):
        server = ScramServer("SCRAM-SHA-256", lookup)
        client = ScramClient("SCRAM-SHA-256", "alice", "pw")
        final = client.final(server.evaluate(client.first()), **kwargs)
        with pytest.raises(SaslAuthenticationError) as info:
            server.evaluate(final)
        assert str(info.value) == generic("SCRAM-SHA-256")
        assert "nonce" in info.value.detail or "channel binding" in info.value.detail


def test_out_of_order_and_replayed_messages_are_refused() -> None:
    lookup = store("SCRAM-SHA-256", {"alice": "pw"})
    # A client-final first: not a client-first message.
    server = ScramServer("SCRAM-SHA-256", lookup)
    with pytest.raises(SaslAuthenticationError, match="invalid credentials"):
        server.evaluate(b"c=biws,r=abc,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    with pytest.raises(IllegalSaslStateError, match="state FAILED"):
        server.evaluate(b"n,,n=alice,r=abc")
    # The client-first twice: the second is no client-final.
    server = ScramServer("SCRAM-SHA-256", lookup)
    client = ScramClient("SCRAM-SHA-256", "alice", "pw")
    server.evaluate(client.first())
    with pytest.raises(SaslAuthenticationError) as info:
        server.evaluate(client.first())
    assert info.value.detail == "Invalid SCRAM client final message format"
    # A client-final replayed on a new exchange: the server's nonce differs.
    first_server = ScramServer("SCRAM-SHA-256", lookup)
    client = ScramClient("SCRAM-SHA-256", "alice", "pw")
    final = client.final(first_server.evaluate(client.first()))
    first_server.evaluate(final)
    with pytest.raises(IllegalSaslStateError, match="state COMPLETE"):
        first_server.evaluate(final)
    replay = ScramServer("SCRAM-SHA-256", lookup)
    replay.evaluate(client.first())
    with pytest.raises(SaslAuthenticationError) as info:
        replay.evaluate(final)
    assert "nonce" in info.value.detail


@pytest.mark.parametrize(
    ("message", "detail"),
    [
        (b"p=tls-unique,,n=alice,r=abc", "channel binding is not supported"),
        (b"y,,n=alice,r=abc", "channel binding is not supported"),
        (b"n,,n=alice", "Invalid SCRAM client first message format"),
        (b"n,,n=al=ice,r=abc", "Invalid SCRAM client first message format"),
        (b"n,,n=alice,r=a\xffc", "not UTF-8"),
    ],
)
def test_malformed_client_first(message: bytes, detail: str) -> None:
    server = ScramServer("SCRAM-SHA-256", store("SCRAM-SHA-256", {"alice": "pw"}))
    with pytest.raises(SaslAuthenticationError) as info:
        server.evaluate(message)
    assert str(info.value) == generic("SCRAM-SHA-256")
    assert detail in info.value.detail


def test_extensions_are_ignored_but_delegation_tokens_refused_clearly() -> None:
    lookup = store("SCRAM-SHA-256", {"alice": "pw"})
    server = ScramServer("SCRAM-SHA-256", lookup)
    assert server.evaluate(b"n,,n=alice,r=abc,foo=bar").startswith(b"r=abc")
    server = ScramServer("SCRAM-SHA-256", lookup)
    with pytest.raises(SaslAuthenticationError) as info:
        server.evaluate(b"n,,n=alice,r=abc,tokenauth=true")
    assert "delegation token" in str(info.value)


def test_credential_below_kafkas_minimum_iterations_is_refused() -> None:
    weak = credential_from_password("SCRAM-SHA-256", "pw", 4096)
    weak = ScramCredential(weak.salt, weak.stored_key, weak.server_key, 4095)
    server = ScramServer("SCRAM-SHA-256", lambda user, mech: weak)
    with pytest.raises(SaslAuthenticationError) as info:
        server.evaluate(b"n,,n=alice,r=abc")
    assert "Iterations 4095 is less than the minimum 4096" in info.value.detail


def test_a_failing_store_is_the_generic_failure() -> None:
    def broken(user: str, mechanism: str) -> ScramCredential | None:
        raise OSError("store down")

    with pytest.raises(SaslAuthenticationError) as info:
        ScramServer("SCRAM-SHA-256", broken).evaluate(b"n,,n=alice,r=abc")
    assert str(info.value) == generic("SCRAM-SHA-256")
    assert "Credentials could not be obtained" in info.value.detail
