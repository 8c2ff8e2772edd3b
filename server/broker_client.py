"""The client one broker uses to send requests to another (controller and replica fetchers).

One connection per node, opened on first use; requests are pipelined on it and matched to
responses by correlation id. As Kafka's NetworkClient does, a request that times out
closes its connection (the bytes of its late response would otherwise still be owed on
it), and after any disconnect or failed connect the next attempt waits an exponential
back-off (``reconnect.backoff.ms`` 50 doubling up to ``reconnect.backoff.max.ms`` 1000,
with 20% jitter), reset once a connection succeeds.

Security, as Kafka's inter-broker clients: the inter-broker listener's security protocol and
this broker's own settings of that listener (``inter_broker_client_settings``): its
keystore and truststore for TLS, ``sasl.mechanism.inter.broker.protocol`` with the
listener's JAAS ``username``/``password`` for SASL. A connection is ready once TLS and SASL
are done (within connection.setup.timeout.ms); when the broker grants a session lifetime
(KIP-368) it is re-authenticated in band before it expires, sends waiting meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import random
import struct
import time
from collections.abc import Callable, Mapping
from typing import Any

from gregor.server.security.client_security import ClientSecurity
from gregor.server.security.sasl.mechanism import mechanism_setting
from gregor.server.security.sasl_client import (
    SaslAuthenticationFailed,
    exchange,
    reauthentication_delay_s,
)
from gregor.wire.headers import skip_tagged_fields
from gregor.wire.interbroker import LeaderAndIsrRequest, StopReplicaRequest, UpdateMetadataRequest
from gregor.wire.interbroker_decode import RESPONSE_DECODERS
from gregor.wire.schema import decode, encode, response_type
from gregor.wire.versions import API_VERSIONS

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
_HEAD = struct.Struct(">ihhih")  # frame size, api key, api version, correlation id, len(client id)
_JITTER = 0.2
_CONTROLLER_REQUESTS = (LeaderAndIsrRequest, UpdateMetadataRequest, StopReplicaRequest)
# The largest response frame taken: socket.request.max.bytes's default, the most a broker
# takes from a peer. A follower's Fetch answers hold replica.fetch.response.max.bytes (10 MiB).
MAX_RESPONSE_BYTES = 104_857_600


class BrokerUnavailable(ConnectionError):
    """The node is unknown, cannot be reached, or its connection was lost mid-request."""


class AuthenticationFailed(BrokerUnavailable):
    """The node refused this broker's SASL mechanism or credentials."""


class RequestTimedOut(TimeoutError):
    """No response within request.timeout.ms; the connection has been closed."""


def inter_broker_client_settings(listener: Mapping[str, str], protocol: str) -> dict[str, str]:
    """Kafka client properties for connections to the other brokers, from the inter-broker
    listener's resolved settings (``server/config.py``'s ``listener_settings``) and its
    security ``protocol``: its ``ssl.*`` keys; for SASL the mechanism
    ``sasl.mechanism.inter.broker.protocol`` (Kafka's default GSSAPI, which Gregor refuses)
    and that mechanism's ``<mechanism>.sasl.jaas.config``, whose username/password log in."""
    settings = {k: v for k, v in listener.items() if k.startswith("ssl.")}
    settings["security.protocol"] = protocol
    if protocol.startswith("SASL_"):
        mechanism = listener.get("sasl.mechanism.inter.broker.protocol", "GSSAPI")
        settings["sasl.mechanism"] = mechanism
        jaas = mechanism_setting(listener, mechanism, "sasl.jaas.config")
        if jaas is not None:
            settings["sasl.jaas.config"] = jaas
    return settings


