"""A real ZooKeeper server (Debian's zookeeperd jars) as a child process, for a cluster's
brokers (``cluster.py``) and tests of the ZooKeeper layer.

Standalone, with its own zoo.cfg, data dir and log in the work dir; the admin server is
off and only the ``ruok``/``srvr`` four-letter words are served. ZooKeeper cannot be told
port 0 (``clientPort=0`` reads as no client port), so its port is picked free and retried
if taken before it binds (``process.py``); it is kept across restarts.
"""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

from gregor.server.harness.process import ServerProcess

JAVA = os.environ.get("GREGOR_JAVA", "java")
# zookeeper.jar's manifest names its dependencies; slf4j-simple sends its log to stderr.
CLASSPATH = "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar"
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

    def __init__(self, work_dir: Path) -> None:
        super().__init__()
        self.work_dir = self.cwd = Path(work_dir)
        self.data_dir = self.work_dir / "data"
        self.config_path = self.work_dir / "zoo.cfg"
        self.log_path = self.work_dir / "zookeeper.log"
        self._paused = False

    @property
    def connect(self) -> str:
        """The ``zookeeper.connect`` string (no chroot; known once started)."""
        return f"127.0.0.1:{self.port}"

    def command(self, port: int) -> list[str]:
        """The command line, after writing the zoo.cfg it reads."""
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
                    "",
                ]
            )
        )
        return [
            JAVA,
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-Dzookeeper.jmx.log4j.disable=true",
            # Timestamps as the brokers' logs have them, to line events up across logs.
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd HH:mm:ss,SSS",
            "-cp",
            CLASSPATH,
            MAIN_CLASS,
            str(self.config_path),
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
