"""The SASL exchange of one connection on a SASL_PLAINTEXT or SASL_SSL listener, run by the
connection itself before its requests reach the handlers, as Kafka's
SaslServerAuthenticator runs it on the network thread.

Before authentication a connection may send ApiVersions (answered by the handlers, once),
then SaslHandshake, then the mechanism's tokens: in SaslAuthenticate requests after a
SaslHandshake v1, raw (size-prefixed, no header) after a v0 one, as old clients send them.
Any other request closes the connection. A failure answers SASL_AUTHENTICATION_FAILED (or
UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE) with the mechanism's message after
``connection.failed.authentication.delay.ms``, then closes the connection; why it failed
goes to the broker's log only.

Re-authentication (KIP-368): the session lasts ``connections.max.reauth.ms`` (per
mechanism), or less if the credential expires sooner (an OAUTHBEARER token), reported in
SaslAuthenticate v1+. A SaslHandshake on an authenticated connection with a session
lifetime begins a re-authentication (at most one a second), which must keep the mechanism
and the principal. A request that arrives after the session expired closes the connection
(those already handed over finish), whether or not the client can re-authenticate.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from gregor.apis.context import build
from gregor.ratelimit import RateLimitedLog
from gregor.server.metrics import (
    EXPIRED_CONNECTIONS_KILLED,
    FAILED_AUTHENTICATION,
    FAILED_REAUTHENTICATION,
    SUCCESSFUL_AUTHENTICATION,
    SUCCESSFUL_AUTHENTICATION_NO_REAUTH,
    SUCCESSFUL_REAUTHENTICATION,
    AuthenticationMetrics,
)
from gregor.server.security.sasl.mechanism import SaslAuthenticationError, SaslServer
from gregor.wire import versions
from gregor.wire.headers import MalformedHeaderError, decode_request_header, encode_response_header
from gregor.wire.schema import SchemaDecodeError, decode, encode, request_type, response_type
from gregor.wire.versions import SASL_AUTHENTICATE, SASL_HANDSHAKE

logger = logging.getLogger(__name__)
limited_log = RateLimitedLog(logger)

# Kafka's KafkaChannel.MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS.
MIN_REAUTH_INTERVAL_NS = 1_000_000_000
# The longest session_lifetime SaslAuthenticate can carry (a token may expire in 10^300 s).
MAX_SESSION_LIFETIME_MS = timedelta.max // timedelta(milliseconds=1)


@dataclass(frozen=True, slots=True)
class SaslListener:
    """A SASL listener's settings, built at start-up (server/listener_security.py)."""

    name: str
    factories: Mapping[str, Callable[[], SaslServer]]  # by enabled mechanism, in order
    max_receive_size: int  # sasl.server.max.receive.size
    reauth_ms: Mapping[str, int]  # connections.max.reauth.ms per mechanism (<= 0: none)
    failed_delay_ms: int  # connection.failed.authentication.delay.ms
    metrics: AuthenticationMetrics


class Channel(Protocol):
    """The connection, as its authenticator drives it."""

    peer: str
    principal: str
    receive_limit: int  # the largest frame it accepts now

    def send(self, parts: Sequence[bytes], size: int) -> None: ...
    def close(self) -> None: ...
    def set_principal(self, principal: str) -> None: ...
    def close_later(self, delay_ms: int, last: bytes) -> None:
        """Write ``last`` (if any) after ``delay_ms``, then close."""
        ...


class _State(enum.Enum):
    HANDSHAKE = "HANDSHAKE"  # ApiVersions (once) or SaslHandshake
    AUTHENTICATE = "AUTHENTICATE"  # the mechanism's tokens
    BAD_MECHANISM = "BAD_MECHANISM"  # a re-authentication asked for another mechanism
    COMPLETE = "COMPLETE"
    FAILED = "FAILED"


