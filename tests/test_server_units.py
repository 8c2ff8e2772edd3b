"""Unit tests of pure server pieces: configuration parsing."""

from __future__ import annotations

import gc
import logging
import time
from pathlib import Path

import pytest

from gregor.ratelimit import RateLimitedLog
from gregor.server.cli.serve import PauseLog
from gregor.server.config import BrokerConfig, ConfigError, parse_listener, read_properties


def test_properties_file_parsing(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text(
        "# comment\n! also\nbroker.id=3\nlisteners : PLAINTEXT://h:1\n"
        "log.dirs=/a,\\\n  /b\n\nempty=\n"
    )
    assert read_properties(path) == {
        "broker.id": "3",
        "listeners": "PLAINTEXT://h:1",
        "log.dirs": "/a,/b",
        "empty": "",
    }


def test_defaults_and_typed_values() -> None:
    config = BrokerConfig({"log.dirs": "/x,/y", "num.io.threads": "4"})
    assert config["num.io.threads"] == 4 and config["num.partitions"] == 1
    assert config["auto.create.topics.enable"] is True
    assert [str(p) for p in config.log_dirs] == ["/x", "/y"]
    assert config.is_default("num.partitions") and not config.is_default("num.io.threads")


def test_retention_precedence_ms_over_minutes_over_hours() -> None:
    assert BrokerConfig({"log.retention.hours": "1"}).log_config.retention_ms == 3_600_000
    assert (
        BrokerConfig(
            {"log.retention.hours": "1", "log.retention.minutes": "2"}
        ).log_config.retention_ms
        == 120_000
    )
    assert (
        BrokerConfig(
            {"log.retention.minutes": "2", "log.retention.ms": "5"}
        ).log_config.retention_ms
        == 5
    )


@pytest.mark.parametrize(
    "key,value",
    [
        ("num.io.threads", "zero"),
        ("num.io.threads", "0"),
        ("auto.create.topics.enable", "yes"),
        ("log.segment.bytes", "-1"),
        ("log.message.timestamp.type", "Sometimes"),
        ("listeners", "nonsense"),
        ("listeners", "PLAINTEXT://:99999"),
        ("gregor.idle.poll.us", "-1"),
    ],
)
def test_invalid_values_name_the_key(key: str, value: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        BrokerConfig({key: value})


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"num.io.threads": "zero"}, "num.io.threads: Not a number of type INT"),
        ({"num.io.threads": "0"}, "num.io.threads: Value must be at least 1"),
        ({"log.retention.bytes": "x"}, "log.retention.bytes: Not a number of type LONG"),
        (
            {"listener.name.plaintext.max.connection.creation.rate": "-1"},
            "listener.name.plaintext.max.connection.creation.rate: Value must be at least 0",
        ),
    ],
)
def test_invalid_values_get_kafkas_messages(props: dict[str, str], message: str) -> None:
    """As the dynamic broker configs answer them (test_dynamic_broker_configs)."""
    ((_, value),) = props.items()
    with pytest.raises(ConfigError) as refused:
        BrokerConfig(props)
    assert str(refused.value) == f"Invalid value {value} for configuration {message}"


def test_unknown_keys_only_warn(caplog: pytest.LogCaptureFixture) -> None:
    BrokerConfig({"made.up": "1"})
    assert "made.up" in caplog.text


def test_ignored_keys_warn_with_the_reason(caplog: pytest.LogCaptureFixture) -> None:
    BrokerConfig({"replica.lag.time.max.ms": "1000", "num.network.threads": "4"})
    assert "replica.lag.time.max.ms is ignored: it applies only in cluster mode" in caplog.text
    assert "num.network.threads is accepted but ignored" in caplog.text


def test_cluster_keys_have_kafkas_defaults(caplog: pytest.LogCaptureFixture) -> None:
    config = BrokerConfig({"zookeeper.connect": "zk1:2181,zk2:2181/kafka", "broker.rack": "r1"})
    assert config.cluster_mode
    assert "ignored" not in caplog.text
    assert config.zookeeper_connection_timeout_ms == config["zookeeper.session.timeout.ms"]
    assert config.inter_broker_listener == "PLAINTEXT"
    expected = {
        "zookeeper.session.timeout.ms": 18000,
        "replica.lag.time.max.ms": 30000,
        "replica.fetch.wait.max.ms": 500,
        "replica.fetch.min.bytes": 1,
        "replica.fetch.max.bytes": 1048576,
        "replica.fetch.response.max.bytes": 10485760,
        "replica.fetch.backoff.ms": 1000,
        "num.replica.fetchers": 1,
        "replica.high.watermark.checkpoint.interval.ms": 5000,
        "replica.socket.timeout.ms": 30000,
        "controller.socket.timeout.ms": 30000,
        "auto.leader.rebalance.enable": True,
        "leader.imbalance.check.interval.seconds": 300,
        "leader.imbalance.per.broker.percentage": 10,
        "controlled.shutdown.enable": True,
        "controlled.shutdown.max.retries": 3,
        "controlled.shutdown.retry.backoff.ms": 5000,
        "default.replication.factor": 1,
        "offsets.topic.replication.factor": 3,
        "delete.topic.enable": True,
    }
    assert {k: config[k] for k in expected} == expected
    assert config["min.insync.replicas"] == 1
    assert config["unclean.leader.election.enable"] is False
    unclean = BrokerConfig({"unclean.leader.election.enable": "true"})
    assert unclean["unclean.leader.election.enable"] is True
    assert not BrokerConfig({}).cluster_mode
    assert (
        BrokerConfig(
            {"zookeeper.connect": "zk:2181", "zookeeper.connection.timeout.ms": "6000"}
        ).zookeeper_connection_timeout_ms
        == 6000
    )


