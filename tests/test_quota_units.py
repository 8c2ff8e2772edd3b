"""Unit tests of the quota arithmetic (server/quotas.py): Kafka's windowed Rate, the
throttle delay, the precedence of quota entities and the quota groups they form."""

from __future__ import annotations

import pytest

from gregor.controller.quota_entities import (
    DEFAULT,
    entity_path,
    parse_entity_path,
    quotas_of,
    sanitize,
    with_quotas,
)
from gregor.server.quotas import (
    SENSOR_EXPIRY_MS,
    ClientQuotaManager,
    ClientQuotas,
    Rate,
    throttle_ms,
)


def test_rate_counts_a_short_span_as_num_minus_one_windows() -> None:
    rate = Rate(11, 1000)
    rate.record(5000, 0)
    # Only 200 ms elapsed: the 10 whole windows missing before it are added (Rate.windowSize).
    assert rate.span_ms(200) == 10_200
    assert rate.measure(200) == pytest.approx(5000 / 10.2)


def test_rate_span_grows_past_the_minimum_then_old_samples_expire() -> None:
    rate = Rate(3, 1000)
    for second in range(6):
        rate.record(100, second * 1000)
    # Samples cycle through num + 1 = 4 slots: those of seconds 2..5 remain ...
    assert rate.total == 400
    # ... until second 2's is num windows old and expires: the span starts at second 3.
    assert rate.span_ms(5500) == 2500
    assert rate.measure(5500) == pytest.approx(300 / 2.5)
    # With nothing recorded for num windows, every sample has expired.
    assert rate.measure(9000) == 0.0


def test_rate_keeps_recording_into_the_current_window() -> None:
    rate = Rate(2, 1000)
    rate.record(10, 0)
    rate.record(20, 999)
    rate.record(30, 1000)  # a new window
    assert rate.total == 60
    rate.record(-20, 1001)  # unrecording subtracts from the current window
    assert rate.total == 40


def test_throttle_time_brings_the_rate_back_to_the_bound() -> None:
    # O * W / (W + X) = T  =>  X = (O - T) / T * W
    assert throttle_ms(2.0, 1.0, 10_000) == 10_000
    assert throttle_ms(1.5, 1.0, 11_000) == 5_500
    assert throttle_ms(1.0, 1.0, 10_000) == 0
    assert throttle_ms(0.5, 1.0, 10_000) == 0
    observed, bound, span = 3_000_000.0, 1_048_576.0, 4_000
    delay = throttle_ms(observed, bound, span)
    assert observed * span / (span + delay) == pytest.approx(bound, rel=1e-3)


def test_manager_throttles_only_past_the_bound() -> None:
    manager = ClientQuotaManager("producer_byte_rate", 11, 1)
    manager.set_overrides({(None, "slow"): 1000.0})
    # The first 10 windows' worth is admitted at once (span of 10 s at least).
    assert manager.record("ANONYMOUS", "slow", 10_000, 0) == 0
    delay = manager.record("ANONYMOUS", "slow", 1_000, 100)
    # 11,000 B over 10.1 s, against 1000 B/s: X = (O - T) / T * W = 11,000 / 1000 s - W.
    assert delay == 11_000 - 10_100
    assert manager.record("ANONYMOUS", "fast", 10**9, 100) == 0  # no quota applies


def test_request_time_throttle_is_capped_at_one_window() -> None:
    quotas = ClientQuotas(11, 1)
    quotas.apply({(DEFAULT, DEFAULT): {"request_percentage": 1.0}})
    delay = quotas.request.record("ANONYMOUS", "c", 10_000.0, 0)
    assert delay == 1000


def test_unrecord_takes_a_refused_fetch_back() -> None:
    manager = ClientQuotaManager("consumer_byte_rate", 11, 1)
    manager.set_overrides({(None, DEFAULT): 100.0})
    assert manager.record("u", "c", 2_000, 0) > 0
    manager.unrecord("u", "c", 2_000, 0)
    assert manager.record("u", "c", 500, 1) == 0


def test_max_value_in_window() -> None:
    manager = ClientQuotaManager("consumer_byte_rate", 11, 1)
    assert manager.max_value_in_window("u", "c") == float("inf")
    manager.set_overrides({(None, "c"): 1_048_576.0})
    assert manager.max_value_in_window("u", "c") == 10 * 1_048_576


