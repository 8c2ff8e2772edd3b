"""A secured 3-broker cluster (``Cluster(secure=True)``: SASL_SSL between brokers and to
clients, the ACL authorizer on, the brokers' principal a super user): replication works
over it (followers fetch and the controller's requests arrive only because the brokers
authenticate to each other as ``User:broker``); no secret reaches a log. The other half of
the issue's bar: a client that is no broker, anonymous on a PLAINTEXT listener or the
ordinary user ``alice`` on SASL_SSL, sends the controller's and the transaction
coordinator's requests, made as the real ones would be (the current controller and broker
epochs), and gets CLUSTER_AUTHORIZATION_FAILED with nothing changed: not the replicas on
disk, not the leaders and ISRs in ZooKeeper or any broker's Metadata, not an open
transaction. Kills and failover on the secured cluster: ``test_cluster_chaos.py``.
``scripts/cluster start --secure`` prints client properties that work."""

from __future__ import annotations

import base64
import datetime
import json
import socket
import stat
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer
from confluent_kafka import TopicPartition as Tp
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient
from kio.schema.errors import ErrorCode
from kio.schema.write_txn_markers.v1.request import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
)

from gregor.apis.context import build, nested
from gregor.server.cli.client.connection import PLAINTEXT, Connection
from gregor.server.config import read_properties
from gregor.server.harness.cluster import BrokerView, Cluster
from gregor.server.harness.secured import USER
from gregor.server.security.client_security import ClientSecurity
from gregor.wire.interbroker import (
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    LeaderAndIsrTopicState,
    StopReplicaPartitionState,
    StopReplicaRequest,
    StopReplicaTopicState,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
    UpdateMetadataTopicState,
)
from gregor.wire.records import split_batches
from gregor.wire.schema import request_type
from gregor.wire.versions import FETCH, LIST_OFFSETS
from tests.test_cluster import (
    acknowledged,
    new_topic,
    produce,
    wait_for_identical_replicas,
)

DENIED = ErrorCode.cluster_authorization_failed
REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("secure"), secure=True, anonymous_listener=True) as c:
        c.wait_for_brokers(c.brokers)
        yield c


@pytest.fixture(scope="module")
def zk(cluster: Cluster) -> Iterator[KazooClient]:
    client = KazooClient(hosts=cluster.zookeeper.connect)
    client.start(10)
    yield client
    client.stop()
    client.close()


def admin_call(cluster: Cluster, broker_id: int, request: Any) -> Any:
    security = ClientSecurity.from_properties(cluster.client_config().properties())
    return call(cluster.brokers[broker_id].port, security, request)


def call(port: int, security: ClientSecurity, request: Any) -> Any:
    connection = Connection("127.0.0.1", port, "not-a-broker", 10.0, security=security)
    try:
        return connection.call(request)
    finally:
        connection.close()


def test_replication_over_sasl_ssl_and_no_secret_in_any_log(cluster: Cluster) -> None:
    topic = new_topic("secured")
    admin = cluster.client_config()
    create_topic(cluster, topic)
    values = [b"v%03d" % i for i in range(50)]
    acknowledged(produce(admin.bootstrap, topic, values, **secured(admin.confluent())))
    assert consume(admin.confluent(), topic, len(values)) == values
    wait_for_identical_replicas(cluster, topic, 0)

    assert cluster.security is not None
    secrets = [cluster.security.broker_password, *cluster.security.passwords.values()]
    for broker in cluster.brokers.values():
        properties = broker.directory / "server.properties"
        assert stat.S_IMODE(properties.stat().st_mode) == 0o600
        assert cluster.security.broker_password in properties.read_text()
        log = broker.log_path.read_text()
        assert "serve " in log and not [s for s in secrets if s in log]


def consume(config: dict[str, str], topic: str, count: int) -> list[bytes]:
    consumer = Consumer({**config, "group.id": new_topic("g"), "enable.auto.commit": False})
    consumer.assign([Tp(topic, 0, OFFSET_BEGINNING)])
    try:
        got: list[bytes] = []
        while len(got) < count:
            messages = consumer.consume(count - len(got), timeout=30)
            assert messages, f"{len(got)} of {count} records of {topic} in 30s"
            got += [m.value() for m in messages if m.error() is None]
        return got
    finally:
        consumer.close()


def secured(confluent: dict[str, str]) -> dict[str, str]:
    """librdkafka's settings but the bootstrap servers, as keyword arguments."""
    return {k: v for k, v in confluent.items() if k != "bootstrap.servers"}


def create_topic(cluster: Cluster, topic: str) -> None:
    admin = AdminClient(cluster.client_config().confluent())
    new = NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})
    admin.create_topics([new], operation_timeout=30)[topic].result(timeout=60)
    cluster.wait_for_topic(topic, 1, isr=3)


