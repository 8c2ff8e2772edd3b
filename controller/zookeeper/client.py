"""ZooKeeper through kazoo, bridged to asyncio.

kazoo runs its own threads; every call here starts kazoo's ``*_async`` variant and completes
an asyncio future on the caller's loop with ``call_soon_threadsafe``. Watches and session
state changes are delivered the same way, as plain callbacks run on the loop.

``get_many``/``get_children_many`` use ZooKeeper's read-only multi (3.6 and later).

Every znode created here (``create``, ``ensure_path`` and its parents, a transaction's
creates, the chroot) gets the ACL ``security.py`` gives its path; the session authenticates
(SASL, TLS) as ``ZkClientSecurity`` says, before its first request is served.

Like Kafka's ZooKeeperClient, a request waits while the connection is down and is sent
again after a ConnectionLoss; it fails only when the session expires (SessionExpiredError)
or the client is closed. Writes retried that way may find their own earlier effect
(NodeExists, BadVersion); callers that care check the znode's owner or content.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    EXCEPTIONS,
    AuthFailedError,
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    RuntimeInconsistency,
    SessionExpiredError,
    ZookeeperError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.paths import _prefix_root
from kazoo.protocol.serialization import (
    GetChildren,
    GetData,
    MultiHeader,
    SetData,
    int_struct,
    read_buffer,
    read_string,
    stat_struct,
)
from kazoo.protocol.states import EventType, WatchedEvent, ZnodeStat
from kazoo.retry import KazooRetry
from kazoo.security import ACL

from gregor.controller.zookeeper.security import ZkClientSecurity, default_acls

__all__ = [
    "AsyncZk",
    "BadVersionError",
    "ConnectionClosedError",
    "ConnectionLoss",
    "EventType",
    "NoNodeError",
    "NodeExistsError",
    "NotEmptyError",
    "SessionExpiredError",
    "SessionState",
    "Transaction",
    "TransactionFailed",
    "Watch",
    "WatchedEvent",
    "ZkAuthFailed",
    "ZkClientSecurity",
    "ZkConnectTimeout",
    "ZnodeStat",
    "ZookeeperError",
]

log = logging.getLogger(__name__)

# ZooKeeper closes the connection on a request larger than jute.maxbuffer (1 MiB less one
# byte by default); a multi is refused well before that.
MAX_TRANSACTION_BYTES = 1_000_000
# Per-op overhead of a multi on the wire (header, version, flags, ACL), rounded up.
OP_OVERHEAD_BYTES = 64
# Reads per read-only multi: 1000 partition states answer in about 200 KB.
MAX_READS_PER_MULTI = 1000

Watch = Callable[[WatchedEvent], None]


class SessionState(enum.Enum):
    """kazoo's simplified session states.

    SUSPENDED: the connection dropped; the session may still be alive (ephemeral nodes and
    watches kept). LOST: the session expired; its ephemeral nodes are gone and kazoo is
    connecting with a new session, reported as CONNECTED again.
    """

    CONNECTED = "CONNECTED"
    SUSPENDED = "SUSPENDED"
    LOST = "LOST"


StateListener = Callable[[SessionState], None]


class ZkConnectTimeout(TimeoutError):
    """No ZooKeeper session within zookeeper.connection.timeout.ms."""


class ZkAuthFailed(ConnectionError):
    """ZooKeeper refused the session's SASL credentials; kazoo does not retry them."""


class TransactionFailed(ZookeeperError):
    """A multi was refused as a whole; ``errors`` holds kazoo's typed error for every op."""

    def __init__(self, errors: list[ZookeeperError]) -> None:
        self.errors = errors
        # The op that failed carries the real error; the others are RolledBackError (before
        # it) or RuntimeInconsistency (after it).
        self.index = next(
            (
                i
                for i, e in enumerate(errors)
                if not isinstance(e, RolledBackError | RuntimeInconsistency)
            ),
            0,
        )
        self.cause = errors[self.index]
        super().__init__(f"multi failed at op {self.index}: {type(self.cause).__name__}")


