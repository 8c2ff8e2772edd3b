"""Idempotent and transactional producer state of one partition: per producer id, its epoch,
the metadata of the last five batches (to drop duplicates and reject out-of-order or fenced
writes) and the first offset of its open transaction; and the partition's transactions
not yet stable (Kafka's ongoingTxns and unreplicatedTxns), which bound the last stable
offset.

Snapshots use Kafka's `<offset>.snapshot` format: version int16 (1), crc32c uint32 over the
rest, then an int32-counted array of entries (producer id int64, epoch int16, last sequence
int32, last offset int64, offset delta int32, timestamp int64, coordinator epoch int32,
current transaction first offset int64).
"""

from __future__ import annotations

import bisect
import os
import struct
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import crc32c

from gregor.log.checkpoint import write_atomically
from gregor.log.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from gregor.log.txn_index import TxnMarker
from gregor.wire.records import BatchHeader

NUM_BATCHES_TO_RETAIN = 5
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
INT_MAX = (1 << 31) - 1
SNAPSHOT_SUFFIX = ".snapshot"

_SNAPSHOT_VERSION = 1
_HEADER = struct.Struct(">hI")
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhiqiqiq")


class CorruptSnapshotError(Exception):
    pass


@dataclass(slots=True)
class BatchMetadata:
    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        first = self.last_seq - self.offset_delta
        return first + INT_MAX + 1 if first < 0 else first

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction its marker (at ``last_offset``) ended."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: deque[BatchMetadata] = field(
        default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN)
    )
    last_timestamp: int = -1
    coordinator_epoch: int = -1
    # First offset of the ongoing transaction, -1 when none.
    current_txn_first_offset: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.producer_epoch:
            return None
        for meta in self.batches:
            if meta.first_seq == first_seq and meta.last_seq == last_seq:
                return meta
        return None

    def copy(self) -> ProducerStateEntry:
        return ProducerStateEntry(
            self.producer_id,
            self.producer_epoch,
            deque(self.batches, maxlen=NUM_BATCHES_TO_RETAIN),
            self.last_timestamp,
            self.coordinator_epoch,
            self.current_txn_first_offset,
        )

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.producer_epoch:
            self.batches.clear()
            self.producer_epoch = epoch

    def add_batch(
        self, epoch: int, last_seq: int, last_offset: int, offset_delta: int, timestamp: int
    ) -> None:
        self.set_epoch(epoch)
        self.batches.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        self.last_timestamp = timestamp

    def apply(self, h: BatchHeader, marker: TxnMarker | None) -> CompletedTxn | None:
        """Take one batch into the entry, unchecked: a data batch, which may open a
        transaction, or a transaction marker (``marker``), which ends the open one (if any:
        then it is returned)."""
        if h.is_control:
            self.set_epoch(h.producer_epoch)
            if not h.record_count:
                # The cleaner emptied it (it keeps the epoch): its transaction is gone from
                # the log, so it ends nothing and names no coordinator (Kafka skips it too).
                self.last_timestamp = h.max_timestamp
                return None
            first = self.current_txn_first_offset
            completed = None
            if first >= 0:
                aborted = marker is None or not marker.commit
                completed = CompletedTxn(self.producer_id, first, h.base_offset, aborted)
            if marker is not None:
                self.coordinator_epoch = marker.coordinator_epoch
            self.current_txn_first_offset = -1
            self.last_timestamp = h.max_timestamp
            return completed
        self.add_batch(
            h.producer_epoch,
            h.last_sequence,
            h.last_offset,
            h.last_offset - h.base_offset,
            h.max_timestamp,
        )
        if h.is_transactional and self.current_txn_first_offset < 0:
            self.current_txn_first_offset = h.base_offset
        return None


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT_MAX)


