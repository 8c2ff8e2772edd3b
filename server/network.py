"""The socket server: connections, framing, the request channel and the handler pool.

Each connection hands at most one request at a time to the server and the next one only
after the previous one was answered (Kafka mutes the channel the same way), so requests
are handled and answered in order while clients may pipeline. A bounded channel feeds
``num.io.threads`` handler tasks; a handler answers at once or parks the request in the
purgatory and moves on to the next one. Handlers are synchronous, so a request that
arrives while nothing is queued or running is handled at once, without a trip around the
event loop to wake a handler task.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

logger = logging.getLogger(__name__)

_SIZE = 4
# A connection stops reading from its socket once this much is buffered unread.
_READ_BUFFER_LIMIT = 1 << 20
# Reads land in one chunk shared by every connection (the bytes are moved out before the
# next read); a frame at least this large is read straight into a buffer of its own.
_CHUNK = 256 * 1024
_LARGE_FRAME = 64 * 1024


class FileRegion(Protocol):
    fd: int
    position: int
    size: int


Part = bytes | FileRegion


@dataclass(slots=True)
class _Remainder:
    """The unsent tail of a file region."""

    fd: int
    position: int
    size: int


@dataclass(slots=True)
class Request:
    connection: Connection
    frame: bytes | bytearray


class RequestChannel:
    """Bounded FIFO between the connections and the handler pool."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._queue: collections.deque[Request] = collections.deque()
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._blocked: list[Connection] = []

    def submit(self, request: Request) -> None:
        self._queue.append(request)
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                break

    @property
    def empty(self) -> bool:
        return not self._queue

    @property
    def full(self) -> bool:
        return len(self._queue) >= self.capacity

    def wait_for_room(self, connection: Connection) -> None:
        self._blocked.append(connection)

    async def take(self) -> Request:
        while not self._queue:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter
        request = self._queue.popleft()
        if self._blocked and not self.full:
            blocked, self._blocked = self._blocked, []
            for connection in blocked:
                connection.next_request()
        return request


class Connection(asyncio.BufferedProtocol):
    """One client connection: frames in, responses out, one request in flight.

    Received bytes are split into frames as they arrive; a large frame (a produce request,
    say) is received in place, so its bytes are copied once, by the kernel.
    """

    def __init__(self, server: SocketServer, listener: str) -> None:
        self.server = server
        self.listener = listener
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self._buffer = bytearray()  # received, not yet a whole frame
        self._frames: collections.deque[bytes | bytearray] = collections.deque()
        self._held = 0  # bytes in _frames
        self._large: bytearray | None = None  # a large frame being received in place
        self._filled = 0  # bytes of _large received so far
        self._bad_size: int | None = None  # the invalid size prefix that ends the stream
        self._in_flight = False
        self._reading = True
        self._closed = False
        self.last_active = time.monotonic()

    # -- asyncio.BufferedProtocol -----------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self.server.connections.discard(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._large is not None:
            return memoryview(self._large)[self._filled :]
        return self.server.read_chunk

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active = time.monotonic()
        if self._large is None:
            self._buffer += self.server.read_chunk[:nbytes]
            self._split()
        else:
            self._filled += nbytes
            if self._filled == len(self._large):
                self._push(self._large)
                self._large = None
        self.next_request()

    @property
    def idle(self) -> bool:
        return not (self._in_flight or self._buffer or self._frames or self._large)

    # -- framing ----------------------------------------------------------------------
    def _split(self) -> None:
        """Move the whole frames out of the buffer; start receiving a large one in place."""
        buffer = self._buffer
        pos = 0
        with memoryview(buffer) as view:
            while len(buffer) - pos >= _SIZE and self._bad_size is None:
                size = int.from_bytes(view[pos : pos + _SIZE], "big", signed=True)
                start = pos + _SIZE
                end = start + size
                if size < 0 or size > self.server.max_request_size:
                    self._bad_size = size  # reported when the frames before it are done
                elif end <= len(buffer):
                    self._push(bytes(view[start:end]))
                    pos = end
                elif size >= _LARGE_FRAME:
                    self._large = bytearray(size)
                    self._filled = len(buffer) - start
                    self._large[: self._filled] = view[start:]
                    pos = len(buffer)
                    break
                else:
                    break
        del buffer[:pos]

    def _push(self, frame: bytes | bytearray) -> None:
        self._frames.append(frame)
        self._held += len(frame)

    def next_request(self) -> None:
        """Hand over the next whole frame, if any and if no request is in flight."""
        if self._closed or self._in_flight:
            self._bound_memory()
            return
        if self._frames:
            channel = self.server.channel
            if channel.full:
                channel.wait_for_room(self)
                self._set_reading(False)
                return
            frame = self._frames.popleft()
            self._held -= len(frame)
            self._in_flight = True
            self.server.dispatch(Request(self, frame))
        elif self._bad_size is not None:
            logger.warning(
                "Closing connection from %s: request size %d is outside 0..%d "
                "(socket.request.max.bytes)",
                self.peer,
                self._bad_size,
                self.server.max_request_size,
            )
            self.close()
            return
        self._bound_memory()

    def _bound_memory(self) -> None:
        """Stop reading while a request is in flight and plenty is already held, or once
        the stream has gone bad."""
        held = self._held + len(self._buffer) + self._filled
        self._set_reading(
            self._bad_size is None and not (self._in_flight and held >= _READ_BUFFER_LIMIT)
        )

    def _set_reading(self, reading: bool) -> None:
        if self.transport is None or reading == self._reading or self._closed:
            return
        self._reading = reading
        if reading:
            self.transport.resume_reading()
        else:
            self.transport.pause_reading()

    # -- responses --------------------------------------------------------------------
    def send(self, parts: Sequence[Part], size: int) -> None:
        """Write one response (already headed, without the size prefix) and move on.

        Byte parts go through the transport; file regions go straight from the page
        cache to the socket with sendfile. Whatever cannot be sent without waiting is
        finished by a task, so the handler never blocks on a slow client.
        """
        if self._closed or self.transport is None:
            return
        queue: collections.deque[Part] = collections.deque(parts)
        queue.appendleft(size.to_bytes(4, "big"))
        try:
            finished = self._pump(queue)
        except OSError as e:
            self._send_failed(e)
            return
        if finished:
            self.done()
        else:
            self.server.spawn(self._finish(queue))

    def _pump(self, queue: collections.deque[Part]) -> bool:
        """Send queued parts while the socket takes them; True once all are sent."""
        transport = self.transport
        assert transport is not None
        pending: list[bytes] = []
        while queue:
            part = queue[0]
            if isinstance(part, bytes):
                pending.append(queue.popleft())
                continue
            if pending:
                transport.writelines(pending)
                pending = []
            if transport.get_write_buffer_size():
                return False
            try:
                sent = os.sendfile(
                    transport.get_extra_info("socket").fileno(), part.fd, part.position, part.size
                )
            except BlockingIOError:
                return False
            if sent == 0:
                raise OSError("the file region ends early (log truncated?)")
            if sent < part.size:
                queue[0] = _Remainder(part.fd, part.position + sent, part.size - sent)
                return False
            queue.popleft()
        if pending:
            transport.writelines(pending)
        return True

    async def _finish(self, queue: collections.deque[Part]) -> None:
        """Wait for the socket, sending the head region through the event loop, until done."""
        transport = self.transport
        assert transport is not None
        try:
            while not self._pump(queue):
                part = queue.popleft()
                if isinstance(part, bytes):  # only regions stop the pump
                    raise RuntimeError("unexpected byte part at the head of the queue")
                with os.fdopen(part.fd, "rb", buffering=0, closefd=False) as file:
                    sent = await asyncio.get_running_loop().sendfile(
                        transport, file, part.position, part.size
                    )
                if sent < part.size:
                    raise OSError("the file region ends early (log truncated?)")
        except (OSError, RuntimeError) as e:
            self._send_failed(e)
            return
        self.done()

    def _send_failed(self, error: Exception) -> None:
        logger.info("Closing connection from %s while sending a response: %s", self.peer, error)
        self.close()

    def done(self) -> None:
        """The in-flight request is finished (answered, or needs no answer)."""
        self.last_active = time.monotonic()
        self._in_flight = False
        self.next_request()

    def close(self) -> None:
        self._closed = True
        if self.transport is not None:
            self.transport.close()