class Transaction:
    """A ZooKeeper multi: ops collected here, committed atomically by ``await commit()``."""

    def __init__(self, zk: AsyncZk) -> None:
        self._zk = zk
        self._ops: list[tuple[str, tuple[Any, ...]]] = []
        self.size_bytes = 0

    def __len__(self) -> int:
        return len(self._ops)

    def create(self, path: str, value: bytes = b"", *, ephemeral: bool = False) -> None:
        self._add("create", path, value, (path, value, self._zk.acl_for(path), ephemeral))

    def set_data(self, path: str, value: bytes, version: int = -1) -> None:
        self._add("set_data", path, value, (path, value, version))

    def delete(self, path: str, version: int = -1) -> None:
        self._add("delete", path, b"", (path, version))

    def check(self, path: str, version: int) -> None:
        self._add("check", path, b"", (path, version))

    async def commit(self) -> list[Any]:
        """Apply every op or none; the results per op (created path, ZnodeStat, True).

        Raises TransactionFailed (its ``cause`` typed: NoNodeError, NodeExistsError,
        BadVersionError, NotEmptyError) when ZooKeeper refused it.
        """
        if self.size_bytes > MAX_TRANSACTION_BYTES:
            raise ValueError(
                f"multi of {len(self)} ops is about {self.size_bytes} bytes, over the "
                f"{MAX_TRANSACTION_BYTES}-byte limit; split it"
            )
        if not self._ops:
            return []
        results = await self._zk._call(self._start)
        if any(isinstance(r, Exception) for r in results):
            raise TransactionFailed(results)
        return results

    def _start(self) -> Any:
        tx = self._zk._client.transaction()
        for op, args in self._ops:
            if op == "set_data":  # nearly every op: kazoo's checks spared
                path, value, version = args
                tx.operations.append(SetData(self._zk.chrooted(path), value, version))
            else:
                getattr(tx, op)(*args)
        return tx.commit_async()

    def _add(self, op: str, path: str, value: bytes, args: tuple[Any, ...]) -> None:
        self._ops.append((op, args))
        self.size_bytes += len(path.encode()) + len(value) + OP_OVERHEAD_BYTES


