"""Produce v13 and Fetch v13+ (topics by id, KIP-516) and consumers' incremental fetch
sessions (KIP-227), over raw sockets against a real broker."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from compat_tests.broker import BrokerProcess
from compat_tests.process_pool import ProcessPool
from gregor.apis.context import build, nested
from gregor.wire.schema import request_type
from gregor.wire.versions import FETCH, METADATA, PRODUCE
from tests.kafka_wire import WireClient, create_topic
from tests.test_api_behaviour import TIMEOUT, produce, records


@pytest.fixture(scope="module")
def broker(process_pool: ProcessPool) -> BrokerProcess:
    return process_pool.broker()


def topic_id(client: WireClient, name: str) -> uuid.UUID:
    cls = request_type(METADATA, 12)
    request = cls(
        topics=(nested(cls, "MetadataRequestTopic")(topic_id=None, name=name),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    return client.call(METADATA, 12, request).topics[0].topic_id


def fetch(
    client: WireClient,
    topics: dict[Any, dict[int, int]],
    *,
    version: int = 17,
    session: tuple[int, int] = (0, -1),
    forget: dict[Any, list[int]] | None = None,
) -> Any:
    """A consumer's fetch of {topic id (or name before v13): {partition: offset}}."""
    cls = request_type(FETCH, version)
    t, p = nested(cls, "FetchTopic"), nested(cls, "FetchPartition")
    key = "topic_id" if version >= 13 else "topic"
    request = build(
        cls,
        replica_id=-1,
        max_wait=datetime.timedelta(0),
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=session[0],
        session_epoch=session[1],
        topics=tuple(
            build(
                t,
                **{key: name},
                partitions=tuple(
                    p(partition=i, fetch_offset=offset, partition_max_bytes=1 << 20)
                    for i, offset in parts.items()
                ),
            )
            for name, parts in topics.items()
        ),
        forgotten_topics_data=tuple(
            build(nested(cls, "ForgottenTopic"), **{key: name}, partitions=tuple(indexes))
            for name, indexes in (forget or {}).items()
        ),
        rack_id="",
    )
    return client.call(FETCH, version, request)


def named(response: Any) -> dict[tuple[Any, int], Any]:
    return {
        (getattr(t, "topic_id", None) or t.topic, p.partition_index): p
        for t in response.responses
        for p in t.partitions
    }


def test_fetch_by_topic_id(client: WireClient) -> None:
    create_topic(client, "by-id")
    produce(client, "by-id", records(3))
    tid = topic_id(client, "by-id")
    for version in (13, 15, 16, 17, 18):
        response = fetch(client, {tid: {0: 0}}, version=version)
        [(key, part)] = named(response).items()
        assert key == (tid, 0)
        assert (part.error_code, part.high_watermark) == (ErrorCode.none, 3)
        assert part.records
    unknown = uuid.uuid4()
    [(key, part)] = named(fetch(client, {unknown: {0: 0}})).items()
    assert (key, part.error_code) == ((unknown, 0), ErrorCode.unknown_topic_id)


def produce_by_id(client: WireClient, tid: uuid.UUID, batch: bytes) -> Any:
    cls = request_type(PRODUCE, 13)
    t, p = nested(cls, "TopicProduceData"), nested(cls, "PartitionProduceData")
    request = cls(
        transactional_id=None,
        acks=-1,
        timeout=TIMEOUT,
        topic_data=(t(topic_id=tid, partition_data=(p(index=0, records=batch),)),),
    )
    return client.call(PRODUCE, 13, request).responses[0]


def test_produce_by_topic_id(client: WireClient) -> None:
    create_topic(client, "produce-by-id")
    tid = topic_id(client, "produce-by-id")
    answer = produce_by_id(client, tid, records(4))
    assert answer.topic_id == tid
    assert answer.partition_responses[0].error_code == ErrorCode.none
    assert produce_by_id(client, tid, records(2)).partition_responses[0].base_offset == 4
    unknown = uuid.uuid4()
    refused = produce_by_id(client, unknown, records(1))
    assert refused.topic_id == unknown
    assert refused.partition_responses[0].error_code == ErrorCode.unknown_topic_id
    [(_, part)] = named(fetch(client, {tid: {0: 0}})).items()
    assert part.high_watermark == 6


