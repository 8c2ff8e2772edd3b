"""Dynamic configs through real admin clients (kafka-python, confluent-kafka/librdkafka and
the Java Admin): topic and broker configs changed at run time take effect on existing logs
without a restart and survive one, errors come back as Kafka's, group configs are stored
and described, and authorized operations are reported as Kafka reports them with no
authorizer."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AclOperation,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)
from confluent_kafka.admin import NewTopic as CNewTopic
from kafka.admin import ConfigResource as KpResource
from kafka.admin import ConfigResourceType, KafkaAdminClient, NewTopic

from compat_tests import java_client as java
from compat_tests.broker import BrokerProcess
from compat_tests.confluent_admin import admin, create_topic
from compat_tests.matrix import compat
from compat_tests.records import Rec
from compat_tests.test_confluent import produce

# Retention runs every 200 ms so that a change shows within a poll; tiny segments so that
# a few records span several (only whole, inactive segments are deleted).
BROKER_OVERRIDES = {"log.retention.check.interval.ms": "200"}
SMALL_SEGMENTS = {"segment.bytes": "1024"}
HOUR_MS = 3_600_000
WEEK_MS = 7 * 24 * HOUR_MS
# Generous: retention runs every 200 ms; a loaded 2-core machine may be much slower.
DEADLINE_S = 30.0

TOPIC_OPERATIONS = {
    "READ",
    "WRITE",
    "CREATE",
    "DESCRIBE",
    "DELETE",
    "ALTER",
    "DESCRIBE_CONFIGS",
    "ALTER_CONFIGS",
}
GROUP_OPERATIONS = {"READ", "DESCRIBE", "DELETE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"}
CLUSTER_OPERATIONS = {
    "CREATE",
    "CLUSTER_ACTION",
    "DESCRIBE_CONFIGS",
    "ALTER_CONFIGS",
    "IDEMPOTENT_WRITE",
    "ALTER",
    "DESCRIBE",
}


@pytest.fixture
def kp_admin(broker: BrokerProcess) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    yield client
    client.close()


def produce_old(broker: BrokerProcess, topic: str, count: int = 20) -> None:
    """Records an hour old, ~200 bytes each: kept by the default retention (a week)."""
    stamp = int(time.time() * 1000) - HOUR_MS
    sent = [
        Rec(partition=0, key=b"k%d" % i, value=b"x" * 200, headers=(), timestamp=stamp + i)
        for i in range(count)
    ]
    produce(broker, topic, sent)


def low_watermark(broker: BrokerProcess, topic: str) -> int:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "configs-unused"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)[0]
    finally:
        c.close()


def leader_of(broker: BrokerProcess, topic: str) -> str:
    """The id of the broker leading partition 0 (0 on one broker; any of a cluster's
    under GREGOR_COMPAT_CLUSTER): per-broker configs of that broker govern its log."""
    metadata = admin(broker).list_topics(topic, timeout=10)
    return str(metadata.topics[topic].partitions[0].leader)


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def incremental(
    broker: BrokerProcess,
    restype: ResourceType,
    name: str,
    ops: list[tuple[str, str | None, AlterConfigOpType]],
    **kwargs: object,
) -> None:
    """confluent-kafka's incremental_alter_configs of one resource; raises KafkaException."""
    resource = ConfigResource(
        restype,
        name,
        incremental_configs=[ConfigEntry(k, v, incremental_operation=op) for k, v, op in ops],
    )
    client = admin(broker)
    client.incremental_alter_configs([resource], **kwargs)[resource].result(30)


def java_alter(broker: BrokerProcess, resource: str, **ops: str) -> dict:
    """The Java Admin's incrementalAlterConfigs of `type:name`; librdkafka refuses the
    cluster-default broker resource (`broker:`, an empty name), which Kafka's client sends."""
    (outcome,) = java.run(
        "alter-configs", broker.bootstrap, "unused", options={"resource": resource, **ops}
    )
    return outcome


def java_describe(broker: BrokerProcess, *resources: str, keys: tuple[str, ...] = ()) -> dict:
    """The Java Admin's describeConfigs (with synonyms) of `type:name` resources, in one
    run: {(resource, config name): entry}."""
    options = {"resource": list(resources), "key": list(keys)}
    lines = java.run("describe-configs", broker.bootstrap, "unused", options=options)
    return {(line["resource"], line["name"]): line for line in lines}


