"""``gregor consume``: a topic's records on standard output, like ``kcat -C`` and
``kafka-console-consumer.sh``, from any Kafka-compatible broker over the wire.

Without ``--group`` it reads every partition (or ``--partition``) itself; with one it is a
member of that consumer group (``server/cli/client/group_member.py``): it reads the partitions the
group gives it from the group's committed offsets and commits what it printed every 5 s and
when it stops. Each record is printed as kafka-console-consumer.sh prints it (``--property``,
``server/cli/line_format.py``), through kcat's format tokens (``--format``), or as a JSON
line that ``gregor produce --json`` reads back."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import IO, Any

from gregor.server.cli import client_configs
from gregor.server.cli.client.connection import Client, ClientError
from gregor.server.cli.client.group_member import GroupMember, RebalanceNeeded
from gregor.server.cli.client.records import (
    EARLIEST,
    LATEST,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    ClusterView,
    TopicPartition,
    error_name,
    fetch_request,
    fetched_partitions,
    fetched_records,
    list_offsets,
)
from gregor.server.cli.line_format import MessageFormatter
from gregor.server.cli.output import jsonable
from gregor.wire.records import Record

MAX_WAIT_MS = 500
_ESCAPES = {"n": b"\n", "t": b"\t", "r": b"\r", "0": b"\0", "\\": b"\\"}
_TOKENS = "stpokTSKh"
_OUT_OF_RANGE = "offset_out_of_range"

FormatPart = bytes | str  # literal bytes, or a token letter
Consumed = tuple[int, Record, int]  # partition, record, its batch's timestamp type


def compile_format(text: str) -> list[FormatPart]:
    """kcat's ``-f``: %s value, %k key, %t topic, %p partition, %o offset, %T timestamp,
    %S value size, %K key size (-1 when null), %h headers as k=v,k=v; \\n \\t \\r \\0 \\\\.
    A null key or value prints as nothing, as kcat prints it."""
    parts: list[FormatPart] = []
    literal = bytearray()
    i = 0
    while i < len(text):
        char, following = text[i], text[i + 1 : i + 2]
        if char == "%" and following:
            if following == "%":
                literal += b"%"
            elif following in _TOKENS:
                if literal:
                    parts.append(bytes(literal))
                    literal.clear()
                parts.append(following)
            else:
                raise ClientError(f"unknown format token %{following}")
            i += 2
        elif char == "\\" and following in _ESCAPES:
            literal += _ESCAPES[following]
            i += 2
        else:
            literal += char.encode()
            i += 1
    if literal:
        parts.append(bytes(literal))
    return parts


def render(parts: list[FormatPart], topic: str, partition: int, record: Record) -> bytes:
    out = bytearray()
    for part in parts:
        if isinstance(part, bytes):
            out += part
        elif part == "s":
            out += record.value or b""
        elif part == "k":
            out += record.key or b""
        elif part == "t":
            out += topic.encode()
        elif part == "p":
            out += str(partition).encode()
        elif part == "o":
            out += str(record.offset).encode()
        elif part == "T":
            out += str(record.timestamp).encode()
        elif part == "S":
            out += str(-1 if record.value is None else len(record.value)).encode()
        elif part == "K":
            out += str(-1 if record.key is None else len(record.key)).encode()
        else:  # "h"
            out += b",".join(k.encode() + b"=" + (v or b"") for k, v in record.headers)
    return bytes(out)


def record_json(topic: str, partition: int, record: Record) -> dict[str, Any]:
    return {
        "topic": topic,
        "partition": partition,
        "offset": record.offset,
        "timestamp": record.timestamp,
        "key": jsonable(record.key),
        "value": jsonable(record.value),
        "headers": [[k, jsonable(v)] for k, v in record.headers],
    }


class TopicConsumer:
    """Reads one topic's partitions from positions it keeps, alone or as a group member."""

    def __init__(self, client: Client, args: Any) -> None:
        self.topic = args.topic
        self.view = ClusterView(client, [self.topic])
        committed_only = args.isolation_level == "read_committed"
        self.isolation = READ_COMMITTED if committed_only else READ_UNCOMMITTED
        self.reset_to = EARLIEST if args.from_beginning else LATEST
        self.member = GroupMember(client, args.group, [self.topic]) if args.group else None
        self.auto_commit = args.auto_commit
        self.commit_interval_s = args.commit_interval_ms / 1000
        self.positions: dict[TopicPartition, int] = {}
        self.ends: dict[TopicPartition, int] = {}
        self._committed: dict[TopicPartition, int] = {}
        self._last_commit = time.monotonic()
        if self.member is not None:
            self._join()
            return
        partitions = self.view.partitions(self.topic)
        if args.partition is not None:
            if args.partition not in partitions:
                raise ClientError(f"topic {self.topic!r} has no partition {args.partition}")
            partitions = [args.partition]
        tps = [(self.topic, p) for p in partitions]
        if args.offset is not None:
            self.positions = dict.fromkeys(tps, args.offset)
        else:
            self.positions = list_offsets(self.view, dict.fromkeys(tps, self.reset_to))

    def _join(self) -> None:
        assert self.member is not None
        assignment = self.member.join()
        committed = self.member.committed()
        missing = [tp for tp in assignment if tp not in committed]
        reset = list_offsets(self.view, dict.fromkeys(missing, self.reset_to)) if missing else {}
        self.positions = {**reset, **committed}
        self._committed = dict(committed)
        self.ends = {}

    def at_end(self) -> bool:
        """Every partition read up to its end (as the last fetch of it reported)."""
        return all(tp in self.ends and pos >= self.ends[tp] for tp, pos in self.positions.items())

    def poll(self, max_wait_ms: int) -> Iterator[Consumed]:
        """One fetch from every leader, and its records: the caller calls ``printed`` for
        each one it has written, which is how far the position (and a commit) moves."""
        if self.member is not None:
            self._keep_membership()
        if not self.positions:  # a group member without partitions
            time.sleep(max_wait_ms / 1000)
            return
        sent = []
        for node, tps in self.view.by_leader(self.positions).items():
            request = fetch_request(
                {tp: self.positions[tp] for tp in tps},
                max_wait_ms=max_wait_ms,
                isolation_level=self.isolation,
            )
            connection = self.view.node(node)
            connection.send(request)
            sent.append(connection)
        answers = [fetched_partitions(connection.receive()) for connection in sent]
        for answer in answers:
            for tp, data in answer.items():
                yield from self._partition_records(tp, data)

    def _partition_records(self, tp: TopicPartition, data: Any) -> Iterator[Consumed]:
        code = data.error_code
        if code.name == _OUT_OF_RANGE:
            self.positions.update(list_offsets(self.view, {tp: self.reset_to}))
            return
        if code.value != 0:
            if not code.retriable:
                raise ClientError(f"{tp[0]}-{tp[1]}: {error_name(code)}")
            self.view.refresh()
            return
        end = data.last_stable_offset if self.isolation == READ_COMMITTED else data.high_watermark
        self.ends[tp] = end
        records, after = fetched_records(data, self.positions[tp])
        for record, timestamp_type in records:
            yield tp[1], record, timestamp_type
        # All of them printed: past the batches that held none to print, too.
        self.positions[tp] = max(self.positions[tp], after)

    def printed(self, partition: int, record: Record) -> None:
        self.positions[(self.topic, partition)] = record.offset + 1

    def _keep_membership(self) -> None:
        assert self.member is not None
        try:
            self.member.heartbeat()
            if time.monotonic() - self._last_commit >= self.commit_interval_s:
                self.commit()
        except RebalanceNeeded:
            self._join()

    def commit(self) -> None:
        """Commit the positions that moved since the last commit (group members with
        enable.auto.commit only)."""
        self._last_commit = time.monotonic()
        if self.member is None or not self.auto_commit:
            return
        moved = {tp: o for tp, o in self.positions.items() if self._committed.get(tp) != o}
        self.member.commit(moved)
        self._committed.update(moved)

    def close(self) -> None:
        if self.member is None:
            return
        try:
            self.commit()
        finally:
            self.member.leave()