def test_consumer_incremental_session(client: WireClient) -> None:
    create_topic(client, "incremental", partitions=3)
    tid = topic_id(client, "incremental")
    produce(client, "incremental", records(2), partition=0)
    first = fetch(client, {tid: {0: 0, 1: 0, 2: 0}}, session=(0, 0))
    session = first.session_id
    assert first.error_code == ErrorCode.none and session != 0
    assert sorted(named(first)) == [(tid, 0), (tid, 1), (tid, 2)]

    # The consumer moves partition 0 past its records: nothing changed, no partition named.
    moved = fetch(client, {tid: {0: 2}}, session=(session, 1))
    assert (moved.error_code, moved.session_id, named(moved)) == (ErrorCode.none, session, {})
    assert named(fetch(client, {}, session=(session, 2))) == {}
    # New data in partition 1 only: only it is named.
    produce(client, "incremental", records(4), partition=1)
    busy = fetch(client, {}, session=(session, 3))
    [(key, part)] = named(busy).items()
    assert key == (tid, 1) and part.high_watermark == 4 and part.records
    # Forgotten, partition 2 is not named even with new data.
    assert named(fetch(client, {tid: {1: 4}}, session=(session, 4), forget={tid: [2]})) == {}
    produce(client, "incremental", records(1), partition=2)
    assert named(fetch(client, {}, session=(session, 5))) == {}

    # Kafka's session errors.
    stale = fetch(client, {}, session=(session, 5))
    assert stale.error_code == ErrorCode.invalid_fetch_session_epoch
    by_name = fetch(client, {}, version=12, session=(session, 6))
    assert by_name.error_code == ErrorCode.fetch_session_topic_id_error
    assert fetch(client, {}, session=(session + 1, 1)).error_code == (
        ErrorCode.fetch_session_id_not_found
    )
    # The final epoch closes the session, with a sessionless fetch.
    closing = fetch(client, {tid: {0: 2}}, session=(session, -1))
    assert (closing.error_code, closing.session_id) == (ErrorCode.none, 0)
    assert fetch(client, {}, session=(session, 6)).error_code == (
        ErrorCode.fetch_session_id_not_found
    )


def test_session_by_name_before_v13(client: WireClient) -> None:
    create_topic(client, "named-session")
    produce(client, "named-session", records(2))
    first = fetch(client, {"named-session": {0: 0}}, version=12, session=(0, 0))
    assert first.session_id != 0 and named(first)[("named-session", 0)].records
    produce(client, "named-session", records(1))
    again = fetch(client, {}, version=12, session=(first.session_id, 1))
    assert named(again)[("named-session", 0)].high_watermark == 3
    mixed = fetch(client, {}, version=13, session=(first.session_id, 2))
    assert mixed.error_code == ErrorCode.fetch_session_topic_id_error


def test_a_full_cache_evicts_consumers_for_followers() -> None:
    from gregor.replica.fetch_session import FetchSessions

    sessions = FetchSessions(max_sessions=2)
    small = sessions.new(-1, True, 1)
    big = sessions.new(-1, True, 5)
    assert small is not None and big is not None
    small.partitions = {("t", 0): None}  # type: ignore[dict-item]
    big.partitions = {("t", i): None for i in range(5)}  # type: ignore[misc]
    # A consumer session no larger than the smallest one gets none: full fetches.
    assert sessions.new(-1, True, 1) is None
    # A follower's session takes the smallest consumer session's place.
    follower = sessions.new(3, False, 1)
    assert follower is not None and sessions.get(small.id) is None
    assert sessions.get(big.id) is big
    # With only a follower and a larger consumer left, a larger consumer evicts the other.
    assert sessions.new(-1, True, 9) is not None and sessions.get(big.id) is None
