"""The socket server: listeners, connections, framing, the request channel and the
handler pool.

Each connection hands at most one request at a time to the server and the next one only
after the previous one was answered (Kafka mutes the channel the same way), so requests
are handled and answered in order while clients may pipeline. A bounded channel feeds
``num.io.threads`` handler tasks; a handler answers at once or parks the request in the
purgatory and moves on. Handlers are synchronous, so a request that arrives while nothing
is queued or running is handled at once, without a trip around the event loop to wake a
handler task; a pipelined follower is queued behind the other connections' requests, and
a handler task yields to the event loop after each request, so no connection starves the
others.

Memory is bounded three ways: a connection whose responses are not being read (the
transport's write buffer is over its high-water mark) stops reading and handling; a
connection reads ahead at most ``_READ_BUFFER_LIMIT`` while a request is in flight; and
the bytes of all requests received and not yet answered are bounded by
``queued.max.request.bytes`` (Kafka's memory pool; see MemoryPool: large frames reserve
their size before they are received, small ones keep a reserve of their own). Memory is
committed as the bytes arrive, never for a size prefix's announcement alone.

Connections are accepted within KIP-612's connection creation rates (ConnectionRates in
server/quotas.py), and a request of a client whose quota group is throttled waits out the
throttle on whatever connection it comes, so reconnecting does not shed a throttle.

A TLS listener (server/listener_security.py) wraps each accepted socket in its context of
the moment, in Gregor's own TLS transport (server/tls_transport.py: reads into the buffer
all connections share, decrypted straight into the connection's); the connection exists
once the handshake is done, and its principal is the client certificate's. Sendfile
cannot encrypt: on TLS, file regions are read in large chunks and written through the
transport as it drains. On a SASL listener the connection's
authenticator (server/security/authenticator.py) sees each frame first: before
authentication it answers the exchange itself (no quota, no handler pool) and frames are
bounded by ``sasl.server.max.receive.size``; after it, it only watches for the session's
expiry and a re-authentication.
"""

from __future__ import annotations

import asyncio
import collections
import ctypes
import errno
import logging
import os
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from gregor.apis.timing import METRICS, RequestTiming
from gregor.controller.quota_entities import normalize_ip
from gregor.ratelimit import RateLimitedLog
from gregor.server.quotas import UNLIMITED_RATE, ClientQuotas, ConnectionRates
from gregor.server.security.authenticator import SaslAuthenticator
from gregor.server.tls_transport import TlsTransport

if TYPE_CHECKING:
    from gregor.server.listener_security import ListenerSecurity

logger = logging.getLogger(__name__)
limited_log = RateLimitedLog(logger)

_SIZE = 4
# A connection with a request in flight stops reading once this much is buffered unread.
_READ_BUFFER_LIMIT = 1 << 20
# Reads land in one chunk shared by every connection (the bytes are moved out before the
# next read); a frame at least _LARGE_FRAME long is collected in a buffer of its own, and
# once _CHUNK of it has arrived the rest is received in place, in a buffer of the frame's
# size made then (so a size prefix alone commits no memory; the pool has reserved it), or,
# for a frame bigger than the whole pool, one that doubles as the bytes come.
_CHUNK = 256 * 1024
_LARGE_FRAME = 64 * 1024
# The part of queued.max.request.bytes that only small frames (under _LARGE_FRAME) may use
# (at most an eighth of it); while the pool is used up, reads take at most _LARGE_FRAME.
_SMALL_RESERVE = 8 << 20
# accept() failing for want of descriptors or memory is retried after this long.
_ACCEPT_BACKOFF_S = 0.5
_ACCEPTS_PER_WAKEUP = 64
_OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
# On TLS, file regions are read (pread, from the page cache) and encrypted this much at a
# time; a response waits in memory only up to the transport's high-water mark plus one.
_TLS_CHUNK = 256 * 1024
# A file region this small is read and written with the rest of its response, in one send:
# cheaper than a sendfile of its own, and the response leaves in one piece (at 10,000
# records/s, a parked fetch's answer waited up to 1.5 ms between its head and its records).
_COPY_AT_MOST = 16 * 1024
# OpenSSL's reasons for a first record that is not TLS: a plaintext client on a TLS port.
_NOT_TLS = frozenset({"WRONG_VERSION_NUMBER", "HTTP_REQUEST", "HTTPS_PROXY_REQUEST"})


class FileRegion(Protocol):
    """Bytes of a file to send. ``fd`` is read at send time and is -1 once the file is
    closed. The owner of the file must set it to -1 on the event loop thread before the
    descriptor is closed (on any thread): a descriptor read and used in one step of the
    loop is then the file's own, and a region that waits for the socket sends from a
    duplicate of its own."""

    @property
    def fd(self) -> int: ...

    @property
    def position(self) -> int: ...

    @property
    def size(self) -> int: ...


Part = bytes | FileRegion


@dataclass(slots=True)
class _Remainder:
    """The unsent tail of a file region."""

    region: FileRegion
    position: int
    size: int

    @property
    def fd(self) -> int:
        return self.region.fd


@dataclass(slots=True)
class Request:
    connection: Connection
    frame: bytes | bytearray


