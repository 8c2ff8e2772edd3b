"""A cluster of real processes: one ZooKeeper and N Gregor brokers (``broker_process.py``),
for tests and benchmarks (a cluster fixture of the pytest plugin would start one the same
way). It lives with the broker launcher because nothing in it is about a test: only the
ZooKeeper it runs is a developer's (Debian's jars, ``zookeeper.py``).

Each broker has its own port (bound on port 0 and kept), data dir and broker id (1..N)
and ``zookeeper.connect`` to the cluster's ZooKeeper. Brokers can be killed (-9), paused
(SIGSTOP) and resumed (SIGCONT), restarted on the same port and data dir, and stopped.
The ``wait_*`` helpers poll Metadata from every running broker until a condition holds,
and fail naming what they awaited and what each broker last answered.

``secure=True`` runs it as ``secured.py``'s ``ClusterSecurity`` sets it up: SASL_SSL
between brokers and to clients, the authorizer on, certificates from a CA in
``<work_dir>/tls``; the harness and the ``wait_*`` helpers speak to the ``CLIENT``
listeners as the admin, and ``client_config(user)`` hands out how a user connects.
"""

from __future__ import annotations

import os
import signal
import struct
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from types import TracebackType
from typing import Any

from gregor.server.cli.client.connection import PLAINTEXT, ClientError, Connection
from gregor.server.harness.broker_process import BrokerProcess
from gregor.server.harness.secured import ADMIN, ClientConfig, ClusterSecurity
from gregor.server.harness.zookeeper import ZooKeeperProcess
from gregor.server.security.client_security import ClientSecurity
from gregor.wire.reader import Reader
from gregor.wire.schema import request_type

METADATA = 3
METADATA_VERSION = 12
WAIT_TIMEOUT_S = 30.0
POLL_INTERVAL_S = 0.1
_TOPIC_ID_AND_INTERNAL = struct.Struct(">16s?")
_PARTITION_HEAD = struct.Struct(">hiii")
# Shorter than Kafka's defaults so failures are detected within a test's minute: a dead
# broker's session expires in 6 s, a stuck follower leaves the ISR in 10 s.
TEST_DEFAULTS = {
    "zookeeper.session.timeout.ms": "6000",
    "replica.lag.time.max.ms": "10000",
    "group.initial.rebalance.delay.ms": "0",
    "controlled.shutdown.retry.backoff.ms": "500",
    "num.partitions": "1",
}


@dataclass(frozen=True, slots=True)
class PartitionView:
    error_code: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class BrokerView:
    """One broker's answer to Metadata (all topics)."""

    cluster_id: str | None
    controller_id: int
    brokers: dict[int, tuple[str, int, str | None]]
    topics: dict[str, dict[int, PartitionView]] = field(default_factory=dict)
    topic_errors: dict[str, int] = field(default_factory=dict)

    def __repr__(self) -> str:
        topics = {
            name: {i: (p.error_code, p.leader, p.isr) for i, p in sorted(parts.items())}
            for name, parts in self.topics.items()
        }
        return (
            f"BrokerView(controller={self.controller_id}, brokers={sorted(self.brokers)}, "
            f"topics(partition: (error, leader, isr))={topics})"
        )


class ClusterTimeout(AssertionError):
    """A wait_* condition did not hold in time."""


