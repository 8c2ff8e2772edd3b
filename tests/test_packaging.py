"""Gregor as users get it: a real wheel, installed (not editable) into a fresh virtualenv
next to a user project that has packages of its own named ``server`` and ``log``.

The wheel must add exactly one import package (``gregor``) and its dist-info to
site-packages, so the project's own ``server.app`` and ``log.x`` keep importing, while the
pytest plugin (entry point ``pytest11``, ``gregor``) serves the README's fixture example.

The wheel is built by ``pip wheel`` as a user would (an isolated build: pip fetches
setuptools into a throwaway environment). The wheel is installed with ``--no-deps``; its
dependencies (and pytest, confluent-kafka) come from this test environment's
site-packages through a ``.pth`` file pointing at a copy of that directory's listing
without Gregor's own entries, which takes no time and no network (installing them with pip
took 12-13 s).
"""

from __future__ import annotations

import os
import re
import shutil
import site
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("wire", "apis", "log", "replica", "controller", "coordinator", "server")

USER_APP = {
    "pyproject.toml": """
        [tool.pytest.ini_options]
        pythonpath = ["."]
        """,
    "server/__init__.py": "",
    "server/app.py": """
        def handle(request: str) -> str:
            return f"app handled {request}"
        """,
    "log/__init__.py": "",
    "log/x.py": """
        LEVEL = "user's own log package"
        """,
    "tests/test_own_packages.py": """
        import gregor
        from log.x import LEVEL
        from server.app import handle


        def test_own_server_package():
            assert handle("r") == "app handled r"


        def test_own_log_package():
            assert LEVEL == "user's own log package"


        def test_gregor_is_the_installed_wheel():
            assert "site-packages" in gregor.__file__
            assert not gregor.__file__.startswith(REPO)
        """,
    # The README's example ("A real broker in your own tests"), completed.
    "tests/test_kafka.py": """
        import re

        from confluent_kafka import Consumer, Producer


        def test_round_trip(gregor_bootstrap, gregor_topic):
            producer = Producer({"bootstrap.servers": gregor_bootstrap})
            producer.produce(gregor_topic, b"hello")
            assert producer.flush(10) == 0
            consumer = Consumer(
                {"bootstrap.servers": gregor_bootstrap, "group.id": "g",
                 "auto.offset.reset": "earliest"}
            )
            consumer.subscribe([gregor_topic])
            msg = consumer.poll(10)
            assert msg.value() == b"hello"
            consumer.close()


        def test_acknowledged_writes_survive_a_crash(gregor_broker, gregor_topic):
            producer = Producer({"bootstrap.servers": gregor_broker.bootstrap, "acks": "all"})
            for i in range(10):
                producer.produce(gregor_topic, str(i).encode())
            assert producer.flush(10) == 0
            gregor_broker.kill()  # kill -9 and restart on the same port
            consumer = Consumer(
                {"bootstrap.servers": gregor_broker.bootstrap, "group.id": "crash",
                 "auto.offset.reset": "earliest"}
            )
            consumer.subscribe([gregor_topic])
            values = []
            while len(values) < 10:
                msg = consumer.poll(10)
                assert msg is not None and msg.error() is None
                values.append(msg.value())
            consumer.close()
            assert values == [str(i).encode() for i in range(10)]


        def test_broker_loggers_are_gregor(gregor_broker):
            names = set(re.findall(r"\\(([\\w.]+)\\)$", gregor_broker.log_path.read_text(), re.M))
            assert "gregor.server.broker" in names, names
            bare = ("wire", "apis", "log", "replica", "controller", "coordinator", "server")
            assert not [n for n in names if n.split(".")[0] in bare], names
        """,
}


def _run(args: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, **kwargs)  # type: ignore[call-overload]


