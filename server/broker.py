"""The broker process: start-up and shutdown order, and the periodic log work."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anyio
from kio.schema.add_partitions_to_txn.v4.request import AddPartitionsToTxnRequest
from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId
from kio.schema.write_txn_markers.v1.request import WriteTxnMarkersRequest
from kio.static.primitive import i64

from gregor.apis.context import Services, nested
from gregor.apis.dispatch import Dispatcher
from gregor.apis.groups import create_share_state_topic
from gregor.apis.write_txn_markers import write_txn_markers
from gregor.configdef import LONG_MAX
from gregor.controller.acls.authorizer import configured_authorizer
from gregor.controller.base import Controller
from gregor.controller.configs import BROKER_GROUP_BOUND_KEYS, effective_value
from gregor.controller.embedded import EmbeddedController
from gregor.controller.metadata.cache import BrokerInfo, MetadataCache, TopicInfo
from gregor.controller.metadata.config_resource import BROKER, TOPIC, ConfigResource
from gregor.controller.scram_credentials import ScramCredential
from gregor.controller.topics import TopicError
from gregor.controller.zk_broker import ZkBroker
from gregor.controller.zk_controller.config import ControllerConfig
from gregor.controller.zk_controller.controller import ZkController
from gregor.controller.zookeeper.client import AsyncZk
from gregor.controller.zookeeper.data import BrokerIdInUseError, BrokerRegistration, KafkaZk
from gregor.coordinator.coordinator import GroupCoordinator, Settings
from gregor.coordinator.records import OFFSETS_TOPIC
from gregor.coordinator.share_coordinator import ShareCoordinator, ShareCoordinatorSettings
from gregor.coordinator.share_state_records import SHARE_GROUP_STATE_TOPIC
from gregor.coordinator.txn_coordinator import TransactionCoordinator, TxnSettings
from gregor.coordinator.txn_markers import TxnMarkerChannel
from gregor.coordinator.txn_records import TRANSACTION_STATE_TOPIC
from gregor.coordinator.txn_verifier import CoordinatorVerifier
from gregor.log.checkpoint import DiskJob, write_atomically
from gregor.log.cleaner_manager import CleanerConfig, LogCleaner
from gregor.log.errors import KafkaStorageError
from gregor.log.manager import DiskJobs, LogManager
from gregor.replica.manager import ReplicaManager
from gregor.replica.share_partition_manager import ShareFetchSettings, SharePartitionManager
from gregor.replica.state import CommittedIsr, IsrProposal
from gregor.server import listener_security
from gregor.server.broker_client import InterBrokerClient, inter_broker_client_settings
from gregor.server.config import (
    BrokerConfig,
    ConfigError,
    listener_connection_creation_rates,
    listener_settings,
    parse_listener,
    read_properties,
    resolve_ip_overrides,
)
from gregor.server.metrics import (
    AuthenticationMetrics,
    AuthorizerMetrics,
    BrokerMetrics,
    GroupCoordinatorMetrics,
)
from gregor.server.metrics_exporter import MetricsEndpoint
from gregor.server.metrics_state import BrokerState, read_state
from gregor.server.network import Connection, Limits, SocketServer
from gregor.server.quotas import ClientQuotas
from gregor.server.security.client_security import ClientSecurity
from gregor.server.security.sasl.jwks import Jwks
from gregor.server.security.sasl.mechanisms import jwks_sources
from gregor.server.security.tls import SslConfigError
from gregor.server.security.zk_client_security import zk_client_security
from gregor.server.share_persister import BrokerSharePersister
from gregor.wire.interbroker import ControlledShutdownRequest
from gregor.wire.schema import request_type
from gregor.wire.versions import ALTER_PARTITION

logger = logging.getLogger(__name__)

SHUTDOWN_GRACE_S = 10.0
# How often flush.ms is checked when log.flush.scheduler.interval.ms is left unset.
DEFAULT_FLUSH_CHECK_MS = 1000
META_PROPERTIES = "meta.properties"
CONTROLLED_SHUTDOWN_VERSION = 3
# How often the rates of quota groups idle for an hour are dropped.
QUOTA_EXPIRY_CHECK_MS = 60_000
# Produce's heavy batches are validated on this many threads: as many as there are cores to
# spare, and a bound on the memory that requests being decompressed hold at once (each at
# most MAX_DECOMPRESSED_PER_REQUEST).
VALIDATION_THREADS = 2
# How often the TLS listeners' keystore and truststore files are checked for a change (a
# stat each): a renewed certificate is served within this long.
TLS_RELOAD_CHECK_MS = 5_000
# The longest a TLS handshake may take: Kafka's clients give up connecting after
# socket.connection.setup.timeout.ms (10 s by default), so no one waits on one longer.
TLS_HANDSHAKE_MAX_MS = 10_000


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.authorizer = configured_authorizer(config.raw)
        # Every listener's security, TLS contexts and SASL mechanisms built now: a bad
        # keystore or JAAS config stops start-up.
        self.controller: Controller | None = None
        self.authentication_metrics = AuthenticationMetrics()
        self.listener_securities = listener_security.listener_securities(
            config, self._scram_credential, now_ms, self.authentication_metrics
        )
        # OAUTHBEARER's key sets: loaded at start-up, then refreshed on threads of their own.
        self.jwks: list[Jwks] = [
            jwks
            for security in self.listener_securities.values()
            if security.sasl is not None
            for jwks in jwks_sources(security.sasl.factories)
        ]
        self._jwks_stop = threading.Event()
        self._jwks_threads: list[threading.Thread] = []
        # Connections to the other brokers go to their inter-broker listener, with its
        # security settings (Kafka's inter-broker clients use the listener's configs).
        inter_broker = config.inter_broker_listener
        self.inter_broker_settings = inter_broker_client_settings(
            listener_settings(config.raw, inter_broker),
            config.security_protocols.get(inter_broker, "PLAINTEXT"),
        )
        self.logs = LogManager(config.log_dirs, config.raw)
        self.validation_pool = ThreadPoolExecutor(
            VALIDATION_THREADS, thread_name_prefix="produce-validation"
        )
        # Cluster mode: requests to other brokers (replica fetches; AlterPartition and
        # ControlledShutdown to the controller, on their own connections so that a parked
        # fetch does not hold them up).
        self.fetch_client: InterBrokerClient | None = None
        self.controller_client: InterBrokerClient | None = None
        self.channel_client: InterBrokerClient | None = None  # the controller's, to brokers
        self.zk_controller: ZkController | None = None
        self.cluster: ZkBroker | None = None
        self.zk: AsyncZk | None = None
        self.cache: MetadataCache | None = None
        if config.cluster_mode:
            try:
                ClientSecurity.from_properties(self.inter_broker_settings)
            except ValueError as e:
                raise ConfigError(f"{e} (inter-broker listener {inter_broker})") from None
            self.fetch_client = InterBrokerClient(
                f"broker-{self.broker_id}-fetcher",
                self._endpoint_of,
                config["replica.socket.timeout.ms"],
                client_settings=self.inter_broker_settings,
            )
            self.controller_client = InterBrokerClient(
                f"broker-{self.broker_id}-to-controller",
                self._endpoint_of,
                config["controller.socket.timeout.ms"],
                client_settings=self.inter_broker_settings,
            )
            self.replicas = ReplicaManager(
                self.broker_id,
                self.logs,
                config.raw,
                send=self.fetch_client.send,
                alter_partition=self._alter_partition,
                now_ms=now_ms,
                validation_pool=self.validation_pool,
            )
        else:
            self.replicas = ReplicaManager(
                self.broker_id, self.logs, config.raw, validation_pool=self.validation_pool
            )
        # The share coordinator, and the persister that reaches any share-partition's
        # (share-partition leaders and share groups write their state through it).
        self.share_client: InterBrokerClient | None = None
        if config.cluster_mode:
            self.share_client = InterBrokerClient(
                f"broker-{self.broker_id}-share-state",
                self._endpoint_of,
                config["request.timeout.ms"],
                client_settings=self.inter_broker_settings,
            )
        self.share_coordinator = ShareCoordinator(
            ShareCoordinatorSettings.from_config(config),
            self.replicas,
            self.replicas.produce_purgatory,
            now_ms,
            self._partition_exists,
        )
        self.share_persister = BrokerSharePersister(
            self.share_coordinator,
            self.broker_id,
            lambda index: self._leader_of(SHARE_GROUP_STATE_TOPIC, index),
            self._create_share_state_topic,
            None if self.share_client is None else self.share_client.send,
        )
        self.share_partitions = SharePartitionManager(
            self.replicas, self.share_persister, ShareFetchSettings.from_config(config)
        )
        self.cleaner = LogCleaner(
            self.logs,
            CleanerConfig(
                enable=config["log.cleaner.enable"],
                threads=config["log.cleaner.threads"],
                dedupe_buffer_size=config["log.cleaner.dedupe.buffer.size"],
                io_buffer_load_factor=config["log.cleaner.io.buffer.load.factor"],
                io_max_bytes_per_second=config["log.cleaner.io.max.bytes.per.second"],
                backoff_ms=config["log.cleaner.backoff.ms"],
            ),
            self.replicas.high_watermarks,
        )
        self.groups = GroupCoordinator(
            Settings.from_config(config),
            self.replicas,
            self.replicas.produce_purgatory,
            now_ms=now_ms,
            share_persister=self.share_persister,
        )
        # Markers to other brokers, and the partitions' verification with other brokers'
        # transaction coordinators, go on connections of their own (cluster mode): a
        # verification does not queue behind markers waiting for their ISR.
        self.txn_client: InterBrokerClient | None = None
        self.verify_client: InterBrokerClient | None = None
        if config.cluster_mode:
            self.txn_client = InterBrokerClient(
                f"broker-{self.broker_id}-txn-markers",
                self._endpoint_of,
                config["request.timeout.ms"],
                client_settings=self.inter_broker_settings,
            )
            self.verify_client = InterBrokerClient(
                f"broker-{self.broker_id}-txn-verify",
                self._endpoint_of,
                config["request.timeout.ms"],
                client_settings=self.inter_broker_settings,
            )
        self.transactions = TransactionCoordinator(
            TxnSettings.from_config(config),
            self.replicas,
            self.replicas.produce_purgatory,
            now_ms,
            self._allocate_producer_id,
            TxnMarkerChannel(self._send_markers, self._leader_of),
        )
        self.txn_verifier = CoordinatorVerifier(
            self.transactions,
            self.broker_id,
            lambda index: self._leader_of(TRANSACTION_STATE_TOPIC, index),
            None if self.verify_client is None else self._send_verify,
        )
        self.services: Services | None = None
        self.quotas = ClientQuotas(config["quota.window.num"], config["quota.window.size.seconds"])
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
                max_connection_creation_rate=config["max.connection.creation.rate"],
                listener_connection_creation_rates=config.listener_connection_creation_rates,
                inter_broker_listener=config.inter_broker_listener,
                tls_handshake_timeout_s=tls_handshake_timeout_ms(config) / 1000,
            ),
            self.quotas,
        )
        self.socket_server.closed_listeners.append(self.share_partitions.connection_closed)
        self.embedded: EmbeddedController | None = None
        self.bound_ports: dict[str, int] = {}
        # Recorded only when the Prometheus endpoint is on (metrics.prometheus.port).
        self.metrics = BrokerMetrics() if config["metrics.prometheus.port"] >= 0 else None
        self.metrics_endpoint: MetricsEndpoint | None = None

    def _scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        """SASL/SCRAM's credentials: the controller's cache (none before it has started)."""
        controller = self.controller
        return None if controller is None else controller.credential_cache.lookup(user, mechanism)

    async def _start_jwks(self) -> None:
        """Load every JWKS (off the event loop: it blocks), as Kafka's broker does before it
        serves; then keep each refreshed on a thread until shutdown."""
        for jwks in self.jwks:
            try:
                await anyio.to_thread.run_sync(jwks.refresh)
            except (OSError, ValueError) as e:
                raise ConfigError(
                    f"Could not load the JWKS of sasl.oauthbearer.jwks.endpoint.url {jwks.url}: {e}"
                ) from None
            thread = threading.Thread(
                target=jwks.run, args=(self._jwks_stop,), name="jwks-refresher", daemon=True
            )
            thread.start()
            self._jwks_threads.append(thread)

    def _dispatch(self, conn: Connection, frame: bytes | bytearray) -> None:
        assert self.dispatcher is not None
        self.dispatcher(conn, frame)

    async def start(self) -> None:
        started = time.monotonic()
        for log_dir in self.config.log_dirs:
            log_dir.mkdir(parents=True, exist_ok=True)
        self.logs.startup(now_ms())
        await self._start_jwks()
        try:
            endpoints = await self._listen()
            if self.config.cluster_mode:
                await self._start_cluster(endpoints)
            else:
                self._start_embedded(endpoints)
            await self._start_metrics()
        except BaseException:
            # Start-up failed with listeners open: close the connections already
            # accepted (a client probing the port), so the error is the last thing logged.
            await self.socket_server.stop_accepting()
            await self.socket_server.drain(1.0)
            raise
        assert self.cache is not None
        logger.info(
            "[KafkaServer id=%d] started (cluster id %s, %d partition(s)) in %.2fs; "
            "listening on %s",
            self.broker_id,
            self.cache.cluster_id,
            sum(1 for _ in self.replicas),
            time.monotonic() - started,
            ", ".join(f"{n}://{h}:{p}" for n, (h, p) in endpoints.items()),
        )

    def _group_bounds(self) -> dict[str, int]:
        """This broker's bounds of group configs, which its controller checks them by."""
        return {key: self.config[key] for key in BROKER_GROUP_BOUND_KEYS}

    def _start_embedded(self, endpoints: dict[str, tuple[str, int]]) -> None:
        controller = EmbeddedController(
            self.config.log_dirs[0],
            BrokerInfo(self.broker_id, endpoints, self.config["broker.rack"]),
            on_create=self._create_logs,
            log_dirs=self.config.log_dirs,
            on_abort=self._discard_logs,
            on_lead=self._lead,
            on_delete=self._forget,
            on_configs=self._apply_configs,
            on_quotas=self.quotas.apply,
            authorizer=self.authorizer,
            group_bounds=self._group_bounds(),
        )
        self.controller = self.embedded = controller
        self.cache = controller.cache
        self._apply_broker_configs()
        self._check_meta_properties(
            controller.cluster_id,
            f" (the metadata file {controller.path} is missing)" if controller.fresh else "",
        )
        self._check_logs_against_metadata()
        controller.start()
        self._write_meta_properties(controller.cluster_id)
        self._serve(None)

    async def _start_cluster(self, endpoints: dict[str, tuple[str, int]]) -> None:
        """Join the cluster: the cluster id from ZooKeeper, requests served (the controller's
        come first), then registration and the controller campaign."""
        config = self.config
        self.zk = AsyncZk(
            config["zookeeper.connect"],
            config["zookeeper.session.timeout.ms"],
            config.zookeeper_connection_timeout_ms,
            zk_client_security(config),
            config["zookeeper.max.in.flight.requests"],
        )
        await self.zk.start()
        kafka_zk = KafkaZk(self.zk)
        await kafka_zk.ensure_paths()
        cluster_id = await kafka_zk.cluster_id()
        self._check_meta_properties(cluster_id, "")
        self.cache = MetadataCache(cluster_id, -1)
        protocols = config.security_protocols
        registration = BrokerRegistration(
            self.broker_id,
            endpoints,
            {name: protocols[name] for name in endpoints},
            config["broker.rack"],
        )
        # The controller's channel reaches the brokers it knows from ZooKeeper, which its
        # own UpdateMetadata has not yet told this broker's cache about.
        self.channel_client = InterBrokerClient(
            f"controller-{self.broker_id}",
            self._controller_endpoint_of,
            config["controller.socket.timeout.ms"],
            client_settings=self.inter_broker_settings,
        )
        self.zk_controller = ZkController(
            self.broker_id,
            kafka_zk,
            self.channel_client.send,
            ControllerConfig.from_config(config),
        )
        self.cluster = ZkBroker(
            kafka_zk,
            registration,
            self.cache,
            self.zk_controller,
            topic_wait_ms=config["request.timeout.ms"],
            authorizer=self.authorizer,
            group_bounds=self._group_bounds(),
        )
        self.controller = self.cluster
        self.cluster.on_configs = self._apply_configs
        self.cluster.on_quotas = self.quotas.apply
        await self.cluster.load_configs()
        self._apply_broker_configs()
        self._write_meta_properties(cluster_id)
        self._serve(self.cluster)
        self.replicas.start()
        try:
            await self.cluster.join()
        except BrokerIdInUseError as e:
            raise ConfigError(str(e)) from None

    def _serve(self, cluster: ZkBroker | None) -> None:
        assert self.controller is not None and self.cache is not None
        services = Services(
            self.config,
            self.cache,
            self.controller,
            self.replicas,
            now_ms,
            self.quotas,
            self.groups,
            cluster=cluster,
            transactions=self.transactions,
            txn=self.txn_verifier,
            metrics=self.metrics,
            check_broker_props=self._check_broker_props,
            authorizer=self.authorizer,
            share_partitions=self.share_partitions,
            share_coordinator=self.share_coordinator,
            share_persister=self.share_persister,
        )
        self.services = services
        self.replicas.metadata = self.cache
        self.dispatcher = Dispatcher(services)
        self.socket_server.start_handlers()

    async def _start_metrics(self) -> None:
        if self.metrics is None:
            return
        host, port = self.config["metrics.prometheus.host"], self.config["metrics.prometheus.port"]
        endpoint = MetricsEndpoint(host, port, self.metrics, self._metrics_state)
        try:
            bound = await endpoint.start()
        except OSError as e:
            raise ConfigError(
                f"Cannot serve metrics on {host or '0.0.0.0'}:{port} (metrics.prometheus.host, "
                f"metrics.prometheus.port): {e}"
            ) from None
        self.metrics_endpoint = endpoint
        endpoint.collectors.append(self.authentication_metrics)
        endpoint.collectors.append(GroupCoordinatorMetrics(self.groups))
        if self.authorizer is not None:
            endpoint.collectors.append(AuthorizerMetrics(self.authorizer))
        logger.info("Serving Prometheus metrics on http://%s:%d/metrics", endpoint.host, bound)

    async def _metrics_state(self) -> BrokerState:
        """The broker state a scrape reports, the batch of request times counted first; on
        the event loop thread, a slice at a time."""
        assert self.cache is not None and self.metrics is not None
        self.metrics.flush()
        active = self.embedded is not None or (
            self.zk_controller is not None and self.zk_controller.active
        )
        return await read_state(
            self.replicas, self.cache, self.groups.runtime.groups, active, self.logs.is_offline
        )

    async def _allocate_producer_id(self) -> int:
        assert self.controller is not None
        return await self.controller.allocate_producer_id()

    async def _send_markers(self, node_id: int, request: WriteTxnMarkersRequest) -> Any:
        """WriteTxnMarkers v1: in-process for this broker's partitions, else to the
        partition's leader."""
        if node_id == self.broker_id:
            assert self.services is not None
            return await write_txn_markers(self.services, request)
        if self.txn_client is None:
            raise ConnectionError(f"node {node_id} is not this broker and there is no cluster")
        return await self.txn_client.send(node_id, request, 1)

    async def _send_verify(self, node_id: int, request: AddPartitionsToTxnRequest) -> Any:
        """AddPartitionsToTxn v4 verify_only to the transactional id's coordinator."""
        assert self.verify_client is not None
        return await self.verify_client.send(node_id, request, 4)

    def _partition_exists(self, topic_id: uuid.UUID, index: int) -> bool:
        """Whether the metadata holds this partition of the topic with this id."""
        cache = self.cache
        name = None if cache is None else cache.topic_name(topic_id)
        return name is not None and cache is not None and cache.partition(name, index) is not None

    async def _create_share_state_topic(self) -> None:
        assert self.services is not None
        await create_share_state_topic(self.services)

    def _leader_of(self, topic: str, index: int) -> int | None:
        """The partition's leader for its markers: -1 while it has none, None once it is
        gone."""
        info = None if self.cache is None else self.cache.partition(topic, index)
        return None if info is None else info.leader

    def _endpoint_of(self, node_id: int) -> tuple[str, int] | None:
        """A broker's inter-broker endpoint, as the metadata cache knows it."""
        broker = None if self.cache is None else self.cache.brokers.get(node_id)
        return None if broker is None else broker.endpoint(self.config.inter_broker_listener)

    def _controller_endpoint_of(self, node_id: int) -> tuple[str, int] | None:
        """A live broker's inter-broker endpoint, as the controller knows it."""
        assert self.zk_controller is not None
        broker = self.zk_controller.brokers.get(node_id)
        endpoint = None if broker is None else broker.endpoint(self.config.inter_broker_listener)
        return None if endpoint is None else (endpoint.host, endpoint.port)

    async def _alter_partition(
        self, proposals: list[IsrProposal]
    ) -> list[CommittedIsr | ErrorCode]:
        """Ask the controller to commit new ISRs, all in one AlterPartition v2."""
        assert self.cache is not None and self.cluster is not None
        assert self.controller_client is not None
        controller = self.cache.controller_id
        if controller < 0:
            return [ErrorCode.not_controller] * len(proposals)
        cls = request_type(ALTER_PARTITION, 2)
        by_topic: dict[object, list[IsrProposal]] = {}
        for proposal in proposals:
            by_topic.setdefault(proposal.topic_id, []).append(proposal)
        request = cls(
            broker_id=self.broker_id,
            broker_epoch=self.cluster.broker_epoch,
            topics=tuple(
                nested(cls, "TopicData")(
                    topic_id=topic_id,
                    partitions=tuple(
                        nested(cls, "PartitionData")(
                            partition_index=p.partition,
                            leader_epoch=p.leader_epoch,
                            new_isr=tuple(p.new_isr),
                            leader_recovery_state=0,
                            partition_epoch=p.partition_epoch,
                        )
                        for p in group
                    ),
                )
                for topic_id, group in by_topic.items()
            ),
        )
        response = await self.controller_client.send(controller, request, 2)
        if response.error_code != ErrorCode.none:
            return [response.error_code] * len(proposals)
        answered = {
            (topic.topic_id, p.partition_index): p
            for topic in response.topics
            for p in topic.partitions
        }
        results: list[CommittedIsr | ErrorCode] = []
        for proposal in proposals:
            p = answered.get((proposal.topic_id, proposal.partition))
            if p is None:
                results.append(ErrorCode.unknown_server_error)
            elif p.error_code != ErrorCode.none:
                results.append(p.error_code)
            else:
                results.append(CommittedIsr(p.leader_epoch, list(p.isr), p.partition_epoch))
        return results

    async def _controlled_shutdown(self) -> None:
        """Ask the controller to move this broker's leaderships away (Kafka's
        controlledShutdown), retried controlled.shutdown.max.retries times."""
        assert self.cache is not None and self.cluster is not None
        assert self.controller_client is not None
        config = self.config
        backoff_s = config["controlled.shutdown.retry.backoff.ms"] / 1000
        for attempt in range(1, config["controlled.shutdown.max.retries"] + 1):
            controller = self.cache.controller_id
            problem = "no controller is known"
            if controller >= 0:
                try:
                    response = await self.controller_client.send(
                        controller,
                        ControlledShutdownRequest(
                            broker_id=BrokerId(self.broker_id),
                            broker_epoch=i64(self.cluster.broker_epoch),
                        ),
                        CONTROLLED_SHUTDOWN_VERSION,
                    )
                except (ConnectionError, TimeoutError) as e:
                    problem = f"the controller {controller} did not answer ({e})"
                else:
                    if response.error_code == ErrorCode.none and not (
                        response.remaining_partitions
                    ):
                        logger.info("Controlled shutdown request succeeded")
                        return
                    problem = (
                        f"the controller answered {ErrorCode(response.error_code).name} with "
                        f"{len(response.remaining_partitions)} partition(s) still led here"
                    )
            logger.warning(
                "Controlled shutdown attempt %d failed: %s; retrying in %.1fs",
                attempt,
                problem,
                backoff_s,
            )
            await asyncio.sleep(backoff_s)
        logger.warning(
            "Proceeding to do an unclean shutdown as all the controlled shutdown attempts failed"
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
            bound = await self.socket_server.listen(
                name, host, port, self.listener_securities[name]
            )
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

    def _create_logs(self, topic: TopicInfo) -> None:
        """Create (some of) a new topic's logs before the controller commits the topic (its
        metadata writer makes the log directories durable first, off the event loop); if
        any cannot be created, remove those that were."""
        config = self.replicas.log_config(topic.configs)
        try:
            for index in topic.partitions:
                self.logs.get_or_create(topic.name, index, config, now_ms=now_ms())
        except (OSError, KafkaStorageError):
            self._discard_logs(topic)
            raise

    def _discard_logs(self, topic: TopicInfo) -> None:
        self.logs.discard(topic.name, list(topic.partitions))

    def _check_logs_against_metadata(self) -> None:
        """Logs of partitions the metadata does not know (a topic whose creation or deletion
        a crash interrupted) are renamed aside as Kafka does with stray logs, never deleted;
        partitions it knows without a log start empty, with a warning."""
        assert self.embedded is not None
        cache = self.embedded.cache
        for (topic, index), _ in self.logs.all_logs():
            if cache.partition(topic, index) is None:
                path = self.logs.set_aside_stray(topic, index)
                logger.warning(
                    "Log of %s-%d is not in the metadata (%s): set aside as %s",
                    topic,
                    index,
                    self.embedded.path,
                    path,
                )
        for info in cache.topics.values():
            missing = [i for i in info.partitions if self.logs.get(info.name, i) is None]
            if missing:
                logger.warning(
                    "The logs of %s partition(s) %s are missing: they start empty",
                    info.name,
                    missing,
                )

    def _lead(self, topic: TopicInfo) -> None:
        for info in topic.partitions.values():
            self.replicas.become_leader(topic.name, info, topic.configs)
            if topic.name == OFFSETS_TOPIC:
                self.groups.on_become_leader(info.index)
            elif topic.name == TRANSACTION_STATE_TOPIC:
                self.transactions.on_become_leader(info.index, info.leader_epoch)
            elif topic.name == SHARE_GROUP_STATE_TOPIC:
                self.share_coordinator.on_become_leader(info.index)

    def _apply_configs(self, resource: ConfigResource) -> None:
        """A resource's dynamic configs changed: its logs take them at once. Group configs
        are only stored: they govern the consumer protocol (KIP-848), which Gregor's classic
        coordinator does not serve."""
        assert self.cache is not None
        if resource.type == TOPIC:
            topic = self.cache.topics.get(resource.name)
            if topic is not None:
                self.replicas.update_config(topic.name, topic.configs)
        elif resource.type == BROKER:
            self._apply_broker_configs()

    def _apply_broker_configs(self) -> None:
        """The broker's dynamic configs changed (or were loaded): the logs take the new
        log defaults, and the reconfigurable settings Gregor implements take effect at
        once (Kafka's BrokerReconfigurables): the handler pool's size (num.io.threads),
        the replica fetchers (num.replica.fetchers) and the connection limits
        (max.connections, max.connections.per.ip, max.connections.per.ip.overrides,
        max.connection.creation.rate, also per listener). The other dynamic keys are
        stored and described only."""
        assert self.cache is not None
        topics = self.cache.topics
        props = self.cache.broker_props(self.config.raw, self.broker_id)
        self.replicas.set_broker_props(
            props, lambda name: topics[name].configs if name in topics else {}
        )

        def value(name: str) -> Any:
            parsed = effective_value(props, name)
            return self.config[name] if parsed is None else parsed

        try:
            overrides: Mapping[str, int] = self.config.per_ip_overrides
            if props.get("max.connections.per.ip.overrides") != self.config.raw.get(
                "max.connections.per.ip.overrides"
            ):
                overrides = resolve_ip_overrides(value("max.connections.per.ip.overrides"))
        except ConfigError as e:
            logger.error("Ignoring dynamic max.connections.per.ip.overrides: %s", e)
            overrides = self.socket_server.limits.per_ip_overrides
        try:
            listener_rates = listener_connection_creation_rates(props)
        except ConfigError as e:
            logger.error("Ignoring dynamic listener max.connection.creation.rate: %s", e)
            listener_rates = dict(self.socket_server.limits.listener_connection_creation_rates)
        self.socket_server.reconfigure(
            dataclasses.replace(
                self.socket_server.limits,
                io_threads=value("num.io.threads"),
                max_connections=value("max.connections"),
                max_connections_per_ip=value("max.connections.per.ip"),
                per_ip_overrides=overrides,
                max_connection_creation_rate=value("max.connection.creation.rate"),
                listener_connection_creation_rates=listener_rates,
            )
        )
        if self.replicas.fetchers is not None:
            self.replicas.fetchers.resize(value("num.replica.fetchers"))
        listener_security.apply(self.listener_securities, props)

    def _check_broker_props(self, props: Mapping[str, str]) -> None:
        """The broker's own check of a dynamic change (Kafka's reconfigurables' validation,
        for those that need this broker): the new keystores and truststores of its TLS
        listeners must load. TopicError(INVALID_CONFIG) with the reason otherwise."""
        try:
            listener_security.check(self.listener_securities, props)
        except SslConfigError as e:
            raise TopicError(ErrorCode.invalid_config, str(e)) from None

    def _forget(self, topic: TopicInfo) -> None:
        if self.metrics is not None:
            self.metrics.forget_topic(topic.name)
        for index in topic.partitions:
            if topic.name == OFFSETS_TOPIC:
                self.groups.on_resign(index)
            elif topic.name == TRANSACTION_STATE_TOPIC:
                self.transactions.on_resign(index)
            elif topic.name == SHARE_GROUP_STATE_TOPIC:
                self.share_coordinator.on_resign(index)
            self.replicas.remove(topic.name, index, delete=True)
        self.groups.on_topic_deleted(topic.name)

    def _check_meta_properties(self, cluster_id: str, hint: str) -> None:
        """Every log dir's meta.properties must name this cluster and node. One that does not
        parse is fatal, as in Kafka (its only log dir would be offline): it is written
        atomically, so a torn one was damaged outside the broker. ``hint`` is added to a
        mismatch's message."""
        for log_dir in self.config.log_dirs:
            path = log_dir / META_PROPERTIES
            path.with_name(path.name + ".tmp").unlink(missing_ok=True)  # a crash mid-write
            if not path.exists():
                continue
            try:
                stored = read_properties(path)
            except (OSError, UnicodeDecodeError) as e:
                raise KafkaStorageError(f"{path} is unreadable: {e}") from None
            if (
                stored.get("version") != "1"
                or not stored.get("cluster.id")
                or not stored.get("node.id")
            ):
                raise KafkaStorageError(
                    f"{path} is torn or malformed (it needs version=1, cluster.id and node.id)"
                )
            if stored["cluster.id"] != cluster_id:
                raise ConfigError(
                    f"The cluster id {cluster_id} doesn't match the stored cluster.id "
                    f"{stored['cluster.id']} in {path}{hint}"
                )
            if stored["node.id"] != str(self.broker_id):
                raise ConfigError(
                    f"Stored node id {stored['node.id']} in {path} doesn't "
                    f"match broker.id {self.broker_id}"
                )

    def _write_meta_properties(self, cluster_id: str) -> None:
        """Written once the metadata is saved (the embedded node's file, or ZooKeeper's
        /cluster/id) so a meta.properties never names a cluster whose metadata was not,
        atomically, and only when it changes."""
        content = f"version=1\ncluster.id={cluster_id}\nnode.id={self.broker_id}\n".encode()
        for log_dir in self.config.log_dirs:
            path = log_dir / META_PROPERTIES
            if not path.exists() or path.read_bytes() != content:
                write_atomically(path, content)

    async def run_background(self) -> None:
        """Periodic work (retention, flushes, checkpoints, idle connections, offset
        expiry, the log cleaner); runs until cancelled."""
        config = self.config
        flush_ms = config["log.flush.scheduler.interval.ms"]
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                self._every,
                config["log.retention.check.interval.ms"],
                self._run_retention,
            )
            flush_check_ms = DEFAULT_FLUSH_CHECK_MS if flush_ms == LONG_MAX else flush_ms
            tg.start_soon(self._flusher, flush_check_ms)
            idle_ms = config["connections.max.idle.ms"]
            if idle_ms > 0:
                tg.start_soon(
                    self._every,
                    max(min(idle_ms // 4, 30_000), 10),
                    lambda _now: self.socket_server.close_idle(idle_ms / 1000),
                )
            tg.start_soon(self._checkpointer, config["log.flush.offset.checkpoint.interval.ms"])
            tg.start_soon(
                self._every,
                config["offsets.retention.check.interval.ms"],
                self.groups.expire_offsets,
            )
            tg.start_soon(self._every, QUOTA_EXPIRY_CHECK_MS, self.quotas.expire)
            txn = self.transactions.settings
            tg.start_soon(self._every, txn.abort_interval_ms, self.transactions.abort_timed_out)
            tg.start_soon(self._every, txn.remove_interval_ms, self.transactions.expire_ids)
            tg.start_soon(
                self._every,
                self.share_coordinator.settings.prune_interval_ms,
                self.share_coordinator.prune,
            )
            if self.cleaner.config.enable:
                tg.start_soon(self.cleaner.run, now_ms)
            if any(s.tls is not None for s in self.listener_securities.values()):
                tg.start_soon(
                    self._every,
                    TLS_RELOAD_CHECK_MS,
                    lambda _now: listener_security.reload_changed(self.listener_securities),
                )

    async def _flusher(self, interval_ms: int) -> None:
        """Owed fsyncs (rolled segments, flush.ms, flush.messages) and file deletions: queued
        on the loop, done on a worker thread; flush.messages wakes it early."""
        wake = asyncio.Event()
        self.logs.wake_flusher = wake.set
        while True:
            with anyio.move_on_after(max(interval_ms, 10) / 1000):
                await wake.wait()
            wake.clear()
            await self._off_loop(self.logs.prepare_flush)

    async def _checkpointer(self, interval_ms: int) -> None:
        while True:
            await anyio.sleep(max(interval_ms, 10) / 1000)
            await self._off_loop(
                lambda _now: self.logs.prepare_checkpoint(self.replicas.high_watermarks())
            )

    async def _off_loop(self, prepare: Callable[[int], DiskJobs]) -> None:
        """Prepare disk jobs here, run them on a worker thread (fsync, write and unlink release
        the GIL, so other clients are served meanwhile), and finish them here: descriptors are
        only ever closed on the event loop thread."""
        try:
            jobs = prepare(now_ms())
        except Exception:
            logger.exception("Preparing periodic disk work %s failed", prepare)
            return
        if not jobs:
            return
        try:
            await anyio.to_thread.run_sync(_run_jobs, list(jobs.values()))
        finally:
            self.logs.finish_jobs(jobs)

    def _run_retention(self, now_ms: int) -> None:
        for tp in self.logs.run_retention(now_ms, self.replicas.high_watermarks()):
            partition = self.replicas.get(*tp)
            if partition is not None:
                self.replicas.on_log_start_moved(partition)

    @staticmethod
    async def _every(interval_ms: int, work: Callable[[int], object]) -> None:
        while True:
            await anyio.sleep(max(interval_ms, 10) / 1000)
            try:
                work(now_ms())
            except Exception:
                logger.exception("Periodic log task %s failed", work)

    async def shutdown(self) -> None:
        logger.info("[KafkaServer id=%d] shutting down", self.broker_id)
        if self.metrics_endpoint is not None:
            await self.metrics_endpoint.stop()
        self._jwks_stop.set()
        for jwks in self.jwks:
            jwks.wake()
        if self.cluster is not None and self.config["controlled.shutdown.enable"]:
            # While still serving: the controller moves leaderships away through us.
            await self._controlled_shutdown()
        if self.cluster is not None:
            await self.cluster.stop()
        await self.socket_server.stop_accepting()
        # Validations not started yet are dropped (their requests were never answered, so
        # nothing is lost), else the process would work through the backlog a flood of
        # heavy requests left before it could exit.
        self.validation_pool.shutdown(wait=False, cancel_futures=True)
        self.groups.shutdown()  # parked joins and syncs answer NOT_COORDINATOR
        self.transactions.shutdown()
        self.share_coordinator.shutdown()
        self.replicas.shutdown()  # parked fetches answer with what they have
        self.share_partitions.shutdown()
        await asyncio.sleep(0)
        await self.socket_server.drain(SHUTDOWN_GRACE_S)
        self.logs.shutdown(self.replicas.high_watermarks())
        for client in (
            self.fetch_client,
            self.controller_client,
            self.channel_client,
            self.txn_client,
            self.verify_client,
            self.share_client,
        ):
            if client is not None:
                await client.close()
        if self.zk is not None:
            await self.zk.close()  # the registration goes at once, not after the session
        for thread in self._jwks_threads:
            await anyio.to_thread.run_sync(thread.join)
        if self.logs.offline_dirs:
            logger.error(
                "[KafkaServer id=%d] shut down with offline log directories %s: their logs "
                "were not closed cleanly and will be recovered at the next start",
                self.broker_id,
                ", ".join(map(str, sorted(self.logs.offline_dirs))),
            )
        else:
            logger.info("[KafkaServer id=%d] shut down completed", self.broker_id)


def tls_handshake_timeout_ms(config: BrokerConfig) -> int:
    """How long a TLS handshake may take: connections.max.idle.ms, as Kafka's idle expiry
    closes a channel stuck in its handshake, at most TLS_HANDSHAKE_MAX_MS."""
    idle_ms: int = config["connections.max.idle.ms"]
    return TLS_HANDSHAKE_MAX_MS if idle_ms <= 0 else min(idle_ms, TLS_HANDSHAKE_MAX_MS)


def _run_jobs(jobs: list[DiskJob]) -> None:
    for job in jobs:
        job.run()
