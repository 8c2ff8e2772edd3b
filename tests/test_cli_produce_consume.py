"""``gregor produce`` and ``gregor consume`` against a real broker process, each checked
against confluent-kafka (librdkafka): what one writes the other reads back (keys, values,
headers, timestamps, partitions), keyed records land where librdkafka's murmur2
partitioner puts them, a group consumer commits what it printed and shares partitions with
another member, SIGTERM stops it cleanly, and read_committed hides aborted records."""

from __future__ import annotations

import base64
import json
import queue
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Message, Producer, TopicPartition

from compat_tests.group_checks import wait_until
from compat_tests.process_pool import ProcessPool
from gregor.server.harness.broker_process import BrokerProcess
from tests.cli_run import gregor, new_topic, ok, table

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def broker(process_pool: ProcessPool) -> BrokerProcess:
    return process_pool.broker(
        {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000"}
    )


def read_all(broker: BrokerProcess, topic: str, count: int) -> list[Message]:
    """``count`` records of ``topic`` from its start, as librdkafka reads them."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": uuid.uuid4().hex,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    messages: list[Message] = []
    wait_until(
        lambda: len(messages) >= count,
        30,
        f"{count} records",
        step=lambda: messages.extend(m for m in consumer.consume(100, 0.2) if not m.error()),
    )
    consumer.close()
    return messages


def librdkafka_partitions(broker: BrokerProcess, keys: list[bytes], partitions: int) -> dict:
    """Where librdkafka's murmur2 partitioner (the Java client's) puts each key."""
    topic = new_topic(broker.bootstrap, "keys", partitions)
    placed: dict[bytes, int] = {}
    producer = Producer({"bootstrap.servers": broker.bootstrap, "partitioner": "murmur2_random"})
    for key in keys:
        producer.produce(
            topic,
            b"",
            key=key,
            on_delivery=lambda err, msg: placed.__setitem__(msg.key(), msg.partition()),
        )
    assert producer.flush(10) == 0
    return placed


def test_lines_with_keys_and_headers_round_trip(broker: BrokerProcess) -> None:
    topic = new_topic(broker.bootstrap, "records", 3)
    lines = [f"key-{i}:value {i}" for i in range(30)] + ["empty-value:", "colon:in:value"]
    ok(
        "produce",
        "--bootstrap-server",
        broker.bootstrap,
        "--topic",
        topic,
        "--key-separator",
        ":",
        "--header",
        "src=cli",
        "--header",
        "trace=1",
        stdin="\n".join(lines).encode() + b"\n",
    )

    messages = read_all(broker, topic, len(lines))
    got = {m.key(): (m.value(), m.headers(), m.partition()) for m in messages}
    expected = {line.split(":", 1)[0].encode(): line.split(":", 1)[1].encode() for line in lines}
    assert {k: v[0] for k, v in got.items()} == expected
    assert all(h == [("src", b"cli"), ("trace", b"1")] for _, h, _ in got.values())
    assert {k: p for k, (_, _, p) in got.items()} == librdkafka_partitions(broker, list(got), 3)

    printed = ok(
        "consume",
        "--bootstrap-server",
        broker.bootstrap,
        "--topic",
        topic,
        "--from-beginning",
        "--exit-at-end",
        "-f",
        "%k|%s|%h|%p|%o|%S\\n",
    )
    assert "Processed a total of 32 messages" in printed.err
    rows = {tuple(line.split("|")) for line in printed.out.splitlines()}
    assert rows == {
        (
            m.key().decode(),
            m.value().decode(),
            "src=cli,trace=1",
            str(m.partition()),
            str(m.offset()),
            str(len(m.value())),
        )
        for m in messages
    }


def test_json_records_round_trip_binary_and_nulls(broker: BrokerProcess) -> None:
    topic = new_topic(broker.bootstrap, "records", 2)
    binary = bytes(range(256))
    records = [
        {
            "key": "a",
            "value": "text",
            "headers": [["h", "1"], ["h", "2"]],
            "partition": 1,
            "timestamp": 1_700_000_000_000,
        },
        {
            "key": None,
            "value": {"base64": base64.b64encode(binary).decode()},
            "headers": [["nothing", None]],
            "partition": 0,
            "timestamp": 1_700_000_000_001,
        },
        {
            "key": {"base64": "//79"},
            "value": None,
            "headers": [],
            "partition": 0,
            "timestamp": 1_700_000_000_002,
        },
    ]
    stdin = "".join(json.dumps(r) + "\n" for r in records).encode()
    ok("produce", "--bootstrap-server", broker.bootstrap, "--topic", topic, "--json", stdin=stdin)

    by_partition = {(m.partition(), m.offset()): m for m in read_all(broker, topic, 3)}
    first, second, third = by_partition[(1, 0)], by_partition[(0, 0)], by_partition[(0, 1)]
    assert (first.key(), first.value(), first.headers()) == (
        b"a",
        b"text",
        [("h", b"1"), ("h", b"2")],
    )
    assert (second.key(), second.value(), second.headers()) == (None, binary, [("nothing", None)])
    assert (third.key(), third.value()) == (b"\xff\xfe\xfd", None)
    assert [m.timestamp()[1] for m in (first, second, third)] == [
        1_700_000_000_000,
        1_700_000_000_001,
        1_700_000_000_002,
    ]

    printed = ok(
        "consume",
        "--bootstrap-server",
        broker.bootstrap,
        "--topic",
        topic,
        "--from-beginning",
        "--exit-at-end",
        "--json",
    ).json_lines()
    assert sorted(printed, key=lambda r: r["timestamp"]) == [
        {"topic": topic, "offset": offset, **r}
        for offset, r in zip([0, 0, 1], records, strict=True)
    ]


def test_consume_positions_and_stops(broker: BrokerProcess) -> None:
    topic = new_topic(broker.bootstrap, "records", 2)
    stdin = b"".join(b"%d\n" % i for i in range(10))
    ok(
        "produce",
        "--bootstrap-server",
        broker.bootstrap,
        "--topic",
        topic,
        "--partition",
        "1",
        stdin=stdin,
    )
    consume = ("consume", "--bootstrap-server", broker.bootstrap, "--topic", topic)
    assert ok(*consume, "--partition", "1", "--offset", "7", "-e").out == "7\n8\n9\n"
    assert ok(*consume, "--from-beginning", "--max-messages", "3").out == "0\n1\n2\n"
    # From the log end with nothing more coming: the silence ends it.
    quiet = ok(*consume, "--timeout-ms", "300")
    assert quiet.out == "" and "Processed a total of 0 messages" in quiet.err

    no_partition = gregor(*consume, "--offset", "3")
    assert no_partition.code == 1 and "--offset needs --partition" in no_partition.err
    missing = gregor(*consume, "--partition", "5")
    assert missing.code == 1 and "no partition 5" in missing.err
    no_topic = gregor("consume", "--bootstrap-server", broker.bootstrap, "--topic", "nope", "-e")
    assert no_topic.code == 1 and "topic 'nope': UNKNOWN_TOPIC_OR_PARTITION" in no_topic.err
    token = gregor(*consume, "-f", "%x")
    assert token.code == 1 and "unknown format token %x" in token.err
    unkeyed = gregor(
        "produce",
        "--bootstrap-server",
        broker.bootstrap,
        "--topic",
        topic,
        "--key-separator",
        "=",
        stdin=b"a=1\nno separator\n",
    )
    assert unkeyed.code == 1
    assert unkeyed.err == "Error: No key separator found on line number 2: 'no separator'\n"
    not_json = gregor(
        "produce",
        "--bootstrap-server",
        broker.bootstrap,
        "--topic",
        topic,
        "--json",
        stdin=b'{"key": "k"}\n',
    )
    assert not_json.code == 1 and 'line 1: a JSON object with a "value"' in not_json.err


def committed(broker: BrokerProcess, topic: str, group: str, partitions: int) -> dict[int, int]:
    reader = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        return {tp.partition: tp.offset for tp in reader.committed(tps, timeout=10)}
    finally:
        reader.close()


def test_group_consumer_commits_what_it_printed(broker: BrokerProcess) -> None:
    topic = new_topic(broker.bootstrap, "records", 2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    produce = (
        "produce",
        "--bootstrap-server",
        broker.bootstrap,
        "--topic",
        topic,
        "--key-separator",
        ",",
    )
    ok(*produce, stdin=b"".join(b"k%d,v%d\n" % (i, i) for i in range(10)))
    consume = (
        "consume",
        "--bootstrap-server",
        broker.bootstrap,
        "--topic",
        topic,
        "--group",
        group,
    )
    first = ok(*consume, "--from-beginning", "--max-messages", "10").out.split()
    assert sorted(first) == sorted(f"v{i}" for i in range(10))
    ends = {
        int(r["PARTITION"]): int(r["LOG-END-OFFSET"])
        for r in table(
            ok("groups", "--bootstrap-server", broker.bootstrap, "--describe", "--group", group).out
        )
    }
    assert sum(ends.values()) == 10
    assert committed(broker, topic, group, 2) == ends

    ok(*produce, stdin=b"".join(b"k%d,v%d\n" % (i, i) for i in range(10, 15)))
    second = ok(*consume, "--exit-at-end").out.split()
    assert sorted(second) == sorted(f"v{i}" for i in range(10, 15))
    assert sum(committed(broker, topic, group, 2).values()) == 15


class Running:
    """``gregor consume`` in its own process, its output lines gathered as they come."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gregor.server.cli", "consume", *args],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.seen: list[str] = []
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line.rstrip("\n"))

    def drain(self) -> list[str]:
        """The lines printed since the last call (waiting a little for the first)."""
        new = []
        try:
            while True:
                new.append(self._lines.get(timeout=0.05))
        except queue.Empty:
            self.seen += new
            return new

    def stop(self) -> str:
        """SIGTERM; its standard error once it exited, which it must do cleanly."""
        self.process.send_signal(signal.SIGTERM)
        assert self.process.wait(timeout=30) == 0
        assert self.process.stderr is not None
        return self.process.stderr.read()


