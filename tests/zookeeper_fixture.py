"""The ``zookeeper`` fixture: one real ZooKeeper server per test module.

Use it with ``pytest_plugins = ["tests.zookeeper_fixture"]`` in the test module.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gregor.server.harness.zookeeper import ZooKeeperProcess


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperProcess]:
    with ZooKeeperProcess(tmp_path_factory.mktemp("zookeeper")) as zk:
        yield zk


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    zk = getattr(item, "funcargs", {}).get("zookeeper")
    if report.failed and isinstance(zk, ZooKeeperProcess):
        report.sections.append((f"zookeeper log tail ({zk.log_path})", zk.log_tail()))
