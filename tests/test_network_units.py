"""The network layer as pure code: its memory pool (queued.max.request.bytes), where large frames
are admitted whole and in order and small ones keep a reserve of their own; and the reading
of small file regions sent with their response."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from gregor.server.network import MemoryPool, _read_region


class FakeConnection:
    """What the pool asks of a connection: the size of its waiting large frame, to be told
    it was admitted, and to re-check its reading."""

    def __init__(self, pool: MemoryPool, waiting: int = 0) -> None:
        self.pool = pool
        self.waiting = waiting
        self.reading = True
        self.admissions = 0

    def update_reading(self) -> None:
        self.reading = self.pool.may_read(self)  # type: ignore[arg-type]

    def admitted(self) -> None:
        """As a Connection: the reservation is counted at once."""
        self.admissions += 1
        self.pool.change(self.waiting, self.waiting, 0)
        self.waiting = 0

    def ask(self, size: int) -> bool:
        if self.pool.admit(self, size):  # type: ignore[arg-type]
            self.pool.change(size, size, 0)
            return True
        self.waiting = size
        return False


def test_unbounded_pool_always_reads_and_admits() -> None:
    pool = MemoryPool(-1)
    pool.change(10**12, 0, 0)
    assert not pool.exhausted
    assert pool.may_read(FakeConnection(pool))  # type: ignore[arg-type]
    assert pool.admit(FakeConnection(pool), 10**12)  # type: ignore[arg-type]


def test_large_frames_wait_in_order_and_small_ones_keep_a_reserve() -> None:
    pool = MemoryPool(800)  # reserve 100: large frames may reserve 700
    assert pool.reserve == 100
    a, b, c, small = (FakeConnection(pool) for _ in range(4))
    assert a.ask(400)
    assert not b.ask(400)  # 800 > 700: waits
    assert not c.ask(100)  # would fit, but b is first: no overtaking
    pool.change(350, 0, 0)  # small frames and prefixes take the pool to 750 of 800
    small.update_reading()
    assert small.reading
    pool.change(60, 0, 0)  # 810: used up, but small frames hold 410 > 100
    small.update_reading()
    assert not small.reading
    pool.change(-400, 0, 0)  # small frames answered: readers are woken
    assert small.reading
    pool.change(-400, -400, 0)  # a answered: b then c are admitted, in order
    assert (b.admissions, c.admissions) == (1, 1)
    assert pool.large == 500


def test_a_frame_bigger_than_the_large_share_is_admitted_alone() -> None:
    pool = MemoryPool(800)
    a, b = FakeConnection(pool), FakeConnection(pool)
    assert a.ask(100)
    assert not b.ask(2000)  # more than the whole pool: only once no large frame is held
    pool.change(-100, -100, 0)
    assert b.admissions == 1 and pool.large == 2000


def test_small_reads_continue_while_large_frames_fill_the_pool() -> None:
    pool = MemoryPool(800)
    big = FakeConnection(pool)
    assert big.ask(700)
    pool.change(40, 0, 40)  # another large frame's first bytes wait (stranded)
    pool.change(90, 0, 0)  # 830 used; small frames hold 90 < the reserve of 100
    reader = FakeConnection(pool)
    reader.update_reading()
    assert pool.exhausted and reader.reading


def test_a_closed_waiting_connection_lets_the_next_in() -> None:
    pool = MemoryPool(800)
    a, b, c = FakeConnection(pool), FakeConnection(pool), FakeConnection(pool)
    assert a.ask(600)
    assert not b.ask(600)
    assert not c.ask(50)
    pool.forget(b)  # b's connection closed: c is at the head, and fits
    assert c.admissions == 1 and b.admissions == 0


@dataclass
class Region:
    fd: int
    position: int
    size: int


def test_a_small_region_is_read_whole_or_refused(tmp_path: Path) -> None:
    """Small file regions go out copied with their response (server/network.py): the
    bytes asked for, or an error if the file ends first (a log truncated meanwhile)."""
    path = tmp_path / "segment.log"
    path.write_bytes(bytes(range(200)))
    fd = os.open(path, os.O_RDONLY)
    try:
        assert _read_region(Region(fd, 10, 5)) == bytes(range(10, 15))
        with pytest.raises(OSError, match="ends early"):
            _read_region(Region(fd, 190, 20))
        with pytest.raises(OSError, match="closed"):
            _read_region(Region(-1, 0, 5))
    finally:
        os.close(fd)
