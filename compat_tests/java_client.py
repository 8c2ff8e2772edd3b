"""Runs compat_tests/java/GregorClient.java (compiled once into .cache/) on kafka-clients 4.3."""

from __future__ import annotations

import base64
import fcntl
import functools
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
import zipfile
from pathlib import Path

from compat_tests.broker import REPO_ROOT, BrokerProcess
from compat_tests.records import Rec

SOURCE = Path(__file__).resolve().parent / "java" / "GregorClient.java"
JAR_DIR = REPO_ROOT / ".cache" / "jars"
CLASS_CACHE = REPO_ROOT / ".cache" / "java"
# Fast JVM start matters more than peak speed for short-lived driver runs.
JVM_FLAGS = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xss512k"]


class JavaClientError(RuntimeError):
    pass


def jars_classpath(jar_dir: Path, required_prefix: str) -> str:
    """The jars in ``jar_dir`` as a classpath; raise if the one named like
    ``required_prefix`` is missing (scripts/setup-test-deps unpacks them)."""
    jars = sorted(jar_dir.glob("*.jar"))
    if not any(j.name.startswith(required_prefix) for j in jars):
        raise JavaClientError(
            f"{required_prefix} jar missing in {jar_dir}: run scripts/setup-test-deps"
        )
    return os.pathsep.join(str(j) for j in jars)


