"""``gregor dump-log``: the contents of log segment and index files, read straight from disk
with no broker, like Kafka's ``kafka-dump-log.sh``.

Each file becomes a list of entries (dicts with Kafka's field names, in its order) that are
printed as Kafka prints them (``name: value`` pairs) or, with ``--json``, as one JSON
document. Batches are read one at a time, so a 1 GiB segment needs no 1 GiB of memory.
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from crc32c import crc32c

from gregor.log.txn_index import ABORT, COMMIT, CONTROL_KEY, CONTROL_VALUE
from gregor.log.txn_index import ENTRY as TXN_ENTRY
from gregor.server.cli.output import jsonable
from gregor.wire.compression import CODEC_NAMES, CorruptRecordError, UnsupportedCompressionError
from gregor.wire.records import (
    BATCH_HEADER_SIZE,
    LOG_APPEND_TIME,
    BatchHeader,
    Record,
    decode_records,
    parse_header,
)

_CRC_FROM = 21  # the CRC covers the batch from its attributes on
_OFFSET_ENTRY = struct.Struct(">ii")  # relative offset, position
_TIME_ENTRY = struct.Struct(">qi")  # timestamp, relative offset
CONTROL_TYPES = {ABORT: "ABORT", COMMIT: "COMMIT"}


class DumpError(Exception):
    """A file that cannot be dumped (missing, or not a segment or index file)."""


def base_offset_of(path: Path) -> int:
    try:
        return int(path.stem)
    except ValueError:
        raise DumpError(f"{path}: not named after a base offset") from None


def dump_file(path: Path, *, deep: bool, data: bool) -> dict[str, Any]:
    """One file's dump: ``{"file", "kind", "entries", ...}``."""
    kind = path.suffix.lstrip(".")
    if kind != "log" and kind not in _INDEX_READERS:
        raise DumpError(f"{path}: not a .log, .index, .timeindex or .txnindex file")
    base = base_offset_of(path)
    result: dict[str, Any] = {"file": str(path), "kind": kind, "baseOffset": base}
    try:
        with open(path, "rb") as f:
            if kind == "log":
                result["entries"] = list(_log_entries(f, result, deep=deep, data=data))
            else:
                result["entries"] = list(_INDEX_READERS[kind](f.read(), base, result))
    except OSError as e:
        raise DumpError(f"{path}: {e.strerror or e}") from e
    return result


# -- .log -------------------------------------------------------------------------------


def _log_entries(
    f: IO[bytes], result: dict[str, Any], *, deep: bool, data: bool
) -> Iterator[dict[str, Any]]:
    position = 0
    while True:
        head = f.read(BATCH_HEADER_SIZE)
        if not head:
            return
        try:
            header = parse_header(head)
        except CorruptRecordError as e:
            result["invalidBytes"] = len(head) + len(f.read())
            result["invalidAt"] = position
            result["invalidReason"] = str(e)
            return
        body = f.read(header.size - BATCH_HEADER_SIZE)
        if len(body) < header.size - BATCH_HEADER_SIZE:
            result["invalidBytes"] = len(head) + len(body)
            result["invalidAt"] = position
            result["invalidReason"] = "record batch is truncated"
            return
        batch = head + body
        entry = batch_entry(batch, header, position)
        if deep or data:
            entry["records"] = record_entries(batch, header, data=data)
        yield entry
        position += header.size


def batch_entry(batch: bytes, header: BatchHeader, position: int) -> dict[str, Any]:
    """A batch as kafka-dump-log.sh describes it; ``batch`` holds just this batch."""
    time_kind = "LogAppendTime" if header.timestamp_type == LOG_APPEND_TIME else "CreateTime"
    entry: dict[str, Any] = {
        "baseOffset": header.base_offset,
        "lastOffset": header.last_offset,
        "count": header.record_count,
        "baseSequence": header.base_sequence,
        "lastSequence": header.last_sequence,
        "producerId": header.producer_id,
        "producerEpoch": header.producer_epoch,
        "partitionLeaderEpoch": header.partition_leader_epoch,
        "isTransactional": header.is_transactional,
        "isControl": header.is_control,
    }
    if header.has_delete_horizon:  # the cleaner's delete horizon is the base timestamp then
        entry["deleteHorizonMs"] = header.base_timestamp
    entry |= {
        "position": position,
        time_kind: header.max_timestamp,
        "size": header.size,
        "magic": header.magic,
        "compresscodec": CODEC_NAMES.get(header.compression, f"unknown({header.compression})"),
        "crc": header.crc,
        "isvalid": crc32c(batch[_CRC_FROM:]) == header.crc,
    }
    return entry


def record_entries(batch: bytes, header: BatchHeader, *, data: bool) -> list[dict[str, Any]]:
    try:
        records = decode_records(batch, header)
    except (CorruptRecordError, UnsupportedCompressionError) as e:
        return [{"error": str(e)}]
    return [record_entry(r, header, data=data) for r in records]


