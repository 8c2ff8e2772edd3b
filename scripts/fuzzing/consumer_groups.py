"""The consumer_groups family: hostile but well-formed KIP-848 conversations.

Each connection is one episode against one of a few groups (GROUPS): members join with
ids they choose themselves (as Kafka 4 clients do), so the conversation can be pipelined
without reading an answer; then, interleaved, ConsumerGroupHeartbeats whose member epochs
are out of order (older once the group has rebalanced, far ahead, negative, 2^31-1), that
use other members' ids or instance ids (stolen, swapped), own partitions that lie (topic
ids that do not exist, huge or duplicated lists), subscribe to thousands of topics or to
regexes that are invalid, enormous or catastrophic for a backtracking engine, have
rebalance timeouts of 0 or 2^31-1, or leave as members that never joined or as static
members without an instance id; ConsumerGroupDescribe of many groups; and OffsetCommit and
OffsetFetch carrying wrong member epochs. Every request decodes: the broker must answer
each with Kafka's error, never with a traceback, a stall or lost data.
"""

from __future__ import annotations

import random
import uuid
from datetime import timedelta
from typing import Any

from gregor.apis.context import build, nested
from gregor.wire.schema import request_type
from gregor.wire.versions import (
    CONSUMER_GROUP_DESCRIBE,
    CONSUMER_GROUP_HEARTBEAT,
    OFFSET_COMMIT,
    OFFSET_FETCH,
)
from tests.kafka_wire import request_frame

FAMILY = "consumer_groups"
GROUPS = tuple(f"fuzz-cg-{i}" for i in range(4))
TOPICS = ("fuzz-0", "fuzz-1")  # created by the runner; the regexes may match them
INSTANCES = tuple(f"fuzz-instance-{i}" for i in range(3))  # few, so they are stolen
INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)
EPOCHS = (1, 2, 3, 7, 1000, INT32_MAX, -3, -1000, INT32_MIN)  # around, ahead, invalid
# Over the broker's bound on a pattern's size (gregor/re2_pattern.py), which RE2 would
# otherwise parse and compile on the event loop for tens of milliseconds.
ENORMOUS = 1 << 20
STEPS = 12  # most hostile requests after the joins


def bad_regex(rng: random.Random) -> str:
    """Invalid (RE2/J refuses), catastrophic for backtracking engines, or enormous."""
    return rng.choice(
        (
            lambda: rng.choice(("(", "[a-", "a**", "(?=x)", "(?<n>a)\\k<n>", "\\", "a{2,1}")),
            lambda: rng.choice(("(a+)+$", "(a|a)*b", "(a|aa)*c", "(.*a){12}", "(x+x+)+y")),
            lambda: rng.choice(("fuzz-.*", ".*", "fuzz-[01]", "__.*")),  # valid ones
            lambda: "a|" * (ENORMOUS // 2),
            lambda: "(" * rng.choice((1000, ENORMOUS)),
            lambda: "a{1000}" * rng.choice((10, 1000)),
            lambda: "".join(rng.choice("ab.*+?|()[]") for _ in range(rng.randrange(1, 2000))),
        )
    )()


def _member_id(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128)))


def _owned(rng: random.Random) -> tuple[tuple[uuid.UUID, list[int]], ...]:
    """Partitions a member cannot hold: unknown topic ids, huge, negative or repeated."""
    lists = (
        lambda: [0],
        lambda: [rng.randrange(-5, 5) for _ in range(rng.randrange(1, 50))],
        lambda: [7] * 2000,
        lambda: list(range(rng.choice((1000, 20_000)))),
        lambda: [INT32_MAX, INT32_MIN, -1],
    )
    topic = uuid.UUID(int=rng.getrandbits(128))
    return tuple(
        (rng.choice((topic, uuid.UUID(int=rng.getrandbits(128)))), rng.choice(lists)())
        for _ in range(rng.choice((1, 2, 50)))
    )


def _topic_names(rng: random.Random) -> tuple[str, ...]:
    many = rng.choice((1, 1000, 3000))
    names = [f"fuzz-cg-missing-{rng.randrange(many)}" for _ in range(many)]
    return (*TOPICS, *names, *rng.sample(("", "__consumer_offsets", "fuzz-0"), 2))


