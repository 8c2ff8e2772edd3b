"""DescribeClientQuotas/AlterClientQuotas and quota enforcement, in raw protocol frames
against a real broker process: Kafka's errors, validate_only, filters, persistence, the
throttle time in Produce, Fetch and other responses, and the muted channel (KIP-219)."""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from compat_tests.broker import BrokerProcess
from gregor.apis.context import build, nested
from gregor.wire.records import build_batch
from gregor.wire.schema import request_type
from gregor.wire.versions import (
    ALTER_CLIENT_QUOTAS,
    API_VERSIONS,
    DESCRIBE_CLIENT_QUOTAS,
    FETCH,
    METADATA,
    PRODUCE,
)
from tests.kafka_wire import WireClient, create_topic, request_frame


# A broker of its own (not process_pool's): the tests set default client quotas.
@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("quotas")) as proc:
        yield proc


def call_as(client: WireClient, client_id: str, api_key: int, version: int, body: Any) -> Any:
    client._next += 1
    client.send(request_frame(api_key, version, client._next, body, client_id=client_id))
    return client.read_response(api_key, version, client._next)


def alter(
    client: WireClient,
    entries: list[tuple[dict[str, str | None], dict[str, float | None]]],
    validate_only: bool = False,
    version: int = 1,
) -> list[tuple[ErrorCode, str | None]]:
    """AlterClientQuotas; a None value removes the key. Returns each entry's result."""
    cls = request_type(ALTER_CLIENT_QUOTAS, version)
    request = cls(
        entries=tuple(
            nested(cls, "EntryData")(
                entity=tuple(
                    nested(cls, "EntityData")(entity_type=k, entity_name=v)
                    for k, v in entity.items()
                ),
                ops=tuple(
                    nested(cls, "OpData")(key=k, value=v or 0.0, remove=v is None)
                    for k, v in ops.items()
                ),
            )
            for entity, ops in entries
        ),
        validate_only=validate_only,
    )
    response = client.call(ALTER_CLIENT_QUOTAS, version, request)
    return [(e.error_code, e.error_message) for e in response.entries]


def describe(
    client: WireClient, components: list[tuple[str, int, str | None]], strict: bool = False
) -> Any:
    cls = request_type(DESCRIBE_CLIENT_QUOTAS, 1)
    request = cls(
        components=tuple(
            nested(cls, "ComponentData")(entity_type=t, match_type=m, match=name)
            for t, m, name in components
        ),
        strict=strict,
    )
    return client.call(DESCRIBE_CLIENT_QUOTAS, 1, request)


def entries(response: Any) -> dict[frozenset, dict[str, float]]:
    assert response.error_code == ErrorCode.none, response.error_message
    return {
        frozenset((e.entity_type, e.entity_name) for e in entry.entity): {
            v.key: v.value for v in entry.values
        }
        for entry in response.entries
    }


