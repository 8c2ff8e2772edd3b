"""What a client connection of Gregor's own (the tools' client, the inter-broker client) does
before its first request, from Kafka client properties: ``security.protocol`` PLAINTEXT,
SSL, SASL_PLAINTEXT or SASL_SSL; ``ssl.*`` (``server/security/tls.py`` builds the context,
hostname checking per ``ssl.endpoint.identification.algorithm``); ``sasl.*``
(``sasl_client.py``). Keys that are not about security are left to the client."""

from __future__ import annotations

import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gregor.server.security.sasl_client import SaslMechanismClient, mechanism_client_factory

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True)
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    tls: ssl.SSLContext | None = None  # wraps the socket with server_hostname=the broker's host
    sasl: Callable[[], SaslMechanismClient] | None = None  # a new mechanism client per connection

    @classmethod
    def from_properties(cls, properties: Mapping[str, str] | None) -> ClientSecurity:
        """Raises ValueError (SslConfigError, SaslConfigError) naming the key at fault."""
        properties = properties or {}
        protocol = properties.get("security.protocol", "PLAINTEXT").strip().upper()
        if protocol not in PROTOCOLS:
            raise ValueError(
                f"Invalid value {protocol} for configuration security.protocol: "
                f"must be one of {', '.join(PROTOCOLS)}"
            )
        tls = None
        if protocol.endswith("SSL"):
            from gregor.server.security.tls import client_context  # cryptography: only for TLS

            tls = client_context(properties)
        sasl = mechanism_client_factory(properties) if protocol.startswith("SASL") else None
        return cls(protocol, tls, sasl)
