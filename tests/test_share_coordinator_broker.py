"""The share coordinator's APIs (Initialize/Read/Write/Delete/ReadShareGroupStateSummary
v0) over a raw socket against a real broker process: FindCoordinator key type 2 creating
``__share_group_state``, state written, merged and read back, the fencing of leader and
state epochs, deletion, the summary, the gate ``group.share.enable``, and the state
surviving a kill -9 and restart of the broker."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from compat_tests.broker import BrokerProcess
from compat_tests.process_pool import ProcessPool
from gregor.apis.context import build, nested
from gregor.coordinator.share_coordinator import coordinator_key
from gregor.wire import versions as v
from gregor.wire.schema import request_type
from tests.kafka_wire import WireClient, create_topic
from tests.share_groups_off import SHARE_GROUPS_OFF

TOPIC = "share-state-data"
OVERRIDES = {
    "group.share.enable": "true",
    "share.coordinator.state.topic.num.partitions": "3",
    # A snapshot every 2 updates: the restart replays snapshots and updates after them.
    "share.coordinator.snapshot.update.records.per.snapshot": "2",
}
AVAILABLE, ACKED, ARCHIVED = 0, 2, 4
RETRIED = (ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available)


@pytest.fixture(scope="module")
def broker(process_pool: ProcessPool) -> BrokerProcess:
    return process_pool.broker(OVERRIDES)


@pytest.fixture(scope="module")
def topic_id(broker: BrokerProcess) -> uuid.UUID:
    c = WireClient(broker.port)
    try:
        created = create_topic(c, TOPIC, 2)
        assert created.error_code == ErrorCode.none
        return created.topic_id
    finally:
        c.close()


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[WireClient]:
    c = WireClient(broker.port)
    yield c
    c.close()


def _partition(api: int, body: Any) -> Any:
    (topic,) = body.results
    (partition,) = topic.partitions
    return partition


def call(client: WireClient, api: int, group: str, topic_id: uuid.UUID, **fields: Any) -> Any:
    """One partition's request of ``api`` v0; its partition result, retried while the
    coordinator loads."""
    cls = request_type(api, 0)
    data_name = {
        v.INITIALIZE_SHARE_GROUP_STATE: "InitializeStateData",
        v.READ_SHARE_GROUP_STATE: "ReadStateData",
        v.WRITE_SHARE_GROUP_STATE: "WriteStateData",
        v.DELETE_SHARE_GROUP_STATE: "DeleteStateData",
        v.READ_SHARE_GROUP_STATE_SUMMARY: "ReadStateSummaryData",
    }[api]
    partition = build(nested(cls, "PartitionData"), **fields)
    request = cls(
        group_id=group,
        topics=(nested(cls, data_name)(topic_id=topic_id, partitions=(partition,)),),
    )
    deadline = time.monotonic() + 15
    while True:
        result = _partition(api, client.call(api, 0, request))
        if result.error_code not in RETRIED or time.monotonic() > deadline:
            return result
        time.sleep(0.05)


def write(
    client: WireClient,
    group: str,
    topic_id: uuid.UUID,
    partition: int,
    *specs: tuple[int, int, int, int],
    leader_epoch: int,
    start_offset: int,
) -> Any:
    """WriteShareGroupState of one partition at state epoch 0, its batches given as (first
    offset, last offset, delivery state, delivery count)."""
    batch_cls = nested(request_type(v.WRITE_SHARE_GROUP_STATE, 0), "StateBatch")
    return call(
        client,
        v.WRITE_SHARE_GROUP_STATE,
        group,
        topic_id,
        partition=partition,
        state_epoch=0,
        leader_epoch=leader_epoch,
        start_offset=start_offset,
        state_batches=tuple(
            batch_cls(first_offset=f, last_offset=last, delivery_state=s, delivery_count=n)
            for f, last, s, n in specs
        ),
    )


def read(client: WireClient, group: str, topic_id: uuid.UUID, partition: int, epoch: int) -> Any:
    return call(
        client, v.READ_SHARE_GROUP_STATE, group, topic_id, partition=partition, leader_epoch=epoch
    )


def as_tuples(result: Any) -> list[tuple[int, int, int, int]]:
    return [
        (b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
        for b in result.state_batches
    ]


def test_find_coordinator_share_key_creates_the_state_topic(
    client: WireClient, broker: BrokerProcess, topic_id: uuid.UUID
) -> None:
    key = coordinator_key("find-group", topic_id, 0)
    response = client.call(
        v.FIND_COORDINATOR,
        6,
        build(request_type(v.FIND_COORDINATOR, 6), key_type=2, coordinator_keys=(key,)),
    )
    (found,) = response.coordinators
    assert (found.key, found.error_code, found.node_id) == (key, ErrorCode.none, broker.broker_id)
    metadata = client.call(
        v.METADATA,
        12,
        build(
            request_type(v.METADATA, 12),
            topics=(
                nested(request_type(v.METADATA, 12), "MetadataRequestTopic")(
                    name="__share_group_state", topic_id=uuid.UUID(int=0)
                ),
            ),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        ),
    )
    (state_topic,) = metadata.topics
    assert state_topic.error_code == ErrorCode.none and state_topic.is_internal
    assert len(state_topic.partitions) == 3


def test_write_merges_batches_and_read_returns_them(
    client: WireClient, topic_id: uuid.UUID
) -> None:
    group = "g-write"
    assert read(client, group, topic_id, 0, 1).start_offset == -1  # no state yet
    result = write(client, group, topic_id, 0, (0, 9, AVAILABLE, 1), leader_epoch=1, start_offset=0)
    assert result.error_code == ErrorCode.none
    for offset in (0, 1, 2, 5):  # updates, and a snapshot after two of them
        result = write(
            client, group, topic_id, 0, (offset, offset, ACKED, 1), leader_epoch=1, start_offset=-1
        )
        assert result.error_code == ErrorCode.none
    result = write(client, group, topic_id, 0, leader_epoch=1, start_offset=2)
    assert result.error_code == ErrorCode.none
    state = read(client, group, topic_id, 0, 1)
    assert (state.error_code, state.state_epoch, state.start_offset) == (ErrorCode.none, 0, 2)
    assert as_tuples(state) == [(2, 2, ACKED, 1), (3, 4, AVAILABLE, 1), (5, 5, ACKED, 1)] + [
        (6, 9, AVAILABLE, 1)
    ]


def test_fencing_of_older_leader_and_state_epochs(client: WireClient, topic_id: uuid.UUID) -> None:
    group = "g-fence"
    ok = write(client, group, topic_id, 1, leader_epoch=3, start_offset=0)
    assert ok.error_code == ErrorCode.none
    stale = write(client, group, topic_id, 1, leader_epoch=2, start_offset=0)
    assert stale.error_code == ErrorCode.fenced_leader_epoch
    assert read(client, group, topic_id, 1, 2).error_code == ErrorCode.fenced_leader_epoch
    # A newer leader's read records its epoch: the previous leader is fenced from then on.
    assert read(client, group, topic_id, 1, 4).error_code == ErrorCode.none
    stale = write(client, group, topic_id, 1, leader_epoch=3, start_offset=0)
    assert stale.error_code == ErrorCode.fenced_leader_epoch
    init = call(
        client,
        v.INITIALIZE_SHARE_GROUP_STATE,
        group,
        topic_id,
        partition=1,
        state_epoch=1,
        start_offset=50,
    )
    assert init.error_code == ErrorCode.none
    stale = write(client, group, topic_id, 1, leader_epoch=4, start_offset=60)
    assert stale.error_code == ErrorCode.fenced_state_epoch
    state = read(client, group, topic_id, 1, 4)
    assert (state.state_epoch, state.start_offset, as_tuples(state)) == (1, 50, [])
    summary = call(
        client, v.READ_SHARE_GROUP_STATE_SUMMARY, group, topic_id, partition=1, leader_epoch=-1
    )
    assert (summary.error_code, summary.state_epoch, summary.leader_epoch) == (
        ErrorCode.none,
        1,
        4,
    )
    assert summary.start_offset == 50


def test_unknown_partition_and_bad_requests(client: WireClient, topic_id: uuid.UUID) -> None:
    unknown = write(client, "g-bad", uuid.uuid4(), 0, leader_epoch=0, start_offset=0)
    assert unknown.error_code == ErrorCode.unknown_topic_or_partition
    beyond = write(client, "g-bad", topic_id, 7, leader_epoch=0, start_offset=0)
    assert beyond.error_code == ErrorCode.unknown_topic_or_partition
    empty_group = write(client, "", topic_id, 0, leader_epoch=0, start_offset=0)
    assert empty_group.error_code == ErrorCode.invalid_group_id


def test_delete_forgets_the_state(client: WireClient, topic_id: uuid.UUID) -> None:
    group = "g-delete"
    result = write(client, group, topic_id, 0, (10, 12, ACKED, 1), leader_epoch=1, start_offset=10)
    assert result.error_code == ErrorCode.none
    deleted = call(client, v.DELETE_SHARE_GROUP_STATE, group, topic_id, partition=0)
    assert deleted.error_code == ErrorCode.none
    state = read(client, group, topic_id, 0, -1)
    assert (state.error_code, state.state_epoch, state.start_offset, as_tuples(state)) == (
        ErrorCode.none,
        0,
        -1,
        [],
    )
    # A write at an old leader epoch is accepted again: nothing is left to fence it.
    again = write(client, group, topic_id, 0, leader_epoch=0, start_offset=0)
    assert again.error_code == ErrorCode.none


def test_disabled_share_groups_answer_unsupported_version(
    process_pool: ProcessPool, topic_id: uuid.UUID
) -> None:
    disabled = process_pool.broker(SHARE_GROUPS_OFF)
    c = WireClient(disabled.port)
    try:
        result = write(c, "g", topic_id, 0, leader_epoch=0, start_offset=0)
        assert result.error_code == ErrorCode.unsupported_version
        summary = call(
            c, v.READ_SHARE_GROUP_STATE_SUMMARY, "g", topic_id, partition=0, leader_epoch=-1
        )
        assert summary.error_code == ErrorCode.unsupported_version
    finally:
        c.close()


def test_state_survives_a_kill_and_restart(
    client: WireClient, broker: BrokerProcess, topic_id: uuid.UUID
) -> None:
    group = "g-restart"
    expected = [(0, 0, ACKED, 1), (1, 1, ARCHIVED, 2), (2, 3, AVAILABLE, 1), (4, 4, ACKED, 1)]
    first = write(client, group, topic_id, 1, (0, 4, AVAILABLE, 1), leader_epoch=6, start_offset=0)
    assert first.error_code == ErrorCode.none
    for spec in ((0, 0, ACKED, 1), (1, 1, ARCHIVED, 2), (4, 4, ACKED, 1)):
        result = write(client, group, topic_id, 1, spec, leader_epoch=6, start_offset=-1)
        assert result.error_code == ErrorCode.none
    assert as_tuples(read(client, group, topic_id, 1, 6)) == expected
    client.close()
    broker.kill()
    broker.start()
    c = WireClient(broker.port)
    try:
        state = read(c, group, topic_id, 1, 6)
        assert (state.error_code, state.start_offset, as_tuples(state)) == (
            ErrorCode.none,
            0,
            expected,
        )
        stale = write(c, group, topic_id, 1, leader_epoch=5, start_offset=0)
        assert stale.error_code == ErrorCode.fenced_leader_epoch
    finally:
        c.close()
