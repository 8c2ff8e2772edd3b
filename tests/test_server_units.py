"""Unit tests of pure server pieces: configuration parsing."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.config import BrokerConfig, ConfigError, parse_listener, read_properties


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


def test_listener_parsing() -> None:
    assert parse_listener("PLAINTEXT://127.0.0.1:9092") == ("PLAINTEXT", "127.0.0.1", 9092)
    assert parse_listener("external://:19092") == ("EXTERNAL", "", 19092)
    assert parse_listener("PLAINTEXT://[::1]:9092") == ("PLAINTEXT", "::1", 9092)


