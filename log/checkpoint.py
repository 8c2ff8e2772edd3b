"""Per-log-dir offset checkpoint files (recovery points, high watermarks, log start offsets)
in Kafka's text format: a version line `0`, a count line, then `topic partition offset` lines."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from log.errors import KafkaStorageError

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"

_VERSION = 0


def write_atomically(path: Path, data: bytes, *, sync: bool = True) -> None:
    """Write via `<path>.tmp` and rename over `path`; with `sync`, fsync the file before the
    rename and the directory after it."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync:
        fsync_dir(path.parent)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_checkpoint(path: Path, offsets: Mapping[tuple[str, int], int]) -> None:
    lines = [str(_VERSION), str(len(offsets))]
    lines += [f"{topic} {partition} {offset}" for (topic, partition), offset in offsets.items()]
    write_atomically(path, ("\n".join(lines) + "\n").encode())


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
