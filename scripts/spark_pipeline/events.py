"""The pipeline's input: a deterministic stream of JSON events, and the generator that
produces them to a topic.

Event ``i`` is the same in every run, so a run that appends events continues from the
topic's record count and the windowed results can be computed independently (``expected``).
Event time advances STEP_MS per event, and each event is up to MAX_DISORDER_MS older than its
position says: events arrive out of event-time order, but never later than the pipeline's
watermark delay allows (see LATENESS_BOUND_MS).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

KINDS = ("view", "click", "purchase")
USERS = 50
STEP_MS = 100  # ten events per second of event time
MAX_DISORDER_MS = 5_000
EPOCH_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z, where event time starts
# The generator waits for every event sent so far to be acknowledged after each FLUSH_EVERY
# events, so the partitions of the topic never differ by more than that many events.
FLUSH_EVERY = 100
# How much older than the newest event Spark has seen an arriving event can be: a partly
# acknowledged chunk of FLUSH_EVERY events, plus the disorder. The watermark delay must be
# larger, or Spark drops events as late.
LATENESS_BOUND_MS = FLUSH_EVERY * STEP_MS + MAX_DISORDER_MS
EVENT_PARTITIONS = 3
TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class Event:
    id: int
    ts: int  # event time, epoch milliseconds
    user: str
    kind: str
    amount: int

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()


def event(i: int) -> Event:
    """Event number ``i``: a fixed function of i (Knuth's multiplicative hash for the
    pseudo-random parts)."""
    mixed = (i * 2_654_435_761) % (1 << 32)
    return Event(
        id=i,
        ts=EPOCH_MS + i * STEP_MS - mixed % MAX_DISORDER_MS,
        user=f"user-{mixed % USERS}",
        kind=KINDS[(mixed >> 8) % len(KINDS)],
        amount=1 + (mixed >> 16) % 100,
    )


def ensure_topic(bootstrap: str, topic: str, partitions: int, config: dict[str, str]) -> None:
    """Create the topic unless it exists (with one replica: the local single broker)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic in admin.list_topics(timeout=TIMEOUT_S).topics:
        return
    future = admin.create_topics([NewTopic(topic, partitions, 1, config=config)])[topic]
    try:
        future.result(TIMEOUT_S)
    except KafkaException as e:
        if e.args[0].name() != "TOPIC_ALREADY_EXISTS":
            raise


def record_count(bootstrap: str, topic: str) -> int:
    """How many records the topic holds (the sum of its partitions' end offsets): the next
    event's number, since the generator writes nothing else there."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "spark-pipeline-count"})
    try:
        partitions = consumer.list_topics(topic, timeout=TIMEOUT_S).topics[topic].partitions
        return sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), TIMEOUT_S)[1]
            for p in partitions
        )
    finally:
        consumer.close()


def produce_events(bootstrap: str, topic: str, first: int, count: int, rate: float = 0) -> None:
    """Send events first..first+count-1 keyed by user, acks=all and idempotent; ``rate``
    (events per second, 0 for as fast as possible) paces a live demo."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5}
    )
    errors: list[str] = []

    def delivered(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(str(err))

    started = time.monotonic()
    for n, i in enumerate(range(first, first + count)):
        e = event(i)
        producer.produce(topic, e.to_json(), e.user.encode(), on_delivery=delivered)
        if (i + 1) % FLUSH_EVERY == 0:
            _flush(producer)
        if rate:
            time.sleep(max(0.0, started + (n + 1) / rate - time.monotonic()))
        producer.poll(0)
    _flush(producer)
    if errors:
        raise KafkaException(f"{len(errors)} events not delivered, first: {errors[0]}")


def _flush(producer: Producer) -> None:
    if producer.flush(TIMEOUT_S) != 0:
        raise KafkaException(f"events not acknowledged within {TIMEOUT_S:.0f}s")
