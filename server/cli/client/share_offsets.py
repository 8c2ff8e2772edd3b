"""A share group's start offsets (KIP-932) through its coordinator, as Kafka's Admin
``listShareGroupOffsets``, ``alterShareGroupOffsets`` and ``deleteShareGroupOffsets`` ask for
them: DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteShareGroupOffsets v0."""

from __future__ import annotations

from dataclasses import dataclass

from gregor.server.cli.client.connection import Client, ClientError, schema
from gregor.server.cli.client.records import TopicPartition, by_topic, error_name

DESCRIBE_SHARE_GROUP_OFFSETS, ALTER_SHARE_GROUP_OFFSETS, DELETE_SHARE_GROUP_OFFSETS = 90, 91, 92


@dataclass(frozen=True, slots=True)
class StartOffset:
    offset: int | None  # None: the share-partition has no start offset yet
    leader_epoch: int


def start_offsets(client: Client, group: str) -> dict[TopicPartition, StartOffset]:
    """The start offset of every share-partition the group has state for."""
    request_group = schema(DESCRIBE_SHARE_GROUP_OFFSETS, 0, "DescribeShareGroupOffsetsRequestGroup")
    request = schema(DESCRIBE_SHARE_GROUP_OFFSETS, 0)(
        groups=(request_group(group_id=group, topics=None),)
    )
    (described,) = client.call_coordinator(group, request).groups
    if described.error_code.value != 0:
        raise ClientError(f"group {group!r}: {error_name(described.error_code)}")
    offsets = {}
    for t in described.topics:
        for p in t.partitions:
            if p.error_code.value != 0:
                raise ClientError(f"{t.topic_name}-{p.partition_index}: {error_name(p.error_code)}")
            start = None if p.start_offset < 0 else p.start_offset
            offsets[(t.topic_name, p.partition_index)] = StartOffset(start, p.leader_epoch)
    return offsets


def alter_start_offsets(client: Client, group: str, offsets: dict[TopicPartition, int]) -> None:
    """Set the group's start offsets (the group must be Empty)."""
    partition = schema(ALTER_SHARE_GROUP_OFFSETS, 0, "AlterShareGroupOffsetsRequestPartition")
    topic = schema(ALTER_SHARE_GROUP_OFFSETS, 0, "AlterShareGroupOffsetsRequestTopic")
    request = schema(ALTER_SHARE_GROUP_OFFSETS, 0)(
        group_id=group,
        topics=tuple(
            topic(
                topic_name=t,
                partitions=tuple(
                    partition(partition_index=p, start_offset=offsets[(t, p)]) for p in ps
                ),
            )
            for t, ps in by_topic(offsets).items()
        ),
    )
    answer = client.call_coordinator(group, request)
    if answer.error_code.value != 0:
        raise ClientError(f"group {group!r}: {error_name(answer.error_code)}")
    for t in answer.responses:
        for p in t.partitions:
            if p.error_code.value != 0:
                raise ClientError(
                    f"reset of {t.topic_name}-{p.partition_index}: {error_name(p.error_code)}"
                )


def delete_start_offsets(client: Client, group: str, topics: list[str]) -> dict[str, str | None]:
    """Forget the group's state for the topics: the error name per topic (None: deleted)."""
    topic = schema(DELETE_SHARE_GROUP_OFFSETS, 0, "DeleteShareGroupOffsetsRequestTopic")
    request = schema(DELETE_SHARE_GROUP_OFFSETS, 0)(
        group_id=group, topics=tuple(topic(topic_name=t) for t in topics)
    )
    answer = client.call_coordinator(group, request)
    if answer.error_code.value != 0:
        raise ClientError(f"group {group!r}: {error_name(answer.error_code)}")
    return {
        t.topic_name: None if t.error_code.value == 0 else error_name(t.error_code)
        for t in answer.responses
    }
