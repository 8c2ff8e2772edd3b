"""Hostile SASL tokens, per mechanism, and the frames that carry them (pure: no I/O).

Tokens travel in SaslAuthenticate v0-1 (``bytes``), v2 (flexible ``compact bytes``), or raw
(a size prefix and the token, after a SaslHandshake v0). Each generator mostly writes
something a parser must refuse (wrong counts of separators, bad UTF-8, lying base64,
huge fields, JSON nested thousands deep, dates of NaN or 10^400), sometimes the almost
valid message next to it.
"""

from __future__ import annotations

import base64
import json
import random
import struct
from collections.abc import Callable

from fuzzing.frames import header, sized
from gregor.wire.varint import encode_uvarint
from gregor.wire.versions import SASL_AUTHENTICATE, SASL_HANDSHAKE

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
# Mechanism names nobody enables, or that no parser should choke on.
BAD_MECHANISMS = ("GSSAPI", "plain", "", "SCRAM-SHA-1", "X" * 32_767, "\u00e9\u0000\ud7ff")
HUGE = 300_000  # bytes: under sasl.server.max.receive.size (524,288), still absurd
DEEP = 50_000  # JSON nesting: far past Python's recursion limit
Signer = Callable[[bytes, bytes], str]  # (header JSON, claims JSON) -> a signed JWT


def handshake_frame(version: int, mechanism: str | bytes | None, correlation_id: int) -> bytes:
    """SaslHandshake v0 or v1 (never flexible); ``None`` writes a null string."""
    if mechanism is None:
        body = struct.pack(">h", -1)
    else:
        raw = (
            mechanism.encode("utf-8", "surrogatepass") if isinstance(mechanism, str) else mechanism
        )
        body = struct.pack(">h", min(len(raw), 32_767)) + raw[:32_767]
    return sized(header(SASL_HANDSHAKE, version, correlation_id) + body)


def authenticate_frame(version: int, token: bytes | None, correlation_id: int) -> bytes:
    """SaslAuthenticate v0-1 (int32-length bytes) or v2 (compact bytes, tagged fields);
    ``None`` writes a null token."""
    if version >= 2:
        body = encode_uvarint(0 if token is None else len(token) + 1) + (token or b"") + b"\x00"
    else:
        body = struct.pack(">i", -1 if token is None else len(token)) + (token or b"")
    return sized(header(SASL_AUTHENTICATE, version, correlation_id) + body)


def token_frame(version: int | None, token: bytes | None, correlation_id: int) -> bytes:
    """The token as the handshake's version wants it: raw after SaslHandshake v0
    (``version`` None), else in a SaslAuthenticate of ``version``."""
    if version is None:
        return sized(token or b"")
    return authenticate_frame(version, token, correlation_id)


def _garbage(rng: random.Random) -> bytes:
    return rng.choice(
        (
            b"",
            rng.randbytes(rng.choice((1, 16, 300))),
            b"\xff\xfe\x80" * rng.randint(1, 50),  # not UTF-8
            b"\x00" * rng.choice((1, 2, 3, 1000)),
            bytes(rng.randrange(256) for _ in range(rng.choice((10, 1000)))),
        )
    )


def plain_token(rng: random.Random, users: dict[str, str]) -> bytes:
    """``authzid NUL user NUL password`` mostly wrong: bad password, unknown user, too few or
    too many NULs, empty fields, bad UTF-8, a huge user, another user's authzid."""
    user, password = rng.choice(sorted(users.items()))
    kind = rng.randrange(9)
    if kind == 0:
        return f"\0{user}\0{password}x".encode()
    if kind == 1:
        return f"\0nobody-{rng.randrange(1000)}\0{password}".encode()
    if kind == 2:
        return rng.choice((b"", b"\0", f"{user}\0{password}".encode(), b"\0\0\0\0"))
    if kind == 3:
        return rng.choice((f"\0\0{password}", f"\0{user}\0")).encode()
    if kind == 4:
        return b"\0\xff\xfe\0" + password.encode()
    if kind == 5:
        return b"\0" + b"u" * HUGE + b"\0" + password.encode()
    if kind == 6:
        other = rng.choice(sorted(users))
        return f"{other}-not\0{user}\0{password}".encode()
    if kind == 7:
        return b"\0" + user.encode() + b"\0" + b"p" * rng.choice((1000, HUGE))
    return _garbage(rng)


