"""Consumer-protocol groups (KIP-848) against real broker processes: OffsetCommit's
version rules (Kafka's OffsetMetadataManager/ConsumerGroup.validateOffsetCommit), group
configs bounded by the broker's ``group.consumer.min/max.*`` keys (GroupConfig), and a
broker whose ``group.coordinator.rebalance.protocols`` leaves ``consumer`` out.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
from kio.schema.errors import ErrorCode

from compat_tests.broker import BrokerProcess
from compat_tests.process_pool import ProcessPool
from gregor.apis.context import build, nested
from gregor.coordinator.consumer_membership import WAITING_HEARTBEAT_INTERVAL_MS
from gregor.wire import versions as v
from gregor.wire.schema import request_type
from tests.kafka_wire import WireClient, create_topic
from tests.test_consumer_group_protocol import (
    BROKER_OVERRIDES,
    PARTITIONS,
    describe,
    heartbeat,
    join,
)
from tests.test_consumer_group_protocol import commit as protocol_commit

TOPIC = "cg-commit-topic"  # not test_consumer_group_protocol's, on the same shared broker
GROUP_RESOURCE = 32


@pytest.fixture(scope="module")
def broker(process_pool: ProcessPool) -> BrokerProcess:
    # test_consumer_group_protocol's overrides: the pool hands both modules one broker.
    return process_pool.broker(BROKER_OVERRIDES)


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[WireClient]:
    c = WireClient(broker.port)
    created = create_topic(c, TOPIC, 6)
    assert created.error_code in (ErrorCode.none, ErrorCode.topic_already_exists)
    # Made on the first FindCoordinator, the offsets topic then has the coordinator.
    find = build(request_type(v.FIND_COORDINATOR, 0), key="any")
    assert c.call(v.FIND_COORDINATOR, 0, find).error_code == ErrorCode.none
    yield c
    c.close()


def commit(client: WireClient, version: int, group: str, member_id: str, epoch: int) -> ErrorCode:
    return protocol_commit(client, group, member_id, epoch, version=version, topic=TOPIC, offset=3)


def new_group() -> str:
    return f"cg-commit-{uuid.uuid4().hex[:8]}"


# -- OffsetCommit's versions ---------------------------------------------------------------
def test_a_consumer_member_must_commit_with_v9_or_later(client: WireClient) -> None:
    group = new_group()
    member_id, joined = join(client, group, topics=(TOPIC,))
    assert joined.error_code == ErrorCode.none
    epoch = joined.member_epoch
    assert commit(client, 8, group, member_id, epoch) == ErrorCode.unsupported_version
    assert commit(client, 2, group, member_id, epoch) == ErrorCode.unsupported_version
    # The member is looked up first, as Kafka does.
    assert commit(client, 8, group, "stranger", epoch) == ErrorCode.unknown_member_id
    assert commit(client, 9, group, member_id, epoch) == ErrorCode.none
    assert heartbeat(client, group, member_id, -1).error_code == ErrorCode.none
    # An admin's commit to the now empty group is no member's: any version will do.
    assert commit(client, 8, group, "", -1) == ErrorCode.none


def test_commit_to_a_missing_group(client: WireClient) -> None:
    assert commit(client, 9, new_group(), "m", 1) == ErrorCode.group_id_not_found
    assert commit(client, 8, new_group(), "m", 1) == ErrorCode.illegal_generation
    # Without a generation it makes a simple group, whatever the version.
    assert commit(client, 9, new_group(), "", -1) == ErrorCode.none


# -- group configs -------------------------------------------------------------------------
def alter_group(client: WireClient, group: str, configs: dict[str, str]) -> tuple[int, str | None]:
    cls = request_type(v.INCREMENTAL_ALTER_CONFIGS, 1)
    resource, config = nested(cls, "AlterConfigsResource"), nested(cls, "AlterableConfig")
    request = cls(
        validate_only=False,
        resources=(
            resource(
                resource_type=GROUP_RESOURCE,
                resource_name=group,
                configs=tuple(
                    config(name=k, config_operation=0, value=x) for k, x in configs.items()
                ),
            ),
        ),
    )
    (answer,) = client.call(v.INCREMENTAL_ALTER_CONFIGS, 1, request).responses
    return answer.error_code, answer.error_message


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        (
            {"consumer.heartbeat.interval.ms": "50"},
            "consumer.heartbeat.interval.ms must be greater than or equal to "
            "group.consumer.min.heartbeat.interval.ms",
        ),
        (
            {"consumer.heartbeat.interval.ms": "15001"},
            "consumer.heartbeat.interval.ms must be less than or equal to "
            "group.consumer.max.heartbeat.interval.ms",
        ),
        (
            {"consumer.session.timeout.ms": "999", "consumer.heartbeat.interval.ms": "100"},
            "consumer.session.timeout.ms must be greater than or equal to "
            "group.consumer.min.session.timeout.ms",
        ),
        (
            {"consumer.session.timeout.ms": "60001"},
            "consumer.session.timeout.ms must be less than or equal to "
            "group.consumer.max.session.timeout.ms",
        ),
        (
            {"consumer.session.timeout.ms": "1000", "consumer.heartbeat.interval.ms": "1000"},
            "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms",
        ),
    ],
)
def test_group_configs_are_bounded_by_the_broker_keys(
    client: WireClient, configs: dict[str, str], message: str
) -> None:
    assert alter_group(client, new_group(), configs) == (ErrorCode.invalid_config, message)


def test_consumer_groups_use_their_group_configs(client: WireClient) -> None:
    group = new_group()
    # Below Kafka's default bounds (45000, 5000), within this broker's.
    configs = {"consumer.session.timeout.ms": "1200", "consumer.heartbeat.interval.ms": "300"}
    assert alter_group(client, group, configs) == (ErrorCode.none, None)
    member_id, joined = join(client, group, topics=(TOPIC,))
    assert (joined.error_code, joined.heartbeat_interval.total_seconds()) == (ErrorCode.none, 0.3)
    beat = heartbeat(client, group, member_id, joined.member_epoch)
    assert beat.heartbeat_interval.total_seconds() == 0.3


def test_a_member_waiting_for_partitions_heartbeats_sooner(client: WireClient) -> None:
    """While the partitions a member is to get are another's still, it is asked to come back
    within WAITING_HEARTBEAT_INTERVAL_MS, not the group's interval: it learns they are free
    only when it heartbeats."""
    group = new_group()
    configs = {"consumer.session.timeout.ms": "10000", "consumer.heartbeat.interval.ms": "3000"}
    assert alter_group(client, group, configs) == (ErrorCode.none, None)
    first, joined = join(client, group, topics=(TOPIC,))
    assert joined.heartbeat_interval.total_seconds() == 3.0
    second, waiting = join(client, group, topics=(TOPIC,))
    assert waiting.assignment is not None and not waiting.assignment.topic_partitions
    assert waiting.heartbeat_interval == timedelta(milliseconds=WAITING_HEARTBEAT_INTERVAL_MS)
    # The first revokes half (its answer names what it keeps), then owns only that.
    revoking = heartbeat(client, group, first, joined.member_epoch)
    kept = {t.topic_id: list(t.partitions) for t in revoking.assignment.topic_partitions}
    assert revoking.heartbeat_interval.total_seconds() == 3.0
    heartbeat(client, group, first, revoking.member_epoch, owned=kept)
    got = heartbeat(client, group, second, waiting.member_epoch)
    assert sum(len(t.partitions) for t in got.assignment.topic_partitions) == PARTITIONS // 2
    assert got.heartbeat_interval.total_seconds() == 3.0


# -- the consumer protocol switched off ------------------------------------------------------
@pytest.fixture(scope="module")
def classic_only(process_pool: ProcessPool) -> BrokerProcess:
    return process_pool.broker({"group.coordinator.rebalance.protocols": "classic"})


def test_without_the_consumer_protocol_its_apis_answer_unsupported_version(
    classic_only: BrokerProcess,
) -> None:
    client = WireClient(classic_only.port)
    try:
        # Kafka 4.1 still advertises them (ApiVersionsResponse.filterApis leaves out only
        # the telemetry APIs), and answers UNSUPPORTED_VERSION in the response body.
        hello = build(
            request_type(v.API_VERSIONS, 3),
            client_software_name="gregor-tests",
            client_software_version="1",
        )
        versions = client.call(v.API_VERSIONS, 3, hello)
        advertised = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
        assert advertised[v.CONSUMER_GROUP_HEARTBEAT] == (0, 1)
        assert advertised[v.CONSUMER_GROUP_DESCRIBE] == (0, 1)
        for version in (0, 1):
            _, answer = join(client, "cg-off", version=version)
            assert (answer.error_code, answer.error_message, answer.member_id) == (
                ErrorCode.unsupported_version,
                None,
                None,
            )
        assert describe(client, "cg-off").error_code == ErrorCode.unsupported_version
    finally:
        client.close()


def test_a_describe_of_many_groups_answers_each_in_order(client: WireClient) -> None:
    """More groups than one slice (apis/group_heartbeat_describe.py) are answered in full."""
    groups = [new_group() for _ in range(450)]
    member_id, _ = join(client, groups[300], topics=(TOPIC,))
    body = build(
        request_type(v.CONSUMER_GROUP_DESCRIBE, 1),
        group_ids=tuple(groups),
        include_authorized_operations=False,
    )
    described = client.call(v.CONSUMER_GROUP_DESCRIBE, 1, body).groups
    assert [d.group_id for d in described] == groups
    assert {d.error_code for i, d in enumerate(described) if i != 300} == {
        ErrorCode.group_id_not_found
    }
    assert [m.member_id for m in described[300].members] == [member_id]