def test_members_share_partitions_and_stop_cleanly(broker: BrokerProcess) -> None:
    topic = new_topic(broker.bootstrap, "records", 4)
    group = f"g-{uuid.uuid4().hex[:8]}"
    args = (
        "--bootstrap-server",
        broker.bootstrap,
        "--topic",
        topic,
        "--group",
        group,
        "--from-beginning",
        "-f",
        "%p %s\\n",
    )
    members = [Running(*args), Running(*args)]
    try:
        describe = (
            "groups",
            "--bootstrap-server",
            broker.bootstrap,
            "--describe",
            "--group",
            group,
            "--members",
        )

        def shares() -> list[str]:
            described = gregor(*describe)  # fails until the group exists
            return [r["#PARTITIONS"] for r in table(described.out)] if described.code == 0 else []

        wait_until(lambda: shares() == ["2", "2"], 30, "two members with two partitions each")
        keys = b"".join(b"k%d,%d\n" % (i, i) for i in range(40))
        ok(
            "produce",
            "--bootstrap-server",
            broker.bootstrap,
            "--topic",
            topic,
            "--key-separator",
            ",",
            stdin=keys,
        )
        lines: list[str] = []
        wait_until(
            lambda: len(lines) >= 40,
            30,
            "all 40 records",
            step=lambda: [lines.extend(m.drain()) for m in members],
        )
    finally:
        errors = [m.stop() for m in members]
    assert all("Processed a total of" in e for e in errors), errors
    assert sorted(int(line.split()[1]) for line in lines) == list(range(40))
    first, second = ({int(line.split()[0]) for line in m.seen} for m in members)
    assert not first & second  # no partition read by both
    counts = dict.fromkeys(range(4), 0)
    for line in lines:
        counts[int(line.split()[0])] += 1
    assert committed(broker, topic, group, 4) == counts  # each committed as it left
    state = ok(
        "groups", "--bootstrap-server", broker.bootstrap, "--describe", "--group", group, "--state"
    ).out
    assert table(state)[0]["STATE"] == "Empty"


