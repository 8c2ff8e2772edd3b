"""OAUTHBEARER server (server/security/sasl/oauthbearer.py) with Kafka's unsecured validator,
and signed JWTs checked against a JWKS file (jwt.py, jwks.py); tokens and keys made here."""

from __future__ import annotations

import base64
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from gregor.server.security.sasl.jwks import Jwks
from gregor.server.security.sasl.jwt import JwtSettings, JwtValidator
from gregor.server.security.sasl.mechanism import IllegalSaslStateError, SaslAuthenticationError
from gregor.server.security.sasl.oauthbearer import (
    OAuthBearerServer,
    UnsecuredValidator,
    UnsecuredValidatorOptions,
)

NOW_MS = 1_700_000_000_000
NOW_S = NOW_MS // 1000
GENERIC = (
    "Authentication failed during authentication due to invalid credentials with SASL "
    "mechanism OAUTHBEARER"
)
INVALID = '{"status":"invalid_token"}'


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def section(value: dict[str, Any]) -> str:
    return b64url(json.dumps(value).encode())


def client_first(token: str, authzid: str = "", extensions: str = "") -> bytes:
    a = f"a={authzid}" if authzid else ""
    return f"n,{a},\x01auth=Bearer {token}{extensions}\x01\x01".encode()


def unsecured(claims: dict[str, Any]) -> str:
    return f"{section({'alg': 'none'})}.{section(claims)}."


def unsecured_server(**options: str) -> OAuthBearerServer:
    validator = UnsecuredValidator(UnsecuredValidatorOptions.from_jaas(options), lambda: NOW_MS)
    return OAuthBearerServer(validator, lambda: NOW_MS)


def refused(server: OAuthBearerServer, message: bytes, challenge: str = INVALID) -> str:
    """Drive a refused token to the end: the error challenge, the client's %x01, the failure."""
    assert server.evaluate(message).decode() == challenge
    assert not server.complete
    with pytest.raises(SaslAuthenticationError) as info:
        server.evaluate(b"\x01")
    assert str(info.value) == challenge
    return info.value.detail


# The unsecured validator (Kafka's default) ------------------------------------------------


def test_unsecured_token_authenticates_with_session_lifetime() -> None:
    server = unsecured_server()
    token = unsecured({"sub": "alice", "exp": NOW_S + 60, "iat": NOW_S - 1, "scope": "x"})
    assert server.evaluate(client_first(token, extensions="\x01traceId=123")) == b""
    assert server.complete
    assert server.principal == "User:alice"
    assert server.session_lifetime_ms == 60_000
    with pytest.raises(IllegalSaslStateError, match="state COMPLETE"):
        server.evaluate(client_first(token))


def test_unsecured_principal_claim_and_required_scope_options() -> None:
    claims = {"user": "bob", "exp": NOW_S + 60, "roles": ["A", "B"]}
    server = unsecured_server(
        unsecuredValidatorPrincipalClaimName="user",
        unsecuredValidatorScopeClaimName="roles",
        unsecuredValidatorRequiredScope="B A",
    )
    server.evaluate(client_first(unsecured(claims)))
    assert server.principal == "User:bob"
    missing = unsecured_server(unsecuredValidatorRequiredScope="A C")
    token = unsecured({"sub": "bob", "exp": NOW_S + 60, "scope": ["A"]})
    challenge = '{"status":"insufficient_scope", "scope":"[A, C]"}'
    assert "missing a required scope (C)" in refused(missing, client_first(token), challenge)


@pytest.mark.parametrize(
    ("claims", "detail"),
    [
        ({"sub": "a", "exp": NOW_S}, "on or after the Expiration Time"),
        ({"sub": "a", "exp": NOW_S - 10}, "on or after the Expiration Time"),
        ({"sub": "a", "exp": NOW_S + 60, "iat": NOW_S + 1}, "Issued At value"),
        ({"sub": "a"}, "No expiration time in JWT"),
        ({"sub": "a", "exp": "soon"}, "'exp' claim was not of type Number: String"),
        ({"exp": NOW_S + 60}, "No principal name in JWT claim: sub"),
        ({"sub": " ", "exp": NOW_S + 60}, "No principal name in JWT claim: sub"),
    ],
)
def test_unsecured_token_refusals(claims: dict[str, Any], detail: str) -> None:
    assert detail in refused(unsecured_server(), client_first(unsecured(claims)))


