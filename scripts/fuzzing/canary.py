"""The well-behaved client: it times every round trip during the fuzz and leaves data
(records and a committed group offset) whose survival is checked afterwards."""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from fuzzing.share_canary import share_group_problems, share_member_problems
from gregor.apis.context import build, nested
from gregor.wire.records import build_batch, decode_records, split_batches
from gregor.wire.schema import request_type
from gregor.wire.versions import (
    CONSUMER_GROUP_DESCRIBE,
    CONSUMER_GROUP_HEARTBEAT,
    CREATE_TOPICS,
    FETCH,
    FIND_COORDINATOR,
    METADATA,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    PRODUCE,
)
from tests.kafka_wire import WireClient

Connect = Callable[[], WireClient]  # a new connection, ready for requests (authenticated)
TOPIC = "canary"
GROUP = "canary-group"  # committed to every COMMIT_EVERY rounds
GROUP_BEFORE = "canary-group-before"  # committed once, before the fuzz
TIMEOUT = datetime.timedelta(seconds=10)
LOADING = frozenset({14, 15, 16})  # COORDINATOR_LOAD_IN_PROGRESS, _NOT_AVAILABLE, NOT_COORDINATOR
GROUP_ID_NOT_FOUND = 69
COMMIT_EVERY = 20  # rounds between offset commits
PAUSE_S = 0.005  # between rounds: a steady client, not a load generator


@dataclass
class CanaryState:
    """What the canary was told was stored: checked against the broker at the end."""

    acked: list[tuple[int, bytes]] = field(default_factory=list)  # (offset, value)
    sent: int = 0
    committed: int | None = None
    committed_before: int | None = None
    latencies_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # The fuzzed consumer groups' epochs at the first check: a restart must load them back.
    group_epochs: dict[str, int] | None = None


def _call(client: WireClient, api: int, version: int, **fields: Any) -> Any:
    return client.call(api, version, build(request_type(api, version), **fields))


def create_topic(client: WireClient, name: str, configs: dict[str, str] | None = None) -> int:
    """CreateTopics v7 of one single-partition topic; returns Kafka's error code."""
    cls = request_type(CREATE_TOPICS, 7)
    config = nested(cls, "CreatableTopicConfig")
    topic = nested(cls, "CreatableTopic")(
        name=name,
        num_partitions=1,
        replication_factor=-1,
        assignments=(),
        configs=tuple(config(name=k, value=v) for k, v in (configs or {}).items()),
    )
    response = _call(
        client, CREATE_TOPICS, 7, timeout=TIMEOUT, validate_only=False, topics=(topic,)
    )
    return int(response.topics[0].error_code)


def metadata(client: WireClient) -> Any:
    cls = request_type(METADATA, 12)
    topic = nested(cls, "MetadataRequestTopic")(name=TOPIC, topic_id=None)
    return _call(
        client,
        METADATA,
        12,
        topics=(topic,),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )


def produce(client: WireClient, value: bytes) -> tuple[int, int]:
    """One record with acks=all; returns (error code, base offset)."""
    cls = request_type(PRODUCE, 11)
    batch = build_batch([(None, value, [], int(time.time() * 1000))])
    partition = nested(cls, "PartitionProduceData")(index=0, records=batch)
    topic = nested(cls, "TopicProduceData")(name=TOPIC, partition_data=(partition,))
    response = _call(client, PRODUCE, 11, acks=-1, timeout=TIMEOUT, topic_data=(topic,))
    result = response.responses[0].partition_responses[0]
    return int(result.error_code), result.base_offset


def fetch(client: WireClient, offset: int) -> tuple[int, int, bytes]:
    """One partition from ``offset``, no waiting; returns (error, high watermark, records)."""
    cls = request_type(FETCH, 12)
    partition = nested(cls, "FetchPartition")(
        partition=0, fetch_offset=offset, partition_max_bytes=1 << 20
    )
    topic = nested(cls, "FetchTopic")(topic=TOPIC, partitions=(partition,))
    response = _call(
        client,
        FETCH,
        12,
        max_wait=datetime.timedelta(0),
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(topic,),
        forgotten_topics_data=(),
        rack_id="",
    )
    result = response.responses[0].partitions[0]
    return int(result.error_code), result.high_watermark, result.records or b""


def find_coordinator(client: WireClient, group: str) -> int:
    """FindCoordinator v3 of a group (the broker itself); returns the error code."""
    return int(_call(client, FIND_COORDINATOR, 3, key=group, key_type=0).error_code)


