"""Rebuild the groups of one ``__consumer_offsets`` partition by replaying its log.

The replay goes a chunk at a time, so the coordinator can yield to the event loop
between chunks and a large offsets log does not hold up other clients.
"""

from __future__ import annotations

import logging
import os

from coordinator.group import Group
from coordinator.records import (
    GroupKey,
    GroupValue,
    OffsetKey,
    OffsetValue,
    RecordFormatError,
    decode_group_value,
    decode_key,
    decode_offset_value,
)
from replica.partition import Partition
from wire.records import Record, decode_records, split_batches

logger = logging.getLogger(__name__)

# Bytes replayed per step: some 200 offset commits, a few milliseconds of decoding (and
# at least one whole batch).
CHUNK_BYTES = 16 * 1024


class PartitionLoader:
    """Replays one partition's committed records, ``step`` by ``step``."""

    def __init__(self, partition: Partition, chunk_bytes: int = CHUNK_BYTES) -> None:
        self._partition = partition
        self._chunk_bytes = chunk_bytes
        self._offset = partition.log.log_start_offset
        self._values: dict[str, GroupValue | None] = {}
        self._offsets: dict[str, dict[tuple[str, int], OffsetValue]] = {}

    def step(self) -> bool:
        """Replay the next chunk; True once every committed record has been replayed."""
        end = self._partition.high_watermark
        if self._offset >= end:
            return True
        region = self._partition.log.read(
            self._offset, max_bytes=self._chunk_bytes, max_offset=end, min_one_batch=True
        )
        if region.size == 0:
            return True
        data = os.pread(region.fd, region.size, region.position)
        headers = split_batches(data)
        for header in headers:
            if not header.is_control:
                for record in decode_records(data, header):
                    if record.offset >= self._offset:
                        self._apply(record)
        self._offset = headers[-1].next_offset
        return self._offset >= end

    def _apply(self, record: Record) -> None:
        if record.key is None:
            return
        try:
            key = decode_key(record.key)
            if isinstance(key, OffsetKey):
                group_offsets = self._offsets.setdefault(key.group, {})
                if record.value is None:
                    group_offsets.pop((key.topic, key.partition), None)
                else:
                    group_offsets[(key.topic, key.partition)] = decode_offset_value(record.value)
            elif isinstance(key, GroupKey):
                self._values[key.group] = (
                    None if record.value is None else decode_group_value(record.value)
                )
        except RecordFormatError as e:
            logger.warning(
                "Skipping unreadable record at offset %d of %s-%d: %s",
                record.offset,
                self._partition.topic,
                self._partition.index,
                e,
            )

    def groups(self) -> dict[str, Group]:
        """The groups (with their offsets) the replayed records describe."""
        groups: dict[str, Group] = {}
        for group_id in self._values.keys() | self._offsets.keys():
            value = self._values.get(group_id)
            group_offsets = self._offsets.get(group_id) or {}
            if value is None and not group_offsets:
                continue
            group = Group(group_id)
            if value is not None:
                group.load(value)
            group.offsets = group_offsets
            groups[group_id] = group
        return groups
