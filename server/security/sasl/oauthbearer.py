"""SASL/OAUTHBEARER (KIP-255, RFC 7628), server side, as Kafka's OAuthBearerSaslServer, and
Kafka's default validator of unsecured tokens (OAuthBearerUnsecuredValidatorCallbackHandler).

Client-first: ``n,[a=authzid],`` ``\\x01auth=Bearer <token>\\x01`` (``key=value\\x01``)*
``\\x01``. A token the validator refuses is answered with an error challenge (JSON, RFC 7628
3.2.2); the client acknowledges with ``\\x01`` and the exchange fails with that JSON as the
message, as Kafka does.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from gregor.server.security.sasl.mechanism import (
    SaslAuthenticationError,
    invalid_credentials,
    unexpected_token,
)

MECHANISM = "OAUTHBEARER"
LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
UNSECURED_VALIDATOR = (
    "org.apache.kafka.common.security.oauthbearer.internals.unsecured."
    "OAuthBearerUnsecuredValidatorCallbackHandler"
)

_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_KVPAIR = r"[A-Za-z]+=[\x21-\x7e \t\r\n]+\x01"
_CLIENT_FIRST = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,\x01(?P<kvpairs>(?:{_KVPAIR})*)\x01"
)
_AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_.a-zA-Z0-9]+)", re.ASCII)
_CONTROL_A = b"\x01"


@dataclass(frozen=True)
class ValidatedToken:
    principal: str
    lifetime_ms: int  # the token's expiry, ms since the epoch
    scope: frozenset[str]


class InvalidTokenError(Exception):
    """The validator refuses the token: ``status`` (and ``scope``) go to the client in the
    error challenge, ``detail`` only to the broker's log."""

    def __init__(self, detail: str, status: str = "invalid_token", scope: str | None = None):
        super().__init__(detail)
        self.detail, self.status, self.scope = detail, status, scope


class TokenValidator(Protocol):
    def validate(self, token: str) -> ValidatedToken:
        """The token's principal and lifetime; InvalidTokenError if it is refused. Never
        blocks (no I/O): it runs on the event loop."""
        ...


def error_challenge(error: InvalidTokenError) -> str:
    """Kafka's JSON (OAuthBearerSaslServer.jsonErrorResponse), byte for byte."""
    text = f'{{"status":"{error.status}"'
    if error.scope is not None:
        text += f', "scope":"{error.scope}"'
    return text + "}"


class OAuthBearerServer:
    mechanism = MECHANISM

    def __init__(self, validator: TokenValidator, now_ms: Callable[[], int]) -> None:
        self._validator = validator
        self._now_ms = now_ms
        self._token: ValidatedToken | None = None
        # The error challenge sent and why, awaiting the client's %x01.
        self._error: tuple[str, str] | None = None
        self._failed = False
        self._lifetime_ms: int | None = None

    @property
    def complete(self) -> bool:
        return self._token is not None

    @property
    def principal(self) -> str:
        if self._token is None:
            raise RuntimeError("Authentication exchange has not completed")
        return f"User:{self._token.principal}"

    @property
    def session_lifetime_ms(self) -> int | None:
        return self._lifetime_ms

    def evaluate(self, token: bytes) -> bytes:
        if self._token is not None or self._failed:
            raise unexpected_token("COMPLETE" if self._token is not None else "FAILED")
        try:
            return self._evaluate(token)
        except SaslAuthenticationError:
            self._failed = True
            raise

    def _evaluate(self, token: bytes) -> bytes:
        if token == _CONTROL_A and self._error is not None:
            raise SaslAuthenticationError(*self._error)
        self._error = None
        authzid, value = _client_first(token)
        try:
            validated = self._validator.validate(value)
        except InvalidTokenError as e:
            # Not a failure yet: RFC 7628 has the client answer the error challenge first.
            challenge = error_challenge(e)
            self._error = (challenge, f"Token refused: {e.detail}")
            return challenge.encode("utf-8")
        if authzid and authzid != validated.principal:
            raise SaslAuthenticationError(
                f"Authentication failed: Client requested an authorization id ({authzid}) that "
                f"is different from the token's principal name ({validated.principal})"
            )
        self._token = validated
        self._lifetime_ms = max(0, validated.lifetime_ms - self._now_ms())
        return b""


def _client_first(token: bytes) -> tuple[str, str]:
    """(authzid, token value) of the client's first message; Kafka's
    OAuthBearerClientInitialResponse, whose failures are SaslExceptions."""
    try:
        text = token.decode("utf-8")
    except UnicodeDecodeError:
        text = ""
    match = _CLIENT_FIRST.fullmatch(text)
    if match is None:
        raise invalid_credentials(MECHANISM, "Invalid OAUTHBEARER client first message")
    pairs = dict(item.partition("=")[::2] for item in match["kvpairs"].split("\x01") if item)
    auth = pairs.get("auth")
    if auth is None:
        raise invalid_credentials(
            MECHANISM, "Invalid OAUTHBEARER client first message: 'auth' not specified"
        )
    auth_match = _AUTH.fullmatch(auth)
    if auth_match is None:
        raise invalid_credentials(
            MECHANISM, "Invalid OAUTHBEARER client first message: invalid 'auth' format"
        )
    if auth_match["scheme"].lower() != "bearer":
        raise invalid_credentials(
            MECHANISM,
            f"Invalid scheme in OAUTHBEARER client first message: {auth_match['scheme']}",
        )
    return match["authzid"] or "", auth_match["token"]


# The unsecured validator ---------------------------------------------------------------


