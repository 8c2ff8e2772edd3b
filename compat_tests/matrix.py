"""The client compatibility matrix: which client and feature each test of ``compat_tests/``
checks, what a run of them found, and the README table made from that.

A test says what it checks with the ``compat`` marker (``@compat("java", "groups")``, or
``pytestmark`` for a whole module; a test may carry several). ``conftest.py`` records each
marked test's outcome with the client's installed version in ``results.json`` as it runs;
``scripts/compat_table.py`` writes the README's table from that file, between the
``<!-- compat-table:start -->`` and ``<!-- compat-table:end -->`` markers, and
``tests/test_compat_table.py`` fails when the two disagree. Tests without the marker (the
broker's own crash tests over raw frames) are not in the matrix.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import re
import subprocess
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS_PATH = REPO_ROOT / "compat_tests" / "results.json"
README_PATH = REPO_ROOT / "README.md"
TABLE_START = "<!-- compat-table:start -->"
TABLE_END = "<!-- compat-table:end -->"
MARKER = "compat"
PASSED, FAILED, SKIPPED, NOT_RUN = "passed", "failed", "skipped", "not run"

compat = getattr(pytest.mark, MARKER)


def _java_version() -> str:
    jars = sorted((REPO_ROOT / ".cache" / "jars").glob("kafka-clients-*.jar"))
    if not jars:
        return "unknown"
    return jars[-1].name.removeprefix("kafka-clients-").removesuffix(".jar")


def _package_version(package: str) -> Callable[[], str]:
    def version() -> str:
        try:
            return importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            return "unknown"

    return version


def _confluent_version() -> str:
    import confluent_kafka

    # version() is the package's version string, libversion() librdkafka's (text, number).
    return f"{confluent_kafka.version()} (librdkafka {confluent_kafka.libversion()[0]})"


def _kcat_version() -> str:
    try:
        text = subprocess.run(["kcat", "-V"], capture_output=True, text=True).stdout
    except OSError:
        return "unknown"
    found = re.search(r"Version (\S+).*librdkafka (\S+)", text)
    return f"{found[1]} (librdkafka {found[2]})" if found else "unknown"


@dataclass(frozen=True)
class Client:
    name: str
    version: Callable[[], str]


CLIENTS = {
    "java": Client("Java kafka-clients", _java_version),
    "confluent": Client("confluent-kafka (librdkafka)", _confluent_version),
    "kcat": Client("kcat (Debian)", _kcat_version),
    "kafka-python": Client("kafka-python", _package_version("kafka-python")),
    "aiokafka": Client("aiokafka", _package_version("aiokafka")),
}
FEATURES = {
    "produce-consume": "produce/consume, all codecs",
    "groups": "consumer groups",
    "consumer-protocol": "consumer group protocol (KIP-848)",
    "share-groups": "share groups (KIP-932)",
    "transactions": "transactions",
    "admin": "admin APIs",
    "quotas": "quotas",
    "security": "security (TLS, SASL, ACLs)",
    "connect": "Kafka Connect",
    "spark": "Spark source/sink",
    "pinned": "pinned protocol versions",
}


def marks_of(item: pytest.Item) -> list[tuple[str, str]]:
    """The (client, feature) pairs a test checks; unknown names are a usage error."""
    pairs = []
    for mark in item.iter_markers(MARKER):
        client, feature = mark.args
        if client not in CLIENTS or feature not in FEATURES:
            raise pytest.UsageError(
                f"{item.nodeid}: compat({client!r}, {feature!r}) names an unknown client or "
                f"feature (known: {sorted(CLIENTS)}, {sorted(FEATURES)})"
            )
        pairs.append((client, feature))
    return pairs


@cache
def client_version(client: str) -> str:
    return CLIENTS[client].version()


def _commit() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True
    )
    return done.stdout.strip() or "unknown"


_WORSE = {NOT_RUN: 0, PASSED: 1, SKIPPED: 2, FAILED: 3}


class Recorder:
    """The outcomes of one pytest session's marked tests, merged into the results file
    when it ends: a test run now replaces its earlier result, a test collected but not run
    (deselected) keeps its earlier one, and a test of a module collected now that no longer
    exists is dropped."""

    def __init__(self) -> None:
        self.checks: dict[str, list[tuple[str, str]]] = {}
        self.modules: set[str] = set()
        self.outcomes: dict[str, str] = {}

    def collected(self, item: pytest.Item) -> None:
        self.modules.add(item.nodeid.split("::")[0])
        pairs = marks_of(item)
        if pairs:
            self.checks[item.nodeid] = pairs

    def dropped(self, item: pytest.Item) -> None:
        """A test the suite never runs (not a deselection of the moment): as if it did not
        exist, so that no earlier result of it stands."""
        self.checks.pop(item.nodeid, None)

    def collection(self) -> dict[str, Any]:
        """What was collected, for ``absorb`` in another process (xdist's controller,
        which collects nothing and gets every worker's reports)."""
        return {"checks": self.checks, "modules": sorted(self.modules)}

    def absorb(self, collection: dict[str, Any]) -> None:
        for nodeid, pairs in collection["checks"].items():
            self.checks[nodeid] = [(client, feature) for client, feature in pairs]
        self.modules.update(collection["modules"])

    def report(self, report: pytest.TestReport) -> None:
        """Setup, call and teardown reports: a test's outcome is its worst phase's. Kept
        for every test: under xdist the collection arrives after the reports."""
        outcome = FAILED if report.failed else SKIPPED if report.skipped else PASSED
        previous = self.outcomes.get(report.nodeid, NOT_RUN)
        self.outcomes[report.nodeid] = max(previous, outcome, key=_WORSE.__getitem__)

    def merge_into(self, path: Path) -> None:
        if not self.checks:
            return
        results = load_results(path)
        tests = {
            nodeid: entry
            for nodeid, entry in results["tests"].items()
            if nodeid.split("::")[0] not in self.modules or nodeid in self.checks
        }
        today, commit = datetime.date.today().isoformat(), _commit()
        for nodeid, pairs in self.checks.items():
            outcome = self.outcomes.get(nodeid)
            if outcome is None and nodeid in tests:
                continue  # not run now: its last result stands
            tests[nodeid] = {
                "checks": [
                    {"client": c, "feature": f, "version": client_version(c)} for c, f in pairs
                ],
                "outcome": outcome or NOT_RUN,
                "date": today,
                "commit": commit,
            }
        write_results(path, tests)


def write_results(path: Path, tests: dict[str, Any]) -> None:
    """One line per test, in test id order, so that a rerun's changes read as a diff."""
    lines = [
        f"  {json.dumps(nodeid)}: {json.dumps(entry)}" for nodeid, entry in sorted(tests.items())
    ]
    path.write_text('{"tests": {\n' + ",\n".join(lines) + "\n}}\n")


def load_results(path: Path = RESULTS_PATH) -> dict[str, Any]:
    if not path.exists():
        return {"tests": {}}
    return json.loads(path.read_text())


def _cell(outcomes: Counter[str]) -> str:
    """ "passes (run/run)", "**fails** (passed/run)", with those not run, or "—" when no
    test checks the pair."""
    total = sum(outcomes.values())
    if not total:
        return "—"
    not_run, passed = outcomes[NOT_RUN], outcomes[PASSED]
    run = total - not_run
    if not run:
        return f"not run ({total})"
    text = f"passes ({passed}/{run})" if passed == run else f"**fails** ({passed}/{run})"
    return text + (f", {not_run} not run" if not_run else "")


def render_table(results: dict[str, Any]) -> str:
    """The README's table (client × feature: the tests that passed of those run) and
    what it was made from."""
    cells: dict[tuple[str, str], Counter[str]] = {}
    versions: dict[str, set[str]] = {}
    failing: list[str] = []
    dates: set[str] = set()
    for nodeid, entry in results["tests"].items():
        ran = entry["outcome"] != NOT_RUN
        if ran:
            dates.add(entry["date"])
        for check in entry["checks"]:
            client, feature = check["client"], check["feature"]
            cells.setdefault((client, feature), Counter())[entry["outcome"]] += 1
            if ran:
                versions.setdefault(client, set()).add(check["version"])
        if entry["outcome"] in (FAILED, SKIPPED):
            failing.append(f"`{nodeid}` ({entry['outcome']} on {entry['date']})")
    lines = [
        "| client | version | " + " | ".join(FEATURES.values()) + " |",
        "|---" * (len(FEATURES) + 2) + "|",
    ]
    for key, client in CLIENTS.items():
        row = [client.name, ", ".join(sorted(versions.get(key, {"—"})))]
        row += [_cell(cells.get((key, feature), Counter())) for feature in FEATURES]
        lines.append("| " + " | ".join(row) + " |")
    span = f"{min(dates)} to {max(dates)}" if len(dates) > 1 else next(iter(dates), "never")
    lines += [
        "",
        f"Passed/run test cases per cell, both modes counted; from `compat_tests/results.json` "
        f"(runs of {span}), written by `scripts/compat_table.py`.",
    ]
    if failing:
        lines += ["", "Not passing:", "", *(f"- {f}" for f in sorted(failing))]
    return "\n".join(lines)


def replace_table(readme: str, table: str) -> str:
    """The README with the text between the markers replaced by ``table``."""
    start, end = readme.find(TABLE_START), readme.find(TABLE_END)
    if start < 0 or end < start:
        raise ValueError(f"README has no {TABLE_START} ... {TABLE_END} block")
    return readme[: start + len(TABLE_START)] + "\n" + table + "\n" + readme[end:]
