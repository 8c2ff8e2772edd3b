"""The consumer_groups family sends what it claims: well-formed requests (every one decodes)
whose contents are hostile in each promised way (pure code, no broker)."""

from __future__ import annotations

import random
import struct
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from fuzzing.consumer_groups import ENORMOUS, GROUPS, INT32_MAX, INT32_MIN, consumer_groups
from fuzzing.frames import FAMILIES

from gregor import re2_pattern
from gregor.wire.headers import skip_tagged_fields
from gregor.wire.schema import decode, is_flexible, request_type
from gregor.wire.versions import (
    CONSUMER_GROUP_DESCRIBE,
    CONSUMER_GROUP_HEARTBEAT,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    is_supported,
)


def decoded(frame: bytes) -> tuple[int, Any]:
    """(api key, request) of a truly sized frame with a served header."""
    size, api_key, version, _correlation, client_len = struct.unpack_from(">ihhih", frame)
    assert size == len(frame) - 4 and is_supported(api_key, version)
    pos = 14 + client_len
    if is_flexible(api_key, version):
        pos = skip_tagged_fields(frame, pos)
    return api_key, decode(request_type(api_key, version), frame[pos:])


@pytest.fixture(scope="module")
def episodes() -> list[list[tuple[int, Any]]]:
    rng = random.Random(7)
    return [[decoded(f) for f in consumer_groups(rng)] for _ in range(400)]


def test_the_family_is_fuzzed_by_default() -> None:
    assert FAMILIES["consumer_groups"][0] is consumer_groups


def test_episodes_start_with_members_joining_one_group(
    episodes: list[list[tuple[int, Any]]],
) -> None:
    for episode in episodes:
        api_key, first = episode[0]
        assert api_key == CONSUMER_GROUP_HEARTBEAT and first.group_id in GROUPS
        assert first.member_epoch == 0 and first.topic_partitions == ()
        assert first.subscribed_topic_names and first.rebalance_timeout > timedelta(0)


def test_heartbeats_are_hostile_in_every_promised_way(
    episodes: list[list[tuple[int, Any]]],
) -> None:
    kinds: Counter[str] = Counter()
    for episode in episodes:
        joined = {r.member_id for k, r in episode[:3] if k == CONSUMER_GROUP_HEARTBEAT}
        for api_key, r in episode:
            if api_key != CONSUMER_GROUP_HEARTBEAT:
                continue
            kinds["epoch 2^31-1"] += r.member_epoch == INT32_MAX
            kinds["epoch -2^31"] += r.member_epoch == INT32_MIN
            kinds["never joined leaves"] += r.member_epoch == -1 and r.member_id not in joined
            kinds["static leave, no instance"] += r.member_epoch == -2 and r.instance_id is None
            kinds["rebalance timeout 0"] += r.rebalance_timeout == timedelta(0)
            kinds["rebalance timeout 2^31-1"] += r.rebalance_timeout.total_seconds() > 2e6
            kinds["thousands of topics"] += len(r.subscribed_topic_names or ()) > 1000
            owned = [p for t in r.topic_partitions or () for p in t.partitions]
            kinds["huge owned"] += len(owned) >= 20_000
            kinds["duplicated owned"] += len(owned) != len(set(owned))
            regex = getattr(r, "subscribed_topic_regex", None)  # v1 on
            if regex is not None:
                kinds["enormous regex"] += len(regex) >= ENORMOUS
                kinds["invalid regex"] += re2_pattern.syntax_error(regex) is not None
                kinds["catastrophic regex"] += regex == "(a+)+$"
    assert len(kinds) == 12 and min(kinds.values()) >= 3, kinds


def test_describes_and_offsets_carry_many_groups_and_wrong_epochs(
    episodes: list[list[tuple[int, Any]]],
) -> None:
    requests = [(k, r) for episode in episodes for k, r in episode]
    described = [len(r.group_ids) for k, r in requests if k == CONSUMER_GROUP_DESCRIBE]
    assert max(described) > 2000
    commits = {r.generation_id_or_member_epoch for k, r in requests if k == OFFSET_COMMIT}
    fetches = {r.groups[0].member_epoch for k, r in requests if k == OFFSET_FETCH}
    assert {INT32_MAX, INT32_MIN, -3} <= commits & fetches
