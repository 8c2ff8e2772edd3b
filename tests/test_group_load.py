"""Loading a large ``__consumer_offsets`` log after a restart (issue #10, item 12).

The partition is replayed a chunk at a time off the request path: other clients are
answered meanwhile, and the groups of the loading partition get
COORDINATOR_LOAD_IN_PROGRESS (which clients retry) until it is done.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from compat_tests.broker import BrokerProcess
from compat_tests.process_pool import ProcessPool
from gregor.apis.context import build, nested
from gregor.wire import versions as v
from gregor.wire.schema import request_type
from tests.kafka_wire import WireClient, create_topic, request_frame

TOPIC = "load-topic"
PARTITIONS = 100
COMMITS = 1000  # x 100 records: a log of some 100,000 records to replay
PIPELINE = 200
GROUP = "loaded-group"


@pytest.fixture(scope="module")
def broker(process_pool: ProcessPool) -> BrokerProcess:
    # One offsets partition: every group is loaded from (and waits for) the same log.
    return process_pool.broker(
        {"offsets.topic.num.partitions": "1", "group.initial.rebalance.delay.ms": "0"}
    )


def commit_body(round_: int) -> Any:
    cls = request_type(v.OFFSET_COMMIT, 8)
    partition = nested(cls, "OffsetCommitRequestPartition")
    topic = nested(cls, "OffsetCommitRequestTopic")
    return build(
        cls,
        group_id=GROUP,
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        topics=(
            topic(
                name=TOPIC,
                partitions=tuple(
                    build(
                        partition,
                        partition_index=p,
                        committed_offset=round_ * 1000 + p,
                        committed_leader_epoch=-1,
                        committed_metadata="",
                    )
                    for p in range(PARTITIONS)
                ),
            ),
        ),
    )


def offset_fetch(client: WireClient) -> Any:
    cls = request_type(v.OFFSET_FETCH, 7)
    topic = nested(cls, "OffsetFetchRequestTopic")
    body = build(
        cls,
        group_id=GROUP,
        topics=(topic(name=TOPIC, partition_indexes=(0, PARTITIONS - 1)),),
        require_stable=False,
    )
    return client.call(v.OFFSET_FETCH, 7, body)


def describe_error(client: WireClient) -> ErrorCode:
    body = build(request_type(v.DESCRIBE_GROUPS, 0), groups=(GROUP,))
    return client.call(v.DESCRIBE_GROUPS, 0, body).groups[0].error_code


def metadata_round_trip(client: WireClient) -> float:
    started = time.monotonic()
    assert client.call(v.METADATA, 1, request_type(v.METADATA, 1)(topics=None)).brokers
    return time.monotonic() - started


def fill_offsets_log(broker: BrokerProcess) -> None:
    client = WireClient(broker.port, timeout=60)
    assert create_topic(client, TOPIC, PARTITIONS).error_code == ErrorCode.none
    found = client.call(
        v.FIND_COORDINATOR, 0, build(request_type(v.FIND_COORDINATOR, 0), key=GROUP)
    )
    assert found.error_code == ErrorCode.none
    for start in range(0, COMMITS, PIPELINE):
        rounds = range(start, min(start + PIPELINE, COMMITS))
        client.send(b"".join(request_frame(v.OFFSET_COMMIT, 8, r, commit_body(r)) for r in rounds))
        for r in rounds:
            response = client.read_response(v.OFFSET_COMMIT, 8, r)
            assert response.topics[0].partitions[0].error_code == ErrorCode.none
    client.close()


def test_restart_loads_offsets_off_the_request_path(broker: BrokerProcess) -> None:
    fill_offsets_log(broker)
    broker.restart()
    client = WireClient(broker.port, timeout=30)
    loading_answers = 0
    describe_errors = set()
    latencies = []
    deadline = time.monotonic() + 120
    while True:
        latencies.append(metadata_round_trip(client))
        describe_errors.add(describe_error(client))
        fetched = offset_fetch(client)
        if fetched.error_code == ErrorCode.none:
            break
        assert fetched.error_code == ErrorCode.coordinator_load_in_progress
        loading_answers += 1
        assert time.monotonic() < deadline, "the offsets partition never finished loading"
        time.sleep(0.02)
    # The load took a while, and Metadata was answered promptly throughout it (a generous
    # bound for a shared machine: a chunk of replay takes a few milliseconds).
    assert loading_answers > 0
    assert ErrorCode.coordinator_load_in_progress in describe_errors
    assert describe_error(client) == ErrorCode.none
    assert max(latencies) < 1.0, max(latencies)
    last = COMMITS - 1
    offsets = {p.partition_index: p.committed_offset for p in fetched.topics[0].partitions}
    assert offsets == {0: last * 1000, PARTITIONS - 1: last * 1000 + PARTITIONS - 1}
    client.close()
    assert "Traceback" not in broker.log_path.read_text(errors="replace")
