"""A JSON Web Key Set (RFC 7517) of an OAuth provider's signing keys, and JWS signature
checks (RFC 7515/7518) with ``cryptography``: RS256/384/512, PS256/384/512, ES256/384/512.

``Jwks`` holds the keys of ``sasl.oauthbearer.jwks.endpoint.url`` (file://, http://,
https://). Reading them blocks, so it is never done on the event loop: the broker calls
``refresh()`` at start-up and runs ``run()`` in a thread, which refreshes every
``sasl.oauthbearer.jwks.endpoint.refresh.ms`` and soon after a token names an unknown key
(Kafka's RefreshingHttpsJwks).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

logger = logging.getLogger(__name__)

_HASHES: dict[str, type[hashes.HashAlgorithm]] = {
    "256": hashes.SHA256,
    "384": hashes.SHA384,
    "512": hashes.SHA512,
}
_CURVES: dict[str, tuple[type[ec.EllipticCurve], int]] = {  # crv: (curve, coordinate bytes)
    "P-256": (ec.SECP256R1, 32),
    "P-384": (ec.SECP384R1, 48),
    "P-521": (ec.SECP521R1, 66),
}
_ES_CURVES = {"ES256": "P-256", "ES384": "P-384", "ES512": "P-521"}
ALGORITHMS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", *_ES_CURVES})
# jose4j refuses smaller RSA keys for every JOSE RSA algorithm.
MIN_RSA_BITS = 2048
MAX_JWKS_BYTES = 1 << 20
FETCH_TIMEOUT_S = 10.0
# Kafka ignores a key id longer than this when deciding whether to refresh
# (RefreshingHttpsJwks.MISSING_KEY_ID_MAX_KEY_LENGTH).
MAX_KEY_ID_LENGTH = 1000
# However many tokens name unknown keys, refresh at most this often.
MIN_EXPEDITED_REFRESH_S = 1.0


def b64url_decode(text: str) -> bytes:
    """Base64url without padding (RFC 7515 section 2); binascii.Error if malformed."""
    if "=" in text:
        raise binascii.Error("padding in base64url")
    return base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)


@dataclass(frozen=True)
class Jwk:
    kid: str | None
    alg: str | None
    key: rsa.RSAPublicKey | ec.EllipticCurvePublicKey
    curve: str | None  # crv of an EC key

    def fits(self, alg: str) -> bool:
        """Whether this key may check a signature of ``alg`` (its kty, crv and alg agree)."""
        if self.alg is not None and self.alg != alg:
            return False
        if alg in _ES_CURVES:
            return self.curve == _ES_CURVES[alg]
        return isinstance(self.key, rsa.RSAPublicKey)

    def verify(self, alg: str, signature: bytes, signed: bytes) -> bool:
        digest = _HASHES[alg[2:]]()
        try:
            if isinstance(self.key, rsa.RSAPublicKey):
                if self.key.key_size < MIN_RSA_BITS:
                    return False
                if alg.startswith("RS"):
                    self.key.verify(signature, signed, padding.PKCS1v15(), digest)
                else:
                    pss = padding.PSS(padding.MGF1(digest), digest.digest_size)
                    self.key.verify(signature, signed, pss, digest)
            else:
                size = _CURVES[str(self.curve)][1]
                if len(signature) != 2 * size:
                    return False
                r, s = (int.from_bytes(signature[i : i + size]) for i in (0, size))
                self.key.verify(encode_dss_signature(r, s), signed, ec.ECDSA(digest))
        except InvalidSignature:
            return False
        return True


def _int(jwk: Mapping[str, Any], name: str) -> int:
    value = jwk.get(name)
    if not isinstance(value, str):
        raise ValueError(f"missing '{name}'")
    return int.from_bytes(b64url_decode(value))


def parse_jwk(jwk: Mapping[str, Any]) -> Jwk | None:
    """The verification key of one JWK; None for keys that cannot check signatures here
    (kty other than RSA and EC, ``use`` other than sig). ValueError if malformed."""
    if jwk.get("use", "sig") != "sig":
        return None
    kid, alg = jwk.get("kid"), jwk.get("alg")
    if kid is not None and not isinstance(kid, str) or alg is not None and not isinstance(alg, str):
        raise ValueError("'kid' and 'alg' must be strings")
    try:
        if jwk.get("kty") == "RSA":
            key = rsa.RSAPublicNumbers(_int(jwk, "e"), _int(jwk, "n")).public_key()
            return Jwk(kid, alg, key, None)
        if jwk.get("kty") == "EC":
            crv = jwk.get("crv")
            if crv not in _CURVES:
                return None
            curve = _CURVES[str(crv)][0]()
            numbers = ec.EllipticCurvePublicNumbers(_int(jwk, "x"), _int(jwk, "y"), curve)
            return Jwk(kid, alg, numbers.public_key(), str(crv))
    except binascii.Error as e:
        raise ValueError(f"bad base64url: {e}") from None
    return None


def parse_jwks(document: bytes) -> tuple[Jwk, ...]:
    """The usable keys of a JWKS document; ValueError if it is not one."""
    try:
        value = json.loads(document)
    except ValueError:
        raise ValueError("not JSON") from None
    keys = value.get("keys") if isinstance(value, dict) else None
    if not isinstance(keys, list):
        raise ValueError("no 'keys' array")
    parsed = []
    for index, jwk in enumerate(keys):
        if not isinstance(jwk, dict):
            raise ValueError(f"key {index} is not an object")
        try:
            key = parse_jwk(jwk)
        except ValueError as e:
            raise ValueError(f"key {index}: {e}") from None
        if key is not None:
            parsed.append(key)
    return tuple(parsed)


def check_jwks_url(url: str) -> None:
    """ValueError (naming the key) unless ``url`` is a file, http or https URL."""
    scheme = urllib.parse.urlsplit(url).scheme.lower()
    if scheme not in ("file", "http", "https"):
        raise ValueError(
            f"sasl.oauthbearer.jwks.endpoint.url: the URL {url!r} has the protocol "
            f'{scheme!r}; only "http", "https", and "file" are supported'
        )


class Jwks:
    """The keys at ``url``, replaced whole by each successful ``refresh()``."""

    def __init__(self, url: str, refresh_ms: int) -> None:
        check_jwks_url(url)
        self.url = url
        self.refresh_ms = refresh_ms
        self.keys: tuple[Jwk, ...] = ()
        self.loaded = False
        # Set by the event loop when a token names a key not in the set; run() wakes on it.
        self.refresh_wanted = threading.Event()

    def refresh(self) -> None:
        """Fetch and parse the set, then swap it in; blocking. On failure (OSError,
        ValueError) the previous keys stay."""
        parts = urllib.parse.urlsplit(self.url)
        if parts.scheme.lower() == "file":
            path = urllib.request.url2pathname(parts.path)
            with open(path, "rb") as f:
                document = f.read(MAX_JWKS_BYTES + 1)
        else:
            with urllib.request.urlopen(self.url, timeout=FETCH_TIMEOUT_S) as response:
                document = response.read(MAX_JWKS_BYTES + 1)
        if len(document) > MAX_JWKS_BYTES:
            raise ValueError(f"the JWKS at {self.url} is over {MAX_JWKS_BYTES} bytes")
        try:
            keys = parse_jwks(document)
        except ValueError as e:
            raise ValueError(f"the JWKS at {self.url} is not valid: {e}") from None
        self.keys, self.loaded = keys, True  # one assignment: readers see old or new

    def request_refresh(self, kid: str | None) -> None:
        """A token named an unknown key: ask run() for a refresh (never blocks)."""
        if kid is not None and len(kid) <= MAX_KEY_ID_LENGTH:
            self.refresh_wanted.set()

    def run(self, stop: threading.Event) -> None:
        """The refresher thread's body: refresh every refresh_ms and when asked, until
        ``stop`` is set. Failures are logged and retried at the next turn."""
        period_s = self.refresh_ms / 1000 if self.refresh_ms > 0 else None
        next_due = time.monotonic() + period_s if period_s else None
        while not stop.is_set():
            timeout = None if next_due is None else max(0.0, next_due - time.monotonic())
            asked = self.refresh_wanted.wait(timeout)
            if stop.is_set():
                return
            self.refresh_wanted.clear()
            try:
                self.refresh()
            except (OSError, ValueError) as e:
                logger.warning("Could not refresh the JWKS from %s: %s", self.url, e)
            if period_s is not None:
                next_due = time.monotonic() + period_s
            if asked:
                stop.wait(MIN_EXPEDITED_REFRESH_S)

    def wake(self) -> None:
        """Let run() see a stop request now rather than at its next turn."""
        self.refresh_wanted.set()
