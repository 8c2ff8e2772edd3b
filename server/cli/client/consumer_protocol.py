"""The consumer protocol's member metadata (ConsumerProtocolSubscription) and assignment
(ConsumerProtocolAssignment) inside JoinGroup and SyncGroup: an int16 version, then the
body. Every later version extends version 0's fields at the end, so version 0's schema
reads the topics and partitions of any version."""

from __future__ import annotations

import struct
from collections import defaultdict
from collections.abc import Iterable

from kio.schema.consumer_protocol_assignment.v0 import data as assignment_v0
from kio.schema.consumer_protocol_subscription.v0 import data as subscription_v0
from kio.schema.types import TopicName
from kio.static.primitive import i32

from gregor.wire.schema import SchemaDecodeError, decode, encode

PROTOCOL_TYPE = "consumer"
_VERSION = struct.Struct(">h")
_V0 = _VERSION.pack(0)

TopicPartition = tuple[str, int]


def encode_subscription(topics: Iterable[str]) -> bytes:
    body = subscription_v0.ConsumerProtocolSubscription(topics=tuple(sorted(topics)))
    return _V0 + encode(body)


def subscribed_topics(metadata: bytes) -> list[str]:
    """The topics of a member's subscription; none for an unreadable one."""
    if len(metadata) < _VERSION.size:
        return []
    try:
        body = decode(subscription_v0.ConsumerProtocolSubscription, metadata, _VERSION.size)
    except SchemaDecodeError:
        return []
    return list(body.topics)


def encode_assignment(partitions: Iterable[TopicPartition]) -> bytes:
    topics: dict[str, list[i32]] = defaultdict(list)
    for topic, partition in sorted(partitions):
        topics[topic].append(i32(partition))
    body = assignment_v0.ConsumerProtocolAssignment(
        assigned_partitions=tuple(
            assignment_v0.TopicPartition(topic=TopicName(t), partitions=tuple(ps))
            for t, ps in topics.items()
        )
    )
    return _V0 + encode(body)


def assigned_partitions(assignment: bytes) -> list[TopicPartition]:
    """The partitions of an assignment; none for an empty or unreadable one (a member of a
    group of another protocol type, or one not yet synced)."""
    if len(assignment) < _VERSION.size:
        return []
    try:
        body = decode(assignment_v0.ConsumerProtocolAssignment, assignment, _VERSION.size)
    except SchemaDecodeError:
        return []
    return sorted((t.topic, p) for t in body.assigned_partitions for p in t.partitions)


def range_assign(
    subscriptions: dict[str, list[str]], partition_counts: dict[str, int]
) -> dict[str, list[TopicPartition]]:
    """The range assignor (Kafka's default before 3.0, still one of its defaults): each
    topic's partitions in order, split into contiguous ranges over the members subscribed
    to it in member id order, the first members taking one more when it does not divide."""
    assignment: dict[str, list[TopicPartition]] = {member: [] for member in subscriptions}
    for topic, count in sorted(partition_counts.items()):
        members = sorted(m for m, topics in subscriptions.items() if topic in topics)
        if not members:
            continue
        share, extra = divmod(count, len(members))
        start = 0
        for i, member in enumerate(members):
            size = share + (1 if i < extra else 0)
            assignment[member] += [(topic, p) for p in range(start, start + size)]
            start += size
    return assignment
