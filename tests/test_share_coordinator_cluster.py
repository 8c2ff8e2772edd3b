"""The share coordinator on a 3-broker cluster (ZooKeeper, RF=3): FindCoordinator key type
2 names the leader of the share-partition's ``__share_group_state`` partition, other
brokers answer NOT_COORDINATOR, and a write committed there survives a kill -9 of that
broker: the new leader of the partition loads it and reads it back."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from compat_tests.process_pool import ProcessPool
from gregor.apis.context import build
from gregor.coordinator.records import partition_for
from gregor.coordinator.share_coordinator import coordinator_key
from gregor.coordinator.share_state_records import SHARE_GROUP_STATE_TOPIC
from gregor.server.harness.cluster import Cluster
from gregor.wire import versions as v
from gregor.wire.schema import request_type
from tests.kafka_wire import WireClient, create_topic
from tests.test_share_coordinator_broker import ACKED, AVAILABLE, as_tuples, read, write

STATE_PARTITIONS = 3


@pytest.fixture(scope="module")
def cluster(process_pool: ProcessPool) -> Cluster:
    return process_pool.cluster(
        {
            "group.share.enable": "true",
            "share.coordinator.state.topic.num.partitions": str(STATE_PARTITIONS),
        }
    )


def until_coordinator(attempt: Any, timeout: float = 30.0) -> Any:
    """``attempt()`` again while its result says the coordinator is moving."""
    deadline = time.monotonic() + timeout
    while True:
        result = attempt()
        moving = result.error_code in (
            ErrorCode.not_coordinator,
            ErrorCode.coordinator_not_available,
            ErrorCode.coordinator_load_in_progress,
        )
        if not moving or time.monotonic() > deadline:
            return result
        time.sleep(0.1)


def test_a_write_survives_a_kill_of_the_coordinators_broker(cluster: Cluster) -> None:
    topic = f"share-{uuid.uuid4().hex[:8]}"
    group = f"group-{topic}"
    first = WireClient(cluster.brokers[1].port)
    try:
        created = create_topic(first, topic, 1, replication_factor=3)
        assert created.error_code == ErrorCode.none
        topic_id = created.topic_id
        key = coordinator_key(group, topic_id, 0)
        find = build(request_type(v.FIND_COORDINATOR, 6), key_type=2, coordinator_keys=(key,))
        found = until_coordinator(lambda: first.call(v.FIND_COORDINATOR, 6, find).coordinators[0])
        assert found.error_code == ErrorCode.none
    finally:
        first.close()
    cluster.wait_for_topic(topic, 1, isr=3)
    cluster.wait_for_topic(SHARE_GROUP_STATE_TOPIC, STATE_PARTITIONS, isr=3)
    index = partition_for(key, STATE_PARTITIONS)
    coordinator = cluster.wait_for_leader(SHARE_GROUP_STATE_TOPIC, index).leader
    expected = [(0, 1, ACKED, 1), (2, 4, AVAILABLE, 1)]

    other = next(i for i in cluster.brokers if i != coordinator)
    c = WireClient(cluster.brokers[other].port)
    try:
        refused = write(c, group, topic_id, 0, leader_epoch=1, start_offset=0)
        assert refused.error_code == ErrorCode.not_coordinator
    finally:
        c.close()

    c = WireClient(cluster.brokers[coordinator].port)
    try:
        for start, spec in ((0, (0, 4, AVAILABLE, 1)), (-1, (0, 1, ACKED, 1))):
            result = until_coordinator(
                lambda start=start, spec=spec: write(
                    c, group, topic_id, 0, spec, leader_epoch=1, start_offset=start
                )
            )
            assert result.error_code == ErrorCode.none
        assert as_tuples(read(c, group, topic_id, 0, 1)) == expected
    finally:
        c.close()

    cluster.kill(coordinator)
    successor = cluster.wait_for_leader(SHARE_GROUP_STATE_TOPIC, index, not_in=[coordinator]).leader
    c = WireClient(cluster.brokers[successor].port)
    try:
        state = until_coordinator(lambda: read(c, group, topic_id, 0, 1))
        assert (state.error_code, state.start_offset, as_tuples(state)) == (
            ErrorCode.none,
            0,
            expected,
        )
    finally:
        c.close()
