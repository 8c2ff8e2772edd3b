"""SCRAM credentials (controller/scram_credentials.py): RFC 7677's test vector, Kafka's stored
string form, the iteration bounds of Kafka's ScramMechanism."""

from __future__ import annotations

import base64

import pytest

from gregor.controller.scram_credentials import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    ScramCredential,
    client_key,
    credential_from_password,
    credential_from_salted_password,
    hmac_digest,
    salted_password,
    server_key,
    stored_key,
)

# RFC 7677 section 3: user "user", password "pencil".
RFC7677_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC7677_AUTH_MESSAGE = (
    b"n=user,r=rOprNGfwEbeRWgbNEkqO,"
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,"
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
)


def test_rfc7677_proof_and_server_signature_follow_from_the_derived_keys() -> None:
    mech = "SCRAM-SHA-256"
    salted = salted_password(mech, b"pencil", RFC7677_SALT, 4096)
    ckey = client_key(mech, salted)
    signature = hmac_digest(mech, stored_key(mech, ckey), RFC7677_AUTH_MESSAGE)
    proof = bytes(a ^ b for a, b in zip(ckey, signature, strict=True))
    assert base64.b64encode(proof) == b"dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    server_signature = hmac_digest(mech, server_key(mech, salted), RFC7677_AUTH_MESSAGE)
    assert base64.b64encode(server_signature) == b"6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def test_credential_from_password_equals_the_one_from_its_salted_password() -> None:
    mech = "SCRAM-SHA-512"
    cred = credential_from_password(mech, "pencil", 4096, RFC7677_SALT)
    salted = salted_password(mech, b"pencil", RFC7677_SALT, 4096)
    assert cred == credential_from_salted_password(mech, RFC7677_SALT, salted, 4096)
    assert len(cred.stored_key) == len(cred.server_key) == 64
    # Without a salt, each credential gets its own.
    assert credential_from_password(mech, "p").salt != credential_from_password(mech, "p").salt


def test_config_string_is_kafkas_and_round_trips() -> None:
    cred = ScramCredential(b"salt", b"stored", b"server", 8192)
    text = cred.to_config()
    assert text == "salt=c2FsdA==,stored_key=c3RvcmVk,server_key=c2VydmVy,iterations=8192"
    assert ScramCredential.from_config(text) == cred
    # Kafka's parser takes the pairs in any order.
    reordered = "iterations=8192,server_key=c2VydmVy,salt=c2FsdA==,stored_key=c3RvcmVk"
    assert ScramCredential.from_config(reordered) == cred


@pytest.mark.parametrize(
    "text",
    [
        "salt=c2FsdA==,stored_key=c3RvcmVk,server_key=c2VydmVy",  # iterations missing
        "salt=c2FsdA==,stored_key=c3RvcmVk,server_key=c2VydmVy,iterations=x",
        "salt=c2FsdA==,stored_key=!!,server_key=c2VydmVy,iterations=4096",
        "salt=c2FsdA==,stored_key=c3RvcmVk,server_key=c2VydmVy,iterations=4096,extra=1",
        "garbage",
    ],
)
def test_malformed_config_is_refused_without_echoing_the_keys(text: str) -> None:
    with pytest.raises(ValueError, match="Credentials not valid") as info:
        ScramCredential.from_config(text)
    assert "c3RvcmVk" not in str(info.value)


def test_repr_shows_no_key_material() -> None:
    cred = credential_from_password("SCRAM-SHA-256", "pencil")
    assert repr(cred) == "ScramCredential(iterations=4096)"


@pytest.mark.parametrize("iterations", [MIN_ITERATIONS - 1, MAX_ITERATIONS + 1])
def test_iterations_outside_kafkas_bounds_are_refused(iterations: int) -> None:
    with pytest.raises(ValueError, match=f"Iterations {iterations} is"):
        credential_from_password("SCRAM-SHA-256", "pencil", iterations)
    assert credential_from_password("SCRAM-SHA-256", "pencil", MAX_ITERATIONS).iterations == 16384


def test_unknown_mechanism_is_refused() -> None:
    with pytest.raises(ValueError, match="Unsupported SCRAM mechanism 'SCRAM-SHA-1'"):
        credential_from_password("SCRAM-SHA-1", "pencil")
