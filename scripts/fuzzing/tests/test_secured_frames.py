"""The secured fuzz's generators write what they claim, and the broker's token parsers refuse
every hostile token they make with a SASL or token error, never another exception (pure
code: the parsers run in this process, no broker)."""

from __future__ import annotations

import json
import random
import struct
import time
from pathlib import Path
from typing import Any

import pytest
from fuzzing import secured
from fuzzing.sasl_tokens import (
    HUGE,
    authenticate_frame,
    handshake_frame,
    hostile_claims,
    hostile_headers,
    oauth_message,
    oauth_token,
    token_frame,
    unsecured_jwt,
)
from fuzzing.tls_records import HANDSHAKE, MAX_RECORD, client_hello, garbage, record

from gregor.server.security.sasl.jwks import Jwks
from gregor.server.security.sasl.jwt import JwtSettings, JwtValidator
from gregor.server.security.sasl.mechanism import SaslAuthenticationError
from gregor.server.security.sasl.oauthbearer import (
    InvalidTokenError,
    OAuthBearerServer,
    UnsecuredValidator,
    UnsecuredValidatorOptions,
)
from gregor.wire.headers import decode_request_header
from gregor.wire.schema import decode, request_type
from gregor.wire.versions import SASL_AUTHENTICATE, SASL_HANDSHAKE


def body_of(frame: bytes, api_key: int, version: int) -> Any:
    (size,) = struct.unpack_from(">i", frame)
    assert size == len(frame) - 4
    payload = frame[4:]
    header = decode_request_header(payload, api_key == SASL_AUTHENTICATE and version >= 2)
    assert (header.api_key, header.api_version) == (api_key, version)
    return decode(request_type(api_key, version), payload, header.body_offset)


@pytest.mark.parametrize("version", [0, 1])
def test_handshake_frames_decode_to_their_mechanism(version: int) -> None:
    request = body_of(handshake_frame(version, "SCRAM-SHA-512", 7), SASL_HANDSHAKE, version)
    assert request.mechanism == "SCRAM-SHA-512"


@pytest.mark.parametrize("version", [0, 1, 2])
def test_authenticate_frames_carry_the_token(version: int) -> None:
    token = b"\0alice\0" + bytes(range(256))
    request = body_of(authenticate_frame(version, token, 3), SASL_AUTHENTICATE, version)
    assert request.auth_bytes == token


def test_raw_tokens_are_size_prefixed_only() -> None:
    assert token_frame(None, b"abc", 1) == b"\x00\x00\x00\x03abc"


def test_the_client_hello_is_one_handshake_record() -> None:
    for tls13 in (True, False):
        hello = client_hello(tls13)
        content_type, _, length = struct.unpack_from(">BHH", hello)
        assert (content_type, length, hello[5]) == (HANDSHAKE, len(hello) - 5, 1)  # ClientHello


def test_records_claim_the_length_asked() -> None:
    assert record(HANDSHAKE, b"xy", length=MAX_RECORD + 1)[3:5] == struct.pack(">H", 1 << 14 | 1)


def test_garbage_writes_something_every_time_and_varies() -> None:
    rng = random.Random(5)
    connections = [garbage(rng) for _ in range(300)]
    assert all(writes and all(writes) for writes in connections)
    assert len({writes[0][:1] for writes in connections}) >= 5  # record types, raw, v2, HTTP


# -- the parsers against the hostile tokens ----------------------------------------------


def now_ms() -> int:
    return int(time.time() * 1000)


def evaluate(server: OAuthBearerServer, message: bytes) -> None:
    """One token: the broker's answer, or the refusal the exchange must end in."""
    try:
        server.evaluate(message)
    except SaslAuthenticationError:
        return
    if not server.complete:  # an error challenge: the client acknowledges, the exchange fails
        with pytest.raises(SaslAuthenticationError):
            server.evaluate(b"\x01")


def test_the_unsecured_validator_refuses_hostile_claims_cleanly() -> None:
    validator = UnsecuredValidator(UnsecuredValidatorOptions(), now_ms)
    rng = random.Random(2)
    for _ in range(300):
        evaluate(OAuthBearerServer(validator, now_ms), oauth_token(rng, now_ms() // 1000, None))


def test_an_absurd_but_finite_expiry_is_accepted_and_its_lifetime_kept() -> None:
    validator = UnsecuredValidator(UnsecuredValidatorOptions(), now_ms)
    server = OAuthBearerServer(validator, now_ms)
    now_s = now_ms() // 1000
    server.evaluate(oauth_message(unsecured_jwt(b'{"sub":"fuzz","exp":1e17,"iat":%d}' % now_s)))
    assert server.complete
    assert server.session_lifetime_ms is not None and server.session_lifetime_ms > 10**19


@pytest.mark.parametrize(
    "claims", [b'{"sub":"a","exp":NaN}', b'{"sub":"a","exp":1e400}', b'{"exp":' + b"9" * 400 + b"}"]
)
def test_dates_that_are_no_number_are_refused(claims: bytes) -> None:
    validator = UnsecuredValidator(UnsecuredValidatorOptions(), now_ms)
    with pytest.raises(InvalidTokenError):
        validator.validate(unsecured_jwt(claims))


def test_the_jwt_validator_refuses_hostile_signed_tokens_cleanly(tmp_path: Path) -> None:
    _, targets = secured.prepare(tmp_path)
    jwks_url = (tmp_path / "jwks.json").as_uri()
    jwks = Jwks(jwks_url, 3_600_000)
    jwks.refresh()
    settings = JwtSettings(jwks_url, audience=frozenset({secured.AUDIENCE}))
    validator = JwtValidator(settings, jwks, now_ms)
    sign = secured.signer(targets.jwt_key_pem)
    rng = random.Random(3)
    now_s = now_ms() // 1000
    for _ in range(100):
        evaluate(OAuthBearerServer(validator, now_ms), oauth_token(rng, now_s, sign))
    for _ in range(30):
        claims = json.dumps({"sub": "fuzz", "exp": now_s + 60, "iat": now_s}).encode()
        with pytest.raises(InvalidTokenError):
            validator.validate(sign(hostile_headers(rng), claims))
    for _ in range(30):
        try:
            validator.validate(sign(b'{"alg":"RS256","kid":"k1"}', hostile_claims(rng, now_s)))
        except InvalidTokenError:
            pass
    good = secured.good_jwt(sign, "alice")
    assert validator.validate(good).principal == "alice"


def test_huge_tokens_stay_under_the_receive_limit() -> None:
    assert HUGE + 1000 < 524_288  # sasl.server.max.receive.size: parsed, not refused by size