class ProducerAppendInfo:
    """Staged changes for one producer within one append; committed only if the write happens.
    ``validate`` (appends as leader) applies Kafka's ProducerAppendInfo checks; replicated
    appends and recovery take what the leader wrote."""

    __slots__ = ("current", "updated", "validate", "client", "started", "completed", "marked")

    def __init__(
        self,
        current: ProducerStateEntry | None,
        producer_id: int,
        validate: bool,
        client: bool = True,
    ):
        self.current = current
        self.updated = current.copy() if current else ProducerStateEntry(producer_id)
        self.validate = validate
        self.client = client
        self.started: list[int] = []  # first offsets of the transactions this append opens
        self.completed: list[CompletedTxn] = []
        self.marked = False  # a marker is among the batches

    def _check(self, epoch: int, first_seq: int) -> None:
        updated = self.updated
        if epoch < updated.producer_epoch:
            raise InvalidProducerEpochError(
                f"producer {updated.producer_id} epoch {epoch} is older than the current "
                f"epoch {updated.producer_epoch}"
            )
        if not self.client:
            return  # the coordinator's own batches: the epoch is checked, not the sequence
        current_epoch = self.current.producer_epoch if self.current else NO_PRODUCER_EPOCH
        if epoch != updated.producer_epoch:
            if first_seq != 0 and updated.producer_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"producer {updated.producer_id}: new epoch {epoch} must start at sequence 0,"
                    f" got {first_seq}"
                )
            return
        if updated.batches:
            last_seq = updated.last_seq
        elif self.current is not None and epoch == current_epoch:
            last_seq = self.current.last_seq
        else:
            last_seq = NO_SEQUENCE
        # A producer whose state is unknown (expired or deleted) may continue at any sequence.
        if current_epoch != NO_PRODUCER_EPOCH and not _in_sequence(last_seq, first_seq):
            raise OutOfOrderSequenceError(
                f"producer {updated.producer_id} epoch {epoch}: sequence {first_seq} does not "
                f"follow {last_seq}"
            )

    def _check_marker(self, h: BatchHeader, marker: TxnMarker | None) -> None:
        updated = self.updated
        if h.producer_epoch < updated.producer_epoch:
            raise InvalidProducerEpochError(
                f"marker epoch {h.producer_epoch} of producer {updated.producer_id} is older "
                f"than the current epoch {updated.producer_epoch}"
            )
        if marker is not None and updated.coordinator_epoch > marker.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"marker of producer {updated.producer_id} from coordinator epoch "
                f"{marker.coordinator_epoch}, older than {updated.coordinator_epoch}"
            )

    def append(self, h: BatchHeader, marker: TxnMarker | None = None) -> None:
        """Stage one batch; ``marker`` is what a control batch says."""
        updated = self.updated
        if self.validate:
            if h.is_control:
                self._check_marker(h, marker)
            else:
                self._check(h.producer_epoch, h.base_sequence)
                if not h.is_transactional and updated.current_txn_first_offset >= 0:
                    raise InvalidTxnStateError(
                        f"non-transactional write of producer {updated.producer_id} while its "
                        f"transaction from offset {updated.current_txn_first_offset} is open"
                    )
        opened = updated.current_txn_first_offset < 0
        self.marked |= h.is_control
        completed = updated.apply(h, marker)
        if completed is not None:
            self.completed.append(completed)
        elif opened and updated.current_txn_first_offset >= 0:
            self.started.append(updated.current_txn_first_offset)