def test_read_committed_hides_aborted_records(broker: BrokerProcess) -> None:
    topic = new_topic(broker.bootstrap, "records", 1)
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "transactional.id": f"txn-{uuid.uuid4().hex[:8]}"}
    )
    producer.init_transactions(10)
    for values, commit in ([b"c1", b"c2", b"c3"], True), ([b"a1", b"a2"], False), ([b"c4"], True):
        producer.begin_transaction()
        for value in values:
            producer.produce(topic, value)
        producer.flush(10)
        (producer.commit_transaction if commit else producer.abort_transaction)(10)

    consume = (
        "consume",
        "--bootstrap-server",
        broker.bootstrap,
        "--topic",
        topic,
        "--from-beginning",
        "--exit-at-end",
    )
    assert ok(*consume, "--isolation-level", "read_committed").out.split() == [
        "c1",
        "c2",
        "c3",
        "c4",
    ]
    assert ok(*consume).out.split() == ["c1", "c2", "c3", "a1", "a2", "c4"]


def test_console_tools_properties_and_nulls(broker: BrokerProcess) -> None:
    """kafka-console-producer.sh's reader properties in, kafka-console-consumer.sh's
    formatter properties out; null keys and values print as "null"."""
    topic = new_topic(broker.bootstrap, "props", 2)
    b = ("--bootstrap-server", broker.bootstrap, "--topic", topic)
    lines = [
        "h1:v1,h2:v2|k1=one",
        "NULL|k2=NULL",  # no headers, a null value
        "h3:NULL|NULL=three",  # a null header value and a null key
        "no separators here",  # ignore.error: the whole line is the value, no key
    ]
    reader = [
        ("parse.key", "true"),
        ("key.separator", "="),
        ("parse.headers", "true"),
        ("headers.delimiter", "|"),
        ("null.marker", "NULL"),
        ("ignore.error", "true"),
    ]
    properties = [a for key, value in reader for a in ("--property", f"{key}={value}")]
    ok("produce", *b, "--partition", "1", *properties, stdin="\n".join(lines).encode() + b"\n")
    got = [(m.key(), m.value(), m.headers() or []) for m in read_all(broker, topic, 4)]
    assert got == [
        (b"k1", b"one", [("h1", b"v1"), ("h2", b"v2")]),
        (b"k2", None, []),
        (None, b"three", [("h3", None)]),
        (None, b"no separators here", []),
    ]

    consume = ("consume", *b, "--from-beginning", "--exit-at-end")
    # Kafka's default output: the value, "null" for none.
    assert ok(*consume).out == "one\nnull\nthree\nno separators here\n"
    printed = ok(
        *consume,
        *("--property", "print.key=true", "--property", "print.partition=true"),
        *("--property", "print.offset=true", "--property", "print.headers=true"),
        *("--property", "print.timestamp=true", "--formatter-property", "key.separator= | "),
        *("--property", "null.literal=<none>", "--property", "line.separator=;\n"),
    ).out.splitlines()
    timestamps = [f"CreateTime:{m.timestamp()[1]}" for m in read_all(broker, topic, 4)]
    assert printed == [
        f"{timestamps[0]} | Partition:1 | Offset:0 | h1:v1,h2:v2 | k1 | one;",
        f"{timestamps[1]} | Partition:1 | Offset:1 | NO_HEADERS | k2 | <none>;",
        f"{timestamps[2]} | Partition:1 | Offset:2 | h3:<none> | <none> | three;",
        f"{timestamps[3]} | Partition:1 | Offset:3 | NO_HEADERS | <none> | no separators here;",
    ]
    keys_only = ok(*consume, "--property", "print.key=true", "--property", "print.value=false")
    assert keys_only.out == "k1\nk2\nnull\nnull\n"

    def error(*args: str, stdin: bytes = b"") -> str:
        result = gregor(*args, stdin=stdin)
        assert result.code == 1 and result.out == ""
        (line,) = result.err.splitlines()
        return line

    assert error(*consume, "--property", "print.epoch=true").startswith(
        "Error: --property print.epoch: kafka-console-consumer.sh's formatter has no such property"
    )
    assert error(*consume, "--json", "--property", "print.key=true") == (
        "Error: --property sets Kafka's formatter: not with --format or --json"
    )
    assert error("produce", *b, "--property", "parse.key=true", stdin=b"no tab\n") == (
        "Error: No key separator found on line number 1: 'no tab'"
    )
    assert error("produce", *b, "--property", "headers.delimiter=,", stdin=b"x\n") == (
        "Error: headers.delimiter and headers.separator may not be equal"
    )
    assert error("produce", *b, "--property", "parse.keys=true", stdin=b"x\n").startswith(
        "Error: --property parse.keys: kafka-console-producer.sh's line reader has no such"
    )