def commit(client: WireClient, offset: int, group: str = GROUP) -> int:
    """A standalone (generation -1) commit of partition 0; returns the error code."""
    cls = request_type(OFFSET_COMMIT, 8)
    partition = build(
        nested(cls, "OffsetCommitRequestPartition"),
        partition_index=0,
        committed_offset=offset,
        committed_leader_epoch=-1,
        committed_metadata="",
    )
    topic = nested(cls, "OffsetCommitRequestTopic")(name=TOPIC, partitions=(partition,))
    response = _call(
        client,
        OFFSET_COMMIT,
        8,
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        topics=(topic,),
    )
    return int(response.topics[0].partitions[0].error_code)


def committed_offset(client: WireClient, group_id: str) -> int:
    cls = request_type(OFFSET_FETCH, 8)
    topic = nested(cls, "OffsetFetchRequestTopics")(name=TOPIC, partition_indexes=(0,))
    group = build(nested(cls, "OffsetFetchRequestGroup"), group_id=group_id, topics=(topic,))
    response = _call(client, OFFSET_FETCH, 8, groups=(group,), require_stable=False)
    return response.groups[0].topics[0].partitions[0].committed_offset


def consumer_heartbeat(client: WireClient, group: str, member_id: str, epoch: int) -> Any:
    """ConsumerGroupHeartbeat v1 of a member subscribed to TOPIC (joining at epoch 0)."""
    return _call(
        client,
        CONSUMER_GROUP_HEARTBEAT,
        1,
        group_id=group,
        member_id=member_id,
        member_epoch=epoch,
        instance_id=None,
        rack_id=None,
        rebalance_timeout=datetime.timedelta(milliseconds=30_000 if epoch == 0 else -1),
        subscribed_topic_names=(TOPIC,) if epoch == 0 else None,
        subscribed_topic_regex=None,
        server_assignor=None,
        topic_partitions=() if epoch == 0 else None,
    )


def consumer_member_problems(client: WireClient, deadline_s: float = 30.0) -> list[str]:
    """A well-behaved consumer-protocol member joins a fresh group and must get every
    partition of TOPIC at once (retrying while the coordinator loads), then leaves."""
    [topic] = metadata(client).topics
    group, member_id = f"canary-consumer-{uuid.uuid4()}", str(uuid.uuid4())
    give_up = time.monotonic() + deadline_s
    joined = consumer_heartbeat(client, group, member_id, 0)
    while joined.error_code in LOADING and time.monotonic() < give_up:
        time.sleep(0.1)
        joined = consumer_heartbeat(client, group, member_id, 0)
    if joined.error_code or joined.assignment is None:
        return [f"a consumer member joining a fresh group got error code {joined.error_code}"]
    owned = {(t.topic_id, tuple(t.partitions)) for t in joined.assignment.topic_partitions}
    problems = []
    if owned != {(topic.topic_id, (0,))}:
        problems.append(f"a consumer member of a fresh group was assigned {owned}")
    left = consumer_heartbeat(client, group, member_id, -1).error_code
    if left:
        problems.append(f"a consumer member's leave got error code {left}")
    return problems


def group_epochs(
    client: WireClient, groups: tuple[str, ...], deadline_s: float = 30.0
) -> dict[str, int]:
    """The epochs of those of ``groups`` that exist (ConsumerGroupDescribe, retried while
    the coordinator loads)."""
    request = build(
        request_type(CONSUMER_GROUP_DESCRIBE, 1),
        group_ids=groups,
        include_authorized_operations=False,
    )
    give_up = time.monotonic() + deadline_s
    while True:
        described = client.call(CONSUMER_GROUP_DESCRIBE, 1, request).groups
        errors = {g.error_code for g in described} - {0, GROUP_ID_NOT_FOUND}
        if not errors:
            return {g.group_id: g.group_epoch for g in described if g.error_code == 0}
        if not errors <= LOADING or time.monotonic() > give_up:
            raise ValueError(f"ConsumerGroupDescribe answered error codes {sorted(errors)}")
        time.sleep(0.1)


def plaintext(port: int) -> Connect:
    """Connections to a PLAINTEXT listener."""
    return partial(WireClient, port, timeout=TIMEOUT.total_seconds())


