"""The admin_mega family: mega admin requests and topic churn on the Kafka port.

Each episode is a short admin conversation, answered or refused, that must neither stall
the well-behaved client (the canary's p99) nor grow the broker (peak RSS): a topic of up to
10,000 partitions created, grown by CreatePartitions and deleted; requests over the
10,000-partition limit (2^31-1 partitions, many topics that add up past it, a huge
replication factor), which are refused before anything is built; hundreds of small topics
created and deleted in one request each; and a client that sends a big create and leaves
at once (the broker finishes it; the episode deletes it from another connection). Every
topic an episode makes is deleted before it ends, so churn, not accumulation, is measured.
"""

from __future__ import annotations

import datetime
import random
import socket
import time
from typing import Any

from gregor.apis.context import build, nested
from gregor.wire.schema import request_type
from gregor.wire.versions import CREATE_PARTITIONS, CREATE_TOPICS, DELETE_TOPICS, METADATA
from tests.kafka_wire import WireClient, create_topics_request, request_frame

FAMILY = "admin_mega"
IO_TIMEOUT_S = 300.0  # a 10,000-partition create on a loaded machine takes seconds
GONE_WAIT_S = 120.0  # how long an abandoned create may take to show up
INT32_MAX = 2**31 - 1
TOPIC_EXISTS = 36


def _name(rng: random.Random) -> str:
    return f"fuzz-mega-{rng.randrange(1 << 40):x}"


def _create(client: WireClient, *specs: tuple[str, int], validate_only: bool = False) -> Any:
    request = create_topics_request(
        *((name, count, {}) for name, count in specs), validate_only=validate_only
    )
    return client.call(CREATE_TOPICS, 7, request).topics


def _grow(client: WireClient, name: str, count: int, validate_only: bool = False) -> Any:
    cls = request_type(CREATE_PARTITIONS, 3)
    entry = nested(cls, "CreatePartitionsTopic")(name=name, count=count, assignments=None)
    request = build(
        cls,
        topics=(entry,),
        timeout=datetime.timedelta(seconds=120),
        validate_only=validate_only,
    )
    return client.call(CREATE_PARTITIONS, 3, request).results


def _delete(client: WireClient, *names: str) -> Any:
    cls = request_type(DELETE_TOPICS, 6)
    state = nested(cls, "DeleteTopicState")
    request = cls(
        timeout=datetime.timedelta(seconds=120),
        topics=tuple(state(name=name, topic_id=None) for name in names),
    )
    return client.call(DELETE_TOPICS, 6, request).responses


def _exists(client: WireClient, name: str) -> bool:
    cls = request_type(METADATA, 12)
    entry = nested(cls, "MetadataRequestTopic")(name=name, topic_id=None)
    request = build(
        cls,
        topics=(entry,),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    return client.call(METADATA, 12, request).topics[0].error_code == 0


def churn(port: int, rng: random.Random) -> int:
    """A topic of up to 10,000 partitions created, maybe grown, then deleted."""
    client = WireClient(port, timeout=IO_TIMEOUT_S)
    name = _name(rng)
    count = rng.choice((1, 100, 1000, 5000, 10_000))
    sent = 1
    try:
        if rng.random() < 0.2:
            _create(client, (name, count), validate_only=True)
            return sent
        if _create(client, (name, count))[0].error_code != 0:
            return sent
        if rng.random() < 0.5:
            grown = min(count + rng.choice((1, 1000, 10_000)), 10_000 + count)
            _grow(client, name, grown, validate_only=rng.random() < 0.3)
            sent += 1
        _delete(client, name)
        return sent + 1
    finally:
        client.close()


def over_the_limit(port: int, rng: random.Random) -> int:
    """Requests the 10,000-partition limit refuses before building anything."""
    client = WireClient(port, timeout=IO_TIMEOUT_S)
    try:
        kind = rng.randrange(4)
        if kind == 0:
            _create(client, (_name(rng), rng.choice((10_001, 1 << 20, INT32_MAX))))
        elif kind == 1:  # a few topics that add up past the limit
            _create(client, *((_name(rng), 4000) for _ in range(3)))
        elif kind == 2:  # a replication factor no single broker can meet
            request = create_topics_request((_name(rng), 10, {}), replication_factor=32767)
            client.call(CREATE_TOPICS, 7, request)
        else:  # a real topic asked to grow to 2^31-1
            name = _name(rng)
            if _create(client, (name, 1))[0].error_code == 0:
                _grow(client, name, rng.choice((10_002, INT32_MAX)))
                _delete(client, name)
                return 3
        return 1
    finally:
        client.close()


def many_small(port: int, rng: random.Random) -> int:
    """Hundreds of small topics in one CreateTopics, then one DeleteTopics of them all."""
    client = WireClient(port, timeout=IO_TIMEOUT_S)
    try:
        names = [_name(rng) for _ in range(rng.choice((50, 200)))]
        partitions = rng.choice((1, 10, 50))
        topics = _create(client, *((name, partitions) for name in names))
        created = [t.name for t in topics if t.error_code == 0]
        if created:
            _delete(client, *created)
        return 2
    finally:
        client.close()


def abandoned(port: int, rng: random.Random) -> int:
    """A big create whose client leaves at once; the broker completes it all the same, and
    another connection deletes it once it exists."""
    name = _name(rng)
    request = create_topics_request((name, rng.choice((1000, 10_000)), {}))
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(request_frame(CREATE_TOPICS, 7, 1, request))
    except OSError:
        return 0
    client = WireClient(port, timeout=IO_TIMEOUT_S)
    try:
        deadline = time.monotonic() + GONE_WAIT_S
        while time.monotonic() < deadline:
            # Queued behind the create (topic changes are serialised): deletes it once made.
            if _delete(client, name)[0].error_code == 0:
                break
            if not _exists(client, name):
                time.sleep(0.5)
        return 2
    finally:
        client.close()


EPISODES = ((churn, 0.5), (over_the_limit, 0.2), (many_small, 0.2), (abandoned, 0.1))


def attack(port: int, rng: random.Random) -> int:
    """One episode against the Kafka port; the requests it sent."""
    episode = rng.choices([e for e, _ in EPISODES], [w for _, w in EPISODES])[0]
    try:
        return episode(port, rng)
    except OSError:
        return 0  # the broker closed or stalled the connection: the runner's watch judges


def placeholder(rng: random.Random) -> list[bytes]:
    """The family's entry in frames.FAMILIES: episodes are run by ``attack`` (runner.
    fuzz_worker), each waiting for its answers, not as frames sent blind."""
    return []
