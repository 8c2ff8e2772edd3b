"""The share_groups family: hostile but well-formed KIP-932 conversations.

Each connection is one episode against one of a few share groups (GROUPS): members join
with ids they choose themselves and open a share session on the fuzz topics (TOPICS, which
the runner creates, fills and names by id with ``use_topic_ids``), pipelined without reading
an answer; then, interleaved, ShareGroupHeartbeats whose member epochs are out of order,
whose member ids are stolen (a small pool every episode draws from) or never joined, that
subscribe to thousands of topics or to unknown ones; ShareGroupDescribe of many groups;
ShareFetch and ShareAcknowledge with share session epochs out of order, in other members'
sessions, forgetting partitions never fetched, naming unknown or zero topic ids and unknown
partitions, max_records, max_bytes and batch_size of 0, -1 and 2^31-1, and acknowledgements whose
ranges overlap, are unsorted or reversed, lie (a types array of the wrong length, unknown
types, GAP), or point past the log end or below its start; and the share-group-state RPCs
83-87 a client may send (no authorizer, no CLUSTER_ACTION needed) with state and leader
epochs out of order, huge or overlapping batch lists and start offsets of -1 or 2^63-1,
against these groups only. Every request decodes: the broker must answer each with Kafka's
error, never with a traceback, a stall or lost data.
"""

from __future__ import annotations

import dataclasses
import random
import time
import uuid
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from fuzzing.canary import find_coordinator
from fuzzing.share_canary import set_group_configs
from gregor.apis.context import build, nested
from gregor.wire.records import build_batch
from gregor.wire.schema import request_type
from gregor.wire.versions import (
    DELETE_SHARE_GROUP_STATE,
    INITIALIZE_SHARE_GROUP_STATE,
    PRODUCE,
    READ_SHARE_GROUP_STATE,
    READ_SHARE_GROUP_STATE_SUMMARY,
    SHARE_ACKNOWLEDGE,
    SHARE_FETCH,
    SHARE_GROUP_DESCRIBE,
    SHARE_GROUP_HEARTBEAT,
    WRITE_SHARE_GROUP_STATE,
)
from tests.kafka_wire import WireClient, create_topic, request_frame

FAMILY = "share_groups"
GROUPS = tuple(f"fuzz-sg-{i}" for i in range(4))
TOPICS = ("fuzz-share-0", "fuzz-share-1")  # one partition each, RECORDS records
RECORDS = 200  # produced by the runner before the fuzz
INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
EPOCHS = (1, 2, 3, 7, 1000, INT32_MAX, -3, -1000, INT32_MIN)  # around, ahead, invalid
SESSION_EPOCHS = (0, 1, 2, 3, 5, 100, -1, -2, INT32_MAX, INT32_MIN)
LIMITS = (0, -1, INT32_MAX, 1, 500)  # max_records, max_bytes, batch_size, min_bytes
PARTITIONS = (0, 0, 0, 1, -1, INT32_MAX)
OFFSETS = (0, 5, RECORDS - 1, RECORDS, RECORDS * 100, INT64_MAX, -1, INT64_MIN)
ACK_TYPES = (0, 1, 2, 3)  # GAP, ACCEPT, RELEASE, REJECT
BAD_ACK_TYPES = (4, -1, 127, -128)
STEPS = 12  # most hostile requests after the joins
# Member ids every episode may use: concurrent episodes steal each other's members.
STOLEN = tuple(str(uuid.UUID(int=i + 1)) for i in range(4))

# The share coordinator's APIs (v0) and the name of their requests' topic entity.
STATE_TOPIC = {
    INITIALIZE_SHARE_GROUP_STATE: "InitializeStateData",
    READ_SHARE_GROUP_STATE: "ReadStateData",
    WRITE_SHARE_GROUP_STATE: "WriteStateData",
    DELETE_SHARE_GROUP_STATE: "DeleteStateData",
    READ_SHARE_GROUP_STATE_SUMMARY: "ReadStateSummaryData",
}

_topic_ids: list[uuid.UUID] = []


def use_topic_ids(ids: Sequence[uuid.UUID]) -> None:
    """The ids of TOPICS, known once the runner has created them (before the workers fork);
    without them the episodes name only unknown topic ids."""
    _topic_ids[:] = ids


def prepare(client: WireClient) -> None:
    """Create TOPICS with RECORDS records each (batches of 10), have GROUPS read them from
    the earliest offset and wait until their coordinator is found, and name the topics'
    ids to the episodes."""
    ids = []
    for topic in TOPICS:
        created = create_topic(client, topic)
        assert created.error_code == 0, created
        ids.append(created.topic_id)
        cls = request_type(PRODUCE, 11)
        for first in range(0, RECORDS, 10):
            batch = build_batch([(None, b"%d" % (first + i), [], 0) for i in range(10)])
            partition = nested(cls, "PartitionProduceData")(index=0, records=batch)
            data = nested(cls, "TopicProduceData")(name=topic, partition_data=(partition,))
            request = cls(
                transactional_id=None, acks=-1, timeout=timedelta(seconds=10), topic_data=(data,)
            )
            answer = client.call(PRODUCE, 11, request).responses[0].partition_responses[0]
            assert answer.error_code == 0, answer
    for group in GROUPS:
        assert set_group_configs(client, group, {"share.auto.offset.reset": "earliest"}) == 0
    give_up = time.monotonic() + 30
    while any(find_coordinator(client, group) for group in GROUPS):  # creates the topic
        assert time.monotonic() < give_up, "the share groups found no coordinator"
        time.sleep(0.1)
    use_topic_ids(ids)


