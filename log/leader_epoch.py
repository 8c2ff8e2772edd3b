"""Leader epoch cache of one partition: the start offset of every leader epoch present in the
log (KIP-101), kept in `leader-epoch-checkpoint` (version line `0`, count line, then
`epoch start_offset` lines). Followers use it to truncate to the right point after a leader
change (OffsetsForLeaderEpoch)."""

from __future__ import annotations

import bisect
from collections.abc import Callable
from pathlib import Path

from gregor.log.checkpoint import DiskJob, add_atomic_write, write_atomically
from gregor.log.errors import KafkaStorageError

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochCache:
    def __init__(
        self, directory: Path, on_io_error: Callable[[OSError], None] = lambda exc: None
    ) -> None:
        self.path = directory / LEADER_EPOCH_CHECKPOINT
        self._on_io_error = on_io_error
        self._epochs: list[int] = []
        self._starts: list[int] = []
        self._dirty = False  # written but not yet fsynced
        self._unwritten = False  # changed since the file was (queued to be) written
        self._writing: DiskJob | None = None  # a job that writes the file has not finished
        self._write_owed = False  # write() was called meanwhile
        # Called when a change is left unwritten (the LogManager has its flusher write it).
        self.on_change: Callable[[], None] = lambda: None
        self._read()

    def _read(self) -> None:
        try:
            lines = self.path.read_text().splitlines()
        except FileNotFoundError:
            return
        try:
            if int(lines[0]) != 0 or int(lines[1]) != len(lines) - 2:
                raise ValueError("bad header")
            for line in lines[2:]:
                epoch, start = line.split(" ")
                self._epochs.append(int(epoch))
                self._starts.append(int(start))
        except (ValueError, IndexError) as exc:
            raise KafkaStorageError(
                f"malformed leader epoch checkpoint {self.path}: {exc}"
            ) from None

    def _file_bytes(self) -> bytes:
        lines = ["0", str(len(self._epochs))]
        lines += [f"{e} {s}" for e, s in zip(self._epochs, self._starts, strict=True)]
        return ("\n".join(lines) + "\n").encode()

    def _changed(self) -> None:
        self._unwritten = True
        self.on_change()

    def write(self) -> None:
        """Make the file current now (not fsynced); if a job is writing it, right after."""
        if self._writing is not None:
            self._write_owed = True
            return
        if not self._unwritten:
            return
        try:
            write_atomically(self.path, self._file_bytes(), sync=False)
        except OSError as exc:
            self._on_io_error(exc)
            raise KafkaStorageError(f"writing {self.path} failed: {exc}") from exc
        self._unwritten = False
        self._dirty = True

    def add_write(self, job: DiskJob) -> None:
        """Queue the write of the cache as it is now on `job`, if it changed (a directory
        renamed meanwhile, its log being deleted, needs none)."""
        if not self._unwritten or self._writing is not None:
            return
        add_atomic_write(job, self.path, self._file_bytes(), sync=False, missing_ok=True)
        self._unwritten = False
        self._dirty = True
        self._writing = job
        job.cleanup(self._written)

    def _written(self) -> None:
        job, self._writing = self._writing, None
        if job is not None and not job.succeeded:
            self._unwritten = True
        if self._write_owed:
            self._write_owed = False
            self.write()
        elif self._unwritten:  # changed meanwhile
            self.on_change()

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._starts, strict=True))

    @property
    def latest_epoch(self) -> int:
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that `epoch` starts at `start_offset`; a newer entry replaces any that
        conflict with it (an equal or higher epoch, or a start at or after it)."""
        if self._assign(epoch, start_offset):
            self._changed()

    def assign_at_log_end(self, epoch: int, log_end_offset: int) -> None:
        """A new leader's epoch, newer than every entry, starting at the log end: no record
        holds it yet, so its file is written with the next flush, roll, close or other
        change rather than queued now. Until a record follows, a load drops the entry anyway
        (truncate_from_end, as Kafka's loader does); once one does, a flush writes the file
        before the recovery point passes that record, and a crash before it replays the
        record, which assigns the epoch again. A failover of 50,000 partitions would
        otherwise replace 50,000 files at once (about 0.3 ms of CPU each)."""
        if self._epochs and self._epochs[-1] >= epoch:
            self.assign(epoch, log_end_offset)  # not newer: it may drop entries with records
        elif self._assign(epoch, log_end_offset):
            self._unwritten = True

    def _assign(self, epoch: int, start_offset: int) -> bool:
        """assign, in memory; whether the entries changed."""
        if epoch < 0 or start_offset < 0:
            return False
        if self._epochs and epoch == self._epochs[-1] and start_offset >= self._starts[-1]:
            return False
        while self._epochs and (self._epochs[-1] >= epoch or self._starts[-1] >= start_offset):
            self._epochs.pop()
            self._starts.pop()
        self._epochs.append(epoch)
        self._starts.append(start_offset)
        return True

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(largest epoch <= `epoch`, end offset of that epoch), as OffsetsForLeaderEpoch
        answers: the next epoch's start, or the log end for the latest epoch."""
        if epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if epoch == self._epochs[-1]:
            return epoch, log_end_offset
        higher = bisect.bisect_right(self._epochs, epoch)
        if higher == len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return epoch, self._starts[0]
        return self._epochs[higher - 1], self._starts[higher]

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch whose range contains `offset` (UNDEFINED_EPOCH if before the first)."""
        n = bisect.bisect_right(self._starts, offset)
        return self._epochs[n - 1] if n else UNDEFINED_EPOCH

    def truncate_from_end(self, end_offset: int) -> None:
        """Remove entries starting at or after `end_offset` (log truncation)."""
        keep = bisect.bisect_left(self._starts, end_offset)
        if keep < len(self._starts):
            del self._epochs[keep:], self._starts[keep:]
            self._changed()

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop entries wholly below `start_offset`; the epoch covering it now starts there."""
        n = bisect.bisect_right(self._starts, start_offset)
        if n == 0 or (n == 1 and self._starts[0] == start_offset):
            return
        epoch = self._epochs[n - 1]
        del self._epochs[:n], self._starts[:n]
        self._epochs.insert(0, epoch)
        self._starts.insert(0, start_offset)
        self._changed()

    def clear(self) -> None:
        if self._epochs:
            self._epochs.clear()
            self._starts.clear()
            self._changed()

    def start_fsync(self, job: DiskJob) -> None:
        """Queue the write and fsync of the checkpoint file on `job`, if it changed since the
        last."""
        self.add_write(job)
        if self._dirty:
            job.fsync_path(self.path)
            job.cleanup(lambda: self._still_dirty_unless(job.succeeded))
        self._dirty = False

    def _still_dirty_unless(self, synced: bool) -> None:
        self._dirty = self._dirty or not synced
