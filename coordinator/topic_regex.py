"""Regex subscriptions of consumer groups (KIP-848's SubscribedTopicRegex), resolved by the
coordinator against the cluster's topic names as Kafka 4.1's GroupMetadataManager does:
RE2/J syntax, a full match of each name (internal topics included, as Kafka's scan of its
metadata image), the topics the member may not DESCRIBE left out, each resolution stored
as a ConsumerGroupRegularExpression record (type 16: topics, version, timestamp) and
tombstoned once no member uses the regex.

Kafka resolves off the heartbeat, in the background, at most every 10 s per group
(REGEX_BATCH_REFRESH_INTERVAL_MS), when a regex is unresolved or the metadata has new
topics, and bumps the group epoch when a result changes the topics. Gregor resolves on the
heartbeat itself (RE2 over the in-memory names is cheap): a regex new to the group is
resolved at once, with the group's others (one rebalance), not at the next batch; the
refresh for new topics keeps Kafka's 10 s batch, so a burst of created topics costs one
rebalance. A deleted topic needs no refresh: it leaves the subscribed topics' metadata at
once (``consumer_membership.subscribed_partitions``) and its name the resolution at the next.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable

from kio.schema.errors import ErrorCode

from gregor import re2_pattern
from gregor.coordinator.consumer_group import ConsumerGroup
from gregor.coordinator.consumer_records import (
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    encode_key,
    encode_value,
)
from gregor.coordinator.partitions import Records
from gregor.wire.errors import KafkaError

REGEX_BATCH_REFRESH_INTERVAL_MS = 10_000

# The topic names a member may DESCRIBE, of those given (None: no authorizer, all of them).
Describable = Callable[[Collection[str]], Collection[str]]


def validate(regex: str) -> None:
    """Kafka's throwIfRegularExpressionIsInvalid."""
    error = re2_pattern.syntax_error(regex)
    if error is not None:
        raise KafkaError(
            ErrorCode.invalid_regular_expression,
            f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {error}.",
        )


def resolve(regexes: Iterable[str], names: Iterable[str]) -> dict[str, frozenset[str]]:
    """The names each regex matches whole (a regex that does not compile matches none:
    every regex was validated when a member brought it)."""
    patterns = [(r, re2_pattern.compile(r)) for r in regexes]
    matched: dict[str, set[str]] = {r: set() for r, _ in patterns}
    for name in names:
        for regex, pattern in patterns:
            if pattern is not None and pattern.matches(name):
                matched[regex].add(name)
    return {regex: frozenset(topics) for regex, topics in matched.items()}


def update(
    group: ConsumerGroup,
    names: Collection[str],
    topics_added: int,
    now_ms: int,
    describable: Describable | None,
) -> tuple[bool, Records]:
    """Bring the group's resolutions up to date with its members' regexes and the topic
    names (``topics_added``: the metadata cache's count of topics it learned of, which
    tells whether there are new ones). Returns whether a resolution's topics changed
    (the group epoch must be bumped) and the records of the change."""
    in_use = group.subscribed_regexes()
    records = forget_unused(group)
    if not in_use:
        return False, records
    unresolved = in_use.keys() - group.resolved_regexes.keys()
    due = topics_added > group.regex_topics_added and (
        now_ms > group.last_regex_refresh_ms() + REGEX_BATCH_REFRESH_INTERVAL_MS
    )
    if not unresolved and not due:
        return False, records
    resolved = resolve(in_use, names)
    if describable is not None:
        allowed = set(describable({t for topics in resolved.values() for t in topics}))
        resolved = {regex: topics & allowed for regex, topics in resolved.items()}
    changed = False
    for regex, topics in resolved.items():
        value = ConsumerGroupRegularExpressionValue(tuple(sorted(topics)), topics_added, now_ms)
        previous = group.resolved_regexes.get(regex)
        changed |= previous is None or previous.topics != value.topics
        group.resolved_regexes[regex] = value
        records.append(
            (
                encode_key(ConsumerGroupRegularExpressionKey(group.group_id, regex)),
                encode_value(value),
            )
        )
    group.regex_topics_added = topics_added
    return changed, records


def forget_unused(group: ConsumerGroup) -> Records:
    """Tombstones of the resolutions of regexes no member subscribes to any more."""
    in_use = group.subscribed_regexes()
    unused = [r for r in group.resolved_regexes if r not in in_use]
    for regex in unused:
        del group.resolved_regexes[regex]
    return [
        (encode_key(ConsumerGroupRegularExpressionKey(group.group_id, regex)), None)
        for regex in unused
    ]