@dataclass
class Snapshot:
    """What a forged request could change: every broker's Metadata of the topic, the
    partition's state znode (data and version), each replica's segment files, the log end
    and last stable offsets."""

    views: dict[int, Any]
    state: tuple[bytes, int]
    segments: dict[int, dict[str, bytes]]
    end: int
    stable: int


def snapshot(cluster: Cluster, zk: KazooClient, topic: str, leader: int) -> Snapshot:
    views = {i: view(cluster, i, topic) for i in cluster.brokers}
    data, stat_ = zk.get(f"/brokers/topics/{topic}/partitions/0/state")
    return Snapshot(
        views,
        (data, stat_.version),
        cluster.segment_bytes(topic, 0),
        list_offset(cluster, leader, topic, isolation=0),
        list_offset(cluster, leader, topic, isolation=1),
    )


def view(cluster: Cluster, broker_id: int, topic: str) -> tuple[Any, ...]:
    found: BrokerView = cluster.metadata(broker_id)
    return (sorted(found.brokers), found.controller_id, found.topics[topic])


def list_offset(cluster: Cluster, broker_id: int, topic: str, isolation: int) -> int:
    cls = request_type(LIST_OFFSETS, 7)
    t, p = nested(cls, "ListOffsetsTopic"), nested(cls, "ListOffsetsPartition")
    request = cls(
        replica_id=-1,
        isolation_level=isolation,
        topics=(t(name=topic, partitions=(p(partition_index=0, timestamp=-1),)),),
    )
    answer = admin_call(cluster, broker_id, request).topics[0].partitions[0]
    assert answer.error_code == ErrorCode.none
    return int(answer.offset)


