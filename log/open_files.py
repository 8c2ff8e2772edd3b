"""The process-wide cap on segments holding an open descriptor or in-memory indexes.

Segments register here when they open their `.log` or load their indexes; past the cap the
least recently used one is closed (its descriptor released, its indexes dropped) and reopens
on its next use. A broker with tens of thousands of segments so needs descriptors for the
ones in use only, not three per segment as with every file held open.
"""

from __future__ import annotations

import resource
from collections import OrderedDict
from typing import Protocol


class Closable(Protocol):
    @property
    def pinned(self) -> bool: ...

    def go_cold(self) -> None: ...


def default_cap() -> int:
    """A quarter of the descriptor limit: the rest is for connections and everything else."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 16
    return max(soft // 4, 16)


class OpenFiles:
    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._lru: OrderedDict[int, Closable] = OrderedDict()

    def __len__(self) -> int:
        return len(self._lru)

    def touch(self, item: Closable) -> None:
        """Mark `item` most recently used, closing the coldest ones past the cap."""
        lru = self._lru
        key = id(item)
        if key in lru:
            lru.move_to_end(key)
            return
        lru[key] = item
        skipped = 0
        while len(lru) > self.cap and skipped < len(lru) - 1:
            _, cold = lru.popitem(last=False)
            if cold.pinned:  # an fsync in flight holds it: keep it, try the next
                lru[id(cold)] = cold
                skipped += 1
                continue
            cold.go_cold()

    def forget(self, item: Closable) -> None:
        self._lru.pop(id(item), None)


OPEN_SEGMENTS = OpenFiles(default_cap())
