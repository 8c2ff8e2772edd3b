"""A 3-broker cluster under faults: a paused follower, a lost ZooKeeper session, a
controlled shutdown, the loss of a group's coordinator.

Settings are shortened so each fault shows within seconds: a follower leaves the ISR after
2 s without catching up (checked every 1 s), a ZooKeeper session expires after 6 s, and
leadership returns to preferred replicas within seconds of their return.
"""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.process_pool import ProcessPool
from gregor.server.harness.cluster import BrokerView, Cluster
from tests.kafka_wire import WireClient
from tests.test_client_quotas import alter
from tests.test_cluster import acknowledged, consume_all, new_topic, produce
from tests.test_cluster_quotas import throttled

SESSION_TIMEOUT_MS = 6000
LAG_TIME_MS = 2000
OVERRIDES = {
    "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "replica.lag.time.max.ms": str(LAG_TIME_MS),
    "leader.imbalance.check.interval.seconds": "2",
    "leader.imbalance.per.broker.percentage": "0",
}
WAIT_S = 30.0


@pytest.fixture(scope="module")
def cluster(process_pool: ProcessPool) -> Cluster:
    return process_pool.cluster(OVERRIDES)


def create_led_by(cluster: Cluster, topic: str, replicas: list[int], **configs: str) -> None:
    """One partition with these replicas, the first its preferred leader."""
    client = AdminClient({"bootstrap.servers": cluster.bootstrap})
    futures = client.create_topics(
        [NewTopic(topic, 1, replica_assignment=[replicas], config=dict(configs))],
        operation_timeout=30,
    )
    futures[topic].result(timeout=60)


def send(bootstrap: str, topic: str, acks: str, n: int) -> list[int | None]:
    """Delivery outcomes without retries: each record's error code, or None."""
    outcomes: list[int | None] = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "retries": 0,
            "enable.idempotence": False,
            "message.timeout.ms": 10_000,
        }
    )
    for i in range(n):
        producer.produce(
            topic, b"v%d" % i, on_delivery=lambda e, _m: outcomes.append(e and e.code())
        )
    assert producer.flush(20) == 0
    return outcomes


def limit(port: int, client_id: str) -> None:
    """A request_percentage quota small enough that any client `client_id` is throttled."""
    client = WireClient(port)
    try:
        assert alter(client, [({"client-id": client_id}, {"request_percentage": 0.01})]) == [
            (0, None)
        ]
    finally:
        client.close()


def isr_is(cluster: Cluster, topic: str, isr: set[int]) -> object:
    def holds(views: dict[int, BrokerView]) -> bool:
        return all(set(v.topics.get(topic, {}).get(0, _NONE).isr) == isr for v in views.values())

    return holds


class _NoPartition:
    isr: tuple[int, ...] = ()
    leader = -1


_NONE = _NoPartition()


def log_sizes(cluster: Cluster) -> dict[int, int]:
    return {i: b.log_path.stat().st_size for i, b in cluster.brokers.items()}


def tracebacks_since(cluster: Cluster, sizes: dict[int, int]) -> dict[int, str]:
    """What each broker logged after ``sizes`` (log_sizes), where that holds a traceback:
    a lost session is an expected fault, answered with plain log lines."""
    found = {}
    for i, broker in cluster.brokers.items():
        with open(broker.log_path, "rb") as log:
            log.seek(sizes[i])
            text = log.read().decode(errors="replace")
        if "Traceback" in text:
            found[i] = text
    return found


def test_paused_followers_leave_the_isr_and_rejoin(cluster: Cluster) -> None:
    controller = cluster.wait_for_controller()
    followers = [i for i in cluster.brokers if i != controller]
    topic = new_topic()
    # Led by the controller, so AlterPartition keeps working while the followers sleep.
    create_led_by(cluster, topic, [controller, *followers], **{"min.insync.replicas": "2"})
    cluster.wait_for_topic(topic, 1, isr=3)
    assert send(cluster.brokers[controller].bootstrap, topic, "all", 3) == [None] * 3

    for follower in followers:
        cluster.pause(follower)
    try:
        # Paused for less than the session timeout: the leader, not the controller's
        # broker-death handling, takes them out of the ISR once they have been behind for
        # replica.lag.time.max.ms. As in Kafka, a follower holding the leader's whole log
        # counts as caught up, so a write (acks=1) puts them behind first.
        bootstrap = cluster.brokers[controller].bootstrap
        assert send(bootstrap, topic, "1", 1) == [None]
        cluster.wait_until(
            isr_is(cluster, topic, {controller}),
            f"the ISR of {topic} to shrink to the leader {controller}",
            timeout=SESSION_TIMEOUT_MS / 1000 - 1,
        )
        assert send(bootstrap, topic, "all", 3) == [KafkaError.NOT_ENOUGH_REPLICAS] * 3
        assert send(bootstrap, topic, "1", 3) == [None] * 3
    finally:
        for follower in followers:
            cluster.resume(follower)
    cluster.wait_until(
        isr_is(cluster, topic, {controller, *followers}),
        f"the followers {followers} to rejoin the ISR of {topic}",
        timeout=WAIT_S,
    )
    assert send(cluster.bootstrap, topic, "all", 3) == [None] * 3


