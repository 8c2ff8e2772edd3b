"""``gregor dump-log``: a segment written by a real broker from a real client's records
(every codec, headers, null keys and values) dumped and matched against what was produced;
and hand-built files for what a client cannot make here (transaction markers, a
transaction index, a bad CRC, a torn tail)."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message, Producer

from gregor.server.cli.main import main
from gregor.server.harness.broker_process import BrokerProcess
from gregor.wire.compression import GZIP, LZ4, NONE
from gregor.wire.records import build_batch

REPO_ROOT = Path(__file__).resolve().parent.parent
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
BASE_TS = 1_700_000_000_000


def dump(*files: Path, flags: tuple[str, ...] = ("--print-data-log",)) -> str:
    names = ",".join(str(f) for f in files)
    result = subprocess.run(
        [sys.executable, "-m", "gregor.server.cli", "dump-log", "--files", names, *flags],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout


def produce(bootstrap: str, topic: str, codec: str, start: int, count: int) -> list[dict[str, Any]]:
    """Records i = start..start+count-1: key None every 4th, value None every 5th, headers on
    odd ones (one with a null value); returns them as dump-log's JSON shows them."""
    failures: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            failures.append(err)

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": codec,
            "linger.ms": 50,
            "enable.idempotence": True,
        }
    )
    expected = []
    for i in range(start, start + count):
        key = None if i % 4 == 0 else f"key-{i}"
        value = None if i % 5 == 0 else f"{codec}-value-{i}-" + "x" * (i % 40)
        headers = [("h", str(i).encode()), ("empty", None)] if i % 2 else []
        producer.produce(
            topic,
            value=value,
            key=key,
            partition=0,
            timestamp=BASE_TS + i,
            headers=headers,
            on_delivery=on_delivery,
        )
        expected.append(
            {
                "offset": i,
                "CreateTime": BASE_TS + i,
                "key": key,
                "payload": value,
                "headers": {name: None if v is None else v.decode() for name, v in headers},
            }
        )
    assert producer.flush(30) == 0
    assert failures == []
    return expected


def test_a_segment_written_by_the_broker(
    gregor_broker: BrokerProcess, gregor_topic_factory: Callable[..., str]
) -> None:
    topic = gregor_topic_factory(config={"index.interval.bytes": "200"})
    expected: list[dict[str, Any]] = []
    for codec in CODECS:
        expected += produce(gregor_broker.bootstrap, topic, codec, len(expected), 40)
    gregor_broker.restart()  # a clean shutdown writes and trims the indexes
    stem = gregor_broker.data_dir / f"{topic}-0" / f"{0:020d}"
    log, index, timeindex = (stem.with_suffix(s) for s in (".log", ".index", ".timeindex"))

    files = json.loads(dump(log, index, timeindex, flags=("--print-data-log", "--json")))
    log_dump, index_dump, time_dump = files["files"]
    batches = log_dump["entries"]
    assert "invalidBytes" not in log_dump
    assert {b["compresscodec"] for b in batches} == set(CODECS)
    assert all(b["isvalid"] and b["magic"] == 2 for b in batches)
    assert [b["position"] for b in batches] == [
        sum(b["size"] for b in batches[:i]) for i in range(len(batches))
    ]
    assert sum(b["size"] for b in batches) == log.stat().st_size
    records = [r for b in batches for r in b["records"]]
    got = [
        {k: r[k] for k in ("offset", "CreateTime", "key", "payload", "headers")} for r in records
    ]
    assert got == expected
    for b in batches:
        assert b["count"] == len(b["records"]) == b["lastOffset"] - b["baseOffset"] + 1
        assert b["CreateTime"] == max(r["CreateTime"] for r in b["records"])
        assert not b["isTransactional"] and not b["isControl"]
        assert b["producerId"] >= 0 and b["producerEpoch"] == 0
        assert b["lastSequence"] - b["baseSequence"] == b["count"] - 1
        assert [r["sequence"] for r in b["records"]] == list(
            range(b["baseSequence"], b["lastSequence"] + 1)
        )
    # One idempotent producer per codec: five producer ids, sequences from 0 for each.
    assert len({b["producerId"] for b in batches}) == len(CODECS)
    null_key = records[0]
    assert null_key["keySize"] == -1 and null_key["valueSize"] == -1
    assert records[1]["headerKeys"] == ["h", "empty"]

    # Every index entry points at a batch start and names that batch's last offset.
    by_position = {b["position"]: b for b in batches}
    assert index_dump["entries"], "index.interval.bytes=200 gives the index entries"
    for entry in index_dump["entries"]:
        assert by_position[entry["position"]]["lastOffset"] == entry["offset"]
    times = time_dump["entries"]
    assert times and times[-1] == {
        "timestamp": BASE_TS + len(expected) - 1,
        "offset": len(expected) - 1,
    }
    assert [t["timestamp"] for t in times] == sorted({t["timestamp"] for t in times})

    # The text form, as kafka-dump-log.sh prints it.
    text = dump(log).splitlines()
    assert text[:2] == [f"Dumping {log}", "Log starting offset: 0"]
    first = batches[0]
    assert text[2].startswith(
        f"baseOffset: 0 lastOffset: {first['lastOffset']} count: {first['count']} "
    )
    assert "compresscodec: none" in text[2] and "isvalid: true" in text[2]
    assert text[3] == (
        f"| offset: 0 CreateTime: {BASE_TS} keySize: -1 valueSize: -1 sequence: 0 "
        "headerKeys: [] key: null payload: null headers: []"
    )
    assert text[4].endswith("key: key-1 payload: none-value-1-x headers: [h=1,empty=null]")
    assert len([line for line in text if line.startswith("| ")]) == len(expected)
    assert len(text) == 2 + len(batches) + len(expected)


