"""Regex subscriptions of consumer groups (KIP-848's SubscribedTopicRegex) over raw requests
against a real broker process: RE2/J validation, resolution against the topic names, the
refresh for created topics (batched every 10 s per group, as Kafka's), revocation of a
deleted topic, and the resolution (record type 16) reloaded after a restart.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
from kio.schema.errors import ErrorCode

from compat_tests.broker import BrokerProcess
from compat_tests.process_pool import ProcessPool
from gregor.apis.context import build, nested
from gregor.coordinator.topic_regex import REGEX_BATCH_REFRESH_INTERVAL_MS
from gregor.wire import versions as v
from gregor.wire.schema import request_type
from tests.kafka_wire import WireClient, create_topic
from tests.test_consumer_group_protocol import Member, describe, heartbeat, wait_until


@pytest.fixture(scope="module")
def broker(process_pool: ProcessPool) -> BrokerProcess:
    return process_pool.broker({"offsets.topic.num.partitions": "1"})


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[WireClient]:
    c = WireClient(broker.port)
    # FindCoordinator creates __consumer_offsets; the coordinator is up once it answers for
    # a group it does not have.
    c.call(v.FIND_COORDINATOR, 0, build(request_type(v.FIND_COORDINATOR, 0), key="rx-none"))
    wait_until(lambda: describe(c, "rx-none").error_code == ErrorCode.group_id_not_found)
    yield c
    c.close()


def topic_ids(client: WireClient, *names: str, partitions: int = 2) -> dict[str, uuid.UUID]:
    ids = {}
    for name in names:
        created = create_topic(client, name, partitions)
        assert created.error_code == ErrorCode.none, created
        ids[name] = created.topic_id
    return ids


def delete_topic(client: WireClient, name: str) -> None:
    cls = request_type(v.DELETE_TOPICS, 6)
    state = nested(cls, "DeleteTopicState")
    body = cls(timeout=timedelta(seconds=10), topics=(state(name=name, topic_id=None),))
    (result,) = client.call(v.DELETE_TOPICS, 6, body).responses
    assert result.error_code == ErrorCode.none


def test_invalid_regex_is_refused_with_kafkas_message(client: WireClient) -> None:
    for regex, description in (
        ("rx-(", "missing closing )"),
        ("(?=rx)x", "invalid or unsupported Perl syntax"),
        ("(rx)\\1", "invalid escape sequence"),
    ):
        response = heartbeat(
            client, "rx-invalid", str(uuid.uuid4()), 0, regex=regex, owned={}, rebalance_ms=5000
        )
        assert response.error_code == ErrorCode.invalid_regular_expression
        assert response.error_message == (
            f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {description}."
        )
    assert describe(client, "rx-invalid").error_code == ErrorCode.group_id_not_found  # not made


def test_a_costly_regex_is_refused_before_it_is_compiled(client: WireClient) -> None:
    """RE2 compiles on the event loop: a pattern over the bounds of gregor/re2_pattern.py is
    refused as one outgrowing RE2's memory; one within them is served."""
    too_large = "pattern too large - compile failed"
    for regex in ("rx-" + "a|" * 40_000, "a{1000}" * 11):
        response = heartbeat(
            client, "rx-costly", str(uuid.uuid4()), 0, regex=regex, owned={}, rebalance_ms=5000
        )
        assert response.error_code == ErrorCode.invalid_regular_expression
        assert response.error_message.endswith(f"not a valid regular expression: {too_large}.")
    within = "rx-costly-" + "a{1000}" * 9 + "|rx-costly-.*"
    response = heartbeat(
        client, "rx-costly", str(uuid.uuid4()), 0, regex=within, owned={}, rebalance_ms=5000
    )
    assert response.error_code == ErrorCode.none, response


def test_regex_member_gets_the_matching_topics(client: WireClient) -> None:
    ids = topic_ids(client, "rx1-a", "rx1-b", "xrx1-c", "rx1")
    member = Member(client, "rx-match", topics=None, regex="rx1-.*")
    assert member.owned == {ids["rx1-a"]: [0, 1], ids["rx1-b"]: [0, 1]}
    # A second member with a name and the same regex: the group splits the union.
    other = Member(client, "rx-match", topics=("rx1",), regex="rx1-.*")
    for _ in range(5):
        member.beat(), other.beat()
    assert sorted(member.owned.keys() | other.owned.keys()) == sorted(
        [ids["rx1-a"], ids["rx1-b"], ids["rx1"]]
    )
    regexes = {m.member_id: m.subscribed_topic_regex for m in describe(client, "rx-match").members}
    assert regexes == {member.member_id: "rx1-.*", other.member_id: "rx1-.*"}


def test_created_and_deleted_topics(client: WireClient) -> None:
    ids = topic_ids(client, "rx2-first")
    member = Member(client, "rx-refresh", topics=None, regex="rx2-.*")
    assert member.owned == {ids["rx2-first"]: [0, 1]}
    ids |= topic_ids(client, "rx2-later")
    created = time.monotonic()
    # The group's regexes are resolved again at the first heartbeat 10 s after the last
    # resolution (Kafka's batch), which saw no such topic.
    wait_until(
        lambda: member.beat() is not None and ids["rx2-later"] in member.owned,
        timeout=REGEX_BATCH_REFRESH_INTERVAL_MS / 1000 + 10,
    )
    assert time.monotonic() - created <= REGEX_BATCH_REFRESH_INTERVAL_MS / 1000 + 2
    assert member.owned == {ids["rx2-first"]: [0, 1], ids["rx2-later"]: [0, 1]}
    epoch = member.epoch
    delete_topic(client, "rx2-first")
    # At once: the deleted topic leaves the subscribed topics' metadata, which bumps the group.
    member.beat()  # revokes its partitions
    assert member.owned == {ids["rx2-later"]: [0, 1]}
    assert member.beat().member_epoch == epoch + 1


def test_resolution_reloads_after_a_restart(broker: BrokerProcess, client: WireClient) -> None:
    ids = topic_ids(client, "rx3-a")
    stays = Member(client, "rx-reload", topics=None, regex="rx3-.*")
    leaves = Member(client, "rx-reload", topics=None, regex="other-rx3-.*")
    assert heartbeat(client, "rx-reload", leaves.member_id, -1).error_code == ErrorCode.none
    wait_until(lambda: stays.beat() is not None and stays.owned == {ids["rx3-a"]: [0, 1]})
    before = describe(client, "rx-reload")
    broker.restart()
    client = WireClient(broker.port)
    try:
        wait_until(lambda: describe(client, "rx-reload").error_code == ErrorCode.none)
        stays.client = client
        # The resolution came back with the group: the heartbeat after the restart changes
        # nothing (an unresolved regex would be resolved, and the group epoch bumped).
        response = stays.beat()
        after = describe(client, "rx-reload")
        assert (after.group_epoch, response.member_epoch) == (before.group_epoch, stays.epoch)
        assert [m.subscribed_topic_regex for m in after.members] == ["rx3-.*"]
        assert stays.owned == {ids["rx3-a"]: [0, 1]}
    finally:
        client.close()
