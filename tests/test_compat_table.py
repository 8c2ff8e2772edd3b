"""The README's compatibility table is the one ``scripts/compat_table.py`` makes from the
committed ``compat_tests/results.json``; a real run of a compat test (kcat against a real
broker, in a pytest subprocess) records its outcome there as the matrix's rules say. About
6 s, nearly all of it the subprocess."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from compat_tests.matrix import (
    FAILED,
    NOT_RUN,
    PASSED,
    README_PATH,
    TABLE_END,
    TABLE_START,
    load_results,
    render_table,
    replace_table,
    write_results,
)
from compat_tests.records import CLUSTER_CODECS, CODECS

REPO_ROOT = Path(__file__).resolve().parent.parent
KCAT = "compat_tests/test_kcat.py::test_round_trip"


def test_readme_table_is_generated_from_the_results_file() -> None:
    readme = README_PATH.read_text()
    assert readme.count(TABLE_START) == readme.count(TABLE_END) == 1
    assert replace_table(readme, render_table(load_results())) == readme, (
        "README's compatibility table is stale: run scripts/compat_table.py"
    )
    check = subprocess.run(
        [sys.executable, "scripts/compat_table.py", "--check"], cwd=REPO_ROOT, capture_output=True
    )
    assert check.returncode == 0, check.stdout


def entry(outcome: str, client: str = "kcat", feature: str = "produce-consume") -> dict:
    return {
        "checks": [{"client": client, "feature": feature, "version": "0.9"}],
        "outcome": outcome,
        "date": "2026-01-01",
        "commit": "abc1234",
    }


def test_a_run_records_its_outcomes(tmp_path: Path) -> None:
    results = tmp_path / "results.json"
    write_results(
        results,
        {
            f"{KCAT}[cluster-none]": entry(PASSED),  # not selected below: kept
            "compat_tests/test_kcat.py::test_gone": entry(PASSED),  # no such test: dropped
            "compat_tests/test_java.py::test_round_trip[single-none]": entry(FAILED, "java"),
        },
    )
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-k",
            "single and none",
            "compat_tests/test_kcat.py",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env={
            **{k: v for k, v in os.environ.items() if k != "GREGOR_COMPAT_BROKER"},
            "GREGOR_COMPAT_RESULTS": str(results),
        },
    )
    assert run.returncode == 0, run.stdout[-2000:]
    tests = load_results(results)["tests"]
    # Every kcat round trip the suite runs (the cluster's in two codecs only), kept or new.
    assert set(tests) == {f"{KCAT}[single-{codec}]" for codec in CODECS} | {
        f"{KCAT}[cluster-{codec}]" for codec in CLUSTER_CODECS
    } | {"compat_tests/test_java.py::test_round_trip[single-none]"}
    ran = tests[f"{KCAT}[single-none]"]
    assert ran["outcome"] == PASSED
    kcat_version = subprocess.run(["kcat", "-V"], capture_output=True, text=True).stdout
    found = re.search(r"Version (\S+) .*librdkafka (\S+)", kcat_version)
    assert found is not None
    assert ran["checks"] == [
        {
            "client": "kcat",
            "feature": "produce-consume",
            "version": f"{found[1]} (librdkafka {found[2]})",
        }
    ]
    assert tests[f"{KCAT}[cluster-none]"] == entry(PASSED)
    assert tests[f"{KCAT}[single-gzip]"]["outcome"] == NOT_RUN
    assert tests["compat_tests/test_java.py::test_round_trip[single-none]"] == entry(FAILED, "java")

    table = render_table(load_results(results))
    rows = {line.split(" | ")[0].strip("| "): line for line in table.splitlines()}
    kcat_cells = rows["kcat (Debian)"].strip("| ").split(" | ")
    assert kcat_cells[1] == f"0.9, {found[1]} (librdkafka {found[2]})"  # both runs' versions
    not_run = len(CODECS) + len(CLUSTER_CODECS) - 2
    assert kcat_cells[2] == f"passes (2/2), {not_run} not run"
    java_cells = rows["Java kafka-clients"].strip("| ").split(" | ")
    assert java_cells[2] == "**fails** (0/1)"
    assert set(java_cells[3:]) == {"—"}  # no other feature was run
    assert (
        "- `compat_tests/test_java.py::test_round_trip[single-none]` (failed on 2026-01-01)"
        in table
    )