def test_alter_describe_filter_and_persist(broker: BrokerProcess, client: WireClient) -> None:
    assert (
        alter(
            client,
            [
                ({"client-id": "app"}, {"producer_byte_rate": 2048, "consumer_byte_rate": 4096}),
                ({"user": "alice", "client-id": None}, {"request_percentage": 12.5}),
                ({"user": None}, {"producer_byte_rate": 1e6}),
                ({"user": "bob@example.com"}, {"consumer_byte_rate": 7}),
            ],
        )
        == [(ErrorCode.none, None)] * 4
    )
    everything = entries(describe(client, []))
    assert everything == {
        frozenset({("client-id", "app")}): {
            "producer_byte_rate": 2048.0,
            "consumer_byte_rate": 4096.0,
        },
        frozenset({("user", "alice"), ("client-id", None)}): {"request_percentage": 12.5},
        frozenset({("user", None)}): {"producer_byte_rate": 1e6},
        frozenset({("user", "bob@example.com")}): {"consumer_byte_rate": 7.0},
    }
    # Filters: exact name, default, any specified name; strict excludes wider entities.
    assert set(entries(describe(client, [("client-id", 0, "app")]))) == {
        frozenset({("client-id", "app")})
    }
    assert set(entries(describe(client, [("user", 1, None)]))) == {frozenset({("user", None)})}
    assert len(entries(describe(client, [("user", 2, None)]))) == 3
    assert set(entries(describe(client, [("user", 2, None)], strict=True))) == {
        frozenset({("user", None)}),
        frozenset({("user", "bob@example.com")}),
    }
    # Removing a key keeps the others; removing the last one removes the entity.
    assert alter(client, [({"client-id": "app"}, {"producer_byte_rate": None})]) == [
        (ErrorCode.none, None)
    ]
    assert alter(client, [({"user": "bob@example.com"}, {"consumer_byte_rate": None})]) == [
        (ErrorCode.none, None)
    ]
    # validate_only checks and stores nothing.
    assert alter(client, [({"client-id": "new"}, {"producer_byte_rate": 1})], True) == [
        (ErrorCode.none, None)
    ]
    expected = {
        frozenset({("client-id", "app")}): {"consumer_byte_rate": 4096.0},
        frozenset({("user", "alice"), ("client-id", None)}): {"request_percentage": 12.5},
        frozenset({("user", None)}): {"producer_byte_rate": 1e6},
    }
    assert entries(describe(client, [])) == expected
    broker.restart()
    again = WireClient(broker.port)
    try:
        assert entries(describe(again, [])) == expected
        # Leave no quota behind for the other tests of this module.
        assert (
            alter(
                again,
                [
                    ({"client-id": "app"}, {"consumer_byte_rate": None}),
                    ({"user": "alice", "client-id": None}, {"request_percentage": None}),
                    ({"user": None}, {"producer_byte_rate": None}),
                ],
            )
            == [(ErrorCode.none, None)] * 3
        )
        assert entries(describe(again, [])) == {}
    finally:
        again.close()


INVALID = ErrorCode.invalid_request


@pytest.mark.parametrize(
    "entity,ops,message",
    [
        ({}, {"producer_byte_rate": 1}, "Invalid empty client quota entity"),
        ({"group": "g"}, {"producer_byte_rate": 1}, "Unhandled client quota entity type: group"),
        ({"user": ""}, {"producer_byte_rate": 1}, "Empty user not supported"),
        ({"client-id": "c"}, {"fetch_rate": 1}, "Invalid configuration key fetch_rate"),
        (
            {"client-id": "c"},
            {"producer_byte_rate": 1.5},
            "Configuration producer_byte_rate must be a Long value",
        ),
        ({"client-id": "c"}, {"consumer_byte_rate": -5}, "must be positive"),
        (
            {"ip": "127.0.0.1", "user": "u"},
            {"connection_creation_rate": 5},
            "IP entity should not be used with user/client ID entity",
        ),
        ({"ip": "x.y"}, {"connection_creation_rate": 5}, "x.y is not a valid IP or resolvable"),
        ({"ip": "127.0.0.1"}, {"producer_byte_rate": 5}, "Invalid configuration key producer"),
        ({"client-id": "c"}, {"connection_creation_rate": 5}, "Invalid configuration key conn"),
        (
            {"ip": None},
            {"connection_creation_rate": 1.5},
            "Configuration connection_creation_rate must be a Integer value",
        ),
        ({"user": "u"}, {"controller_mutation_rate": 5}, "not supported by this broker"),
    ],
)
def test_alter_refuses_bad_entities_keys_and_values(
    client: WireClient, entity: dict[str, str], ops: dict[str, float], message: str
) -> None:
    results = alter(client, [(entity, ops), ({"client-id": "ok"}, {"producer_byte_rate": 5})])
    assert results[0][0] == INVALID and message in (results[0][1] or "")
    assert results[1] == (ErrorCode.none, None)  # the good entry of the request is applied
    assert entries(describe(client, [])) == {
        frozenset({("client-id", "ok")}): {"producer_byte_rate": 5.0}
    }
    assert alter(client, [({"client-id": "ok"}, {"producer_byte_rate": None})])[0][0] == 0