@pytest.mark.parametrize("who", ["a broker", "the controller"])
def test_a_broker_whose_zookeeper_session_expired_registers_again(
    cluster: Cluster, who: str
) -> None:
    controller = cluster.wait_for_controller()
    victim = (
        controller
        if who == "the controller"
        else next(i for i in cluster.brokers if i != controller)
    )
    topic = new_topic()
    create_led_by(
        cluster,
        topic,
        [victim, *sorted(set(cluster.brokers) - {victim})],
        **{"min.insync.replicas": "2"},
    )
    cluster.wait_for_topic(topic, 1, isr=3)
    first = [b"a%04d" % i for i in range(500)]
    acknowledged(produce(cluster.bootstrap, topic, first))
    other = cluster.brokers[next(i for i in cluster.brokers if i != victim)]

    sizes = log_sizes(cluster)
    cluster.pause(victim)
    try:
        # The session expires: the controller sees the broker gone and moves leadership.
        cluster.wait_until(
            lambda views: all(victim not in v.brokers for v in views.values()),
            f"broker {victim}'s registration to expire",
            timeout=SESSION_TIMEOUT_MS / 1000 + WAIT_S,
        )
        cluster.wait_for_leader(topic, 0, not_in=[victim])
        if victim == controller:  # another broker took over
            cluster.wait_for_controller(not_in=[victim], timeout=WAIT_S)
        limit(other.port, f"{topic}-during")  # a quota set while the victim sleeps
    finally:
        cluster.resume(victim)
    # Woken up, it finds its session gone, registers again and catches up.
    cluster.wait_for_brokers([1, 2, 3], timeout=WAIT_S)
    # It follows /config/changes again: the quota set while it slept, and one set now.
    limit(other.port, f"{topic}-after")
    port = cluster.brokers[victim].port
    for client_id in (f"{topic}-during", f"{topic}-after"):
        cluster.wait_until(
            lambda _views, c=client_id: throttled(port, c),
            f"broker {victim} to enforce the quota of {client_id}",
            timeout=WAIT_S,
        )
    cluster.wait_for_topic(topic, 1, isr=3, timeout=WAIT_S)
    second = [b"b%04d" % i for i in range(500)]
    acknowledged(produce(cluster.bootstrap, topic, second))
    got = consume_all(cluster.bootstrap, topic, len(first) + len(second))
    assert [m.value() for m in got] == first + second
    assert tracebacks_since(cluster, sizes) == {}


def test_controlled_shutdown_moves_leadership_without_producer_errors(cluster: Cluster) -> None:
    controller = cluster.wait_for_controller()
    leaving = next(i for i in cluster.brokers if i != controller)
    topic = new_topic()
    create_led_by(
        cluster,
        topic,
        [leaving, *sorted(set(cluster.brokers) - {leaving})],
        **{"min.insync.replicas": "2"},
    )
    cluster.wait_for_topic(topic, 1, isr=3)

    errors: list[KafkaError] = []
    delivered: list[bytes] = []
    stop = threading.Event()

    def keep_producing() -> None:
        producer = Producer(
            {
                "bootstrap.servers": cluster.bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
            }
        )

        def report(err: KafkaError | None, msg: object) -> None:
            if err is not None:
                errors.append(err)
            else:
                delivered.append(msg.value())  # type: ignore[attr-defined]

        i = 0
        while not stop.is_set():
            producer.produce(topic, b"c%06d" % i, on_delivery=report)
            producer.poll(0.002)
            i += 1
        assert producer.flush(60) == 0

    def delivered_beyond(count: int) -> None:
        deadline = time.monotonic() + WAIT_S
        while len(delivered) < count + 200 and not errors:
            assert time.monotonic() < deadline, f"{len(delivered)} delivered"
            time.sleep(0.01)

    thread = threading.Thread(target=keep_producing)
    thread.start()
    try:
        delivered_beyond(0)  # producing at full speed before the shutdown starts
        cluster.stop(leaving)  # SIGTERM: controlled shutdown, waited for
        moved = cluster.wait_for_leader(topic, 0, not_in=[leaving])
        assert moved.leader != leaving
        delivered_beyond(len(delivered))  # and producing on after it
    finally:
        stop.set()
        thread.join(90)
    assert not errors, f"the producer saw {len(errors)} error(s), first: {errors[:3]}"
    assert delivered, "nothing was delivered"

    # The broker comes back; the preferred leader (first replica) leads again.
    cluster.brokers[leaving].start()
    cluster.wait_for_topic(topic, 1, isr=3, timeout=WAIT_S)
    # Read once all three run: the group's coordinator may need __consumer_offsets made, at
    # its replication factor of 3 (with a broker stopped, Kafka refuses to make it too).
    got = consume_all(cluster.bootstrap, topic, len(delivered))
    assert [m.value() for m in got] == delivered
    back = cluster.wait_until(
        lambda views: all(v.topics[topic][0].leader == leaving for v in views.values()),
        f"the preferred leader {leaving} of {topic} to lead again",
        timeout=WAIT_S,
    )
    assert back


