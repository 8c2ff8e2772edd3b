"""One member of a consumer group over the wire client (the classic protocol, at versions
every broker since Kafka 2.4 answers): JoinGroup and SyncGroup, the range assignment when
it is the leader, heartbeats between fetches, commits, and LeaveGroup. For
``gregor consume --group``; the caller's loop calls ``heartbeat`` often enough."""

from __future__ import annotations

import datetime
import time
from typing import Any

from gregor.server.cli.client.connection import Client, ClientError, schema
from gregor.server.cli.client.consumer_protocol import (
    PROTOCOL_TYPE,
    assigned_partitions,
    encode_assignment,
    encode_subscription,
    range_assign,
    subscribed_topics,
)
from gregor.server.cli.client.records import TopicPartition, error_name
from gregor.server.cli.groups import commit_offsets, committed_offsets

JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 11, 12, 13, 14
ASSIGNOR = "range"
SESSION_TIMEOUT = datetime.timedelta(seconds=10)  # a killed tool's partitions move after it
# Under the client's 30 s socket timeout: a join may wait this long for the other members.
REBALANCE_TIMEOUT = datetime.timedelta(seconds=20)
HEARTBEAT_INTERVAL_S = 3.0
_REJOIN = {"rebalance_in_progress", "unknown_member_id", "illegal_generation"}


class RebalanceNeeded(Exception):
    """The group is rebalancing or forgot this member: join again."""


class GroupMember:
    def __init__(self, client: Client, group: str, topics: list[str]) -> None:
        self.client = client
        self.group = group
        self.topics = sorted(topics)
        self.member_id = ""
        self.generation = -1
        self.assignment: list[TopicPartition] = []
        self._last_heartbeat = 0.0

    def _call(self, request: Any) -> Any:
        """To the group's coordinator, found again if it moves."""
        return self.client.call_coordinator(self.group, request)

    def join(self) -> list[TopicPartition]:
        """Join (or rejoin) the group and return this member's partitions."""
        while True:
            answer = self._call(self._join_request())
            code = answer.error_code
            if code.name == "member_id_required":  # KIP-394: join again with this id
                self.member_id = answer.member_id
                continue
            if code.name == "unknown_member_id":
                self.member_id = ""
                continue
            if code.value != 0:
                raise ClientError(f"joining group {self.group!r}: {error_name(code)}")
            self.member_id, self.generation = answer.member_id, answer.generation_id
            assignments = self._assign(answer.members) if answer.leader == self.member_id else {}
            try:
                self.assignment = self._sync(assignments)
            except RebalanceNeeded:
                continue
            self._last_heartbeat = time.monotonic()
            return self.assignment

    def _join_request(self) -> Any:
        protocol = schema(JOIN_GROUP, 6, "JoinGroupRequestProtocol")
        return schema(JOIN_GROUP, 6)(
            group_id=self.group,
            session_timeout=SESSION_TIMEOUT,
            rebalance_timeout=REBALANCE_TIMEOUT,
            member_id=self.member_id,
            group_instance_id=None,
            protocol_type=PROTOCOL_TYPE,
            protocols=(protocol(name=ASSIGNOR, metadata=encode_subscription(self.topics)),),
        )

    def _assign(self, members: Any) -> dict[str, bytes]:
        """As the leader: the range assignment of every member's subscribed topics."""
        subscriptions = {m.member_id: subscribed_topics(m.metadata) for m in members}
        topics = sorted({t for ts in subscriptions.values() for t in ts})
        counts = {t.name: len(t.partitions) for t in self.client.metadata(topics).topics}
        plan = range_assign(subscriptions, counts)
        return {member: encode_assignment(tps) for member, tps in plan.items()}

    def _sync(self, assignments: dict[str, bytes]) -> list[TopicPartition]:
        entry = schema(SYNC_GROUP, 4, "SyncGroupRequestAssignment")
        request = schema(SYNC_GROUP, 4)(
            group_id=self.group,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=None,
            assignments=tuple(entry(member_id=m, assignment=a) for m, a in assignments.items()),
        )
        answer = self._call(request)
        self._raise_for(answer.error_code, "syncing")
        return assigned_partitions(answer.assignment)

    def _raise_for(self, code: Any, doing: str) -> None:
        if code.value == 0:
            return
        if code.name in _REJOIN:
            if code.name != "rebalance_in_progress":
                self.member_id, self.generation = "", -1
            raise RebalanceNeeded(error_name(code))
        raise ClientError(f"{doing} in group {self.group!r}: {error_name(code)}")

    def heartbeat(self) -> None:
        """A heartbeat when one is due; RebalanceNeeded when the group rebalances."""
        if time.monotonic() - self._last_heartbeat < HEARTBEAT_INTERVAL_S:
            return
        request = schema(HEARTBEAT, 4)(
            group_id=self.group,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=None,
        )
        self._raise_for(self._call(request).error_code, "heartbeat")
        self._last_heartbeat = time.monotonic()

    def committed(self) -> dict[TopicPartition, int]:
        return committed_offsets(self.client, self.group, self.assignment)

    def commit(self, offsets: dict[TopicPartition, int]) -> None:
        """Commit as this generation's member: a rebalance in between refuses it, as
        Kafka's coordinator does, and the next owner starts from the last commit."""
        if offsets:
            commit_offsets(self.client, self.group, offsets, self.generation, self.member_id)

    def leave(self) -> None:
        if not self.member_id:
            return
        identity = schema(LEAVE_GROUP, 4, "MemberIdentity")
        request = schema(LEAVE_GROUP, 4)(
            group_id=self.group,
            members=(identity(member_id=self.member_id, group_instance_id=None),),
        )
        self._call(request)
        self.member_id, self.generation = "", -1