def describe(broker: BrokerProcess, restype: ResourceType, name: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource(restype, name)
    client = admin(broker)
    return client.describe_configs([resource])[resource].result(30)


def error_name(call: Callable[[], object]) -> str:
    with pytest.raises(KafkaException) as failure:
        call()
    return failure.value.args[0].name()


def value_source(entry: ConfigEntry) -> tuple[str | None, ConfigSource]:
    return entry.value, ConfigSource(entry.source)


@compat("kafka-python", "admin")
def test_kafka_python_topic_retention_at_run_time_survives_restart(
    broker: BrokerProcess, new_topic: Callable[[str], str], kp_admin: KafkaAdminClient
) -> None:
    topic = new_topic("retained")
    kp_admin.create_topics([NewTopic(topic, 1, 1, topic_configs=SMALL_SEGMENTS)])
    produce_old(broker, topic)
    assert low_watermark(broker, topic) == 0  # an hour old, under a week's retention

    resource = KpResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": "60000"})
    assert kp_admin.alter_configs([resource]) == {"topic": {topic: "OK"}}
    wait_for(lambda: low_watermark(broker, topic) > 0, "retention to delete old segments")

    def described(admin: KafkaAdminClient) -> bool:
        # kafka-python lists modified configs only, and on a cluster the broker it asks may
        # learn of the change a moment after the leader applied it (as in Kafka).
        configs = admin.describe_configs(
            [KpResource(ConfigResourceType.TOPIC, topic)], include_synonyms=True
        )["topic"][topic]
        entry = configs.get("retention.ms")
        return entry is not None and (entry["value"], entry["config_source"]) == (
            "60000",
            "DYNAMIC_TOPIC_CONFIG",
        )

    wait_for(lambda: described(kp_admin), "retention.ms described as the dynamic 60000")
    deleted_to = low_watermark(broker, topic)
    broker.restart()
    after = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        wait_for(lambda: described(after), "retention.ms still 60000 after the restart")
    finally:
        after.close()
    assert low_watermark(broker, topic) >= deleted_to


@compat("kafka-python", "admin")
def test_kafka_python_legacy_alter_configs(
    broker: BrokerProcess, new_topic: Callable[[str], str], kp_admin: KafkaAdminClient
) -> None:
    topic = new_topic("legacy")
    kp_admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"retention.ms": "1000000"})])
    # kafka-python reads the topic's configs from any broker before it replaces them.
    broker.wait_for_topic(topic, 1)
    resource = KpResource(ConfigResourceType.TOPIC, topic, configs={"segment.ms": "3600000"})
    assert kp_admin.alter_configs([resource], incremental=False, raise_on_unknown=False) == {
        "topic": {topic: "OK"}
    }
    # AlterConfigs replaces the whole set: kafka-python sends the other dynamic keys along.
    # Every broker applies it (in a cluster, after the change notification reaches it).
    expected = {"retention.ms": "1000000", "segment.ms": "3600000"}

    def modified() -> dict[str, str]:
        described = kp_admin.describe_configs([KpResource(ConfigResourceType.TOPIC, topic)])
        return {k: v["value"] for k, v in described["topic"][topic].items()}

    wait_for(lambda: modified() == expected, f"the configs of {topic} to be {expected}")