def _int64(n: int) -> int:
    return max(INT64_MIN, min(n, INT64_MAX))


def _member_id(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128)))


def _topic_id(rng: random.Random) -> uuid.UUID:
    """Mostly a fuzz topic's id, sometimes one that does not exist or the zero id."""
    if _topic_ids and rng.random() < 0.85:
        return rng.choice(_topic_ids)
    return uuid.UUID(int=rng.choice((0, rng.getrandbits(128))))


def _topic_names(rng: random.Random) -> tuple[str, ...]:
    many = rng.choice((1, 1000, 3000))
    names = [f"fuzz-sg-missing-{rng.randrange(many)}" for _ in range(many)]
    return (*TOPICS, *names, *rng.sample(("", "__share_group_state", "fuzz-0"), 2))


def _ack_batches(rng: random.Random) -> list[tuple[int, int, tuple[int, ...]]]:
    """(first, last, types) acknowledgement batches, honest or lying in one promised way."""

    def honest(first: int, last: int) -> tuple[int, int, tuple[int, ...]]:
        if rng.random() < 0.5 and last - first < 100:
            return first, last, tuple(rng.choice(ACK_TYPES) for _ in range(last - first + 1))
        return first, last, (rng.choice(ACK_TYPES[1:]),)

    start = rng.randrange(RECORDS)
    kinds = (
        lambda: [honest(start, start + rng.randrange(10))],
        lambda: [honest(0, 9), honest(5, 14)],  # overlapping
        lambda: [honest(20, 29), honest(0, 9)],  # unsorted
        lambda: [honest(9, 0)],  # reversed
        lambda: [(start, start + 4, (1, 2))],  # types of the wrong length
        lambda: [(start, start + 2, (rng.choice(BAD_ACK_TYPES),) * 3)],  # unknown types
        lambda: [(start, start + 3, (0,))],  # all GAP
        lambda: [honest(RECORDS - 2, RECORDS + 1000)],  # past the log end
        lambda: [honest(RECORDS * 100, INT64_MAX)],  # far past it
        lambda: [honest(-5, 3)],  # below the log start
        lambda: [honest(INT64_MIN, INT64_MIN + 10)],
        lambda: [honest(0, 2**62)],  # one type for 2^62 offsets
        lambda: [honest(i, i) for i in range(rng.choice((100, 2000)))],  # many
        lambda: [(start, start, ())],  # no type at all
    )
    return rng.choice(kinds)()


