"""Topic-level rules shared by every controller: legal names and request errors."""

from __future__ import annotations

import re
from collections.abc import Container, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from gregor.controller.metadata.topic_names import INTERNAL_TOPICS, unify_collision_chars
from gregor.log.config import validate_topic_configs
from gregor.wire.errors import KafkaError

if TYPE_CHECKING:
    from gregor.controller.base import NewPartitions
    from gregor.controller.metadata.cache import TopicInfo

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")


class TopicError(KafkaError):
    """A topic operation that fails with a Kafka error code."""


def check_topic_name(name: str) -> None:
    if not name:
        raise TopicError(
            ErrorCode.invalid_topic_exception, "Topic name is illegal, it can't be empty"
        )
    if name in (".", ".."):
        raise TopicError(ErrorCode.invalid_topic_exception, 'Topic name cannot be "." or ".."')
    if len(name) > MAX_NAME_LENGTH:
        raise TopicError(
            ErrorCode.invalid_topic_exception,
            f"Topic name is illegal, it can't be longer than {MAX_NAME_LENGTH} characters",
        )
    if not _LEGAL.fullmatch(name):
        raise TopicError(
            ErrorCode.invalid_topic_exception,
            f"Topic name {name!r} is illegal, it contains a character other than "
            "ASCII alphanumerics, '.', '_' and '-'",
        )


def collision_error(name: str, existing: str) -> TopicError:
    return TopicError(
        ErrorCode.invalid_topic_exception,
        f"Topic '{name}' collides with existing topic: {existing}",
    )


_UNIFIED_INTERNAL = {unify_collision_chars(t): t for t in INTERNAL_TOPICS}


def check_client_creatable(name: str) -> None:
    """Internal topics are created by the broker itself, with their own settings: a client may
    not create one (nor a name that would collide with one) and choose its shape."""
    if name in INTERNAL_TOPICS:
        raise TopicError(
            ErrorCode.invalid_topic_exception,
            f"Topic '{name}' is an internal topic: the broker creates it itself.",
        )
    internal = _UNIFIED_INTERNAL.get(unify_collision_chars(name))
    if internal is not None:
        raise collision_error(name, internal)


def check_client_deletable(name: str) -> None:
    if name in INTERNAL_TOPICS:
        raise TopicError(ErrorCode.invalid_topic_exception, f"Cannot delete internal topic {name}.")


def check_replicas(replicas: Sequence[int], brokers: Container[int], count: int | None) -> None:
    """One partition's replicas as a client chose them (CreateTopics, CreatePartitions,
    AlterPartitionReassignments): not empty, registered brokers, each once, and as many as
    the topic's other partitions have (`count`, when known)."""
    if not replicas:
        raise TopicError(
            ErrorCode.invalid_replica_assignment,
            "The manual partition assignment includes an empty replica list.",
        )
    seen: set[int] = set()
    for broker in sorted(replicas):
        if broker not in brokers:
            raise TopicError(
                ErrorCode.invalid_replica_assignment,
                f"The manual partition assignment includes broker {broker}, but no such "
                "broker is registered.",
            )
        if broker in seen:
            raise TopicError(
                ErrorCode.invalid_replica_assignment,
                f"The manual partition assignment includes the broker {broker} more than once.",
            )
        seen.add(broker)
    if count is not None and len(replicas) != count:
        raise TopicError(
            ErrorCode.invalid_replica_assignment,
            f"The manual partition assignment includes a partition with {len(replicas)} "
            "replica(s), but this is not consistent with previous partitions, which have "
            f"{count} replica(s).",
        )


def check_assignments(assignments: Mapping[int, Sequence[int]], brokers: Container[int]) -> None:
    """A new topic's assignment: partitions 0..n-1, each with valid replicas, all as many."""
    count = None
    for replicas in assignments.values():
        check_replicas(replicas, brokers, count)
        count = len(replicas)
    if sorted(assignments) != list(range(len(assignments))):
        raise TopicError(
            ErrorCode.invalid_replica_assignment,
            "partitions should be a consecutive 0-based integer sequence",
        )


def check_partition_increase(topic: TopicInfo, new: NewPartitions, brokers: Container[int]) -> None:
    """CreatePartitions' rules: the new count is an increase, and the replicas the client
    chose (if it did) are valid, one list per new partition, each as long as partition 0's."""
    current = len(topic.partitions)
    if new.count < current:
        raise TopicError(
            ErrorCode.invalid_partitions,
            f"The topic {topic.name} currently has {current} partition(s); {new.count} "
            "would not be an increase.",
        )
    if new.count == current:
        raise TopicError(ErrorCode.invalid_partitions, f"Topic already has {current} partition(s).")
    if new.assignments is None:
        return
    if len(new.assignments) != new.count - current:
        raise TopicError(
            ErrorCode.invalid_replica_assignment,
            f"Attempted to add {new.count - current} additional partition(s), but "
            f"only {len(new.assignments)} assignment(s) were specified.",
        )
    for replicas in new.assignments:
        check_replicas(replicas, brokers, len(topic.partitions[0].replicas))


def check_configs(configs: Mapping[str, str]) -> None:
    try:
        validate_topic_configs(configs)
    except ValueError as e:
        raise TopicError(ErrorCode.invalid_config, str(e)) from None


# Kafka's controller refuses a request that would create more partitions than this in all
# (MAX_PARTITIONS_PER_BATCH), before building any: a count of 2^31-1 would otherwise
# build that many partitions in memory before anything else could refuse it.
MAX_PARTITIONS_PER_REQUEST = 10_000


def excessive_partitions(counts: Iterable[int]) -> TopicError | None:
    """The error for every topic of a request creating ``counts`` new partitions, if too many."""
    if sum(max(count, 0) for count in counts) <= MAX_PARTITIONS_PER_REQUEST:
        return None
    return TopicError(
        ErrorCode.policy_violation, "Excessively large number of partitions per request."
    )