def test_unsecured_clock_skew_option_allows_a_just_expired_token() -> None:
    token = unsecured({"sub": "a", "exp": NOW_S - 1})
    server = unsecured_server(unsecuredValidatorAllowableClockSkewMs="2000")
    server.evaluate(client_first(token))
    # Kafka's session lifetime never goes below 0: the session is over at once.
    assert server.session_lifetime_ms == 0
    with pytest.raises(ValueError, match="must not be negative"):
        UnsecuredValidatorOptions.from_jaas({"unsecuredValidatorAllowableClockSkewMs": "-1"})


def test_unsecured_token_must_be_alg_none_and_unsigned() -> None:
    claims = section({"sub": "a", "exp": NOW_S + 60})
    signed = f"{section({'alg': 'RS256'})}.{claims}."
    assert "must have 'none'" in refused(unsecured_server(), client_first(signed))
    with_sig = f"{section({'alg': 'none'})}.{claims}.c2ln"
    assert "must not contain" in refused(unsecured_server(), client_first(with_sig))


def test_authzid_must_match_the_token_principal() -> None:
    token = unsecured({"sub": "alice", "exp": NOW_S + 60})
    server = unsecured_server()
    server.evaluate(client_first(token, authzid="alice"))
    assert server.complete
    with pytest.raises(SaslAuthenticationError, match=r"authorization id \(bob\)"):
        unsecured_server().evaluate(client_first(token, authzid="bob"))


@pytest.mark.parametrize(
    "message",
    [
        b"n,,auth=Bearer abc\x01\x01",  # no %x01 after the gs2 header
        b"n,,\x01auth=Bearer abc\x01",  # not terminated
        b"n,,\x01auth=Basic abc\x01\x01",
        b"n,,\x01other=x\x01\x01",
        b"\x01",  # the error acknowledgement, with no error sent
        b"n,,\x01auth=Bearer a\xffc\x01\x01",
    ],
)
def test_malformed_client_first_is_the_generic_failure(message: bytes) -> None:
    server = unsecured_server()
    with pytest.raises(SaslAuthenticationError) as info:
        server.evaluate(message)
    assert str(info.value) == GENERIC
    with pytest.raises(IllegalSaslStateError, match="state FAILED"):
        server.evaluate(message)


# Signed JWTs against a JWKS ----------------------------------------------------------------

PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey


@pytest.fixture(scope="module")
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def ec_keys() -> dict[str, ec.EllipticCurvePrivateKey]:
    curves = {"ES256": ec.SECP256R1(), "ES384": ec.SECP384R1(), "ES512": ec.SECP521R1()}
    return {alg: ec.generate_private_key(curve) for alg, curve in curves.items()}


