"""The two brokers under test as child processes: start, wait until they answer, stop.

Everything after start-up (topic creation, load, measurements) is the same code for both;
a broker only differs in the command line that launches it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from .artifacts import REPO, ensure_tansu
from .drivers import QUIET, Endpoint
from .scraper import Scraper


class BrokerError(RuntimeError):
    """The broker did not start, died, or refused an admin request."""


@dataclass(frozen=True)
class BrokerKind:
    name: str
    label: str
    storage: str
    command: Callable[[int, Path], list[str]]


def _gregor_command(port: int, data_dir: Path) -> list[str]:
    listener = f"PLAINTEXT://127.0.0.1:{port}"
    overrides = {
        "listeners": listener,
        "advertised.listeners": listener,
        "log.dirs": str(data_dir),
        "num.partitions": "1",
        # As in Kafka's shipped config/server.properties: no wait for more members before
        # the first rebalance of a new group (the 3 s broker default is for production).
        "group.initial.rebalance.delay.ms": "0",
    }
    cmd = [str(Path(sys.executable).with_name("gregor")), "serve"]
    for key, value in overrides.items():
        cmd += ["--override", f"{key}={value}"]
    return cmd


def _tansu_command(port: int, data_dir: Path) -> list[str]:
    url = f"tcp://127.0.0.1:{port}"
    listeners = ["--listener-url", url, "--advertised-listener-url", url]
    return [str(ensure_tansu()), "broker", *listeners, "--storage-engine", "memory://tansu/"]


GREGOR = BrokerKind("gregor", "Gregor", "disk (log.dirs in a fresh tmp dir)", _gregor_command)
TANSU = BrokerKind("tansu", "Tansu", "memory://", _tansu_command)
KINDS = {kind.name: kind for kind in (GREGOR, TANSU)}


def _pythonpath() -> list[str]:
    return [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# setpriv makes the kernel kill the broker if this script dies without cleaning up (kill -9).
_PDEATHSIG = ["setpriv", "--pdeathsig", "KILL", "--"] if shutil.which("setpriv") else []


class Broker:
    """A running broker process; use as a context manager so it is stopped on any exit."""

    def __init__(
        self,
        kind: BrokerKind,
        workdir: Path,
        scrape_every_s: float | None = None,
        overrides: dict[str, str] | None = None,
    ) -> None:
        """``scrape_every_s``: Gregor serves /metrics, scraped that often while it runs;
        ``overrides``: more of Gregor's configuration."""
        self.kind = kind
        self.overrides = dict(overrides or {}) if kind is GREGOR else {}
        self.workdir = workdir
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self._proc: subprocess.Popen[bytes] | None = None
        self._admin: AdminClient | None = None
        self._scraper: Scraper | None = None
        self.scrape_report = ""  # how the scrapes went, once stopped
        if scrape_every_s is not None and kind is GREGOR:
            self._scraper = Scraper(free_port(), scrape_every_s)
            self.overrides["metrics.prometheus.port"] = str(self._scraper.port)

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint(self.bootstrap, self.alive)

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def returncode(self) -> int | None:
        """Exit status once the process ended (negative: killed by that signal)."""
        return None if self._proc is None else self._proc.poll()

    def __enter__(self) -> Broker:
        data_dir = self.workdir / "data"
        data_dir.mkdir(parents=True)
        command = self.kind.command(self.port, data_dir)
        for key, value in self.overrides.items():
            command += ["--override", f"{key}={value}"]
        try:
            with open(self.workdir / "broker.log", "wb") as log:
                self._proc = subprocess.Popen(
                    _PDEATHSIG + command,
                    # This checkout's packages first: a virtualenv shared by several
                    # worktrees has its editable install pointing at one of them.
                    env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *_pythonpath()])},
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=self.workdir,
                    # Own process group: Ctrl-C reaches us only, and we stop the whole group.
                    start_new_session=True,
                )
            self._wait_ready()
            if self._scraper is not None:
                self._scraper.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _check_alive(self) -> None:
        assert self._proc is not None
        if self._proc.poll() is not None:
            raise BrokerError(
                f"{self.kind.label} exited with {self._proc.returncode}:\n{self.log_tail()}"
            )

    def _wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)  # nothing to wait on but the listening socket appearing
        else:
            raise BrokerError(f"{self.kind.label} did not listen within {timeout}s")
        self._admin = AdminClient({"bootstrap.servers": self.bootstrap, **QUIET})
        try:
            self._admin.list_topics(timeout=max(1.0, deadline - time.monotonic()))
        except KafkaException as e:
            self._check_alive()
            raise BrokerError(f"{self.kind.label} does not answer Metadata: {e}") from e

    def create_topic(self, name: str, partitions: int) -> None:
        """Creates the topic and waits until every partition has a leader in Metadata."""
        assert self._admin is not None
        futures = self._admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1)],
            operation_timeout=30,
        )
        try:
            futures[name].result(timeout=60)
        except KafkaException as e:
            self._check_alive()
            raise BrokerError(f"{self.kind.label} CreateTopics {name}: {e}") from e
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            topic = self._admin.list_topics(name, timeout=10).topics.get(name)
            if (
                topic is not None
                and topic.error is None
                and len(topic.partitions) == partitions
                and all(p.leader >= 0 for p in topic.partitions.values())
            ):
                return
            self._check_alive()
            time.sleep(0.1)  # metadata propagation has no notification to await
        raise BrokerError(f"{self.kind.label}: topic {name} has no leader after 30 s")

    def stop(self) -> None:
        if self._scraper is not None and self._scraper.started:
            self.scrape_report = self._scraper.stop()
        self._admin = None  # librdkafka handle goes with the last reference
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(grace)
                    break
                except subprocess.TimeoutExpired:
                    continue
        shutil.rmtree(self.workdir / "data", ignore_errors=True)

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = (self.workdir / "broker.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])