class AsyncZk:
    """One ZooKeeper session (renewed by kazoo after expiry) used from one asyncio loop.

    ``connect`` is ``zookeeper.connect``: ``host:port[,host:port...][/chroot]``; a chroot
    that does not exist yet is created, as Kafka does. ``security``: how the session
    authenticates and the ACLs of what it creates (default: neither).
    """

    def __init__(
        self,
        connect: str,
        session_timeout_ms: int = 18000,
        connection_timeout_ms: int | None = None,
        security: ZkClientSecurity | None = None,
        max_in_flight: int = 10,
    ) -> None:
        hosts, slash, chroot = connect.partition("/")
        self.hosts = hosts
        self.chroot = (slash + chroot).rstrip("/")
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms or session_timeout_ms
        self.security = security or ZkClientSecurity()
        self._client = KazooClient(
            hosts=connect,
            timeout=session_timeout_ms / 1000,
            # kazoo's default back-off grows to an hour; reconnect within a second instead.
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=1.0),
            **self.security.kazoo_options(),
        )
        root = _prefix_root(self._client.chroot, "/")
        self._root = "" if root == "/" else root
        self._loop: asyncio.AbstractEventLoop | None = None
        self._listeners: list[StateListener] = []
        # One wrapper per watch function: kazoo keeps a path's watchers in a set, so a watch
        # set again before it fired is called once, not once per time it was set.
        self._wrappers: dict[Watch, Watch] = {}
        self._state = SessionState.LOST
        self._closed = False
        # zookeeper.max.in.flight.requests: ZooKeeper holds every queued request (and its
        # last 500 commits) in its heap; fifty 200 KB multis at once exhausted a 256 MB one.
        self._in_flight = asyncio.Semaphore(max_in_flight)
        self._client.add_listener(self._on_kazoo_state)

    @property
    def state(self) -> SessionState:
        return self._state

    @property
    def session_id(self) -> int | None:
        """The current session's id (an ephemeral znode's ``ephemeralOwner``)."""
        return self._client.client_id[0] if self._client.client_id else None

    @property
    def client_id(self) -> tuple[int, bytes] | None:
        """The session's id and password: what another client needs to join the session."""
        return self._client.client_id

    def add_state_listener(self, listener: StateListener) -> None:
        """Call ``listener(state)`` on the loop at every session state change (the first
        CONNECTED included)."""
        self._listeners.append(listener)

    def remove_state_listener(self, listener: StateListener) -> None:
        self._listeners.remove(listener)

    async def start(self) -> None:
        """Connect, waiting at most zookeeper.connection.timeout.ms for a session; with
        SASL, ZkAuthFailed if the server refuses the credentials."""
        self._loop = asyncio.get_running_loop()
        timeout_s = self.connection_timeout_ms / 1000
        try:
            if self.chroot:
                await self._loop.run_in_executor(None, self._create_chroot, timeout_s)
            await self._loop.run_in_executor(None, self._client.start, timeout_s)
            # kazoo reports CONNECTED before its SASL exchange, which runs ahead of the
            # first request: one round trip tells whether the server took the credentials.
            await self.exists("/")
        except KazooTimeoutError:
            raise ZkConnectTimeout(
                f"no ZooKeeper session with {self.hosts} within {self.connection_timeout_ms} ms"
            ) from None
        except AuthFailedError:
            raise self._auth_failed() from None
        # kazoo's CONNECTED, queued to the loop before start() returned, has set the state.

    async def close(self) -> None:
        """End the session (its ephemeral znodes go at once); no callbacks after this."""
        if self._closed:
            return
        self._closed = True
        loop = self._loop or asyncio.get_running_loop()
        await loop.run_in_executor(None, self._stop_client)

    def _stop_client(self) -> None:
        self._client.stop()
        self._client.close()

    def _create_chroot(self, timeout_s: float) -> None:
        """The chroot and its missing parents, each with its ACL, from the server's root."""
        root = KazooClient(
            hosts=self.hosts,
            timeout=self.session_timeout_ms / 1000,
            **self.security.kazoo_options(),
        )
        root.start(timeout_s)
        try:
            parts = self.chroot.strip("/").split("/")
            for path in ("/" + "/".join(parts[: i + 1]) for i in range(len(parts))):
                if root.exists(path) is None:
                    try:
                        root.create(path, acl=self.acl_for(path))
                    except NodeExistsError:
                        pass
        except AuthFailedError:
            raise self._auth_failed() from None
        finally:
            root.stop()
            root.close()

    def _auth_failed(self) -> ZkAuthFailed:
        return ZkAuthFailed(
            f"ZooKeeper at {self.hosts} refused the SASL authentication of user "
            f"{self.security.sasl_username!r} (the JAAS Client section's credentials)"
        )

    def acl_for(self, path: str) -> list[ACL]:
        """The ACL a znode created at ``path`` gets (Kafka's, per zookeeper.set.acl)."""
        return default_acls(self.security.set_acl, path)

    # --- calls -------------------------------------------------------------------------

    async def get(self, path: str, watch: Watch | None = None) -> tuple[bytes, ZnodeStat]:
        return await self._call(lambda: self._client.get_async(path, self._watcher(watch)))

    async def get_children(self, path: str, watch: Watch | None = None) -> list[str]:
        return await self._call(lambda: self._client.get_children_async(path, self._watcher(watch)))

    async def exists(self, path: str, watch: Watch | None = None) -> ZnodeStat | None:
        return await self._call(lambda: self._client.exists_async(path, self._watcher(watch)))

    async def create(
        self,
        path: str,
        value: bytes = b"",
        *,
        ephemeral: bool = False,
        sequence: bool = False,
        makepath: bool = False,
    ) -> tuple[str, ZnodeStat]:
        """Create a znode; its path (with a sequence suffix if asked) and stat. With
        ``makepath``, missing parents are created first, each with its own ACL."""
        acl = self.acl_for(path)

        def start() -> Any:
            return self._client.create_async(
                path, value, acl=acl, ephemeral=ephemeral, sequence=sequence, include_data=True
            )

        try:
            return await self._call(start)
        except NoNodeError:
            if not makepath:
                raise
        await self.ensure_path(path.rsplit("/", 1)[0])
        return await self._call(start)

    async def set(self, path: str, value: bytes, version: int = -1) -> ZnodeStat:
        return await self._call(lambda: self._client.set_async(path, value, version))

    async def delete(self, path: str, version: int = -1) -> None:
        await self._call(lambda: self._client.delete_async(path, version))

    async def ensure_path(self, path: str) -> None:
        """Create ``path`` and its missing parents, empty and persistent (each with its
        ACL: kazoo's ensure_path would give the parents the child's)."""
        if not path or path == "/" or await self.exists(path) is not None:
            return
        try:
            await self.create(path, makepath=True)
        except NodeExistsError:
            pass  # created meanwhile

    def transaction(self) -> Transaction:
        return Transaction(self)

    def chrooted(self, path: str) -> str:
        """The path kazoo sends for ``path`` (its ``_prefix_root``), without normalising
        again the absolute, normal paths this package builds: writing 50,000 partition
        states spent a tenth of the controller's CPU there."""
        if path[:1] == "/" and path[-1] != "/" and "//" not in path and "/." not in path:
            return self._root + path
        return _prefix_root(self._client.chroot, path)

    async def get_many(self, paths: list[str]) -> list[tuple[bytes, ZnodeStat] | None]:
        """Read many znodes in few round trips (read-only multis); None where absent."""
        return await self._read_many([GetData(self.chrooted(p), None) for p in paths])

    async def get_children_many(self, paths: list[str]) -> list[list[str] | None]:
        """The children of many znodes in few round trips; None where a znode is absent."""
        return await self._read_many([GetChildren(self.chrooted(p), None) for p in paths])

    async def _read_many(self, ops: list[Any]) -> list[Any]:
        """``ops`` (their paths chrooted) in read-only multis of at most 1,000."""
        chunks = await asyncio.gather(
            *(
                self._call(functools.partial(self._start_read, ops[i : i + MAX_READS_PER_MULTI]))
                for i in range(0, len(ops), MAX_READS_PER_MULTI)
            )
        )
        results: list[Any] = []
        for chunk in chunks:
            for result in chunk:
                if isinstance(result, NoNodeError):
                    results.append(None)
                elif isinstance(result, Exception):
                    raise result
                else:
                    results.append(result)
        return results

    def _start_read(self, ops: list[Any]) -> Any:
        result = self._client.handler.async_result()
        self._client._call(_MultiRead(ops), result)
        return result

    # --- the bridge ----------------------------------------------------------------------

    async def _call(self, start: Callable[[], Any]) -> Any:
        """Run a kazoo async call on the loop; resend it after a ConnectionLoss."""
        async with self._in_flight:
            while True:
                future = self._running_loop().create_future()
                start().rawlink(functools.partial(self._to_loop, _settle, future))
                try:
                    return await future
                except ConnectionLoss:
                    if self._closed:
                        raise
                    # kazoo queues the request until it has reconnected.
                    log.debug("ZooKeeper connection lost during a request; sending it again")

    def _watcher(self, watch: Watch | None) -> Watch | None:
        if watch is None:
            return None
        wrapper = self._wrappers.get(watch)
        if wrapper is None:
            wrapper = self._wrappers[watch] = functools.partial(self._to_loop, watch)
        return wrapper

    def _on_kazoo_state(self, state: str) -> None:
        # kazoo's connection thread: must not block.
        self._to_loop(self._deliver_state, SessionState(state))

    def _deliver_state(self, state: SessionState) -> None:
        if self._closed:
            return
        self._state = state
        log.info("ZooKeeper session %s (session id %s)", state.name, _hex(self.session_id))
        for listener in list(self._listeners):
            listener(state)

    def _to_loop(self, fn: Callable[..., Any], *args: Any) -> None:
        loop = self._loop
        if loop is None:
            return
        try:
            loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:
            pass  # the loop is closed: nobody is waiting any more

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError("AsyncZk.start() has not been awaited")
        return self._loop


