"""Share sessions (KIP-932; Kafka's ShareSessionCache): the partitions a share group member
fetches from this broker, kept between its ShareFetch requests so that each one names only
what changed.

A session is keyed by (group id, member id). ShareSessionEpoch 0 opens one (the request
names every partition; an existing session of the key is replaced), n continues the session
whose next epoch is n (adding the partitions the request names, dropping its forgotten
ones), -1 closes it. A session belongs to the connection that opened it: when that
connection closes the session goes, and with it (as with a close) the member's acquired
records on this broker are released.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

__all__ = ["FINAL_EPOCH", "INITIAL_EPOCH", "ShareSession", "ShareSessionCache", "SharePartitionKey"]

INITIAL_EPOCH = 0
FINAL_EPOCH = -1

# A partition of a share session: (topic id, partition index).
SharePartitionKey = tuple[uuid.UUID, int]


@dataclass(slots=True, eq=False)
class ShareSession:
    group_id: str
    member_id: str
    connection: str  # the connection that opened it (listener and peer)
    epoch: int = 1  # the epoch its next request must carry
    partitions: dict[SharePartitionKey, None] = field(default_factory=dict)  # ordered set

    def next_epoch(self) -> None:
        """After a request in the session: the next epoch (wrapping to 1, never 0 or -1)."""
        self.epoch = 1 if self.epoch >= 2**31 - 1 else self.epoch + 1

    def update(
        self, added: Iterable[SharePartitionKey], forgotten: Iterable[SharePartitionKey]
    ) -> None:
        for key in added:
            self.partitions.setdefault(key, None)
        for key in forgotten:
            self.partitions.pop(key, None)


class ShareSessionCache:
    """At most ``max_sessions`` sessions (``group.share.max.share.sessions``)."""

    def __init__(self, max_sessions: int) -> None:
        self.max_sessions = max_sessions
        self._sessions: dict[tuple[str, str], ShareSession] = {}
        self._by_connection: dict[str, set[tuple[str, str]]] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.get((group_id, member_id))

    def serves_group(self, group_id: str) -> bool:
        """Some member of the group has a session here."""
        return any(group == group_id for group, _ in self._sessions)

    def open(
        self,
        group_id: str,
        member_id: str,
        connection: str,
        partitions: Iterable[SharePartitionKey],
    ) -> tuple[ShareSession | None, ShareSession | None, ErrorCode]:
        """Open a session (epoch 0): (the new session, the one of the key it replaced, the
        error: SHARE_SESSION_LIMIT_REACHED when the cache is full)."""
        key = (group_id, member_id)
        replaced = self._sessions.get(key)
        if replaced is None and len(self._sessions) >= self.max_sessions:
            return None, None, ErrorCode.share_session_limit_reached
        if replaced is not None:
            self.remove(replaced)
        session = ShareSession(group_id, member_id, connection)
        session.update(partitions, ())
        self._sessions[key] = session
        self._by_connection.setdefault(connection, set()).add(key)
        return session, replaced, ErrorCode.none

    def continued(
        self, group_id: str, member_id: str, epoch: int
    ) -> tuple[ShareSession | None, ErrorCode]:
        """The session a request at ``epoch`` (> 0, or -1 to close it) continues, its epoch
        moved on; else SHARE_SESSION_NOT_FOUND or INVALID_SHARE_SESSION_EPOCH."""
        session = self._sessions.get((group_id, member_id))
        if session is None:
            return None, ErrorCode.share_session_not_found
        if epoch == FINAL_EPOCH:
            self.remove(session)
            return session, ErrorCode.none
        if epoch != session.epoch:
            return None, ErrorCode.invalid_share_session_epoch
        session.next_epoch()
        return session, ErrorCode.none

    def remove(self, session: ShareSession) -> None:
        key = (session.group_id, session.member_id)
        if self._sessions.get(key) is not session:
            return
        del self._sessions[key]
        keys = self._by_connection.get(session.connection)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._by_connection[session.connection]

    def connection_closed(self, connection: str) -> list[ShareSession]:
        """Remove the sessions ``connection`` opened; return them."""
        closed = [self._sessions[key] for key in self._by_connection.pop(connection, ())]
        for session in closed:
            del self._sessions[(session.group_id, session.member_id)]
        return closed