class ProducerStateManager:
    """Producer entries of one partition plus the snapshot files in its directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.producers: dict[int, ProducerStateEntry] = {}
        self.map_end_offset = 0  # the log offset up to which the map reflects the log
        # The offsets of the snapshot files in the directory, ascending: listed once, then
        # kept by the writes and deletes here (a glob per retention pass or shutdown is a
        # directory read per partition).
        self._snapshots: list[int] | None = None
        # Open transactions, first offset -> producer id, in offset order (ongoingTxns).
        self.ongoing: dict[int, int] = {}
        # Ended transactions whose marker may not be replicated yet (unreplicatedTxns), by
        # first offset: the LSO stays below them until the high watermark passes the marker.
        self.unreplicated: dict[int, CompletedTxn] = {}
        # KIP-890 verifications under way, by producer id (Kafka's VerificationGuard): a
        # marker in between voids one, so a write verified before its transaction ended
        # cannot open a transaction no coordinator knows of.
        self.verifications: dict[int, object] = {}

    # -- appends ---------------------------------------------------------------------------
    def find_duplicate(
        self, producer_id: int, epoch: int, first_seq: int, last_seq: int
    ) -> BatchMetadata | None:
        entry = self.producers.get(producer_id)
        return entry.find_duplicate(epoch, first_seq, last_seq) if entry else None

    def has_ongoing_txn(self, producer_id: int) -> bool:
        entry = self.producers.get(producer_id)
        return entry is not None and entry.current_txn_first_offset >= 0

    def stage(
        self,
        infos: dict[int, ProducerAppendInfo],
        h: BatchHeader,
        *,
        validate: bool,
        marker: TxnMarker | None = None,
        client: bool = True,
    ) -> None:
        """Add a batch of producer ``h.producer_id`` to the changes staged in ``infos``;
        ``client=False`` for the broker's own batches: their sequences are not checked."""
        info = infos.get(h.producer_id)
        if info is None:
            info = infos[h.producer_id] = ProducerAppendInfo(
                self.producers.get(h.producer_id), h.producer_id, validate, client
            )
        info.append(h, marker)

    def commit(self, infos: dict[int, ProducerAppendInfo], end_offset: int) -> list[CompletedTxn]:
        """Apply staged changes; return the transactions they end, in marker order, for
        the log to index and then `complete`."""
        started: list[tuple[int, int]] = []
        completed: list[CompletedTxn] = []
        for producer_id, info in infos.items():
            self.producers[producer_id] = info.updated
            started += ((first, producer_id) for first in info.started)
            completed += info.completed
            if info.marked:
                self.verifications.pop(producer_id, None)
        for first, producer_id in sorted(started):
            self.ongoing[first] = producer_id
        self.map_end_offset = end_offset
        completed.sort(key=lambda txn: txn.last_offset)
        return completed

    def apply_batch(self, h: BatchHeader, marker: TxnMarker | None = None) -> CompletedTxn | None:
        """Replay one batch header without validation (log recovery); returns the
        transaction a marker ends, for the log to index and then `complete`."""
        entry = self.producers.get(h.producer_id)
        if entry is None:
            entry = self.producers[h.producer_id] = ProducerStateEntry(h.producer_id)
        opened = entry.current_txn_first_offset < 0
        completed = entry.apply(h, marker)
        if opened and entry.current_txn_first_offset >= 0:
            self.ongoing[entry.current_txn_first_offset] = h.producer_id
        return completed

    # -- transactions ----------------------------------------------------------------------
    def begin_verification(self, producer_id: int) -> object:
        """A guard for a verification of ``producer_id``'s first transactional write."""
        guard = self.verifications[producer_id] = object()
        return guard

    def end_verification(self, producer_id: int, guard: object | None) -> bool:
        """Drop ``guard``; whether it still held: no marker of the producer came since it
        was made (nor a newer guard)."""
        if self.verifications.get(producer_id) is not guard:
            return False
        del self.verifications[producer_id]
        return True

    def last_stable_offset_after(self, txn: CompletedTxn) -> int:
        """The LSO right after ``txn`` ends, for its txn index entry: the first offset of the
        earliest other open transaction, else the offset after its marker (Kafka's
        lastStableOffset(completedTxn))."""
        for first, producer_id in self.ongoing.items():
            if producer_id != txn.producer_id:
                return first
        return txn.last_offset + 1

    def complete(self, txn: CompletedTxn) -> None:
        self.ongoing.pop(txn.first_offset, None)
        self.unreplicated[txn.first_offset] = txn

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset of the earliest transaction not yet decided, or decided by a
        marker not yet below ``high_watermark``; None when every one is stable."""
        unreplicated = self.unreplicated
        if unreplicated:
            for first in [f for f, t in unreplicated.items() if t.last_offset < high_watermark]:
                del unreplicated[first]
        candidates = [min(unreplicated)] if unreplicated else []
        if self.ongoing:
            candidates.append(next(iter(self.ongoing)))
        return min(candidates) if candidates else None

    # -- housekeeping ----------------------------------------------------------------------
    def truncate_head(self, log_start_offset: int) -> None:
        """Forget producers whose last write is below the new log start offset."""
        gone = [
            pid
            for pid, e in self.producers.items()
            if e.last_offset < log_start_offset and e.current_txn_first_offset < 0
        ]
        for pid in gone:
            del self.producers[pid]
        for first in [f for f, t in self.unreplicated.items() if t.last_offset < log_start_offset]:
            del self.unreplicated[first]
        self.delete_snapshots_below(log_start_offset)

    def remove_expired(self, now_ms: int, expiration_ms: int) -> None:
        gone = [
            pid
            for pid, e in self.producers.items()
            if e.current_txn_first_offset < 0 and now_ms - e.last_timestamp >= expiration_ms
        ]
        for pid in gone:
            del self.producers[pid]

    def clear(self) -> None:
        self.producers.clear()
        self.verifications.clear()
        self.ongoing.clear()
        self.unreplicated.clear()

    # -- snapshots -------------------------------------------------------------------------
    def snapshot_path(self, offset: int) -> Path:
        return self.directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"

    def snapshot_offsets(self) -> list[int]:
        return list(self._offsets())

    def _offsets(self) -> list[int]:
        if self._snapshots is None:
            self.found_files(os.listdir(self.directory))
            assert self._snapshots is not None
        return self._snapshots

    def found_files(self, names: list[str]) -> None:
        """The names in the log's directory, listed by the log as it loads: the snapshots
        among them (not listed again)."""
        offsets = []
        for name in names:
            if name.endswith(SNAPSHOT_SUFFIX):
                stem = name[: -len(SNAPSHOT_SUFFIX)]
                if stem.isdigit():
                    offsets.append(int(stem))
        self._snapshots = sorted(offsets)

    def start_empty(self, offset: int) -> None:
        """A directory made just now: no snapshots, the map empty at `offset`."""
        self._snapshots = []
        self.map_end_offset = offset

    def snapshot_current(self, log_start_offset: int) -> bool:
        """Whether a reload at `map_end_offset` rebuilds this map without a new snapshot:
        the newest snapshot is at that offset (as Kafka's takeSnapshot, which skips an offset
        it has; producers dropped since are dropped again at load), or the log holds no
        records, no snapshots and no producers. Rewriting it would cost a create and a
        rename over the old file per partition at every shutdown."""
        offsets = self._offsets()
        if offsets:
            return offsets[-1] == self.map_end_offset
        return not self.producers and self.map_end_offset == log_start_offset

    def take_snapshot(self, *, sync: bool) -> Path:
        """Write the map as `<map_end_offset>.snapshot`; fsync it only when `sync`."""
        path = self.snapshot_path(self.map_end_offset)
        body = bytearray(_COUNT.pack(len(self.producers)))
        for e in self.producers.values():
            meta = e.batches[-1] if e.batches else None
            body += _ENTRY.pack(
                e.producer_id,
                e.producer_epoch,
                meta.last_seq if meta else NO_SEQUENCE,
                meta.last_offset if meta else -1,
                meta.offset_delta if meta else 0,
                e.last_timestamp,
                e.coordinator_epoch,
                e.current_txn_first_offset,
            )
        data = _HEADER.pack(_SNAPSHOT_VERSION, crc32c.crc32c(body)) + body
        write_atomically(path, data, sync=sync)
        offsets = self._offsets()
        if self.map_end_offset not in offsets:
            bisect.insort(offsets, self.map_end_offset)
        return path

    @staticmethod
    def read_snapshot(path: Path) -> list[ProducerStateEntry]:
        data = path.read_bytes()
        if len(data) < _HEADER.size + _COUNT.size:
            raise CorruptSnapshotError(f"{path}: too short")
        version, crc = _HEADER.unpack_from(data)
        if version != _SNAPSHOT_VERSION:
            raise CorruptSnapshotError(f"{path}: unknown version {version}")
        body = memoryview(data)[_HEADER.size :]
        if crc32c.crc32c(body) != crc:
            raise CorruptSnapshotError(f"{path}: crc mismatch")
        (count,) = _COUNT.unpack_from(body)
        if count < 0 or len(body) != _COUNT.size + count * _ENTRY.size:
            raise CorruptSnapshotError(f"{path}: bad entry count {count}")
        entries = []
        for (
            pid,
            epoch,
            last_seq,
            last_offset,
            delta,
            ts,
            coord_epoch,
            txn_first,
        ) in _ENTRY.iter_unpack(body[_COUNT.size :]):
            entry = ProducerStateEntry(pid, epoch, last_timestamp=ts)
            entry.coordinator_epoch = coord_epoch
            entry.current_txn_first_offset = txn_first
            if last_offset >= 0:
                entry.batches.append(BatchMetadata(last_seq, last_offset, delta, ts))
            entries.append(entry)
        return entries

    def load_latest_snapshot(self, max_offset: int) -> int | None:
        """Load the newest readable snapshot at or below `max_offset`, deleting corrupt ones;
        return its offset (the log must be replayed from there), or None if there is none."""
        for offset in reversed(self.snapshot_offsets()):
            if offset > max_offset:
                continue
            path = self.snapshot_path(offset)
            try:
                entries = self.read_snapshot(path)
            except (CorruptSnapshotError, OSError):
                self._delete_snapshots([offset])
                continue
            self._set_producers(entries)
            self.map_end_offset = offset
            return offset
        self._set_producers([])
        return None

    def _set_producers(self, entries: list[ProducerStateEntry]) -> None:
        """The map from a snapshot: its open transactions are ongoing again."""
        self.producers = {e.producer_id: e for e in entries}
        self.ongoing = {
            e.current_txn_first_offset: e.producer_id
            for e in sorted(entries, key=lambda e: e.current_txn_first_offset)
            if e.current_txn_first_offset >= 0
        }
        self.unreplicated = {}

    def delete_snapshots_above(self, offset: int) -> None:
        self._delete_snapshots([snap for snap in self._offsets() if snap > offset])

    def delete_snapshots_below(self, offset: int) -> None:
        self._delete_snapshots([snap for snap in self._offsets() if snap < offset])

    def _delete_snapshots(self, doomed: list[int]) -> None:
        for snap in doomed:
            self.snapshot_path(snap).unlink(missing_ok=True)
            self._offsets().remove(snap)
