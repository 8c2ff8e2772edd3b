"""Topic-level config table, precedence and validation."""

from dataclasses import fields

import pytest

from gregor.configdef import ConfigError, ConfigKey, Type
from gregor.log.config import (
    LONG_MAX,
    TOPIC_CONFIGS,
    LogConfig,
    resolve_config,
    validate_topic_configs,
)


def test_defaults_match_kafka() -> None:
    c = LogConfig.from_properties({}, {})
    assert c == LogConfig()
    assert c.segment_bytes == 1 << 30
    assert c.segment_ms == c.retention_ms == 7 * 24 * 3_600_000
    assert (c.retention_bytes, c.index_interval_bytes, c.segment_index_bytes) == (
        -1,
        4096,
        10 << 20,
    )
    assert c.flush_interval_messages == c.flush_interval_ms == LONG_MAX
    assert (c.max_message_bytes, c.cleanup_policy, c.file_delete_delay_ms) == (
        1048588,
        "delete",
        60000,
    )
    assert (c.min_insync_replicas, c.compression_type, c.message_timestamp_type) == (
        1,
        "producer",
        "CreateTime",
    )
    assert c.delete_enabled and not c.compact and not c.log_append_time


def test_every_field_has_exactly_one_table_entry() -> None:
    attrs = [d.attr for d in TOPIC_CONFIGS.values() if d.attr is not None]
    assert sorted(attrs) == sorted(f.name for f in fields(LogConfig))
    for key in ("segment.bytes", "retention.ms", "cleanup.policy", "min.insync.replicas"):
        assert key in TOPIC_CONFIGS
    assert TOPIC_CONFIGS["segment.bytes"].synonyms == (("log.segment.bytes", 1),)
    assert TOPIC_CONFIGS["max.message.bytes"].synonyms == (("message.max.bytes", 1),)


def test_topic_override_beats_broker_key_beats_default() -> None:
    broker = {"log.segment.bytes": "5000", "log.cleanup.policy": "compact"}
    c = LogConfig.from_properties(broker, {"segment.bytes": "7000"})
    assert c.segment_bytes == 7000 and c.cleanup_policy == "compact" and c.compact
    assert resolve_config(TOPIC_CONFIGS["segment.bytes"], broker, {}) == (5000, "log.segment.bytes")
    assert resolve_config(TOPIC_CONFIGS["segment.ms"], broker, {})[1] is None


def test_retention_precedence_ms_over_minutes_over_hours() -> None:
    hours = {"log.retention.hours": "2"}
    assert LogConfig.from_properties(hours, {}).retention_ms == 2 * 3_600_000
    minutes = {**hours, "log.retention.minutes": "3"}
    assert LogConfig.from_properties(minutes, {}).retention_ms == 3 * 60_000
    ms = {**minutes, "log.retention.ms": "-1"}
    assert LogConfig.from_properties(ms, {}).retention_ms == -1


def test_roll_ms_over_roll_hours_and_flush_fallback() -> None:
    assert LogConfig.from_properties({"log.roll.hours": "1"}, {}).segment_ms == 3_600_000
    both = {"log.roll.hours": "1", "log.roll.ms": "1234"}
    assert LogConfig.from_properties(both, {}).segment_ms == 1234
    sched = {"log.flush.scheduler.interval.ms": "100"}
    assert LogConfig.from_properties(sched, {}).flush_interval_ms == 100
    assert (
        LogConfig.from_properties({**sched, "log.flush.interval.ms": "50"}, {}).flush_interval_ms
        == 50
    )


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("cleanup.policy", "shred"),
        ("compression.type", "brotli"),
        ("min.insync.replicas", "0"),
        ("retention.ms", "-2"),
        ("retention.ms", "soon"),
        ("segment.bytes", "99999999999"),
        ("message.timestamp.type", "WallClock"),
        ("min.cleanable.dirty.ratio", "1.5"),
        ("unclean.leader.election.enable", "maybe"),
        ("leader.replication.throttled.replicas", "0:x"),
    ],
)
def test_bad_values_name_the_key(key: str, value: str) -> None:
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        validate_topic_configs({key: value})


def test_unknown_key_rejected_and_good_values_accepted() -> None:
    with pytest.raises(ValueError, match="bogus.key"):
        validate_topic_configs({"bogus.key": "1"})
    validate_topic_configs(
        {
            "cleanup.policy": "compact,delete",
            "retention.ms": "-1",
            "leader.replication.throttled.replicas": "0:1,1:2",
            "compression.type": "zstd",
            "preallocate": "TRUE",
        }
    )


def test_bad_broker_value_names_broker_key() -> None:
    with pytest.raises(ValueError, match=r"log\.retention\.hours"):
        LogConfig.from_properties({"log.retention.hours": "x"}, {})


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (
            "segment.bytes",
            "99999999999",
            "Invalid value 99999999999 for configuration segment.bytes: Not a number of type INT",
        ),
        (
            "retention.ms",
            "1_000",
            "Invalid value 1_000 for configuration retention.ms: Not a number of type LONG",
        ),
        (
            "min.insync.replicas",
            "0",
            "Invalid value 0 for configuration min.insync.replicas: Value must be at least 1",
        ),
        (
            "min.cleanable.dirty.ratio",
            "1.5",
            "Invalid value 1.5 for configuration "
            "min.cleanable.dirty.ratio: Value must be no more than 1",
        ),
        (
            "preallocate",
            "yes",
            "Invalid value yes for configuration preallocate: "
            "Expected value to be either true or false",
        ),
        (
            "cleanup.policy",
            "compact,shred",
            "Invalid value shred for configuration "
            "cleanup.policy: String must be one of: compact, delete",
        ),
    ],
)
def test_kafkas_messages_for_topic_keys_and_their_broker_keys(
    key: str, value: str, message: str
) -> None:
    with pytest.raises(ConfigError) as topic_level:
        validate_topic_configs({key: value})
    assert str(topic_level.value) == message
    broker_key = TOPIC_CONFIGS[key].synonyms[0][0]
    with pytest.raises(ConfigError) as broker_level:
        LogConfig.from_properties({broker_key: value}, {})
    assert str(broker_level.value) == message.replace(f" {key}: ", f" {broker_key}: ")


def test_a_password_value_is_trimmed_as_kafka_trims_it() -> None:
    # ConfigDef.parseType trims every string value, a PASSWORD's too.
    assert ConfigKey("ssl.keystore.password", Type.PASSWORD, None).parse(" s3cret \t") == "s3cret"
