"""A real ZooKeeper server (Debian's zookeeperd jars) as a child process, for a cluster's
brokers (``cluster.py``) and tests of the ZooKeeper layer.

Standalone, with its own zoo.cfg, data dir and log in the work dir; the admin server is
off and only the ``ruok``/``srvr`` four-letter words are served. ZooKeeper cannot be told
port 0 (``clientPort=0`` reads as no client port), so its port is picked free and retried
if taken before it binds (``process.py``); it is kept across restarts.

Secured (docs/cluster.md, "ZooKeeper security"): ``sasl_users`` turns on SASL DIGEST-MD5
(a JAAS ``Server`` section of those users, ZooKeeper's SASLAuthenticationProvider);
``require_sasl`` also refuses every request of a client that has not authenticated
(``enforce.auth.schemes=sasl``, ZooKeeper 3.7+); ``tls`` (an identity of ``certs.py``)
adds a TLS port (``secure_port``, Netty) that requires a client certificate signed by the
same CA, whose subject becomes the client's ``x509`` identity. The plain port stays, for
the readiness check and for tests that inspect the znodes.
"""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Mapping
from pathlib import Path

from gregor.server.harness.certs import Identity
from gregor.server.harness.process import ServerProcess, free_port

JAVA = os.environ.get("GREGOR_JAVA", "java")
# zookeeper.jar's manifest names its dependencies; slf4j-simple sends its log to stderr.
CLASSPATH = "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar"
# The secure port's server. zookeeper.jar's manifest misses two of the netty jars it needs
# (Debian's libnetty-java has them).
NETTY_CLASSPATH = ":/usr/share/java/netty-codec.jar:/usr/share/java/netty-resolver.jar"
NETTY_FACTORY = "org.apache.zookeeper.server.NettyServerCnxnFactory"
DIGEST_LOGIN_MODULE = "org.apache.zookeeper.server.auth.DigestLoginModule"
SASL_PROVIDER = "org.apache.zookeeper.server.auth.SASLAuthenticationProvider"
X509_PROVIDER = "org.apache.zookeeper.server.auth.X509AuthenticationProvider"
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
# A short tick lets tests ask for sessions as short as 2 ticks (1 s); Kafka's default of
# 18 s stays within 20 ticks of the maximum (60 s, set explicitly).
TICK_MS = 500
START_TIMEOUT_S = 60.0


class ZooKeeperError(RuntimeError):
    """ZooKeeper did not start or stop as expected; the message carries its log tail."""