def test_alter_refuses_duplicates(client: WireClient) -> None:
    results = alter(
        client,
        [
            ({"client-id": "d"}, {"producer_byte_rate": 5}),
            ({"client-id": "d"}, {"producer_byte_rate": 6}),
        ],
    )
    assert results[1][0] == INVALID and "duplicate entity" in (results[1][1] or "")
    assert entries(describe(client, [])) == {
        frozenset({("client-id", "d")}): {"producer_byte_rate": 5.0}
    }
    assert alter(client, [({"client-id": "d"}, {"producer_byte_rate": None})])[0][0] == 0


@pytest.mark.parametrize(
    "components,code,message",
    [
        ([("", 0, "x")], INVALID, "Invalid empty entity type."),
        ([("group", 0, "x")], ErrorCode.unsupported_version, "Unsupported entity type group"),
        ([("user", 0, None)], INVALID, "MATCH_TYPE_EXACT, but set match string to null"),
        ([("user", 1, "x")], INVALID, "MATCH_TYPE_DEFAULT, but also specified a match"),
        ([("user", 2, "x")], INVALID, "MATCH_TYPE_SPECIFIED, but also specified a match"),
        ([("user", 7, None)], INVALID, "Unknown match type 7"),
        ([("user", 1, None), ("user", 2, None)], INVALID, "cannot appear more than once"),
        ([("ip", 2, None), ("user", 2, None)], INVALID, "IP filter component should not"),
    ],
)
def test_describe_refuses_bad_filters(
    client: WireClient, components: list[tuple[str, int, str | None]], code: int, message: str
) -> None:
    response = describe(client, components)
    assert response.error_code == code and message in response.error_message
    assert response.entries is None


def produce_request(version: int, topic: str, value: bytes, acks: int = 1) -> Any:
    cls = request_type(PRODUCE, version)
    batch = build_batch([(None, value, [], int(time.time() * 1000))])
    data = nested(cls, "PartitionProduceData")(index=0, records=batch)
    return build(
        cls,
        transactional_id=None,
        acks=acks,
        timeout=datetime.timedelta(seconds=5),
        topic_data=(nested(cls, "TopicProduceData")(name=topic, partition_data=(data,)),),
    )


def muted_for(client: WireClient) -> float:
    """Seconds until the connection answers an ApiVersions request."""
    started = time.monotonic()
    call_as(client, "probe", API_VERSIONS, 0, request_type(API_VERSIONS, 0)())
    return time.monotonic() - started


# 10,000 B/s: a first request of 105 KB is 10.5 s of quota against the 10 s the rate is
# measured over, so it is throttled for about half a second (server/quotas.py).
QUOTA = 10_000
BIG = b"x" * 105_000


@pytest.mark.parametrize("version", [3, 8, 11])
def test_produce_over_quota_is_throttled_and_muted(client: WireClient, version: int) -> None:
    topic = f"quota-produce-{version}"
    assert create_topic(client, topic).error_code == ErrorCode.none
    client_id = f"tiny-{version}"
    assert alter(client, [({"client-id": client_id}, {"producer_byte_rate": QUOTA})])[0][0] == 0
    free = call_as(client, "free", PRODUCE, version, produce_request(version, topic, BIG))
    assert free.throttle_time == datetime.timedelta(0)
    response = call_as(client, client_id, PRODUCE, version, produce_request(version, topic, BIG))
    partition = response.responses[0].partition_responses[0]
    assert partition.error_code == ErrorCode.none and partition.base_offset == 1  # appended
    delay = response.throttle_time.total_seconds()
    assert 0.4 < delay < 1.0
    # The channel is not read for the throttle time (generous bound: timers, load).
    assert muted_for(client) >= 0.5 * delay