class StopRequest:
    """Set by SIGINT or SIGTERM: the loop stops between records, so no answer is left half
    read and a group member can still commit and leave. A second signal stops at once."""

    def __init__(self) -> None:
        self.requested = False

    def __call__(self, _signum: int, _frame: FrameType | None) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True


Printer = Callable[[str, int, Record, int], bytes]


def printer(args: Any) -> Printer:
    """What a record is printed as: a JSON line, kcat's --format, or Kafka's formatter."""
    if (args.json or args.format is not None) and args.property:
        raise ClientError("--property sets Kafka's formatter: not with --format or --json")
    if args.json:
        return lambda topic, partition, record, _: (
            json.dumps(record_json(topic, partition, record)).encode() + b"\n"
        )
    if args.format is not None:
        parts = compile_format(args.format)
        return lambda topic, partition, record, _: render(parts, topic, partition, record)
    formatter = MessageFormatter.from_properties(args.property)
    return lambda _, partition, record, timestamp_type: formatter.format(
        partition, record, timestamp_type
    )


def _check(args: Any) -> None:
    client_configs.apply(
        args, client_configs.CONSUMER, args.consumer_property, "--consumer-property"
    )
    if args.offset is not None and args.partition is None:
        raise ClientError("--offset needs --partition")
    if args.group and (args.offset is not None or args.partition is not None):
        raise ClientError("with --group the group assigns the partitions")


def run(args: argparse.Namespace) -> int:
    """``gregor consume``; 1 on an error."""
    try:
        _check(args)
        write_record = printer(args)
    except ClientError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    stop = StopRequest()
    previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    out: IO[bytes] = sys.stdout.buffer
    count = 0
    try:
        with Client(args.bootstrap_server, args.client_id, config=args.command_config) as client:
            consumer = TopicConsumer(client, args)
            try:
                for partition, record, timestamp_type in _records(consumer, args, stop, out.flush):
                    out.write(write_record(consumer.topic, partition, record, timestamp_type))
                    consumer.printed(partition, record)
                    count += 1
            finally:
                try:
                    out.flush()  # a reader gone (`| head`) fails here: the member still leaves
                finally:
                    consumer.close()
    except ClientError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0


def _records(
    consumer: TopicConsumer, args: Any, stop: StopRequest, flush: Callable[[], None]
) -> Iterator[Consumed]:
    """Records until --max-messages, --exit-at-end, --timeout-ms of silence or a signal;
    what was printed is flushed before each wait for more."""
    count = 0
    last_record = time.monotonic()
    while not stop.requested:
        max_wait = MAX_WAIT_MS
        if args.timeout_ms is not None:
            left_ms = args.timeout_ms - (time.monotonic() - last_record) * 1000
            if left_ms <= 0:
                return
            max_wait = min(max_wait, int(left_ms))
        flush()
        for record in consumer.poll(max_wait):
            yield record
            count += 1
            last_record = time.monotonic()
            if count == args.max_messages or stop.requested:
                return
        if args.exit_at_end and consumer.at_end():
            return
