"""``import gregor``: the small public API (gregor/__init__.py), the in-process broker,
the child processes' PYTHONPATH, and the lint rule that keeps bare folder names out."""

from __future__ import annotations

import asyncio
import importlib.metadata
import logging
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import gregor
from gregor._paths import import_root, set_child_pythonpath
from gregor.server.cli.client.connection import Client, ClientError

REPO_ROOT = Path(__file__).resolve().parent.parent


def test_version_and_exports() -> None:
    assert gregor.__version__ == importlib.metadata.version("gregor")
    from gregor.server.harness.broker_process import BrokerProcess, BrokerProcessError

    assert (gregor.BrokerProcess, gregor.BrokerProcessError) == (
        BrokerProcess,
        BrokerProcessError,
    )
    assert {"Broker", "BrokerProcess", "BrokerProcessError", "__version__"} <= set(dir(gregor))
    with pytest.raises(AttributeError):
        gregor.no_such_name  # noqa: B018


def test_the_cli_prints_the_version() -> None:
    gregor_cli = Path(shutil.which("gregor") or Path(os.sys.executable).with_name("gregor"))
    out = subprocess.run([str(gregor_cli), "--version"], capture_output=True, text=True)
    assert (out.returncode, out.stdout) == (0, f"gregor {gregor.__version__}\n")


def _broker_ids(bootstrap: str) -> list[int]:
    with Client(bootstrap, "public-api", timeout_s=5.0) as client:
        return [b.node_id for b in client.metadata([]).brokers]


def test_in_process_broker_from_threads(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="gregor"):
        with gregor.Broker(tmp_path, {"broker.id": "7"}) as broker:
            assert broker.bootstrap.startswith("127.0.0.1:") and broker.port > 0
            assert _broker_ids(broker.bootstrap) == [7]
            bootstrap = broker.bootstrap
        assert not broker.running
    with pytest.raises((OSError, ClientError)):  # the listener is closed
        _broker_ids(bootstrap)
    names = {r.name for r in caplog.records}
    assert "gregor.server.broker" in names
    assert all(n.startswith("gregor.") for n in names), names
    # The data stays: a second broker on the directory recovers it.
    assert (tmp_path / "data" / "meta.properties").exists()


def test_in_process_broker_in_an_event_loop(tmp_path: Path) -> None:
    async def main() -> list[int]:
        async with gregor.Broker(tmp_path) as broker:
            return await asyncio.to_thread(_broker_ids, broker.bootstrap)

    assert asyncio.run(main()) == [0]


def test_a_bad_configuration_fails_start(tmp_path: Path) -> None:
    from gregor.server.config import ConfigError

    with pytest.raises(ConfigError):
        gregor.Broker(tmp_path, {"num.partitions": "many"}).start_in_thread()


def test_children_import_this_gregor(monkeypatch: pytest.MonkeyPatch) -> None:
    assert import_root() == REPO_ROOT  # tests run from a checkout (editable install)
    env = {"PYTHONPATH": "/elsewhere"}
    set_child_pythonpath(env)
    assert env["PYTHONPATH"] == os.pathsep.join([str(REPO_ROOT), "/elsewhere"])
    # From an installed wheel the root is a site directory: left where it is.
    monkeypatch.setattr("gregor._paths.import_root", lambda: Path(_a_site_dir()))
    env = {}
    set_child_pythonpath(env)
    assert env == {}


def _a_site_dir() -> str:
    import site

    return site.getsitepackages()[0]


def test_a_checkout_on_pythonpath_imports_its_own_folders(tmp_path: Path) -> None:
    """A launcher's PYTHONPATH=<checkout> (or a virtualenv whose editable install points at
    another worktree): gregor.<folder> comes from the checkout that gregor came from."""
    code = "import gregor.wire.records as r, gregor; print(r.__file__); print(gregor.__path__)"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    out = subprocess.run(
        [os.sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == str(REPO_ROOT / "wire" / "records.py")


def test_lint_bans_the_bare_folder_names(tmp_path: Path) -> None:
    ruff = shutil.which("ruff") or str(Path(os.sys.executable).with_name("ruff"))
    probe = tmp_path / "probe.py"
    lines = [
        "import " + "log",
        "import " + "server.config as c",
        "from " + "wire.records import Batch",
        "import gregor.log",
        "from gregor.server.config import BrokerConfig",
        "from gregor import apis",
        "import logging",
        "",
        "print(log, c, Batch, gregor.log, BrokerConfig, apis, logging)",
    ]
    probe.write_text("\n".join(lines) + "\n")
    out = subprocess.run(
        [ruff, "check", "--config", str(REPO_ROOT / "pyproject.toml"), "--select", "TID251"]
        + ["--output-format", "concise", "--no-cache", str(probe)],
        capture_output=True,
        text=True,
    )
    flagged = sorted(
        int(line.split(":")[1]) for line in out.stdout.splitlines() if "TID251" in line
    )
    assert flagged == [1, 2, 3], out.stdout
    assert "import gregor.log" in out.stdout
