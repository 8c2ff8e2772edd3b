"""The network layer's memory pool (queued.max.request.bytes), as pure code."""

from __future__ import annotations

from server.network import MemoryPool


class FakeConnection:
    """What the pool asks of a connection: is it mid-frame, and to re-check its reading."""

    def __init__(self, pool: MemoryPool, mid_frame: bool) -> None:
        self.pool = pool
        self.mid_frame = mid_frame
        self.reading = True

    def update_reading(self) -> None:
        self.reading = self.pool.may_read(self)  # type: ignore[arg-type]


def test_unbounded_pool_always_reads() -> None:
    pool = MemoryPool(-1)
    pool.change(10**12)
    assert not pool.exhausted
    assert pool.may_read(FakeConnection(pool, False))  # type: ignore[arg-type]


def test_used_up_pool_lets_one_mid_frame_connection_finish_and_wakes_the_rest() -> None:
    pool = MemoryPool(100)
    a, b, c = (FakeConnection(pool, mid) for mid in (True, True, False))
    pool.change(100)
    for connection in (a, b, c):
        connection.update_reading()
    # a became the finisher; b (also mid-frame) and c wait.
    assert (a.reading, b.reading, c.reading) == (True, False, False)
    pool.change(50)  # a's frame keeps arriving past the capacity: bounded by one frame
    a.update_reading()
    assert a.reading
    a.mid_frame = False
    pool.frame_finished(a)  # the pool is still used up: b takes over, c still waits
    assert (b.reading, c.reading) == (True, False)
    pool.change(-100)  # answered requests release memory: everyone reads again
    assert (b.reading, c.reading) == (True, True)


def test_a_closed_finisher_hands_over() -> None:
    pool = MemoryPool(10)
    a, b = FakeConnection(pool, True), FakeConnection(pool, True)
    pool.change(10)
    a.update_reading()
    b.update_reading()
    assert (a.reading, b.reading) == (True, False)
    pool.forget(a)  # a's connection closed (its bytes were released by change(-n) first)
    assert b.reading
