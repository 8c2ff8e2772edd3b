"""How a ZooKeeper session authenticates, and the ACLs of the znodes it creates, as Kafka's
KafkaZkClient does them (``server/security/zk_client_security.py`` reads Kafka's settings).

ACLs are Kafka's ``ZkData.defaultAcls``: with ``zookeeper.set.acl=true`` every znode gets
ZooKeeper's CREATOR_ALL (every right for the identities the session authenticated as:
``sasl:<user>`` with SASL, ``x509:<certificate subject>`` with a TLS client certificate)
plus world READ, except under the sensitive roots (SCRAM credentials, dynamic broker
passwords, delegation tokens), which nobody else may read. Without it every znode is open
to all (OPEN_ACL_UNSAFE). Paths are the session's, below any chroot, as in Kafka.
"""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass, field
from typing import Any

from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.handlers.utils import create_tcp_connection
from kazoo.security import ACL, CREATOR_ALL_ACL, OPEN_ACL_UNSAFE, READ_ACL_UNSAFE

SENSITIVE_ROOT_PATHS = ("/config/users", "/config/brokers", "/delegation_token")


def sensitive_path(path: str) -> bool:
    """Whether a znode holds secrets (Kafka's ZkData.sensitivePath: a prefix match)."""
    return path.startswith(SENSITIVE_ROOT_PATHS)


def default_acls(secure: bool, path: str) -> list[ACL]:
    """The ACL of a znode created at ``path``; ``secure`` is ``zookeeper.set.acl``."""
    if not secure:
        return list(OPEN_ACL_UNSAFE)
    if sensitive_path(path):
        return list(CREATOR_ALL_ACL)
    return [*CREATOR_ALL_ACL, *READ_ACL_UNSAFE]


@dataclass(frozen=True)
class ZkClientSecurity:
    """``set_acl``: Kafka's ``zookeeper.set.acl``; ``sasl_username``/``sasl_password``:
    SASL DIGEST-MD5 (the JAAS ``Client`` section's DigestLoginModule); ``ssl_context``: TLS
    to ZooKeeper (``zookeeper.ssl.client.enable``), with a client certificate if the
    context has one."""

    set_acl: bool = False
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ssl_context: ssl.SSLContext | None = None

    def kazoo_options(self) -> dict[str, Any]:
        """KazooClient's keyword arguments for this security (a fresh set per client:
        kazoo writes into its SASL options)."""
        options: dict[str, Any] = {}
        if self.sasl_username is not None:
            options["sasl_options"] = {
                "mechanism": "DIGEST-MD5",
                "username": self.sasl_username,
                "password": self.sasl_password or "",
            }
        if self.ssl_context is not None:
            options["handler"] = TlsHandler(self.ssl_context)
            options["use_ssl"] = True  # only read by kazoo's log line: the handler does TLS
        return options


class TlsHandler(SequentialThreadingHandler):  # type: ignore[misc]
    """kazoo's threading handler whose connections are wrapped in ``context``: kazoo's own
    TLS reads PEM files only and knows none of Kafka's protocol, cipher-suite, keystore-type
    or hostname-verification settings, which Gregor's ``client_context`` applies."""

    def __init__(self, context: ssl.SSLContext) -> None:
        super().__init__()
        self._context = context

    def create_connection(
        self,
        address: tuple[str, int],
        hostname: str | None = None,
        timeout: float | None = None,
        **_kazoo_tls: Any,
    ) -> ssl.SSLSocket:
        sock = create_tcp_connection(socket, address, timeout=timeout)
        try:
            # The handshake runs here, bounded by the connection's timeout.
            return self._context.wrap_socket(sock, server_hostname=hostname or address[0])
        except BaseException:
            sock.close()
            raise