def test_inter_broker_listener_is_named_or_derived() -> None:
    config = BrokerConfig(
        {
            "zookeeper.connect": "zk:2181",
            "listeners": "CLIENT://:9092,REPLICATION://:9093",
            "listener.security.protocol.map": "CLIENT:PLAINTEXT,REPLICATION:PLAINTEXT",
            "inter.broker.listener.name": "replication",
        }
    )
    assert config.inter_broker_listener == "REPLICATION"


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"zookeeper.connect": ","}, "expected host:port"),
        ({"zookeeper.connect": "/chroot"}, "expected host:port"),
        (
            {
                "inter.broker.listener.name": "PLAINTEXT",
                "security.inter.broker.protocol": "PLAINTEXT",
            },
            "Only one of inter.broker.listener.name and security.inter.broker.protocol",
        ),
        ({"inter.broker.listener.name": "OTHER"}, "must be a listener name defined in"),
        (
            {"listeners": "CLIENT://:1", "listener.security.protocol.map": "CLIENT:PLAINTEXT"},
            "No listener uses security.inter.broker.protocol PLAINTEXT",
        ),
        (
            {"replica.fetch.wait.max.ms": "40000"},
            "replica.socket.timeout.ms should always be at least replica.fetch.wait.max.ms",
        ),
        (
            {"replica.fetch.wait.max.ms": "2000", "replica.lag.time.max.ms": "1000"},
            "replica.fetch.wait.max.ms should always be less than or equal to",
        ),
        ({"leader.imbalance.per.broker.percentage": "101"}, "at most 100"),
        ({"num.replica.fetchers": "0"}, "num.replica.fetchers"),
        ({"controlled.shutdown.enable": "maybe"}, "controlled.shutdown.enable"),
    ],
)
def test_invalid_cluster_settings_refuse_to_start(props: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        BrokerConfig({"zookeeper.connect": "zk:2181", **props})


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"listeners": "X://:9093"}, "No security protocol defined for listener X"),
        ({"listener.security.protocol.map": "nonsense"}, "expected LISTENER:PROTOCOL"),
        ({"ssl.engine.factory.class": "a.B"}, "ssl.engine.factory.class is set"),
        ({"sasl.kerberos.service.name": "kafka"}, "does not support Kerberos"),
        ({"sasl.login.class": "a.B"}, "custom login classes are not supported"),
        ({"authorizer.class.name": "a.B"}, "value a.B for configuration authorizer.class.name"),
        ({"super.users": "User:a;admin"}, "value User:a;admin for configuration super.users"),
        ({"listener.name.internal.sasl.enabled.mechanisms": "GSSAPI"}, "support Kerberos"),
        ({"max.connections.per.ip.overrides": "127.0.0.1"}, "expected host:count"),
        ({"max.connections.per.ip.overrides": "127.0.0.1:x"}, "expected host:count"),
    ],
)
def test_unhonourable_config_refuses_to_start(props: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        BrokerConfig(props)


def test_plaintext_security_settings_are_accepted() -> None:
    config = BrokerConfig(
        {
            "listeners": "PLAINTEXT://:9092,INTERNAL://:9093",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
            "security.inter.broker.protocol": "PLAINTEXT",
            "max.connections.per.ip.overrides": "127.0.0.1:5, 10.0.0.1:7",
        }
    )
    assert config.security_protocols["INTERNAL"] == "PLAINTEXT"
    assert config.per_ip_overrides == {"127.0.0.1": 5, "10.0.0.1": 7}
    assert config["queued.max.request.bytes"] == 104857600
    assert config["socket.send.buffer.bytes"] == -1


def test_rate_limited_log_counts_what_it_suppressed(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    log = RateLimitedLog(logging.getLogger("test.ratelimit"), interval_s=0.05)
    for _ in range(100):
        log.log("storm", logging.WARNING, "accept failed: %s", "EMFILE")
    log.log("other", logging.INFO, "another kind")
    assert caplog.text.count("accept failed: EMFILE") == 1
    assert "another kind" in caplog.text
    time.sleep(0.06)  # the interval itself is what must pass
    log.log("storm", logging.WARNING, "accept failed: %s", "EMFILE")
    assert "accept failed: EMFILE (99 similar message(s) suppressed)" in caplog.text
    assert caplog.text.count("accept failed: EMFILE") == 2


def test_listener_parsing() -> None:
    assert parse_listener("PLAINTEXT://127.0.0.1:9092") == ("PLAINTEXT", "127.0.0.1", 9092)
    assert parse_listener("external://:19092") == ("EXTERNAL", "", 19092)
    assert parse_listener("PLAINTEXT://[::1]:9092") == ("PLAINTEXT", "::1", 9092)


def test_pause_log_names_long_collections_only(caplog: pytest.LogCaptureFixture) -> None:
    """A collection at or over the threshold is logged with its generation and what it
    found unreachable; one under it is not."""
    caplog.set_level(logging.INFO, logger="gregor")

    def collect_cycles(pause_log: PauseLog) -> list[str]:
        caplog.clear()
        gc.disable()  # only the collection asked for below
        gc.callbacks.append(pause_log)
        try:
            for _ in range(20_000):
                cycle: list[object] = []
                cycle.append(cycle)
            del cycle
            gc.collect(2)
        finally:
            gc.callbacks.remove(pause_log)
            gc.enable()
        return [r.getMessage() for r in caplog.records if "Garbage collection" in r.getMessage()]

    (line,) = collect_cycles(PauseLog(0.0))
    assert line.startswith("Garbage collection of generation 2 took ")
    assert " ms of CPU (" in line
    assert int(line.rsplit("(", 1)[1].split()[0]) >= 20_000
    assert collect_cycles(PauseLog(3600.0)) == []
