"""Transactions on a compacted topic with confluent-kafka (librdkafka): once the broker's log
cleaner has run over committed values and aborted overwrites of them, read_committed and
read_uncommitted consumers both read exactly the committed latest values (an aborted write
neither shadowed a committed one in the cleaner's map nor survived the pass). A few seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.broker import BrokerProcess
from compat_tests.matrix import compat
from compat_tests.test_transactions_confluent import producer, read_records
from gregor.log.checkpoint import read_checkpoint
from gregor.log.cleaner_manager import CLEANER_OFFSET_CHECKPOINT

pytestmark = compat("confluent", "transactions")

# A cleaner that looks for dirty logs every 100 ms instead of every 15 s.
BROKER_OVERRIDES = {"log.cleaner.backoff.ms": "100"}
TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": "1024",  # each filler batch below rolls a segment
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "1000",
}
KEYS = 10
FILLERS = 6
TIMEOUT = 60.0


def cleaned_up_to(broker: BrokerProcess, topic: str) -> int:
    """Where the next cleaning pass of the partition starts (-1 before the first)."""
    checkpoint = read_checkpoint(broker.data_dir / CLEANER_OFFSET_CHECKPOINT)
    return checkpoint.get((topic, 0), -1)


# One broker: the test watches the cleaner checkpoint in that broker's log directory.
@pytest.mark.parametrize("broker", ["single"], indirect=True)
def test_cleaning_keeps_committed_values_and_drops_aborted_ones(
    broker: BrokerProcess, new_topic: Callable[[str], str]
) -> None:
    topic = new_topic("txn-compacted")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=TOPIC_CONFIG)])[topic].result(TIMEOUT)
    p = producer(broker, f"txn-{topic}")
    committed = {b"k%d" % i: b"committed-%d" % i for i in range(KEYS)}
    p.begin_transaction()
    for key, value in committed.items():
        p.produce(topic, key=key, value=value, partition=0)
    p.commit_transaction(TIMEOUT)
    p.begin_transaction()
    for i, key in enumerate(committed):
        p.produce(topic, key=key, value=b"aborted-%d" % i, partition=0)
    p.flush(TIMEOUT)  # the aborted records are in the log, not just in the client
    p.abort_transaction(TIMEOUT)
    # Committed fillers, a batch each, roll the aborted data out of the active segment.
    fillers = {b"f%d" % i: b"filler-%d-" % i + b"x" * 600 for i in range(FILLERS)}
    p.begin_transaction()
    for key, value in fillers.items():
        p.produce(topic, key=key, value=value, partition=0)
        p.flush(TIMEOUT)
    p.commit_transaction(TIMEOUT)

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "watermarks"})
    try:
        # Offsets: the committed records and their marker, then the aborted ones and theirs.
        past_abort = 2 * (KEYS + 1)
        end = consumer.get_watermark_offsets(TopicPartition(topic, 0), TIMEOUT)[1]
        assert end > past_abort + FILLERS
    finally:
        consumer.close()
    deadline = time.monotonic() + TIMEOUT
    while cleaned_up_to(broker, topic) < past_abort:
        assert time.monotonic() < deadline, "the cleaner never passed the aborted transaction"
        time.sleep(0.1)

    expected = sorted({**committed, **fillers}.items())
    for isolation in ("read_committed", "read_uncommitted"):
        seen = read_records(broker, topic, isolation, partitions=1)
        assert not [value for _, value in seen if value.startswith(b"aborted")], isolation
        assert sorted(seen) == expected, isolation
