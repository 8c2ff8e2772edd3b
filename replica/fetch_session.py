"""Incremental fetch sessions for followers (KIP-227).

A follower fetching thousands of partitions would otherwise name every one of them in
every request and get every one back in every answer, busy or idle. In a session the
leader remembers the partitions and their fetch offsets: a request names only the
partitions whose fetch state changed (and the ones to forget), and an answer only the
partitions with data, an error, or a new high watermark or log start offset. Consumers
fetch without sessions (the broker may decline them; clients then send full requests).
"""

from __future__ import annotations

import random
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

TopicPartition = tuple[str, int]
# Kafka's max.incremental.fetch.session.cache.slots default; the oldest session goes first.
MAX_SESSIONS = 1000


@dataclass(slots=True)
class CachedPartition:
    request: Any  # the partition's latest fetch state (wire.fetch.FetchPartitionRequest)
    high_watermark: int = -1  # as last answered
    log_start_offset: int = -1

    def changed(self, high_watermark: int, log_start_offset: int) -> bool:
        """Whether an answer must name the partition; remembers what it answers."""
        if high_watermark == self.high_watermark and log_start_offset == self.log_start_offset:
            return False
        self.high_watermark, self.log_start_offset = high_watermark, log_start_offset
        return True


class FetchSession:
    def __init__(self, session_id: int, replica_id: int) -> None:
        self.id = session_id
        self.replica_id = replica_id
        self.epoch = 1  # the epoch its next request must carry
        self.partitions: dict[TopicPartition, CachedPartition] = {}

    def update(self, topics: Any, forgotten: list[tuple[str, list[int]]]) -> None:
        for topic in topics:
            for fp in topic.partitions:
                key = (topic.topic, fp.partition)
                cached = self.partitions.get(key)
                if cached is None:
                    self.partitions[key] = CachedPartition(fp)
                else:
                    cached.request = fp
        for name, indexes in forgotten:
            for index in indexes:
                self.partitions.pop((name, index), None)


class FetchSessions:
    """The leader's sessions, by id."""

    def __init__(self, max_sessions: int = MAX_SESSIONS) -> None:
        self._max = max_sessions
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def new(self, replica_id: int) -> FetchSession:
        """A session with a random id, as Kafka's: one a follower held at a broker that
        forgot it (restarted) is not likely to be another's now."""
        session_id = 0
        while session_id == 0 or session_id in self._sessions:
            session_id = random.randint(1, (1 << 31) - 1)
        session = FetchSession(session_id, replica_id)
        self._sessions[session.id] = session
        while len(self._sessions) > self._max:
            self._sessions.popitem(last=False)
        return session

    def get(self, session_id: int) -> FetchSession | None:
        session = self._sessions.get(session_id)
        if session is not None:
            self._sessions.move_to_end(session_id)
        return session

    def remove(self, session_id: int) -> None:
        self._sessions.pop(session_id, None)
