"""What the pipeline's consumers see, and what they should see.

``read_results`` is the topic sink's consumer view: every record of the results topic,
one per key (the sink is at-least-once; a replayed micro-batch repeats records with the
same key and value). ``expected_windows`` computes the same results from the generator's
events without Spark.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime

from confluent_kafka import Consumer, TopicPartition

from .events import event
from .job import WATERMARK_DELAY_S, WINDOW_S

TIMEOUT_S = 30.0

Window = dict[str, object]  # window_start, window_end, kind, events, amount


@dataclass
class ResultsView:
    windows: dict[str, Window] = field(default_factory=dict)  # by record key
    records: int = 0
    duplicates: int = 0  # records repeating an earlier record's key and value
    conflicts: list[str] = field(default_factory=list)  # keys seen with different values


def read_results(bootstrap: str, topic: str) -> ResultsView:
    """Every record of ``topic`` up to its current end, folded by key."""
    view = ResultsView()
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "spark-pipeline-view",
            "enable.auto.commit": False,
        }
    )
    try:
        metadata = consumer.list_topics(topic, timeout=TIMEOUT_S).topics[topic]
        ends = {}
        for p in metadata.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), TIMEOUT_S)
            if high > low:
                ends[p] = high
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        while ends:
            message = consumer.poll(TIMEOUT_S)
            if message is None:
                raise TimeoutError(f"{topic}: no record within {TIMEOUT_S:.0f}s, short of {ends}")
            if message.error():
                raise RuntimeError(f"{topic}: {message.error()}")
            _fold(view, message.key().decode(), json.loads(message.value()))
            if message.offset() + 1 >= ends.get(message.partition(), 0):
                ends.pop(message.partition(), None)
    finally:
        consumer.close()
    return view


def _fold(view: ResultsView, key: str, window: Window) -> None:
    view.records += 1
    earlier = view.windows.get(key)
    if earlier is None:
        view.windows[key] = window
    elif earlier == window:
        view.duplicates += 1
    else:
        view.conflicts.append(key)


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def expected_windows(count: int) -> dict[str, Window]:
    """The results for events 0..count-1 that the pipeline emits once it has read them all:
    the windows that end at or before the watermark (the newest event time less the delay)."""
    totals: dict[tuple[int, str], list[int]] = defaultdict(lambda: [0, 0])
    newest = None
    window_ms = WINDOW_S * 1000
    for i in range(count):
        e = event(i)
        newest = e.ts if newest is None else max(newest, e.ts)
        total = totals[(e.ts - e.ts % window_ms, e.kind)]
        total[0] += 1
        total[1] += e.amount
    if newest is None:
        return {}
    watermark = newest - WATERMARK_DELAY_S * 1000
    windows: dict[str, Window] = {}
    for (start, kind), (events, amount) in sorted(totals.items()):
        if start + window_ms <= watermark:
            windows[f"{_iso(start)}/{kind}"] = {
                "window_start": _iso(start),
                "window_end": _iso(start + window_ms),
                "kind": kind,
                "events": events,
                "amount": amount,
            }
    return windows
