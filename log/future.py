"""Future logs (AlterReplicaLogDirs, KIP-113): a partition's log being copied into another
log directory, as `<topic>-<partition>.<id>-future`, before it replaces the current one.

The copying here is blocking file work, run off the event loop for the bulk of the data.
Files are copied whole and fsynced, so that a future log is complete on disk before it is
swapped in (LogManager.swap_in_future).
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

from gregor.log.checkpoint import fsync_path
from gregor.log.segment import LogSegment

FUTURE_DIR_SUFFIX = "-future"

# What a copied file was when copied: (inode, size, mtime in ns). A file that differs now
# (rewritten, truncated, replaced) is copied again.
Identity = tuple[int, int, int]


def new_future_dir(log_dir: Path, topic: str, partition: int) -> Path:
    path = log_dir / f"{topic}-{partition}.{uuid.uuid4().hex}{FUTURE_DIR_SUFFIX}"
    path.mkdir()
    return path


def segment_files(segment: LogSegment, *, with_indexes: bool = True) -> list[Path]:
    files = [segment.log_path]
    if with_indexes:
        files += [segment.offset_index.path, segment.time_index.path]
    return files


def identity(path: Path) -> Identity:
    st = os.stat(path)
    return st.st_ino, st.st_size, st.st_mtime_ns


def copy_files(sources: list[Path], target_dir: Path) -> dict[Path, Identity]:
    """Copy each existing file into ``target_dir`` and fsync it (then the directory).
    Returns each source copied with its identity; a file that changed while it was copied,
    or vanished, is left out (to be copied again, or not needed any more)."""
    copied = {}
    for source in sources:
        try:
            before = identity(source)
            shutil.copyfile(source, target_dir / source.name)
            after = identity(source)
        except FileNotFoundError:  # deleted meanwhile (retention)
            continue
        fsync_path(target_dir / source.name)
        if before == after:
            copied[source] = before
    fsync_path(target_dir)
    return copied
