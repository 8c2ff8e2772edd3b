"""A broker run as a child process in a directory of its own: what the pytest plugin
(``gregor.server.harness.pytest_plugin``) hands to tests, what Gregor's own tests, the
compatibility tests and the benchmarks run, and the brokers of a cluster (``cluster.py``).

Gregor's broker is this very installation's ``gregor serve`` (``python -m
gregor.server.cli``), so a checkout under test tests its own broker. It starts with
``listeners=PLAINTEXT://127.0.0.1:0``; like Kafka, it advertises the port it bound, and
the launcher reads that port from the line the broker logs once started ("... started
(...); listening on PLAINTEXT://127.0.0.1:<port>"). The log line rather than a file: it
needs nothing from the broker that Kafka's broker does not do, it is written once the
broker has joined its cluster and serves, and ``gregor serve`` always logs at INFO to the
output the launcher keeps. Readiness is then a Metadata answer listing a broker. Every
listener bound on port 0 keeps its first port across restarts.

Its settings are written to ``server.properties`` in its directory (mode 0600, escaped as
Java writes them: ``properties.py``), which ``gregor serve`` reads: the launcher logs the
command line, and settings such as ``sasl.jaas.config`` hold passwords.

A secured broker (``listeners`` overridden with ``SSL://`` or ``SASL_*`` listeners) is
probed on the listener ``probe_listener`` names (the first one logged by default) with the
Kafka client properties ``client_config`` (``security.protocol``, ``ssl.*``, ``sasl.*``),
which ``create_topic`` uses too.

A peer broker (the Tansu broker the compatibility tests and benchmarks compare with) is
the same launcher with another command; it is told a port picked free, as it would
advertise port 0 (``process.py`` says how a taken port is retried).
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gregor._paths import set_child_pythonpath
from gregor.server.cli import topics
from gregor.server.cli.client.connection import (
    AuthenticationFailed,
    Client,
    ClientConfigError,
    ClientError,
)
from gregor.server.harness.process import ServerProcess
from gregor.server.harness.properties import write_properties

START_TIMEOUT_S = 30.0
_POLL_S = 0.01
_LISTENING = re.compile(r"\] started \(.*; listening on (.*)$", re.MULTILINE)
_ENDPOINT = re.compile(r"(\w+)://[^\s,]*:(\d+)")
_SERVING_METRICS = re.compile(r"Serving Prometheus metrics on http://\S*:(\d+)/metrics")


class BrokerProcessError(RuntimeError):
    """The broker did not start, stop or answer as expected; the message has its log tail."""


@dataclass(frozen=True)
class PeerBroker:
    """Another Kafka-compatible broker to run instead of Gregor's: ``command(port,
    data_dir)`` is its command line serving and advertising 127.0.0.1:``port``."""

    name: str
    command: Callable[[int, Path], list[str]]


def tansu(binary: Path) -> PeerBroker:
    """The Tansu broker at ``binary``, keeping its data in memory (lost on restart)."""

    def command(port: int, data_dir: Path) -> list[str]:
        url = f"tcp://127.0.0.1:{port}"
        listeners = ["--listener-url", url, "--advertised-listener-url", url]
        return [str(binary), "broker", *listeners, "--storage-engine", "memory://tansu/"]

    return PeerBroker("tansu", command)


class BrokerProcess(ServerProcess):
    """One broker process; its port and data directory survive restart() and kill()."""

    error = BrokerProcessError
    not_ready_errors = (OSError, ValueError, ClientError)

    def __init__(
        self,
        directory: Path,
        overrides: dict[str, str] | None = None,
        start_timeout_s: float = START_TIMEOUT_S,
        *,
        peer: PeerBroker | None = None,
        own_session: bool = False,
        client_config: dict[str, str] | None = None,
        probe_listener: str | None = None,
    ) -> None:
        """``overrides``: server.properties settings; ``peer``: run that broker instead
        (overrides do not apply); ``own_session``: see ``ServerProcess``;
        ``client_config``: Kafka client properties the harness's own client connects with;
        ``probe_listener``: the listener whose port ``bootstrap`` names (default: the
        first the broker logs)."""
        super().__init__(own_session=own_session)
        self.directory = self.cwd = Path(directory)
        self.data_dir = self.directory / "data"
        self.log_path = self.directory / "broker.log"
        self.overrides = dict(overrides or {})
        self.start_timeout_s = start_timeout_s
        self.peer = peer
        self.name = "gregor broker" if peer is None else peer.name
        self.reports_port = peer is None
        self.client_config = dict(client_config or {})
        self.probe_listener = probe_listener
        self._listener_ports: dict[str, int] = {}

    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:<port>`` for ``bootstrap.servers`` (known once started)."""
        return f"127.0.0.1:{self.port}"

    @property
    def metrics_port(self) -> int:
        """The port this run's /metrics endpoint bound (``metrics.prometheus.port``; 0
        binds a new one at each start)."""
        found = _SERVING_METRICS.findall(self.start_output())
        if not found:
            raise BrokerProcessError(f"{self.name} serves no /metrics (see {self.log_path})")
        return int(found[-1])

    def command(self, port: int) -> list[str]:
        if self.peer is not None:
            return self.peer.command(port, self.data_dir)
        config = {
            "listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "log.dirs": str(self.data_dir),
            "broker.id": "0",
            "num.partitions": "1",
            **self.overrides,
        }
        config["listeners"] = self._keep_ports(config["listeners"])
        # A file, not --override: the command line is logged, and settings hold passwords.
        properties = write_properties(self.directory / "server.properties", config)
        return [sys.executable, "-m", "gregor.server.cli", "serve", str(properties)]

    def _keep_ports(self, listeners: str) -> str:
        """``listeners`` with each port 0 replaced by the port that listener bound at the
        first start, so that a restart serves every listener where clients know it."""
        kept = []
        for item in listeners.split(","):
            name, sep, address = item.strip().partition("://")
            host, _, port = address.rpartition(":")
            known = self._listener_ports.get(name.upper())
            kept.append(f"{name}://{host}:{known}" if sep and port == "0" and known else item)
        return ",".join(kept)

    @property
    def listener_ports(self) -> dict[str, int]:
        """Each listener's port by its upper-case name (known once started)."""
        return dict(self._listener_ports)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        set_child_pythonpath(env)
        return env

    def start(self) -> None:
        """Start the broker and return once it answers Metadata (recovering its logs first
        if the last run crashed)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        super().start()

    def _ready(self) -> bool:
        if self._port is None:
            found = _LISTENING.search(self.start_output())
            if found is None:
                return False
            ports = {name: int(port) for name, port in _ENDPOINT.findall(found.group(1))}
            name = (self.probe_listener or next(iter(ports), "")).upper()
            if name not in ports:
                raise BrokerProcessError(
                    self._describe(f"no listener {name} (listening on {found.group(1)})")
                )
            self._listener_ports = {n.upper(): p for n, p in ports.items()}
            self._port = ports[name]
        try:
            client = self._client(timeout_s=2.0)
            with client:
                return bool(client.metadata([]).brokers)
        except (AuthenticationFailed, ClientConfigError) as e:  # waiting will not help
            raise BrokerProcessError(self._describe(str(e))) from e

    def _client(self, timeout_s: float = 30.0) -> Client:
        return Client(self.bootstrap, "gregor-harness", timeout_s, self.client_config)

    def crash(self) -> None:
        """kill -9: nothing flushed or closed; the broker stays down until ``start()``."""
        self._kill9()

    def kill(self) -> None:
        """kill -9 (nothing flushed or closed), then a start that recovers the logs as after
        a crash, on the same port and data."""
        self._kill9()
        self.start()

    def create_topic(
        self, name: str, partitions: int = 1, config: dict[str, str] | None = None
    ) -> None:
        """Create a topic and return once Metadata shows a leader for every partition."""
        with self._client() as client:
            try:
                topics.create_topic(client, name, partitions, config=config)
            except ClientError as e:
                raise BrokerProcessError(f"creating topic {name!r}: {e}") from e
            deadline = time.monotonic() + START_TIMEOUT_S
            while time.monotonic() < deadline:
                (meta,) = client.metadata([name]).topics
                if meta.error_code.value == 0 and all(
                    p.error_code.value == 0 and p.leader_id >= 0 for p in meta.partitions
                ):
                    if len(meta.partitions) == partitions:
                        return
                time.sleep(_POLL_S)
        raise BrokerProcessError(f"topic {name!r} has no leaders after {START_TIMEOUT_S:.0f}s")
