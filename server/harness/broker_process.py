"""A Gregor broker run as a child process in a directory of its own, on a free local port:
what the pytest plugin (``gregor.server.harness.pytest_plugin``) hands to tests.

The child runs this very installation's ``gregor serve`` (``python -m gregor.server.cli``), so a
checkout under test tests its own broker. Readiness is a Metadata answer listing the broker.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Self

from gregor._paths import set_child_pythonpath
from gregor.server.cli import topics
from gregor.server.cli.client.connection import Client, ClientError

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0
_POLL_S = 0.01


class BrokerProcessError(RuntimeError):
    """The broker did not start, stop or answer as expected; the message has its log tail."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class BrokerProcess:
    """One broker process; its port and data directory survive restart() and kill()."""

    def __init__(self, directory: Path, overrides: dict[str, str] | None = None) -> None:
        self.directory = Path(directory)
        self.data_dir = self.directory / "data"
        self.log_path = self.directory / "broker.log"
        self.port = free_port()
        self.overrides = dict(overrides or {})
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise BrokerProcessError("broker not started")
        return self._proc.pid

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def command(self) -> list[str]:
        listener = f"PLAINTEXT://127.0.0.1:{self.port}"
        config = {
            "listeners": listener,
            "advertised.listeners": listener,
            "log.dirs": str(self.data_dir),
            "broker.id": "0",
            "num.partitions": "1",
            **self.overrides,
        }
        cmd = [sys.executable, "-m", "gregor.server.cli", "serve"]
        for key, value in config.items():
            cmd += ["--override", f"{key}={value}"]
        return cmd

    def start(self) -> None:
        """Start the broker and return once it answers Metadata (recovering its logs first
        if the last run crashed)."""
        if self.running:
            raise BrokerProcessError("broker already running")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        set_child_pythonpath(env)
        with open(self.log_path, "ab") as log:
            log.write(f"==== start: {' '.join(self.command())}\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                self.command(),
                cwd=self.directory,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            self._wait_ready()
        except BaseException:
            self._kill9()
            raise

    def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            code = self._proc.poll()
            if code is not None:
                raise BrokerProcessError(self._describe(f"exited with code {code} at start-up"))
            try:
                with Client(self.bootstrap, "gregor-pytest", timeout_s=2.0) as client:
                    if client.metadata([]).brokers:
                        return
            except (ClientError, OSError) as e:
                last_error = e
            time.sleep(_POLL_S)
        raise BrokerProcessError(
            self._describe(f"not ready after {START_TIMEOUT_S:.0f}s ({last_error!r})")
        )

    def stop(self) -> None:
        """SIGTERM and wait for the clean shutdown; SIGKILL and raise if it hangs."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._kill9()
            raise BrokerProcessError(
                self._describe(f"did not exit within {STOP_TIMEOUT_S:.0f}s of SIGTERM")
            ) from None

    def restart(self) -> None:
        """A clean stop and a start on the same port and data: every record stays."""
        self.stop()
        self.start()

    def kill(self) -> None:
        """kill -9 (nothing flushed or closed), then a start that recovers the logs as after
        a crash, on the same port and data."""
        self._kill9()
        self.start()

    def _kill9(self) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def create_topic(
        self, name: str, partitions: int = 1, config: dict[str, str] | None = None
    ) -> None:
        """Create a topic and return once Metadata shows a leader for every partition."""
        with Client(self.bootstrap, "gregor-pytest") as client:
            try:
                topics.create_topic(client, name, partitions, config=config)
            except ClientError as e:
                raise BrokerProcessError(f"creating topic {name!r}: {e}") from e
            deadline = time.monotonic() + START_TIMEOUT_S
            while time.monotonic() < deadline:
                (meta,) = client.metadata([name]).topics
                if meta.error_code.value == 0 and all(
                    p.error_code.value == 0 and p.leader_id >= 0 for p in meta.partitions
                ):
                    if len(meta.partitions) == partitions:
                        return
                time.sleep(_POLL_S)
        raise BrokerProcessError(f"topic {name!r} has no leaders after {START_TIMEOUT_S:.0f}s")

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return f"(no log at {self.log_path})"
        return "\n".join(text.splitlines()[-lines:])

    def _describe(self, problem: str) -> str:
        return f"gregor broker on {self.bootstrap} {problem}; log {self.log_path}:\n" + (
            self.log_tail()
        )

    def close(self) -> None:
        """Stop cleanly if running (kill -9 if that fails)."""
        try:
            self.stop()
        finally:
            self._kill9()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
