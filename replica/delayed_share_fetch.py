"""A share fetch parked until its share-partitions have ``min_bytes`` to acquire (Kafka's
DelayedShareFetch): woken when one of its partitions gets data, changes leadership or has
records available again (released, or their lock expired); at the deadline it answers with
what it can acquire then, possibly nothing."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TypeVar

from gregor.replica.purgatory import DelayedOperation
from gregor.replica.share_partition_manager import SharePartitionManager, ShareWindow

R = TypeVar("R")


class DelayedShareFetch(DelayedOperation[R]):
    def __init__(
        self,
        manager: SharePartitionManager,
        windows: list[ShareWindow],
        min_bytes: int,
        respond: Callable[[], R],
        name: str = "share fetch",
    ) -> None:
        """``respond`` acquires from the windows and answers."""
        self.name = f"{name} of {len(windows)} partition(s)"
        self._manager = manager
        self._windows = windows
        self._min_bytes = max(min_bytes, 1)
        self._respond = respond

    @property
    def keys(self) -> list[Hashable]:
        return list({w.tp for w in self._windows})

    def ready(self) -> bool:
        total = 0
        for window in self._windows:
            available = self._manager.acquirable_bytes(window)
            if available < 0:
                return True
            total += available
        return total >= self._min_bytes

    def try_complete(self, key: Hashable) -> R | None:
        return self._respond() if self.ready() else None

    def force_complete(self) -> R:
        return self._respond()
