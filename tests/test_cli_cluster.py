"""Every ``gregor`` tool against a 3-broker cluster on a real ZooKeeper (issue #8), through
the behaviours a cluster changes: admin requests reach the controller or the coordinator
whichever broker the tool bootstraps from, records go to and come from partition leaders
that are not the bootstrap, and changes made through one broker are seen by every broker.
Each outcome is read back through an independent client (librdkafka, the raw wire, the
brokers' own Metadata) as well as through the tool. Last, the controller (also a group's
coordinator) crashes and the tools wait out its successor's election. One module-scoped
cluster; about 20 s, 6 of them the crashed broker's ZooKeeper session running out."""

from __future__ import annotations

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    Message,
    Producer,
)
from confluent_kafka import TopicPartition as Tp
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    ConfigSource,
    ConsumerGroupDescription,
    ResourceType,
)

from compat_tests.group_checks import wait_until
from gregor.server.harness.cluster import Cluster
from tests import test_cluster as cluster_tests
from tests.cli_run import CliResult, gregor, ok
from tests.kafka_wire import WireClient
from tests.test_client_quotas import describe, entries
from tests.test_cluster import create, new_topic, wait_for_identical_replicas

# The module-scoped 3-broker cluster of tests/test_cluster.py (a fixture), for this module.
cluster = cluster_tests.cluster
AWAIT_S = 30.0  # three brokers and ZooKeeper share a loaded 2-core machine
BROKERS = [1, 2, 3]


def run(cluster: Cluster, via: int, command: str, *args: str, stdin: bytes = b"") -> CliResult:
    """``gregor COMMAND`` (``perf produce``: two words) bootstrapped from broker ``via``
    alone; it must succeed."""
    return ok(
        *command.split(), "--bootstrap-server", cluster.brokers[via].bootstrap, *args, stdin=stdin
    )


def admin(cluster: Cluster, via: int) -> AdminClient:
    """librdkafka's admin client bootstrapped from broker ``via`` (keep it referenced until
    its futures are done: a collected client cancels them)."""
    return AdminClient({"bootstrap.servers": cluster.brokers[via].bootstrap})


def group_state(cluster: Cluster, group: str) -> ConsumerGroupDescription:
    client = admin(cluster, 1)
    return client.describe_consumer_groups([group])[group].result(10)


def produce_keyed(cluster: Cluster, topic: str, counts: dict[int, int]) -> list[tuple]:
    """``counts[p]`` records k<i>/v<i> into each partition p with librdkafka (acks=all);
    returns (partition, offset, key, value) of each as acknowledged."""
    acked: list[tuple] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        assert err is None, err
        acked.append((msg.partition(), msg.offset(), msg.key(), msg.value()))

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for partition, count in counts.items():
        for i in range(count):
            producer.produce(
                topic,
                key=b"k%d" % i,
                value=b"v%d" % i,
                partition=partition,
                on_delivery=on_delivery,
            )
    assert producer.flush(AWAIT_S) == 0
    return sorted(acked)


def read_partition(bootstrap: str, topic: str, partition: int, count: int) -> list[tuple]:
    """(offset, key, value) of a partition's first ``count`` records, read by librdkafka
    (assigned the partition, not a group member)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": new_topic("reader")})
    consumer.assign([Tp(topic, partition, OFFSET_BEGINNING)])
    got: list[tuple] = []
    try:
        wait_until(
            lambda: len(got) >= count,
            AWAIT_S,
            f"{count} records of {topic}-{partition}",
            step=lambda: got.extend(
                (m.offset(), m.key(), m.value())
                for m in consumer.consume(count, 0.5)
                if m.error() is None
            ),
        )
    finally:
        consumer.close()
    return got


def committed(cluster: Cluster, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets as librdkafka's admin client lists them."""
    client = admin(cluster, 1)
    wanted = ConsumerGroupTopicPartitions(group, [Tp(topic, p) for p in range(partitions)])
    listed = client.list_consumer_group_offsets([wanted])[group].result(10)
    return {tp.partition: tp.offset for tp in listed.topic_partitions}