def public_jwk(key: PrivateKey, kid: str) -> dict[str, str]:
    if isinstance(key, rsa.RSAPrivateKey):
        nums = key.public_key().public_numbers()
        n = nums.n.to_bytes((nums.n.bit_length() + 7) // 8)
        return {"kty": "RSA", "kid": kid, "use": "sig", "n": b64url(n), "e": b64url(b"\1\0\1")}
    point = key.public_key().public_numbers()
    crv, size = {256: ("P-256", 32), 384: ("P-384", 48), 521: ("P-521", 66)}[key.curve.key_size]
    x, y = (b64url(v.to_bytes(size)) for v in (point.x, point.y))
    return {"kty": "EC", "kid": kid, "crv": crv, "x": x, "y": y}


def sign(key: PrivateKey, alg: str, claims: dict[str, Any], kid: str | None = "k1") -> str:
    header = {"alg": alg, "typ": "JWT"} | ({"kid": kid} if kid else {})
    signed = f"{section(header)}.{section(claims)}"
    digest = {"256": hashes.SHA256(), "384": hashes.SHA384(), "512": hashes.SHA512()}[alg[2:]]
    if isinstance(key, rsa.RSAPrivateKey):
        pad: padding.AsymmetricPadding = padding.PKCS1v15()
        if alg.startswith("PS"):
            pad = padding.PSS(padding.MGF1(digest), digest.digest_size)
        signature = key.sign(signed.encode(), pad, digest)
    else:
        r, s = decode_dss_signature(key.sign(signed.encode(), ec.ECDSA(digest)))
        size = (key.curve.key_size + 7) // 8
        signature = r.to_bytes(size) + s.to_bytes(size)
    return f"{signed}.{b64url(signature)}"


def claims(**extra: Any) -> dict[str, Any]:
    return {"sub": "alice", "iat": NOW_S - 10, "exp": NOW_S + 300, **extra}


def write_jwks(path: Path, keys: list[dict[str, str]]) -> str:
    path.write_text(json.dumps({"keys": keys}))
    return path.as_uri()


def jwt_server(url: str, **settings: str) -> tuple[OAuthBearerServer, Jwks]:
    jwt_settings = JwtSettings.from_settings(
        {"sasl.oauthbearer.jwks.endpoint.url": url, **settings}
    )
    jwks = Jwks(jwt_settings.jwks_url, jwt_settings.refresh_ms)
    jwks.refresh()
    return OAuthBearerServer(JwtValidator(jwt_settings, jwks, lambda: NOW_MS), lambda: NOW_MS), jwks


@pytest.mark.parametrize("alg", ["RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "ES512"])
def test_signed_token_authenticates(
    alg: str,
    rsa_key: rsa.RSAPrivateKey,
    ec_keys: dict[str, ec.EllipticCurvePrivateKey],
    tmp_path: Path,
) -> None:
    key: PrivateKey = ec_keys[alg] if alg.startswith("ES") else rsa_key
    url = write_jwks(tmp_path / "jwks.json", [public_jwk(key, "k1")])
    server, _ = jwt_server(url)
    assert server.evaluate(client_first(sign(key, alg, claims(scope="a b")))) == b""
    assert server.principal == "User:alice"
    assert server.session_lifetime_ms == 300_000


def test_audience_issuer_and_claim_names(rsa_key: rsa.RSAPrivateKey, tmp_path: Path) -> None:
    url = write_jwks(tmp_path / "jwks.json", [public_jwk(rsa_key, "k1")])
    settings = {
        "sasl.oauthbearer.expected.audience": "kafka, other",
        "sasl.oauthbearer.expected.issuer": "https://idp",
        "sasl.oauthbearer.sub.claim.name": "client_id",
    }
    good = claims(aud=["x", "kafka"], iss="https://idp", client_id="svc")
    server, _ = jwt_server(url, **settings)
    server.evaluate(client_first(sign(rsa_key, "RS256", good)))
    assert server.principal == "User:svc"
    for bad, detail in (
        (good | {"aud": "nope"}, "Audience (aud) claim"),
        ({k: v for k, v in good.items() if k != "aud"}, "No Audience (aud) claim"),
        (good | {"iss": "https://evil"}, "Issuer (iss) claim value"),
        ({k: v for k, v in good.items() if k != "iss"}, "Issuer (iss) claim value"),
        ({k: v for k, v in good.items() if k != "client_id"}, "client_id value must be"),
    ):
        server, _ = jwt_server(url, **settings)
        assert detail in refused(server, client_first(sign(rsa_key, "RS256", bad)))
    # As jose4j: with no expected audience, a token naming one is refused.
    server, _ = jwt_server(url)
    detail = refused(server, client_first(sign(rsa_key, "RS256", claims(aud="kafka"))))
    assert "sasl.oauthbearer.expected.audience" in detail


@pytest.mark.parametrize(
    ("token_claims", "detail"),
    [
        (claims(exp=NOW_S - 30), "no longer valid"),
        (claims(exp=NOW_S - 100), "no longer valid"),
        (claims(nbf=NOW_S + 100), "not yet valid"),
        ({"sub": "alice", "exp": NOW_S + 60}, "No Issued At (iat) claim"),
        ({"sub": "alice", "iat": NOW_S}, "No Expiration Time (exp) claim"),
        (claims(scope=["a", "a"]), "must not contain duplicates"),
    ],
)
def test_signed_token_claim_refusals(
    token_claims: dict[str, Any], detail: str, rsa_key: rsa.RSAPrivateKey, tmp_path: Path
) -> None:
    server, _ = jwt_server(write_jwks(tmp_path / "jwks.json", [public_jwk(rsa_key, "k1")]))
    assert detail in refused(server, client_first(sign(rsa_key, "RS256", token_claims)))


def test_clock_skew_default_is_30_seconds(rsa_key: rsa.RSAPrivateKey, tmp_path: Path) -> None:
    url = write_jwks(tmp_path / "jwks.json", [public_jwk(rsa_key, "k1")])
    server, _ = jwt_server(url)
    server.evaluate(client_first(sign(rsa_key, "RS256", claims(exp=NOW_S - 29))))
    assert server.complete
    assert server.session_lifetime_ms == 0


def test_bad_signature_wrong_key_and_alg_none(
    rsa_key: rsa.RSAPrivateKey, ec_keys: dict[str, ec.EllipticCurvePrivateKey], tmp_path: Path
) -> None:
    url = write_jwks(tmp_path / "jwks.json", [public_jwk(rsa_key, "k1")])
    token = sign(rsa_key, "RS256", claims())
    head, body, sig = token.split(".")
    tampered = f"{head}.{section(claims(sub='admin'))}.{sig}"
    server, _ = jwt_server(url)
    assert refused(server, client_first(tampered)) == "Token refused: JWS signature is invalid"
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    server, _ = jwt_server(url)
    assert "signature is invalid" in refused(server, client_first(sign(other, "RS256", claims())))
    # An ES256 token naming the RSA key's kid: no key of that type.
    server, _ = jwt_server(url)
    es_token = sign(ec_keys["ES256"], "ES256", claims())
    assert "Unable to find a suitable verification key" in refused(server, client_first(es_token))
    server, _ = jwt_server(url)
    none_token = f"{section({'alg': 'none', 'kid': 'k1'})}.{section(claims())}.c2ln"
    assert "'none' is not allowed" in refused(server, client_first(none_token))


def test_unknown_kid_fails_and_asks_for_a_refresh_that_finds_it(
    rsa_key: rsa.RSAPrivateKey, tmp_path: Path
) -> None:
    path = tmp_path / "jwks.json"
    url = write_jwks(path, [public_jwk(rsa_key, "old")])
    server, jwks = jwt_server(url)
    token = sign(rsa_key, "RS256", claims(), kid="new")
    assert "Unable to find a suitable verification key" in refused(server, client_first(token))
    assert jwks.refresh_wanted.is_set()
    # The refresher thread, as the broker runs it, picks up the rotated key set.
    write_jwks(path, [public_jwk(rsa_key, "new")])
    stop = threading.Event()
    thread = threading.Thread(target=jwks.run, args=(stop,))
    thread.start()
    try:
        for _ in range(500):
            if [k.kid for k in jwks.keys] == ["new"]:
                break
            stop.wait(0.01)
    finally:
        stop.set()
        jwks.wake()
        thread.join(5)
    assert not thread.is_alive()
    validator = JwtValidator(
        JwtSettings.from_settings({"sasl.oauthbearer.jwks.endpoint.url": url}),
        jwks,
        lambda: NOW_MS,
    )
    fresh = OAuthBearerServer(validator, lambda: NOW_MS)
    fresh.evaluate(client_first(token))
    assert fresh.principal == "User:alice"


def test_token_without_kid_is_checked_against_every_fitting_key(
    rsa_key: rsa.RSAPrivateKey, tmp_path: Path
) -> None:
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    url = write_jwks(tmp_path / "j.json", [public_jwk(other, "a"), public_jwk(rsa_key, "b")])
    server, _ = jwt_server(url)
    server.evaluate(client_first(sign(rsa_key, "RS256", claims(), kid=None)))
    assert server.complete


def test_jwks_not_loaded_or_bad_keeps_failing_safely(tmp_path: Path) -> None:
    path = tmp_path / "jwks.json"
    path.write_text("{not json")
    jwks = Jwks(path.as_uri(), 1000)
    with pytest.raises(ValueError, match="not valid: not JSON"):
        jwks.refresh()
    assert not jwks.loaded
    settings = JwtSettings.from_settings({"sasl.oauthbearer.jwks.endpoint.url": path.as_uri()})
    server = OAuthBearerServer(JwtValidator(settings, jwks, lambda: NOW_MS), lambda: NOW_MS)
    token = client_first(sign(rsa.generate_private_key(65537, 2048), "RS256", claims()))
    assert "No JWKS loaded yet" in refused(server, token)
    assert jwks.refresh_wanted.is_set()
    small = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    write_jwks(path, [public_jwk(small, "k1")])
    server, _ = jwt_server(path.as_uri())
    # jose4j's rule: RSA keys under 2048 bits check no signature.
    assert "signature is invalid" in refused(server, client_first(sign(small, "RS256", claims())))


def test_jwks_over_http(rsa_key: rsa.RSAPrivateKey) -> None:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    body = json.dumps({"keys": [public_jwk(rsa_key, "k1"), {"kty": "oct", "k": "c2VjcmV0"}]})

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever)
    thread.start()
    try:
        jwks = Jwks(f"http://127.0.0.1:{httpd.server_address[1]}/jwks", 1000)
        jwks.refresh()
    finally:
        httpd.shutdown()
        thread.join()
    # The symmetric key cannot check signatures: only the RSA key is kept.
    assert [k.kid for k in jwks.keys] == ["k1"]
    assert jwks.loaded
