"""Broker processes shared by the test modules of one pytest session (one per xdist
worker): one broker, cluster or compatibility-mode cluster per set of overrides, started
when a module first asks for it and kept for the next module asking for the same. The
root ``conftest.py`` offers it as the ``process_pool`` fixture and restores, after each
test, whatever a test stopped, killed or paused.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from compat_tests.broker import BrokerProcess
from compat_tests.cluster import ClusterBroker
from gregor.server.harness.cluster import Cluster

# Processes kept idle per worker beyond the ones a module uses: each broker is a Python
# process with timers, each cluster a ZooKeeper JVM and three brokers.
MAX_BROKERS = 4
MAX_CLUSTERS = 2

Key = tuple[str, int, frozenset[tuple[str, str]]]


class ProcessPool:
    """Brokers and clusters by overrides, shared by the test modules of one session."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self._tmp = tmp_path_factory
        self._brokers: OrderedDict[Key, BrokerProcess] = OrderedDict()
        self._clusters: OrderedDict[Key, Cluster | ClusterBroker] = OrderedDict()

    def broker(self, overrides: dict[str, str] | None = None) -> BrokerProcess:
        """A running broker with these server.properties overrides."""
        key = ("broker", 1, frozenset((overrides or {}).items()))
        return self._get(
            self._brokers, MAX_BROKERS, key, lambda d: BrokerProcess(d, overrides).__enter__()
        )

    def cluster(self, overrides: dict[str, str] | None = None, brokers: int = 3) -> Cluster:
        """A running ZooKeeper and ``brokers`` brokers that all see each other."""

        def start(directory: Path) -> Cluster:
            cluster = Cluster(directory, brokers, overrides).__enter__()
            cluster.wait_for_brokers(cluster.brokers)
            return cluster

        key = ("cluster", brokers, frozenset((overrides or {}).items()))
        return self._get(self._clusters, MAX_CLUSTERS, key, start)

    def cluster_broker(self, overrides: dict[str, str] | None, brokers: int) -> ClusterBroker:
        """A cluster behind one broker's interface (the compatibility tests' cluster mode)."""
        key = ("cluster-broker", brokers, frozenset((overrides or {}).items()))
        return self._get(
            self._clusters,
            MAX_CLUSTERS,
            key,
            lambda d: ClusterBroker(d, brokers, overrides).__enter__(),
        )

    def _get(
        self,
        pool: OrderedDict[Key, Any],
        limit: int,
        key: Key,
        make: Callable[[Path], Any],
    ) -> Any:
        """The process under ``key``, or one ``make`` starts in a new directory, closing
        the least recently asked for beyond ``limit``."""
        if key in pool:
            pool.move_to_end(key)
            return pool[key]
        while len(pool) >= limit:
            _, oldest = pool.popitem(last=False)
            _close(oldest)
        pool[key] = make(self._tmp.mktemp(key[0]))
        return pool[key]

    def restore(self) -> None:
        """Every pooled process running again, each cluster's brokers seeing each other
        (as after a ZooKeeper pause); a cluster that cannot be restored is dropped, and the
        error raised."""
        for broker in self._brokers.values():
            if not broker.running:
                broker.start()
        for key, cluster in list(self._clusters.items()):
            inner = cluster.cluster if isinstance(cluster, ClusterBroker) else cluster
            try:
                if not inner.zookeeper.running:
                    raise RuntimeError(f"the ZooKeeper of a pooled {key[0]} was stopped")
                inner.zookeeper.resume()
                inner.restore()
            except BaseException:
                del self._clusters[key]
                _close(cluster)
                raise

    def close(self) -> None:
        for pool in (self._brokers, self._clusters):
            while pool:
                _close(pool.popitem()[1])


def _close(process: BrokerProcess | Cluster | ClusterBroker) -> None:
    process.__exit__(None, None, None)