def test_topics_create_describe_alter_delete_through_a_broker_that_is_not_controller(
    cluster: Cluster,
) -> None:
    controller = cluster.wait_for_controller()
    via = next(i for i in BROKERS if i != controller)
    topic = new_topic("cli-topics")
    created = run(
        cluster,
        via,
        "topics",
        *("--create", "--topic", topic, "--partitions", "3", "--replication-factor", "3"),
    )
    assert created.out == f"Created topic {topic}.\n"
    agreed = cluster.wait_for_topic(topic, 3, isr=3)
    assert all(sorted(p.replicas) == BROKERS for p in agreed.values())
    expected = [
        {"partition": i, "leader": p.leader, "replicas": list(p.replicas), "isr": list(p.isr)}
        for i, p in sorted(agreed.items())
    ]
    # librdkafka's view of the cluster is the brokers' own.
    client = admin(cluster, controller)
    seen = client.list_topics(topic, timeout=10).topics[topic].partitions
    assert [
        {"partition": i, "leader": m.leader, "replicas": m.replicas, "isr": m.isrs}
        for i, m in sorted(seen.items())
    ] == expected

    for broker_id in BROKERS:  # every broker describes it as the cluster has it
        (described,) = run(
            cluster, broker_id, "topics", "--describe", "--topic", topic, "--json"
        ).json()["topics"]
        assert described["partitionCount"] == 3 and described["replicationFactor"] == 3
        assert [
            {k: p[k] for k in ("partition", "leader", "replicas", "isr")}
            for p in described["partitions"]
        ] == expected
    text = run(cluster, via, "topics", "--describe", "--topic", topic).out.splitlines()
    assert text[0].startswith(f"Topic: {topic}\tPartitionCount: 3\tReplicationFactor: 3\t")
    assert text[1:] == [
        f"\tTopic: {topic}\tPartition: {p['partition']}\tLeader: {p['leader']}\t"
        f"Replicas: {','.join(map(str, p['replicas']))}\tIsr: {','.join(map(str, p['isr']))}"
        for p in expected
    ]

    altered = run(cluster, via, "topics", "--alter", "--topic", topic, "--partitions", "6")
    assert altered.out == f"Altered topic {topic}.\n"
    grown = cluster.wait_for_topic(topic, 6)
    assert {i: p for i, p in grown.items() if i < 3} == agreed, "the first three moved"
    assert len(admin(cluster, via).list_topics(topic, timeout=10).topics[topic].partitions) == 6

    deleted = run(cluster, via, "topics", "--delete", "--topic", topic)
    assert deleted.out == f"Deleted topic {topic}.\n"
    cluster.wait_until(
        lambda views: all(topic not in v.topics for v in views.values()),
        f"every broker to forget {topic}",
    )
    for broker_id in BROKERS:
        assert topic not in run(cluster, broker_id, "topics", "--list").out.split()
    gone = gregor("topics", "--bootstrap-server", cluster.bootstrap, "--describe", "--topic", topic)
    assert gone.code == 1 and gone.err == f"Error: Topic '{topic}' does not exist as expected\n"


def test_produce_and_consume_through_brokers_that_do_not_lead_the_partition(
    cluster: Cluster,
) -> None:
    topic = new_topic("cli-records")
    create(cluster.bootstrap, topic, 1, 3)
    (state,) = cluster.wait_for_topic(topic, 1, isr=3).values()
    producer_via, consumer_via = [i for i in BROKERS if i != state.leader]
    lines = b"".join(b"k%d:v%d\n" % (i, i) for i in range(25))

    run(cluster, producer_via, "produce", "--topic", topic, "--key-separator", ":", stdin=lines)
    consumed = run(
        cluster,
        consumer_via,
        "consume",
        *("--topic", topic, "--from-beginning", "--exit-at-end", "--json"),
    ).json_lines()

    expected = [(i, b"k%d" % i, b"v%d" % i) for i in range(25)]
    assert [(r["offset"], r["key"].encode(), r["value"].encode()) for r in consumed] == expected
    assert read_partition(cluster.brokers[state.leader].bootstrap, topic, 0, 25) == expected

    # As a group member: the group's requests go to its coordinator, wherever that is.
    group = new_topic("cli-consumer")
    offsets = run(
        cluster,
        consumer_via,
        "consume",
        *("--topic", topic, "--group", group, "--from-beginning", "--exit-at-end"),
        *("-f", "%o\n"),
    ).out.split()
    assert offsets == [str(i) for i in range(25)]
    assert committed(cluster, group, topic, 1) == {0: 25}  # committed as it stopped