class Episode:
    """One connection's requests against one share group."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.group = rng.choice(GROUPS)
        self.members = [rng.choice((_member_id(rng), *STOLEN)) for _ in range(rng.randint(1, 3))]
        self.frames: list[bytes] = []

    def _send(self, api_key: int, version: int, **fields: Any) -> None:
        self.frames.append(
            request_frame(
                api_key, version, len(self.frames), build(request_type(api_key, version), **fields)
            )
        )

    def heartbeat(self, member_id: str, epoch: int, topics: tuple[str, ...] | None = None) -> None:
        self._send(
            SHARE_GROUP_HEARTBEAT,
            1,
            group_id=self.group,
            member_id=member_id,
            member_epoch=epoch,
            rack_id=None,
            subscribed_topic_names=topics,
        )

    def join(self, member_id: str, topics: tuple[str, ...] = TOPICS) -> None:
        self.heartbeat(member_id, 0, topics)

    def _partitions(self, cls: type, name: str, acked: bool) -> tuple[Any, ...]:
        rng = self.rng
        topic = nested(cls, name + "Topic")
        partition = nested(cls, name + "Partition")
        batch = nested(cls, "AcknowledgementBatch")
        indexes = (0,) if rng.random() < 0.6 else tuple(rng.sample(PARTITIONS, 2))
        return tuple(
            topic(
                topic_id=_topic_id(rng),
                partitions=tuple(
                    partition(
                        partition_index=index,
                        acknowledgement_batches=tuple(
                            batch(first_offset=a, last_offset=b, acknowledge_types=t)
                            for a, b, t in (_ack_batches(rng) if acked else ())
                        ),
                    )
                    for index in indexes
                ),
            )
            for _ in range(rng.choice((1, 1, 2, 50)))
        )

    def share_fetch(self, member_id: str, epoch: int, acked: bool, group: str = "") -> None:
        """In ``group``, else in this episode's group or none."""
        rng = self.rng
        cls = request_type(SHARE_FETCH, 1)
        forgotten = nested(cls, "ForgottenTopic")
        self._send(
            SHARE_FETCH,
            1,
            group_id=group or rng.choice((self.group, self.group, "")),
            member_id=member_id,
            share_session_epoch=epoch,
            max_wait=timedelta(milliseconds=rng.choice((0, 0, 50, INT32_MAX))),
            min_bytes=rng.choice(LIMITS),
            max_bytes=rng.choice(LIMITS),
            max_records=rng.choice(LIMITS),
            batch_size=rng.choice(LIMITS),
            topics=self._partitions(cls, "Fetch", acked),
            forgotten_topics_data=tuple(  # mostly never fetched in this session
                forgotten(topic_id=_topic_id(rng), partitions=tuple(rng.sample(PARTITIONS, 2)))
                for _ in range(rng.choice((0, 1, 20)))
            ),
        )

    def share_acknowledge(self, member_id: str, epoch: int) -> None:
        cls = request_type(SHARE_ACKNOWLEDGE, 1)
        self._send(
            SHARE_ACKNOWLEDGE,
            1,
            group_id=self.group,
            member_id=member_id,
            share_session_epoch=epoch,
            topics=self._partitions(cls, "Acknowledge", True),
        )

    def describe(self) -> None:
        many = self.rng.choice((1, 100, 2000))
        names = [f"fuzz-sg-{i}" for i in range(many)]
        self._send(
            SHARE_GROUP_DESCRIBE,
            1,
            group_ids=(*GROUPS, "", *names),
            include_authorized_operations=self.rng.random() < 0.5,
        )

    def share_state(self) -> None:
        """One of the share coordinator's RPCs (83-87) against this episode's group."""
        rng = self.rng
        api = rng.choice((*STATE_TOPIC, WRITE_SHARE_GROUP_STATE))
        cls = request_type(api, 0)
        topic = nested(cls, STATE_TOPIC[api])
        partition = nested(cls, "PartitionData")
        fields = {
            "partition": rng.choice(PARTITIONS),
            "state_epoch": rng.choice((0, *EPOCHS)),
            "leader_epoch": rng.choice((-1, 0, *EPOCHS)),
            "start_offset": rng.choice((-1, 0, 5, RECORDS, INT64_MAX, INT64_MIN)),
            "state_batches": self._state_batches(cls) if api == WRITE_SHARE_GROUP_STATE else (),
        }
        wanted = {f.name: fields[f.name] for f in dataclasses.fields(partition)}
        self._send(
            api,
            0,
            group_id=rng.choice((self.group, self.group, "")),
            topics=tuple(
                topic(topic_id=_topic_id(rng), partitions=(partition(**wanted),))
                for _ in range(rng.choice((1, 1, 30)))
            ),
        )

    def _state_batches(self, cls: type) -> tuple[Any, ...]:
        rng = self.rng
        batch = nested(cls, "StateBatch")
        many = rng.choice((1, 3, 100, 100, 3000))
        first = rng.choice((0, 5, -1, INT64_MAX - 10))

        def one(i: int) -> Any:
            start = first + i * rng.choice((0, 1, 3)) if rng.random() < 0.9 else rng.choice(OFFSETS)
            return batch(
                first_offset=_int64(start),
                last_offset=_int64(start + rng.choice((0, 2, 10, -3))),
                delivery_state=rng.choice((0, 1, 2, 4, -1, 127)),
                delivery_count=rng.choice((0, 1, 5, -1, 32767)),
            )

        return tuple(one(i) for i in range(many))

    def step(self) -> None:
        """One hostile request, chosen at random."""
        rng = self.rng
        member = rng.choice(self.members)
        session_epoch = rng.choice(SESSION_EPOCHS)
        rng.choice(
            (
                lambda: self.heartbeat(member, rng.choice(EPOCHS)),
                lambda: self.heartbeat(_member_id(rng), rng.choice(EPOCHS)),  # never joined
                lambda: self.join(rng.choice(STOLEN)),
                lambda: self.join(member, _topic_names(rng)),
                lambda: self.join(member, ("fuzz-sg-unknown", "")),
                lambda: self.heartbeat(_member_id(rng), -1),  # leaves without having joined
                lambda: self.heartbeat(member, -1),
                self.describe,
                lambda: self.share_fetch(member, session_epoch, False),
                lambda: self.share_fetch(member, session_epoch, True),
                lambda: self.share_fetch(rng.choice(STOLEN), session_epoch, True),
                lambda: self.share_acknowledge(member, session_epoch),
                lambda: self.share_acknowledge(rng.choice(STOLEN), session_epoch),
                self.share_state,
            )
        )()


def share_groups(rng: random.Random) -> list[bytes]:
    """Members join one of GROUPS and open share sessions, then up to STEPS hostile
    requests; some close their sessions and leave at the end."""
    episode = Episode(rng)
    for member in episode.members:
        episode.join(member)
    for member in episode.members:
        episode.share_fetch(member, 0, False, episode.group)
    for _ in range(rng.randint(1, STEPS)):
        episode.step()
    for member in episode.members:
        if rng.random() < 0.5:
            episode.share_fetch(member, -1, True, episode.group)
            episode.heartbeat(member, -1)
    return episode.frames
