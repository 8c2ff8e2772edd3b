"""SaslHandshake (key 17) and SaslAuthenticate (36) as the handlers see them: only where no
SASL exchange is due, on a listener without SASL or on a connection already authenticated
(the exchange itself is the connection's: server/security/authenticator.py). As Kafka's
KafkaApis, both answer ILLEGAL_SASL_STATE."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from gregor.apis.context import RequestContext, Services, build
from gregor.wire.schema import response_type
from gregor.wire.versions import SASL_AUTHENTICATE, SASL_HANDSHAKE


def handle_handshake(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(SASL_HANDSHAKE, ctx.api_version)
    return cls(error_code=ErrorCode.illegal_sasl_state, mechanisms=())


def handle_authenticate(services: Services, ctx: RequestContext, request: Any) -> Any:
    return build(
        response_type(SASL_AUTHENTICATE, ctx.api_version),
        error_code=ErrorCode.illegal_sasl_state,
        error_message="SaslAuthenticate request received after successful authentication",
        auth_bytes=b"",
        session_lifetime=timedelta(0),
    )
