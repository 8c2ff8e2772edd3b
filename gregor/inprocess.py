"""``gregor.Broker``: a broker inside this process, on a free local port.

For embedding and for tests that want no child process. It is the broker ``gregor serve``
runs (``gregor.server.broker.Broker``), started and stopped the same way, without the
signal handling and logging set-up of the command line (configure ``logging`` as you like;
the loggers are ``gregor.*``). One broker per process is what the broker is built for
(request metrics are process-wide).

In an event loop (asyncio, or anyio on asyncio)::

    async with gregor.Broker(tmp_path, {"num.partitions": "3"}) as broker:
        ...  # clients on broker.bootstrap

From plain threaded code the broker runs an event loop on a thread of its own::

    with gregor.Broker(tmp_path) as broker:
        ...
"""

from __future__ import annotations

import asyncio
import threading
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Self

import anyio

if TYPE_CHECKING:
    from gregor.server.broker import Broker as _ServerBroker

START_TIMEOUT_S = 60.0


class Broker:
    """A Gregor broker in this process: data under ``directory``, listening on
    127.0.0.1 on a free port (``port=0``, the default) or on ``port``."""

    def __init__(
        self,
        directory: str | Path,
        overrides: dict[str, str] | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.directory = Path(directory)
        self.data_dir = self.directory / "data"
        listener = f"PLAINTEXT://{host}:{port}"
        self.properties = {
            "listeners": listener,
            "log.dirs": str(self.data_dir),
            "broker.id": "0",
            **(overrides or {}),
        }
        self._host = host
        self._server: _ServerBroker | None = None
        self._background: asyncio.Task[None] | None = None
        self._thread: threading.Thread | None = None
        self._thread_loop: asyncio.AbstractEventLoop | None = None
        self._thread_stop: asyncio.Event | None = None

    @property
    def port(self) -> int:
        """The port the PLAINTEXT listener bound (known once started)."""
        if self._server is None or not self._server.bound_ports:
            raise RuntimeError("broker not started")
        return next(iter(self._server.bound_ports.values()))

    @property
    def bootstrap(self) -> str:
        """``host:port`` for ``bootstrap.servers``."""
        return f"{self._host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._server is not None

    # -- in an event loop ----------------------------------------------------------------

    async def start(self) -> None:
        """Start serving (recovering the logs under ``directory`` first, if any)."""
        from gregor.server.broker import Broker as ServerBroker
        from gregor.server.config import BrokerConfig

        if self._server is not None:
            raise RuntimeError("broker already running")
        server = ServerBroker(BrokerConfig(dict(self.properties)))
        await server.start()
        self._server = server
        self._background = asyncio.get_running_loop().create_task(server.run_background())

    async def stop(self) -> None:
        """A clean shutdown, as on SIGTERM: parked requests answered, logs flushed."""
        server, background = self._server, self._background
        if server is None:
            return
        if background is not None:
            background.cancel()
            try:
                await background
            except asyncio.CancelledError:
                pass
        try:
            await server.shutdown()
        finally:
            self._server = self._background = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # -- from threaded code ----------------------------------------------------------------

    def start_in_thread(self, timeout_s: float = START_TIMEOUT_S) -> Self:
        """Start the broker on an event loop of its own thread; return once it serves."""
        if self._thread is not None:
            raise RuntimeError("broker already running")
        started = threading.Event()
        failure: list[BaseException] = []

        async def main() -> None:
            self._thread_loop = asyncio.get_running_loop()
            self._thread_stop = asyncio.Event()
            try:
                await self.start()
            except BaseException as e:
                failure.append(e)
                started.set()
                return
            started.set()
            try:
                await self._thread_stop.wait()
            finally:
                await self.stop()

        def run() -> None:
            from gregor.server.config import BrokerConfig
            from gregor.server.polling import new_event_loop

            try:
                poll_us = BrokerConfig(dict(self.properties))["gregor.idle.poll.us"]
                loop_factory = partial(new_event_loop, poll_us)
                anyio.run(main, backend_options={"loop_factory": loop_factory})
            except BaseException as e:  # a bad configuration, before main() ran
                failure.append(e)
                started.set()

        self._thread = threading.Thread(target=run, name="gregor-broker", daemon=True)
        self._thread.start()
        if not started.wait(timeout_s):
            raise RuntimeError(f"broker not started after {timeout_s:.0f}s")
        if failure:
            self._thread.join()
            self._thread = None
            raise failure[0]
        return self

    def stop_in_thread(self, timeout_s: float = 60.0) -> None:
        """Shut the broker down cleanly and wait for its thread."""
        thread, loop, stop = self._thread, self._thread_loop, self._thread_stop
        if thread is None:
            return
        if loop is not None and stop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(stop.set)
        thread.join(timeout_s)
        if thread.is_alive():
            raise RuntimeError(f"broker thread still running after {timeout_s:.0f}s")
        self._thread = self._thread_loop = self._thread_stop = None

    def __enter__(self) -> Self:
        return self.start_in_thread()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop_in_thread()
