"""The embedded controller's durable metadata: a snapshot plus an append-only log of changes.

The snapshot is ``gregor-metadata.json`` (the format every earlier version wrote, read as it
is; it now also names the generation of the log that follows it). Each commit appends one
line to ``gregor-metadata.<generation>.log``: ``<crc32 hex> <json list of changes>``. A
change is absolute (a topic's whole entry, or its removal; a resource's whole config map; a
resource pattern's whole ACL list; the producer-id block end), so applying it twice is
harmless. Lines are written and fdatasync'ed by one worker thread, a batch of commits per
write (group commit), and each commit's future completes once its line is durable: the
commit point of a change. The thread keeps its own copy of the state, and once the log holds
more lines than the snapshot has topics (and at least ``COMPACT_AFTER``), it writes a new
snapshot of the next generation atomically (temp file, fsync, rename, directory fsync) and
starts a new log; a crash between the rename and the removal of the old log leaves a log the
snapshot does not name, which is ignored and removed at the next start.

Only the last line can be torn by a crash (a batch is written only after the previous one is
durable): a bad last line is cut off at load; a bad line followed by good ones is damage
from outside the broker and stops start-up, as a torn snapshot does.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import zlib
from collections import deque
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from gregor.log.checkpoint import fsync_path, write_atomically
from gregor.log.errors import KafkaStorageError

logger = logging.getLogger(__name__)

SNAPSHOT_FILE = "gregor-metadata.json"
# A new snapshot once the log has this many lines and more than the snapshot has topics: the
# cost of compacting (one pass over the topics) is spread over as many changes.
COMPACT_AFTER = 1000

Change = dict[str, Any]
# The snapshot's table of each op's entries; "acl" is controller/acls/metadata_format.py's.
_TABLES = {"topic": "topics", "config": "configs", "quota": "client_quotas", "acl": "acls"}
_TABLES["scram"] = "scram_credentials"  # controller/scram_metadata.py's
_OPS = frozenset({*_TABLES, "producer_id_block_end"})


def log_path(state_dir: Path, generation: int) -> Path:
    return state_dir / f"gregor-metadata.{generation}.log"


def encode_line(changes: list[Change]) -> bytes:
    payload = json.dumps(changes, separators=(",", ":"), sort_keys=True).encode()
    return b"%08x %s\n" % (zlib.crc32(payload), payload)


def apply_change(state: dict[str, Any], change: Mapping[str, Any]) -> None:
    """Apply one change to a state in the snapshot's layout."""
    op = change["op"]
    value = change.get("value")
    if op == "producer_id_block_end":
        state["producer_id_block_end"] = max(state.get("producer_id_block_end", 0), value)
        return
    table = _TABLES.get(op)
    if table is None:
        raise ValueError(f"unknown change {op!r}")
    entries = state.setdefault(table, {})
    if value is None or (op != "topic" and not value):
        entries.pop(change["name"], None)
    else:
        entries[change["name"]] = value