def scram_first(rng: random.Random, users: list[str]) -> bytes:
    """A client-first message, mostly malformed: another gs2 header, no nonce, a huge or
    escaped name, bad escapes, many extensions, tokenauth, bad UTF-8, an unknown user."""
    user = rng.choice(users)
    nonce = base64.b64encode(rng.randbytes(18)).decode()
    kind = rng.randrange(12)
    forms = {
        0: f"p=tls-unique,,n={user},r={nonce}",
        1: f"y,,n={user},r={nonce}",
        2: f"n,,n={user}",
        3: f"n,,n={'=2C' * (HUGE // 3)},r={nonce}",
        4: f"n,,n={user}=ZZ,r={nonce}",
        5: f"n,,n={user},r={nonce}" + ",ext=v" * 20_000,
        6: f"n,,n={user},r={nonce},tokenauth=true",
        7: f"n,a=someone-else,n={user},r={nonce}",
        8: f"n,,n=nobody-{rng.randrange(1000)},r={nonce}",
        9: f"n,,n={user},r={'x' * HUGE}",
        10: f"n,,m=mandatory,n={user},r={nonce}",
    }
    if kind in forms:
        return forms[kind].encode()
    return b"n,,n=" + _garbage(rng) + b",r=" + nonce.encode()


def scram_final(rng: random.Random, nonce: str, proof_size: int) -> bytes:
    """A client-final answering a server-first whose combined nonce is ``nonce``: a wrong
    proof, a proof of the wrong size or not base64, another nonce, another channel
    binding, no proof, a huge one."""
    proof = base64.b64encode(rng.randbytes(proof_size)).decode()
    kind = rng.randrange(9)
    forms = {
        0: f"c=biws,r={nonce},p={proof}",
        1: f"c=biws,r={nonce},p={base64.b64encode(rng.randbytes(7)).decode()}",
        2: f"c=biws,r={nonce},p=!!not-base64!!",
        3: f"c=biws,r={nonce}x,p={proof}",
        4: f"c=eSws,r={nonce},p={proof}",
        5: f"c=biws,r={nonce}",
        6: f"c=biws,r={nonce},p={base64.b64encode(bytes(HUGE // 2)).decode()}",
        7: f"c=biws,r={nonce},ext=x,p={proof}",
    }
    if kind in forms:
        return forms[kind].encode()
    return _garbage(rng)


def oauth_message(token: str, authzid: str = "") -> bytes:
    """RFC 7628's client-first message carrying ``token``."""
    return f"n,{'a=' + authzid if authzid else ''},\x01auth=Bearer {token}\x01\x01".encode()


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsecured_jwt(claims: bytes, alg: bytes = b'"none"') -> str:
    """An unsigned JWS as Kafka's unsecured validator reads it, over raw claims JSON."""
    head = b'{"alg":' + alg + b"}"
    return f"{b64url(head)}.{b64url(claims)}."


def hostile_claims(rng: random.Random, now_s: int) -> bytes:
    """Claims JSON that a validator must refuse without choking: dates that are NaN,
    infinite, 400 digits long or strings, a principal that is a list, nesting thousands
    deep, scopes of the wrong type, and an absurd but finite expiry (accepted: its
    session lifetime must still fit in SaslAuthenticate)."""
    forms = (
        b'{"sub":"fuzz","exp":NaN}',
        b'{"sub":"fuzz","exp":Infinity}',
        b'{"sub":"fuzz","exp":1e400}',
        b'{"sub":"fuzz","exp":' + b"9" * 400 + b"}",
        b'{"sub":"fuzz","exp":"tomorrow"}',
        b'{"sub":["a","b"],"exp":%d}' % (now_s + 60),
        b'{"sub":"fuzz","exp":%d,"scope":{"a":1}}' % (now_s + 60),
        b'{"sub":"fuzz","exp":%d,"iat":%d}' % (now_s + 60, now_s + 3600),
        b'{"sub":"fuzz","exp":%d}' % (now_s - 10),
        b'{"sub":' + b"[" * DEEP + b"]" * DEEP + b"}",
        b"[" * DEEP,
        b'{"sub":"fuzz","exp":1e17,"iat":%d}' % now_s,
        b'{"sub":"fuzz","exp":-1e300}',
        b'{"sub":"   ","exp":%d}' % (now_s + 60),
        b"not json at all",
    )
    return rng.choice(forms)


