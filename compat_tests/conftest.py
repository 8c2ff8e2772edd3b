"""Fixtures for the client compatibility matrix: every test module runs twice, against one
real broker process ("single") and against a 3-broker cluster on a real ZooKeeper
("cluster"), whose clients bootstrap from one of its brokers; the mode is in each test's id
(``-k single``, ``-k cluster`` select one).

A module may set ``BROKER_OVERRIDES: dict[str, str]`` to pass server.properties overrides
to its broker(s); modules of the same overrides share them (``process_pool``). A test that
means one broker's process or files only is parametrised
``@pytest.mark.parametrize("broker", ["single"], indirect=True)``, with the reason.

Each test marked ``compat(client, feature)`` (``compat_tests/matrix.py``) has its outcome
recorded when the session ends in the file ``GREGOR_COMPAT_RESULTS`` names (unset: nothing
is recorded). ``./scripts/test`` with no arguments sets it to ``compat_tests/results.json``,
the source of the README's table (``scripts/compat_table.py``), so only whole runs write
that file. Runs against a peer broker record nothing.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from compat_tests.broker import BrokerProcess, broker_kind
from compat_tests.cluster import ClusterBroker
from compat_tests.matrix import MARKER, Recorder
from compat_tests.process_pool import ProcessPool
from compat_tests.records import CLUSTER_CODECS

CLUSTER_BROKERS = 3
# A peer broker run to debug the drivers (GREGOR_COMPAT_BROKER) runs as one node only.
MODES = ["single", "cluster"] if broker_kind() == "gregor" else ["single"]


@pytest.fixture(scope="module", params=MODES)
def broker(
    request: pytest.FixtureRequest, process_pool: ProcessPool
) -> BrokerProcess | ClusterBroker:
    """The module's broker, or cluster; shared with the modules of the same overrides."""
    overrides = getattr(request.module, "BROKER_OVERRIDES", None)
    if request.param == "cluster":
        return process_pool.cluster_broker(overrides, CLUSTER_BROKERS)
    return process_pool.broker(overrides)


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
    config.addinivalue_line(
        "markers",
        f"{MARKER}(client, feature): the client compatibility matrix cell this test checks",
    )


# One per test process: the conftest is imported once.
_RECORDER = Recorder()


def pytest_itemcollected(item: pytest.Item) -> None:
    _RECORDER.collected(item)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    kept: list[pytest.Item] = []
    for item in items:
        params = getattr(item, "callspec", None)
        params = params.params if params is not None else {}
        if params.get("broker") == "cluster" and params.get("codec", "none") not in CLUSTER_CODECS:
            _RECORDER.dropped(item)
        else:
            kept.append(item)
    items[:] = kept


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _RECORDER.report(report)


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    if hasattr(config, "workeroutput"):  # an xdist worker: its controller records
        config.workeroutput[MARKER] = _RECORDER.collection()
        return
    target = os.environ.get("GREGOR_COMPAT_RESULTS", "")
    if target and broker_kind() == "gregor" and not config.option.collectonly:
        _RECORDER.merge_into(Path(target))


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """xdist's controller: what a worker collected (its reports come here one by one)."""
    collection = getattr(node, "workeroutput", {}).get(MARKER)
    if collection is not None:
        _RECORDER.absorb(collection)
