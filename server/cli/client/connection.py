"""A small blocking Kafka client for tools (the ``gregor`` CLI, the pytest plugin): one
socket per broker, one request at a time, kio's schemas for the bodies.

It speaks to any Kafka-compatible broker at fixed API versions every broker since Kafka 2.4
answers, like Kafka's own tools through the Admin client: requests that need the controller
go to the node Metadata names, a group's requests to the coordinator FindCoordinator names,
the others to the bootstrap broker. As the Admin client does, a controller or coordinator
that moved, is not elected yet or cannot be reached (it crashed) is found again and the
request retried until the client's timeout.

Security is Kafka's client properties (``--command-config``; ``ClientSecurity``): each
connection is wrapped in TLS and authenticated with SASL before its first request, and
re-authenticated in band (KIP-368) when its session is about to expire and no request is
in flight.
"""

from __future__ import annotations

import dataclasses
import socket
import struct
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from types import TracebackType
from typing import Any, Self

from gregor.server.security.client_security import ClientSecurity
from gregor.server.security.sasl_client import (
    SaslAuthenticationFailed,
    exchange,
    reauthentication_delay_s,
)
from gregor.wire.headers import skip_tagged_fields
from gregor.wire.schema import decode, encode, request_type, response_type
from gregor.wire.versions import API_VERSIONS, FIND_COORDINATOR

_SIZE = struct.Struct(">i")
_HEAD = struct.Struct(">hhih")  # api key, api version, correlation id, len(client id)
RETRY_BACKOFF_S = 0.1  # Kafka's retry.backoff.ms
# Answers meaning the controller or a group's coordinator is elsewhere, or still taking over.
CONTROLLER_MOVED = frozenset({"not_controller"})
COORDINATOR_MOVED = frozenset(
    {"not_coordinator", "coordinator_not_available", "coordinator_load_in_progress"}
)


PLAINTEXT = ClientSecurity()


class ClientError(Exception):
    """A broker could not be reached, or it answered with an error code."""


class Unreachable(ClientError):
    """A connection to a broker could not be made, or failed during a request."""


class ClientConfigError(ClientError):
    """Client properties that make no connection (a bad security.protocol, ssl.* or sasl.*)."""


class AuthenticationFailed(ClientError):
    """The broker refused the client's SASL mechanism or credentials."""


def schema(api_key: int, version: int, name: str | None = None) -> type:
    """The request class of an API version, or the nested entity ``name`` next to it."""
    cls = request_type(api_key, version)
    return cls if name is None else getattr(sys.modules[cls.__module__], name)


def error_codes(entity: Any) -> Iterator[Any]:
    """Every ``error_code`` in a decoded answer, its nested entities' included."""
    for f in dataclasses.fields(entity):
        value = getattr(entity, f.name)
        if f.name == "error_code":
            yield value
        for item in value if isinstance(value, tuple) else (value,):
            if dataclasses.is_dataclass(item):
                yield from error_codes(item)


def parse_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    """``host:port[,host:port...]`` as Kafka's ``--bootstrap-server`` takes it."""
    servers = []
    for item in bootstrap.split(","):
        host, sep, port = item.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ClientError(f"bootstrap server must look like host:port, got {item!r}")
        servers.append((host.strip("[]"), int(port)))
    return servers


