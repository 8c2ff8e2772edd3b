"""One partition as seen by this broker: its log, leadership, ISR and high watermark.

As leader it tracks each follower's log end offset (from the offsets its fetches ask for)
and when it last caught up, advances the high watermark to the smallest log end of the
ISR, and decides which followers leave or join the ISR. While an ISR change is being
committed (AlterPartition, KIP-497) the high watermark counts the maximal ISR: the
committed one plus any follower being added.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from kio.schema.errors import ErrorCode

from gregor.log.errors import OffsetOutOfRangeError, PolicyViolationError
from gregor.log.log import AppendResult, Log, ReadResult
from gregor.log.validator import Validated


class LogPosition(NamedTuple):
    """Where an offset lies in the log: the segment holding it and the byte position of
    its batch there (Kafka's LogOffsetMetadata). Bytes between two positions in one
    segment are a subtraction; parked fetches count what became available that way. (A
    tuple: a follower's fetch makes one per partition it fetches.)"""

    offset: int
    segment_base: int
    position: int


@dataclass(slots=True)
class FollowerState:
    """What the leader knows of one follower (Kafka's Replica)."""

    log_end_offset: int = -1  # unknown until its first fetch in this leader epoch
    last_caught_up_ms: int = 0
    last_fetch_leader_end: int = -1  # the leader's log end at its previous fetch
    last_fetch_ms: int = 0
    log_start_offset: int = -1  # as its last fetch said; DeleteRecords waits for it

    def update(self, fetch_offset: int, leader_end: int, now_ms: int) -> None:
        """A fetch at ``fetch_offset``: caught up if it reached the leader's log end now, or
        the log end of its previous fetch (then it was caught up as of that fetch)."""
        if fetch_offset >= leader_end:
            self.last_caught_up_ms = max(self.last_caught_up_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_end:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.log_end_offset = fetch_offset
        self.last_fetch_leader_end = leader_end
        self.last_fetch_ms = now_ms


@dataclass(eq=False)
class Partition:
    topic: str
    index: int
    log: Log
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    broker_id: int
    high_watermark: int = 0
    topic_id: uuid.UUID | None = None
    partition_epoch: int = 0
    # Leader only: the followers' fetch state, and the ISR being committed (None: none).
    followers: dict[int, FollowerState] = field(default_factory=dict)
    pending_isr: list[int] | None = None
    # The log end when this broker became leader in this epoch: a follower joins the ISR
    # only once it has everything up to there (Kafka's leaderEpochStartOffset).
    epoch_start_offset: int = 0
    # Where the high watermark lies; valid while the log below it is unchanged.
    _hw_position: LogPosition | None = field(default=None, repr=False)

    @property
    def is_leader(self) -> bool:
        return self.leader == self.broker_id

    @property
    def maximal_isr(self) -> list[int]:
        """The committed ISR, plus the followers a pending expansion adds (KIP-497): the
        high watermark waits for them, and a shrink counts only once committed."""
        pending = self.pending_isr
        if pending is None:
            return self.isr
        return self.isr + [r for r in pending if r not in self.isr]

    # -- leadership ------------------------------------------------------------------------
    def make_leader(
        self,
        leader_epoch: int,
        isr: Sequence[int],
        replicas: Sequence[int],
        partition_epoch: int,
        now_ms: int,
    ) -> bool:
        """Become (or stay) leader; return whether this is a new leader epoch."""
        new_epoch = leader_epoch != self.leader_epoch or not self.is_leader
        self.leader, self.leader_epoch = self.broker_id, leader_epoch
        self.isr, self.replicas = list(isr), list(replicas)
        self.partition_epoch = partition_epoch
        self.pending_isr = None
        if new_epoch:
            end = self.log.log_end_offset
            self.log.assign_epoch_start(leader_epoch)
            self.epoch_start_offset = end
            self.followers = {
                r: FollowerState(last_caught_up_ms=now_ms if r in self.isr else 0)
                for r in self.replicas
                if r != self.broker_id
            }
        else:
            for r in self.replicas:
                if r != self.broker_id:
                    self.followers.setdefault(r, FollowerState())
        self.maybe_advance_high_watermark()
        return new_epoch

    def make_follower(
        self,
        leader: int,
        leader_epoch: int,
        isr: Sequence[int],
        replicas: Sequence[int],
        partition_epoch: int,
    ) -> None:
        """Follow ``leader``: its fetcher truncates this log where it diverged."""
        self.leader, self.leader_epoch = leader, leader_epoch
        self.isr, self.replicas = list(isr), list(replicas)
        self.partition_epoch = partition_epoch
        self.followers = {}
        self.pending_isr = None
        self.high_watermark = min(self.high_watermark, self.log.log_end_offset)

    # -- leader: appends, follower fetches, the high watermark and the ISR ------------------
    def append_as_leader(
        self, records: bytes | bytearray | memoryview, now_ms: int, *, origin_client: bool = True
    ) -> AppendResult:
        result = self.log.append_as_leader(
            records, leader_epoch=self.leader_epoch, now_ms=now_ms, origin_client=origin_client
        )
        self.maybe_advance_high_watermark()
        return result

    def append_validated(self, validated: Validated, now_ms: int) -> AppendResult:
        result = self.log.append_validated(validated, leader_epoch=self.leader_epoch, now_ms=now_ms)
        self.maybe_advance_high_watermark()
        return result

    def update_follower(
        self, replica: int, fetch_offset: int, now_ms: int, log_start_offset: int = -1
    ) -> bool:
        """A follower fetched at ``fetch_offset``; return whether the high watermark moved."""
        state = self.followers.get(replica)
        if state is None:
            return False
        moved = fetch_offset != state.log_end_offset
        state.log_start_offset = log_start_offset
        state.update(fetch_offset, self.log.log_end_offset, now_ms)
        return moved and self.maybe_advance_high_watermark()

    def maybe_advance_high_watermark(self) -> bool:
        """The HW is the smallest log end offset across the (maximal) ISR; it never moves
        back."""
        end = self.log.log_end_offset
        for replica in self.maximal_isr:
            if replica != self.broker_id:
                state = self.followers.get(replica)
                end = min(end, state.log_end_offset if state is not None else -1)
        if end > self.high_watermark:
            self.high_watermark = end
            return True
        return False

    def delete_records(self, offset: int) -> int:
        """DeleteRecords as leader: move the log start to ``offset`` (-1: the high
        watermark), which may not pass the high watermark (Kafka's deleteRecordsOnLeader).
        Returns the offset every replica's log start must reach."""
        if not self.log.config.delete_enabled:
            raise PolicyViolationError(
                f"records of {self.topic}-{self.index} cannot be deleted: cleanup.policy "
                "does not include delete"
            )
        if offset == -1:
            offset = self.high_watermark
        if not 0 <= offset <= self.high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot delete records of {self.topic}-{self.index} below {offset}: the "
                f"high watermark is {self.high_watermark}"
            )
        self.log.advance_log_start_offset(offset)
        return offset

    def low_watermark(self) -> int:
        """The smallest log start offset among this leader and its in-sync followers (-1
        for one that has not fetched yet): what DeleteRecords answers and waits for. Kafka
        counts every replica on a live broker; a follower out of the ISR is not waited for
        here, as one that died leaves the ISR."""
        low = self.log.log_start_offset
        for replica in self.isr:
            if replica != self.broker_id:
                state = self.followers.get(replica)
                low = min(low, state.log_start_offset if state is not None else -1)
        return low

    def follower_in_sync(self, replica: int) -> bool:
        """Kafka's test for adding a follower back: it has the high watermark and everything
        this leader epoch's leader had when it was elected."""
        state = self.followers.get(replica)
        return (
            state is not None
            and state.log_end_offset >= self.high_watermark
            and state.log_end_offset >= self.epoch_start_offset
        )

    def isr_to_expand(self) -> list[int] | None:
        """The ISR with the followers that caught up, when there are some and no change is
        pending."""
        if self.pending_isr is not None:
            return None
        joining = [r for r in self.replicas if r not in self.isr and self.follower_in_sync(r)]
        return self.isr + joining if joining else None

    def isr_to_shrink(self, now_ms: int, lag_time_ms: int) -> list[int] | None:
        """The ISR without the followers that have not caught up for ``lag_time_ms`` (one
        that has the whole log stays, fetching or not, as in Kafka)."""
        if self.pending_isr is not None:
            return None
        end = self.log.log_end_offset
        lagging = set()
        for r in self.isr:
            state = self.followers.get(r, FollowerState())
            if (
                r != self.broker_id
                and state.log_end_offset != end
                and now_ms - state.last_caught_up_ms > lag_time_ms
            ):
                lagging.add(r)
        return [r for r in self.isr if r not in lagging] if lagging else None

    # -- follower ----------------------------------------------------------------------------
    def append_as_follower(self, records: bytes | memoryview, leader_high_watermark: int) -> None:
        if records:
            self.log.append_as_follower(records)
        self.update_follower_high_watermark(leader_high_watermark)

    def update_follower_high_watermark(self, leader_high_watermark: int) -> None:
        """A follower's HW is the leader's, bounded by its own log end (Kafka sets it even
        when lower: a new leader's HW may lag the old one's until its followers fetch)."""
        self.high_watermark = min(leader_high_watermark, self.log.log_end_offset)

    def truncate_to(self, offset: int) -> None:
        self.log.truncate_to(offset)
        self.high_watermark = min(self.high_watermark, self.log.log_end_offset)
        self._hw_position = None

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.log.truncate_fully_and_start_at(offset)
        self.high_watermark = offset
        self._hw_position = None

    def replace_log(self, log: Log) -> None:
        """The same log, moved to another log directory: same offsets and positions."""
        self.log = log
        self._hw_position = None

    # -- reads -------------------------------------------------------------------------------
    def log_end_position(self) -> LogPosition:
        active = self.log.active_segment
        return LogPosition(self.log.log_end_offset, active.base_offset, active.size)

    def high_watermark_position(self) -> LogPosition:
        """Computed once per high watermark (appends after it do not move it), not per fetch."""
        cached = self._hw_position
        if cached is None or cached.offset != self.high_watermark:
            cached = self._hw_position = self.position_of(self.high_watermark)
        return cached

    def last_stable_position(self) -> LogPosition:
        """Where the last stable offset lies (the high watermark's, cached, when equal)."""
        lso = self.last_stable_offset()
        if lso == self.high_watermark:
            return self.high_watermark_position()
        return self.position_of(lso)

    def position_of(self, offset: int) -> LogPosition:
        """The position of the batch holding ``offset``, clamped to the log's bounds."""
        log = self.log
        if offset >= log.log_end_offset:
            return self.log_end_position()
        region = log.read(
            max(offset, log.log_start_offset),
            max_bytes=1,
            max_offset=log.log_end_offset,
            min_one_batch=True,
        )
        return LogPosition(offset, region.segment_base, region.position)

    def last_stable_offset(self) -> int:
        return self.log.last_stable_offset(self.high_watermark)

    def read(
        self,
        offset: int,
        max_bytes: int,
        min_one_batch: bool,
        *,
        follower: bool = False,
        read_committed: bool = False,
    ) -> ReadResult:
        """Committed data only (nothing at or above the high watermark; read_committed:
        the last stable offset), or for a follower everything up to the log end."""
        if follower:
            max_offset = self.log.log_end_offset
        elif read_committed:
            max_offset = self.last_stable_offset()
        else:
            max_offset = self.high_watermark
        return self.log.read(
            offset, max_bytes=max_bytes, max_offset=max_offset, min_one_batch=min_one_batch
        )


def check_leader(partition: Partition, current_leader_epoch: int) -> ErrorCode:
    """Kafka's check of a request naming the leader epoch it knows (-1: none), then of
    this broker leading the partition."""
    if current_leader_epoch > partition.leader_epoch:
        return ErrorCode.unknown_leader_epoch
    if 0 <= current_leader_epoch < partition.leader_epoch:
        return ErrorCode.fenced_leader_epoch
    if not partition.is_leader:
        return ErrorCode.not_leader_or_follower
    return ErrorCode.none
