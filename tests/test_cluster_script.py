"""``scripts/cluster start`` on a machine without Java: one line naming the Debian package
to install, a non-zero exit, and nothing started or written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def test_start_without_java_says_what_to_install(tmp_path: Path) -> None:
    no_java = tmp_path / "bin"  # a PATH with nothing on it
    no_java.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "GREGOR_JAVA"}
    env["PATH"] = str(no_java)
    work = tmp_path / "cluster"
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "cluster"), "start", "--dir", str(work)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("scripts/cluster: ZooKeeper needs java")
    assert line.endswith("apt-get install default-jre-headless")
    assert not work.exists()  # no ZooKeeper was started, no state written