@dataclass(frozen=True, slots=True)
class Limits:
    """The network layer's configuration (Kafka's key names in the comments)."""

    io_threads: int  # num.io.threads
    queued_max_requests: int  # queued.max.requests
    max_request_size: int  # socket.request.max.bytes
    queued_max_request_bytes: int  # queued.max.request.bytes; <= 0 unbounded
    max_connections: int  # max.connections
    max_connections_per_ip: int  # max.connections.per.ip
    per_ip_overrides: Mapping[str, int]  # max.connections.per.ip.overrides, by address
    send_buffer_bytes: int  # socket.send.buffer.bytes; -1 the OS default
    receive_buffer_bytes: int  # socket.receive.buffer.bytes; -1 the OS default
    max_connection_creation_rate: int = UNLIMITED_RATE  # max.connection.creation.rate
    # listener.name.<listener>.max.connection.creation.rate, by upper-case listener name
    listener_connection_creation_rates: Mapping[str, int] = field(default_factory=dict)
    inter_broker_listener: str | None = None  # exempt from the broker-wide rate
    # A TLS handshake (and a TLS close) not done in this long is abandoned: Kafka has no
    # key for it; the broker sets it from connections.max.idle.ms (Kafka's idle expiry
    # covers channels mid-handshake), at most the clients' own connection set-up timeout.
    tls_handshake_timeout_s: float = 10.0


