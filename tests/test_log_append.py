"""Appends are all or nothing: a refused append leaves the log end, the segment bytes and the
indexes as they were, and offsets that a segment cannot index go to a new segment."""

from __future__ import annotations

from pathlib import Path

import pytest

from gregor.log.config import LogConfig
from gregor.log.errors import InvalidRecordError
from gregor.log.log import Log
from gregor.wire.records import build_batch

NOW = 1_700_000_000_000
INT_MAX = 2**31 - 1


def batch(n: int, base_offset: int = 0) -> bytes:
    return build_batch([(b"k", b"v%d" % i, [], NOW + i) for i in range(n)], base_offset=base_offset)


def state(log: Log) -> tuple[int, list[tuple[int, int]], list[bytes]]:
    files = sorted(
        p for p in log.directory.iterdir() if p.suffix in (".log", ".index", ".timeindex")
    )
    return (
        log.log_end_offset,
        [(s.base_offset, s.size) for s in log.segments],
        [p.read_bytes() for p in files],
    )


def test_a_relative_offset_beyond_int32_rolls_a_new_segment(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(), now_ms=NOW)
    log.append_as_follower(batch(3))
    log.append_as_follower(batch(2, base_offset=INT_MAX + 1))
    assert [s.base_offset for s in log.segments] == [0, INT_MAX + 1]
    assert log.log_end_offset == INT_MAX + 3
    log.close()
    reopened = Log.open(tmp_path / "t-0", LogConfig(), now_ms=NOW)
    assert reopened.log_end_offset == INT_MAX + 3
    assert (
        reopened.read(
            INT_MAX + 2, max_bytes=1 << 20, max_offset=INT_MAX + 3, min_one_batch=True
        ).first_offset
        == INT_MAX + 1
    )


def test_a_refused_append_changes_nothing(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(), now_ms=NOW)
    log.append_as_leader(batch(3), leader_epoch=0, now_ms=NOW)
    log.flush()
    before = state(log)
    # Two batches one segment cannot index together: refused before a byte is written.
    with pytest.raises(InvalidRecordError):
        log.append_as_follower(batch(2, base_offset=3) + batch(2, base_offset=INT_MAX + 10))
    lying = bytearray(batch(2))
    lying[-1] ^= 1  # CRC mismatch
    with pytest.raises(ValueError):
        log.append_as_leader(bytes(lying), leader_epoch=0, now_ms=NOW)
    log.flush()
    assert state(log) == before
    assert log.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW).first_offset == 3