def compiled(source: Path, jar_cp: str) -> Path:
    """Compile ``source`` against ``jar_cp`` once per content into .cache/java/; return
    the classes directory."""
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    out = CLASS_CACHE / f"{source.stem}-{digest}"
    if not out.exists():
        CLASS_CACHE.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=CLASS_CACHE))
        done = subprocess.run(
            ["javac", "-nowarn", "-cp", jar_cp, "-d", str(staging), str(source)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            shutil.rmtree(staging)
            raise JavaClientError(f"javac failed:\n{done.stderr}")
        try:
            staging.rename(out)
        except OSError:  # another process compiled it first
            shutil.rmtree(staging)
    return out


@functools.cache
def driver_command() -> tuple[str, ...]:
    """``java`` and its arguments up to the driver's own: the driver compiled once per
    content, in a jar, with a class-data archive (AppCDS) dumped once beside it, which each
    JVM maps instead of loading and verifying the JDK's and kafka-clients' classes again:
    a short produce command's CPU falls from 1.4 s to 0.75 s."""
    jar_cp = jars_classpath(JAR_DIR, "kafka-clients-")
    classes = compiled(SOURCE, jar_cp)
    jar, archive = classes.with_suffix(".jar"), classes.with_suffix(".jsa")
    cp = f"{jar}{os.pathsep}{jar_cp}"
    # The JVM notices a jar changed since its archive was dumped: both are made under one
    # lock, by the first process (of the suite's workers) to come.
    with open(classes.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not jar.exists():
            _jar(classes, jar)
        if not archive.exists():
            _dump_archive(cp, archive)
    # Warnings (an archive refused, say) on stderr: stdout is the driver's answers.
    logging = ["-Xlog:disable", "-Xlog:all=warning:stderr"]
    shared = [f"-XX:SharedArchiveFile={archive}"] if archive.exists() else []
    return ("java", *JVM_FLAGS, *logging, *shared, "-cp", cp, "GregorClient")


def _jar(classes: Path, jar: Path) -> None:
    """A class-data archive maps classes from jars only, not from a directory."""
    staging = jar.with_suffix(".jar-tmp")
    with zipfile.ZipFile(staging, "w") as out:
        for path in sorted(classes.rglob("*.class")):
            out.write(path, path.relative_to(classes).as_posix())
    staging.rename(jar)


def _dump_archive(cp: str, archive: Path) -> None:
    """Every class of kafka-clients, loaded by the driver's ``warm`` command; without the
    archive (if the dump fails) JVMs only start slower."""
    staging = archive.with_suffix(".jsa-tmp")
    staging.unlink(missing_ok=True)
    subprocess.run(
        ["java", *JVM_FLAGS, f"-XX:ArchiveClassesAtExit={staging}", "-cp", cp]
        + ["GregorClient", "warm"],
        capture_output=True,
        timeout=120,
    )
    if staging.exists():
        staging.rename(archive)


def _args(
    command: str,
    bootstrap: str,
    topic: str,
    options: dict[str, str | list[str]] | None,
    configs: dict[str, str] | None,
    topic_configs: dict[str, str] | None,
) -> list[str]:
    args = [command, "--bootstrap", bootstrap, "--topic", topic]
    for key, value in (options or {}).items():
        for item in [value] if isinstance(value, str) else value:
            args += [f"--{key}", item]
    for key, value in (configs or {}).items():
        args += ["--config", f"{key}={value}"]
    for key, value in (topic_configs or {}).items():
        args += ["--topic-config", f"{key}={value}"]
    return args


def _command(
    command: str,
    bootstrap: str,
    topic: str,
    options: dict[str, str | list[str]] | None,
    configs: dict[str, str] | None,
    topic_configs: dict[str, str] | None,
) -> list[str]:
    """The command line of a driver process of its own (one a test kills or streams from)."""
    args = _args(command, bootstrap, topic, options, configs, topic_configs)
    return [*driver_command(), *args]


class _Driver:
    """A ``GregorClient serve`` JVM: it runs the commands sent to it one after another, so a
    session starts the JVM and loads kafka-clients once instead of once per command."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [*driver_command(), "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            encoding="utf-8",
        )

    def call(self, args: list[str], stdin: str, timeout: float) -> dict:
        """Run one command; its {"exit", "stdout", "stderr"}. Past ``timeout`` the JVM is
        killed and this raises subprocess.TimeoutExpired, as subprocess.run does; if the JVM
        dies, JavaClientError."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"args": args, "stdin": stdin}) + "\n")
        self.proc.stdin.flush()
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            self.proc.kill()

        timer = threading.Timer(timeout, expire)
        timer.start()
        try:
            answer = self.proc.stdout.readline()
        finally:
            timer.cancel()
        if not answer:
            self.proc.kill()
            self.proc.wait()
            if expired.is_set():
                raise subprocess.TimeoutExpired(args, timeout)
            raise JavaClientError(f"the driver JVM exited ({self.proc.returncode}) in {args[0]}")
        return json.loads(answer)


# Idle drivers; a thread that finds none starts another, so concurrent commands stay concurrent.
_idle: list[_Driver] = []
_idle_lock = threading.Lock()


def _serve(args: list[str], stdin: str, timeout: float) -> dict:
    with _idle_lock:
        driver = _idle.pop() if _idle else None
    if driver is None or driver.proc.poll() is not None:
        driver = _Driver()
    answer = driver.call(args, stdin, timeout)  # a timed-out driver is dead and not kept
    with _idle_lock:
        _idle.append(driver)
    return answer


def run(
    command: str,
    bootstrap: str,
    topic: str,
    *,
    options: dict[str, str | list[str]] | None = None,
    configs: dict[str, str] | None = None,
    topic_configs: dict[str, str] | None = None,
    stdin: str = "",
    timeout: float = 120,
) -> list[dict]:
    """Run one driver command (in a shared driver JVM); return its JSON output lines, raise
    on a non-zero exit."""
    args = _args(command, bootstrap, topic, options, configs, topic_configs)
    done = _serve(args, stdin, timeout)
    lines = [json.loads(line) for line in done["stdout"].splitlines() if line.startswith("{")]
    if done["exit"] != 0:
        stderr_tail = "\n".join(done["stderr"].splitlines()[-30:])
        raise JavaClientError(f"{command} failed: {lines[-5:]}\nstderr:\n{stderr_tail}")
    return lines


def start(
    command: str,
    bootstrap: str,
    topic: str,
    *,
    options: dict[str, str | list[str]] | None = None,
    configs: dict[str, str] | None = None,
) -> subprocess.Popen[str]:
    """Start a driver command whose JSON lines are read as they come (stdout)."""
    return subprocess.Popen(
        _command(command, bootstrap, topic, options, configs, None),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def create_topic(broker: BrokerProcess, topic: str, partitions: int) -> None:
    """Create a topic through the Java Admin, replicated as the broker(s) under test allow."""
    options: dict[str, str | list[str]] = {
        "partitions": str(partitions),
        "replication-factor": str(broker.replication_factor),
    }
    run("create-topic", broker.bootstrap, topic, options=options)


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def produce_input(records: list[Rec]) -> str:
    """The produce command's stdin for these records (explicit partition and timestamp)."""
    return "".join(
        json.dumps(
            {
                "key": _b64(r.key),
                "value": _b64(r.value),
                "headers": [[k, _b64(v)] for k, v in r.headers],
                "partition": r.partition,
                "timestamp": r.timestamp,
            }
        )
        + "\n"
        for r in records
    )


def parse_consumed(lines: list[dict]) -> list[Rec]:
    return [
        Rec(
            partition=d["partition"],
            key=_unb64(d["key"]),
            value=_unb64(d["value"]),
            headers=tuple((k, _unb64(v)) for k, v in d["headers"]),
            timestamp=d["timestamp"],
            offset=d["offset"],
        )
        for d in lines
    ]
