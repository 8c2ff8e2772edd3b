"""The purgatory: requests parked until a condition holds or their deadline passes.

An operation watches keys (for example a topic-partition). Whoever changes the state
behind a key calls ``check(key)``; each operation watching it is tried and, when it
can complete, its future is resolved and it leaves every watch list. At the deadline
the operation completes anyway with whatever it has (``force=True``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Iterable
from typing import Generic, TypeVar

T = TypeVar("T")


class DelayedOperation(Generic[T]):
    __slots__ = ("future", "keys", "timer", "try_complete")

    def __init__(
        self,
        try_complete: Callable[[bool], T | None],
        keys: tuple[Hashable, ...],
        future: asyncio.Future[T],
    ) -> None:
        self.try_complete = try_complete
        self.keys = keys
        self.future = future
        self.timer: asyncio.TimerHandle | None = None


class Purgatory:
    def __init__(self, name: str) -> None:
        self.name = name
        self._watchers: dict[Hashable, set[DelayedOperation]] = {}  # type: ignore[type-arg]

    def __len__(self) -> int:
        return len({op for ops in self._watchers.values() for op in ops})

    def park(
        self, keys: Iterable[Hashable], timeout_ms: int, try_complete: Callable[[bool], T | None]
    ) -> asyncio.Future[T]:
        """Watch ``keys`` until ``try_complete(False)`` returns a value or time runs out.

        The caller has already tried once; ``try_complete(True)`` must return a value.
        """
        loop = asyncio.get_running_loop()
        op: DelayedOperation[T] = DelayedOperation(try_complete, tuple(keys), loop.create_future())
        for key in op.keys:
            self._watchers.setdefault(key, set()).add(op)
        op.timer = loop.call_later(max(timeout_ms, 0) / 1000, self._expire, op)
        return op.future

    def check(self, key: Hashable) -> int:
        """Try every operation watching ``key``; return how many completed."""
        ops = self._watchers.get(key)
        if not ops:
            return 0
        completed = 0
        for op in list(ops):
            if op.future.done():
                self._forget(op)
                continue
            result = op.try_complete(False)
            if result is not None:
                self._finish(op, result)
                completed += 1
        return completed

    def expire_all(self) -> None:
        """Complete every parked operation now (shutdown)."""
        for op in {op for ops in self._watchers.values() for op in ops}:
            self._expire(op)

    def _expire(self, op: DelayedOperation[T]) -> None:
        if not op.future.done():
            self._finish(op, op.try_complete(True))  # type: ignore[arg-type]
        else:
            self._forget(op)

    def _finish(self, op: DelayedOperation[T], result: T) -> None:
        self._forget(op)
        if not op.future.done():
            op.future.set_result(result)

    def _forget(self, op: DelayedOperation[T]) -> None:
        if op.timer is not None:
            op.timer.cancel()
        for key in op.keys:
            ops = self._watchers.get(key)
            if ops is not None:
                ops.discard(op)
                if not ops:
                    del self._watchers[key]