class ZooKeeperProcess(ServerProcess):
    """One standalone ZooKeeper; its port and data dir survive restart()."""

    name = "zookeeper"
    error = ZooKeeperError
    log_tail_lines = 40
    start_timeout_s = START_TIMEOUT_S

    def __init__(
        self,
        work_dir: Path,
        *,
        sasl_users: Mapping[str, str] | None = None,
        require_sasl: bool = False,
        tls: Identity | None = None,
    ) -> None:
        super().__init__()
        if require_sasl and not sasl_users:
            raise ValueError("require_sasl needs sasl_users")
        self.work_dir = self.cwd = Path(work_dir)
        self.data_dir = self.work_dir / "data"
        self.config_path = self.work_dir / "zoo.cfg"
        self.jaas_path = self.work_dir / "zookeeper_jaas.conf"
        self.log_path = self.work_dir / "zookeeper.log"
        self.sasl_users = dict(sasl_users or {})
        self.require_sasl = require_sasl
        self.tls = tls
        self._secure_port: int | None = None
        self._paused = False

    @property
    def connect(self) -> str:
        """The ``zookeeper.connect`` string (no chroot; known once started)."""
        return f"127.0.0.1:{self.port}"

    @property
    def secure_port(self) -> int:
        """The TLS port (with ``tls``; picked at the first start, kept across restarts)."""
        if self._secure_port is None:
            raise ZooKeeperError("no TLS port: start a ZooKeeperProcess made with tls=")
        return self._secure_port

    @property
    def secure_connect(self) -> str:
        """The ``zookeeper.connect`` string of the TLS port."""
        return f"127.0.0.1:{self.secure_port}"

    def command(self, port: int) -> list[str]:
        """The command line, after writing the zoo.cfg (and JAAS file) it reads."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(
            "\n".join(
                [
                    f"tickTime={TICK_MS}",
                    f"dataDir={self.data_dir}",
                    f"clientPort={port}",
                    "clientPortAddress=127.0.0.1",
                    "minSessionTimeout=1000",
                    "maxSessionTimeout=60000",
                    "maxClientCnxns=0",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=ruok,srvr",
                    # No fsync per commit: a killed process loses nothing the page cache
                    # holds, and tests only kill processes, never the machine.
                    "forceSync=no",
                    "autopurge.snapRetainCount=3",
                    "autopurge.purgeInterval=1",
                    *self._sasl_settings(),
                    *self._tls_settings(),
                    "",
                ]
            )
        )
        jaas = [f"-Djava.security.auth.login.config={self.jaas_path}"] if self.sasl_users else []
        return [
            JAVA,
            "-Xmx512m",  # Kafka's zookeeper-server-start.sh; 50,000 partitions overflowed 256
            "-XX:+UseSerialGC",
            "-Dzookeeper.jmx.log4j.disable=true",
            *jaas,
            # Timestamps as the brokers' logs have them, to line events up across logs.
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd HH:mm:ss,SSS",
            "-cp",
            CLASSPATH + (NETTY_CLASSPATH if self.tls else ""),
            MAIN_CLASS,
            str(self.config_path),
        ]

    def _sasl_settings(self) -> list[str]:
        """zoo.cfg lines for SASL; writes the JAAS file the server logs in with."""
        if not self.sasl_users:
            return []
        users = "\n".join(
            f'    user_{user}="{password}"' for user, password in self.sasl_users.items()
        )
        self.jaas_path.write_text(f"Server {{\n  {DIGEST_LOGIN_MODULE} required\n{users};\n}};\n")
        lines = [f"authProvider.sasl={SASL_PROVIDER}"]
        if self.require_sasl:
            lines += ["enforce.auth.enabled=true", "enforce.auth.schemes=sasl"]
        return lines

    def _tls_settings(self) -> list[str]:
        """zoo.cfg lines for the TLS port (ZooKeeper reads ssl.* keys from zoo.cfg)."""
        if self.tls is None:
            return []
        if self._secure_port is None:
            self._secure_port = free_port()
        truststore = self.tls.truststore
        return [
            f"secureClientPort={self._secure_port}",
            "secureClientPortAddress=127.0.0.1",
            f"serverCnxnFactory={NETTY_FACTORY}",
            f"authProvider.x509={X509_PROVIDER}",
            f"ssl.keyStore.location={self.tls.pkcs12}",
            f"ssl.keyStore.password={self.tls.password}",
            "ssl.keyStore.type=PKCS12",
            f"ssl.trustStore.location={truststore.pkcs12}",
            f"ssl.trustStore.password={truststore.password}",
            "ssl.trustStore.type=PKCS12",
            "ssl.clientAuth=need",
        ]

    def start(self) -> None:
        self._paused = False
        super().start()

    def _ready(self) -> bool:
        # "ruok" answers before the database is loaded; "srvr" only once serving.
        return four_letter_word(self.port, "srvr").startswith("Zookeeper version")

    def stop(self) -> None:
        self.resume()  # a stopped process would not see the SIGTERM
        super().stop()

    def kill(self) -> None:
        super().kill()
        self._paused = False

    def pause(self) -> None:
        """SIGSTOP: the server stops answering and clients see their connections drop. A
        session past its timeout is not reliably expired on resume: a connect request
        queued meanwhile can revalidate it."""
        if self.running and not self._paused:
            os.kill(self.pid, signal.SIGSTOP)
            self._paused = True

    def resume(self) -> None:
        """SIGCONT after pause()."""
        if self.running and self._paused:
            os.kill(self.pid, signal.SIGCONT)
            self._paused = False

    def expire_session(self, client_id: tuple[int, bytes]) -> None:
        """End a client's session from the server side, as ZooKeeper's own tests do: join it
        with its (session id, password), then close it. The client's ephemeral znodes go at
        once; it sees its session expired when it next talks to the server."""
        from kazoo.client import KazooClient

        twin = KazooClient(hosts=self.connect, client_id=client_id, timeout=10)
        twin.start(timeout=START_TIMEOUT_S)
        try:
            twin.stop()
        finally:
            twin.close()


def four_letter_word(port: int, word: str, timeout: float = 2.0) -> str:
    """Send a four-letter command and return the server's whole answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(word.encode())
        chunks = []
        while chunk := sock.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")
