"""``gregor produce``: standard input's lines to a topic, one record each, like ``kcat -P``
and ``kafka-console-producer.sh``, to any Kafka-compatible broker over the wire.

Records are batched per partition (``gregor.wire.records.build_batch``) up to ``--batch-size``
bytes and sent when a batch is full, when ``--linger-ms`` passed since its first record,
or when input pauses that long (so typed lines go out at once) or ends."""

from __future__ import annotations

import argparse
import io
import json
import os
import select
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from gregor.server.cli import client_configs
from gregor.server.cli.client.connection import Client, ClientError
from gregor.server.cli.client.partitioner import partition_for_key
from gregor.server.cli.client.records import ClusterView, error_name, produce
from gregor.server.cli.line_format import LineReader
from gregor.server.cli.output import bytes_from_json
from gregor.wire.compression import CODEC_NAMES
from gregor.wire.records import build_batch

_READ_SIZE = 1 << 16
_RECORD_OVERHEAD = 24  # a record's framing, roughly: enough to keep batches under the limit

Headers = list[tuple[str, bytes | None]]
CODEC_IDS = {name: codec for codec, name in CODEC_NAMES.items()}


@dataclass(slots=True)
class InputRecord:
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp: int
    partition: int | None = None

    @property
    def size(self) -> int:
        heads = sum(len(k) + len(v or b"") for k, v in self.headers)
        return len(self.key or b"") + len(self.value or b"") + heads + _RECORD_OVERHEAD


def input_chunks(stream: IO[bytes], idle_s: float) -> Iterator[bytes | None]:
    """The stream's bytes as they arrive, and None whenever nothing came for ``idle_s``
    (a pipe or terminal); a stream without a descriptor is read whole."""
    try:
        fd = stream.fileno()
    except (OSError, io.UnsupportedOperation):
        yield stream.read()
        return
    while True:
        ready, _, _ = select.select([fd], [], [], idle_s)
        if not ready:
            yield None
            continue
        chunk = os.read(fd, _READ_SIZE)
        if not chunk:
            return
        yield chunk


def input_lines(chunks: Iterator[bytes | None]) -> Iterator[tuple[int, bytes] | None]:
    """(line number, line without its newline), None passed through; a last line without
    a newline counts too."""
    pending = b""
    number = 0
    for chunk in chunks:
        if chunk is None:
            yield None
            continue
        lines = (pending + chunk).split(b"\n")
        pending = lines.pop()
        for line in lines:
            number += 1
            yield number, line
    if pending:
        yield number + 1, pending


def line_reader(args: Any) -> LineReader | None:
    """The reader of text lines (None for --json): --key-separator SEP is kcat's way of
    saying --property parse.key=true --property key.separator=SEP."""
    if args.json:
        if args.property or args.key_separator is not None:
            raise ClientError("--property and --key-separator are for text lines, not --json")
        return None
    kcat = []
    if args.key_separator is not None:
        kcat = [("parse.key", "true"), ("key.separator", args.key_separator)]
    return LineReader.from_properties(kcat + args.property)


def parse_line(
    line: bytes, number: int, reader: LineReader | None, args: Any, now_ms: int
) -> InputRecord:
    headers: Headers = [(k, v.encode()) for k, v in args.header]
    if reader is None:
        return _json_record(line, number, headers, now_ms)
    key, value, parsed = reader.parse(line, number)
    return InputRecord(key, value, headers + parsed, now_ms)


def _json_record(line: bytes, number: int, headers: Headers, now_ms: int) -> InputRecord:
    try:
        doc = json.loads(line)
        if not isinstance(doc, dict) or "value" not in doc:
            raise ValueError('a JSON object with a "value" is expected')
        pairs = doc.get("headers") or []
        headers = headers + [(str(k), bytes_from_json(v)) for k, v in pairs]
        timestamp = doc.get("timestamp")
        partition = doc.get("partition")
        return InputRecord(
            bytes_from_json(doc.get("key")),
            bytes_from_json(doc["value"]),
            headers,
            now_ms if timestamp is None else int(timestamp),
            None if partition is None else int(partition),
        )
    except (ValueError, TypeError) as e:
        raise ClientError(f"line {number}: {e}") from None


@dataclass(slots=True)
class _Batch:
    records: list[InputRecord] = field(default_factory=list)
    size: int = 0
    started: float = 0.0


class BatchingProducer:
    """Per-partition batches of one topic, sent when full, lingered or flushed."""

    def __init__(self, view: ClusterView, topic: str, args: Any) -> None:
        self.view = view
        self.topic = topic
        self.partitions = view.partitions(topic)
        self.acks = args.acks
        self.codec = CODEC_IDS[args.compression_type]
        self.batch_size = args.batch_size
        self.linger_s = args.linger_ms / 1000
        self.fixed_partition = args.partition
        if self.fixed_partition is not None and self.fixed_partition not in self.partitions:
            raise ClientError(f"topic {topic!r} has no partition {self.fixed_partition}")
        self._batches: dict[int, _Batch] = {}
        self._sticky = 0  # keyless records go to one partition per batch, in turn

    def _partition(self, record: InputRecord) -> int:
        if record.partition is not None:
            if record.partition not in self.partitions:
                raise ClientError(f"topic {self.topic!r} has no partition {record.partition}")
            return record.partition
        if self.fixed_partition is not None:
            return self.fixed_partition
        if record.key is not None:
            return partition_for_key(record.key, len(self.partitions))
        return self.partitions[self._sticky % len(self.partitions)]

    def add(self, record: InputRecord) -> None:
        partition = self._partition(record)
        batch = self._batches.setdefault(partition, _Batch(started=time.monotonic()))
        if batch.records and batch.size + record.size > self.batch_size:
            self.flush()
            batch = self._batches.setdefault(partition, _Batch(started=time.monotonic()))
        batch.records.append(record)
        batch.size += record.size
        if time.monotonic() - batch.started >= self.linger_s:
            self.flush()

    def flush(self) -> None:
        """Send every pending batch (one request per leader) and check the answers."""
        if not self._batches:
            return
        batches = {
            p: build_batch(
                [(r.key, r.value, r.headers, r.timestamp) for r in b.records],
                compression=self.codec,
            )
            for p, b in self._batches.items()
        }
        self._batches.clear()
        self._sticky += 1
        for result in produce(self.view, self.topic, batches, self.acks):
            if result.error is not None and result.error.value != 0:
                detail = f" ({result.message})" if result.message else ""
                raise ClientError(
                    f"{self.topic}-{result.partition}: {error_name(result.error)}{detail}"
                )


def run(args: argparse.Namespace) -> int:
    """``gregor produce``; 1 on an error (records read before it may have been sent)."""
    stream = sys.stdin.buffer
    try:
        client_configs.apply(
            args, client_configs.PRODUCER, args.producer_property, "--producer-property"
        )
        reader = line_reader(args)
        with Client(args.bootstrap_server, args.client_id, config=args.command_config) as client:
            view = ClusterView(client, [args.topic], auto_create=True)
            producer = BatchingProducer(view, args.topic, args)
            for item in input_lines(input_chunks(stream, producer.linger_s)):
                if item is None:
                    producer.flush()
                    continue
                number, line = item
                now_ms = int(time.time() * 1000)
                producer.add(parse_line(line, number, reader, args, now_ms))
            producer.flush()
    except ClientError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    return 0
