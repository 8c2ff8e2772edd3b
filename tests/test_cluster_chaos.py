"""Failover under load: the Java producer (idempotent, acks=all) and a librdkafka producer
write continuously to a replicated topic (RF=3, min.insync.replicas=2) while brokers are
killed with -9 and restarted. Afterwards every acknowledged record is in the log exactly
once, in its producer's order within each partition, and every replica of every
partition is byte-identical on disk.

Once more on a secured cluster (SASL_SSL between brokers and to clients, the authorizer
on): the controller's kill first, whose failover sends every inter-broker request (the new
controller's LeaderAndIsr and UpdateMetadata, followers' fetches, AlterPartition) over
the secured listener. The other scenario adds nothing inter-broker, so it runs plain only.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, Producer
from confluent_kafka import TopicPartition as Tp
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests import java_client
from gregor.server.harness.cluster import Cluster
from gregor.server.harness.secured import ClientConfig
from tests.test_cluster import new_topic, wait_for_identical_replicas

PARTITIONS = 3
FAILOVER_S = 30.0


# A new cluster for each test: a chaos run leaves brokers in any state.
@pytest.fixture
def cluster(tmp_path_factory: pytest.TempPathFactory, secure: bool) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("chaos"), secure=secure) as c:
        c.wait_for_brokers([1, 2, 3])
        yield c


class JavaProducer:
    """GregorClient's produce command fed records through stdin as the test goes."""

    def __init__(self, client: ClientConfig, topic: str) -> None:
        self.sent: list[tuple[int, bytes]] = []  # (partition, value) in send order
        properties = client.properties()
        del properties["bootstrap.servers"]
        configs = [arg for k, v in properties.items() for arg in ("--config", f"{k}={v}")]
        self._proc = subprocess.Popen(
            [
                *java_client.driver_command(),
                "produce",
                "--bootstrap",
                client.bootstrap,
                "--topic",
                topic,
                "--config",
                "acks=all",
                "--config",
                "enable.idempotence=true",
                "--config",
                "linger.ms=5",
                *configs,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def send(self, partition: int, value: bytes) -> None:
        assert self._proc.stdin is not None
        self.sent.append((partition, value))
        record = {"key": None, "value": java_client._b64(value), "partition": partition}
        self._proc.stdin.write(json.dumps(record) + "\n")
        self._proc.stdin.flush()

    def finish(self) -> list[tuple[int, bytes]]:
        """Close stdin and wait; the acknowledged (partition, value)s in send order."""
        out, err = self._proc.communicate(timeout=150)
        results = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        assert len(results) == len(self.sent), f"java produced {len(results)} results: {err}"
        return [s for s, r in zip(self.sent, results, strict=True) if "error" not in r]


def keep_producing(
    stop: threading.Event, send: Callable[[int, bytes], None], prefix: bytes
) -> Callable[[], None]:
    def run() -> None:
        i = 0
        while not stop.is_set():
            send(i % PARTITIONS, prefix + b"%07d" % i)
            i += 1
            time.sleep(0.002)

    return run


def read_all(client: ClientConfig, topic: str) -> dict[int, list[bytes]]:
    """Every record of every partition, from the start up to the high watermark."""
    consumer = Consumer(
        {
            **client.confluent(),
            "group.id": new_topic("reader"),
            "enable.auto.commit": False,
        }
    )
    try:
        ends = {
            p: consumer.get_watermark_offsets(Tp(topic, p), timeout=30)[1]
            for p in range(PARTITIONS)
        }
        consumer.assign([Tp(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        got: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
        deadline = time.monotonic() + 60
        while any(len(got[p]) < ends[p] for p in got) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got[msg.partition()].append(msg.value())
        counts = {p: len(v) for p, v in got.items()}
        assert counts == ends, f"awaited each partition up to its high watermark {ends}: {counts}"
        return got
    finally:
        consumer.close()


def check_exactly_once_in_order(
    log: dict[int, list[bytes]], acked: list[tuple[int, bytes]], who: str
) -> None:
    for partition, values in log.items():
        mine = [v for p, v in acked if p == partition]
        positions = {}
        for index, value in enumerate(values):
            assert value not in positions, f"{who}: {value!r} twice in partition {partition}"
            positions[value] = index
        missing = [v for v in mine if v not in positions]
        assert not missing, f"{who}: {len(missing)} acknowledged record(s) lost: {missing[:3]}"
        order = [positions[v] for v in mine]
        assert order == sorted(order), f"{who}: partition {partition} out of producer order"


def leader_of(cluster: Cluster, topic: str, partition: int) -> int:
    return cluster.wait_for_leader(topic, partition, timeout=FAILOVER_S).leader


@pytest.mark.parametrize(
    ("first", "secure"),
    [
        pytest.param("leader", False, id="leader"),
        pytest.param("controller", False, id="controller"),
        pytest.param("controller", True, id="controller-sasl_ssl"),
    ],
)
def test_producers_lose_nothing_through_kills_and_restarts(cluster: Cluster, first: str) -> None:
    topic = new_topic("chaos")
    client = cluster.client_config()
    admin = AdminClient(client.confluent())
    admin.create_topics(
        [NewTopic(topic, PARTITIONS, 3, config={"min.insync.replicas": "2"})], operation_timeout=30
    )[topic].result(timeout=60)
    cluster.wait_for_topic(topic, PARTITIONS, isr=3)

    java = JavaProducer(client, topic)
    rd_acked: list[tuple[int, bytes]] = []
    rd_errors: list[KafkaError] = []
    producer = Producer(
        {
            **client.confluent(),
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
        }
    )

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is None:
            rd_acked.append((msg.partition(), msg.value()))
        else:
            rd_errors.append(err)

    def rd_send(partition: int, value: bytes) -> None:
        producer.produce(topic, value, partition=partition, on_delivery=on_delivery)
        producer.poll(0)

    stop = threading.Event()
    threads = [
        threading.Thread(target=keep_producing(stop, java.send, b"j")),
        threading.Thread(target=keep_producing(stop, rd_send, b"c")),
    ]
    for t in threads:
        t.start()
    try:
        time.sleep(1)
        controller = cluster.wait_for_controller()
        leader = leader_of(cluster, topic, 0)
        order = [leader, controller] if first == "leader" else [controller, leader]
        killed: list[int] = []
        for victim in dict.fromkeys(order):  # the same broker may be both
            if victim in killed:
                continue
            cluster.kill(victim)
            killed.append(victim)
            if len(killed) == 2:
                break
            cluster.wait_for_leader(topic, 0, not_in=killed, timeout=FAILOVER_S)
        cluster.wait_for_controller(not_in=killed, timeout=FAILOVER_S)
        for victim in killed:
            cluster.restart(victim)
        cluster.wait_for_topic(topic, PARTITIONS, isr=3, timeout=FAILOVER_S)
        # Then another: the leader of partition 1 now.
        another = leader_of(cluster, topic, 1)
        cluster.kill(another)
        cluster.wait_for_leader(topic, 1, not_in=[another], timeout=FAILOVER_S)
        cluster.restart(another)
        cluster.wait_for_topic(topic, PARTITIONS, isr=3, timeout=FAILOVER_S)
        time.sleep(1)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert producer.flush(90) == 0
    java_acked = java.finish()
    assert java_acked and rd_acked, (len(java_acked), len(rd_acked))

    log = read_all(client, topic)
    check_exactly_once_in_order(
        {p: [v for v in vs if v.startswith(b"j")] for p, vs in log.items()}, java_acked, "java"
    )
    check_exactly_once_in_order(
        {p: [v for v in vs if v.startswith(b"c")] for p, vs in log.items()}, rd_acked, "librdkafka"
    )
    for partition in range(PARTITIONS):
        wait_for_identical_replicas(cluster, topic, partition)
