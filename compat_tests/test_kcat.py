"""kcat (Debian's build on librdkafka 2.0.x): produce, consume, query offsets by time.

kcat has no admin commands, so topics are created and deleted with confluent-kafka. It
sets no per-message timestamps and applies -H headers to every message of one run, so
each run below is one kind of record, and timestamps are checked against the wall clock.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import time
from collections.abc import Callable

import pytest

from compat_tests import confluent_admin
from compat_tests.broker import BrokerProcess
from compat_tests.matrix import compat
from compat_tests.records import CODECS, Rec, assert_round_trip, offset_for_time

pytestmark = compat("kcat", "produce-consume")

PARTITIONS = 2
PER_RUN = 10


def kcat(broker: BrokerProcess, *args: str, stdin: bytes = b"") -> str:
    done = subprocess.run(
        ["kcat", "-b", broker.bootstrap, "-m", "30", *args],
        input=stdin,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    return done.stdout.decode()


def produce_runs(broker: BrokerProcess, topic: str, codec: str) -> list[Rec]:
    """Per partition: keyed records with headers, null keys/values, then unkeyed ones."""
    compression = [] if codec == "none" else ["-z", codec]
    common = ["-P", "-t", topic, "-X", "acks=all", "-Z", *compression]
    headers = (("trace", b"abc"), ("empty", b""), ("trace", b"dup"))
    sent: list[Rec] = []
    for p in range(PARTITIONS):
        keyed = []
        for i in range(PER_RUN):
            key = None if i % 4 == 1 else f"key-{p}-{i}".encode()
            value = None if i % 3 == 2 else f"value-{p}-{i}".encode()
            keyed.append(Rec(p, key, value, headers, 0))
        lines = b"".join((r.key or b"") + b"\t" + (r.value or b"") + b"\n" for r in keyed)
        header_args = [a for k, v in headers for a in ("-H", f"{k}={v.decode()}")]
        kcat(broker, *common, "-p", str(p), "-K", "\t", *header_args, stdin=lines)

        plain = [Rec(p, None, f"plain-{p}-{i}".encode(), (), 0) for i in range(PER_RUN)]
        kcat(broker, *common, "-p", str(p), stdin=b"".join(r.value + b"\n" for r in plain))
        sent += keyed + plain
    return sent


def consume_all(broker: BrokerProcess, topic: str, count: int) -> list[Rec]:
    out = kcat(broker, "-C", "-t", topic, "-o", "beginning", "-e", "-J", "-c", str(count))
    recs = []
    for line in out.splitlines():
        d = json.loads(line)
        assert d["tstype"] == "create"
        flat = d.get("headers") or []
        headers = tuple(
            (flat[i], None if flat[i + 1] is None else flat[i + 1].encode())
            for i in range(0, len(flat), 2)
        )
        recs.append(
            Rec(
                partition=d["partition"],
                key=None if d["key"] is None else d["key"].encode(),
                value=None if d["payload"] is None else d["payload"].encode(),
                headers=headers,
                timestamp=d["ts"],
                offset=d["offset"],
            )
        )
    return recs


def query_offsets(broker: BrokerProcess, topic: str, ts: int) -> dict[int, int]:
    targets = [a for p in range(PARTITIONS) for a in ("-t", f"{topic}:{p}:{ts}")]
    out = kcat(broker, "-Q", *targets)
    found = {int(p): int(o) for p, o in re.findall(r"\[(\d+)\]\s+offset\s+(-?\d+)", out)}
    assert sorted(found) == list(range(PARTITIONS)), out
    return found


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip(broker: BrokerProcess, new_topic: Callable[[str], str], codec: str) -> None:
    topic = new_topic(f"kcat-{codec}")
    confluent_admin.create_topic(broker, topic, PARTITIONS)

    before = int(time.time() * 1000)
    sent = produce_runs(broker, topic, codec)
    after = int(time.time() * 1000)
    got = consume_all(broker, topic, len(sent))
    assert all(before <= r.timestamp <= after for r in got)
    assert_round_trip(sent, [dataclasses.replace(r, timestamp=0) for r in got])

    mid = sorted(r.timestamp for r in got)[len(got) // 2]
    for ts in (before - 1000, mid, after + 1000):
        answers = query_offsets(broker, topic, ts)
        for p, offset in answers.items():
            want = offset_for_time(got, p, ts)
            assert offset == (-1 if want is None else want), (p, ts)

    confluent_admin.delete_topic(broker, topic)
