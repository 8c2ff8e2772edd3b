"""Unit tests of pure server pieces: configuration parsing."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from server.config import BrokerConfig, ConfigError, parse_listener, read_properties
from server.ratelimit import RateLimitedLog


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


def test_unknown_keys_only_warn(caplog: pytest.LogCaptureFixture) -> None:
    BrokerConfig({"made.up": "1"})
    assert "made.up" in caplog.text


def test_ignored_keys_warn_with_the_reason(caplog: pytest.LogCaptureFixture) -> None:
    BrokerConfig({"replica.lag.time.max.ms": "1000", "num.network.threads": "4"})
    assert "replica.lag.time.max.ms is accepted but ignored: a single broker" in caplog.text
    assert "num.network.threads is accepted but ignored" in caplog.text


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"listeners": "SSL://:9093"}, "Listener SSL uses security protocol SSL"),
        ({"listeners": "X://:9093"}, "No security protocol defined for listener X"),
        (
            {"listeners": "A://:1", "listener.security.protocol.map": "A:SASL_PLAINTEXT"},
            "Listener A uses security protocol SASL_PLAINTEXT",
        ),
        ({"listener.security.protocol.map": "nonsense"}, "expected LISTENER:PROTOCOL"),
        ({"ssl.truststore.location": "/t"}, "ssl.truststore.location is set"),
        ({"sasl.jaas.config": "x"}, "sasl.jaas.config is set"),
        ({"security.inter.broker.protocol": "SSL"}, "security.inter.broker.protocol is set"),
        ({"authorizer.class.name": "a.B"}, "authorizer.class.name is set"),
        ({"super.users": "User:admin"}, "super.users is set"),
        ({"listener.name.internal.sasl.enabled.mechanisms": "PLAIN"}, "has no TLS, SASL"),
        ({"zookeeper.connect": "zk:2181"}, "zookeeper.connect is set"),
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