class Cluster:
    def __init__(
        self,
        work_dir: Path,
        brokers: int = 3,
        overrides: dict[str, str] | None = None,
        *,
        secure: bool = False,
        anonymous_listener: bool = False,
    ) -> None:
        """``secure``: see the module's docstring; ``anonymous_listener``: with it, a
        PLAINTEXT listener too (``ANONYMOUS``, ``anonymous_port``)."""
        self.work_dir = Path(work_dir)
        self.zookeeper = ZooKeeperProcess(self.work_dir / "zookeeper")
        self.brokers: dict[int, BrokerProcess] = {}
        self.paused: set[int] = set()
        self.security = (
            ClusterSecurity(self.work_dir / "tls", anonymous_listener=anonymous_listener)
            if secure
            else None
        )
        harness_config = self.security.harness_config() if self.security else {}
        self._client_security = ClientSecurity.from_properties(harness_config)
        for broker_id in range(1, brokers + 1):
            secured = self.security.broker_overrides(broker_id) if self.security else {}
            self.brokers[broker_id] = BrokerProcess(
                self.work_dir / f"broker-{broker_id}",
                {**TEST_DEFAULTS, "broker.id": str(broker_id), **secured, **(overrides or {})},
                client_config=harness_config,
                probe_listener=ClusterSecurity.CLIENT if secure else None,
            )

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """ZooKeeper, then every broker at once (each waits until it answers Metadata)."""
        self.zookeeper.start()
        for broker in self.brokers.values():  # ZooKeeper's port is known once it serves
            broker.overrides.setdefault("zookeeper.connect", self.zookeeper.connect)
        with ThreadPoolExecutor(len(self.brokers)) as pool:
            for future in [pool.submit(b.start) for b in self.brokers.values()]:
                future.result()

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def client_config(self, user: str = ADMIN) -> ClientConfig:
        """How ``user`` (``secured.ADMIN`` or ``secured.USER``) connects; on a cluster that
        is not secure, everyone connects alike (PLAINTEXT)."""
        if self.security is None:
            return ClientConfig(self.bootstrap)
        return self.security.client(user, self.bootstrap)

    def anonymous_port(self, broker_id: int) -> int:
        """The port of broker ``broker_id``'s PLAINTEXT listener (``anonymous_listener``)."""
        return self.brokers[broker_id].listener_ports[ClusterSecurity.ANONYMOUS]

    def running(self) -> list[int]:
        """Ids of brokers whose process runs and is not paused."""
        return [i for i, b in self.brokers.items() if b.running and i not in self.paused]

    def kill(self, broker_id: int) -> None:
        """kill -9: a crash; its ZooKeeper session lives on until it times out."""
        self.resume(broker_id)
        self.brokers[broker_id].crash()

    def pause(self, broker_id: int) -> None:
        os.kill(self.brokers[broker_id].pid, signal.SIGSTOP)
        self.paused.add(broker_id)

    def resume(self, broker_id: int) -> None:
        if broker_id in self.paused:
            os.kill(self.brokers[broker_id].pid, signal.SIGCONT)
            self.paused.discard(broker_id)

    def stop(self, broker_id: int) -> None:
        """SIGTERM: a controlled shutdown, waited for."""
        self.resume(broker_id)
        self.brokers[broker_id].stop()

    def restart(self, broker_id: int) -> None:
        """Start a killed or stopped broker again (stopping it first if it runs). After a
        kill -9 this waits for its old ZooKeeper session to expire: as in Kafka, a broker
        whose id is still registered by another session refuses to start."""
        self.stop(broker_id)
        self.wait_unregistered([broker_id])
        self.brokers[broker_id].start()

    def registered(self) -> set[int]:
        """The broker ids registered in ZooKeeper (/brokers/ids)."""
        from kazoo.client import KazooClient
        from kazoo.exceptions import NoNodeError

        client = KazooClient(hosts=self.zookeeper.connect, timeout=10)
        client.start(10)
        try:
            return {int(i) for i in client.get_children("/brokers/ids")}
        except NoNodeError:
            return set()
        finally:
            client.stop()
            client.close()

    def wait_unregistered(self, broker_ids: Iterable[int], timeout: float = WAIT_TIMEOUT_S) -> None:
        """Until none of these ids is registered (a killed broker's session expired)."""
        ids = set(broker_ids)
        deadline = time.monotonic() + timeout
        while ids & self.registered():
            if time.monotonic() > deadline:
                raise ClusterTimeout(
                    f"Awaited for {timeout:.0f}s: the ZooKeeper registrations of brokers "
                    f"{sorted(ids & self.registered())} to expire"
                )
            time.sleep(POLL_INTERVAL_S * 5)

    def restore(self) -> None:
        """Resume paused brokers and start stopped ones; wait until all see each other."""
        for broker_id, broker in self.brokers.items():
            self.resume(broker_id)
            if not broker.running:
                self.restart(broker_id)
        self.wait_for_brokers(self.brokers)

    def stop_all(self) -> None:
        """Stop every broker (killing any that hangs), then ZooKeeper."""
        errors = []
        for broker_id in list(self.brokers):
            try:
                self.stop(broker_id)
            except Exception as e:  # noqa: BLE001 - stop the others regardless
                errors.append(e)
            finally:
                self.brokers[broker_id].crash()
        self.zookeeper.close()
        if errors:
            raise errors[0]

    def __enter__(self) -> Cluster:
        try:
            self.start()
        except BaseException:
            self.stop_all()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop_all()

    def log_tails(self, lines: int = 30) -> str:
        """The brokers' log tails, those that exited first (with their exit status: the
        first lines are what a truncated CI report keeps), then ZooKeeper's."""
        exited = [(i, b) for i, b in self.brokers.items() if b.returncode is not None]
        parts = [
            f"--- broker {i} EXITED with status {b.returncode} ({b.log_path})\n{b.log_tail(lines)}"
            for i, b in exited
        ]
        parts += [
            f"--- broker {i} ({b.log_path})\n{b.log_tail(lines)}"
            for i, b in self.brokers.items()
            if b.returncode is None
        ]
        parts.append(f"--- zookeeper ({self.zookeeper.log_path})\n{self.zookeeper.log_tail(lines)}")
        return "\n".join(parts)

    # -- what the brokers say -------------------------------------------------------------

    def metadata(self, broker_id: int, timeout: float = 5.0) -> BrokerView:
        """Metadata v12 for all topics, from one broker, over a fresh connection."""
        return metadata(self.brokers[broker_id].port, timeout, self._client_security)

    def views(self) -> dict[int, BrokerView | Exception]:
        """Every running broker's Metadata answer, or the error asking it raised."""
        result: dict[int, BrokerView | Exception] = {}
        for broker_id in self.running():
            try:
                result[broker_id] = self.metadata(broker_id)
            except (OSError, ValueError, ClientError) as e:
                result[broker_id] = e
        return result

    def wait_until(
        self,
        condition: Callable[[dict[int, BrokerView]], Any],
        awaited: str,
        timeout: float = WAIT_TIMEOUT_S,
    ) -> Any:
        """Poll every running broker's Metadata until ``condition`` (given the views of all
        running brokers, each of which answered) returns something truthy; return it."""
        deadline = time.monotonic() + timeout
        views: dict[int, BrokerView | Exception] = {}
        while True:
            views = self.views()
            answered = {i: v for i, v in views.items() if isinstance(v, BrokerView)}
            if views and len(answered) == len(views):
                result = condition(answered)
                if result:
                    return result
            if time.monotonic() > deadline:
                described = "\n".join(f"  broker {i}: {v!r}" for i, v in sorted(views.items()))
                raise ClusterTimeout(
                    f"Awaited for {timeout:.0f}s: {awaited}; the running brokers "
                    f"{self.running()}.\n{self.log_tails()}\nThey last answered:\n{described}"
                )
            time.sleep(POLL_INTERVAL_S)

    def wait_for_brokers(self, broker_ids: Iterable[int], timeout: float = WAIT_TIMEOUT_S) -> None:
        """Every running broker lists exactly ``broker_ids`` and agrees on a live controller."""
        wanted = set(broker_ids)

        def holds(views: dict[int, BrokerView]) -> bool:
            controllers = {v.controller_id for v in views.values()}
            return (
                all(set(v.brokers) == wanted for v in views.values())
                and len(controllers) == 1
                and controllers <= wanted
            )

        self.wait_until(holds, f"every running broker to list brokers {sorted(wanted)}", timeout)

    def wait_for_controller(
        self, not_in: Iterable[int] = (), timeout: float = WAIT_TIMEOUT_S
    ) -> int:
        """The controller every running broker names, once they agree on a running one
        outside ``not_in``."""
        excluded = set(not_in)

        def agreed(views: dict[int, BrokerView]) -> int | None:
            controllers = {v.controller_id for v in views.values()}
            if len(controllers) != 1:
                return None
            (controller,) = controllers
            ok = controller in self.running() and controller not in excluded
            return controller if ok else None

        return self.wait_until(
            agreed,
            f"every running broker to name one running controller not in {sorted(excluded)}",
            timeout,
        )

    def wait_for_topic(
        self,
        topic: str,
        partitions: int,
        *,
        isr: int | None = None,
        timeout: float = WAIT_TIMEOUT_S,
    ) -> dict[int, PartitionView]:
        """Every running broker sees ``partitions`` partitions of ``topic``, each with a
        running leader, all brokers agreeing; with ``isr``, each ISR has that many
        members. Returns the agreed partitions."""

        def holds(views: dict[int, BrokerView]) -> dict[int, PartitionView] | None:
            seen = [v.topics.get(topic) for v in views.values()]
            first = seen[0]
            if first is None or len(first) != partitions:
                return None
            if any(s != first for s in seen):
                return None
            for p in first.values():
                if p.error_code != 0 or p.leader not in self.running():
                    return None
                if isr is not None and len(p.isr) != isr:
                    return None
            return first

        wanted = f" with {isr} in-sync replicas each" if isr is not None else ""
        return self.wait_until(
            holds,
            f"every running broker to see {partitions} partition(s) of {topic!r} led by a "
            f"running broker{wanted}",
            timeout,
        )

    def wait_for_leader(
        self,
        topic: str,
        partition: int,
        *,
        not_in: Iterable[int] = (),
        timeout: float = WAIT_TIMEOUT_S,
    ) -> PartitionView:
        """The partition's state once every running broker names the same running leader
        outside ``not_in``."""
        excluded = set(not_in)

        def holds(views: dict[int, BrokerView]) -> PartitionView | None:
            states = {v.topics.get(topic, {}).get(partition) for v in views.values()}
            if len(states) != 1:
                return None
            (state,) = states
            if state is None or state.error_code != 0:
                return None
            ok = state.leader in self.running() and state.leader not in excluded
            return state if ok else None

        return self.wait_until(
            holds,
            f"every running broker to name one running leader of {topic}-{partition} "
            f"outside {sorted(excluded)}",
            timeout,
        )

    # -- what is on disk ------------------------------------------------------------------

    def segment_bytes(self, topic: str, partition: int) -> dict[int, dict[str, bytes]]:
        """Every broker's segment files (``*.log``) of one partition, by broker id."""
        result = {}
        for broker_id, broker in self.brokers.items():
            directory = broker.data_dir / f"{topic}-{partition}"
            if directory.is_dir():
                result[broker_id] = {
                    path.name: path.read_bytes() for path in sorted(directory.glob("*.log"))
                }
        return result


