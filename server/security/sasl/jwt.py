"""Signed JWT access tokens checked against a JWKS (KIP-768), as Kafka's
OAuthBearerValidatorCallbackHandler / BrokerJwtValidator (jose4j underneath): a signature
by a key of the set (never ``alg`` none), ``exp`` and ``iat`` required, ``nbf`` honoured,
the clock skew allowed, ``aud`` and ``iss`` as configured, the subject claim as principal.
"""

from __future__ import annotations

import binascii
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gregor.server.security.sasl.jwks import ALGORITHMS, Jwks, b64url_decode, check_jwks_url
from gregor.server.security.sasl.mechanism import mechanism_setting
from gregor.server.security.sasl.oauthbearer import (
    MECHANISM,
    InvalidTokenError,
    ValidatedToken,
    b64url_json,
    is_number,
)

# Every name Kafka has given its JWT validating callback handler: the first in 3.1 to 3.9
# (deprecated since 3.4), the second since 3.4.
JWT_VALIDATORS = frozenset(
    {
        "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerValidatorCallbackHandler",
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
    }
)
JWKS_ENDPOINT_URL = "sasl.oauthbearer.jwks.endpoint.url"
JWKS_ENDPOINT_REFRESH_MS = "sasl.oauthbearer.jwks.endpoint.refresh.ms"
EXPECTED_AUDIENCE = "sasl.oauthbearer.expected.audience"
EXPECTED_ISSUER = "sasl.oauthbearer.expected.issuer"
CLOCK_SKEW_SECONDS = "sasl.oauthbearer.clock.skew.seconds"
SCOPE_CLAIM_NAME = "sasl.oauthbearer.scope.claim.name"
SUB_CLAIM_NAME = "sasl.oauthbearer.sub.claim.name"


@dataclass(frozen=True)
class JwtSettings:
    jwks_url: str
    refresh_ms: int = 3_600_000
    audience: frozenset[str] = frozenset()
    issuer: str | None = None
    clock_skew_s: int = 30
    scope_claim: str = "scope"
    sub_claim: str = "sub"

    @classmethod
    def from_settings(cls, settings: Mapping[str, str]) -> JwtSettings:
        """The KIP-768 keys with Kafka's defaults; ValueError naming a key that is wrong."""

        def get(key: str) -> str | None:
            return mechanism_setting(settings, MECHANISM, key)

        url = (get(JWKS_ENDPOINT_URL) or "").strip()
        if not url:
            raise ValueError(f"The OAuth configuration option {JWKS_ENDPOINT_URL} is required")
        check_jwks_url(url)
        refresh_ms = _int(get(JWKS_ENDPOINT_REFRESH_MS), JWKS_ENDPOINT_REFRESH_MS, 3_600_000)
        if refresh_ms < 0:
            raise ValueError(
                f"The OAuth configuration option {JWKS_ENDPOINT_REFRESH_MS} value must be "
                "non-negative"
            )
        skew = _int(get(CLOCK_SKEW_SECONDS), CLOCK_SKEW_SECONDS, 30)
        audience = frozenset(a.strip() for a in (get(EXPECTED_AUDIENCE) or "").split(","))
        return cls(
            jwks_url=url,
            refresh_ms=refresh_ms,
            audience=audience - {""},
            issuer=get(EXPECTED_ISSUER) or None,
            clock_skew_s=skew,
            scope_claim=(get(SCOPE_CLAIM_NAME) or "").strip() or "scope",
            sub_claim=(get(SUB_CLAIM_NAME) or "").strip() or "sub",
        )


def _int(text: str | None, key: str, default: int) -> int:
    if text is None or not text.strip():
        return default
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError(f"{key}: not an integer: {text!r}") from None


