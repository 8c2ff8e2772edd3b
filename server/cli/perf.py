"""``gregor perf produce|consume``: performance tests against any Kafka-compatible broker
over the wire, in the habits of ``kafka-producer-perf-test.sh`` and
``kafka-consumer-perf-test.sh``, with a progress bar and a summary table (or ``--json``).

The producer sends one fixed random payload per record, as Kafka's tool does, in batches
built once per size and re-stamped per send (``gregor.wire.records.restamp``), so the client's
own cost stays far below the broker's. Batches close as Kafka's accumulator closes them:
full (``--batch-size``) or ``--linger-ms`` after their first record; up to
``--max-in-flight`` requests per broker are outstanding. A record's latency runs from its
turn under ``--throughput`` (without a limit: its batch's creation) to its acknowledgement.
The consumer fetches every partition from its log start and counts records from the batch
headers; its latency is each fetch's round trip."""

from __future__ import annotations

import argparse
import math
import random
import select
import string
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from gregor.server.cli import client_configs
from gregor.server.cli.client.connection import Client, ClientError, Connection
from gregor.server.cli.client.records import (
    EARLIEST,
    ClusterView,
    TopicPartition,
    error_name,
    fetch_request,
    fetched_partitions,
    list_offsets,
    produce_request,
    produce_results,
)
from gregor.server.cli.output import console, print_json, print_table
from gregor.server.cli.produce import CODEC_IDS
from gregor.wire.records import CorruptRecordError, build_batch, restamp, split_batches

_RECORD_OVERHEAD = 8  # a small record's framing in a batch, for records per batch
_MB = 1024 * 1024


@dataclass(slots=True)
class Summary:
    mode: str
    records: int
    seconds: float
    data_bytes: int
    latencies_ms: list[float] = field(default_factory=list)
    errors: int = 0
    first_error: str | None = None

    def percentile(self, fraction: float) -> float | None:
        """The latency under which ``fraction`` of them lie (nearest rank; once sorted)."""
        if not self.latencies_ms:
            return None
        ordered = self.latencies_ms
        return ordered[min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))]

    def to_json(self) -> dict[str, Any]:
        self.latencies_ms.sort()
        count = len(self.latencies_ms)
        seconds = max(self.seconds, 1e-9)
        return {
            "mode": self.mode,
            "records": self.records,
            "seconds": round(self.seconds, 3),
            "recordsPerSec": round(self.records / seconds, 1),
            "mbPerSec": round(self.data_bytes / _MB / seconds, 2),
            "latencyMs": {
                "avg": round(sum(self.latencies_ms) / count, 2) if count else None,
                "p50": _rounded(self.percentile(0.5)),
                "p95": _rounded(self.percentile(0.95)),
                "p99": _rounded(self.percentile(0.99)),
                "p99.9": _rounded(self.percentile(0.999)),
                "max": _rounded(self.latencies_ms[-1] if count else None),
            },
            "errors": self.errors,
            "firstError": self.first_error,
        }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _progress(args: Any, description: str, total: int) -> tuple[Progress, Callable[[int], None]]:
    """A progress bar on standard error (none with --json) and the function moving it."""
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        console=console(sys.stderr),
        disable=args.json,
    )
    task = progress.add_task(description, total=total, rate="")
    started = time.monotonic()

    def advance(done: int) -> None:
        elapsed = max(time.monotonic() - started, 1e-9)
        progress.update(task, completed=done, rate=f"{done / elapsed:,.0f} records/s")

    return progress, advance


@dataclass(slots=True)
class _Sent:
    first: int  # index of the batch's first record
    count: int
    created: float  # without a throughput limit, when its records were made