class Episode:
    """One connection's requests against one group."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.group = rng.choice(GROUPS)
        self.version = rng.randint(0, 1)
        self.members = [_member_id(rng) for _ in range(rng.randint(1, 3))]
        self.frames: list[bytes] = []

    def _send(self, api_key: int, version: int, **fields: Any) -> None:
        self.frames.append(
            request_frame(
                api_key, version, len(self.frames), build(request_type(api_key, version), **fields)
            )
        )

    def heartbeat(
        self,
        member_id: str,
        epoch: int,
        *,
        topics: tuple[str, ...] | None = None,
        regex: str | None = None,
        owned: tuple[tuple[uuid.UUID, list[int]], ...] | None = None,
        instance_id: str | None = None,
        rebalance_ms: int = -1,
    ) -> None:
        cls = request_type(CONSUMER_GROUP_HEARTBEAT, self.version)
        partitions = nested(cls, "TopicPartitions")
        self._send(
            CONSUMER_GROUP_HEARTBEAT,
            self.version,
            group_id=self.group,
            member_id=member_id,
            member_epoch=epoch,
            instance_id=instance_id,
            rack_id=None,
            rebalance_timeout=timedelta(milliseconds=rebalance_ms),
            subscribed_topic_names=topics,
            subscribed_topic_regex=regex,
            server_assignor=None,
            topic_partitions=None
            if owned is None
            else tuple(partitions(topic_id=t, partitions=tuple(ps)) for t, ps in owned),
        )

    def join(self, member_id: str, **options: Any) -> None:
        options.setdefault("topics", TOPICS)
        options.setdefault("rebalance_ms", 30_000)
        self.heartbeat(member_id, 0, owned=(), **options)

    def step(self) -> None:
        """One hostile request, chosen at random."""
        rng = self.rng
        member = rng.choice(self.members)
        epoch = rng.choice(EPOCHS)
        instance = rng.choice(INSTANCES)
        rng.choice(
            (
                lambda: self.heartbeat(member, epoch),
                lambda: self.heartbeat(_member_id(rng), epoch, owned=()),  # never joined
                lambda: self.heartbeat(member, epoch, owned=_owned(rng)),
                lambda: self.join(member, instance_id=instance),  # steals or swaps it
                lambda: self.heartbeat(member, epoch, instance_id=rng.choice(INSTANCES)),
                lambda: self.join(member, topics=_topic_names(rng)),
                lambda: self.join(member, topics=None, regex=bad_regex(rng)),
                lambda: self.heartbeat(member, epoch, regex=bad_regex(rng)),
                lambda: self.join(member, rebalance_ms=rng.choice((0, INT32_MAX, -2))),
                lambda: self.heartbeat(_member_id(rng), -1),  # leaves without having joined
                lambda: self.heartbeat(member, -2),  # a static leave without an instance id
                lambda: self.heartbeat(member, -2, instance_id=instance),
                lambda: self.heartbeat(member, -1, instance_id=instance),
                self.describe,
                lambda: self.commit(member, epoch),
                lambda: self.fetch(member, epoch),
            )
        )()

    def describe(self) -> None:
        many = self.rng.choice((1, 100, 2000))
        names = [f"fuzz-cg-{i}" for i in range(many)]
        self._send(
            CONSUMER_GROUP_DESCRIBE,
            self.rng.randint(0, 1),
            group_ids=(*GROUPS, "", *names),
            include_authorized_operations=self.rng.random() < 0.5,
        )

    def commit(self, member_id: str, epoch: int) -> None:
        cls = request_type(OFFSET_COMMIT, 9)
        partition = build(
            nested(cls, "OffsetCommitRequestPartition"),
            partition_index=self.rng.randrange(-1, 3),
            committed_offset=self.rng.choice((0, 5, -1, 2**63 - 1)),
            committed_leader_epoch=-1,
            committed_metadata="",
        )
        topic = nested(cls, "OffsetCommitRequestTopic")
        self._send(
            OFFSET_COMMIT,
            9,
            group_id=self.group,
            generation_id_or_member_epoch=epoch,
            member_id=member_id,
            group_instance_id=self.rng.choice((None, *INSTANCES)),
            topics=tuple(topic(name=name, partitions=(partition,)) for name in TOPICS),
        )

    def fetch(self, member_id: str, epoch: int) -> None:
        cls = request_type(OFFSET_FETCH, 9)
        topics = tuple(
            nested(cls, "OffsetFetchRequestTopics")(name=name, partition_indexes=(0, 1))
            for name in TOPICS
        )
        group = nested(cls, "OffsetFetchRequestGroup")
        self._send(
            OFFSET_FETCH,
            9,
            groups=(
                group(group_id=self.group, member_id=member_id, member_epoch=epoch, topics=topics),
            ),
            require_stable=self.rng.random() < 0.5,
        )


def consumer_groups(rng: random.Random) -> list[bytes]:
    """Members join one of GROUPS, then up to STEPS hostile requests; some leave at the end."""
    episode = Episode(rng)
    for member in episode.members:
        episode.join(member, instance_id=rng.choice((None, *INSTANCES)))
    for _ in range(rng.randint(1, STEPS)):
        episode.step()
    for member in episode.members:
        if rng.random() < 0.5:
            episode.heartbeat(member, -1)
    return episode.frames
