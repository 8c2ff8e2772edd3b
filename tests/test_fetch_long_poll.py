"""Long-poll fetches of a real broker process, over raw sockets: when a parked fetch is
answered (enough bytes, a segment roll, a deleted partition) and when it is not parked."""

from __future__ import annotations

import datetime
import time
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from compat_tests.broker import BrokerProcess
from compat_tests.process_pool import ProcessPool
from gregor.apis.context import nested
from gregor.wire.records import split_batches
from gregor.wire.schema import request_type
from gregor.wire.versions import DELETE_TOPICS, FETCH
from tests.kafka_wire import WireClient, create_topic, request_frame
from tests.test_api_behaviour import TIMEOUT, produce, records

# Parked fetches here wait up to a minute; each test's bound on an answer is far below
# that and far above any scheduling delay, so only a wake-up by the event counts.
LONG_WAIT_MS = 60_000
PROMPT_S = 20


@pytest.fixture(scope="module")
def broker(process_pool: ProcessPool) -> BrokerProcess:
    return process_pool.broker()


def fetch_request(
    version: int, partitions: dict[str, list[int]], min_bytes: int, max_wait_ms: int
) -> Any:
    """Fetch every listed partition from offset 0."""
    cls = request_type(FETCH, version)
    t, p = nested(cls, "FetchTopic"), nested(cls, "FetchPartition")
    fields: dict[str, Any] = {
        "max_wait": datetime.timedelta(milliseconds=max_wait_ms),
        "min_bytes": min_bytes,
        "max_bytes": 50 << 20,
        "isolation_level": 0,
        "topics": tuple(
            t(
                topic=name,
                partitions=tuple(
                    p(partition=i, fetch_offset=0, partition_max_bytes=1 << 20) for i in indexes
                ),
            )
            for name, indexes in partitions.items()
        ),
    }
    if version >= 7:
        fields.update(session_id=0, session_epoch=-1, forgotten_topics_data=())
    if version >= 11:
        fields["rack_id"] = ""
    return cls(**fields)


def park(broker: BrokerProcess, partitions: dict[str, list[int]], min_bytes: int) -> WireClient:
    client = WireClient(broker.port, timeout=LONG_WAIT_MS / 1000 + 10)
    client.send(request_frame(FETCH, 12, 1, fetch_request(12, partitions, min_bytes, LONG_WAIT_MS)))
    return client


def answer(client: WireClient) -> Any:
    started = time.monotonic()
    response = client.read_response(FETCH, 12, 1)
    assert time.monotonic() - started < PROMPT_S, "answered by the deadline, not the event"
    client.close()
    return response


@pytest.mark.parametrize("version", [4, 7, 12])
def test_a_fetch_of_no_partitions_is_answered_at_once(broker: BrokerProcess, version: int) -> None:
    """The Java consumer sends one when it closes; Kafka answers it without waiting."""
    client = WireClient(broker.port)
    started = time.monotonic()
    response = client.call(FETCH, version, fetch_request(version, {}, 1, LONG_WAIT_MS))
    assert time.monotonic() - started < PROMPT_S
    assert response.responses == ()
    if version >= 7:
        assert response.error_code == ErrorCode.none
    client.close()


def test_a_parked_fetch_waits_for_min_bytes_across_partitions(broker: BrokerProcess) -> None:
    producer = WireClient(broker.port)
    create_topic(producer, "many", partitions=20)
    small, large = records(1), records(5, size=200)
    parked = park(broker, {"many": list(range(20))}, min_bytes=len(small) + len(large))
    produce(producer, "many", small, partition=3)  # not enough on its own
    produce(producer, "many", large, partition=17)
    producer.close()
    [topic] = answer(parked).responses
    found = {p.partition_index: p.records for p in topic.partitions if p.records}
    assert sorted(found) == [3, 17]  # one answer, after both appends
    assert [split_batches(found[i])[0].record_count for i in (3, 17)] == [1, 5]


def test_a_parked_fetch_is_answered_when_its_segment_rolls(broker: BrokerProcess) -> None:
    producer = WireClient(broker.port)
    create_topic(producer, "rolling", configs={"segment.bytes": "2000"})
    first = records(10, size=100)
    produce(producer, "rolling", first)
    parked = park(broker, {"rolling": [0]}, min_bytes=10 << 20)
    produce(producer, "rolling", records(10, size=100))  # rolls: the first segment is full
    producer.close()
    [topic] = answer(parked).responses
    assert split_batches(topic.partitions[0].records)[0].record_count == 10


def test_a_parked_fetch_is_answered_when_its_topic_is_deleted(broker: BrokerProcess) -> None:
    admin = WireClient(broker.port)
    create_topic(admin, "deleted")
    parked = park(broker, {"deleted": [0]}, min_bytes=1)
    cls = request_type(DELETE_TOPICS, 6)
    state = nested(cls, "DeleteTopicState")
    request = cls(timeout=TIMEOUT, topics=(state(name="deleted", topic_id=None),))
    assert admin.call(DELETE_TOPICS, 6, request).responses[0].error_code == ErrorCode.none
    admin.close()
    [topic] = answer(parked).responses
    assert topic.partitions[0].error_code == ErrorCode.unknown_topic_or_partition


def test_a_fetch_behind_the_active_segment_is_not_parked(broker: BrokerProcess) -> None:
    """Kafka answers at once a fetch whose offset lies in an older segment than the high
    watermark, whatever its min_bytes: more data is there to be read."""
    producer = WireClient(broker.port)
    create_topic(producer, "behind", configs={"segment.bytes": "2000"})
    for _ in range(2):  # the second batch does not fit in the first segment
        produce(producer, "behind", records(10, size=100))
    producer.close()
    [topic] = answer(park(broker, {"behind": [0]}, min_bytes=10 << 20)).responses
    assert split_batches(topic.partitions[0].records)[0].record_count == 10