def test_client_properties(broker: BrokerProcess) -> None:
    """--producer-property and --consumer-property set what the tools' client has."""
    topic = new_topic(broker.bootstrap, "client-props", 1)
    b = ("--bootstrap-server", broker.bootstrap, "--topic", topic)
    ok(
        "produce",
        *b,
        *("--producer-property", "compression.type=gzip", "--producer-property", "acks=1"),
        *("--command-property", "linger.ms=0", "--producer-property", "client.id=props-test"),
        stdin=b"a\nb\n",
    )
    segment = broker.data_dir / f"{topic}-0" / "00000000000000000000.log"
    dumped = ok("dump-log", "--files", str(segment), "--json").json()
    codecs = {entry["compresscodec"] for f in dumped["files"] for entry in f["entries"]}
    assert codecs == {"gzip"}

    group = f"g-{uuid.uuid4().hex[:8]}"
    consume = ("consume", *b, "--exit-at-end")
    first = ok(
        *consume,
        *("--consumer-property", "auto.offset.reset=earliest"),
        *("--consumer-property", f"group.id={group}", "--group", group),
    )
    assert first.out == "a\nb\n"
    assert committed(broker, topic, group, 1) == {0: 2}
    # enable.auto.commit=false: what it printed is not committed.
    ok("produce", *b, stdin=b"c\n")
    unsaved = ok(
        *consume,
        *("--consumer-property", f"group.id={group}"),
        *("--consumer-property", "enable.auto.commit=false"),
    )
    assert unsaved.out == "c\n"
    assert committed(broker, topic, group, 1) == {0: 2}

    def refused(*args: str) -> str:
        result = gregor(*consume, *args)
        assert result.code == 1 and result.out == ""
        (line,) = result.err.splitlines()
        return line

    assert refused("--consumer-property", "max.poll.records=5") == (
        "Error: --consumer-property max.poll.records: this tool's client has no such setting "
        "(it takes auto.commit.interval.ms, auto.offset.reset, client.id, enable.auto.commit, "
        "group.id, isolation.level)"
    )
    assert refused("--from-beginning", "--consumer-property", "auto.offset.reset=latest") == (
        "Error: --consumer-property auto.offset.reset=latest contradicts --from-beginning"
    )
    assert refused("--group", "a", "--consumer-property", "group.id=b") == (
        "Error: --consumer-property group.id=b contradicts --group"
    )
    assert refused("--consumer-property", "auto.offset.reset=none") == (
        "Error: --consumer-property auto.offset.reset=none: must be earliest or latest"
    )
    produced = gregor("produce", *b, "--producer-property", "enable.idempotence=true")
    assert produced.code == 1 and produced.err.startswith(
        "Error: --producer-property enable.idempotence: this tool's client has no such setting"
    )