class MetadataStore:
    def __init__(self, state_dir: Path) -> None:
        self.dir = state_dir
        self.path = state_dir / SNAPSHOT_FILE
        # A partial temp file is what a crash mid-snapshot leaves; the snapshot is intact.
        self.path.with_name(self.path.name + ".tmp").unlink(missing_ok=True)
        self.fresh = not self.path.exists()
        self.state: dict[str, Any] = {} if self.fresh else _load_snapshot(self.path)
        self.generation = int(self.state.get("log_generation", 0))
        self.lines = 0
        if not self.fresh:
            self.lines = _replay(log_path(state_dir, self.generation), self.state)
            # Logs of earlier generations are in the snapshot (a crash after its rename).
            for stale in state_dir.glob("gregor-metadata.*.log"):
                generation = stale.name.split(".")[1]
                if generation.isdigit() and int(generation) < self.generation:
                    stale.unlink(missing_ok=True)
        self._queue: deque[_Commit] = deque()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._fd = -1
        self._closed = False
        self.failed: OSError | None = None

    # -- loop side -------------------------------------------------------------------------
    def write_snapshot(self, state: dict[str, Any]) -> None:
        """Replace everything with ``state`` now, on the calling thread (start-up, before the
        writer runs): a new generation, its log empty."""
        assert self._thread is None
        self._snapshot(state)

    def commit(
        self, changes: list[Change], sync_first: Iterable[Path] = ()
    ) -> asyncio.Future[None]:
        """Append ``changes`` as one line, once the directories ``sync_first`` are fsynced
        (those holding logs the change names); the future completes once it is durable (or
        fails with the OSError that kept it from being written)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        if self.failed is not None:
            future.set_exception(OSError(f"the metadata log is failed: {self.failed}"))
            return future
        with self._wake:
            self._queue.append(_Commit(changes, tuple(sync_first), future, loop))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="gregor-metadata-writer", daemon=True
                )
                self._thread.start()
            self._wake.notify()
        return future

    def close(self) -> None:
        """Write what is queued, then stop the writer."""
        with self._wake:
            self._closed = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    # -- writer thread ---------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._queue and not self._closed:
                    self._wake.wait()
                if not self._queue:
                    break
                batch = list(self._queue)
                self._queue.clear()
            try:
                error = self._sync({path for c in batch for path in c.sync_first})
                if error is None:
                    error = self._append([c.changes for c in batch])
            except Exception as e:  # a bug: fail these commits, keep serving the next ones
                logger.exception("The metadata writer failed")
                error = OSError(f"the metadata writer failed: {e!r}")
            for c in batch:
                try:
                    c.loop.call_soon_threadsafe(_settle, c.future, error)
                except RuntimeError:  # its event loop is closed: the broker stopped
                    pass
            if error is None and self.lines >= max(COMPACT_AFTER, len(self.state["topics"])):
                try:
                    self._snapshot(self.state)
                except OSError as e:  # the log goes on; compaction is tried again later
                    logger.error("Could not compact the metadata log into %s: %s", self.path, e)
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _sync(self, directories: set[Path]) -> OSError | None:
        try:
            for directory in sorted(directories):
                fsync_path(directory)
        except OSError as e:
            logger.error("Could not make the new logs in %s durable: %s", directory, e)
            return e
        return None

    def _append(self, batches: list[list[Change]]) -> OSError | None:
        data = b"".join(encode_line(changes) for changes in batches)
        path = log_path(self.dir, self.generation)
        start = -1
        try:
            if self._fd < 0:
                created = not path.exists()
                self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                if created:
                    fsync_path(self.dir)
            start = os.lseek(self._fd, 0, os.SEEK_END)
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view) :]
            os.fdatasync(self._fd)
        except OSError as e:
            logger.error("Could not write the metadata log %s: %s", path, e)
            if start >= 0:
                try:  # leave no partial line for the next commit to follow
                    os.ftruncate(self._fd, start)
                    os.fdatasync(self._fd)
                except OSError as again:
                    self.failed = again
            return e
        for changes in batches:
            for change in changes:
                apply_change(self.state, change)
        self.lines += len(batches)
        return None

    def _snapshot(self, state: dict[str, Any]) -> None:
        """A new generation: the snapshot names it (the commit point), then the old log goes."""
        old = log_path(self.dir, self.generation)
        generation = self.generation + 1
        state = {**state, "log_generation": generation}
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        # A log of the new generation can only be a leftover (of a metadata file lost and
        # started afresh): the new generation starts empty.
        log_path(self.dir, generation).unlink(missing_ok=True)
        write_atomically(self.path, json.dumps(state, indent=1, sort_keys=True).encode())
        self.state = state
        self.generation = generation
        self.lines = 0
        old.unlink(missing_ok=True)


class _Commit:
    __slots__ = ("changes", "sync_first", "future", "loop")

    def __init__(
        self,
        changes: list[Change],
        sync_first: tuple[Path, ...],
        future: asyncio.Future[None],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.changes = changes
        self.sync_first = sync_first
        self.future = future
        self.loop = loop


def _settle(future: asyncio.Future[None], error: OSError | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)


def _load_snapshot(path: Path) -> dict[str, Any]:
    """The saved state; a file that does not parse is fatal: starting without it would
    forget every topic and set their logs aside."""
    try:
        state = json.loads(path.read_bytes())
        if not isinstance(state, dict) or not isinstance(state.get("cluster_id"), str):
            raise ValueError("no cluster_id")
        state.setdefault("topics", {})
        return state
    except (ValueError, UnicodeDecodeError) as e:
        raise KafkaStorageError(
            f"The metadata file {path} is unreadable ({e}); restore it from a backup "
            "or remove the log directories' contents to start a new broker"
        ) from None


def _replay(path: Path, state: dict[str, Any]) -> int:
    """Apply the log's lines to ``state``; cut a torn last line. Returns the lines applied."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return 0
    position = 0
    applied = 0
    while position < len(data):
        end = data.find(b"\n", position)
        changes = None if end < 0 else _parse_line(data[position:end])
        if changes is None:
            rest = b"" if end < 0 else data[end + 1 :]
            if any(_parse_line(line) is not None for line in rest.split(b"\n")):
                raise KafkaStorageError(
                    f"The metadata log {path} is damaged at byte {position} (a bad line "
                    "before good ones); restore it from a backup"
                )
            logger.warning(
                "Cutting a torn tail of %d byte(s) off the metadata log %s (a crash "
                "during a change that was never acknowledged)",
                len(data) - position,
                path,
            )
            with open(path, "r+b") as f:
                f.truncate(position)
                os.fsync(f.fileno())
            break
        for change in changes:
            apply_change(state, change)
        applied += 1
        position = end + 1
    return applied


def _parse_line(line: bytes) -> list[Change] | None:
    crc, _, payload = line.partition(b" ")
    try:
        if len(crc) != 8 or int(crc, 16) != zlib.crc32(payload):
            return None
        changes = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(changes, list) or not all(
        isinstance(c, dict) and c.get("op") in _OPS and ("name" in c or "value" in c)
        for c in changes
    ):
        return None
    return changes