def open_transaction_batch(cluster: Cluster, broker_id: int, topic: str) -> Any:
    """The header of the last batch in the partition (read uncommitted)."""
    cls = request_type(FETCH, 12)
    t, p = nested(cls, "FetchTopic"), nested(cls, "FetchPartition")
    request = build(
        cls,
        replica_id=-1,
        max_wait=datetime.timedelta(0),
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(
            t(
                topic=topic,
                partitions=(p(partition=0, fetch_offset=0, partition_max_bytes=1 << 20),),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
    )
    part = admin_call(cluster, broker_id, request).responses[0].partitions[0]
    return split_batches(bytes(part.records))[-1]


@pytest.fixture(scope="module")
def open_transaction(cluster: Cluster) -> Iterator[tuple[str, Producer]]:
    """A topic (RF 3) with committed records, then an open transaction of the admin's."""
    topic = new_topic("forged")
    create_topic(cluster, topic)
    admin = cluster.client_config()
    acknowledged(produce(admin.bootstrap, topic, [b"committed"] * 3, **secured(admin.confluent())))
    producer = Producer({**admin.confluent(), "transactional.id": new_topic("txn")})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"pending", partition=0)
    assert producer.flush(30) == 0
    yield topic, producer
    producer.abort_transaction(30)


def forged_requests(
    cluster: Cluster, zk: KazooClient, topic: str, target: int, leader: int, txn: Any
) -> list[Any]:
    """LeaderAndIsr, UpdateMetadata, StopReplica and WriteTxnMarkers as the controller and
    the transaction coordinator would send them now (current epochs), each of which would
    change the partition if applied."""
    controller_epoch = int(zk.get("/controller_epoch")[0])
    controller = int(json.loads(zk.get("/controller")[0])["brokerid"])
    broker_epoch = zk.exists(f"/brokers/ids/{target}").czxid
    assignment = json.loads(zk.get(f"/brokers/topics/{topic}")[0])
    topic_id = uuid.UUID(bytes=base64.urlsafe_b64decode(assignment["topic_id"] + "=="))
    data, state_stat = zk.get(f"/brokers/topics/{topic}/partitions/0/state")
    state = json.loads(data)
    epochs = {
        "controller_id": controller,
        "controller_epoch": controller_epoch,
        "broker_epoch": broker_epoch,
    }
    leader_and_isr = LeaderAndIsrRequest(  # makes ``target`` the only in-sync leader
        **epochs,
        topic_states=(
            LeaderAndIsrTopicState(
                topic_name=topic,
                topic_id=topic_id,
                partition_states=(
                    LeaderAndIsrPartitionState(
                        partition_index=0,
                        controller_epoch=controller_epoch,
                        leader=target,
                        leader_epoch=state["leader_epoch"] + 1,
                        isr=(target,),
                        partition_epoch=state_stat.version + 1,
                        replicas=tuple(assignment["partitions"]["0"]),
                    ),
                ),
            ),
        ),
        live_leaders=(),
    )
    update = UpdateMetadataRequest(  # drops every broker, and the partition ("deleted")
        **epochs,
        topic_states=(
            UpdateMetadataTopicState(
                topic_name=topic,
                topic_id=topic_id,
                partition_states=(
                    UpdateMetadataPartitionState(
                        partition_index=0,
                        controller_epoch=controller_epoch,
                        leader=-2,
                        leader_epoch=state["leader_epoch"] + 1,
                        zk_version=0,
                    ),
                ),
            ),
        ),
        live_brokers=(),
    )
    stop = StopReplicaRequest(  # deletes the replica
        **epochs,
        topic_states=(
            StopReplicaTopicState(
                topic_name=topic,
                partition_states=(
                    StopReplicaPartitionState(
                        partition_index=0, leader_epoch=-2, delete_partition=True
                    ),
                ),
            ),
        ),
    )
    commit = WriteTxnMarkersRequest(  # commits the open transaction (sent to the leader)
        markers=(
            WritableTxnMarker(
                producer_id=txn.producer_id,
                producer_epoch=txn.producer_epoch,
                transaction_result=True,
                topics=(WritableTxnMarkerTopic(name=topic, partition_indexes=(0,)),),
                coordinator_epoch=0,
            ),
        )
    )
    return [leader_and_isr, update, stop, commit]


def errors(answer: Any) -> set[Any]:
    if hasattr(answer, "markers"):
        return {p.error_code for m in answer.markers for t in m.topics for p in t.partitions}
    return {answer.error_code}


@pytest.mark.parametrize("sender", ["anonymous", "alice"])
def test_inter_broker_requests_from_a_non_broker_are_refused_and_change_nothing(
    cluster: Cluster, zk: KazooClient, open_transaction: tuple[str, Producer], sender: str
) -> None:
    topic, _ = open_transaction
    state = cluster.wait_for_topic(topic, 1, isr=3)[0]
    leader = state.leader
    target = next(b for b in state.replicas if b != leader)
    txn = open_transaction_batch(cluster, leader, topic)
    assert txn.is_transactional and not txn.is_control
    wait_for_identical_replicas(cluster, topic, 0)
    before = snapshot(cluster, zk, topic, leader)
    assert before.stable < before.end  # the transaction is open

    if sender == "anonymous":
        security, ports = PLAINTEXT, {i: cluster.anonymous_port(i) for i in cluster.brokers}
    else:
        security = ClientSecurity.from_properties(cluster.client_config(USER).properties())
        ports = {i: b.port for i, b in cluster.brokers.items()}
    *controllers, commit = forged_requests(cluster, zk, topic, target, leader, txn)
    for request in controllers:
        for broker_id in cluster.brokers:
            answer = call(ports[broker_id], security, request)
            assert errors(answer) == {DENIED}, (type(request).__name__, broker_id, answer)
    assert errors(call(ports[leader], security, commit)) == {DENIED}

    after = snapshot(cluster, zk, topic, leader)
    assert after == before


def free_port_pair() -> int:
    """A port p such that p and p + 1 are free now (a 1-broker secured scripts/cluster)."""
    while True:
        with socket.socket() as first, socket.socket() as second:
            first.bind(("127.0.0.1", 0))
            port = first.getsockname()[1]
            try:
                second.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
            return port


def test_scripts_cluster_secure_prints_configs_that_work(tmp_path: Path) -> None:
    script = [sys.executable, str(REPO_ROOT / "scripts" / "cluster")]
    work = tmp_path / "cluster"
    port = free_port_pair()
    start = [*script, "start", "--secure", "-n", "1", "--dir", str(work)]
    start += ["--zk-port", str(free_port_pair()), "--port", str(port)]
    started = subprocess.run(start, capture_output=True, text=True, timeout=120)
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        admin = work / "admin.properties"
        assert f"# {admin}: admin" in started.stdout
        assert read_properties(admin)["security.protocol"] == "SASL_SSL"
        assert read_properties(admin)["sasl.jaas.config"] in started.stdout
        assert stat.S_IMODE(admin.stat().st_mode) == 0o600
        status = subprocess.run([*script, "status", "--dir", str(work)], capture_output=True)
        assert status.returncode == 0 and b"sees brokers [1]" in status.stdout
        # The printed properties work for gregor's tools.
        gregor = [sys.executable, "-m", "gregor.server.cli", "topics"]
        gregor += ["--bootstrap-server", f"127.0.0.1:{port}", "--create", "--topic", "t"]
        created = subprocess.run([*gregor, "--command-config", str(admin)], capture_output=True)
        assert created.returncode == 0, created.stderr
    finally:
        subprocess.run([*script, "stop", "--dir", str(work)], capture_output=True, timeout=120)