class Connection:
    """One socket to one broker; requests are sent and answered one at a time."""

    def __init__(
        self,
        host: str,
        port: int,
        client_id: str,
        timeout_s: float,
        node_id: int = -1,
        security: ClientSecurity = PLAINTEXT,
    ) -> None:
        try:
            sock = socket.create_connection((host, port), timeout=timeout_s)
        except OSError as e:
            raise Unreachable(f"cannot connect to {host}:{port}: {e}") from e
        try:
            tls = security.tls
            self._sock = sock if tls is None else tls.wrap_socket(sock, server_hostname=host)
        except OSError as e:  # ssl.SSLError included: a refused certificate, a plaintext port
            sock.close()
            raise Unreachable(f"TLS handshake with {host}:{port} failed: {e}") from e
        self.broken = False  # a request failed on it: it is closed and not used again
        self.address = f"{host}:{port}"
        self.node_id = node_id  # -1 for a bootstrap server
        self._client_id = client_id.encode()
        self._correlation = 0
        # Requests sent and not yet answered, oldest first: brokers answer in order.
        self._pending: deque[tuple[int, Any]] = deque()
        self._sasl = security.sasl
        self._reauthenticate_at: float | None = None  # monotonic; None: no session limit
        if self._sasl is not None:
            try:
                self._authenticate()
            except ClientError:
                self.close()
                raise

    def _authenticate(self) -> None:
        """The SASL exchange; a refusal breaks the connection (it is not used again)."""
        assert self._sasl is not None
        self._reauthenticate_at = None
        steps = exchange(self._sasl())
        try:
            request = next(steps)
            while True:
                request = steps.send(self.call(request))
        except StopIteration as done:
            lifetime_ms: int = done.value
        except SaslAuthenticationFailed as e:
            self.broken = True
            raise AuthenticationFailed(f"authentication with {self.address} failed: {e}") from None
        if lifetime_ms > 0:
            self._reauthenticate_at = time.monotonic() + reauthentication_delay_s(lifetime_ms)

    def call(self, request: Any) -> Any:
        """Send ``request`` (a kio entity) and return its decoded response."""
        self.send(request)
        return self.receive()

    def send(self, request: Any, *, expect_response: bool = True) -> None:
        """Send ``request`` without waiting; ``receive`` returns the answers in order. A
        Produce with acks=0 gets no answer (``expect_response=False``)."""
        due = self._reauthenticate_at
        if due is not None and not self._pending and time.monotonic() >= due:
            self._authenticate()
        api_key, version = request.__api_key__, request.__version__
        self._correlation += 1
        head = _HEAD.pack(api_key, version, self._correlation, len(self._client_id))
        tags = b"\x00" if request.__flexible__ else b""
        payload = head + self._client_id + tags + encode(request)
        try:
            self._sock.sendall(_SIZE.pack(len(payload)) + payload)
        except OSError as e:
            raise self._failed(e) from e
        if expect_response:
            self._pending.append((self._correlation, type(request)))

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def fileno(self) -> int:
        """The socket's, for ``select`` over several connections' answers."""
        return self._sock.fileno()

    def receive(self) -> Any:
        """The decoded answer to the oldest request sent and not yet answered."""
        return self.decode(*self.receive_frame())

    def receive_frame(self) -> tuple[type[Any], bytes]:
        """The oldest unanswered request's type and its answer's frame, not yet decoded
        (``decode`` does that: a caller timing the broker leaves its own decoding out)."""
        correlation, request_type = self._pending.popleft()
        try:
            frame = self._recv(_SIZE.unpack(self._recv(4))[0])
        except OSError as e:
            raise self._failed(e) from e
        if _SIZE.unpack_from(frame)[0] != correlation:
            raise ClientError(f"{self.address} answered out of order")
        return request_type, frame

    @staticmethod
    def decode(request_type: type[Any], frame: bytes) -> Any:
        """The answer in ``frame`` (from ``receive_frame``) to a request of ``request_type``."""
        api_key, version = request_type.__api_key__, request_type.__version__
        pos = 4
        # ApiVersions answers with header v0 at every version, so any client can parse it.
        if request_type.__flexible__ and api_key != API_VERSIONS:
            pos = skip_tagged_fields(frame, pos)
        return decode(response_type(api_key, version), frame, pos)

    def _failed(self, error: OSError) -> Unreachable:
        self.broken = True
        return Unreachable(f"request to {self.address} failed: {error}")

    def _recv(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self._sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self._sock.close()


class Client:
    """Connections to the brokers of one cluster, found from its bootstrap servers."""

    def __init__(
        self,
        bootstrap: str,
        client_id: str = "gregor-cli",
        timeout_s: float = 30.0,
        config: Mapping[str, str] | None = None,
    ) -> None:
        """``config``: Kafka client properties; the security ones (``security.protocol``,
        ``ssl.*``, ``sasl.*``) apply, the others are ignored."""
        self._servers = parse_bootstrap(bootstrap)
        try:
            self._security = ClientSecurity.from_properties(config)
        except ValueError as e:
            raise ClientConfigError(str(e)) from None
        self._client_id = client_id
        self.timeout_s = timeout_s
        self._nodes: dict[int, Connection] = {}
        self._bootstrap: Connection | None = None
        self._coordinators: dict[str, Connection] = {}  # by group, as last found

    def bootstrap(self) -> Connection:
        """A connection to the first bootstrap server that accepts one."""
        if self._bootstrap is None:
            errors = []
            for host, port in self._servers:
                try:
                    self._bootstrap = Connection(
                        host, port, self._client_id, self.timeout_s, security=self._security
                    )
                    break
                except Unreachable as e:
                    errors.append(str(e))
            else:
                raise ClientError("; ".join(errors))
        return self._bootstrap

    def call(self, request: Any) -> Any:
        return self.bootstrap().call(request)

    def metadata(self, topics: list[str] | None, *, auto_create: bool = False) -> Any:
        """Metadata v9 of ``topics`` (None: every topic); ``auto_create`` lets the broker
        create missing ones, as a producer's Metadata does."""
        cls = schema(3, 9)
        wanted = None
        if topics is not None:
            wanted = tuple(schema(3, 9, "MetadataRequestTopic")(name=t) for t in topics)
        return self.call(
            cls(
                topics=wanted,
                allow_auto_topic_creation=auto_create,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            )
        )

    def call_controller(self, request: Any) -> Any:
        """Send to the controller (CreateTopics, DeleteTopics, CreatePartitions); while
        Metadata names none (an election), or the one it names cannot be reached (it
        crashed, and its ZooKeeper session has not expired yet) or answers NOT_CONTROLLER,
        ask Metadata again and retry."""

        def controller() -> Connection | None:
            meta = self.metadata([])
            if all(b.node_id != meta.controller_id for b in meta.brokers):
                return None
            return self.node(meta.controller_id, meta.brokers)

        return self._retrying(controller, request, CONTROLLER_MOVED, "the controller")

    def call_coordinator(self, group_id: str, request: Any) -> Any:
        """Send to ``group_id``'s coordinator; when it cannot be reached or answers that it
        is not (or not yet) the coordinator, find it again and retry."""

        def forget() -> None:
            self._coordinators.pop(group_id, None)

        return self._retrying(
            lambda: self.coordinator(group_id),
            request,
            COORDINATOR_MOVED,
            f"the coordinator of group {group_id!r}",
            forget,
        )

    def _retrying(
        self,
        find: Callable[[], Connection | None],
        request: Any,
        moved: frozenset[str],
        what: str,
        forget: Callable[[], None] = lambda: None,
    ) -> Any:
        """``request`` to the broker ``find`` names, again (after ``forget``) while none is
        named, it cannot be reached or its answer holds an error of ``moved``, until the
        timeout. An unreachable bootstrap fails at once."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                connection = find()
                if connection is None:
                    failure = f"{what} is not known"
                else:
                    answer = connection.call(request)
                    codes = moved & {code.name for code in error_codes(answer)}
                    if not codes:
                        return answer
                    failure = f"{what} answered {', '.join(sorted(codes)).upper()}"
            except Unreachable as e:
                failure = str(e)
            self._drop_broken()
            forget()
            if time.monotonic() > deadline:
                raise ClientError(f"{failure} (retried for {self.timeout_s:.0f} s)")
            time.sleep(RETRY_BACKOFF_S)

    def _drop_broken(self) -> None:
        """Forget the connections a request failed on: the next one connects again."""
        if self._bootstrap is not None and self._bootstrap.broken:
            self._bootstrap.close()
            self._bootstrap = None
        for node_id, connection in list(self._nodes.items()):
            if connection.broken:
                connection.close()
                del self._nodes[node_id]
        self._coordinators = {g: c for g, c in self._coordinators.items() if not c.broken}

    def node(self, node_id: int, brokers: Any) -> Connection:
        """The connection to broker ``node_id`` of a Metadata answer's ``brokers``."""
        if node_id not in self._nodes:
            for broker in brokers:
                if broker.node_id == node_id:
                    return self._connect(node_id, broker.host, broker.port)
            raise ClientError(f"no broker {node_id} in the cluster's metadata")
        return self._nodes[node_id]

    def _connect(self, node_id: int, host: str, port: int) -> Connection:
        if node_id not in self._nodes:
            self._nodes[node_id] = Connection(
                host, port, self._client_id, self.timeout_s, node_id, self._security
            )
        return self._nodes[node_id]

    def all_brokers(self) -> list[Connection]:
        """A connection to every broker of the cluster (ListGroups asks each one)."""
        brokers = self.metadata([]).brokers
        return [self.node(b.node_id, brokers) for b in sorted(brokers, key=lambda b: b.node_id)]

    def coordinator(self, group_id: str) -> Connection:
        """The connection to ``group_id``'s coordinator (FindCoordinator v3), as last found.
        The first lookup of a cluster creates ``__consumer_offsets``:
        COORDINATOR_NOT_AVAILABLE until it is ready is waited out, as clients do."""
        if group_id in self._coordinators:
            return self._coordinators[group_id]
        request = schema(FIND_COORDINATOR, 3)(key=group_id, key_type=0)
        deadline = time.monotonic() + self.timeout_s
        while True:
            answer = self.call(request)
            code = answer.error_code
            if code.value == 0:
                found = self._connect(answer.node_id, answer.host, answer.port)
                self._coordinators[group_id] = found
                return found
            if not code.retriable or time.monotonic() > deadline:
                raise ClientError(f"group {group_id!r}: no coordinator: {code.name.upper()}")
            time.sleep(RETRY_BACKOFF_S)

    def close(self) -> None:
        for connection in [self._bootstrap, *self._nodes.values()]:
            if connection is not None:
                connection.close()
        self._nodes.clear()
        self._coordinators.clear()
        self._bootstrap = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