def test_groups_describe_and_reset_through_a_broker_that_does_not_coordinate(
    cluster: Cluster,
) -> None:
    topic = new_topic("cli-groups")
    create(cluster.bootstrap, topic, 2, 3)
    cluster.wait_for_topic(topic, 2, isr=3)
    produce_keyed(cluster, topic, {0: 7, 1: 4})
    group = new_topic("cli-group")
    member = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        member.subscribe([topic])
        wait_until(
            lambda: len(member.assignment()) == 2,
            AWAIT_S,
            "the member's assignment",
            step=lambda: member.poll(0.1),
        )
        member.commit(offsets=[Tp(topic, 0, 5), Tp(topic, 1, 1)], asynchronous=False)
        coordinator = group_state(cluster, group).coordinator.id
        via = next(i for i in BROKERS if i != coordinator)

        answer = run(cluster, via, "groups", "--describe", "--group", group, "--json").json()
        (described,) = answer["groups"]
        assert described["coordinator"]["id"] == coordinator
        assert described["state"] == "Stable"
        assert [
            (o["partition"], o["currentOffset"], o["logEndOffset"], o["lag"], o["memberId"])
            for o in described["offsets"]
        ] == [(0, 5, 7, 2, member.memberid()), (1, 1, 4, 3, member.memberid())]
        # ListGroups asks every broker: the group is listed through one that does not own it.
        assert group in run(cluster, via, "groups", "--list").out.split()
    finally:
        member.close()  # leaves the group: Empty, so its offsets may be reset

    wait_until(
        lambda: group_state(cluster, group).state == ConsumerGroupState.EMPTY,
        AWAIT_S,
        "the group to be empty",
    )
    reset = run(
        cluster,
        via,
        "groups",
        *("--reset-offsets", "--group", group, "--topic", topic, "--to-earliest"),
        *("--execute", "--json"),
    ).json()
    assert reset["executed"] and reset["groups"][0]["offsets"] == [
        {"topic": topic, "partition": 0, "newOffset": 0},
        {"topic": topic, "partition": 1, "newOffset": 0},
    ]
    assert committed(cluster, group, topic, 2) == {0: 0, 1: 0}
    lags = run(cluster, via, "groups", "--describe", "--group", group, "--json").json()
    assert [(o["currentOffset"], o["lag"]) for o in lags["groups"][0]["offsets"]] == [
        (0, 7),
        (0, 4),
    ]


def config_view(cluster: Cluster, via: int, kind: ResourceType, name: str) -> dict[str, tuple]:
    """Each config's (value, source) as librdkafka describes the entity."""
    resource = ConfigResource(kind, name)
    client = admin(cluster, via)
    described = client.describe_configs([resource])[resource].result(10)
    return {k: (e.value, ConfigSource(e.source)) for k, e in described.items()}


def test_configs_of_a_topic_and_of_another_broker(cluster: Cluster) -> None:
    topic = new_topic("cli-configs")
    create(cluster.bootstrap, topic, 1, 3)
    cluster.wait_for_topic(topic, 1)
    entity = ("--entity-type", "topics", "--entity-name", topic)
    run(cluster, 1, "configs", "--alter", *entity, "--add-config", "retention.ms=60000")
    set_here = ("60000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    wait_until(
        lambda: config_view(cluster, 3, ResourceType.TOPIC, topic)["retention.ms"] == set_here,
        AWAIT_S,
        "librdkafka to describe the topic's retention.ms",
    )
    for broker_id in BROKERS:  # brokers learn of it from ZooKeeper: awaited
        wait_until(
            lambda b=broker_id: _dynamic(cluster, b, *entity) == ["retention.ms=60000"],
            AWAIT_S,
            f"broker {broker_id} to describe the topic's retention.ms",
        )

    brokers_2 = ("--entity-type", "brokers", "--entity-name", "2")
    out = run(
        cluster, 1, "configs", "--alter", *brokers_2, "--add-config", "log.retention.ms=7200000"
    )
    assert out.out == "Completed updating config for broker 2.\n"
    assert _dynamic(cluster, 1, *brokers_2) == ["log.retention.ms=7200000"]
    assert config_view(cluster, 3, ResourceType.BROKER, "2")["log.retention.ms"] == (
        "7200000",
        ConfigSource.DYNAMIC_BROKER_CONFIG,
    )
    # Broker 2's own setting, not broker 1's (whose bootstrap carried it).
    assert config_view(cluster, 3, ResourceType.BROKER, "1")["log.retention.ms"][1] == (
        ConfigSource.DEFAULT_CONFIG
    )
    run(cluster, 1, "configs", "--alter", *brokers_2, "--delete-config", "log.retention.ms")
    assert _dynamic(cluster, 3, *brokers_2) == []
    assert config_view(cluster, 3, ResourceType.BROKER, "2")["log.retention.ms"][1] == (
        ConfigSource.DEFAULT_CONFIG
    )


def _dynamic(cluster: Cluster, via: int, *entity: str) -> list[str]:
    """The ``name=value`` of each dynamic config ``configs --describe`` shows."""
    described = run(cluster, via, "configs", "--describe", *entity, "--json").json()
    (only,) = described["entities"]
    return [f"{c['name']}={c['value']}" for c in only["configs"]]


