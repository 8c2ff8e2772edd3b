"""ShareFetch and ShareAcknowledge (KIP-932) over raw requests against a real broker process
with its share coordinator: members sharing a partition without a record delivered twice,
ACCEPT/RELEASE/REJECT, lock expiry, the delivery count limit, share session epochs,
invalid acknowledgements, closed sessions and connections releasing records, and the
records answered being the log's own batches."""

from __future__ import annotations

import itertools
import struct
import time
import uuid
from datetime import timedelta
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from compat_tests.broker import BrokerProcess
from compat_tests.process_pool import ProcessPool
from gregor.apis.context import build, nested
from gregor.wire import versions as v
from gregor.wire.records import build_batch
from gregor.wire.schema import request_type
from tests.kafka_wire import WireClient, create_topic, fetch_one
from tests.share_groups_off import SHARE_GROUPS_OFF
from tests.test_client_quotas import alter as alter_quotas
from tests.test_consumer_group_commits_and_configs import alter_group

LOCK_MS = 3000
OVERRIDES = {
    "group.share.enable": "true",
    "group.share.min.record.lock.duration.ms": "1000",
    "group.share.record.lock.duration.ms": str(LOCK_MS),
    "group.share.delivery.count.limit": "2",
    "offsets.topic.num.partitions": "1",
    "share.coordinator.state.topic.num.partitions": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
}
ACCEPT, RELEASE, REJECT = 1, 2, 3
_names = itertools.count()


@pytest.fixture(scope="module")
def broker(process_pool: ProcessPool) -> BrokerProcess:
    return process_pool.broker(OVERRIDES)


class Member:
    """One share group member's connection and share session."""

    def __init__(self, broker: BrokerProcess, group: str) -> None:
        self.client = WireClient(broker.port)
        self.group = group
        self.member_id = str(uuid.uuid4())
        self.epoch = 0

    def fetch(
        self,
        topic_id: uuid.UUID,
        acks: dict[int, list[tuple[int, int, list[int]]]] | None = None,
        *,
        max_records: int = 500,
        max_wait_ms: int = 0,
        epoch: int | None = None,
    ) -> Any:
        cls = request_type(v.SHARE_FETCH, 1)
        topic, partition = nested(cls, "FetchTopic"), nested(cls, "FetchPartition")
        batch = nested(cls, "AcknowledgementBatch")
        acks = acks or {}
        partitions = {0: [], **acks}
        request = cls(
            group_id=self.group,
            member_id=self.member_id,
            share_session_epoch=self.epoch if epoch is None else epoch,
            max_wait=timedelta(milliseconds=max_wait_ms),
            min_bytes=1,
            max_bytes=1 << 20,
            max_records=max_records,
            batch_size=max_records,
            topics=(
                topic(
                    topic_id=topic_id,
                    partitions=tuple(
                        partition(
                            partition_index=index,
                            acknowledgement_batches=tuple(
                                batch(first_offset=a, last_offset=b, acknowledge_types=tuple(t))
                                for a, b, t in batches
                            ),
                        )
                        for index, batches in partitions.items()
                    ),
                ),
            ),
            forgotten_topics_data=(),
        )
        self.client.sock.settimeout(max_wait_ms / 1000 + 10)
        response = self.client.call(v.SHARE_FETCH, 1, request)
        if response.error_code == ErrorCode.none and epoch is None:
            self.epoch += 1
        return response

    def acknowledge(
        self,
        topic_id: uuid.UUID,
        batches: list[tuple[int, int, list[int]]],
        *,
        epoch: int | None = None,
    ) -> Any:
        cls = request_type(v.SHARE_ACKNOWLEDGE, 1)
        topic, partition = nested(cls, "AcknowledgeTopic"), nested(cls, "AcknowledgePartition")
        batch = nested(cls, "AcknowledgementBatch")
        request = cls(
            group_id=self.group,
            member_id=self.member_id,
            share_session_epoch=self.epoch if epoch is None else epoch,
            topics=(
                topic(
                    topic_id=topic_id,
                    partitions=(
                        partition(
                            partition_index=0,
                            acknowledgement_batches=tuple(
                                batch(first_offset=a, last_offset=b, acknowledge_types=tuple(t))
                                for a, b, t in batches
                            ),
                        ),
                    ),
                ),
            ),
        )
        response = self.client.call(v.SHARE_ACKNOWLEDGE, 1, request)
        if response.error_code == ErrorCode.none and epoch is None:
            self.epoch += 1
        return response

    def close(self) -> None:
        self.client.close()


def partition_of(response: Any) -> Any:
    assert response.error_code == ErrorCode.none, response
    (topic,) = response.responses
    (answer,) = topic.partitions
    return answer