MARKER_KEY = struct.Struct(">hh")
MARKER_VALUE = struct.Struct(">hi")


def marker(offset: int, commit: bool, epoch: int) -> bytes:
    key = MARKER_KEY.pack(0, 1 if commit else 0)
    return build_batch(
        [(key, MARKER_VALUE.pack(0, epoch), (), BASE_TS + offset)],
        base_offset=offset,
        producer_id=7,
        producer_epoch=2,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=3,
    )


def test_transactions_and_damage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = build_batch(
        [(b"k", b"v", (), BASE_TS), (None, b"w", (), BASE_TS + 1)],
        producer_id=7,
        producer_epoch=2,
        base_sequence=10,
        is_transactional=True,
        compression=GZIP,
        partition_leader_epoch=3,
    )
    bad = bytearray(build_batch([(b"a", b"b", (), BASE_TS)], base_offset=4, compression=LZ4))
    bad[-1] ^= 0xFF
    log = tmp_path / f"{0:020d}.log"
    tail = build_batch([(None, b"torn", (), BASE_TS)], base_offset=5, compression=NONE)[:30]
    log.write_bytes(data + marker(2, True, 5) + marker(3, False, 6) + bad + tail)
    txnindex = tmp_path / f"{0:020d}.txnindex"
    txnindex.write_bytes(struct.pack(">hqqqq", 0, 7, 0, 3, 0))

    assert main(["dump-log", "--files", f"{log},{txnindex}", "--print-data-log"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].startswith(
        "baseOffset: 0 lastOffset: 1 count: 2 baseSequence: 10 lastSequence: 11 producerId: 7 "
        "producerEpoch: 2 partitionLeaderEpoch: 3 isTransactional: true isControl: false "
    )
    assert "compresscodec: gzip" in lines[2]
    assert lines[3].endswith("sequence: 10 headerKeys: [] key: k payload: v headers: []")
    assert "sequence: 11" in lines[4]
    assert "isTransactional: true isControl: true" in lines[5]
    assert lines[6] == (
        f"| offset: 2 CreateTime: {BASE_TS + 2} keySize: 4 valueSize: 6 sequence: -1 "
        "headerKeys: [] endTxnMarker: COMMIT coordinatorEpoch: 5"
    )
    assert lines[8].endswith("endTxnMarker: ABORT coordinatorEpoch: 6")
    assert "compresscodec: lz4" in lines[9] and lines[9].endswith("isvalid: false")
    assert lines[11] == (
        f"Found 30 invalid bytes at position {len(data) + 2 * len(marker(2, True, 5)) + len(bad)}"
        f" of {log}: record batch header is truncated"
    )
    assert lines[12:] == [
        f"Dumping {txnindex}",
        "version: 0 producerId: 7 firstOffset: 0 lastOffset: 3 lastStableOffset: 0",
    ]

    # Without --print-data-log: batches only; --deep-iteration adds records without data.
    assert main(["dump-log", "--files", str(log)]) == 0
    assert [line for line in capsys.readouterr().out.splitlines() if "|" in line] == []
    assert main(["dump-log", "--files", str(log), "--deep-iteration", "--json"]) == 0
    batches = json.loads(capsys.readouterr().out)["files"][0]["entries"]
    assert [r["offset"] for b in batches for r in b["records"] if "error" not in r] == [0, 1, 2, 3]
    assert "payload" not in batches[0]["records"][0]
    assert batches[1]["records"][0]["endTxnMarker"] == "COMMIT"
    assert "error" in batches[3]["records"][0]  # the damaged LZ4 frame


def test_bad_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "leader-epoch-checkpoint"
    other.write_text("0\n0\n")
    assert main(["dump-log", "--files", f"{other},{tmp_path / '00000000000000000000.log'}"]) == 1
    err = capsys.readouterr().err
    assert "not a .log, .index, .timeindex or .txnindex file" in err
    assert "No such file or directory" in err
    with pytest.raises(SystemExit):
        main(["dump-log"])  # --files is required