def test_acks_0_producer_over_quota_is_muted_without_an_answer(client: WireClient) -> None:
    topic = "quota-produce-acks0"
    assert create_topic(client, topic).error_code == ErrorCode.none
    assert alter(client, [({"client-id": "tiny-0"}, {"producer_byte_rate": QUOTA})])[0][0] == 0
    client._next += 1
    request = produce_request(11, topic, BIG, acks=0)
    client.send(request_frame(PRODUCE, 11, client._next, request, client_id="tiny-0"))
    # No answer is due; the next request waits out the throttle time (about 0.5 s).
    assert muted_for(client) >= 0.25


def test_consumer_over_quota_gets_an_empty_throttled_fetch(client: WireClient) -> None:
    topic = "quota-fetch"
    assert create_topic(client, topic).error_code == ErrorCode.none
    call_as(client, "free", PRODUCE, 11, produce_request(11, topic, b"y" * 120_000))
    assert alter(client, [({"client-id": "tiny-c"}, {"consumer_byte_rate": QUOTA})])[0][0] == 0

    def fetch(conn: WireClient, client_id: str, replica_id: int = -1) -> Any:
        cls = request_type(FETCH, 12)
        partition = nested(cls, "FetchPartition")(
            partition=0, fetch_offset=0, partition_max_bytes=1 << 20
        )
        request = cls(
            replica_id=replica_id,
            max_wait=datetime.timedelta(0),
            min_bytes=1,
            max_bytes=1 << 20,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=(nested(cls, "FetchTopic")(topic=topic, partitions=(partition,)),),
            forgotten_topics_data=(),
            rack_id="",
        )
        return call_as(conn, client_id, FETCH, 12, request)

    free = fetch(client, "free")
    assert free.throttle_time == datetime.timedelta(0)
    assert len(free.responses[0].partitions[0].records) > 120_000
    # 120 KB against 10,000 B/s over 10 s: 2 s of delay, and the data is not sent.
    throttled = fetch(client, "tiny-c")
    assert throttled.responses == ()
    delay = throttled.throttle_time.total_seconds()
    assert 1.5 < delay < 2.5
    assert muted_for(client) >= 0.5 * delay
    # Replication traffic is never throttled: a follower's fetch (replica_id >= 0) with
    # the same client id is answered (here: this broker leads alone, so with an error).
    other = WireClient(client.sock.getpeername()[1])
    try:
        answer = fetch(other, "tiny-c", replica_id=7)
    finally:
        other.close()
    assert answer.throttle_time == datetime.timedelta(0)
    assert answer.responses[0].partitions[0].error_code == ErrorCode.not_leader_or_follower


def test_user_quota_applies_to_anonymous_clients(client: WireClient) -> None:
    """Without SASL every client is the user ANONYMOUS: a user quota covers them all, and
    outranks client-id quotas; removing it lifts it at once."""
    topic = "quota-user"
    assert create_topic(client, topic).error_code == ErrorCode.none
    user = {"user": "ANONYMOUS"}
    assert alter(client, [(user, {"producer_byte_rate": QUOTA})])[0][0] == 0
    throttled = call_as(client, "any-client", PRODUCE, 11, produce_request(11, topic, BIG))
    assert throttled.throttle_time > datetime.timedelta(0)
    muted_for(client)
    assert alter(client, [(user, {"producer_byte_rate": None})])[0][0] == 0
    free = call_as(client, "any-client", PRODUCE, 11, produce_request(11, topic, BIG))
    assert free.throttle_time == datetime.timedelta(0)


def test_request_percentage_throttles_handler_time(client: WireClient) -> None:
    assert alter(client, [({"client-id": "busy"}, {"request_percentage": 0.01})])[0][0] == 0
    request = request_type(METADATA, 12)(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )
    for _ in range(200):
        delay = call_as(client, "busy", METADATA, 12, request).throttle_time
        if delay:
            break
    # 0.01% of a handler is 100 µs of handling per second: a few Metadata requests exceed it;
    # the delay is capped at one quota window (1 s).
    assert datetime.timedelta(0) < delay <= datetime.timedelta(seconds=1)
    assert alter(client, [({"client-id": "busy"}, {"request_percentage": None})])[0][0] == 0