def record_entry(record: Record, header: BatchHeader, *, data: bool) -> dict[str, Any]:
    time_kind = "LogAppendTime" if header.timestamp_type == LOG_APPEND_TIME else "CreateTime"
    sequence = -1
    if header.base_sequence >= 0:
        sequence = (header.base_sequence + record.offset - header.base_offset) & 0x7FFFFFFF
    entry: dict[str, Any] = {
        "offset": record.offset,
        time_kind: record.timestamp,
        "keySize": -1 if record.key is None else len(record.key),
        "valueSize": -1 if record.value is None else len(record.value),
        "sequence": sequence,
        "headerKeys": [name for name, _ in record.headers],
    }
    if header.is_control:
        entry |= control_entry(record)
    elif data:
        entry["key"] = record.key
        entry["payload"] = record.value
        entry["headers"] = dict(record.headers)
    return entry


def control_entry(record: Record) -> dict[str, Any]:
    """A transaction marker's type (COMMIT/ABORT) and coordinator epoch, or why it is not
    one Kafka knows."""
    key, value = record.key, record.value
    if key is None or len(key) < CONTROL_KEY.size:
        return {"controlError": "control record key is too short"}
    version, kind = CONTROL_KEY.unpack_from(key)
    if kind not in CONTROL_TYPES:
        return {"controlType": f"unknown({kind})", "controlVersion": version}
    if value is None or len(value) < CONTROL_VALUE.size:
        return {"endTxnMarker": CONTROL_TYPES[kind], "controlError": "marker value too short"}
    return {
        "endTxnMarker": CONTROL_TYPES[kind],
        "coordinatorEpoch": CONTROL_VALUE.unpack(value[: CONTROL_VALUE.size])[1],
    }


# -- index files ------------------------------------------------------------------------


def _whole_entries(buf: bytes, entry: struct.Struct, result: dict[str, Any]) -> bytes:
    extra = len(buf) % entry.size
    if extra:
        result["invalidBytes"] = extra
        result["invalidAt"] = len(buf) - extra
        result["invalidReason"] = f"length is not a multiple of {entry.size}"
    return buf[: len(buf) - extra]


def _offset_entries(buf: bytes, base: int, result: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for relative, position in _OFFSET_ENTRY.iter_unpack(_whole_entries(buf, _OFFSET_ENTRY, result)):
        # An active segment's index is a sparse file sized for all its future entries, and a
        # killed broker leaves it so: the first zero entry ends the written ones (no real entry
        # points at position 0, where the segment's first batch needs none).
        if relative == 0 and position == 0:
            return
        yield {"offset": base + relative, "position": position}


def _time_entries(buf: bytes, base: int, result: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for timestamp, relative in _TIME_ENTRY.iter_unpack(_whole_entries(buf, _TIME_ENTRY, result)):
        if timestamp == 0 and relative == 0:  # unwritten, as above
            return
        yield {"timestamp": timestamp, "offset": base + relative}


def _txn_entries(buf: bytes, base: int, result: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for version, producer_id, first, last, lso in TXN_ENTRY.iter_unpack(
        _whole_entries(buf, TXN_ENTRY, result)
    ):
        yield {
            "version": version,
            "producerId": producer_id,
            "firstOffset": first,
            "lastOffset": last,
            "lastStableOffset": lso,
        }


_INDEX_READERS = {"index": _offset_entries, "timeindex": _time_entries, "txnindex": _txn_entries}


# -- output -----------------------------------------------------------------------------


def _text(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, bytes | bytearray):
        return value.decode(errors="replace")
    if isinstance(value, list):
        return "[" + ",".join(value) + "]"
    if isinstance(value, dict):
        return "[" + ",".join(f"{k}={_text(v)}" for k, v in value.items()) + "]"
    return str(value)


def _line(entry: dict[str, Any]) -> str:
    return " ".join(f"{k}: {_text(v)}" for k, v in entry.items() if k != "records")


def print_text(dump: dict[str, Any], out: IO[str]) -> None:
    out.write(f"Dumping {dump['file']}\n")
    if dump["kind"] == "log":
        out.write(f"Log starting offset: {dump['baseOffset']}\n")
    for entry in dump["entries"]:
        out.write(_line(entry) + "\n")
        for record in entry.get("records", ()):
            out.write("| " + _line(record) + "\n")
    if "invalidBytes" in dump:
        out.write(
            f"Found {dump['invalidBytes']} invalid bytes at position {dump['invalidAt']} "
            f"of {dump['file']}: {dump['invalidReason']}\n"
        )


def run(args: argparse.Namespace) -> int:
    """``gregor dump-log``'s parsed arguments."""
    return dump_files(
        args.files, deep=args.deep_iteration, data=args.print_data_log, as_json=args.json
    )


def dump_files(files: list[Path], *, deep: bool, data: bool, as_json: bool) -> int:
    """Dump every file to stdout; 1 if one could not be read (invalid bytes in a file are
    reported in its dump, as Kafka's tool does: a crash leaves a torn tail)."""
    status = 0
    dumps = []
    for path in files:
        try:
            dump = dump_file(path, deep=deep, data=data)
        except DumpError as e:
            print(f"gregor dump-log: {e}", file=sys.stderr)
            status = 1
            continue
        if as_json:
            dumps.append(jsonable(dump))
        else:
            print_text(dump, sys.stdout)
    if as_json:
        json.dump({"files": dumps}, sys.stdout, indent=1)
        sys.stdout.write("\n")
    return status
