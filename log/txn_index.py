"""The aborted-transaction index of one segment (`<base>.txnindex`, Kafka's format), and the
transaction markers (control batches) it is built from.

Each entry is 34 bytes: version int16 (0), producer id int64, first offset int64, last
offset int64 (the ABORT marker's offset), last stable offset int64 (the LSO right after
the abort). An entry goes into the index of the segment holding its marker. The file is
created with its first entry; most segments never have one. Entries are kept in memory
once read (aborts are rare, the files small).
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import NamedTuple

from gregor.wire.records import BatchHeader, build_batch, decode_records

ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = ENTRY.size  # 34
_VERSION = 0
CONTROL_KEY = struct.Struct(">hh")  # version, type
CONTROL_VALUE = struct.Struct(">hi")  # version, coordinator epoch
ABORT, COMMIT = 0, 1


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TxnMarker(NamedTuple):
    """What a control batch says: the transaction's outcome and its coordinator's epoch."""

    commit: bool
    coordinator_epoch: int


def build_marker_batch(
    producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, now_ms: int
) -> bytes:
    """A COMMIT or ABORT control batch (offsets assigned by the append)."""
    key = CONTROL_KEY.pack(0, COMMIT if commit else ABORT)
    value = CONTROL_VALUE.pack(0, coordinator_epoch)
    return build_batch(
        [(key, value, (), now_ms)],
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
    )


def parse_marker(data: bytes | bytearray | memoryview, header: BatchHeader) -> TxnMarker:
    """The marker of the control batch ``header`` describes within ``data``. A control
    record Kafka does not know (not ABORT or COMMIT) counts as an abort of nothing; its
    coordinator epoch is then unknown (-1)."""
    records = decode_records(data, header)
    if records:
        key, value = records[0].key, records[0].value
        if key is not None and len(key) >= CONTROL_KEY.size:
            _, kind = CONTROL_KEY.unpack_from(key)
            epoch = -1
            if value is not None and len(value) >= CONTROL_VALUE.size:
                epoch = CONTROL_VALUE.unpack_from(value)[1]
            if kind in (ABORT, COMMIT):
                return TxnMarker(kind == COMMIT, epoch)
    return TxnMarker(False, -1)


class TransactionIndex:
    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._entries: list[AbortedTxn] | None = None  # None: not read yet
        self.unflushed = False

    @property
    def entries(self) -> list[AbortedTxn]:
        if self._entries is None:
            self._entries = self._read()
        return self._entries

    def _read(self) -> list[AbortedTxn]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        entries: list[AbortedTxn] = []
        previous = self.base_offset - 1
        for version, *fields in ENTRY.iter_unpack(data[: len(data) - len(data) % ENTRY_SIZE]):
            txn = AbortedTxn(*fields)
            # Markers lie in the segment, in order (Kafka's sanity check): the rest of a file
            # that breaks this is torn or stale; the log's replay writes it again.
            if (
                version != _VERSION
                or txn.last_offset <= previous
                or txn.first_offset > txn.last_offset
            ):
                break
            entries.append(txn)
            previous = txn.last_offset
        if len(entries) * ENTRY_SIZE != len(data):
            os.truncate(self.path, len(entries) * ENTRY_SIZE)
        return entries

    def append(self, txn: AbortedTxn) -> None:
        entries = self.entries
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, ENTRY.pack(_VERSION, *txn))
        finally:
            os.close(fd)
        entries.append(txn)
        self.unflushed = True

    def truncate_to(self, offset: int) -> bool:
        """Drop the entries whose marker is at or after ``offset``; whether there were any."""
        entries = self.entries
        keep = len(entries)
        while keep and entries[keep - 1].last_offset >= offset:
            keep -= 1
        if keep == len(entries):
            return False
        del entries[keep:]
        if keep:
            os.truncate(self.path, keep * ENTRY_SIZE)
            self.unflushed = True
        else:
            self.path.unlink(missing_ok=True)
        return True

    def collect(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """Kafka's collectAbortedTxns: the entries overlapping [fetch_offset, upper_bound),
        and whether the search is complete (an entry's LSO reached the upper bound, so no
        later segment can hold an overlapping one)."""
        found = []
        for txn in self.entries:
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound:
                return found, True
        return found, False
