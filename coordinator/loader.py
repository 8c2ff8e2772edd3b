"""Read one coordinator partition's log (``__consumer_offsets``, ``__transaction_state``)
back, a chunk at a time, handing each record to the coordinator's replay: it yields to the
event loop between chunks, so a large log does not hold up other clients. Records of
transactional batches (TxnOffsetCommit) and the markers that end their transactions go to
their own callbacks when given.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Callable

from gregor.coordinator.record_format import RecordFormatError
from gregor.replica.partition import Partition
from gregor.wire.records import decode_records, split_batches

logger = logging.getLogger(__name__)

# Bytes replayed per step: some 200 offset commits, a few milliseconds of decoding (and
# at least one whole batch).
CHUNK_BYTES = 16 * 1024
_CONTROL_KEY = struct.Struct(">hh")  # version, type (0 ABORT, 1 COMMIT)
COMMIT_MARKER = 1


class PartitionLoader:
    """Replays one partition's records, ``step`` by ``step``, with ``replay(key, value)``."""

    def __init__(
        self,
        partition: Partition,
        replay: Callable[[bytes, bytes | None], None],
        chunk_bytes: int = CHUNK_BYTES,
        *,
        transactional: Callable[[int, bytes, bytes | None], None] | None = None,
        marker: Callable[[int, bool, int], None] | None = None,
    ) -> None:
        self._partition = partition
        self._replay = replay
        # (producer id, key, value) of a transactional batch's record; (producer id,
        # commit, offset) of a marker.
        self._transactional = transactional
        self._marker = marker
        self._chunk_bytes = chunk_bytes
        self._offset = partition.log.log_start_offset
        self.record_offset = -1  # the offset of the record being replayed

    def step(self) -> bool:
        """Replay the next chunk; True once the whole log has been replayed. The whole log:
        as its leader, this broker's log is the partition's, and what lies above the high
        watermark will be committed (or the leadership, and these groups, lost)."""
        log = self._partition.log
        end = log.log_end_offset
        if self._offset >= end:
            return True
        region = log.read(
            self._offset, max_bytes=self._chunk_bytes, max_offset=end, min_one_batch=True
        )
        if region.size == 0:
            return True
        data = os.pread(region.fd, region.size, region.position)
        headers = split_batches(data)
        for header in headers:
            if header.is_control:
                if self._marker is not None and header.base_offset >= self._offset:
                    for record in decode_records(data, header):
                        if record.key is not None and len(record.key) >= _CONTROL_KEY.size:
                            _, kind = _CONTROL_KEY.unpack_from(record.key)
                            self._marker(header.producer_id, kind == COMMIT_MARKER, record.offset)
                continue
            transactional = self._transactional if header.is_transactional else None
            for record in decode_records(data, header):
                if record.offset < self._offset or record.key is None:
                    continue
                self.record_offset = record.offset
                try:
                    if transactional is not None:
                        transactional(header.producer_id, record.key, record.value)
                    else:
                        self._replay(record.key, record.value)
                except RecordFormatError as e:
                    logger.warning(
                        "Skipping unreadable record at offset %d of %s-%d: %s",
                        record.offset,
                        self._partition.topic,
                        self._partition.index,
                        e,
                    )
        self._offset = headers[-1].next_offset
        return self._offset >= end
