"""Rebuild the groups of one ``__consumer_offsets`` partition by replaying its log."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

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

_READ_CHUNK = 1 << 20


def _records(partition: Partition) -> Iterator[Record]:
    """Every committed record, in offset order (control batches skipped)."""
    log = partition.log
    offset = log.log_start_offset
    end = partition.high_watermark
    while offset < end:
        region = log.read(offset, max_bytes=_READ_CHUNK, max_offset=end, min_one_batch=True)
        if region.size == 0:
            return
        data = os.pread(region.fd, region.size, region.position)
        headers = split_batches(data)
        for header in headers:
            if not header.is_control:
                for record in decode_records(data, header):
                    if record.offset >= offset:
                        yield record
        offset = headers[-1].next_offset


def load_groups(partition: Partition) -> dict[str, Group]:
    """The groups (with their offsets) the partition's log describes."""
    values: dict[str, GroupValue | None] = {}
    offsets: dict[str, dict[tuple[str, int], OffsetValue]] = {}
    for record in _records(partition):
        if record.key is None:
            continue
        try:
            key = decode_key(record.key)
            if isinstance(key, OffsetKey):
                group_offsets = offsets.setdefault(key.group, {})
                if record.value is None:
                    group_offsets.pop((key.topic, key.partition), None)
                else:
                    group_offsets[(key.topic, key.partition)] = decode_offset_value(record.value)
            elif isinstance(key, GroupKey):
                values[key.group] = (
                    None if record.value is None else decode_group_value(record.value)
                )
        except RecordFormatError as e:
            logger.warning(
                "Skipping unreadable record at offset %d of %s-%d: %s",
                record.offset,
                partition.topic,
                partition.index,
                e,
            )
    groups: dict[str, Group] = {}
    for group_id in values.keys() | offsets.keys():
        value = values.get(group_id)
        group_offsets = offsets.get(group_id) or {}
        if value is None and not group_offsets:
            continue
        group = Group(group_id)
        if value is not None:
            group.load(value)
        group.offsets = group_offsets
        groups[group_id] = group
    return groups
