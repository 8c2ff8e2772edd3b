"""Fixtures for the client compatibility matrix: one real broker process per test module.

A module may set ``BROKER_OVERRIDES: dict[str, str]`` to pass server.properties overrides
to its broker. With ``GREGOR_COMPAT_CLUSTER=3`` the broker is a 3-broker cluster on a real
ZooKeeper instead, which the clients bootstrap from through one of its brokers.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from compat_tests.broker import BrokerProcess
from compat_tests.cluster import ClusterBroker


@pytest.fixture(scope="module")
def broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    overrides = getattr(request.module, "BROKER_OVERRIDES", None)
    tmp_dir: Path = tmp_path_factory.mktemp("broker")
    cluster_size = int(os.environ.get("GREGOR_COMPAT_CLUSTER", "0"))
    if cluster_size:
        # The same tests against a cluster (bootstrap from one broker); typed as the one
        # broker whose interface it offers.
        with ClusterBroker(tmp_dir, cluster_size, overrides) as cluster:
            yield cluster  # type: ignore[misc]
        return
    with BrokerProcess(tmp_dir, overrides) as proc:
        yield proc


@pytest.fixture
def new_topic() -> Callable[[str], str]:
    """Return a factory of fresh, legal, never-reused topic names."""

    def make(prefix: str = "t") -> str:
        return f"{prefix}-{uuid.uuid4().hex[:12]}"

    return make


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    funcargs = getattr(item, "funcargs", {})
    for value in funcargs.values():
        if isinstance(value, BrokerProcess | ClusterBroker):
            report.sections.append((f"broker log tail ({value.log_path})", value.log_tail()))


def pytest_configure(config: pytest.Config) -> None:
    # kafka-python 3 loads its schemas through a deprecated importlib API on every import.
    config.addinivalue_line(
        "filterwarnings", "ignore:(read_text|open_text) is deprecated:DeprecationWarning"
    )
