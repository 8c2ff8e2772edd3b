"""Incremental fetch sessions (KIP-227), for followers and consumers.

A fetcher of thousands of partitions would otherwise name every one of them in every
request and get every one back in every answer, busy or idle. In a session the leader
remembers the partitions and their fetch offsets: a request names only the partitions
whose fetch state changed (and the ones to forget), and an answer only the partitions with
data, an error, or a new high watermark or log start offset.

A follower's session also costs the leader per changed partition, not per partition: the
session is told of every change of one of its partitions (``FetchSessions.touch``, called
on every change of a partition's data, high watermark or leadership) and keeps the ones
changed, or named by a request, since its last answer ("dirty"). Only those are read; the
others are "quiet": the follower had the whole log and the answered high watermark and
log start as of the session's last fetch, and nothing changed since. An idle follower's
long poll so reads nothing and parks on its session (one purgatory key), not on each of
its thousands of partitions.

The cache holds at most ``MAX_SESSIONS`` sessions. When it is full, a new session takes
the place of one unused for ``EVICTION_MS``, else of the consumer session with the fewest
partitions if the newcomer is a follower (followers are privileged, as in Kafka) or a
consumer session with more partitions; otherwise the fetcher gets no session and sends full
requests (Kafka's FetchSessionCache.tryEvict).
"""

from __future__ import annotations

import random
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

TopicPartition = tuple[str, int]
# Kafka's max.incremental.fetch.session.cache.slots and
# min.incremental.fetch.session.eviction.ms defaults.
MAX_SESSIONS = 1000
EVICTION_MS = 120_000
INT_MAX = (1 << 31) - 1


@dataclass(slots=True)
class CachedPartition:
    request: Any  # the partition's latest fetch state (wire.fetch.FetchPartitionRequest)
    topic_id: uuid.UUID | None = None  # sessions of Fetch v13+ name topics by id
    high_watermark: int = -1  # as last answered
    log_start_offset: int = -1
    quiet: bool = False  # follower sessions: caught up, answered, unchanged since

    def changed(self, high_watermark: int, log_start_offset: int) -> bool:
        """Whether an answer must name the partition; remembers what it answers."""
        if high_watermark == self.high_watermark and log_start_offset == self.log_start_offset:
            return False
        self.high_watermark, self.log_start_offset = high_watermark, log_start_offset
        return True


class FetchSession:
    def __init__(
        self,
        session_id: int,
        replica_id: int,
        uses_topic_ids: bool,
        watchers: dict[TopicPartition, set[FetchSession]] | None = None,
    ) -> None:
        """``watchers``: the cache's sessions by partition, which a follower's session
        joins for each of its partitions (a consumer's does not)."""
        self.id = session_id
        self.replica_id = replica_id  # -1 for a consumer
        self.uses_topic_ids = uses_topic_ids
        self.epoch = 1  # the epoch its next request must carry
        self.partitions: dict[TopicPartition, CachedPartition] = {}
        self.last_used = time.monotonic()
        self._watchers = watchers if replica_id >= 0 else None
        # Follower sessions: the partitions to read at the next request or wake-up, and
        # when the follower last fetched (its quiet partitions were caught up then).
        self.dirty: set[TopicPartition] = set()
        self.changed: set[TopicPartition] = set()  # since a parked fetch last looked
        self.last_fetch_ms = 0

    @property
    def privileged(self) -> bool:
        return self.replica_id >= 0

    def next_epoch(self) -> None:
        self.epoch = 1 if self.epoch == INT_MAX else self.epoch + 1

    def update(self, topics: Any, forgotten: list[tuple[str, list[int]]]) -> None:
        """Take in the partitions a request names (topics resolved to names) and drop the
        ones it forgets."""
        watchers = self._watchers
        for topic in topics:
            for fp in topic.partitions:
                key = (topic.topic, fp.partition)
                cached = self.partitions.get(key)
                if cached is None:
                    self.partitions[key] = CachedPartition(fp, topic.topic_id)
                    if watchers is not None:
                        watchers.setdefault(key, set()).add(self)
                else:
                    cached.request = fp
                    cached.topic_id = topic.topic_id
                    cached.quiet = False
                self.dirty.add(key)
        for name, indexes in forgotten:
            for index in indexes:
                key = (name, index)
                if self.partitions.pop(key, None) is not None:
                    self.dirty.discard(key)
                    self._unwatch(key)

    def close(self) -> None:
        """Leave the cache's watch lists (the session was removed or evicted)."""
        for key in self.partitions:
            self._unwatch(key)

    def _unwatch(self, key: TopicPartition) -> None:
        if self._watchers is None:
            return
        watching = self._watchers.get(key)
        if watching is not None:
            watching.discard(self)
            if not watching:
                del self._watchers[key]

    def take_changed(self) -> list[TopicPartition]:
        """The partitions changed since the last call (a parked fetch counts their bytes)."""
        changed = [key for key in self.changed if key in self.partitions]
        self.changed = set()
        return changed

    def take_dirty(self) -> list[TopicPartition]:
        """The partitions to read now; they are dirty again if they change meanwhile."""
        dirty = [key for key in self.dirty if key in self.partitions]
        self.dirty = set()
        return dirty