class _Connection(asyncio.BufferedProtocol):
    """One open socket to a node and its in-flight requests by correlation id.

    Each response frame is received straight into a buffer of its own size, over TLS
    too (asyncio's TLS transport decrypts into ``get_buffer``): the kernel's copy (or the
    decryption) is the only one, and a Fetch response's records are handed on as a view of
    that buffer (``gregor.wire.tagged``). A size prefix above ``max_response_bytes`` (or
    below a correlation id's) closes the connection before anything is allocated.
    """

    def __init__(self, node_id: int, max_response_bytes: int) -> None:
        self.node_id = node_id
        self.max_response_bytes = max_response_bytes
        self.transport: asyncio.Transport | None = None
        self.in_flight: dict[int, asyncio.Future[bytearray]] = {}
        self.next_correlation = 0
        self.open = True
        self.closed_at = 0.0
        self.reauth_timer: asyncio.TimerHandle | None = None
        self.reauthenticating: asyncio.Task[None] | None = None  # sends wait for it
        self._size = bytearray(_SIZE.size)  # the next frame's size prefix
        self._frame: bytearray | None = None  # the frame being received, once sized
        self._target = memoryview(self._size)  # what the next read fills
        self._filled = 0
        self._drained: asyncio.Future[None] | None = None  # set while writes are paused
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    # -- asyncio.BufferedProtocol -----------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._target[self._filled :]

    def buffer_updated(self, nbytes: int) -> None:
        self._filled += nbytes
        if self._filled < len(self._target) or not self.open:  # closed: bytes still decrypted
            return
        self._filled = 0
        frame = self._frame
        if frame is None:
            size = _SIZE.unpack(self._size)[0]
            if not _SIZE.size <= size <= self.max_response_bytes:
                self._protocol_error(
                    f"a response frame of {size} bytes (at most {self.max_response_bytes})"
                )
                return
            frame = self._frame = bytearray(size)
            self._target = memoryview(frame)
            return
        self._frame = None
        self._target = memoryview(self._size)
        correlation = _SIZE.unpack_from(frame)[0]
        waiter = self.in_flight.pop(correlation, None)
        if waiter is None:
            self._protocol_error(f"unknown correlation id {correlation}")
        elif not waiter.done():  # done: cancelled by its caller
            waiter.set_result(frame)

    def eof_received(self) -> None:
        self.close(BrokerUnavailable(f"connection to node {self.node_id} closed by the node"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.close(BrokerUnavailable(f"connection to node {self.node_id} lost: {exc!r}"))
        self.lost.set_result(None)
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)  # the waiters find the connection closed

    def pause_writing(self) -> None:
        self._drained = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        self._drained = None

    # -- used by InterBrokerClient ------------------------------------------------------
    async def write(self, data: bytes) -> None:
        """Write ``data``; wait while the socket's write buffer is above its high mark."""
        assert self.transport is not None
        self.transport.write(data)
        if self._drained is not None:
            await asyncio.shield(self._drained)
        if not self.open:
            raise ConnectionResetError("connection closed")

    def _protocol_error(self, what: str) -> None:
        log.warning("node %d sent %s; closing the connection", self.node_id, what)
        self.close(BrokerUnavailable(f"node {self.node_id} sent {what}"))

    def close(self, error: BrokerUnavailable) -> None:
        """Abort the socket and fail whatever is still waiting on it (idempotent)."""
        if self.open:
            self.open = False
            self.closed_at = time.monotonic()
            if self.transport is not None:
                self.transport.abort()
            if self.reauth_timer is not None:
                self.reauth_timer.cancel()
            if self.reauthenticating not in (None, asyncio.current_task()):
                self.reauthenticating.cancel()
        waiters, self.in_flight = self.in_flight, {}
        for waiter in waiters.values():
            if not waiter.done():
                waiter.set_exception(error)


class _Node:
    """Connection state of one node: the live connection and the reconnect back-off."""

    def __init__(self) -> None:
        self.connection: _Connection | None = None
        self.connecting = asyncio.Lock()
        self.attempts = 0  # connects tried, so sends queued behind a failed one fail with it
        self.last_error = ""
        self.failed_attempts = 0  # since the last successful connect; sets the back-off
        self.retry_at = 0.0  # monotonic time before which no new connect is attempted


class InterBrokerClient:
    def __init__(
        self,
        client_id: str,
        endpoint_of: Callable[[int], tuple[str, int] | None],
        request_timeout_ms: int,
        *,
        reconnect_backoff_ms: int = 50,
        reconnect_backoff_max_ms: int = 1000,
        connection_setup_timeout_ms: int = 10_000,
        client_settings: Mapping[str, str] | None = None,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
    ) -> None:
        """``client_settings``: Kafka client properties of the connections' security
        (``inter_broker_client_settings``); None: PLAINTEXT. A bad one raises ValueError.
        A response frame above ``max_response_bytes`` closes its connection."""
        self._security = ClientSecurity.from_properties(client_settings)
        self._client_id = client_id.encode()
        self._endpoint_of = endpoint_of
        self._timeout = request_timeout_ms / 1000
        self._backoff = reconnect_backoff_ms / 1000
        self._backoff_max = reconnect_backoff_max_ms / 1000
        self._setup_timeout = connection_setup_timeout_ms / 1000
        self._max_response = max_response_bytes
        self._nodes: dict[int, _Node] = {}
        self._closed = False

    async def send(self, node_id: int, request: Any, api_version: int) -> Any:
        """Send ``request`` to ``node_id`` and return its decoded response.

        Raises BrokerUnavailable (unknown node, connect failure, connection lost) or
        RequestTimedOut (no answer within request.timeout.ms; the connection is closed).
        A node in reconnect back-off is waited for (at most reconnect.backoff.max.ms + 20%)
        before the connect is tried; sends queued behind a failing connect fail with it.
        """
        if request.__version__ != api_version:
            name = type(request).__name__
            raise ValueError(f"{name} is v{request.__version__}, not v{api_version}")
        connection = await self._connection(node_id)
        while connection.reauthenticating is not None:
            await asyncio.wait((connection.reauthenticating,))  # never raises
            connection = await self._connection(node_id)  # a failed one closed it
        # Encoded once connected: a controller retrying a request of 10,000 partitions to a
        # broker that is restarting would otherwise encode it again every back-off. A
        # controller's request is encoded on a thread: one of 50,000 partitions holds the
        # loop for a tenth of a second or more, and the answer to the event that made it
        # (a ControlledShutdown) would wait behind every broker's.
        if type(request) in _CONTROLLER_REQUESTS:
            body = await asyncio.to_thread(encode, request)
        else:
            body = encode(request)
        frame = await self._exchange(connection, request, body)
        return self._decode(request, frame)

    async def _exchange(self, connection: _Connection, request: Any, body: bytes) -> bytearray:
        """Write ``request`` (its encoded ``body``) and return its response frame."""
        api_key, api_version = request.__api_key__, request.__version__
        flexible = request.__flexible__
        correlation = connection.next_correlation
        connection.next_correlation = (correlation + 1) & 0x7FFFFFFF
        extra = 1 if flexible else 0  # the header's empty tagged-field section
        size = _HEAD.size - 4 + len(self._client_id) + extra + len(body)
        head = _HEAD.pack(size, api_key, api_version, correlation, len(self._client_id))
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bytearray] = loop.create_future()
        connection.in_flight[correlation] = waiter
        timer = loop.call_later(self._timeout, self._expire, connection, correlation)
        try:
            try:
                tags = b"\x00" if flexible else b""
                await connection.write(head + self._client_id + tags + body)
            except (OSError, RuntimeError) as e:  # fails the waiter unless it already failed
                lost = f"connection to node {connection.node_id} lost: {e!r}"
                connection.close(BrokerUnavailable(lost))
            return await waiter
        finally:
            timer.cancel()

    @staticmethod
    def _decode(request: Any, frame: bytearray) -> Any:
        api_key, flexible = request.__api_key__, request.__flexible__
        pos = 4
        # ApiVersions answers with header v0 at every version, so any client can parse it.
        if flexible and api_key != API_VERSIONS:
            pos = skip_tagged_fields(frame, pos)
        fast = RESPONSE_DECODERS.get((api_key, request.__version__))
        if fast is not None:
            return fast(frame, pos)
        return decode(response_type(api_key, request.__version__), memoryview(frame), pos)

    async def close(self) -> None:
        """Close every connection; waiting and later sends raise BrokerUnavailable."""
        self._closed = True
        tasks = []
        for node in self._nodes.values():
            if node.connection is not None:
                node.connection.close(BrokerUnavailable("inter-broker client closed"))
                tasks.append(node.connection.lost)  # the socket is closed
                if node.connection.reauthenticating is not None:
                    tasks.append(node.connection.reauthenticating)
        self._nodes.clear()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _expire(self, connection: _Connection, correlation: int) -> None:
        waiter = connection.in_flight.pop(correlation, None)
        if waiter is None or waiter.done():
            return
        waiter.set_exception(
            RequestTimedOut(
                f"no response from node {connection.node_id} within {self._timeout * 1000:.0f} ms"
            )
        )
        log.info(
            "Disconnecting from node %d due to request timeout (correlation id %d)",
            connection.node_id,
            correlation,
        )
        connection.close(BrokerUnavailable(f"connection to node {connection.node_id} timed out"))

    async def _connection(self, node_id: int) -> _Connection:
        if self._closed:
            raise BrokerUnavailable("inter-broker client closed")
        node = self._nodes.get(node_id)
        if node is None:
            node = self._nodes[node_id] = _Node()
        live = node.connection
        if live is not None and live.open:
            return live
        attempts = node.attempts
        async with node.connecting:  # concurrent sends share one connect attempt
            live = node.connection
            if live is not None:
                if live.open:
                    return live
                node.connection = None  # lost: back off as Kafka does after any disconnect
                self._back_off(node, live.closed_at)
            elif node.attempts != attempts:
                # The attempt made while this send waited failed; do not queue another.
                raise BrokerUnavailable(node.last_error)
            endpoint = self._endpoint_of(node_id)
            if endpoint is None:
                raise BrokerUnavailable(f"node {node_id} has no known endpoint")
            await asyncio.sleep(max(0.0, node.retry_at - time.monotonic()))
            host, port = endpoint
            node.attempts += 1
            try:
                connection = await asyncio.wait_for(
                    self._open(node_id, host, port), self._setup_timeout
                )
            except AuthenticationFailed as e:
                if str(e) != node.last_error:  # once per failure, not per retry
                    log.error("Connection to node %d (%s:%d) %s", node_id, host, port, e)
                node.last_error = str(e)
                self._back_off(node, time.monotonic())
                raise
            except (OSError, TimeoutError, BrokerUnavailable) as e:
                node.last_error = f"cannot connect to node {node_id} at {host}:{port}: {e!r}"
                self._back_off(node, time.monotonic())
                raise BrokerUnavailable(node.last_error) from e
            if self._closed:
                connection.close(BrokerUnavailable("inter-broker client closed"))
                raise BrokerUnavailable("inter-broker client closed")
            node.failed_attempts = 0
            node.connection = connection
            return connection

    async def _open(self, node_id: int, host: str, port: int) -> _Connection:
        """A connection to ``host:port``, TLS and SASL done."""
        tls = self._security.tls
        _, connection = await asyncio.get_running_loop().create_connection(
            lambda: _Connection(node_id, self._max_response),
            host,
            port,
            ssl=tls,
            server_hostname=host if tls else None,
        )
        if self._security.sasl is not None:
            try:
                await self._authenticate(connection)
            except BaseException as e:
                connection.close(BrokerUnavailable(f"connection to node {node_id}: {e!r}"))
                raise
        return connection

    async def _authenticate(self, connection: _Connection) -> None:
        """The SASL exchange on ``connection``; re-authentication is scheduled when the node
        grants a session lifetime. Raises AuthenticationFailed, BrokerUnavailable or
        RequestTimedOut."""
        assert self._security.sasl is not None
        steps = exchange(self._security.sasl())
        try:
            request = next(steps)
            while True:
                frame = await self._exchange(connection, request, encode(request))
                request = steps.send(self._decode(request, frame))
        except StopIteration as done:
            lifetime_ms: int = done.value
        except SaslAuthenticationFailed as e:
            raise AuthenticationFailed(f"failed authentication due to: {e}") from None
        if lifetime_ms > 0:
            connection.reauth_timer = asyncio.get_running_loop().call_later(
                reauthentication_delay_s(lifetime_ms), self._start_reauthentication, connection
            )

    def _start_reauthentication(self, connection: _Connection) -> None:
        connection.reauth_timer = None
        if connection.open:
            task = asyncio.get_running_loop().create_task(self._reauthenticate(connection))
            connection.reauthenticating = task

    async def _reauthenticate(self, connection: _Connection) -> None:
        """KIP-368 in band; on failure the connection is closed (the next send connects and
        authenticates anew)."""
        try:
            await self._authenticate(connection)
        except Exception as e:  # a refusal, a lost connection, a garbled answer
            log.warning("Re-authentication with node %d failed: %s", connection.node_id, e)
            connection.close(BrokerUnavailable(f"re-authentication failed: {e}"))
        finally:
            connection.reauthenticating = None

    def _back_off(self, node: _Node, since: float) -> None:
        backoff = min(self._backoff * 2**node.failed_attempts, self._backoff_max)
        node.failed_attempts += 1
        node.retry_at = since + backoff * random.uniform(1 - _JITTER, 1 + _JITTER)