def metadata(port: int, timeout: float = 5.0, security: ClientSecurity = PLAINTEXT) -> BrokerView:
    """Ask one broker for Metadata v12 of every topic, over a new connection made with
    ``security`` (raises OSError, or ClientError if unreachable or refused)."""
    connection = Connection("127.0.0.1", port, "cluster-test", timeout, security=security)
    try:
        connection.send(metadata_request())
        _, frame = connection.receive_frame()
    finally:
        connection.close()
    return broker_view(frame)


def metadata_request() -> Any:
    """Metadata v12 of every topic, creating none."""
    return request_type(METADATA, METADATA_VERSION)(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )


@lru_cache(maxsize=64)
def _int32s(count: int) -> struct.Struct:
    return struct.Struct(f">{count}i")


def _broker_ids(reader: Reader) -> tuple[int, ...]:
    count = reader.count(4)
    return reader.unpack(_int32s(count)) if count else ()


def broker_view(frame: bytes) -> BrokerView:
    """The answer to ``metadata_request`` in ``frame`` (``Connection.receive_frame``'s),
    read straight from its bytes: polling a cluster of 50,000 partitions, building the
    schema's entities first cost a second of CPU an answer on the brokers' machine.
    Malformed bytes raise ValueError."""
    reader = Reader(frame, 4, flexible=True, error=ValueError)
    reader.tagged_fields()  # the response header's
    reader.int32()  # throttle time
    brokers: dict[int, tuple[str, int, str | None]] = {}
    for _ in range(reader.count(8)):
        node_id, host = reader.int32(), reader.string(nullable=False)
        port, rack = reader.int32(), reader.string(nullable=True)
        reader.tagged_fields()
        brokers[node_id] = (host or "", port, rack)
    cluster_id, controller_id = reader.string(nullable=True), reader.int32()
    topics: dict[str, dict[int, PartitionView]] = {}
    errors: dict[str, int] = {}
    for _ in range(reader.count(24)):
        error_code, name = reader.int16(), reader.string(nullable=True) or ""
        reader.unpack(_TOPIC_ID_AND_INTERNAL)
        partitions: dict[int, PartitionView] = {}
        for _ in range(reader.count(18)):
            p_error, index, leader, epoch = reader.unpack(_PARTITION_HEAD)
            replicas, isr, offline = (_broker_ids(reader), _broker_ids(reader), _broker_ids(reader))
            reader.tagged_fields()
            partitions[index] = PartitionView(p_error, leader, epoch, replicas, isr, offline)
        reader.int32()  # authorized operations
        reader.tagged_fields()
        if error_code != 0:
            errors[name] = error_code
        topics[name] = partitions
    reader.tagged_fields()
    if reader.pos != len(frame):
        raise ValueError(f"{len(frame) - reader.pos} bytes after the Metadata answer")
    return BrokerView(cluster_id, controller_id, brokers, topics, errors)
