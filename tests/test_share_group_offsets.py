"""DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteShareGroupOffsets (KIP-932) on
a real broker, by raw requests: the errors Kafka 4.1 answers (an unknown group, a group of
another type, a group with members, unknown topics and partitions) and the gate of
``group.share.enable``. Their happy paths are in tests/test_api_version_sweep.py, their
authorization in tests/test_authorization.py."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from compat_tests.broker import BrokerProcess
from compat_tests.process_pool import ProcessPool
from gregor.apis.context import nested
from gregor.wire import versions as v
from gregor.wire.schema import request_type
from tests.kafka_wire import WireClient
from tests.share_groups_off import SHARE_GROUPS_OFF
from tests.test_consumer_group_protocol import join as consumer_join
from tests.test_consumer_group_protocol import topic_with_coordinator, wait_until
from tests.test_share_group_membership import BROKER_OVERRIDES, list_groups
from tests.test_share_group_membership import describe as share_describe
from tests.test_share_group_membership import heartbeat as share_heartbeat

TOPIC = "sg-offsets-topic"


def describe_offsets(
    client: WireClient, group: str, topic: str, partitions: tuple[int, ...] | None
) -> Any:
    """DescribeShareGroupOffsets of ``group``: ``topic``'s ``partitions``, or (None) every
    topic the group has state for."""
    cls = request_type(v.DESCRIBE_SHARE_GROUP_OFFSETS, 0)
    topics = None
    if partitions is not None:
        topics = (
            nested(cls, "DescribeShareGroupOffsetsRequestTopic")(
                topic_name=topic, partitions=partitions
            ),
        )
    asked = nested(cls, "DescribeShareGroupOffsetsRequestGroup")(group_id=group, topics=topics)
    (described,) = client.call(v.DESCRIBE_SHARE_GROUP_OFFSETS, 0, cls(groups=(asked,))).groups
    return described


def alter_offsets(client: WireClient, group: str, topic: str, offsets: dict[int, int]) -> Any:
    cls = request_type(v.ALTER_SHARE_GROUP_OFFSETS, 0)
    partition = nested(cls, "AlterShareGroupOffsetsRequestPartition")
    body = nested(cls, "AlterShareGroupOffsetsRequestTopic")(
        topic_name=topic,
        partitions=tuple(partition(partition_index=p, start_offset=o) for p, o in offsets.items()),
    )
    return client.call(v.ALTER_SHARE_GROUP_OFFSETS, 0, cls(group_id=group, topics=(body,)))


def delete_offsets(client: WireClient, group: str, *topics: str) -> Any:
    cls = request_type(v.DELETE_SHARE_GROUP_OFFSETS, 0)
    topic = nested(cls, "DeleteShareGroupOffsetsRequestTopic")
    body = tuple(topic(topic_name=t) for t in topics)
    return client.call(v.DELETE_SHARE_GROUP_OFFSETS, 0, cls(group_id=group, topics=body))


@pytest.fixture(scope="module")
def broker(process_pool: ProcessPool) -> BrokerProcess:
    return process_pool.broker(BROKER_OVERRIDES)


@pytest.fixture(scope="module")
def topic_id(broker: BrokerProcess) -> uuid.UUID:
    return topic_with_coordinator(broker, TOPIC, 2)


@pytest.fixture
def client(broker: BrokerProcess, topic_id: uuid.UUID) -> Any:
    c = WireClient(broker.port)
    yield c
    c.close()


def test_errors_of_groups_that_are_not_empty_share_groups(client: WireClient) -> None:
    unknown = f"sg-{uuid.uuid4().hex[:8]}"
    described = describe_offsets(client, unknown, TOPIC, None)
    deleted = delete_offsets(client, unknown, TOPIC)
    for answer in (described, deleted):
        assert answer.error_code == ErrorCode.group_id_not_found
    # Asked for partitions, an unknown group has no state: -1, as Kafka answers it.
    (topic,) = describe_offsets(client, unknown, TOPIC, (0,)).topics
    assert [(p.partition_index, p.start_offset) for p in topic.partitions] == [(0, -1)]

    consumer_group = f"cg-{uuid.uuid4().hex[:8]}"
    consumer_join(client, consumer_group, topics=(TOPIC,))
    refused = alter_offsets(client, consumer_group, TOPIC, {0: 0})
    assert (refused.error_code, refused.error_message) == (
        ErrorCode.group_id_not_found,
        f"Group {consumer_group} is not a share group.",
    )

    busy = f"sg-{uuid.uuid4().hex[:8]}"
    joined = share_heartbeat(client, busy, str(uuid.uuid4()), 0, (TOPIC,))
    assert joined.error_code == ErrorCode.none
    for answer in (alter_offsets(client, busy, TOPIC, {0: 0}), delete_offsets(client, busy, TOPIC)):
        assert answer.error_code == ErrorCode.non_empty_group
        assert answer.responses == ()


def test_unknown_topics_and_partitions(client: WireClient, topic_id: uuid.UUID) -> None:
    group, member = f"sg-{uuid.uuid4().hex[:8]}", str(uuid.uuid4())
    assert share_heartbeat(client, group, member, 0, (TOPIC,)).error_code == ErrorCode.none
    assert share_heartbeat(client, group, member, -1).error_code == ErrorCode.none

    (topic,) = describe_offsets(client, group, "no-such-topic", (0,)).topics
    assert topic.topic_id is None  # the zero UUID, as kio reads it
    assert [(p.start_offset, p.error_code) for p in topic.partitions] == [(-1, ErrorCode.none)]
    altered = alter_offsets(client, group, TOPIC, {0: 3, 9: 0})
    (topic,) = altered.responses
    assert topic.topic_id == topic_id
    assert [(p.partition_index, p.error_code) for p in topic.partitions] == [
        (0, ErrorCode.none),
        (9, ErrorCode.unknown_topic_or_partition),
    ]
    (missing,) = alter_offsets(client, group, "no-such-topic", {0: 0}).responses
    assert [p.error_code for p in missing.partitions] == [ErrorCode.unknown_topic_or_partition]

    deleted = delete_offsets(client, group, TOPIC, "no-such-topic")
    assert [(t.topic_name, t.error_code) for t in deleted.responses] == [
        (TOPIC, ErrorCode.none),
        ("no-such-topic", ErrorCode.unknown_topic_or_partition),
    ]
    # Its state is gone: deleting again finds none.
    (again,) = delete_offsets(client, group, TOPIC).responses
    assert again.error_code == ErrorCode.unknown_topic_or_partition
    assert describe_offsets(client, group, TOPIC, None).topics == ()


def test_altering_an_unknown_group_creates_an_empty_share_group(
    broker: BrokerProcess, client: WireClient, topic_id: uuid.UUID
) -> None:
    """As Kafka 4.2's GroupMetadataManager.alterShareGroupOffsets (getOrMaybeCreateShareGroup):
    an empty share group is created, persisted by its share-partitions' record (listed,
    reloaded after a restart); naming only unknown topics creates none."""
    group = f"sg-new-{uuid.uuid4().hex[:8]}"
    nothing = alter_offsets(client, group, "no-such-topic", {0: 0})
    assert nothing.error_code == ErrorCode.none
    (missing,) = nothing.responses
    assert [p.error_code for p in missing.partitions] == [ErrorCode.unknown_topic_or_partition]
    assert share_describe(client, group).error_code == ErrorCode.group_id_not_found

    altered = alter_offsets(client, group, TOPIC, {0: 5})
    assert altered.error_code == ErrorCode.none
    (topic,) = altered.responses
    assert (topic.topic_id, [p.error_code for p in topic.partitions]) == (
        topic_id,
        [ErrorCode.none],
    )

    def created(c: WireClient) -> None:
        described = share_describe(c, group)
        assert (described.error_code, described.group_state, described.members) == (
            ErrorCode.none,
            "Empty",
            (),
        )
        assert (group, "share", "Empty") in {
            (g.group_id, g.group_type, g.group_state) for g in list_groups(c, ("share",)).groups
        }
        (offsets,) = describe_offsets(c, group, TOPIC, None).topics
        assert [(p.partition_index, p.start_offset) for p in offsets.partitions] == [(0, 5)]

    created(client)
    broker.restart()
    restarted = WireClient(broker.port)
    try:
        loading = ErrorCode.coordinator_load_in_progress
        wait_until(lambda: share_describe(restarted, group).error_code != loading)
        created(restarted)
    finally:
        restarted.close()


@pytest.fixture(scope="module")
def share_disabled(process_pool: ProcessPool) -> BrokerProcess:
    return process_pool.broker(SHARE_GROUPS_OFF)


def test_without_group_share_enable_they_answer_unsupported_version(
    share_disabled: BrokerProcess,
) -> None:
    client = WireClient(share_disabled.port)
    try:
        answers = (
            describe_offsets(client, "g", TOPIC, None),
            alter_offsets(client, "g", TOPIC, {0: 0}),
            delete_offsets(client, "g", TOPIC),
        )
        assert [a.error_code for a in answers] == [ErrorCode.unsupported_version] * 3
    finally:
        client.close()
