"""Per-log-dir offset checkpoint files (recovery points, high watermarks, log start offsets)
in Kafka's text format: a version line `0`, a count line, then `topic partition offset` lines."""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path

from gregor.log.errors import KafkaStorageError

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"

_VERSION = 0
_LIBC = ctypes.CDLL(None, use_errno=True)


def fsync_path(path: Path) -> None:
    """fsync a file, or a directory (making the names created or renamed in it durable)."""
    # Closed at once: a job may sync thousands of paths.
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class DiskJob:
    """Blocking disk work (opens, writes, fsyncs, renames, unlinks) queued on the event-loop
    thread, so that `run()` may go to a worker thread. Descriptors the steps open are closed
    by `finish()`, back on the loop thread (a descriptor number is never freed under the
    loop's feet), which then runs the completions (such as advancing a recovery point) if
    every step succeeded."""

    def __init__(self) -> None:
        self._steps: list[Callable[[], object]] = []
        self._cleanups: list[Callable[[], None]] = []
        self._completions: list[Callable[[], None]] = []
        self._fds: list[int] = []
        self._ran = False
        self.error: OSError | None = None

    def __bool__(self) -> bool:
        return bool(self._steps or self._cleanups or self._completions)

    def open(self, path: Path, flags: int) -> int:
        """For steps: open a file that finish() closes."""
        fd = os.open(path, flags, 0o644)
        self._fds.append(fd)
        return fd

    def step(self, work: Callable[[], object]) -> None:
        self._steps.append(work)

    def fsync(self, fd: int) -> None:
        """fsync a descriptor its owner keeps open until the job finishes."""
        self._steps.append(partial(os.fsync, fd))

    def fsync_path(self, path: Path) -> None:
        """fsync a file or directory; one deleted or renamed meanwhile needs none."""
        self._steps.append(partial(self._fsync_if_present, path))

    @staticmethod
    def _fsync_if_present(path: Path) -> None:
        try:
            fsync_path(path)
        except FileNotFoundError:
            pass

    def sync_filesystem(self, path: Path) -> None:
        """syncfs(2) the filesystem holding ``path``: everything written to it so far reaches the
        disk, in one call where fsyncing each file takes one per file (a clean shutdown of a
        thousand partitions owes thousands). A write-back error fails the step as an fsync's
        would (Linux reports them to syncfs since 5.8)."""
        self._steps.append(partial(self._syncfs, path))

    def _syncfs(self, path: Path) -> None:
        fd = self.open(path, os.O_RDONLY)
        if _LIBC.syncfs(fd) != 0:
            error = ctypes.get_errno()
            raise OSError(error, os.strerror(error), str(path))

    def cleanup(self, action: Callable[[], None]) -> None:
        """Run on the loop thread after the steps, whatever their outcome."""
        self._cleanups.append(action)

    def then(self, completion: Callable[[], None]) -> None:
        """Run on the loop thread after the steps, if they all succeeded."""
        self._completions.append(completion)

    @property
    def succeeded(self) -> bool:
        return self._ran and self.error is None

    def run(self) -> None:
        """The blocking part, on any thread; stops at the first OSError and keeps it."""
        try:
            for work in self._steps:
                work()
        except OSError as exc:
            self.error = exc
        self._ran = True

    def finish(self) -> OSError | None:
        """On the loop thread: close the descriptors, then complete if the steps all ran
        (a cancelled job completes nothing); returns the error."""
        for fd in self._fds:
            os.close(fd)
        self._fds = []
        for action in self._cleanups:
            action()
        if self.succeeded:
            for completion in self._completions:
                completion()
        return self.error

    def run_here(self) -> None:
        """Run and finish on the calling thread; raise the error, if any."""
        self.run()
        error = self.finish()
        if error is not None:
            raise error


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def add_atomic_write(
    job: DiskJob, path: Path, data: bytes, *, sync: bool = True, missing_ok: bool = False
) -> None:
    """The one way a file is replaced whole: write `<path>.tmp` (every byte, over as many
    writes as it takes), rename it over `path`; with `sync`, fsync the file before the rename
    and the directory after it (without, the caller's later flush or syncfs makes it
    durable). With `missing_ok`, a directory gone by the time the job runs is no error."""
    tmp = path.with_name(path.name + ".tmp")

    def write() -> None:
        # Closed at once, not at finish(): a job may write thousands of checkpoints.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _write_all(fd, data)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)

    def write_unless_gone() -> None:
        try:
            write()
        except FileNotFoundError:
            pass

    job.step(write_unless_gone if missing_ok else write)
    if sync:
        job.fsync_path(path.parent)


def write_atomically(path: Path, data: bytes, *, sync: bool = True) -> None:
    """add_atomic_write, now, on this thread; raises the OSError."""
    job = DiskJob()
    add_atomic_write(job, path, data, sync=sync)
    job.run_here()


def checkpoint_bytes(offsets: Mapping[tuple[str, int], int]) -> bytes:
    lines = [str(_VERSION), str(len(offsets))]
    lines += [f"{topic} {partition} {offset}" for (topic, partition), offset in offsets.items()]
    return ("\n".join(lines) + "\n").encode()


def write_checkpoint(path: Path, offsets: Mapping[tuple[str, int], int]) -> None:
    write_atomically(path, checkpoint_bytes(offsets))


def read_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """Parse a checkpoint file; a missing file is empty, a malformed one is a KafkaStorageError."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    lines = text.splitlines()
    try:
        if int(lines[0]) != _VERSION:
            raise ValueError(f"unrecognised version {lines[0]}")
        count = int(lines[1])
        entries = lines[2:]
        if len(entries) != count:
            raise ValueError(f"expected {count} entries, found {len(entries)}")
        result = {}
        for line in entries:
            topic, partition, offset = line.split(" ")
            result[(topic, int(partition))] = int(offset)
    except (ValueError, IndexError) as exc:
        raise KafkaStorageError(f"malformed checkpoint file {path}: {exc}") from None
    return result
