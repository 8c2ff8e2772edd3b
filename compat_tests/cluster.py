"""A cluster (``gregor.server.harness.cluster``) behind the single broker's interface, for
the client compatibility tests' "cluster" mode."""

from __future__ import annotations

from pathlib import Path
from types import TracebackType

from gregor.server.harness.cluster import Cluster


class ClusterBroker:
    """A cluster behind BrokerProcess's interface, so the client compatibility tests run
    against it as against one broker: clients bootstrap from broker 1 alone, topics get a
    replica on every broker, and stop, kill and start act on every broker, as the one
    broker's would."""

    kind = "gregor-cluster"

    def __init__(self, tmp_dir: Path, brokers: int, overrides: dict[str, str] | None) -> None:
        self.cluster = Cluster(tmp_dir, brokers, overrides)
        self.first = self.cluster.brokers[1]
        self.tmp_dir = Path(tmp_dir)
        self.replication_factor = brokers

    @property
    def bootstrap(self) -> str:
        return self.first.bootstrap

    @property
    def port(self) -> int:
        return self.first.port

    def wait_for_topic(self, topic: str, partitions: int) -> None:
        """Every broker knows the topic (a client's next request may go to any of them)."""
        self.cluster.wait_for_topic(topic, partitions)

    @property
    def data_dirs(self) -> dict[int, Path]:
        return {i: b.data_dir for i, b in self.cluster.brokers.items()}

    @property
    def log_path(self) -> Path:
        return self.first.log_path

    @property
    def running(self) -> bool:
        return all(b.running for b in self.cluster.brokers.values())

    def start(self) -> None:
        if not self.cluster.zookeeper.running:
            self.cluster.start()
        else:
            self.cluster.restore()
        self.cluster.wait_for_brokers(self.cluster.brokers)

    def stop(self) -> None:
        for broker_id in self.cluster.brokers:
            self.cluster.stop(broker_id)

    def kill(self) -> None:
        for broker_id in self.cluster.brokers:
            self.cluster.kill(broker_id)

    def restart(self) -> None:
        self.stop()
        self.start()

    def log_tail(self, lines: int = 60) -> str:
        return self.cluster.log_tails(lines)

    def __enter__(self) -> ClusterBroker:
        try:
            self.start()
        except BaseException:
            self.cluster.stop_all()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.cluster.stop_all()