class SaslAuthenticator:
    """One connection's authentication state. ``receive`` sees every request frame before
    the handlers do; ``complete`` is False while the exchange runs."""

    __slots__ = (
        "_listener",
        "_channel",
        "_state",
        "_versions_seen",
        "_raw",
        "_server",
        "_mechanism",
        "_bad_mechanism",
        "_request_limit",
        "_reauthenticating",
        "_supports_reauth",
        "_expires_ns",
        "_reauth_started_ns",
        "complete",
    )

    def __init__(self, listener: SaslListener, channel: Channel) -> None:
        self._listener = listener
        self._channel = channel
        self._state = _State.HANDSHAKE
        self._versions_seen = False
        self._raw = False  # SaslHandshake v0: tokens without Kafka headers
        self._server: SaslServer | None = None
        self._mechanism = ""
        self._bad_mechanism = ""
        self._request_limit = channel.receive_limit  # socket.request.max.bytes
        self._reauthenticating = False
        self._supports_reauth = False  # a SaslAuthenticate v1+ was seen (KIP-368)
        self._expires_ns: int | None = None  # monotonic; None: the session never expires
        self._reauth_started_ns = 0
        self.complete = False
        channel.receive_limit = min(listener.max_receive_size, self._request_limit)

    def receive(self, frame: bytes | bytearray) -> bool:
        """True if the frame was the exchange's (answered here, or the connection closed);
        False to hand it to the handlers."""
        if self.complete:
            return self._authenticated(frame)
        if self._state is _State.AUTHENTICATE and self._raw:
            self._raw_token(bytes(frame))
            return True
        if len(frame) < 8:  # api key, version, correlation id
            self._refuse("a malformed request")
            return True
        api_key = int.from_bytes(frame[0:2], "big", signed=True)
        version = int.from_bytes(frame[2:4], "big", signed=True)
        correlation_id = int.from_bytes(frame[4:8], "big", signed=True)
        if self._state is _State.HANDSHAKE:
            if api_key == versions.API_VERSIONS and not self._versions_seen:
                # Answered by the handlers; a version we lack is answered there with an
                # error, and the client may ask again.
                self._versions_seen = versions.is_supported(api_key, version)
                return False
            if api_key == SASL_HANDSHAKE:
                self._handshake(frame, version, correlation_id)
                return True
            self._refuse(f"an unexpected request (API key {api_key}) during SASL handshake")
            return True
        if api_key != SASL_AUTHENTICATE:
            self._fail(
                None,
                f"Unexpected Kafka request of type {api_key} during SASL authentication",
                ErrorCode.illegal_sasl_state,
            )
            return True
        self._authenticate(frame, version, correlation_id)
        return True

    # -- authenticated ----------------------------------------------------------------
    def _authenticated(self, frame: bytes | bytearray) -> bool:
        expires = self._expires_ns
        if expires is None:
            return False  # a SaslHandshake goes to the handlers: ILLEGAL_SASL_STATE
        now = time.monotonic_ns()
        if (
            len(frame) >= 8
            and frame[0] == 0
            and frame[1] == SASL_HANDSHAKE
            and (
                self._reauth_started_ns == 0
                or now - self._reauth_started_ns >= MIN_REAUTH_INTERVAL_NS
            )
        ):
            self._reauth_started_ns = now
            self._reauthenticating = True
            self.complete = False
            self._state = _State.HANDSHAKE
            self._channel.receive_limit = min(self._listener.max_receive_size, self._request_limit)
            version = int.from_bytes(frame[2:4], "big", signed=True)
            self._handshake(frame, version, int.from_bytes(frame[4:8], "big", signed=True))
            return True
        if now > expires:
            limited_log.log(
                "sasl-expired",
                logging.INFO,
                "Closing connection from %s on listener %s: its SASL session expired "
                "(connections.max.reauth.ms or the credential's lifetime)",
                self._channel.peer,
                self._listener.name,
            )
            self._record(EXPIRED_CONNECTIONS_KILLED)
            self._channel.close()
            return True
        return False

    # -- the exchange -----------------------------------------------------------------
    def _handshake(self, frame: bytes | bytearray, version: int, correlation_id: int) -> None:
        request = self._decode(frame, SASL_HANDSHAKE, version)
        if request is None:
            return
        mechanism: str = request.mechanism
        enabled = tuple(self._listener.factories)
        cls = response_type(SASL_HANDSHAKE, version)
        if mechanism not in self._listener.factories:
            response = cls(error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=enabled)
            self._fail(
                self._response(correlation_id, False, response),
                f"Unsupported SASL mechanism {mechanism[:100]!r}",
            )
            return
        self._raw = version == 0
        if self._reauthenticating and mechanism != self._mechanism:
            # Kafka answers the handshake and fails the next token.
            self._state = _State.BAD_MECHANISM
            self._bad_mechanism = mechanism
        else:
            self._mechanism = mechanism
            self._server = self._listener.factories[mechanism]()
            self._state = _State.AUTHENTICATE
        response = cls(error_code=ErrorCode.none, mechanisms=enabled)
        self._send(self._response(correlation_id, False, response))

    def _authenticate(self, frame: bytes | bytearray, version: int, correlation_id: int) -> None:
        request = self._decode(frame, SASL_AUTHENTICATE, version)
        if request is None:
            return
        if version > 0:
            self._supports_reauth = True
        flexible = version >= 2
        cls = response_type(SASL_AUTHENTICATE, version)
        try:
            challenge = self._evaluate(bytes(request.auth_bytes))
        except SaslAuthenticationError as e:
            error = ErrorCode(e.error_code)
            response = build(
                cls,
                error_code=error,
                error_message=str(e),
                auth_bytes=b"",
                session_lifetime=timedelta(0),
            )
            self._fail(self._response(correlation_id, flexible, response), e.detail, error)
            return
        lifetime_ms = self._completed() if self.complete else 0
        response = build(
            cls,
            error_code=ErrorCode.none,
            error_message=None,
            auth_bytes=challenge,
            session_lifetime=timedelta(milliseconds=lifetime_ms),
        )
        self._send(self._response(correlation_id, flexible, response))

    def _raw_token(self, token: bytes) -> None:
        try:
            challenge = self._evaluate(token)
        except SaslAuthenticationError as e:
            self._fail(b"", e.detail)
            return
        if self.complete:
            self._completed()
        self._channel.send([challenge], len(challenge))

    def _evaluate(self, token: bytes) -> bytes:
        """The mechanism's next challenge; SaslAuthenticationError if it fails, or if a
        re-authentication changes the mechanism or the principal."""
        if self._state is _State.BAD_MECHANISM:
            raise SaslAuthenticationError(
                f"SASL mechanism '{self._bad_mechanism}' requested by client is not supported "
                f"for re-authentication of mechanism '{self._mechanism}'"
            )
        server = self._server
        assert server is not None
        challenge = server.evaluate(token)
        if server.complete:
            principal = server.principal
            if self._reauthenticating and principal != self._channel.principal:
                old, new = (p.replace(":", ".", 1) for p in (self._channel.principal, principal))
                raise SaslAuthenticationError(
                    f"Cannot change principals during re-authentication from {old}: {new}"
                )
            self.complete = True
        return challenge

    def _completed(self) -> int:
        """The exchange succeeded: the session's lifetime in ms (0: none), as Kafka's
        ReauthInfo computes it; the connection takes its principal."""
        server = self._server
        assert server is not None
        credential_ms = server.session_lifetime_ms
        max_reauth_ms = self._listener.reauth_ms.get(self._mechanism, 0)
        lifetime_ms = 0
        self._expires_ns = None
        if credential_ms is not None or max_reauth_ms > 0:
            if credential_ms is None:
                lifetime_ms = max_reauth_ms
            elif max_reauth_ms <= 0:
                lifetime_ms = max(0, credential_ms)
            else:
                lifetime_ms = max(0, min(credential_ms, max_reauth_ms))
            lifetime_ms = min(lifetime_ms, MAX_SESSION_LIFETIME_MS)
            self._expires_ns = time.monotonic_ns() + lifetime_ms * 1_000_000
        self._state = _State.COMPLETE
        channel = self._channel
        channel.set_principal(server.principal)
        channel.receive_limit = self._request_limit
        if self._reauthenticating:
            self._record(SUCCESSFUL_REAUTHENTICATION)
        else:
            self._record(SUCCESSFUL_AUTHENTICATION)
            if not self._supports_reauth:
                self._record(SUCCESSFUL_AUTHENTICATION_NO_REAUTH)
        self._server = None
        return lifetime_ms

    # -- helpers ----------------------------------------------------------------------
    def _decode(self, frame: bytes | bytearray, api_key: int, version: int) -> Any:
        """The request's body; None (the connection closed) if it cannot be read."""
        if not versions.is_supported(api_key, version):
            self._refuse(f"an unsupported version {version} of API key {api_key}")
            return None
        try:
            header = decode_request_header(frame, version >= 2 and api_key == SASL_AUTHENTICATE)
            return decode(request_type(api_key, version), bytes(frame), header.body_offset)
        except (MalformedHeaderError, SchemaDecodeError) as e:
            self._refuse(f"a malformed request ({e})")
            return None

    @staticmethod
    def _response(correlation_id: int, flexible: bool, response: Any) -> bytes:
        head = encode_response_header(correlation_id, flexible)
        body = encode(response)
        return len(head + body).to_bytes(4, "big") + head + body

    def _send(self, framed: bytes) -> None:
        self._channel.send([framed[4:]], len(framed) - 4)

    def _refuse(self, what: str) -> None:
        """Not a Kafka SASL client (or one configured for another security protocol):
        closed at once, as Kafka's InvalidRequestException does."""
        limited_log.log(
            "sasl-invalid-request",
            logging.INFO,
            "Closing connection from %s on SASL listener %s: %s (a client configured with "
            "the wrong security protocol?)",
            self._channel.peer,
            self._listener.name,
            what,
        )
        self._state = _State.FAILED
        self._channel.close()

    def _fail(
        self,
        response: bytes | None,
        detail: str,
        error: ErrorCode = ErrorCode.sasl_authentication_failed,
    ) -> None:
        """Authentication failed: the answer (``response``, framed; b"" none) goes out
        after the delay, then the connection is closed."""
        self._state = _State.FAILED
        self._record(FAILED_REAUTHENTICATION if self._reauthenticating else FAILED_AUTHENTICATION)
        limited_log.log(
            "sasl-failed",
            logging.INFO,
            "Failed %s with %s on listener %s (%s): %s",
            "re-authentication" if self._reauthenticating else "authentication",
            self._channel.peer,
            self._listener.name,
            error.name,
            detail,
        )
        self._channel.close_later(self._listener.failed_delay_ms, response or b"")

    def _record(self, counter: str) -> None:
        mechanism = self._mechanism if self._mechanism in self._listener.factories else ""
        self._listener.metrics.record(counter, self._listener.name, mechanism)
