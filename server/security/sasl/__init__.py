"""SASL mechanisms, server side: PLAIN, SCRAM-SHA-256/512, OAUTHBEARER."""

from gregor.server.security.sasl.jwks import Jwks
from gregor.server.security.sasl.mechanism import (
    IllegalSaslStateError,
    SaslAuthenticationError,
    SaslServer,
)
from gregor.server.security.sasl.mechanisms import jwks_sources, server_mechanisms

__all__ = [
    "IllegalSaslStateError",
    "Jwks",
    "SaslAuthenticationError",
    "SaslServer",
    "jwks_sources",
    "server_mechanisms",
]