def test_quotas_altered_through_one_broker_are_described_by_every_broker(cluster: Cluster) -> None:
    user = new_topic("user")
    rates = {"producer_byte_rate": 1048576.0, "consumer_byte_rate": 2097152.0}
    out = run(
        cluster,
        2,
        "quotas",
        *("--alter", "--user", user, "--client-id", "app", "--add-config"),
        "producer_byte_rate=1048576,consumer_byte_rate=2097152",
    )
    assert out.out == f"Completed updating quotas for user '{user}', client-id 'app'.\n"
    entity = frozenset({("user", user), ("client-id", "app")})

    def wire_view(broker_id: int) -> dict:
        client = WireClient(cluster.brokers[broker_id].port)
        try:
            return entries(describe(client, [("user", 0, user)]))
        finally:
            client.close()

    for broker_id in BROKERS:  # quotas live in ZooKeeper: each broker's view is awaited
        wait_until(
            lambda b=broker_id: wire_view(b) == {entity: rates},
            AWAIT_S,
            f"broker {broker_id} to describe the quota",
        )
        described = run(
            cluster,
            broker_id,
            "quotas",
            "--describe",
            "--user",
            user,
            "--client-id",
            "app",
            "--json",
        ).json()
        assert described == {
            "quotas": [{"entity": {"user": user, "client-id": "app"}, "values": rates}]
        }


def test_dump_log_of_a_follower_shows_the_records_produced_to_the_leader(
    cluster: Cluster,
) -> None:
    topic = new_topic("cli-dump")
    create(cluster.bootstrap, topic, 1, 3)
    (state,) = cluster.wait_for_topic(topic, 1, isr=3).values()
    acked = produce_keyed(cluster, topic, {0: 30})
    wait_for_identical_replicas(cluster, topic, 0)
    follower = next(i for i in state.replicas if i != state.leader)

    def dumped(broker_id: int) -> dict:
        segment = cluster.brokers[broker_id].data_dir / f"{topic}-0" / f"{0:020d}.log"
        dump = ok("dump-log", "--files", str(segment), "--print-data-log", "--json").json()
        (only,) = dump["files"]
        return only

    on_follower = dumped(follower)
    assert "invalidBytes" not in on_follower
    records = [r for batch in on_follower["entries"] for r in batch["records"]]
    assert [(0, r["offset"], r["key"].encode(), r["payload"].encode()) for r in records] == acked
    assert all(batch["isvalid"] for batch in on_follower["entries"])
    # The same batches at the same positions, CRCs included, as on the leader.
    assert on_follower["entries"] == dumped(state.leader)["entries"]


def test_perf_produce_with_acks_all_and_consume_across_the_cluster(cluster: Cluster) -> None:
    topic = new_topic("cli-perf")
    create(cluster.bootstrap, topic, 3, 3, **{"min.insync.replicas": "2"})
    cluster.wait_for_topic(topic, 3, isr=3)
    produced = run(
        cluster,
        1,
        "perf produce",
        *("--topic", topic, "--num-records", "600", "--record-size", "100"),
        *("--throughput", "-1", "--acks", "-1", "--batch-size", "2048", "--json"),
    ).json()
    assert produced["records"] == 600 and produced["errors"] == 0
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": new_topic("w")})
    try:
        ends = [consumer.get_watermark_offsets(Tp(topic, p), timeout=10)[1] for p in range(3)]
    finally:
        consumer.close()
    assert sum(ends) == 600 and all(ends), ends  # every leader took a share
    consumed = run(
        cluster, 2, "perf consume", "--topic", topic, "--num-records", "600", "--json"
    ).json()
    assert consumed["records"] == 600


def test_topics_and_groups_wait_out_a_crashed_controller_and_coordinator(
    cluster: Cluster,
) -> None:
    """Until the crashed broker's ZooKeeper session expires, Metadata still names it the
    controller and FindCoordinator its coordinator: as Kafka's admin client, the tools
    find them again and retry instead of failing on the refused connection."""
    victim = cluster.wait_for_controller()
    via = next(i for i in BROKERS if i != victim)
    topic = new_topic("cli-failover")
    create(cluster.bootstrap, topic, 1, 3)
    cluster.wait_for_topic(topic, 1, isr=3)
    produce_keyed(cluster, topic, {0: 3})
    # A group the victim coordinates (FindCoordinator of groups that do not exist yet).
    candidates = [new_topic("cli-crash-group") for _ in range(30)]
    client = admin(cluster, via)
    found = client.describe_consumer_groups(candidates)
    group = next(g for g in candidates if found[g].result(10).coordinator.id == victim)
    committer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    try:
        committer.commit(offsets=[Tp(topic, 0, 2)], asynchronous=False)
    finally:
        committer.close()

    cluster.kill(victim)
    try:
        created = new_topic("cli-after-crash")
        run(cluster, via, "topics", "--create", "--topic", created, "--replication-factor", "2")
        cluster.wait_for_topic(created, 1)
        answer = run(cluster, via, "groups", "--describe", "--group", group, "--json").json()
        (described,) = answer["groups"]
        assert described["coordinator"]["id"] not in (victim, -1)
        assert [(o["currentOffset"], o["logEndOffset"]) for o in described["offsets"]] == [(2, 3)]
    finally:
        cluster.restore()