class RequestChannel:
    """Bounded FIFO between the connections and the handler pool."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._queue: collections.deque[Request] = collections.deque()
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._blocked: list[Connection] = []

    def submit(self, request: Request) -> None:
        self._queue.append(request)
        self._wake_one()

    def _wake_one(self) -> None:
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
            try:
                await waiter
            except asyncio.CancelledError:
                # A handler retired (the pool shrank) just after it was woken: wake
                # another one for the request, or it would wait for the next arrival.
                if waiter.done() and not waiter.cancelled():
                    self._wake_one()
                raise
        request = self._queue.popleft()
        if self._blocked and not self.full:
            blocked, self._blocked = self._blocked, []
            for connection in blocked:
                connection.next_request()
        return request


class MemoryPool:
    """``queued.max.request.bytes``: the bytes of requests received and not yet answered,
    summed over all connections, with the responses Python still holds for clients that
    do not read them.

    A frame of ``_LARGE_FRAME`` bytes or more is *admitted* before its bytes are
    received: its whole size is reserved (the memory itself is committed only as the bytes
    arrive). Large frames may reserve up to ``capacity - reserve``; a frame bigger than
    that is admitted only when no other large frame holds a reservation, so the total is
    never more than the capacity or one frame. Frames wait for admission in arrival
    order, each connection's reading paused meanwhile. Small frames (prefixes, ApiVersions,
    Metadata, heartbeats, small produces) need no admission: they are read while the pool
    has room, and while it has none, while the small frames held stay under ``reserve``,
    so they keep flowing while large ones wait. (Kafka's pool stops every channel.) A
    capacity of 0 or less is unbounded (Kafka's -1)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.reserve = min(capacity // 8, _SMALL_RESERVE) if capacity > 0 else 0
        self.used = 0  # every byte counted, reservations whole
        self.large = 0  # reserved for admitted large frames
        self.stranded = 0  # read bytes of large frames that wait for admission
        self.peak = 0  # the most ``used`` has been
        self.exhausted = False  # used up: no room left
        self._queue: collections.deque[Connection] = collections.deque()
        self._muted: set[Connection] = set()
        self._releasing = False

    @property
    def small(self) -> int:
        """Bytes of small frames (and prefixes) held."""
        return self.used - self.large - self.stranded

    def _fits(self, size: int) -> bool:
        return self.large == 0 or self.large + size <= self.capacity - self.reserve

    def admit(self, connection: Connection, size: int) -> bool:
        """Reserve ``size`` for a large frame now, or queue the connection (False): its
        ``admitted()`` is called once the reservation is made."""
        if self.capacity <= 0 or (not self._queue and self._fits(size)):
            return True
        if connection not in self._queue:
            self._queue.append(connection)
        return False

    def may_read(self, connection: Connection) -> bool:
        """May a connection that is reading small frames or a size prefix read on?"""
        if self.capacity <= 0 or self.used < self.capacity or self.small < self.reserve:
            return True
        self._muted.add(connection)
        return False

    def change(self, used: int, large: int, stranded: int) -> None:
        self.used += used
        self.large += large
        self.stranded += stranded
        if self.used > self.peak:
            self.peak = self.used
        self.exhausted = 0 < self.capacity <= self.used
        if (used < 0 or large < 0) and (self._queue or self._muted):
            self._release()

    def forget(self, connection: Connection) -> None:
        self._muted.discard(connection)
        try:
            self._queue.remove(connection)
        except ValueError:
            return
        self._release()

    def _release(self) -> None:
        """Admit waiting frames in order while they fit, then let readers read again."""
        if self._releasing:
            return
        self._releasing = True
        try:
            while self._queue and self._fits(self._queue[0].waiting):
                self._queue.popleft().admitted()
            if self._muted and not (self.exhausted and self.small >= self.reserve):
                muted, self._muted = self._muted, set()
                for connection in muted:
                    connection.update_reading()
        finally:
            self._releasing = False


class Connection(asyncio.BufferedProtocol):
    """One client connection: frames in, responses out, one request in flight.

    Received bytes are split into frames as they arrive; most of a large frame (a produce
    request, say) is received in place, so its bytes are copied once, by the kernel.
    """

    def __init__(
        self, server: SocketServer, listener: str, ip: str, security: ListenerSecurity | None = None
    ) -> None:
        self.server = server
        self.listener = listener
        self.ip = ip
        self.security = security
        self.security_protocol = "PLAINTEXT" if security is None else security.protocol
        self._tls = security is not None and security.tls is not None
        # Who the client is (Kafka's KafkaPrincipal), and the name quotas match it by.
        self.principal = "User:ANONYMOUS"
        self.user = "ANONYMOUS"
        # The largest frame taken (smaller while a SASL exchange runs), and the exchange.
        self.receive_limit = server.max_request_size
        self.authenticator: SaslAuthenticator | None = None
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self._buffer = bytearray()  # received, not yet a whole frame
        self.waiting = 0  # size of the large frame at the head of _buffer awaiting admission
        self._granted = 0  # ... and once the pool has admitted it
        self._frames: collections.deque[bytes | bytearray] = collections.deque()
        self._held = 0  # bytes in _frames
        self._held_large = 0  # bytes of large frames in _frames
        self._large: bytearray | None = None  # a large frame being received
        self._expected = 0  # the size of _large once complete (reserved in the pool)
        self._filled = 0  # bytes of _large received so far
        self._in_place = False  # the last read went straight into _large
        self._bad_size: int | None = None  # the invalid size prefix that ends the stream
        self._in_flight = 0  # bytes of the request in flight (0: none)
        self._in_flight_large = False  # the request in flight was a large frame
        self._write_held = 0  # response bytes queued in the transport while it is paused
        # What this connection counts in the server's memory pool: all of it, the large
        # frames' reservations, the read bytes of a large frame awaiting admission.
        self._pooled = self._pooled_large = self._pooled_stranded = 0
        self._write_paused = False  # the client is not reading its responses
        self._throttled = False  # muted for a quota's throttle time
        self._throttle_until = 0.0  # loop time the mute ends
        self._throttle_timer: asyncio.TimerHandle | None = None
        self._sender: asyncio.Future[None] | None = None  # _finish, while it runs
        self._unsent: collections.deque[Part] | None = None  # TLS: the rest of a response
        self._closed = False
        self.last_active = time.monotonic()
        # The request in flight: when it was handed to the handlers, and its timing if
        # metrics are recorded (finished once it ends).
        self.received_ns = 0
        self.timing: RequestTiming | None = None

    # -- asyncio.BufferedProtocol -----------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.server.connections.add(self)
        if self.security is not None:
            if self.security.sasl is not None:
                self.authenticator = SaslAuthenticator(self.security.sasl, self)
            try:
                self.set_principal(self.security.principal(transport))
            except ValueError as e:  # no ssl.principal.mapping.rules rule maps the DN
                limited_log.log(
                    "principal",
                    logging.INFO,
                    "Failed authentication with %s on listener %s: %s",
                    self.peer,
                    self.listener,
                    e,
                )
                self.close()

    def set_principal(self, principal: str) -> None:
        """The connection is authenticated as ``principal`` ("User:<name>")."""
        self.principal = principal
        self.user = principal.partition(":")[2]

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        if self._sender is not None:  # it would wait for the closed socket forever
            self._sender.cancel()
            # Right after this, asyncio's transport fails the waiter loop.sendfile made
            # (and had resolved) before sending: InvalidStateError, logged as an error,
            # in CPython 3.11. The sendfile is cancelled anyway: drop its waiter.
            reset = getattr(self.transport, "_reset_empty_waiter", None)
            if reset is not None:
                reset()
        self.server.connection_closed(self)
        # Bytes not yet handed over are dropped now. A request still being handled keeps
        # its bytes counted until its handler is done with them: clients that send and
        # hang up must not pile up work beyond queued.max.request.bytes.
        self._buffer = bytearray()
        self._frames.clear()
        self._held = self._held_large = self._filled = self._expected = 0
        self.waiting = self._granted = 0
        self._large = None
        self._write_held = 0
        self._unsent = None
        if self._throttle_timer is not None:
            self._throttle_timer.cancel()
        self.server.pool.forget(self)
        self._account()

    def pause_writing(self) -> None:
        self._write_paused = True
        self.update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._write_held = 0
        self.last_active = time.monotonic()
        self._account()
        if self._unsent is not None:
            self._send_rest_tls()
        else:
            self.next_request()

    def get_buffer(self, sizehint: int) -> memoryview:
        large = self._large
        self._in_place = large is not None and self._filled >= _CHUNK
        if not self._in_place:
            server = self.server
            return server.small_chunk if server.pool.exhausted else server.read_chunk
        assert large is not None
        if len(large) == self._filled:
            expected = self._expected
            if expected > self.server.pool.capacity:
                # Bigger than the whole pool (admitted alone) or no pool: it grows as the
                # bytes come, so what is committed stays within twice what has arrived.
                large.extend(bytes(min(expected, 2 * self._filled) - self._filled))
            else:  # the client is sending it: its whole size at once, as the pool reserved
                whole = bytearray(expected)
                whole[: self._filled] = large
                large = self._large = whole
        return memoryview(large)[self._filled :]

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active = time.monotonic()
        if self._in_place:
            self._filled += nbytes
            if self._filled == self._expected:
                self._finish_large()
        else:
            data = self.server.read_chunk[:nbytes]
            if self._large is not None:
                take = min(nbytes, self._expected - self._filled)
                self._large += data[:take]
                self._filled += take
                data = data[take:]
                if self._filled == self._expected:
                    self._finish_large()
            if data:
                self._buffer += data
                self._split()
        self.next_request()

    @property
    def idle(self) -> bool:
        """Nothing in flight and nothing to handle: only a partial frame, or whole ones
        the client does not read the answers to, or an answer it stopped reading (as in
        Kafka, all of these count as idle)."""
        if self._sender is not None or self._unsent is not None:
            return True
        return not self._in_flight and (not self._frames or self._write_paused)

    # -- framing ----------------------------------------------------------------------
    def _split(self) -> None:
        """Move the whole frames out of the buffer; start collecting a large one apart once
        the pool admits it (its bytes read so far wait in the buffer until then)."""
        buffer = self._buffer
        pos = 0
        with memoryview(buffer) as view:
            while len(buffer) - pos >= _SIZE and self._bad_size is None:
                size = int.from_bytes(view[pos : pos + _SIZE], "big", signed=True)
                start = pos + _SIZE
                end = start + size
                if size < 0 or size > self.receive_limit:
                    self._bad_size = size  # reported when the frames before it are done
                elif size >= _LARGE_FRAME:
                    if self._granted == size:
                        self._granted = 0
                    elif not self.server.pool.admit(self, size):
                        self.waiting = size
                        break
                    self.waiting = 0
                    if end <= len(buffer):
                        self._push(bytes(view[start:end]), True)
                        pos = end
                    else:
                        self._large = bytearray(view[start:])
                        self._expected = size
                        self._filled = len(self._large)
                        pos = len(buffer)
                        self._account()
                        break
                    self._account()
                elif end <= len(buffer):
                    self._push(bytes(view[start:end]), False)
                    pos = end
                else:
                    break
        del buffer[:pos]

    def admitted(self) -> None:
        """The pool has reserved the waiting large frame's size: receive it."""
        self._granted, self.waiting = self.waiting, 0
        self._split()
        self.next_request()

    def _finish_large(self) -> None:
        assert self._large is not None
        self._push(self._large, True)
        self._large = None
        self._filled = self._expected = 0

    def _push(self, frame: bytes | bytearray, large: bool) -> None:
        self._frames.append(frame)
        self._held += len(frame)
        if large:
            self._held_large += len(frame)

    def next_request(self) -> None:
        """Hand over the next whole frame, if any, if no request is in flight and if the
        client reads its responses."""
        if self._closed:
            return
        if self._frames and not self._in_flight and not self._write_paused and not self._throttled:
            authenticator = self.authenticator
            if authenticator is None or authenticator.complete:  # else: SASL, no quota yet
                channel = self.server.channel
                if channel.full:
                    channel.wait_for_room(self)
                    self._account()
                    self._set_reading(False)
                    return
                gate = self.server.quota_gate
                if gate is not None:
                    delay = gate(self.user, self._frames[0])
                    if delay > 0:  # the client's quota group is throttled (from any connection)
                        self.throttle(delay)
                        self._account()
                        return
            frame = self._frames.popleft()
            self._held -= len(frame)
            large = len(frame) >= _LARGE_FRAME
            if large:
                self._held_large -= len(frame)
            self._in_flight = _SIZE + len(frame)
            self._in_flight_large = large
            self._account()
            self.received_ns = time.perf_counter_ns()
            if authenticator is None or not authenticator.receive(frame):
                self.server.dispatch(Request(self, frame))
            if self._closed:
                return
        elif self._bad_size is not None and not self._frames and not self._in_flight:
            if self.authenticator is not None and not self.authenticator.complete:
                limited_log.log(
                    "sasl-bad-size",
                    logging.WARNING,
                    "Closing connection from %s: failing SASL authentication due to invalid "
                    "receive size %d (sasl.server.max.receive.size is %d)",
                    self.peer,
                    self._bad_size,
                    self.receive_limit,
                )
            else:
                limited_log.log(
                    "bad-size",
                    logging.WARNING,
                    "Closing connection from %s: request size %d is outside 0..%d "
                    "(socket.request.max.bytes)",
                    self.peer,
                    self._bad_size,
                    self.server.max_request_size,
                )
            self.close()
            return
        self._account()
        self.update_reading()

    def _account(self) -> None:
        """Bring this connection's share of the memory pool up to date."""
        buffered = len(self._buffer)
        receiving = self._expected if self._large is not None else 0
        large = receiving + self._held_large + (self._in_flight if self._in_flight_large else 0)
        pooled = buffered + receiving + self._held + self._in_flight + self._write_held
        stranded = buffered if self.waiting else 0
        if (
            pooled != self._pooled
            or large != self._pooled_large
            or stranded != self._pooled_stranded
        ):
            deltas = (pooled - self._pooled, large - self._pooled_large)
            stranded_delta = stranded - self._pooled_stranded
            self._pooled, self._pooled_large, self._pooled_stranded = pooled, large, stranded
            self.server.pool.change(deltas[0], deltas[1], stranded_delta)

    def update_reading(self) -> None:
        """Read unless the stream has gone bad, the client does not read its responses or
        is throttled, plenty is read ahead behind a request in flight, a large frame waits
        for the memory pool, or the pool has no room for what this connection reads."""
        if self._closed:
            return
        reading = (
            self._bad_size is None
            and not self._write_paused
            and not self._throttled
            and not self.waiting
            and not (
                self._in_flight
                and len(self._buffer) + self._held + self._filled >= _READ_BUFFER_LIMIT
            )
        )
        if reading and self._large is None:  # a large frame being received is reserved
            reading = self.server.pool.may_read(self)
        self._set_reading(reading)

    def _set_reading(self, reading: bool) -> None:
        # Ask the transport, not a flag of ours: loop.sendfile pauses and resumes reading.
        transport = self.transport
        if transport is None or self._closed or transport.is_reading() == reading:
            return
        if reading:
            transport.resume_reading()
        else:
            transport.pause_reading()

    def throttle(self, delay_ms: int) -> None:
        """A quota was exceeded (KIP-219): the response goes out at once, then the channel
        is neither read nor handed another request for ``delay_ms`` (or longer, if it is
        muted longer already)."""
        if self._closed or delay_ms <= 0:
            return
        loop = asyncio.get_running_loop()
        until = loop.time() + delay_ms / 1000
        self._throttled = True
        self._set_reading(False)
        if until <= self._throttle_until and self._throttle_timer is not None:
            return
        if self._throttle_timer is not None:
            self._throttle_timer.cancel()
        self._throttle_until = until
        self._throttle_timer = loop.call_at(until, self._end_throttle)

    def _end_throttle(self) -> None:
        self._throttled = False
        self._throttle_timer = None
        self.next_request()

    # -- responses --------------------------------------------------------------------
    def send(self, parts: Sequence[Part], size: int) -> None:
        """Write one response (already headed, without the size prefix) and move on.

        Byte parts go through the transport; file regions go straight from the page
        cache to the socket with sendfile. Whatever cannot be sent without waiting is
        finished by a task, so the handler never blocks on a slow client.
        """
        # A transport closing on a failed send has not told connection_lost yet: writing
        # to it would only make asyncio warn ("socket.send() raised exception").
        if self._closed or self.transport is None or self.transport.is_closing():
            self._end_request()
            return
        queue: collections.deque[Part] = collections.deque(parts)
        queue.appendleft(size.to_bytes(4, "big"))
        if self._tls:
            self._unsent = queue
            self._send_rest_tls()
            return
        try:
            finished = self._pump(queue)
        except OSError as e:
            self._send_failed(e)
            return
        if finished:
            if self._write_paused:  # the response waits in the transport, in Python's memory
                self._write_held = self.transport.get_write_buffer_size()
            self.done()
        else:
            self._sender = self.server.spawn(self._finish(queue))

    def _pump(self, queue: collections.deque[Part]) -> bool:
        """Send queued parts while the socket takes them; True once all are sent."""
        transport = self.transport
        assert transport is not None
        pending: list[bytes] = []
        while queue:
            part = queue[0]
            if isinstance(part, bytes):
                pending.append(part)
                queue.popleft()
                continue
            if part.size <= _COPY_AT_MOST:
                pending.append(_read_region(part))
                queue.popleft()
                continue
            if pending:
                transport.writelines(pending)
                pending = []
            if transport.get_write_buffer_size():
                return False
            try:
                sent = os.sendfile(
                    transport.get_extra_info("socket").fileno(),
                    _open_fd(part),
                    part.position,
                    part.size,
                )
            except BlockingIOError:
                return False
            if sent == 0:
                raise OSError("the file region ends early (log truncated?)")
            if sent < part.size:
                region = part.region if isinstance(part, _Remainder) else part
                queue[0] = _Remainder(region, part.position + sent, part.size - sent)
                return False
            queue.popleft()
        if pending:
            transport.writelines(pending)
        return True

    def _send_rest_tls(self) -> None:
        """TLS: write the unsent parts while the transport takes them (until it pauses
        writing; resume_writing calls again). File regions are read _TLS_CHUNK at a time
        and written with the parts before them, so that small parts do not each become a
        TLS record and a socket write."""
        queue, transport = self._unsent, self.transport
        assert queue is not None and transport is not None
        pending: list[bytes] = []
        held = 0
        try:
            # Only a write pauses writing, and the last part is always written: nothing
            # is left pending when the loop ends.
            while queue and not self._write_paused:
                part = queue.popleft()
                if isinstance(part, bytes):
                    data = part
                else:
                    data = os.pread(_open_fd(part), min(part.size, _TLS_CHUNK), part.position)
                    if not data:
                        raise OSError("the file region ends early (log truncated?)")
                    if len(data) < part.size:
                        region = part.region if isinstance(part, _Remainder) else part
                        queue.appendleft(
                            _Remainder(region, part.position + len(data), part.size - len(data))
                        )
                pending.append(data)
                held += len(data)
                if held >= _TLS_CHUNK or not queue:
                    transport.write(pending[0] if len(pending) == 1 else b"".join(pending))
                    pending, held = [], 0
        except OSError as e:
            self._unsent = None
            self._send_failed(e)
            return
        if queue:
            return
        self._unsent = None
        if self._write_paused:  # the response's tail waits in the transport
            self._write_held = transport.get_write_buffer_size()
        self.done()

    async def _finish(self, queue: collections.deque[Part]) -> None:
        """Wait for the socket, sending the head region through the event loop, until done.

        The region is sent from a duplicate of its descriptor, so the file stays the same
        however long the client takes, even if the log closes it meanwhile."""
        transport = self.transport
        assert transport is not None
        try:
            while not self._pump(queue):
                part = queue.popleft()
                if isinstance(part, bytes):  # only regions stop the pump
                    raise RuntimeError("unexpected byte part at the head of the queue")
                with os.fdopen(os.dup(_open_fd(part)), "rb", buffering=0) as file:
                    sent = await asyncio.get_running_loop().sendfile(
                        transport, file, part.position, part.size
                    )
                if sent < part.size:
                    raise OSError("the file region ends early (log truncated?)")
                self.last_active = time.monotonic()
        except (OSError, RuntimeError) as e:
            self._send_failed(e)
            return
        finally:
            self._sender = None
        self.done()

    def _send_failed(self, error: Exception) -> None:
        limited_log.log(
            "send-failed",
            logging.INFO,
            "Closing connection from %s while sending a response: %s",
            self.peer,
            error,
        )
        self.close()

    def done(self) -> None:
        """The in-flight request is finished (answered, or needs no answer)."""
        self.last_active = time.monotonic()
        self._end_request()
        self.next_request()

    def close_later(self, delay_ms: int, last: bytes) -> None:
        """A failed authentication (connection.failed.authentication.delay.ms): nothing more
        is handled; after the delay ``last`` (a framed response, if any) is written and the
        connection closed."""

        def finish() -> None:
            if self._closed or self.transport is None:
                return
            if last:
                self.transport.write(last)
            self.close()

        asyncio.get_running_loop().call_later(delay_ms / 1000, finish)

    def close(self) -> None:
        """Close, ending the request in flight (closing is its answer, or its answer failed)."""
        self._closed = True
        self._unsent = None
        self._end_request()
        if self.transport is not None:
            self.transport.close()

    def _end_request(self) -> None:
        timing = self.timing
        if timing is not None:
            self.timing = None
            timing[METRICS].finish(timing, time.perf_counter_ns())
        self._in_flight = 0
        self._in_flight_large = False
        self._account()


def _read_region(region: FileRegion) -> bytes:
    data = os.pread(_open_fd(region), region.size, region.position)
    if len(data) < region.size:
        raise OSError("the file region ends early (log truncated?)")
    return data


def _open_fd(region: FileRegion) -> int:
    fd = region.fd
    if fd < 0:
        raise OSError("the segment was closed (deleted) before its bytes were sent")
    return fd


class SocketServer:
    """Listens on the configured listeners and runs the handler pool."""

    def __init__(
        self,
        handler: Callable[[Connection, bytes | bytearray], None],
        limits: Limits,
        quotas: ClientQuotas | None = None,
    ) -> None:
        self.handler = handler
        self.limits = limits
        # A request of a client whose quota group is throttled waits that long (ms).
        self.quota_gate: Callable[[str, bytes | bytearray], int] | None = (
            None if quotas is None else quotas.gate
        )
        self.rates = ConnectionRates(11, 1) if quotas is None else quotas.connections
        self.rates.set_limits(
            limits.max_connection_creation_rate, limits.listener_connection_creation_rates
        )
        self._listener_names: set[str] = set()
        self._security: dict[str, ListenerSecurity] = {}
        self._throttled_sockets: set[socket.socket] = set()  # closed after an IP's delay
        self.channel = RequestChannel(limits.queued_max_requests)
        self.pool = MemoryPool(limits.queued_max_request_bytes)
        self.max_request_size = limits.max_request_size
        self.connections: set[Connection] = set()
        # Told "<listener> <peer>" of each connection that closed (share sessions end).
        self.closed_listeners: list[Callable[[str], None]] = []
        self._per_ip: collections.Counter[str] = collections.Counter()
        self._accepted = 0  # connections admitted and not yet closed
        self._listening: list[socket.socket] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._workers: list[asyncio.Task[None]] = []
        self._handling = False
        self.read_chunk = memoryview(bytearray(_CHUNK))
        _tune_malloc()
        self.small_chunk = self.read_chunk[:_LARGE_FRAME]

    # -- accepting --------------------------------------------------------------------
    async def listen(
        self, name: str, host: str, port: int, security: ListenerSecurity | None = None
    ) -> int:
        """Start a listener (TLS if ``security`` has a context); return the bound port
        (useful when ``port`` is 0)."""
        loop = asyncio.get_running_loop()
        self._listener_names.add(name)
        if security is not None:
            self._security[name] = security
        for sock in _listening_sockets(host, port, self.limits.receive_buffer_bytes):
            self._listening.append(sock)
            loop.add_reader(sock.fileno(), self._accept, sock, name)
            port = sock.getsockname()[1]
        return port

    def _accept(self, sock: socket.socket, name: str) -> None:
        for _ in range(_ACCEPTS_PER_WAKEUP):
            try:
                conn, addr = sock.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as e:
                self._back_off(sock, name, e)
                return
            ip = _ip_of(addr[0])
            protected = self._protected(name)
            delay = self.rates.record_listener(name, protected, _now_ms())
            if delay > 0:
                self._wait_for_rate(sock, name, conn, ip, delay)
                return
            self._check_ip_rate(conn, ip, name, protected)

    def _protected(self, listener: str) -> bool:
        """The inter-broker listener, when there are others: only its own rate limits it."""
        return listener == self.limits.inter_broker_listener and len(self._listener_names) > 1

    def _wait_for_rate(
        self, sock: socket.socket, name: str, conn: socket.socket, ip: str, delay_ms: int
    ) -> None:
        """KIP-612: over the broker-wide or the listener's connection creation rate, the
        listener stops accepting for the delay (Kafka's acceptor waits); the connection that
        went over is admitted after it, the next ones wait in the listen backlog."""
        limited_log.log(
            "connection-rate",
            logging.INFO,
            "Connection creation rate on %s over max.connection.creation.rate: accepting "
            "paused for %d ms",
            name,
            delay_ms,
        )
        loop = asyncio.get_running_loop()
        loop.remove_reader(sock.fileno())
        self._throttled_sockets.add(conn)

        def resume() -> None:
            if conn not in self._throttled_sockets:  # closed by shutdown meanwhile
                return
            self._throttled_sockets.discard(conn)
            self._check_ip_rate(conn, ip, name, self._protected(name))
            if sock in self._listening:
                loop.add_reader(sock.fileno(), self._accept, sock, name)

        loop.call_later(delay_ms / 1000, resume)

    def _check_ip_rate(self, conn: socket.socket, ip: str, name: str, protected: bool) -> None:
        """KIP-612: a connection over its IP's connection_creation_rate is not counted and is
        closed after the delay that brings the IP's rate back to its quota (Kafka's
        ConnectionThrottledException); other addresses are served meanwhile."""
        delay = self.rates.record_ip(name, protected, ip, _now_ms())
        if delay <= 0:
            self._admit(conn, ip, name)
            return
        limited_log.log(
            "ip-connection-rate",
            logging.INFO,
            "Connection from %s over its connection_creation_rate quota: closing it in %d ms",
            ip,
            delay,
        )
        self._throttled_sockets.add(conn)

        def close() -> None:
            self._throttled_sockets.discard(conn)
            conn.close()

        asyncio.get_running_loop().call_later(delay / 1000, close)

    def _back_off(self, sock: socket.socket, name: str, error: OSError) -> None:
        """Stop accepting for a moment (descriptors or memory ran out, say), instead of
        retrying in a tight loop; the waiting clients stay in the listen backlog."""
        level = logging.WARNING if error.errno in _OUT_OF_RESOURCES else logging.ERROR
        limited_log.log(
            "accept",
            level,
            "Cannot accept connections on %s: %s; retrying in %.1fs",
            name,
            error,
            _ACCEPT_BACKOFF_S,
        )
        loop = asyncio.get_running_loop()
        loop.remove_reader(sock.fileno())

        def resume() -> None:
            if sock in self._listening:
                loop.add_reader(sock.fileno(), self._accept, sock, name)

        loop.call_later(_ACCEPT_BACKOFF_S, resume)

    def _admit(self, conn: socket.socket, ip: str, listener: str) -> None:
        """Kafka's connection quotas: beyond max.connections or the address's share the
        new connection is closed at once."""
        limits = self.limits
        ip_limit = limits.per_ip_overrides.get(ip, limits.max_connections_per_ip)
        if self._per_ip[ip] >= ip_limit:
            limited_log.log(
                "too-many-per-ip",
                logging.INFO,
                "Rejected connection from %s, address already has the configured maximum "
                "of %d connections (max.connections.per.ip)",
                ip,
                ip_limit,
            )
            conn.close()
            return
        if self._accepted >= limits.max_connections:
            limited_log.log(
                "too-many",
                logging.INFO,
                "Rejected connection from %s: the broker already has the configured maximum "
                "of %d connections (max.connections)",
                ip,
                limits.max_connections,
            )
            conn.close()
            return
        try:
            conn.setblocking(False)
            if conn.family in (socket.AF_INET, socket.AF_INET6):
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if limits.send_buffer_bytes != -1:
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, limits.send_buffer_bytes)
            if limits.receive_buffer_bytes != -1:
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, limits.receive_buffer_bytes)
        except OSError as e:  # the peer is already gone
            logger.debug("Dropping connection from %s: %s", ip, e)
            conn.close()
            return
        self._accepted += 1
        self._per_ip[ip] += 1
        self.spawn(self._connect(conn, ip, listener))

    async def _connect(self, conn: socket.socket, ip: str, listener: str) -> None:
        security = self._security.get(listener)
        if security is not None and security.tls is not None:
            await self._connect_tls(conn, ip, listener, security)
            return
        try:
            await asyncio.get_running_loop().connect_accepted_socket(
                lambda: Connection(self, listener, ip, security), conn
            )
        except OSError as e:
            logger.info("Dropping connection from %s: %s", ip, e)
            conn.close()
            self._release(ip)

    async def _connect_tls(
        self, conn: socket.socket, ip: str, listener: str, security: ListenerSecurity
    ) -> None:
        """The TLS handshake, bounded in time (its duration recorded); on failure the
        transport closes the socket and the reason is logged, rate-limited per kind (Kafka
        logs a failed authentication)."""
        assert security.tls is not None
        timeout = self.limits.tls_handshake_timeout_s
        started = time.perf_counter_ns()
        context = security.tls.context
        try:
            _, tls = await asyncio.get_running_loop().connect_accepted_socket(
                lambda: TlsTransport(
                    context,
                    lambda: Connection(self, listener, ip, security),
                    self.read_chunk,
                    timeout,
                    timeout,
                ),
                conn,
            )
            await tls.handshake
            security.handshake_done(time.perf_counter_ns() - started)
        except ssl.SSLError as e:
            if e.reason in _NOT_TLS:
                limited_log.log(
                    "tls-plaintext",
                    logging.WARNING,
                    "Closing connection from %s on TLS listener %s: it does not speak TLS "
                    "(a plaintext client?): %s",
                    ip,
                    listener,
                    e.reason,
                )
            else:
                limited_log.log(
                    "tls-handshake-failed",
                    logging.INFO,
                    "Failed authentication with %s on listener %s (SSL handshake failed): %s",
                    ip,
                    listener,
                    e.reason or e,
                )
            self._release(ip)
            e.__traceback__ = None  # see below
        except OSError as e:  # the handshake timed out, or the client left
            limited_log.log(
                "tls-handshake-aborted",
                logging.INFO,
                "Closing connection from %s on TLS listener %s during the handshake: %s",
                ip,
                listener,
                e,
            )
            self._release(ip)
            # The traceback holds this frame, whose ``tls`` holds the future holding ``e``:
            # a cycle only a full collection (rare: serve.py's gc thresholds) would free,
            # some 40 KB a failed handshake.
            e.__traceback__ = None

    def connection_closed(self, connection: Connection) -> None:
        self.connections.discard(connection)
        for listener in self.closed_listeners:
            listener(f"{connection.listener} {connection.peer}")
        self._release(connection.ip)

    def _release(self, ip: str) -> None:
        self._accepted -= 1
        self._per_ip[ip] -= 1
        if self._per_ip[ip] <= 0:
            del self._per_ip[ip]

    # -- handling ---------------------------------------------------------------------
    def start_handlers(self) -> None:
        self._workers = [asyncio.create_task(self._work()) for _ in range(self.limits.io_threads)]

    @property
    def handler_count(self) -> int:
        """The handler tasks running (num.io.threads once started)."""
        return len(self._workers)

    def reconfigure(self, limits: Limits) -> None:
        """New limits at run time (dynamic broker configs): the handler pool grows or
        shrinks to ``io_threads`` (Kafka's resizeThreadPool; a retired handler finishes
        the request it is handling first: handling never awaits), and the connection
        limits apply to the next connections accepted."""
        self.limits = limits
        self.rates.set_limits(
            limits.max_connection_creation_rate, limits.listener_connection_creation_rates
        )
        if not self._workers:  # not started yet: start_handlers() takes the new size
            return
        before = len(self._workers)
        if before != limits.io_threads:
            logger.info(
                "Resizing the request handler pool from %d to %d (num.io.threads)",
                before,
                limits.io_threads,
            )
        while len(self._workers) < limits.io_threads:
            self._workers.append(asyncio.create_task(self._work()))
        while len(self._workers) > limits.io_threads:
            self._workers.pop().cancel()

    def spawn(self, coro: Awaitable[None]) -> asyncio.Future[None]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def dispatch(self, request: Request) -> None:
        """Handle the request now if nothing is queued or running, else queue it. A frame
        that becomes ready while a handler runs (its predecessor was answered at once) is
        queued, so a pipelining client takes turns with the others. Until the handlers
        start (a cluster broker listens before it has joined), requests wait in the queue."""
        if self._handling or not self.channel.empty or not self._workers:
            self.channel.submit(request)
        else:
            self._handle(request)

    async def _work(self) -> None:
        while True:
            self._handle(await self.channel.take())
            # take() does not suspend while requests are queued: yield, so that other
            # connections are read (and timers run) between two queued requests.
            await asyncio.sleep(0)

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
                limited_log.log(
                    "idle", logging.INFO, "Closing idle connection from %s", connection.peer
                )
                connection.close()

    async def stop_accepting(self) -> None:
        loop = asyncio.get_running_loop()
        for sock in self._listening:
            loop.remove_reader(sock.fileno())
            sock.close()
        self._listening = []
        for conn in self._throttled_sockets:
            conn.close()
        self._throttled_sockets.clear()

    async def drain(self, timeout: float) -> None:
        """Let in-flight work finish (bounded by ``timeout``), then close everything."""
        deadline = time.monotonic() + timeout
        while self._tasks and time.monotonic() < deadline:
            await asyncio.wait(list(self._tasks), timeout=deadline - time.monotonic())
        for worker in self._workers:
            worker.cancel()
        for connection in list(self.connections):
            connection.close()


