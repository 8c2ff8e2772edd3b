"""The two brokers under test as child processes: start, wait until they answer, stop.

Everything after start-up (topic creation, load, measurements) is the same code for both;
a broker only differs in the command line that launches it. Both run in the launcher the
tests use (``gregor.server.harness.broker_process``): Gregor on port 0, reading back the
port it bound, Tansu as its peer variant.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from gregor.server.harness.broker_process import (
    BrokerProcess,
    BrokerProcessError,
    PeerBroker,
    tansu,
)

from .artifacts import ensure_tansu
from .drivers import QUIET, Endpoint
from .scraper import Scraper


class BrokerError(RuntimeError):
    """The broker did not start, died, or refused an admin request."""


@dataclass(frozen=True)
class BrokerKind:
    name: str
    label: str
    storage: str
    # Another broker's command line for (port, data dir); None: Gregor's own.
    command: Callable[[int, Path], list[str]] | None


def _tansu_command(port: int, data_dir: Path) -> list[str]:
    return tansu(ensure_tansu()).command(port, data_dir)


GREGOR = BrokerKind("gregor", "Gregor", "disk (log.dirs in a fresh tmp dir)", None)
TANSU = BrokerKind("tansu", "Tansu", "memory://", _tansu_command)
KINDS = {kind.name: kind for kind in (GREGOR, TANSU)}
# As in Kafka's shipped config/server.properties: no wait for more members before the first
# rebalance of a new group (the 3 s broker default is for production).
GREGOR_OVERRIDES = {"group.initial.rebalance.delay.ms": "0"}


class Broker:
    """A running broker process; use as a context manager so it is stopped on any exit."""

    def __init__(
        self,
        kind: BrokerKind,
        workdir: Path,
        scrape_every_s: float | None = None,
        overrides: dict[str, str] | None = None,
        admin_config: dict[str, str] | None = None,
    ) -> None:
        """``scrape_every_s``: Gregor serves /metrics, scraped that often while it runs;
        ``overrides``: more of Gregor's configuration; ``admin_config``: the client
        properties (security.protocol, sasl.*) the admin client connects to the first
        listener with."""
        self.kind = kind
        self.workdir = workdir
        peer = None if kind.command is None else PeerBroker(kind.label, kind.command)
        config = {**GREGOR_OVERRIDES, **(overrides or {})}
        self._scrape_every_s = scrape_every_s if peer is None else None
        if self._scrape_every_s is not None:
            config["metrics.prometheus.port"] = "0"
        self._admin_config = admin_config or {}
        # Own session: Ctrl-C reaches this script only, which stops the broker.
        self._process = BrokerProcess(
            workdir, config, 60.0, peer=peer, own_session=True, client_config=self._admin_config
        )
        self._admin: AdminClient | None = None
        self._scraper: Scraper | None = None
        self.scrape_report = ""  # how the scrapes went, once stopped

    @property
    def port(self) -> int:
        return self._process.port

    @property
    def bootstrap(self) -> str:
        return self._process.bootstrap

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint(self.bootstrap, self.alive)

    @property
    def admin(self) -> AdminClient:
        assert self._admin is not None, "the broker is not running"
        return self._admin

    def listener_endpoint(self, listener: str) -> Endpoint:
        """Where the listener named ``listener`` (as in ``listeners``) is, from the line the
        broker logged once started."""
        found = re.findall(rf"\b{listener}://127\.0\.0\.1:(\d+)", self._process.start_output())
        if not found:
            raise BrokerError(f"{self.kind.label} has no listener {listener}")
        return Endpoint(f"127.0.0.1:{found[-1]}", self.alive)

    @property
    def metrics_port(self) -> int:
        return self._process.metrics_port

    def alive(self) -> bool:
        return self._process.running

    @property
    def returncode(self) -> int | None:
        """Exit status once the process ended (negative: killed by that signal)."""
        return self._process.returncode

    def __enter__(self) -> Broker:
        (self.workdir / "data").mkdir(parents=True)
        try:
            try:
                self._process.start()
            except BrokerProcessError as e:  # it died, or was killed for not answering
                raise BrokerError(f"{self.kind.label} exited with {self.returncode}: {e}") from e
            self._admin = AdminClient(
                {"bootstrap.servers": self.bootstrap, **self._admin_config, **QUIET}
            )
            if self._scrape_every_s is not None:
                self._scraper = Scraper(self._process.metrics_port, self._scrape_every_s)
                self._scraper.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _check_alive(self) -> None:
        if not self.alive():
            raise BrokerError(
                f"{self.kind.label} exited with {self.returncode}:\n{self.log_tail()}"
            )

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
        try:
            self._process.close()
        except BrokerProcessError:
            pass  # it ignored SIGTERM and was killed: the run's own outcome is what counts
        shutil.rmtree(self.workdir / "data", ignore_errors=True)

    def log_tail(self, lines: int = 20) -> str:
        return self._process.log_tail(lines)