class ProducerTest:
    def __init__(self, client: Client, args: Any) -> None:
        self.args = args
        self.view = ClusterView(client, [args.topic], auto_create=True)
        self.partitions = [(args.topic, p) for p in self.view.partitions(args.topic)]
        self.payload = "".join(random.choices(string.ascii_uppercase, k=args.record_size))
        self.per_batch = max(1, args.batch_size // (args.record_size + _RECORD_OVERHEAD))
        self.interval = 1 / args.throughput if args.throughput > 0 else 0.0
        self._templates: dict[int, bytes] = {}
        self._sent: dict[Connection, deque[_Sent]] = {}
        self._turn = 0
        self.summary = Summary("produce", 0, 0.0, 0)

    def _batch(self, count: int) -> bytearray:
        if count not in self._templates:
            records = [(None, self.payload.encode(), (), 0)] * count
            codec = CODEC_IDS[self.args.compression_type]
            self._templates[count] = build_batch(records, compression=codec)
        batch = bytearray(self._templates[count])
        restamp(batch, int(time.time() * 1000))
        return batch

    def _next_batch(self, first: int, start: float) -> tuple[int, float]:
        """How many records the batch starting at record ``first`` holds and when it
        closes (full, or lingered) under the throughput limit."""
        most = min(self.per_batch, self.args.num_records - first)
        if not self.interval:
            return most, time.monotonic()
        turn = start + first * self.interval
        closes = max(turn + self.args.linger_ms / 1000, time.monotonic())
        due = math.floor((closes - start) / self.interval) - first + 1
        count = max(1, min(most, due))
        return count, (start + (first + count - 1) * self.interval if count == most else closes)

    def run(self, advance: Callable[[int], None]) -> Summary:
        start = time.monotonic()
        sent = 0
        while sent < self.args.num_records:
            count, send_at = self._next_batch(sent, start)
            self._wait_answers(until=send_at, start=start, advance=advance)
            tp = self.partitions[self._turn % len(self.partitions)]
            self._turn += 1
            connection = self.view.leader(tp)
            while connection.in_flight >= self.args.max_in_flight:
                self._receive(connection, start, advance)
            request = produce_request(
                tp[0], {tp[1]: bytes(self._batch(count))}, self.args.acks, 30000
            )
            if self.args.acks == 0:
                connection.send(request, expect_response=False)
                self.summary.records += count
                advance(self.summary.records)
            else:
                connection.send(request)
                self._sent.setdefault(connection, deque()).append(
                    _Sent(sent, count, time.monotonic())
                )
            sent += count
        for connection in list(self._sent):
            while connection.in_flight:
                self._receive(connection, start, advance)
        self.summary.seconds = time.monotonic() - start
        self.summary.data_bytes = self.summary.records * self.args.record_size
        return self.summary

    def _wait_answers(self, until: float, start: float, advance: Callable[[int], None]) -> None:
        """Read answers as they come until ``until`` (the next batch's send time)."""
        while (left := until - time.monotonic()) > 0:
            waiting = [c for c in self._sent if c.in_flight]
            if not waiting:
                time.sleep(left)
                return
            ready, _, _ = select.select(waiting, [], [], left)
            for connection in ready:
                self._receive(connection, start, advance)

    def _receive(
        self, connection: Connection, start: float, advance: Callable[[int], None]
    ) -> None:
        answer = connection.receive()
        acked = time.monotonic()
        batch = self._sent[connection].popleft()
        (result,) = produce_results(answer)
        if result.error.value != 0:
            self.summary.errors += batch.count
            self.summary.first_error = self.summary.first_error or (
                f"{self.args.topic}-{result.partition}: {error_name(result.error)}"
            )
            return
        if self.interval:
            turns = (
                start + i * self.interval for i in range(batch.first, batch.first + batch.count)
            )
            self.summary.latencies_ms += [(acked - t) * 1000 for t in turns]
        else:
            self.summary.latencies_ms += [(acked - batch.created) * 1000] * batch.count
        self.summary.records += batch.count
        advance(self.summary.records)


class ConsumerTest:
    def __init__(self, client: Client, args: Any) -> None:
        self.args = args
        self.view = ClusterView(client, [args.topic])
        tps = [(args.topic, p) for p in self.view.partitions(args.topic)]
        self.positions: dict[TopicPartition, int] = list_offsets(
            self.view, dict.fromkeys(tps, EARLIEST)
        )
        self.summary = Summary("consume", 0, 0.0, 0)

    def run(self, advance: Callable[[int], None]) -> Summary:
        wanted = self.args.num_records
        start = last_record = time.monotonic()
        while self.summary.records < wanted:
            if time.monotonic() - last_record > self.args.timeout_ms / 1000:
                raise ClientError(
                    f"consumed {self.summary.records} of {wanted} records: none came for "
                    f"{self.args.timeout_ms} ms"
                )
            before = self.summary.records
            self._fetch_round()
            if self.summary.records > before:
                last_record = time.monotonic()
                advance(min(self.summary.records, wanted))
        self.summary.seconds = time.monotonic() - start
        return self.summary

    def _fetch_round(self) -> None:
        sent = []
        for node, tps in self.view.by_leader(self.positions).items():
            request = fetch_request(
                {tp: self.positions[tp] for tp in tps},
                max_wait_ms=500,
                partition_max_bytes=self.args.fetch_size,
            )
            connection = self.view.node(node)
            connection.send(request)
            sent.append((connection, time.monotonic()))
        for connection, sent_at in sent:
            answer = fetched_partitions(connection.receive())
            self.summary.latencies_ms.append((time.monotonic() - sent_at) * 1000)
            for tp, data in answer.items():
                if data.error_code.value != 0:
                    raise ClientError(f"{tp[0]}-{tp[1]}: {error_name(data.error_code)}")
                self._count(tp, data.records or b"")

    def _count(self, tp: TopicPartition, records: bytes) -> None:
        """Count the records of whole batches past the position, up to the wanted number."""
        try:
            headers = split_batches(records, allow_partial_tail=True)
        except CorruptRecordError as e:
            raise ClientError(f"corrupt fetch answer: {e}") from e
        for header in headers:
            position = self.positions[tp]
            if header.next_offset <= position:
                continue
            self.positions[tp] = header.next_offset
            if header.is_control:
                continue
            count = header.next_offset - max(position, header.base_offset)
            take = min(count, self.args.num_records - self.summary.records)
            self.summary.records += take
            self.summary.data_bytes += header.size * take // count
            if take < count:
                return


def run(args: argparse.Namespace) -> int:
    """``gregor perf produce|consume``; 1 on an error or when records failed."""
    if args.num_records < 1 or getattr(args, "record_size", 1) < 1:
        print("Error: --num-records and --record-size must be at least 1", file=sys.stderr)
        return 1
    if args.mode == "produce":  # the producer options' defaults
        client_configs.apply(args, client_configs.PRODUCER, [], "--producer-property")
    try:
        with Client(
            args.bootstrap_server, f"gregor-perf-{args.mode}", config=args.command_config
        ) as client:
            test = (
                ProducerTest(client, args) if args.mode == "produce" else ConsumerTest(client, args)
            )
            progress, advance = _progress(args, f"{args.mode} {args.topic}", args.num_records)
            with progress:
                summary = test.run(advance)
    except ClientError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    report = summary.to_json()
    if args.json:
        print_json(report)
    else:
        _print_summary(report)
    if summary.errors:
        print(
            f"Error: {summary.errors} records failed, first: {summary.first_error}", file=sys.stderr
        )
        return 1
    return 0


def _print_summary(report: dict[str, Any]) -> None:
    latency = report["latencyMs"]
    kind = "FETCH " if report["mode"] == "consume" else ""
    print_table(
        [
            "RECORDS",
            "SECONDS",
            "RECORDS/S",
            "MB/S",
            *(f"{kind}{name.upper()} MS" for name in latency),
        ],
        [
            (
                report["records"],
                report["seconds"],
                f"{report['recordsPerSec']:,.1f}",
                report["mbPerSec"],
                *latency.values(),
            )
        ],
    )
