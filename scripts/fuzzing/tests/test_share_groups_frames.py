"""The share_groups family sends what it claims: well-formed requests (every one decodes)
whose contents are hostile in each promised way (pure code, no broker)."""

from __future__ import annotations

import random
import uuid
from collections import Counter
from typing import Any

import pytest
from fuzzing import share_groups
from fuzzing.frames import FAMILIES
from fuzzing.share_groups import (
    GROUPS,
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    RECORDS,
    STATE_TOPIC,
    STOLEN,
    TOPICS,
)
from fuzzing.tests.test_consumer_groups_frames import decoded

from gregor.wire.versions import (
    SHARE_ACKNOWLEDGE,
    SHARE_FETCH,
    SHARE_GROUP_DESCRIBE,
    SHARE_GROUP_HEARTBEAT,
    WRITE_SHARE_GROUP_STATE,
)

TOPIC_IDS = (uuid.uuid4(), uuid.uuid4())


@pytest.fixture(scope="module")
def episodes() -> list[list[tuple[int, Any]]]:
    share_groups.use_topic_ids(TOPIC_IDS)
    rng = random.Random(7)
    return [[decoded(f) for f in share_groups.share_groups(rng)] for _ in range(150)]


@pytest.fixture(scope="module")
def requests(episodes: list[list[tuple[int, Any]]]) -> list[tuple[int, Any]]:
    return [request for episode in episodes for request in episode]


def test_the_family_is_fuzzed_by_default() -> None:
    assert FAMILIES["share_groups"][0] is share_groups.share_groups


def test_episodes_join_one_group_and_open_sessions(
    episodes: list[list[tuple[int, Any]]],
) -> None:
    for episode in episodes:
        api_key, first = episode[0]
        assert api_key == SHARE_GROUP_HEARTBEAT and first.group_id in GROUPS
        assert first.member_epoch == 0 and first.subscribed_topic_names == TOPICS
        opening = next(r for k, r in episode if k == SHARE_FETCH)
        assert opening.share_session_epoch == 0 and opening.group_id == first.group_id


def test_heartbeats_and_describes_are_hostile(requests: list[tuple[int, Any]]) -> None:
    beats = [r for k, r in requests if k == SHARE_GROUP_HEARTBEAT]
    kinds = Counter()
    for r in beats:
        kinds["epoch 2^31-1"] += r.member_epoch == INT32_MAX
        kinds["epoch -2^31"] += r.member_epoch == INT32_MIN
        kinds["stolen member"] += r.member_id in STOLEN
        kinds["thousands of topics"] += len(r.subscribed_topic_names or ()) > 1000
        kinds["unknown topic"] += "fuzz-sg-unknown" in (r.subscribed_topic_names or ())
    assert len(kinds) == 5 and min(kinds.values()) >= 3, kinds
    described = [len(r.group_ids) for k, r in requests if k == SHARE_GROUP_DESCRIBE]
    assert max(described) > 2000


def _batches(request: Any) -> list[Any]:
    return [b for t in request.topics for p in t.partitions for b in p.acknowledgement_batches]


def test_share_fetches_and_acknowledgements_lie_in_every_promised_way(
    requests: list[tuple[int, Any]],
) -> None:
    kinds = Counter()
    for api_key, r in requests:
        if api_key not in (SHARE_FETCH, SHARE_ACKNOWLEDGE):
            continue
        kinds["session epoch 2^31-1"] += r.share_session_epoch == INT32_MAX
        kinds["session epoch -2"] += r.share_session_epoch == -2
        kinds["stolen session"] += r.member_id in STOLEN
        ids = {t.topic_id for t in r.topics}
        kinds["unknown topic id"] += not ids <= {*TOPIC_IDS, None}
        kinds["zero topic id"] += None in ids  # kio reads the zero id as None
        kinds["partition 2^31-1"] += any(
            p.partition_index == INT32_MAX for t in r.topics for p in t.partitions
        )
        batches = _batches(r)
        ranges = [(b.first_offset, b.last_offset) for b in batches]
        pairs = list(zip(ranges, ranges[1:], strict=False))
        kinds["overlapping"] += any(a[1] >= b[0] > a[0] for a, b in pairs)
        kinds["unsorted"] += any(b[1] < a[0] for a, b in pairs)
        kinds["reversed"] += any(a > b for a, b in ranges)
        kinds["types of the wrong length"] += any(
            1 < len(b.acknowledge_types) != b.last_offset - b.first_offset + 1 for b in batches
        )
        kinds["no type"] += any(not b.acknowledge_types for b in batches)
        kinds["unknown type"] += any(
            t not in (0, 1, 2, 3) for b in batches for t in b.acknowledge_types
        )
        kinds["GAP"] += any(0 in b.acknowledge_types for b in batches)
        kinds["past the log end"] += any(b.last_offset >= RECORDS for b in batches)
        kinds["to 2^63-1"] += any(b.last_offset == INT64_MAX for b in batches)
        kinds["below the log start"] += any(b.first_offset < 0 for b in batches)
        kinds["thousands of batches"] += len(batches) >= 1000
        if api_key == SHARE_FETCH:
            for name in ("max_records", "max_bytes", "batch_size"):
                for value in (0, -1, INT32_MAX):
                    kinds[f"{name} {value}"] += getattr(r, name) == value
            kinds["forgotten"] += bool(r.forgotten_topics_data)
    assert len(kinds) == 27 and min(kinds.values()) >= 3, kinds


def test_share_state_rpcs_hit_the_fuzz_groups_with_lies(requests: list[tuple[int, Any]]) -> None:
    state = [(k, r) for k, r in requests if k in STATE_TOPIC]
    assert {k for k, _ in state} == set(STATE_TOPIC)
    assert {r.group_id for _, r in state} <= {*GROUPS, ""}
    partitions = [p for _, r in state for t in r.topics for p in t.partitions]
    starts = {getattr(p, "start_offset", None) for p in partitions}
    assert {-1, INT64_MAX} <= starts
    epochs = {getattr(p, "leader_epoch", None) for p in partitions}
    epochs &= {getattr(p, "state_epoch", None) for p in partitions}
    assert {INT32_MAX, INT32_MIN, -3} <= epochs
    writes = [
        p.state_batches
        for k, r in state
        if k == WRITE_SHARE_GROUP_STATE
        for t in r.topics
        for p in t.partitions
    ]
    assert max(len(b) for b in writes) >= 3000
    assert any(
        a.last_offset >= b.first_offset > a.first_offset
        for batches in writes
        for a, b in zip(batches, batches[1:], strict=False)
    )
