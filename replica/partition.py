"""One partition as seen by this broker: its log, leadership, ISR and high watermark."""

from __future__ import annotations

from dataclasses import dataclass, field

from log.log import AppendResult, Log, ReadResult
from log.validator import Validated


@dataclass(frozen=True, slots=True)
class LogPosition:
    """Where an offset lies in the log: the segment holding it and the byte position of
    its batch there (Kafka's LogOffsetMetadata). Bytes between two positions in one
    segment are a subtraction; parked fetches count what became available that way."""

    offset: int
    segment_base: int
    position: int


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
    # Offsets of the followers' logs, as reported by their fetches (for ISR and HW).
    follower_ends: dict[int, int] = field(default_factory=dict)
    # Where the high watermark lies; valid while the log below it is unchanged (a follower's
    # truncation below it, once replication exists, must reset it).
    _hw_position: LogPosition | None = field(default=None, repr=False)

    @property
    def is_leader(self) -> bool:
        return self.leader == self.broker_id

    def append_as_leader(
        self, records: bytes, now_ms: int, *, origin_client: bool = True
    ) -> AppendResult:
        result = self.log.append_as_leader(
            records, leader_epoch=self.leader_epoch, now_ms=now_ms, origin_client=origin_client
        )
        self.maybe_advance_high_watermark()
        return result

    def append_validated(self, validated: Validated, now_ms: int) -> AppendResult:
        result = self.log.append_validated(
            validated, leader_epoch=self.leader_epoch, now_ms=now_ms
        )
        self.maybe_advance_high_watermark()
        return result

    def maybe_advance_high_watermark(self) -> bool:
        """The HW is the smallest log end offset across the ISR; it never moves back."""
        end = self.log.log_end_offset
        for replica in self.isr:
            if replica != self.broker_id:
                end = min(end, self.follower_ends.get(replica, 0))
        if end > self.high_watermark:
            self.high_watermark = end
            return True
        return False

    def log_end_position(self) -> LogPosition:
        active = self.log.active_segment
        return LogPosition(self.log.log_end_offset, active.base_offset, active.size)

    def high_watermark_position(self) -> LogPosition:
        """Computed once per high watermark (appends after it do not move it), not per fetch."""
        cached = self._hw_position
        if cached is None or cached.offset != self.high_watermark:
            cached = self._hw_position = self.position_of(self.high_watermark)
        return cached

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

    def read(self, offset: int, max_bytes: int, min_one_batch: bool) -> ReadResult:
        """Committed data only: nothing at or above the high watermark."""
        return self.log.read(
            offset, max_bytes=max_bytes, max_offset=self.high_watermark, min_one_batch=min_one_batch
        )