class SocketServer:
    """Listens on the configured listeners and runs the handler pool."""

    def __init__(
        self,
        handler: Callable[[Connection, bytes | bytearray], None],
        *,
        io_threads: int,
        queued_max_requests: int,
        max_request_size: int,
    ) -> None:
        self.handler = handler
        self.channel = RequestChannel(queued_max_requests)
        self.max_request_size = max_request_size
        self.connections: set[Connection] = set()
        self._io_threads = io_threads
        self._servers: list[asyncio.Server] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._workers: list[asyncio.Task[None]] = []
        self._handling = False
        self.read_chunk = memoryview(bytearray(_CHUNK))

    async def listen(self, name: str, host: str, port: int) -> int:
        """Start a listener; return the bound port (useful when ``port`` is 0)."""
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            lambda: Connection(self, name), host or None, port, reuse_address=True, backlog=512
        )
        self._servers.append(server)
        return server.sockets[0].getsockname()[1]

    def start_handlers(self) -> None:
        self._workers = [asyncio.create_task(self._work()) for _ in range(self._io_threads)]

    def spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def dispatch(self, request: Request) -> None:
        """Handle the request now if nothing is queued or running, else queue it. A frame
        that becomes ready while a handler runs (its predecessor was answered at once) is
        queued, so a pipelining client takes turns with the others."""
        if self._handling or not self.channel.empty:
            self.channel.submit(request)
        else:
            self._handle(request)

    async def _work(self) -> None:
        while True:
            self._handle(await self.channel.take())

    def _handle(self, request: Request) -> None:
        self._handling = True
        try:
            self.handler(request.connection, request.frame)
        except Exception:
            logger.exception(
                "Unexpected error handling a request from %s; closing it",
                request.connection.peer,
            )
            request.connection.close()
        finally:
            self._handling = False

    def close_idle(self, max_idle_s: float) -> None:
        """Close connections with nothing in flight for ``connections.max.idle.ms``."""
        cutoff = time.monotonic() - max_idle_s
        for connection in list(self.connections):
            if connection.idle and connection.last_active < cutoff:
                logger.info("Closing idle connection from %s", connection.peer)
                connection.close()

    async def stop_accepting(self) -> None:
        for server in self._servers:
            server.close()
        for server in self._servers:
            await server.wait_closed()

    async def drain(self, timeout: float) -> None:
        """Let in-flight work finish (bounded by ``timeout``), then close everything."""
        deadline = time.monotonic() + timeout
        while self._tasks and time.monotonic() < deadline:
            await asyncio.wait(list(self._tasks), timeout=deadline - time.monotonic())
        for worker in self._workers:
            worker.cancel()
        for connection in list(self.connections):
            connection.close()
