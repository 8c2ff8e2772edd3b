"""Fixtures for the client compatibility matrix: every test module runs twice, against one
real broker process ("single") and against a 3-broker cluster on a real ZooKeeper
("cluster"), whose clients bootstrap from one of its brokers; the mode is in each test's id
(``-k single``, ``-k cluster`` select one).

A module may set ``BROKER_OVERRIDES: dict[str, str]`` to pass server.properties overrides
to its broker(s). A test that means one broker's process or files only is parametrised
``@pytest.mark.parametrize("broker", ["single"], indirect=True)``, with the reason.

Each test marked ``compat(client, feature)`` (``compat_tests/matrix.py``) has its outcome
recorded in ``compat_tests/results.json`` when the session ends (``GREGOR_COMPAT_RESULTS``
names another file; empty records nothing), the source of the README's table
(``scripts/compat_table.py``). Runs against a peer broker record nothing.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from compat_tests.broker import BrokerProcess, broker_kind
from compat_tests.cluster import ClusterBroker
from compat_tests.matrix import MARKER, RESULTS_PATH, Recorder
from compat_tests.records import CLUSTER_CODECS

CLUSTER_BROKERS = 3
# A peer broker run to debug the drivers (GREGOR_COMPAT_BROKER) runs as one node only.
MODES = ["single", "cluster"] if broker_kind() == "gregor" else ["single"]


@pytest.fixture(scope="module", params=MODES)
def broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    overrides = getattr(request.module, "BROKER_OVERRIDES", None)
    tmp_dir = tmp_path_factory.mktemp(request.param)
    if request.param == "cluster":
        # Typed as the one broker whose interface it offers.
        with ClusterBroker(tmp_dir, CLUSTER_BROKERS, overrides) as cluster:
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
    target = os.environ.get("GREGOR_COMPAT_RESULTS", str(RESULTS_PATH))
    if target and broker_kind() == "gregor" and not session.config.option.collectonly:
        _RECORDER.merge_into(Path(target))
