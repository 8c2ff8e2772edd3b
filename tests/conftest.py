"""Fixtures shared by the raw-protocol tests; a module's ``broker`` (or ``cluster``) comes
from ``process_pool`` (``compat_tests/process_pool.py``), shared by modules of the same
overrides."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from compat_tests.broker import BrokerProcess
from gregor.server.harness.cluster import Cluster
from tests.kafka_wire import WireClient


def pytest_configure(config: pytest.Config) -> None:
    # kafka-python 3 loads its schemas through a deprecated importlib API on every import.
    config.addinivalue_line(
        "filterwarnings", "ignore:(read_text|open_text) is deprecated:DeprecationWarning"
    )


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[WireClient]:
    """A raw-socket connection to the module's broker."""
    c = WireClient(broker.port)
    yield c
    c.close()


@pytest.fixture
def zk(cluster: Cluster) -> Iterator[KazooClient]:
    """A ZooKeeper client of the module's cluster."""
    c = KazooClient(hosts=cluster.zookeeper.connect)
    c.start(10)
    yield c
    c.stop()
    c.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    cluster = getattr(item, "funcargs", {}).get("cluster")
    if report.failed and cluster is not None and hasattr(cluster, "log_tails"):
        report.sections.append(("cluster log tails", cluster.log_tails(60)))