def test_a_group_keeps_consuming_through_the_loss_of_its_coordinator(cluster: Cluster) -> None:
    topic = new_topic()
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})  # outlives its futures
    admin.create_topics([NewTopic(topic, 1, 3)], operation_timeout=30)[topic].result(timeout=60)
    cluster.wait_for_topic(topic, 1, isr=3)
    values = [b"g%04d" % i for i in range(400)]
    acknowledged(produce(cluster.bootstrap, topic, values))
    group = new_topic("group")
    config = {
        "bootstrap.servers": cluster.bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
    }
    consumer = Consumer(config)
    consumer.subscribe([topic])
    try:
        got = _poll(consumer, 200)
        consumer.commit(offsets=[TopicPartition(topic, 0, 200)], asynchronous=False)
        coordinator = _coordinator_of(cluster, group)
        cluster.kill(coordinator)
        # The same member finds the new coordinator, which has the offset committed
        # before, and goes on consuming and committing.
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                (committed,) = consumer.committed([TopicPartition(topic, 0)], timeout=10)
                break
            except KafkaException:
                assert time.monotonic() < deadline, "no coordinator answered OffsetFetch"
        assert committed.offset == 200
        got += _poll(consumer, 200)
        consumer.commit(offsets=[TopicPartition(topic, 0, 400)], asynchronous=False)
    finally:
        consumer.close()
    assert got == values
    assert _coordinator_of(cluster, group) != coordinator


def _poll(consumer: Consumer, count: int) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + WAIT_S
    while len(got) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    assert len(got) == count, f"awaited {count} records, got {len(got)}"
    return got


def _coordinator_of(cluster: Cluster, group: str) -> int:
    """The broker FindCoordinator names for the group (through librdkafka's admin API)."""
    client = AdminClient({"bootstrap.servers": cluster.bootstrap})
    description = client.describe_consumer_groups([group])[group].result(timeout=30)
    return description.coordinator.id


def test_the_cluster_survives_zookeeper_pausing_past_the_session_timeout(
    cluster: Cluster,
) -> None:
    topic = new_topic()
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})  # outlives its futures
    admin.create_topics(
        [NewTopic(topic, 3, 3, config={"min.insync.replicas": "2"})], operation_timeout=30
    )[topic].result(timeout=60)
    cluster.wait_for_topic(topic, 3, isr=3)
    first = [b"z%04d" % i for i in range(300)]
    acknowledged(produce(cluster.bootstrap, topic, first))
    sizes = log_sizes(cluster)
    cluster.zookeeper.pause()
    try:
        # The sessions time out while ZooKeeper sleeps (whether the server expires them on
        # waking is its own race; a broker's own expiry is the test above); clients are
        # still served meanwhile.
        time.sleep(SESSION_TIMEOUT_MS / 1000 + 2)  # the fault itself: ZooKeeper asleep this long
    finally:
        cluster.zookeeper.resume()
    # The brokers register again, a controller is elected (at a new epoch) and the
    # partitions get full ISRs.
    cluster.wait_for_brokers([1, 2, 3], timeout=WAIT_S)
    cluster.wait_for_controller(timeout=WAIT_S)
    cluster.wait_for_topic(topic, 3, isr=3, timeout=WAIT_S)
    second = [b"y%04d" % i for i in range(300)]
    acknowledged(produce(cluster.bootstrap, topic, second))
    got = consume_all(cluster.bootstrap, topic, len(first) + len(second))
    assert sorted(m.value() for m in got) == sorted(first + second)
    assert tracebacks_since(cluster, sizes) == {}
