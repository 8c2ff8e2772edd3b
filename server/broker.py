"""The broker process: start-up and shutdown order, and the periodic log work."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable

import anyio

from apis.context import Services
from apis.dispatch import Dispatcher
from controller.embedded import EmbeddedController
from controller.metadata import BrokerInfo, TopicInfo
from coordinator.coordinator import GroupCoordinator, Settings
from coordinator.records import OFFSETS_TOPIC
from log.manager import LogManager
from replica.manager import ReplicaManager
from server.config import LONG_MAX, BrokerConfig, ConfigError, parse_listener, read_properties
from server.network import Connection, Limits, SocketServer
from server.purgatory import Purgatory

logger = logging.getLogger(__name__)

SHUTDOWN_GRACE_S = 10.0
# How often flush.ms is checked when log.flush.scheduler.interval.ms is left unset.
DEFAULT_FLUSH_CHECK_MS = 1000


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.logs = LogManager(config.log_dirs, config.raw)
        self.fetch_purgatory: Purgatory = Purgatory("Fetch")
        self.replicas = ReplicaManager(
            self.broker_id, self.logs, config.raw, self.fetch_purgatory.check
        )
        self.groups = GroupCoordinator(
            Settings.from_config(config), self.replicas, self.fetch_purgatory, now_ms=now_ms
        )
        self.dispatcher: Dispatcher | None = None
        self.socket_server = SocketServer(
            self._dispatch,
            Limits(
                io_threads=config["num.io.threads"],
                queued_max_requests=config["queued.max.requests"],
                max_request_size=config["socket.request.max.bytes"],
                queued_max_request_bytes=config["queued.max.request.bytes"],
                max_connections=config["max.connections"],
                max_connections_per_ip=config["max.connections.per.ip"],
                per_ip_overrides=config.per_ip_overrides,
                send_buffer_bytes=config["socket.send.buffer.bytes"],
                receive_buffer_bytes=config["socket.receive.buffer.bytes"],
            ),
        )
        self.controller: EmbeddedController | None = None
        self.bound_ports: dict[str, int] = {}

    def _dispatch(self, conn: Connection, frame: bytes | bytearray) -> None:
        assert self.dispatcher is not None
        self.dispatcher(conn, frame)

    async def start(self) -> None:
        started = time.monotonic()
        for log_dir in self.config.log_dirs:
            log_dir.mkdir(parents=True, exist_ok=True)
        self.logs.startup(now_ms())
        endpoints = await self._listen()
        self.controller = EmbeddedController(
            self.config.log_dirs[0],
            BrokerInfo(self.broker_id, endpoints, self.config["broker.rack"]),
            on_lead=self._lead,
            on_delete=self._forget,
        )
        self._write_meta_properties(self.controller.cluster_id)
        self.controller.start()
        services = Services(
            self.config,
            self.controller.cache,
            self.controller,
            self.replicas,
            self.fetch_purgatory,
            now_ms,
            self.groups,
        )
        self.dispatcher = Dispatcher(services)
        self.socket_server.start_handlers()
        logger.info(
            "[KafkaServer id=%d] started (cluster id %s, %d partition(s)) in %.2fs; "
            "listening on %s",
            self.broker_id,
            self.controller.cluster_id,
            sum(1 for _ in self.replicas),
            time.monotonic() - started,
            ", ".join(f"{n}://{h}:{p}" for n, (h, p) in endpoints.items()),
        )

    async def _listen(self) -> dict[str, tuple[str, int]]:
        """Bind every listener; return the advertised endpoint of each."""
        advertised = {
            name: (host, port)
            for name, host, port in map(parse_listener, self.config.advertised_listeners)
        }
        endpoints = {}
        for listener in self.config.listeners:
            name, host, port = parse_listener(listener)
            bound = await self.socket_server.listen(name, host, port)
            self.bound_ports[name] = bound
            adv_host, adv_port = advertised.get(name, (host, bound))
            endpoints[name] = (adv_host or socket.getfqdn(), adv_port or bound)
        unknown = advertised.keys() - endpoints.keys()
        if unknown:
            raise ConfigError(
                f"advertised.listeners names listener(s) {sorted(unknown)} that "
                "are not in listeners"
            )
        return endpoints

    def _lead(self, topic: TopicInfo) -> None:
        for info in topic.partitions.values():
            self.replicas.become_leader(topic.name, info, topic.configs)
            if topic.name == OFFSETS_TOPIC:
                self.groups.on_become_leader(info.index)

    def _forget(self, topic: TopicInfo) -> None:
        for index in topic.partitions:
            if topic.name == OFFSETS_TOPIC:
                self.groups.on_resign(index)
            self.replicas.remove(topic.name, index, delete=True)
        self.groups.on_topic_deleted(topic.name)

    def _write_meta_properties(self, cluster_id: str) -> None:
        for log_dir in self.config.log_dirs:
            path = log_dir / "meta.properties"
            existing = read_properties(path) if path.exists() else {}
            if existing.get("cluster.id", cluster_id) != cluster_id:
                raise ConfigError(
                    f"The cluster id {cluster_id} doesn't match the stored "
                    f"cluster.id {existing['cluster.id']} in {path}"
                )
            if existing.get("node.id", str(self.broker_id)) != str(self.broker_id):
                raise ConfigError(
                    f"Stored node id {existing['node.id']} in {path} doesn't "
                    f"match broker.id {self.broker_id}"
                )
            path.write_text(f"version=1\ncluster.id={cluster_id}\nnode.id={self.broker_id}\n")

    async def run_background(self) -> None:
        """Periodic work (retention, flushes, checkpoints, idle connections, offset
        expiry); runs until cancelled."""
        config = self.config
        flush_ms = config["log.flush.scheduler.interval.ms"]
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                self._every,
                config["log.retention.check.interval.ms"],
                lambda now: self.logs.run_retention(now, self.replicas.high_watermarks()),
            )
            tg.start_soon(
                self._every,
                DEFAULT_FLUSH_CHECK_MS if flush_ms == LONG_MAX else flush_ms,
                self.logs.run_flush,
            )
            idle_ms = config["connections.max.idle.ms"]
            if idle_ms > 0:
                tg.start_soon(
                    self._every,
                    max(min(idle_ms // 4, 30_000), 10),
                    lambda _now: self.socket_server.close_idle(idle_ms / 1000),
                )
            tg.start_soon(
                self._every,
                config["log.flush.offset.checkpoint.interval.ms"],
                lambda _now: self.logs.checkpoint(self.replicas.high_watermarks()),
            )
            tg.start_soon(
                self._every,
                config["offsets.retention.check.interval.ms"],
                self.groups.expire_offsets,
            )

    @staticmethod
    async def _every(interval_ms: int, work: Callable[[int], None]) -> None:
        while True:
            await anyio.sleep(max(interval_ms, 10) / 1000)
            try:
                work(now_ms())
            except Exception:
                logger.exception("Periodic log task %s failed", work)

    async def shutdown(self) -> None:
        logger.info("[KafkaServer id=%d] shutting down", self.broker_id)
        await self.socket_server.stop_accepting()
        self.groups.shutdown()  # parked joins and syncs answer NOT_COORDINATOR
        self.fetch_purgatory.expire_all()  # parked fetches answer with what they have
        await asyncio.sleep(0)
        await self.socket_server.drain(SHUTDOWN_GRACE_S)
        self.logs.shutdown(self.replicas.high_watermarks())
        logger.info("[KafkaServer id=%d] shut down completed", self.broker_id)