class FetchSessions:
    """The broker's sessions, by id, least recently used first."""

    def __init__(self, max_sessions: int = MAX_SESSIONS) -> None:
        self._max = max_sessions
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()
        self._watchers: dict[TopicPartition, set[FetchSession]] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def new(self, replica_id: int, uses_topic_ids: bool, size: int) -> FetchSession | None:
        """A session with a random id, as Kafka's (one a fetcher held at a broker that
        forgot it, by a restart, is not likely to be another's now); None when the cache
        is full and nothing may be evicted for it. ``size``: its partitions."""
        if len(self._sessions) >= self._max and not self._evict_for(replica_id >= 0, size):
            return None
        session_id = 0
        while session_id == 0 or session_id in self._sessions:
            session_id = random.randint(1, INT_MAX)
        session = FetchSession(session_id, replica_id, uses_topic_ids, self._watchers)
        self._sessions[session.id] = session
        return session

    def holding(self, key: TopicPartition) -> list[FetchSession]:
        """The follower sessions holding a partition."""
        return list(self._watchers.get(key, ()))

    def followers(self) -> list[FetchSession]:
        return [s for s in self._sessions.values() if s.privileged]

    def touch(self, key: TopicPartition) -> list[tuple[FetchSession, bool]]:
        """A partition changed: it is dirty in every follower session holding it. Returns
        those sessions, each with whether the partition was quiet there."""
        watching = self._watchers.get(key)
        if not watching:
            return []
        touched = []
        for session in list(watching):
            cached = session.partitions.get(key)
            if cached is None:
                continue
            touched.append((session, cached.quiet))
            cached.quiet = False
            session.dirty.add(key)
            session.changed.add(key)
        return touched

    def _evict_for(self, privileged: bool, size: int) -> bool:
        oldest = next(iter(self._sessions.values()))
        if (time.monotonic() - oldest.last_used) * 1000 > EVICTION_MS:
            self.remove(oldest.id)
            return True
        consumers = [s for s in self._sessions.values() if not s.privileged]
        if not consumers:
            return False
        smallest = min(consumers, key=lambda s: len(s.partitions))
        if privileged or size > len(smallest.partitions):
            self.remove(smallest.id)
            return True
        return False

    def get(self, session_id: int) -> FetchSession | None:
        session = self._sessions.get(session_id)
        if session is not None:
            self._sessions.move_to_end(session_id)
            session.last_used = time.monotonic()
        return session

    def remove(self, session_id: int) -> None:
        session = self._sessions.pop(session_id, None)
        if session is not None:
            session.close()