PRECEDENCE = [
    ("alice", "app"),
    ("alice", DEFAULT),
    ("alice", None),
    (DEFAULT, "app"),
    (DEFAULT, DEFAULT),
    (DEFAULT, None),
    (None, "app"),
    (None, DEFAULT),
]


@pytest.mark.parametrize("level", range(len(PRECEDENCE)))
def test_precedence_is_the_seeds_order(level: int) -> None:
    """With every entity from `level` down configured, the one at `level` applies."""
    manager = ClientQuotaManager("producer_byte_rate", 11, 1)
    manager.set_overrides({e: float(100 + i) for i, e in enumerate(PRECEDENCE) if i >= level})
    assert manager.quota("alice", "app") == 100 + level
    # Another user and client id only match the defaults.
    defaults = [i for i, (u, c) in enumerate(PRECEDENCE) if i >= level and "app" != c != "alice"]
    defaults = [i for i in defaults if PRECEDENCE[i][0] != "alice"]
    expected = 100 + defaults[0] if defaults else None
    assert manager.quota("bob", "other") == expected


def test_quota_groups_share_one_rate_as_kafka_tags_them() -> None:
    manager = ClientQuotaManager("producer_byte_rate", 11, 1)
    # A client-id quota is shared by every user with that client id ...
    manager.set_overrides({(None, "app"): 1000.0})
    assert manager.record("alice", "app", 10_000, 0) == 0
    assert manager.record("bob", "app", 1_000, 0) > 0
    # ... a user quota by every client id of that user ...
    manager.set_overrides({("alice", None): 1000.0})
    assert manager.record("alice", "one", 10_000, 0) == 0
    assert manager.record("alice", "two", 1_000, 0) > 0
    # ... and a per-client default gives each (user, client id) its own rate.
    manager.set_overrides({("alice", DEFAULT): 1000.0})
    assert manager.record("alice", "three", 10_000, 0) == 0
    assert manager.record("alice", "four", 10_000, 0) == 0


def test_idle_quota_groups_are_forgotten() -> None:
    manager = ClientQuotaManager("producer_byte_rate", 11, 1)
    manager.set_overrides({(None, DEFAULT): 1000.0})
    manager.record("u", "idle", 10_000, 0)
    manager.record("u", "busy", 10_000, 0)
    manager.record("u", "busy", 1, SENSOR_EXPIRY_MS - 1)
    assert manager.groups == {("", "idle"), ("", "busy")}  # /config/clients/<default>
    manager.expire(SENSOR_EXPIRY_MS)
    assert manager.groups == {("", "busy")}
    assert manager.record("u", "idle", 1_000, SENSOR_EXPIRY_MS) == 0  # measured afresh
    assert manager.groups == {("", "busy"), ("", "idle")}


def test_changed_quota_applies_to_the_running_rate() -> None:
    manager = ClientQuotaManager("producer_byte_rate", 11, 1)
    manager.set_overrides({(None, "c"): 1000.0})
    manager.record("u", "c", 9_000, 0)
    manager.set_overrides({(None, "c"): 100.0})
    assert manager.record("u", "c", 1, 1) > 0  # the bytes already counted stay counted
    manager.set_overrides({})
    assert not manager.enabled
    assert manager.record("u", "c", 10**9, 2) == 0


def test_names_are_sanitized_as_kafka_does() -> None:
    assert sanitize("user@example.com") == "user%40example.com"
    assert sanitize("a b*c~") == "a%20b%2Ac%7E"
    assert sanitize(DEFAULT) != DEFAULT
    for entity in [("a%2F", None), (None, "c"), ("u", "c"), (DEFAULT, DEFAULT)]:
        assert parse_entity_path(entity_path(entity)) == entity  # type: ignore[arg-type]
    assert entity_path(("u", DEFAULT)) == "users/u/clients/<default>"
    assert parse_entity_path("topics/t") is None


def test_quota_values_are_written_in_kafkas_formats_beside_other_keys() -> None:
    config = {"SCRAM-SHA-256": "salt=...", "consumer_byte_rate": "2048"}
    ops = {"producer_byte_rate": 1048576.0, "request_percentage": 50, "consumer_byte_rate": None}
    written = with_quotas(config, ops)
    assert written == {
        "SCRAM-SHA-256": "salt=...",
        "producer_byte_rate": "1048576",
        "request_percentage": "50.0",
    }
    assert quotas_of(written) == {"producer_byte_rate": 1048576.0, "request_percentage": 50.0}
    assert quotas_of({"producer_byte_rate": "fast"}) == {}