def _source_tree(dest: Path) -> None:
    """The working tree's files that git tracks or would (no build/, .venv/, .so files)."""
    listed = _run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO_ROOT
    )
    if listed.returncode == 0:
        for name in listed.stdout.split("\0"):
            if name and (REPO_ROOT / name).is_file():
                (dest / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(REPO_ROOT / name, dest / name)
        return
    ignore = shutil.ignore_patterns(
        ".git", ".venv", ".cache", "build", "*.egg-info", "__pycache__", "*.so", "data"
    )
    shutil.copytree(REPO_ROOT, dest, ignore=ignore, dirs_exist_ok=True)


def _deps_dir(dest: Path) -> Path:
    """This environment's site-packages without Gregor's own entries (its editable
    install), as symbolic links."""
    dest.mkdir()
    source = Path(next(p for p in site.getsitepackages() if Path(p).is_dir()))
    for entry in source.iterdir():
        name = entry.name.lower()
        if name.startswith(("gregor", "__editable__")) or name.endswith(".pth"):
            continue
        (dest / entry.name).symlink_to(entry)
    return dest


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("wheel")
    source = work / "src"
    _source_tree(source)
    started = time.monotonic()
    built = _run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(work), str(source)]
    )
    assert built.returncode == 0, built.stdout + built.stderr
    print(f"wheel built in {time.monotonic() - started:.1f}s")
    (path,) = work.glob("gregor-*.whl")
    return path


def test_the_wheel_holds_one_package_and_the_extensions(wheel: Path) -> None:
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"gregor", f"{_dist_info(wheel)}"}
    for folder in FOLDERS:
        assert f"gregor/{folder}/__init__.py" in names
    for ext in ("wire/_recordwalk", "server/_histograms", "log/_offsetmap"):
        assert any(re.fullmatch(rf"gregor/{ext}\..*\.so", n) for n in names), ext
    entry_points = zipfile.ZipFile(wheel).read(f"{_dist_info(wheel)}/entry_points.txt").decode()
    assert "gregor = gregor.server.cli.main:main" in entry_points
    assert "gregor = gregor.server.harness.pytest_plugin" in entry_points


def _dist_info(wheel: Path) -> str:
    name, version = wheel.name.split("-")[:2]
    return f"{name}-{version}.dist-info"


def test_installed_wheel_beside_a_project_with_its_own_server_and_log(
    wheel: Path, tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    site_packages = Path(
        _run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]
        ).stdout.strip()
    )
    before = set(os.listdir(site_packages))
    started = time.monotonic()
    installed = _run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps"]
        + [str(wheel)]
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    print(f"wheel installed in {time.monotonic() - started:.1f}s")
    added = set(os.listdir(site_packages)) - before
    assert added == {"gregor", _dist_info(wheel)}

    (site_packages / "_test_deps.pth").write_text(f"{_deps_dir(tmp_path / 'deps')}\n")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTEST_ADDOPTS", "PYTEST_PLUGINS", "VIRTUAL_ENV")
    }
    project = tmp_path / "project"
    for name, text in USER_APP.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        text = textwrap.dedent(text).lstrip().replace("REPO", repr(str(REPO_ROOT)))
        (project / name).write_text(text)

    version = _run([str(venv / "bin" / "gregor"), "--version"], env=env, cwd=project)
    assert version.returncode == 0 and version.stdout == "gregor 0.1.0\n", version
    imported = _run(
        [str(python), "-c", "import gregor; print(gregor.__version__)"], env=env, cwd=tmp_path
    )
    assert imported.stdout == "0.1.0\n", imported.stderr
    for bare in FOLDERS:  # nothing generic was installed (outside the project's folder)
        probe = _run([str(python), "-c", f"import {bare}"], env=env, cwd=tmp_path)
        assert "ModuleNotFoundError" in probe.stderr, (bare, probe.stderr)

    started = time.monotonic()
    tests = _run(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA"],
        env=env,
        cwd=project,
        timeout=300,
    )
    print(f"the project's suite ran in {time.monotonic() - started:.1f}s")
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "6 passed" in tests.stdout, tests.stdout