def _listening_sockets(host: str, port: int, receive_buffer: int) -> list[socket.socket]:
    """Non-blocking listening sockets on every address ``host`` resolves to (all interfaces
    when empty), as asyncio's create_server binds them; with port 0 they share the port
    the first one got. The receive buffer is set before listen(), as in Kafka, so the TCP
    window scale offered to clients can use it."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    try:
        for family, _, _, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if receive_buffer != -1:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
            if port == 0 and len(sockets) > 1:
                address = (address[0], sockets[0].getsockname()[1], *address[2:])
            try:
                sock.bind(address)
            except OSError as e:
                raise OSError(
                    e.errno,
                    f"cannot listen on {address[0]}:{address[1]!s}: "
                    f"{(e.strerror or str(e)).lower()}",
                ) from None
            sock.listen(512)
            sock.setblocking(False)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


# Allocations at least this large get pages of their own from the kernel, returned when
# freed (glibc's M_MMAP_THRESHOLD). By default glibc raises the threshold to the size of
# each such block freed, up to 32 MiB, after which buffers of up to 32 MiB come from the
# heap, whose freed memory stays mapped: 90 MiB frames grown by doubling left some 40 MiB
# of heap behind, beyond queued.max.request.bytes (peak RSS 178 MB for one connection
# streaming them, 141 MB with it fixed). Setting it fixes it (and turns the adjustment
# off); buffers under it (produce requests up to 16 MiB) still reuse heap memory: at 4 MiB,
# 8 MiB frames were received about 6 % slower, at 16 MiB about 3 % (within the noise).
_MMAP_THRESHOLD = 16 << 20
# Free memory at the top of the heap kept for reuse (glibc's M_TRIM_THRESHOLD, 128 KiB once
# the thresholds are set): at that default each freed 1 MiB produce buffer was handed back
# and the next one faulted in afresh, 200,000 page faults per GiB produced (500-2,000 with
# this; on a VM that reports free pages to its host, each fault is a round trip). More is
# not better: at 64 MiB the fuzz's peak RSS rose from 232 to 276-288 MB, the kept heap
# unusable for the larger blocks that are mapped apart.
_TRIM_THRESHOLD = 8 << 20
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def _tune_malloc() -> None:
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc: its allocator decides
        return
    mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)
    mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD)


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


def _ip_of(address: str) -> str:
    """The peer's address as operators write it (an IPv4 client of a dual-stack listener
    shows as ::ffff:a.b.c.d)."""
    return normalize_ip(address) or address
