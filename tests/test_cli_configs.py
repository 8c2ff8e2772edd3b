"""``gregor configs`` against a real broker process: each change read back through
confluent-kafka's admin client (librdkafka's DescribeConfigs), as well as through the
tool's own --describe."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, ResourceType

from gregor.server.harness.broker_process import BrokerProcess
from tests.cli_run import gregor, new_topic, ok


# A broker of its own (not process_pool's): the tests set broker-wide dynamic configs.
@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("cli-configs")) as proc:
        yield proc


def confluent_view(broker: BrokerProcess, kind: ResourceType, name: str) -> dict[str, tuple]:
    """Each config's (value, source) as librdkafka describes it."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource(kind, name)
    entries = admin.describe_configs([resource])[resource].result(10)
    return {k: (e.value, ConfigSource(e.source)) for k, e in entries.items()}


def configs(broker: BrokerProcess, *args: str) -> str:
    return ok("configs", "--bootstrap-server", broker.bootstrap, *args).out


def test_topic_configs(broker: BrokerProcess) -> None:
    topic = new_topic(broker.bootstrap, "configs")
    entity = ("--entity-type", "topics", "--entity-name", topic)
    out = configs(
        broker,
        "--alter",
        *entity,
        "--add-config",
        "retention.ms=60000,cleanup.policy=[compact,delete]",
    )
    assert out == f"Completed updating config for topic {topic}.\n"
    view = confluent_view(broker, ResourceType.TOPIC, topic)
    assert view["retention.ms"] == ("60000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert view["cleanup.policy"] == ("compact,delete", ConfigSource.DYNAMIC_TOPIC_CONFIG)

    assert configs(broker, "--describe", *entity).splitlines() == [
        f"Dynamic configs for topic {topic} are:",
        "  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:"
        "cleanup.policy=compact,delete, DEFAULT_CONFIG:log.cleanup.policy=delete}",
        # As Kafka: log.retention.ms has no default (log.retention.hours has), and a chain's
        # keys are listed only from its first key's own entry on.
        "  retention.ms=60000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=60000}",
    ]
    everything = configs(broker, "--describe", *entity, "--all")
    assert everything.startswith(f"All configs for topic {topic} are:\n")
    assert "  segment.bytes=1073741824 sensitive=false" in everything

    configs(broker, "--alter", *entity, "--delete-config", "cleanup.policy")
    view = confluent_view(broker, ResourceType.TOPIC, topic)
    assert view["cleanup.policy"] == ("delete", ConfigSource.DEFAULT_CONFIG)
    (described,) = ok(
        "configs", "--bootstrap-server", broker.bootstrap, "--describe", *entity, "--json"
    ).json()["entities"]
    assert described["entityName"] == topic
    assert [(c["name"], c["value"], c["source"]) for c in described["configs"]] == [
        ("retention.ms", "60000", "DYNAMIC_TOPIC_CONFIG")
    ]
    every_topic = ok(
        "configs",
        "--bootstrap-server",
        broker.bootstrap,
        "--describe",
        "--entity-type",
        "topics",
        "--json",
    ).json()["entities"]
    assert topic in {e["entityName"] for e in every_topic}

    bad = gregor(
        "configs",
        "--bootstrap-server",
        broker.bootstrap,
        "--alter",
        *entity,
        "--add-config",
        "retention.ms=soon",
    )
    assert bad.code == 1 and "INVALID_CONFIG" in bad.err
    unknown = gregor(
        "configs",
        "--bootstrap-server",
        broker.bootstrap,
        "--describe",
        "--entity-type",
        "topics",
        "--entity-name",
        "no-such-topic",
    )
    assert unknown.code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in unknown.err


def test_broker_configs(broker: BrokerProcess) -> None:
    default = ("--entity-type", "brokers", "--entity-default")
    out = configs(broker, "--alter", *default, "--add-config", "log.retention.ms=7200000")
    assert out == "Completed updating default config for brokers in the cluster.\n"
    out = configs(
        broker,
        "--alter",
        "--entity-type",
        "brokers",
        "--entity-name",
        "0",
        "--add-config",
        "log.segment.bytes=10485760",
    )
    assert out == "Completed updating config for broker 0.\n"
    view = confluent_view(broker, ResourceType.BROKER, "0")
    assert view["log.retention.ms"] == ("7200000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert view["log.segment.bytes"] == ("10485760", ConfigSource.DYNAMIC_BROKER_CONFIG)

    assert configs(broker, "--describe", *default).splitlines() == [
        "Default configs for brokers in the cluster are:",
        # As Kafka: the cluster default lists its own level only.
        "  log.retention.ms=7200000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:"
        "log.retention.ms=7200000}",
    ]
    lines = configs(broker, "--describe", "--entity-type", "brokers").splitlines()
    assert lines[0] == "Dynamic configs for broker 0 are:"
    assert [line.split()[0] for line in lines[1:]] == ["log.segment.bytes=10485760"]

    configs(broker, "--alter", *default, "--delete-config", "log.retention.ms")
    configs(
        broker,
        "--alter",
        "--entity-type",
        "brokers",
        "--entity-name",
        "0",
        "--delete-config",
        "log.segment.bytes",
    )
    view = confluent_view(broker, ResourceType.BROKER, "0")
    assert (
        view["log.retention.ms"][1] == view["log.segment.bytes"][1] == (ConfigSource.DEFAULT_CONFIG)
    )

    static = gregor(
        "configs",
        "--bootstrap-server",
        broker.bootstrap,
        "--alter",
        *default,
        "--add-config",
        "num.partitions=4",  # read-only (num.io.threads is dynamic, as in Kafka)
    )
    assert static.code == 1 and "INVALID_REQUEST" in static.err
    topic_default = gregor(
        "configs",
        "--bootstrap-server",
        broker.bootstrap,
        "--describe",
        "--entity-type",
        "topics",
        "--entity-default",
    )
    assert topic_default.code == 1 and "--entity-default is for" in topic_default.err
    nothing = gregor("configs", "--bootstrap-server", broker.bootstrap, "--alter", *default)
    assert nothing.code == 1 and "--add-config or --delete-config" in nothing.err


def test_group_configs(broker: BrokerProcess) -> None:
    group = f"configured-{uuid.uuid4().hex[:8]}"
    entity = ("--entity-type", "groups", "--entity-name", group)
    assert configs(
        broker, "--alter", *entity, "--add-config", "consumer.session.timeout.ms=50000"
    ) == (f"Completed updating config for group {group}.\n")
    view = confluent_view(broker, ResourceType.GROUP, group)
    assert view["consumer.session.timeout.ms"] == ("50000", ConfigSource.GROUP_CONFIG)
    lines = configs(broker, "--describe", *entity).splitlines()
    assert lines[0] == f"Dynamic configs for group {group} are:"
    assert [line.split()[0] for line in lines[1:]] == ["consumer.session.timeout.ms=50000"]
    too_short = gregor(
        "configs",
        "--bootstrap-server",
        broker.bootstrap,
        "--alter",
        *entity,
        "--add-config",
        "consumer.heartbeat.interval.ms=1000",
    )
    assert too_short.code == 1 and "INVALID_CONFIG" in too_short.err
