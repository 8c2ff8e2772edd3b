"""A confluent-kafka consume-transform-produce application, run as its own process so a test
can kill -9 it: the pattern of confluent-kafka-python's eos-transactions example (one
transaction per consumed batch, the batch's offsets sent to it with the consumer's group
metadata, abort and rewind to the committed offsets on an abortable error).

Usage: python -m compat_tests.txn_copy_confluent BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID
HOLD_FILE
stdout: the JSON events of the Java driver's txn-copy ("committed", "aborted", "caught-up",
"holding": while HOLD_FILE exists, a transaction flushes its copies to the log and waits there
to be killed), and {} from an idle loop;
exits 2 on a fatal error (fenced), 3 on one it cannot abort (the caller restarts it).
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

# As many records per transaction as the Java driver's poll gives (max.poll.records): each
# transaction costs its EndTxn and markers (on the 2-core machine 200 a transaction copied
# about 1,500 records/s, 500 about 3,000).
BATCH = 500
# Each call's bound: one that runs out exits (3) or fails the app, and the test restarts it.
# The test takes an app silent for longer (HANG_S in compat_tests/test_transactions_loop.py)
# for hung, so this bound also sets what a librdkafka hang costs.
TIMEOUT_S = 10.0
# A restarted broker is dialled again within a second, as by the Java client (librdkafka's
# default backs off up to 10 s, which a leader moving back to it would wait out).
RECONNECT = {"reconnect.backoff.max.ms": 1000}


def emit(event: dict[str, object]) -> None:
    print(json.dumps(event), flush=True)


def caught_up(consumer: Consumer, input_topic: str) -> int:
    """The sum of the input's end offsets if every partition is assigned here and committed
    up to its end, else -1."""
    assigned = consumer.assignment()
    metadata = consumer.list_topics(input_topic, TIMEOUT_S).topics[input_topic]
    if len(assigned) != len(metadata.partitions):
        return -1
    end = 0
    for tp in consumer.committed(assigned, TIMEOUT_S):
        high = consumer.get_watermark_offsets(tp, TIMEOUT_S, cached=False)[1]
        if tp.offset < high:
            return -1
        end += high
    return end


def rewind(consumer: Consumer) -> None:
    """Resume from the group's committed offsets after an abort."""
    for tp in consumer.committed(consumer.assignment(), TIMEOUT_S):
        consumer.seek(TopicPartition(tp.topic, tp.partition, max(tp.offset, OFFSET_BEGINNING)))


def main(
    bootstrap: str, input_topic: str, output_topic: str, group: str, txn_id: str, hold_file: str
) -> int:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 3000,
            "heartbeat.interval.ms": 500,
            **RECONNECT,
        }
    )
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, **RECONNECT})
    producer.init_transactions(TIMEOUT_S)
    consumer.subscribe([input_topic])
    total = 0
    while True:
        batch = [m for m in consumer.consume(BATCH, 0.2) if m.error() is None]
        if not batch:
            end = caught_up(consumer, input_topic)
            # An idle loop says it is alive: the test's supervisor restarts a silent app.
            emit({"event": "caught-up", "total": total, "end": end} if end >= 0 else {})
            continue
        try:
            producer.begin_transaction()
            offsets: dict[tuple[str, int], int] = {}
            for m in batch:
                producer.produce(output_topic, key=m.key(), value=m.value())
                offsets[(m.topic(), m.partition())] = m.offset() + 1
            if Path(hold_file).exists():
                producer.flush(TIMEOUT_S)
                emit({"event": "holding"})
                threading.Event().wait()
            producer.send_offsets_to_transaction(
                [TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                consumer.consumer_group_metadata(),
                TIMEOUT_S,
            )
            producer.commit_transaction(TIMEOUT_S)
            total += len(batch)
            emit({"event": "committed", "records": len(batch), "total": total})
        except KafkaException as e:
            error = e.args[0]
            if not error.txn_requires_abort():
                emit({"op": "fenced" if error.fatal() else "commit", "error": str(error)})
                return 2 if error.fatal() else 3
            emit({"event": "aborted", "error": str(error)})
            try:
                producer.abort_transaction(TIMEOUT_S)
            except KafkaException as abort_failed:
                emit({"op": "abort", "error": str(abort_failed.args[0])})
                return 3
            rewind(consumer)


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:7]))