@compat("confluent", "admin")
def test_confluent_broker_default_applies_to_topics_without_override(
    broker: BrokerProcess, new_topic: Callable[[str], str]
) -> None:
    plain, pinned = new_topic("plain"), new_topic("pinned")
    client = admin(broker)
    futures = client.create_topics(
        [
            CNewTopic(plain, 1, 1, config=SMALL_SEGMENTS),
            CNewTopic(pinned, 1, 1, config={**SMALL_SEGMENTS, "retention.ms": str(WEEK_MS)}),
        ]
    )
    for f in futures.values():
        f.result(30)
    produce_old(broker, plain)
    produce_old(broker, pinned)
    try:
        assert java_alter(broker, "broker:", set="log.retention.ms=60000")["error"] is None
        wait_for(lambda: low_watermark(broker, plain) > 0, "the default retention to apply")
        assert low_watermark(broker, pinned) == 0  # its own retention.ms wins

        # Polled: a cluster's other brokers learn the default from ZooKeeper.
        wait_for(
            lambda: (
                retention(broker, plain) == ("60000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
            ),
            "the topic's retention.ms to come from the cluster default",
        )
        defaults = java_describe(broker, "broker:")
        assert {k: (e["value"], e["source"]) for k, e in defaults.items()} == {
            ("broker:", "log.retention.ms"): ("60000", "DYNAMIC_DEFAULT_BROKER_CONFIG")
        }
        own = describe(broker, ResourceType.BROKER, leader_of(broker, plain))
        assert (
            value_source(own["log.retention.ms"])[1] == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
        )
        assert not own["log.retention.ms"].is_read_only
        # As Kafka: num.io.threads is dynamic, num.partitions read-only.
        assert not own["num.io.threads"].is_read_only
        assert own["num.partitions"].is_read_only
    finally:
        assert java_alter(broker, "broker:", delete="log.retention.ms")["error"] is None
    wait_for(
        lambda: retention(broker, plain) == (str(WEEK_MS), ConfigSource.DEFAULT_CONFIG),
        "the topic's retention.ms back to its default",
    )


def retention(broker: BrokerProcess, topic: str) -> tuple[str | None, ConfigSource]:
    return value_source(describe(broker, ResourceType.TOPIC, topic)["retention.ms"])


@compat("confluent", "admin")
def test_confluent_per_broker_config_over_default_takes_effect(
    broker: BrokerProcess, new_topic: Callable[[str], str]
) -> None:
    topic = new_topic("sized")
    create_topic(broker, topic, 1)
    client = admin(broker)
    # Every broker (one, or a cluster's) gets the per-broker value: a topic's configs are
    # described as the answering broker resolves them.
    brokers = [str(node.id) for node in client.describe_cluster().result(30).nodes]
    big = [Rec(partition=0, key=None, value=b"v" * 10_000, headers=(), timestamp=1)]
    produce(broker, topic, big)

    def per_broker(op: AlterConfigOpType, value: str | None) -> None:
        for broker_id in brokers:
            incremental(broker, ResourceType.BROKER, broker_id, [("message.max.bytes", value, op)])

    def synonyms() -> list[list[str]]:
        seen = java_describe(broker, f"topic:{topic}", keys=("max.message.bytes",))
        return next(iter(seen.values()))["synonyms"][:2]

    try:
        assert java_alter(broker, "broker:", set="message.max.bytes=5000")["error"] is None
        per_broker(AlterConfigOpType.SET, "6000")
        entry = describe(broker, ResourceType.TOPIC, topic)["max.message.bytes"]
        assert value_source(entry) == ("6000", ConfigSource.DYNAMIC_BROKER_CONFIG)
        # librdkafka keys synonyms by name, losing repeats: the Java client shows them all
        # (a cluster's other brokers learn the default from ZooKeeper: polled).
        expected = [
            ["message.max.bytes", "6000", "DYNAMIC_BROKER_CONFIG"],
            ["message.max.bytes", "5000", "DYNAMIC_DEFAULT_BROKER_CONFIG"],
        ]
        wait_for(lambda: synonyms() == expected, "the synonyms of max.message.bytes")
        # The existing log refuses what it took before, without a restart.
        errors: list[KafkaError] = []
        producer = Producer({"bootstrap.servers": broker.bootstrap, "message.max.bytes": 20_000})
        producer.produce(
            topic, b"v" * 10_000, partition=0, on_delivery=lambda e, _m: errors.append(e)
        )
        assert producer.flush(30) == 0
        assert [e.code() for e in errors] == [KafkaError.MSG_SIZE_TOO_LARGE]
    finally:
        per_broker(AlterConfigOpType.DELETE, None)
        assert java_alter(broker, "broker:", delete="message.max.bytes")["error"] is None
    wait_for(
        lambda: (
            value_source(describe(broker, ResourceType.TOPIC, topic)["max.message.bytes"])[1]
            == ConfigSource.DEFAULT_CONFIG
        ),
        "the static default to be back",
    )

    def taken() -> bool:  # the partition's leader may learn of the deletion last (a cluster)
        errors: list[KafkaError | None] = []
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        producer.produce(
            topic, b"v" * 10_000, partition=0, on_delivery=lambda e, _m: errors.append(e)
        )
        assert producer.flush(30) == 0
        # Not `errors == [None]`: confluent-kafka's KafkaError compared with None leaves a
        # TypeError set inside the C extension, which a later C call raises as SystemError.
        return len(errors) == 1 and errors[0] is None

    wait_for(taken, "the partition's leader to take 10 kB records again")


@compat("confluent", "admin")
@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_confluent_errors_and_validate_only(
    broker: BrokerProcess, new_topic: Callable[[str], str]
) -> None:
    topic = new_topic("checked")
    create_topic(broker, topic, 1)
    leader = leader_of(broker, topic)
    set_ = AlterConfigOpType.SET

    def topic_op(key: str, value: str | None, op: AlterConfigOpType = set_) -> Callable[[], None]:
        return lambda: incremental(broker, ResourceType.TOPIC, topic, [(key, value, op)])

    assert error_name(topic_op("retention.ms", "abc")) == "INVALID_CONFIG"
    assert error_name(topic_op("retention.bytes.nonsense", "1")) == "INVALID_CONFIG"
    assert error_name(topic_op("retention.ms", "1", AlterConfigOpType.APPEND)) == "INVALID_CONFIG"
    assert (
        error_name(
            lambda: incremental(
                broker, ResourceType.TOPIC, "no-such", [("retention.ms", "1", set_)]
            )
        )
        == "UNKNOWN_TOPIC_OR_PART"  # librdkafka's name for it
    )
    assert (
        error_name(
            lambda: incremental(
                broker, ResourceType.BROKER, leader, [("num.partitions", "4", set_)]
            )
        )
        == "INVALID_REQUEST"
    )
    assert (
        error_name(
            lambda: incremental(
                broker, ResourceType.BROKER, leader, [("log.retention.ms", "x", set_)]
            )
        )
        == "INVALID_REQUEST"
    )

    incremental(
        broker, ResourceType.TOPIC, topic, [("retention.ms", "1000", set_)], validate_only=True
    )
    assert value_source(describe(broker, ResourceType.TOPIC, topic)["retention.ms"])[1] == (
        ConfigSource.DEFAULT_CONFIG
    )

    incremental(
        broker, ResourceType.TOPIC, topic, [("cleanup.policy", "compact", AlterConfigOpType.APPEND)]
    )
    assert describe(broker, ResourceType.TOPIC, topic)["cleanup.policy"].value == "delete,compact"
    incremental(
        broker,
        ResourceType.TOPIC,
        topic,
        [("cleanup.policy", "compact", AlterConfigOpType.SUBTRACT)],
    )
    entry = describe(broker, ResourceType.TOPIC, topic)["cleanup.policy"]
    assert value_source(entry) == ("delete", ConfigSource.DYNAMIC_TOPIC_CONFIG)

    # The legacy AlterConfigs replaces the whole set: cleanup.policy goes back to default.
    legacy = ConfigResource(ResourceType.TOPIC, topic, set_config={"segment.ms": "60000"})
    client = admin(broker)  # must outlive its futures
    client.alter_configs([legacy])[legacy].result(30)
    configs = describe(broker, ResourceType.TOPIC, topic)
    assert value_source(configs["segment.ms"]) == ("60000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert value_source(configs["cleanup.policy"]) == ("delete", ConfigSource.DEFAULT_CONFIG)


@compat("confluent", "admin")
def test_confluent_group_configs_are_stored_and_survive_restart(broker: BrokerProcess) -> None:
    group = "configured-group"
    before = describe(broker, ResourceType.GROUP, group)
    assert value_source(before["consumer.session.timeout.ms"]) == (
        "45000",
        ConfigSource.DEFAULT_CONFIG,
    )
    incremental(
        broker,
        ResourceType.GROUP,
        group,
        [("consumer.session.timeout.ms", "50000", AlterConfigOpType.SET)],
    )
    too_short = [("consumer.heartbeat.interval.ms", "1000", AlterConfigOpType.SET)]
    assert (
        error_name(lambda: incremental(broker, ResourceType.GROUP, group, too_short))
        == "INVALID_CONFIG"
    )
    broker.restart()
    entry = describe(broker, ResourceType.GROUP, group)["consumer.session.timeout.ms"]
    assert value_source(entry) == ("50000", ConfigSource.GROUP_CONFIG)


@compat("confluent", "admin")
def test_confluent_authorized_operations(
    broker: BrokerProcess, new_topic: Callable[[str], str]
) -> None:
    topic = new_topic("authz")
    create_topic(broker, topic, 1)
    group = committed_group(broker, topic)
    client = admin(broker)

    def names(ops: list[AclOperation] | None) -> set[str] | None:
        return None if ops is None else {op.name for op in ops}

    described = client.describe_topics(TopicCollection([topic]), include_authorized_operations=True)
    assert names(described[topic].result(30).authorized_operations) == TOPIC_OPERATIONS
    cluster = client.describe_cluster(include_authorized_operations=True).result(30)
    assert names(cluster.authorized_operations) == CLUSTER_OPERATIONS
    groups = client.describe_consumer_groups([group], include_authorized_operations=True)
    assert names(groups[group].result(30).authorized_operations) == GROUP_OPERATIONS
    # Not asked for: none reported (Kafka's -2147483648 on the wire).
    plain = client.describe_cluster().result(30)
    assert not plain.authorized_operations


def committed_group(broker: BrokerProcess, topic: str) -> str:
    """A group with a committed offset (so that it exists), without members."""
    group = f"{topic}-group"
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    finally:
        c.close()
    return group


@compat("java", "admin")
def test_java_configs_and_authorized_operations(
    broker: BrokerProcess, new_topic: Callable[[str], str]
) -> None:
    topic = new_topic("java-configs")
    create_topic(broker, topic, 1)
    leader, group = leader_of(broker, topic), committed_group(broker, topic)
    ok = {"error": None, "message": None}

    assert java_alter(broker, f"topic:{topic}", set="retention.ms=120000") == ok
    bad = java_alter(broker, f"topic:{topic}", set="retention.ms=soon")
    assert bad["error"] == "InvalidConfigurationException"
    assert "retention.ms" in bad["message"]
    read_only = java_alter(broker, f"broker:{leader}", set="log.dirs=/elsewhere")
    assert read_only["error"] == "InvalidRequestException"
    assert java_alter(broker, f"group:{group}", set="consumer.heartbeat.interval.ms=6000") == ok
    try:
        assert java_alter(broker, "broker:", set="log.segment.bytes=2000000") == ok
        # A cluster-wide default reaches the other brokers through ZooKeeper, a moment later;
        # the Admin asks any broker for a topic's configs, the leader for its own.
        keys = (
            "retention.ms",
            "segment.bytes",
            "log.segment.bytes",
            "consumer.heartbeat.interval.ms",
        )
        resources = (f"topic:{topic}", f"broker:{leader}", f"group:{group}")
        seen: dict = {}

        def default_everywhere() -> bool:
            seen.update(java_describe(broker, *resources, keys=keys))
            return (
                seen[resources[0], "segment.bytes"]["value"]
                == seen[resources[1], "log.segment.bytes"]["value"]
                == "2000000"
            )

        wait_for(default_everywhere, "the cluster-wide log.segment.bytes on the brokers asked")
    finally:
        assert java_alter(broker, "broker:", delete="log.segment.bytes") == ok

    def shown(resource: str, name: str) -> tuple:
        entry = seen[resource, name]
        return entry["value"], entry["source"], entry["read_only"]

    assert shown(f"topic:{topic}", "retention.ms") == ("120000", "DYNAMIC_TOPIC_CONFIG", False)
    assert seen[f"topic:{topic}", "retention.ms"]["synonyms"][0] == [
        "retention.ms",
        "120000",
        "DYNAMIC_TOPIC_CONFIG",
    ]
    default = ("2000000", "DYNAMIC_DEFAULT_BROKER_CONFIG", False)
    assert shown(f"topic:{topic}", "segment.bytes") == default
    assert shown(f"broker:{leader}", "log.segment.bytes") == default
    assert shown(f"group:{group}", "consumer.heartbeat.interval.ms")[:2] == (
        "6000",
        "DYNAMIC_GROUP_CONFIG",
    )

    (ops,) = java.run("authorized-operations", broker.bootstrap, topic, options={"group": group})
    assert (set(ops["topic"]), set(ops["cluster"]), set(ops["group"])) == (
        TOPIC_OPERATIONS,
        CLUSTER_OPERATIONS,
        GROUP_OPERATIONS,
    )