class Canary:
    """Rounds of Metadata, a one-record Produce and a Fetch of it, plus a commit every
    COMMIT_EVERY rounds; a call that fails reconnects (with ``connect``, its time counted
    in the call's) and is timed like any other."""

    def __init__(self, connect: Connect) -> None:
        self.connect = connect
        self.state = CanaryState()
        self.client: WireClient | None = None

    def _client(self) -> WireClient:
        if self.client is None:
            self.client = self.connect()
        return self.client

    def _timed(self, what: str, call: Any, *args: Any) -> Any:
        start = time.perf_counter()
        try:
            return call(self._client(), *args)
        except (OSError, ValueError, AssertionError) as e:
            self.state.errors.append(f"{what}: {type(e).__name__}: {e}")
            if self.client is not None:
                self.client.close()
            self.client = None
            return None
        finally:
            self.state.latencies_ms.append((time.perf_counter() - start) * 1000)

    def round(self, number: int) -> None:
        state = self.state
        self._timed("metadata", metadata)
        value = b"canary-%d" % state.sent
        state.sent += 1
        result = self._timed("produce", produce, value)
        if result is None:
            return
        error, offset = result
        if error:
            state.errors.append(f"produce: error code {error}")
            return
        state.acked.append((offset, value))
        self._timed("fetch", fetch, offset)
        if number % COMMIT_EVERY == 0:
            error = self._timed("commit", commit, offset + 1)
            if error == 0:
                state.committed = offset + 1
            elif error is not None:
                state.errors.append(f"commit: error code {error}")

    def setup(self, deadline_s: float = 30.0) -> None:
        """Find the coordinator of both groups and commit GROUP_BEFORE once (the fuzz must
        leave it as it is), retrying while the offsets topic is created and loaded."""
        client = self._client()
        give_up = time.monotonic() + deadline_s
        while time.monotonic() < give_up:
            errors = [find_coordinator(client, g) for g in (GROUP, GROUP_BEFORE)]
            if not any(errors) and commit(client, 0, GROUP_BEFORE) == 0:
                self.state.committed_before = 0
                return
            time.sleep(0.1)
        raise RuntimeError(f"the canary could not commit offsets within {deadline_s} s")

    def run(self, rounds: int, stop: Callable[[], bool] = lambda: False) -> None:
        """Up to ``rounds`` rounds, fewer if ``stop()`` turns true."""
        for number in range(rounds):
            if stop():
                return
            self.round(number)
            time.sleep(PAUSE_S)


def verify(
    connect: Connect,
    state: CanaryState,
    groups: tuple[str, ...] = (),
    share_groups: tuple[str, ...] = (),
) -> list[str]:
    """What differs between the broker's data and what the canary was acknowledged; a
    fresh consumer group must still work, ``groups`` keep the epochs (recorded in
    ``state`` by the first call) at which the fuzz left them; a fresh share group's member
    must get every stored record exactly once, and ``share_groups`` stay describable."""
    problems = []
    client = connect()
    try:
        stored: list[tuple[int, bytes]] = []
        offset, high_watermark = 0, 1
        while offset < high_watermark:
            error, high_watermark, data = fetch(client, offset)
            if error:
                return [f"fetch from {offset}: error code {error}"]
            batches = split_batches(data, allow_partial_tail=True)
            if not batches:
                break
            for header in batches:
                stored += [(r.offset, r.value or b"") for r in decode_records(data, header)]
            offset = stored[-1][0] + 1
        offsets = [o for o, _ in stored]
        if offsets != sorted(set(offsets)):
            problems.append("stored offsets are duplicated or out of order")
        by_offset = dict(stored)
        lost = [(o, v) for o, v in state.acked if by_offset.get(o) != v]
        if lost:
            problems.append(f"{len(lost)} acknowledged records missing or changed, e.g. {lost[0]}")
        sent = {b"canary-%d" % i for i in range(state.sent)}
        foreign = [v for _, v in stored if v not in sent]
        if foreign:
            problems.append(f"{len(foreign)} records the canary never sent")
        for group, expected in ((GROUP, state.committed), (GROUP_BEFORE, state.committed_before)):
            actual = committed_offset(client, group)
            if actual != expected:
                problems.append(f"{group} committed offset {actual}, expected {expected}")
        problems += consumer_member_problems(client)
        epochs = group_epochs(client, groups)
        if state.group_epochs is None:
            state.group_epochs = epochs
        lost = {g: e for g, e in state.group_epochs.items() if epochs.get(g, -1) < e}
        if lost:
            problems.append(f"consumer groups lost or behind their epochs {lost}: {epochs}")
        [topic] = metadata(client).topics
        problems += share_member_problems(client, TOPIC, topic.topic_id, offsets)
        problems += share_group_problems(client, share_groups)
    finally:
        client.close()
    return problems
