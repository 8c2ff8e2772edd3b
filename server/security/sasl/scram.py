"""SASL/SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677), server side, as Kafka's
ScramSaslServer: no channel binding (gs2 header ``n``), credentials from the broker's store.

The exchange: client-first ``n,[a=authzid],n=user,r=cnonce[,ext...]`` -> server-first
``r=cnonce+snonce,s=salt,i=N`` -> client-final ``c=biws,r=nonce,p=proof`` -> server-final
``v=signature``. The auth message is built from the messages' own text.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hmac
import re
import secrets
from collections.abc import Callable

from gregor.controller.scram_credentials import (
    MECHANISMS,
    MIN_ITERATIONS,
    ScramCredential,
    ScramCredentialLookup,
    hmac_digest,
    stored_key,
)
from gregor.server.security.sasl.mechanism import (
    SaslAuthenticationError,
    invalid_credentials,
    unexpected_token,
)

LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
CALLBACK_HANDLER = "org.apache.kafka.common.security.scram.internals.ScramServerCallbackHandler"

# RFC 5802's grammar with Kafka's (ScramMessages) character classes; a saslname may also hold
# non-ASCII UTF-8 (RFC 5802's value-safe-char), which Kafka's pattern leaves out.
_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f\u0080-\U0010ffff]|=2C|=3D)+"
_VALUE = r"[\x01-\x2b\x2d-\x7f]+"
_PRINTABLE = r"[\x21-\x2b\x2d-\x7e]+"
_BASE64 = r"(?:[a-zA-Z0-9/+]{4})*(?:[a-zA-Z0-9/+]{3}=|[a-zA-Z0-9/+]{2}==)?"
_EXTENSIONS = rf"(?:,[A-Za-z]+={_VALUE})*"
_CLIENT_FIRST = re.compile(
    rf"(?P<gs2>n,(?:a=(?P<authzid>{_SASLNAME}))?,)"
    rf"(?P<bare>(?:m={_VALUE},)?n=(?P<saslname>{_SASLNAME}),r=(?P<nonce>{_PRINTABLE})"
    rf"(?P<extensions>{_EXTENSIONS}))"
)
_CLIENT_FINAL = re.compile(
    rf"(?P<without_proof>c=(?P<channel>{_BASE64}),r=(?P<nonce>{_PRINTABLE}){_EXTENSIONS})"
    rf",p=(?P<proof>{_BASE64})"
)
# Kafka's extension for delegation tokens (ScramLoginModule.TOKEN_AUTH_CONFIG).
TOKEN_AUTH = "tokenauth"


class _State(enum.Enum):
    RECEIVE_CLIENT_FIRST_MESSAGE = enum.auto()
    RECEIVE_CLIENT_FINAL_MESSAGE = enum.auto()
    COMPLETE = enum.auto()
    FAILED = enum.auto()


def server_nonce() -> str:
    """A fresh nonce as Kafka makes it: 130 random bits in base 36."""
    value = secrets.randbits(130)
    digits = []
    while value:
        value, digit = divmod(value, 36)
        digits.append("0123456789abcdefghijklmnopqrstuvwxyz"[digit])
    return "".join(reversed(digits)) or "0"


def _username(saslname: str) -> str:
    return saslname.replace("=2C", ",").replace("=3D", "=")


def _extensions(text: str) -> dict[str, str]:
    pairs = (item.partition("=") for item in text.split(",") if item)
    return {key: value for key, _, value in pairs}


class ScramServer:
    def __init__(
        self,
        mechanism: str,
        credentials: ScramCredentialLookup,
        nonce: Callable[[], str] = server_nonce,
    ) -> None:
        if mechanism not in MECHANISMS:
            raise ValueError(f"Unsupported SCRAM mechanism {mechanism!r}")
        self.mechanism = mechanism
        self._credentials = credentials
        self._nonce = nonce
        self._state = _State.RECEIVE_CLIENT_FIRST_MESSAGE
        self._user: str | None = None
        self._credential: ScramCredential | None = None
        self._gs2_header = ""
        self._nonce_value = ""
        self._auth_prefix = ""  # client-first-bare "," server-first

    @property
    def complete(self) -> bool:
        return self._state is _State.COMPLETE

    @property
    def principal(self) -> str:
        if not self.complete:
            raise RuntimeError("Authentication exchange has not completed")
        return f"User:{self._user}"

    @property
    def session_lifetime_ms(self) -> int | None:
        return None

    def evaluate(self, token: bytes) -> bytes:
        try:
            if self._state is _State.RECEIVE_CLIENT_FIRST_MESSAGE:
                challenge = self._client_first(token)
                self._state = _State.RECEIVE_CLIENT_FINAL_MESSAGE
                return challenge
            if self._state is _State.RECEIVE_CLIENT_FINAL_MESSAGE:
                challenge = self._client_final(token)
                self._state = _State.COMPLETE
                return challenge
            raise unexpected_token(self._state.name)
        except SaslAuthenticationError:
            if self._state is not _State.COMPLETE:
                self._state = _State.FAILED
            self._credential = None
            raise

    def _fail(self, detail: str) -> SaslAuthenticationError:
        return invalid_credentials(self.mechanism, detail)

    def _text(self, token: bytes, what: str) -> str:
        try:
            return token.decode("utf-8")
        except UnicodeDecodeError:
            raise self._fail(f"Invalid SCRAM {what} message: not UTF-8") from None

    def _client_first(self, token: bytes) -> bytes:
        text = self._text(token, "client first")
        match = _CLIENT_FIRST.fullmatch(text)
        if match is None:
            # Kafka's message does not echo the text either way: it may hold a password typo.
            detail = "Invalid SCRAM client first message format"
            if text.startswith(("p=", "y,")):
                detail += ": channel binding is not supported (gs2 header must be 'n')"
            raise self._fail(detail)
        extensions = _extensions(match["extensions"])
        if extensions.get(TOKEN_AUTH, "").lower() == "true":
            raise SaslAuthenticationError(
                "Authentication failed: delegation token authentication (tokenauth=true) is "
                "not supported by this broker"
            )
        user = _username(match["saslname"])
        try:
            credential = self._credentials(user, self.mechanism)
        except Exception as e:  # the store's failure is the broker's, not the client's
            raise self._fail(
                f"Authentication failed: Credentials could not be obtained ({type(e).__name__})"
            ) from e
        if credential is None:
            raise self._fail("Authentication failed: Invalid user credentials")
        authzid = match["authzid"]
        if authzid is not None and _username(authzid) != user:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is "
                "different from username"
            )
        if credential.iterations < MIN_ITERATIONS:
            raise self._fail(
                f"Iterations {credential.iterations} is less than the minimum "
                f"{MIN_ITERATIONS} for {self.mechanism}"
            )
        self._user, self._credential = user, credential
        self._gs2_header = match["gs2"]
        self._nonce_value = match["nonce"] + self._nonce()
        salt = base64.b64encode(credential.salt).decode("ascii")
        server_first = f"r={self._nonce_value},s={salt},i={credential.iterations}"
        self._auth_prefix = f"{match['bare']},{server_first}"
        return server_first.encode("utf-8")

    def _client_final(self, token: bytes) -> bytes:
        credential = self._credential
        assert credential is not None  # set with the state by _client_first
        text = self._text(token, "client final")
        match = _CLIENT_FINAL.fullmatch(text)
        if match is None:
            raise self._fail("Invalid SCRAM client final message format")
        try:
            channel = base64.b64decode(match["channel"], validate=True)
            proof = base64.b64decode(match["proof"], validate=True)
        except binascii.Error:
            raise self._fail("Invalid SCRAM client final message format") from None
        if channel != self._gs2_header.encode("utf-8"):
            raise self._fail("Invalid channel binding in the final client message")
        if match["nonce"] != self._nonce_value:
            raise self._fail("Invalid client nonce in the final client message.")
        auth_message = f"{self._auth_prefix},{match['without_proof']}".encode()
        signature = hmac_digest(self.mechanism, credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise self._fail("Invalid client credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(stored_key(self.mechanism, client_key), credential.stored_key):
            raise self._fail("Invalid client credentials")
        server_signature = hmac_digest(self.mechanism, credential.server_key, auth_message)
        self._credential = None
        return b"v=" + base64.b64encode(server_signature)