def acquired(response: Any) -> list[tuple[int, int, int]]:
    """The acquired ranges (none when an incremental answer names no partition)."""
    if response.error_code == ErrorCode.none and not response.responses:
        return []
    answer = partition_of(response)
    assert answer.error_code == ErrorCode.none, answer
    return [(a.first_offset, a.last_offset, a.delivery_count) for a in answer.acquired_records]


def offsets(ranges: list[tuple[int, int, int]]) -> list[int]:
    return [o for first, last, _ in ranges for o in range(first, last + 1)]


def new_topic(broker: BrokerProcess) -> tuple[str, uuid.UUID]:
    client = WireClient(broker.port)
    name = f"share-{next(_names)}"
    created = create_topic(client, name, 1)
    client.close()
    assert created.error_code == ErrorCode.none
    return name, created.topic_id


def produce(broker: BrokerProcess, topic: str, batches: int, records: int = 1, **txn: Any) -> None:
    """``batches`` batches of ``records`` records; ``txn``: a transactional producer's
    transactional_id, producer_id and producer_epoch."""
    client = WireClient(broker.port)
    cls = request_type(v.PRODUCE, 11)
    t, p = nested(cls, "TopicProduceData"), nested(cls, "PartitionProduceData")
    transactional_id = txn.pop("transactional_id", None)
    for i in range(batches):
        data = build_batch(
            [(None, f"v{i}-{j}".encode(), (), 0) for j in range(records)],
            **txn,
            **({"base_sequence": i * records, "is_transactional": True} if txn else {}),
        )
        request = cls(
            transactional_id=transactional_id,
            acks=-1,
            timeout=timedelta(seconds=5),
            topic_data=(t(name=topic, partition_data=(p(index=0, records=data),)),),
        )
        answer = client.call(v.PRODUCE, 11, request).responses[0].partition_responses[0]
        assert answer.error_code == ErrorCode.none
    client.close()


def base_offsets(records: bytes) -> list[int]:
    """The base offsets of the batches in ``records``."""
    out = []
    position = 0
    while position < len(records):
        base, length = struct.unpack_from(">qi", records, position)
        out.append(base)
        position += 12 + length
    return out


def joined(broker: BrokerProcess, topic_id: uuid.UUID, *names: str) -> list[Member]:
    """Members of one new group, each with an open share session (the first use of the
    share-partition starts it at the log end: latest)."""
    group = f"sg-{next(_names)}"
    members = [Member(broker, group) for _ in names]
    for member in members:
        assert acquired(member.fetch(topic_id)) == []
    return members


def test_two_members_share_a_partition_without_a_record_delivered_twice(
    broker: BrokerProcess,
) -> None:
    topic, topic_id = new_topic(broker)
    a, b = joined(broker, topic_id, "a", "b")
    produce(broker, topic, 10)
    seen: list[int] = []
    for member in itertools.islice(itertools.cycle([a, b]), 6):
        response = member.fetch(topic_id, max_records=3)
        assert response.acquisition_lock_timeout == timedelta(milliseconds=LOCK_MS)
        ranges = acquired(response)
        seen += offsets(ranges)
        if ranges:
            answer = partition_of(response)
            assert all(count == 1 for _, _, count in ranges)
            # the answer's records are the log's own batches holding the acquired records
            assert base_offsets(answer.records) == offsets(ranges)
            log = fetch_one(a.client, topic, 0, ranges[0][0]).records
            assert bytes(log).startswith(answer.records)
    assert sorted(seen) == list(range(10))
    assert len(seen) == len(set(seen))
    a.close()
    b.close()


def test_accept_release_and_reject(broker: BrokerProcess) -> None:
    topic, topic_id = new_topic(broker)
    a, b = joined(broker, topic_id, "a", "b")
    produce(broker, topic, 1, records=3)
    assert acquired(a.fetch(topic_id)) == [(0, 2, 1)]
    answer = a.acknowledge(topic_id, [(0, 2, [ACCEPT, RELEASE, REJECT])])
    assert answer.error_code == ErrorCode.none
    assert answer.responses[0].partitions[0].error_code == ErrorCode.none
    assert acquired(b.fetch(topic_id)) == [(1, 1, 2)]
    # b accepts it with the next fetch; nothing is left to deliver
    response = b.fetch(topic_id, {0: [(1, 1, [ACCEPT])]})
    assert partition_of(response).acknowledge_error_code == ErrorCode.none
    assert acquired(response) == []
    assert acquired(a.fetch(topic_id)) == []
    a.close()
    b.close()


