"""A produce with acks=all parked until the high watermark covers what it appended
(Kafka's DelayedProduce).

Each partition waits for the high watermark to reach its last appended offset plus one.
Then it is answered: without error if the ISR still has min.insync.replicas members, else
NOT_ENOUGH_REPLICAS_AFTER_APPEND (the ISR shrank while it waited: the data is written but
not as replicated as asked). A partition this broker stopped leading is answered
NOT_LEADER_OR_FOLLOWER, and one still waiting at the deadline REQUEST_TIMED_OUT.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TypeVar

from kio.schema.errors import ErrorCode

from gregor.replica.partition import Partition
from gregor.replica.purgatory import DelayedOperation

R = TypeVar("R")


@dataclass(slots=True)
class ReplicationWait:
    """One partition of a produce waiting for replication; ``error`` is None until it is
    decided."""

    partition: Partition
    required_offset: int  # the high watermark that covers the append
    error: ErrorCode | None = None

    def check(self, is_current: Callable[[Partition], bool]) -> bool:
        """Decide the partition's outcome if it can be; return whether it is decided."""
        if self.error is not None:
            return True
        partition = self.partition
        if not is_current(partition) or not partition.is_leader:
            self.error = ErrorCode.not_leader_or_follower
        elif partition.high_watermark >= self.required_offset:
            enough = len(partition.maximal_isr) >= partition.log.config.min_insync_replicas
            self.error = ErrorCode.none if enough else ErrorCode.not_enough_replicas_after_append
        return self.error is not None

    @property
    def outcome(self) -> ErrorCode:
        """The error to answer with: the decided one, REQUEST_TIMED_OUT if undecided."""
        return self.error if self.error is not None else ErrorCode.request_timed_out


class DelayedProduce(DelayedOperation[R]):
    def __init__(
        self,
        waits: list[ReplicationWait],
        is_current: Callable[[Partition], bool],
        respond: Callable[[], R],
    ) -> None:
        self.name = f"produce to {len(waits)} partition(s) waiting for replication"
        self._by_key: dict[Hashable, list[ReplicationWait]] = {}
        for wait in waits:
            key = (wait.partition.topic, wait.partition.index)
            self._by_key.setdefault(key, []).append(wait)
        self._pending = len(waits)
        self._is_current = is_current
        self._respond = respond

    @property
    def keys(self) -> list[Hashable]:
        return list(self._by_key)

    def ready(self) -> bool:
        """Check every partition once (before parking); whether all are decided."""
        for key in self._by_key:
            self._check(key)
        return self._pending == 0

    def _check(self, key: Hashable) -> None:
        for wait in self._by_key.get(key, ()):
            if wait.error is None and wait.check(self._is_current):
                self._pending -= 1

    def try_complete(self, key: Hashable) -> R | None:
        self._check(key)
        return self._respond() if self._pending == 0 else None

    def force_complete(self) -> R:
        for waits in self._by_key.values():
            for wait in waits:
                if not wait.check(self._is_current):
                    wait.error = ErrorCode.request_timed_out
        return self._respond()
