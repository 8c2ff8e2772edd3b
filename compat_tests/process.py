"""A server under test run as a plain OS process with its output in a log file: the start,
clean stop, crash and log-tail mechanics that the broker and ZooKeeper processes share."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from types import TracebackType
from typing import Self

STOP_TIMEOUT_S = 20.0


class ServerProcess:
    """Subclasses set ``log_path`` and ``error`` (the exception raised when the process
    misbehaves), implement ``_describe`` and wait for readiness in ``_wait_ready``."""

    error: type[Exception] = RuntimeError
    log_tail_lines = 60
    log_path: Path

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self._proc is not None, "process not started"
        return self._proc.pid

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _launch(self, command: list[str], cwd: Path) -> None:
        """Run ``command`` with its output appended to the log, then wait until it serves
        (killing it if it does not)."""
        with open(self.log_path, "ab") as log:
            log.write(f"==== start: {' '.join(command)}\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                command, cwd=cwd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        try:
            self._wait_ready()
        except BaseException:
            self.kill()
            raise

    def _wait_ready(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        """SIGTERM and wait for a clean exit; escalates to SIGKILL and raises if it hangs."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise self.error(
                self._describe(f"did not exit within {STOP_TIMEOUT_S:.0f}s of SIGTERM")
            ) from None

    def kill(self) -> None:
        """SIGKILL: a crash, nothing gets flushed or closed."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        proc.kill()
        proc.wait()

    def restart(self) -> None:
        """Stop (cleanly, if still running) and start again on the same port and data dir."""
        self.stop()
        self.start()

    def start(self) -> None:
        raise NotImplementedError

    def log_tail(self, lines: int | None = None) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return f"(no log at {self.log_path})"
        return "\n".join(text.splitlines()[-(lines or self.log_tail_lines) :])

    def _describe(self, problem: str) -> str:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.stop()
        finally:
            self.kill()