def hostile_headers(rng: random.Random) -> bytes:
    """JWS headers: algorithms that are lists, objects, null or none; non-string key ids;
    critical parameters; deep nesting."""
    return rng.choice(
        (
            b'{"alg":["RS256"]}',
            b'{"alg":{"RS256":1}}',
            b'{"alg":null}',
            b'{"alg":"none"}',
            b'{"alg":"RS256","kid":17}',
            b'{"alg":"RS256","kid":"k1","crit":["exp"]}',
            b'{"alg":"RS256","kid":"' + b"k" * 5000 + b'"}',
            b"[" * DEEP,
            b'{"alg":"HS256","kid":"k1"}',
        )
    )


def oauth_token(rng: random.Random, now_s: int, sign: Signer | None) -> bytes:
    """An OAUTHBEARER client-first message: a bad wrapper (no auth, another scheme, missing
    separators, bad characters, another authzid), or a good wrapper around an unsecured or
    (with ``sign``) a properly signed JWT of hostile claims, or garbage sections."""
    kind = rng.randrange(10)
    if kind == 0:
        return rng.choice(
            (
                b"n,,\x01\x01",
                b"n,,\x01auth=Basic abc\x01\x01",
                b"n,,\x01auth=Bearer\x01\x01",
                b"n,,\x01auth=Bearer abc\x01",
                b"y,,\x01auth=Bearer a.b.c\x01\x01",
                b"n,,\x01auth=Bearer a\x00b\x01\x01",
                b"n,,\x01" + b"k=v\x01" * 30_000 + b"\x01",
            )
        )
    if kind == 1:
        return oauth_message(rng.choice(("", "..", "a.b", "a.b.c.d", "x" * HUGE, "!!.??.##")))
    if kind == 2:
        return oauth_message(f"{b64url(rng.randbytes(30))}.{b64url(rng.randbytes(30))}.")
    if kind in (3, 4, 5):
        claims = hostile_claims(rng, now_s)
        if sign is not None and kind != 5:
            return oauth_message(sign(b'{"alg":"RS256","kid":"k1"}', claims))
        return oauth_message(unsecured_jwt(claims))
    if kind == 6:
        head = hostile_headers(rng)
        claims = b'{"sub":"fuzz","exp":%d,"iat":%d}' % (now_s + 60, now_s)
        signed = sign(head, claims) if sign is not None else f"{b64url(head)}.{b64url(claims)}."
        return oauth_message(signed)
    if kind == 7:
        claims = b'{"sub":"fuzz","exp":%d}' % (now_s + 60)
        return oauth_message(unsecured_jwt(claims), authzid="someone-else")
    if kind == 8:
        good = json.dumps({"sub": "fuzz", "exp": now_s + 60, "iat": now_s}).encode()
        return oauth_message(unsecured_jwt(good)[:-1] + "c2lnbmVk")  # a signature on alg none
    return _garbage(rng)


def mechanism_token(
    rng: random.Random, mechanism: str, users: dict[str, str], now_s: int, sign: Signer | None
) -> bytes:
    """A hostile first token for ``mechanism`` (any name: garbage for one nobody enables)."""
    if mechanism == "PLAIN":
        return plain_token(rng, users)
    if mechanism.startswith("SCRAM-"):
        return scram_first(rng, sorted(users))
    if mechanism == "OAUTHBEARER":
        return oauth_token(rng, now_s, sign)
    return _garbage(rng)