def test_an_expired_lock_delivers_the_records_again(broker: BrokerProcess) -> None:
    topic, topic_id = new_topic(broker)
    a, b = joined(broker, topic_id, "a", "b")
    produce(broker, topic, 2)
    assert acquired(a.fetch(topic_id)) == [(0, 1, 1)]
    started = time.monotonic()
    # b's fetch waits (parked) until a's lock runs out
    ranges = acquired(b.fetch(topic_id, max_wait_ms=LOCK_MS + 5000))
    assert ranges == [(0, 1, 2)]
    assert time.monotonic() - started >= LOCK_MS / 1000 - 0.5
    # a's late acknowledgement is refused: the records are b's now
    late = a.acknowledge(topic_id, [(0, 1, [ACCEPT])])
    assert late.responses[0].partitions[0].error_code == ErrorCode.invalid_record_state
    a.close()
    b.close()


def test_the_delivery_count_limit_archives_records(broker: BrokerProcess) -> None:
    topic, topic_id = new_topic(broker)
    (a,) = joined(broker, topic_id, "a")
    produce(broker, topic, 1)
    produce(broker, topic, 1)
    assert acquired(a.fetch(topic_id, max_records=1)) == [(0, 0, 1)]
    assert acquired(a.fetch(topic_id, {0: [(0, 0, [RELEASE])]}, max_records=1)) == [(0, 0, 2)]
    # released at the limit (2 deliveries): archived, the next record goes out instead
    assert acquired(a.fetch(topic_id, {0: [(0, 0, [RELEASE])]}, max_records=1)) == [(1, 1, 1)]
    a.close()


def test_session_epochs(broker: BrokerProcess) -> None:
    _, topic_id = new_topic(broker)
    a = Member(broker, f"sg-{next(_names)}")
    assert a.fetch(topic_id, epoch=3).error_code == ErrorCode.share_session_not_found
    assert a.acknowledge(topic_id, [], epoch=1).error_code == ErrorCode.share_session_not_found
    # acknowledgements cannot open a session
    opening = a.fetch(topic_id, {0: [(0, 0, [ACCEPT])]}, epoch=0)
    assert opening.error_code == ErrorCode.invalid_request
    assert acquired(a.fetch(topic_id)) == []  # epoch 0: opened
    assert a.fetch(topic_id, epoch=2).error_code == ErrorCode.invalid_share_session_epoch
    assert a.acknowledge(topic_id, [], epoch=0).error_code == ErrorCode.invalid_share_session_epoch
    assert acquired(a.fetch(topic_id)) == []  # epoch 1
    assert a.acknowledge(topic_id, []).error_code == ErrorCode.none  # epoch 2
    assert a.fetch(topic_id, epoch=-1).error_code == ErrorCode.none  # closed
    assert a.fetch(topic_id, epoch=3).error_code == ErrorCode.share_session_not_found
    a.close()


def test_invalid_acknowledgements(broker: BrokerProcess) -> None:
    topic, topic_id = new_topic(broker)
    (a,) = joined(broker, topic_id, "a")
    produce(broker, topic, 1, records=4)
    assert acquired(a.fetch(topic_id)) == [(0, 3, 1)]
    for batches in (
        [(0, 2, [ACCEPT]), (2, 3, [ACCEPT])],  # overlapping
        [(2, 3, [ACCEPT]), (0, 1, [ACCEPT])],  # unsorted
        [(0, 5, [ACCEPT])],  # past the end of what was delivered
        [(0, 3, [ACCEPT, ACCEPT])],  # neither one type nor one per offset
    ):
        answer = a.acknowledge(topic_id, batches)
        assert answer.responses[0].partitions[0].error_code == ErrorCode.invalid_request
    # none of them was applied
    answer = a.acknowledge(topic_id, [(0, 3, [ACCEPT])])
    assert answer.responses[0].partitions[0].error_code == ErrorCode.none
    a.close()


def test_closing_the_session_or_its_connection_releases_the_records(
    broker: BrokerProcess,
) -> None:
    topic, topic_id = new_topic(broker)
    a, b, c = joined(broker, topic_id, "a", "b", "c")
    produce(broker, topic, 1)
    assert acquired(a.fetch(topic_id)) == [(0, 0, 1)]
    assert a.fetch(topic_id, epoch=-1).error_code == ErrorCode.none
    assert acquired(b.fetch(topic_id)) == [(0, 0, 2)]  # at once, not after the lock
    produce(broker, topic, 1)
    assert acquired(c.fetch(topic_id)) == [(1, 1, 1)]
    c.close()
    started = time.monotonic()
    # b's fetch waits until c's connection is gone, well before c's lock would run out
    assert acquired(b.fetch(topic_id, max_wait_ms=LOCK_MS + 5000)) == [(1, 1, 2)]
    assert time.monotonic() - started < LOCK_MS / 1000
    a.close()
    b.close()