def b64url_json(section: str) -> dict[str, Any]:
    """A JWS section: base64url (padding optional) of a JSON object."""
    try:
        raw = base64.urlsafe_b64decode(section + "=" * (-len(section) % 4))
    except (binascii.Error, ValueError):
        raise InvalidTokenError("malformed Base64 URL encoded value") from None
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: arrays nested thousands deep
        raise InvalidTokenError("malformed JSON") from None
    if not isinstance(value, dict):
        raise InvalidTokenError("malformed JSON")
    return value


def is_number(value: object) -> bool:
    """A JSON number usable as a date: not NaN, not infinite, not beyond a float."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int of hundreds of digits
        return False


def _type_name(value: object) -> str:
    if isinstance(value, list):
        return "List"
    if isinstance(value, str):
        return "String"
    return "Number" if is_number(value) else type(value).__name__


def _number_claim(claims: Mapping[str, Any], name: str) -> float | None:
    value = claims.get(name)
    if value is not None and not is_number(value):
        raise InvalidTokenError(f"The '{name}' claim was not of type Number: {_type_name(value)}")
    return None if value is None else float(value)


@dataclass(frozen=True)
class UnsecuredValidatorOptions:
    """The ``unsecuredValidator*`` options of OAuthBearerLoginModule's JAAS entry."""

    principal_claim: str = "sub"
    scope_claim: str = "scope"
    required_scope: tuple[str, ...] = ()
    clock_skew_ms: int = 0

    @classmethod
    def from_jaas(cls, options: Mapping[str, str]) -> UnsecuredValidatorOptions:
        """ValueError (naming the option) for a clock skew that is not a non-negative int."""
        skew_text = options.get("unsecuredValidatorAllowableClockSkewMs", "").strip()
        try:
            skew = int(skew_text) if skew_text else 0
        except ValueError:
            raise ValueError(
                f"unsecuredValidatorAllowableClockSkewMs: not an integer: {skew_text!r}"
            ) from None
        if skew < 0:
            raise ValueError(f"Allowable clock skew millis must not be negative: {skew_text}")
        return cls(
            principal_claim=options.get("unsecuredValidatorPrincipalClaimName", "").strip()
            or "sub",
            scope_claim=options.get("unsecuredValidatorScopeClaimName", "").strip() or "scope",
            required_scope=tuple(options.get("unsecuredValidatorRequiredScope", "").split()),
            clock_skew_ms=skew,
        )


def _java_round(value: float) -> int:
    return math.floor(value + 0.5)


class UnsecuredValidator:
    """Kafka's OAuthBearerUnsecuredJws and OAuthBearerValidationUtils: an unsigned JWS
    (``alg`` none) with a principal claim and ``exp``, optional ``iat``, and scope."""

    def __init__(self, options: UnsecuredValidatorOptions, now_ms: Callable[[], int]) -> None:
        self._options = options
        self._now_ms = now_ms

    def validate(self, token: str) -> ValidatedToken:
        opts = self._options
        if ".." in token:
            raise InvalidTokenError("Malformed compact serialization contains '..'")
        sections = token.split(".")
        if len(sections) != 3:
            raise InvalidTokenError(
                "Unsecured JWS compact serializations must have 3 dot-separated "
                "Base64URL-encoded values"
            )
        header, claims = b64url_json(sections[0]), b64url_json(sections[1])
        if header.get("alg") != "none":
            raise InvalidTokenError("Unsecured JWS must have 'none' for an algorithm")
        if sections[2]:
            raise InvalidTokenError("Unsecured JWS must not contain a digital signature")
        scope = _unsecured_scope(claims.get(opts.scope_claim))
        exp = _number_claim(claims, "exp")
        if exp is None:
            raise InvalidTokenError("No expiration time in JWT")
        principal = claims.get(opts.principal_claim)
        if principal is not None and not isinstance(principal, str):
            raise InvalidTokenError(
                f"The '{opts.principal_claim}' claim was not of type String: "
                f"{_type_name(principal)}"
            )
        if principal is None or not principal.strip():
            raise InvalidTokenError(f"No principal name in JWT claim: {opts.principal_claim}")
        iat = _number_claim(claims, "iat")
        now = self._now_ms()
        skew = opts.clock_skew_ms
        if iat is not None and 1000 * iat > now + skew:
            raise InvalidTokenError(
                f"The Issued At value ({iat:f} seconds) was after the indicated time ({now} ms) "
                f"plus allowable clock skew ({skew} ms)"
            )
        if now - skew >= 1000 * exp:
            raise InvalidTokenError(
                f"The indicated time ({now} ms) minus allowable clock skew ({skew} ms) was on "
                f"or after the Expiration Time value ({exp:f} seconds)"
            )
        if iat is not None and exp <= iat:
            raise InvalidTokenError(
                f"The Expiration Time time ({exp:f} seconds) was not after the Issued At time "
                f"({iat:f} seconds)"
            )
        for required in opts.required_scope:
            if required not in scope:
                raise InvalidTokenError(
                    f"The provided scope ({sorted(scope)}) was missing a required scope "
                    f"({required}).  All required scope elements: {list(opts.required_scope)}",
                    status="insufficient_scope",
                    scope="[" + ", ".join(opts.required_scope) + "]",  # Java's List.toString
                )
        return ValidatedToken(principal, _java_round(exp * 1000), scope)


def _unsecured_scope(value: object) -> frozenset[str]:
    if isinstance(value, str):
        return frozenset([value.strip()]) if value.strip() else frozenset()
    if value is None:
        return frozenset()
    if not isinstance(value, list):
        raise InvalidTokenError(f"The 'scope' claim was not of type List: {_type_name(value)}")
    return frozenset(str(item).strip() for item in value if str(item).strip())