class JwtValidator:
    def __init__(self, settings: JwtSettings, jwks: Jwks, now_ms: Callable[[], int]) -> None:
        self._settings = settings
        self.jwks = jwks
        self._now_ms = now_ms

    def validate(self, token: str) -> ValidatedToken:
        sections = token.strip().split(".")
        if len(sections) != 3 or not all(s.strip() for s in sections):
            raise InvalidTokenError(
                "Malformed JWT provided; expected three sections (header, payload, and signature)"
            )
        header = b64url_json(sections[0])
        self._check_signature(header, sections)
        return self._check_claims(b64url_json(sections[1]))

    def _check_signature(self, header: Mapping[str, Any], sections: list[str]) -> None:
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in ALGORITHMS:
            raise InvalidTokenError(f"The JWS algorithm {alg!r} is not allowed")
        if "crit" in header:
            raise InvalidTokenError("Unrecognized critical header parameters")
        if not self.jwks.loaded:
            self.jwks.refresh_wanted.set()
            raise InvalidTokenError(f"No JWKS loaded yet from {self.jwks.url}")
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise InvalidTokenError("The JWS kid header is not a string")
        candidates = [k for k in self.jwks.keys if (kid is None or k.kid == kid) and k.fits(alg)]
        if not candidates:
            self.jwks.request_refresh(kid)
            raise InvalidTokenError(
                f"Unable to find a suitable verification key for JWS w/ header "
                f"{json.dumps(header, sort_keys=True)} obtained from {self.jwks.url}"
            )
        try:
            signature = b64url_decode(sections[2])
        except binascii.Error:
            raise InvalidTokenError("The JWS signature is not base64url") from None
        signed = f"{sections[0]}.{sections[1]}".encode("ascii")
        if not any(key.verify(alg, signature, signed) for key in candidates):
            raise InvalidTokenError("JWS signature is invalid")

    def _check_claims(self, claims: Mapping[str, Any]) -> ValidatedToken:
        s = self._settings
        now_s = self._now_ms() / 1000
        exp, iat = _date(claims, "exp"), _date(claims, "iat")
        if exp is None:
            raise InvalidTokenError("No Expiration Time (exp) claim present.")
        if iat is None:
            raise InvalidTokenError("No Issued At (iat) claim present.")
        if now_s - s.clock_skew_s >= exp:
            raise InvalidTokenError(
                f"The JWT is no longer valid - the evaluation time {now_s:.0f} is on or after "
                f"the Expiration Time (exp={exp}) claim value (even when providing "
                f"{s.clock_skew_s} seconds of leeway to account for clock skew)."
            )
        nbf = _date(claims, "nbf")
        if nbf is not None and now_s + s.clock_skew_s < nbf:
            raise InvalidTokenError(f"The JWT is not yet valid (nbf={nbf})")
        self._check_audience(claims.get("aud"))
        if s.issuer is not None and claims.get("iss") != s.issuer:
            raise InvalidTokenError(
                f"Issuer (iss) claim value ({claims.get('iss')}) doesn't match expected "
                f"value of {s.issuer}"
            )
        sub = claims.get(s.sub_claim)
        if sub is not None and not isinstance(sub, str):
            raise InvalidTokenError(f"Could not extract the '{s.sub_claim}' claim")
        if sub is None or not sub.strip():
            raise InvalidTokenError(
                f"{s.sub_claim} value must be non-null, non-empty, and non-whitespace"
            )
        if exp < 0 or iat < 0:
            raise InvalidTokenError("exp and iat values must be non-negative")
        return ValidatedToken(sub.strip(), exp * 1000, _scopes(s.scope_claim, claims))

    def _check_audience(self, aud: object) -> None:
        # jose4j's default: without expected audiences, a token naming any audience is refused.
        if aud is None:
            if self._settings.audience:
                raise InvalidTokenError("No Audience (aud) claim present.")
            return
        audiences = [aud] if isinstance(aud, str) else aud
        if not isinstance(audiences, list) or not all(isinstance(a, str) for a in audiences):
            raise InvalidTokenError("The Audience (aud) claim is malformed")
        if not self._settings.audience.intersection(audiences):
            raise InvalidTokenError(
                f"Audience (aud) claim {audiences} doesn't contain an acceptable identifier. "
                f"Expected one of {sorted(self._settings.audience)} as an aud value "
                f"(set {EXPECTED_AUDIENCE})"
            )


def _date(claims: Mapping[str, Any], name: str) -> int | None:
    """A NumericDate claim in whole seconds, as jose4j reads it."""
    value = claims.get(name)
    if value is None:
        return None
    if not is_number(value):
        raise InvalidTokenError(f"The value of the '{name}' claim is not the expected type")
    return int(value)


def _scopes(name: str, claims: Mapping[str, Any]) -> frozenset[str]:
    raw = claims.get(name)
    values = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
    scopes: set[str] = set()
    for value in values:
        if not isinstance(value, str) or not value.strip():
            raise InvalidTokenError(f"{name} value must be non-null, non-empty, and non-whitespace")
        if value.strip() in scopes:
            raise InvalidTokenError(
                f"{name} value must not contain duplicates - {value.strip()} already present"
            )
        scopes.add(value.strip())
    return frozenset(scopes)