def test_unknown_topic_ids(broker: BrokerProcess) -> None:
    a = Member(broker, f"sg-{next(_names)}")
    answer = partition_of(a.fetch(uuid.uuid4()))
    assert answer.error_code == ErrorCode.unknown_topic_id
    # the zero topic id (which kio reads as None) once failed the answer's encoding
    b = Member(broker, f"sg-{next(_names)}")
    response = b.fetch(uuid.UUID(int=0))
    assert partition_of(response).error_code == ErrorCode.unknown_topic_id
    assert response.responses[0].topic_id is None
    a.close()
    b.close()


def test_share_fetch_bytes_are_charged_to_the_fetch_quota(process_pool: ProcessPool) -> None:
    """As Fetch, ShareFetch counts against the client's consumer_byte_rate: over it, the
    answer carries the throttle time (its acquired records still delivered)."""
    # A broker of its own (a client quota is set on it): the default window, spelled out.
    broker = process_pool.broker({**OVERRIDES, "quota.window.num": "11"})
    topic, topic_id = new_topic(broker)
    (member,) = joined(broker, topic_id, "a")
    client = WireClient(broker.port)
    cls = request_type(v.PRODUCE, 11)
    t, p = nested(cls, "TopicProduceData"), nested(cls, "PartitionProduceData")
    data = build_batch([(None, b"y" * 120_000, (), 0)])
    request = cls(
        transactional_id=None,
        acks=-1,
        timeout=timedelta(seconds=5),
        topic_data=(t(name=topic, partition_data=(p(index=0, records=data),)),),
    )
    assert client.call(v.PRODUCE, 11, request).responses[0].partition_responses[0].error_code == 0
    # 10,000 B/s measured over 10 s: 120 KB is 2 s of delay (server/quotas.py).
    assert alter_quotas(client, [({"client-id": "wire-test"}, {"consumer_byte_rate": 10_000})]) == [
        (ErrorCode.none, None)
    ]
    try:
        response = member.fetch(topic_id)
        assert offsets(acquired(response)) == [0]
        assert len(partition_of(response).records) > 120_000
        assert 1.5 < response.throttle_time.total_seconds() < 2.5
    finally:
        alter_quotas(client, [({"client-id": "wire-test"}, {"consumer_byte_rate": None})])
        client.close()
        member.close()


def test_share_fetch_is_off_without_the_gate(process_pool: ProcessPool) -> None:
    off = process_pool.broker(SHARE_GROUPS_OFF)
    a = Member(off, "g")
    assert a.fetch(uuid.uuid4()).error_code == ErrorCode.unsupported_version
    assert a.acknowledge(uuid.uuid4(), [], epoch=1).error_code == ErrorCode.unsupported_version
    a.close()


def call(client: WireClient, api: int, version: int, **fields: Any) -> Any:
    return client.call(api, version, build(request_type(api, version), **fields))


def test_read_committed_never_delivers_aborted_records(broker: BrokerProcess) -> None:
    topic, topic_id = new_topic(broker)
    group = f"sg-{next(_names)}"
    client = WireClient(broker.port)
    configs = {"share.isolation.level": "read_committed", "share.auto.offset.reset": "earliest"}
    assert alter_group(client, group, configs)[0] == ErrorCode.none
    txn_id = f"txn-{group}"
    found = call(client, v.FIND_COORDINATOR, 4, key_type=1, coordinator_keys=(txn_id,))
    assert found.coordinators[0].error_code == ErrorCode.none
    init = call(
        client,
        v.INIT_PRODUCER_ID,
        4,
        transactional_id=txn_id,
        transaction_timeout=timedelta(seconds=60),
        producer_id=-1,
        producer_epoch=-1,
    )
    assert init.error_code == ErrorCode.none
    pid, epoch = init.producer_id, init.producer_epoch
    add_cls = request_type(v.ADD_PARTITIONS_TO_TXN, 3)
    added = client.call(
        v.ADD_PARTITIONS_TO_TXN,
        3,
        add_cls(
            v3_and_below_transactional_id=txn_id,
            v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=(
                nested(add_cls, "AddPartitionsToTxnTopic")(name=topic, partitions=(0,)),
            ),
        ),
    )
    assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
    produce(broker, topic, 1, 2, transactional_id=txn_id, producer_id=pid, producer_epoch=epoch)
    ended = call(
        client,
        v.END_TXN,
        3,
        transactional_id=txn_id,
        producer_id=pid,
        producer_epoch=epoch,
        committed=False,
    )
    assert ended.error_code == ErrorCode.none
    client.close()
    produce(broker, topic, 1)  # offsets 0-1 aborted, 2 the abort marker, 3 committed
    member = Member(broker, group)
    ranges = acquired(member.fetch(topic_id))
    deadline = time.monotonic() + 10
    while not ranges and time.monotonic() < deadline:  # until the marker is written
        ranges = acquired(member.fetch(topic_id, max_wait_ms=500))
    assert ranges == [(3, 3, 1)]
    member.close()
