"""A server run as a child process with its output in a log file, on a local port it keeps
across restarts: the start, readiness, clean stop, crash and log mechanics shared by the
broker (``broker_process.py``), ZooKeeper (``zookeeper.py``) and the tests' other servers.

The port. A server that reports the port it bound (Gregor's broker logs its listeners once
started) is started on port 0 and the launcher reads the port back: nothing can take it in
between. A server that must be told its port (ZooKeeper reads ``clientPort=0`` as "no
client port"; Tansu would advertise port 0) gets one picked free here, and another if that
one is taken before the server binds it (it exits saying the address is in use). Either
way a restart, and a start after kill -9, asks for the same port again, since clients hold
it in their bootstrap address, and fails naming it if another process took it meanwhile.
"""

from __future__ import annotations

import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Self

STOP_TIMEOUT_S = 20.0
_READY_POLL_S = 0.02
_BIND_ATTEMPTS = 5
# How Gregor ("address already in use"), the JVM and Tansu ("Address in use") say it.
_PORT_TAKEN = re.compile(r"address (already )?in use|AddrInUse", re.IGNORECASE)
# setpriv makes the kernel kill the child when the thread that started it dies.
_PDEATHSIG = ["setpriv", "--pdeathsig", "KILL", "--"] if shutil.which("setpriv") else []


def free_port() -> int:
    """A local port nothing listens on now, for a server that must be told its port before
    it exists: another process may take it before the server binds it (the launcher then
    tries another)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """One server process. Subclasses set ``name``, ``log_path``, ``error`` (what is raised
    when the process misbehaves), ``cwd`` and ``start_timeout_s`` (and may set
    ``stop_timeout_s``), build the command line in
    ``command(port)`` and say when it serves in ``_ready()`` (raising one of
    ``not_ready_errors`` or returning False while it does not)."""

    name = "server"
    error: type[Exception] = RuntimeError
    not_ready_errors: tuple[type[Exception], ...] = (OSError, ValueError)
    # True: started on port 0, and ``_ready`` sets ``_port`` from what the server reports.
    reports_port = False
    log_tail_lines = 60
    log_path: Path
    cwd: Path
    start_timeout_s: float
    stop_timeout_s = STOP_TIMEOUT_S

    def __init__(self, *, own_session: bool = False) -> None:
        """``own_session``: the child gets a session of its own, so Ctrl-C reaches only this
        process (which then stops it), and is killed if the thread that started it dies."""
        self.own_session = own_session
        self._proc: subprocess.Popen[bytes] | None = None
        self._port: int | None = None
        self._log_offset = 0  # where this run's output starts in the log

    @property
    def port(self) -> int:
        if self._port is None:
            raise self.error(f"{self.name} has not bound a port yet (start it first)")
        return self._port

    @port.setter
    def port(self, port: int) -> None:
        """Serve on ``port`` rather than on one found at the first start."""
        if self.running:
            raise self.error(f"{self.name} is running on {self.address}")
        self._port = port

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self._port}" if self._port is not None else "127.0.0.1 (no port yet)"

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise self.error(f"{self.name} not started")
        return self._proc.pid

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def returncode(self) -> int | None:
        """The exit status once the process ended (negative: killed by that signal)."""
        return None if self._proc is None else self._proc.poll()

    def command(self, port: int) -> list[str]:
        """The command line serving on ``port`` (0: a port the server picks and reports)."""
        raise NotImplementedError

    def env(self) -> dict[str, str] | None:
        """The child's environment (None: this process's)."""
        return None

    def _ready(self) -> bool:
        raise NotImplementedError

    def start(self) -> None:
        """Start the server on its port (see the module's docstring for which) and return
        once it serves."""
        if self.running:
            raise self.error(f"{self.name} already running")
        if self._port is not None or self.reports_port:
            self._launch(self._port or 0)
            return
        for attempt in range(1, _BIND_ATTEMPTS + 1):
            self._port = free_port()
            try:
                self._launch(self._port)
                return
            except self.error:
                if attempt == _BIND_ATTEMPTS or not self._port_taken():
                    self._port = None
                    raise

    def _launch(self, port: int) -> None:
        """Run ``command(port)`` with its output appended to the log, then wait until it
        serves (killing it if it does not)."""
        command = self.command(port)
        with open(self.log_path, "ab") as log:
            log.write(f"==== start: {' '.join(command)}\n".encode())
            log.flush()
            self._log_offset = log.tell()
            self._proc = subprocess.Popen(
                (_PDEATHSIG if self.own_session else []) + command,
                cwd=self.cwd,
                env=self.env(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=self.own_session,
            )
        try:
            self._wait_ready()
        except BaseException:
            self._kill9()
            raise

    def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.start_timeout_s
        last_error: Exception | None = None
        while True:
            code = self._proc.poll()
            if code is not None:
                raise self.error(self._exited(code))
            try:
                if self._ready():
                    return
            except self.not_ready_errors as e:
                last_error = e
            if time.monotonic() > deadline:
                problem = f"not ready after {self.start_timeout_s:.0f}s ({last_error!r})"
                raise self.error(self._describe(problem))
            time.sleep(_READY_POLL_S)  # nothing to await: the server is another process

    def _port_taken(self) -> bool:
        """Whether the server exited saying its port was in use."""
        output = self.start_output()
        return f":{self._port}" in output and _PORT_TAKEN.search(output) is not None

    def _exited(self, code: int) -> str:
        if self._port is not None and self._port_taken():
            return self._describe(
                f"could not bind port {self._port}: another process has it (a restart "
                "keeps the port, so that clients' bootstrap addresses stay valid)"
            )
        return self._describe(f"exited with code {code} at start-up")

    def start_output(self) -> str:
        """What the server wrote to its log since it was last started."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(self._log_offset)
                return log.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        """SIGTERM and wait for a clean exit; SIGKILL and raise if it hangs."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(self.stop_timeout_s)
        except subprocess.TimeoutExpired:
            self._kill9()
            raise self.error(
                self._describe(f"did not exit within {self.stop_timeout_s:.0f}s of SIGTERM")
            ) from None

    def kill(self) -> None:
        """SIGKILL: a crash, nothing flushed or closed; ``start()`` brings it back."""
        self._kill9()

    def _kill9(self) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def restart(self) -> None:
        """Stop (cleanly, if running) and start again on the same port and data."""
        self.stop()
        self.start()

    def log_tail(self, lines: int | None = None) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return f"(no log at {self.log_path})"
        return "\n".join(text.splitlines()[-(lines or self.log_tail_lines) :])

    def _describe(self, problem: str) -> str:
        where = f"{self.address}; log {self.log_path}"
        return f"{self.name} {problem} ({where}):\n{self.log_tail()}"

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