class _MultiRead(tuple[list[Any]]):
    """ZooKeeper 3.6's read-only multi (opcode 22), which kazoo lacks: many getData and
    getChildren ops in one request, each answered on its own (a missing znode fails only
    its op). Sent through kazoo's request queue like kazoo's own Transaction."""

    type = 22

    def __new__(cls, operations: list[Any]) -> _MultiRead:
        return super().__new__(cls, (operations,))

    def serialize(self) -> bytearray:
        b = bytearray()
        for op in self[0]:
            b += MultiHeader(op.type, False, -1).serialize() + op.serialize()
        return b + MultiHeader(-1, True, -1).serialize()

    @classmethod
    def deserialize(cls, buffer: bytes, offset: int) -> list[Any]:
        results: list[Any] = []
        header, offset = MultiHeader.deserialize(buffer, offset)
        while not header.done:
            if header.type == GetData.type:
                data, offset = read_buffer(buffer, offset)
                stat = ZnodeStat._make(stat_struct.unpack_from(buffer, offset))
                offset += stat_struct.size
                results.append((data or b"", stat))
            elif header.type == GetChildren.type:
                count = int_struct.unpack_from(buffer, offset)[0]
                offset += int_struct.size
                children = []
                for _ in range(max(count, 0)):
                    child, offset = read_string(buffer, offset)
                    children.append(child)
                results.append(children)
            else:
                err = int_struct.unpack_from(buffer, offset)[0]
                offset += int_struct.size
                results.append(EXCEPTIONS[err]())
            header, offset = MultiHeader.deserialize(buffer, offset)
        return results


def _settle(future: asyncio.Future[Any], result: Any) -> None:
    if future.done():
        return
    if result.successful():
        future.set_result(result.value)
    else:
        future.set_exception(result.exception)


def _hex(session_id: int | None) -> str:
    return "none" if session_id is None else f"0x{session_id:x}"
