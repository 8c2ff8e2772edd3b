"""One TLS handshake over a real loopback TCP connection between a server and a client
context, reporting what each side saw (for the tests of gregor.server.security)."""

from __future__ import annotations

import socket
import ssl
import threading
from dataclasses import dataclass

from gregor.server.security.ssl_principal import parse_mapping_rules, principal_from_ssl


@dataclass
class Outcome:
    principal: str | None = None  # what the server made of the client
    server_error: Exception | None = None
    client_error: Exception | None = None
    version: str | None = None  # as the client saw it
    cipher: str | None = None
    server_certificate: bytes | None = None  # DER, as the client received it

    @property
    def ok(self) -> bool:
        return self.server_error is None and self.client_error is None


def handshake(
    server: ssl.SSLContext,
    client: ssl.SSLContext,
    server_hostname: str = "localhost",
    mapping_rules: str = "DEFAULT",
) -> Outcome:
    """The server answers one byte once its handshake is done, so that the client also learns
    of a refusal the server makes late (TLS 1.3 checks the client certificate after the
    client's handshake has finished)."""
    outcome = Outcome()
    mapper = parse_mapping_rules(mapping_rules)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(10)

        def serve() -> None:
            try:
                conn, _ = listener.accept()
                with conn, server.wrap_socket(conn, server_side=True) as tls:
                    outcome.principal = principal_from_ssl(tls, mapper)
                    tls.sendall(b"!")
            except (OSError, ValueError) as e:
                outcome.server_error = e

        thread = threading.Thread(target=serve)
        thread.start()
        try:
            with (
                socket.create_connection(listener.getsockname(), timeout=10) as raw,
                client.wrap_socket(raw, server_hostname=server_hostname) as tls,
            ):
                outcome.version = tls.version()
                cipher = tls.cipher()
                outcome.cipher = cipher[0] if cipher else None
                outcome.server_certificate = tls.getpeercert(binary_form=True)
                if tls.recv(1) != b"!":
                    raise ConnectionError("the server closed the connection")
        except OSError as e:
            outcome.client_error = e
        finally:
            thread.join(15)
    return outcome
