"""The purgatory: requests parked until a condition holds or their deadline passes.

There is one purgatory per kind of delayed operation (fetch, produce, rebalance). An
operation watches keys (for example a topic-partition). Whoever changes the state behind a
key calls ``check(key)``; each operation watching it is told which key changed and, when
it can complete, its future is resolved and it leaves every watch list. At the deadline
the operation completes anyway with whatever it has (forced).

Checks run on every append, so an operation keeps the state that makes its check
arithmetic (no reads). A failing operation is logged, completed with its forced result if
that works, and dropped: it never stops the purgatory, its timers or the caller of
``check`` (an append that already happened must still be answered).
"""

from __future__ import annotations

import asyncio
import logging
import traceback
from collections.abc import Callable, Hashable, Iterable
from typing import Generic, TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")


class OperationFailed(Exception):
    """The result of an operation whose completion raised: its request cannot be answered."""


class DelayedOperation(Generic[T]):
    """An operation to park. ``try_complete(key)`` runs when a watched key changed;
    ``force_complete()`` at the deadline (or shutdown) and must return a result."""

    name = "operation"

    def try_complete(self, key: Hashable) -> T | None:
        raise NotImplementedError

    def force_complete(self) -> T:
        raise NotImplementedError


class Condition(DelayedOperation[T]):
    """An operation given as one function ``try_complete(force)``, re-evaluated whole on
    every change: for conditions that are cheap to evaluate (a comparison or two)."""

    def __init__(self, try_complete: Callable[[bool], T | None]) -> None:
        self._try_complete = try_complete
        self.name = getattr(try_complete, "__qualname__", repr(try_complete))

    def try_complete(self, key: Hashable) -> T | None:
        return self._try_complete(False)

    def force_complete(self) -> T:
        # Forced, the function answers (its contract): never None, which its type allows.
        return self._try_complete(True)  # type: ignore[return-value]


class _Parked(Generic[T]):
    __slots__ = ("op", "future", "keys", "timer")

    def __init__(
        self, op: DelayedOperation[T], keys: tuple[Hashable, ...], future: asyncio.Future[T]
    ) -> None:
        self.op = op
        self.keys = keys
        self.future = future
        self.timer: asyncio.TimerHandle | None = None


class Purgatory(Generic[T]):
    def __init__(self, name: str) -> None:
        self.name = name
        self._watchers: dict[Hashable, set[_Parked[T]]] = {}

    def __len__(self) -> int:
        return len({p for parked in self._watchers.values() for p in parked})

    def park(
        self,
        keys: Iterable[Hashable],
        timeout_ms: int,
        operation: DelayedOperation[T] | Callable[[bool], T | None],
    ) -> asyncio.Future[T]:
        """Watch ``keys`` until the operation completes or ``timeout_ms`` passes.

        The caller has already tried once. A plain function is wrapped in a ``Condition``.
        """
        op = operation if isinstance(operation, DelayedOperation) else Condition(operation)
        loop = asyncio.get_running_loop()
        parked = _Parked(op, tuple(keys), loop.create_future())
        for key in parked.keys:
            self._watchers.setdefault(key, set()).add(parked)
        parked.timer = loop.call_later(max(timeout_ms, 0) / 1000, self._expire, parked)
        return parked.future

    def check(self, key: Hashable) -> int:
        """Tell every operation watching ``key`` that it changed; return how many completed."""
        watching = self._watchers.get(key)
        if not watching:
            return 0
        completed = 0
        for parked in list(watching):
            if parked.future.done():
                self._forget(parked)
                continue
            try:
                result = parked.op.try_complete(key)
            except Exception as exc:
                self._fail(parked, exc)
                continue
            if result is not None:
                self._finish(parked, result)
                completed += 1
        return completed

    def expire_all(self) -> None:
        """Complete every parked operation now (shutdown)."""
        for parked in {p for watching in self._watchers.values() for p in watching}:
            self._expire(parked)

    def _expire(self, parked: _Parked[T]) -> None:
        if parked.future.done():
            self._forget(parked)
            return
        try:
            result = parked.op.force_complete()
        except Exception as exc:
            self._forget(parked)
            self._give_up(parked, exc, "at its deadline")
            return
        self._finish(parked, result)

    def _fail(self, parked: _Parked[T], exc: Exception) -> None:
        """``try_complete`` raised: answer with the forced result if that still works."""
        self._forget(parked)
        try:
            result = parked.op.force_complete()
        except Exception:
            self._give_up(parked, exc, "checking it; its forced completion failed too")
            return
        logger.error(
            "%s purgatory: %s failed checking it (%s); completed it with what it had",
            self.name,
            parked.op.name,
            _describe(exc),
        )
        if not parked.future.done():
            parked.future.set_result(result)

    def _give_up(self, parked: _Parked[T], exc: Exception, when: str) -> None:
        logger.error(
            "%s purgatory: %s failed %s (%s); dropped",
            self.name,
            parked.op.name,
            when,
            _describe(exc),
        )
        if not parked.future.done():
            failed = OperationFailed(f"{parked.op.name} failed: {_describe(exc)}")
            parked.future.set_exception(failed)
            parked.future.exception()  # logged above: not again as "never retrieved"

    def _finish(self, parked: _Parked[T], result: T) -> None:
        self._forget(parked)
        if not parked.future.done():
            parked.future.set_result(result)

    def _forget(self, parked: _Parked[T]) -> None:
        if parked.timer is not None:
            parked.timer.cancel()
        for key in parked.keys:
            watching = self._watchers.get(key)
            if watching is not None:
                watching.discard(parked)
                if not watching:
                    del self._watchers[key]


def _describe(exc: BaseException) -> str:
    """One line: the exception and where it was raised."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    message = f": {exc}" if str(exc) else ""
    return f"{type(exc).__name__}{message}{where}"
