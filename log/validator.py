"""Kafka's LogValidator for appends as leader: every batch header and every record of every
batch (compressed ones decompressed within a byte budget), then broker-side recompression for
a topic compression.type other than "producer".

`validate` touches no log state, so the produce path runs it in a worker thread for heavy
batches (the codecs and the C record walker release the GIL); offsets are assigned and bytes
written afterwards, on the event loop.
"""

from __future__ import annotations

from dataclasses import dataclass

from log.config import LogConfig
from log.errors import (
    InvalidRecordError,
    InvalidTimestampError,
    LogError,
    RecordTooLargeError,
)
from wire.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD, CorruptRecordError
from wire.records import (
    BatchHeader,
    rebuild_batch,
    records_section,
    set_max_timestamp,
    split_batches,
    validate_batch,
    walk_records,
)

CODEC_BY_NAME = {"uncompressed": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}
# Decompressed bytes one produce request may expand to, all its batches together: a
# compression bomb is refused (CORRUPT_MESSAGE) before it can take memory or CPU. Far above
# what a client's batch.size yields at any real compression ratio.
MAX_DECOMPRESSED_PER_REQUEST = 64 << 20
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_FRAMING, _NO_KEY, _BAD_TIMESTAMP = 1, 2, 3


class RecordKeyError(InvalidRecordError):
    """A record without a key on a compacted topic; Produce v8+ names the record."""

    def __init__(self, message: str, batch_index: int) -> None:
        super().__init__(message)
        self.batch_index = batch_index


class RecordTimestampError(InvalidTimestampError):
    """A record timestamp out of bounds; Produce v8+ names the record."""

    def __init__(self, message: str, batch_index: int) -> None:
        super().__init__(message)
        self.batch_index = batch_index


class InvalidTxnStateError(LogError):
    error_code = 48


@dataclass(slots=True)
class Budget:
    """Decompressed bytes still allowed for the rest of one request."""

    remaining: int = MAX_DECOMPRESSED_PER_REQUEST


@dataclass(slots=True)
class Validated:
    data: bytearray | memoryview  # writable: offsets are patched in place
    headers: list[BatchHeader]


def validate(
    records: bytes | bytearray | memoryview,
    config: LogConfig,
    now_ms: int,
    *,
    origin_client: bool = True,
    budget: Budget | None = None,
) -> Validated:
    """Check everything an append needs checked, before anything is written.

    Raises CorruptRecordError, InvalidRecordError, UnsupportedCompressionError, a LogError
    (RECORD_TOO_LARGE, INVALID_TIMESTAMP, INVALID_TXN_STATE); RecordKeyError and
    RecordTimestampError name the record. ``origin_client=False``
    marks batches the broker built itself: only the header checks apply."""
    # Broker-owned fields are patched in place: in the request's own buffer when it is
    # writable (a large frame, received in place), else in the one copy made here.
    if isinstance(records, memoryview) and not records.readonly:
        data: bytearray | memoryview = records
    else:
        data = bytearray(records)
    headers = split_batches(data)
    sections: list[memoryview | None] = []
    for h in headers:
        _check_size(h, config)
        validate_batch(data, h)
        if origin_client:
            sections.append(_check_client_batch(data, h, config, now_ms, budget or Budget()))
        else:
            sections.append(None)
    codec = CODEC_BY_NAME.get(config.compression_type)
    if codec is not None and any(h.compression != codec for h in headers):
        data = _recompress(data, headers, sections, codec)
        headers = split_batches(data)
        for h in headers:
            _check_size(h, config)
    return Validated(data, headers)


def _check_size(h: BatchHeader, config: LogConfig) -> None:
    if h.size > config.max_message_bytes:
        raise RecordTooLargeError(
            f"batch of {h.size} bytes exceeds max.message.bytes {config.max_message_bytes}"
        )


def _check_client_batch(
    data: bytearray | memoryview, h: BatchHeader, config: LogConfig, now_ms: int, budget: Budget
) -> memoryview:
    """Check a client's batch and every record in it; returns its records, uncompressed."""
    if h.is_control:
        raise InvalidRecordError("clients may not produce control batches")
    if h.producer_id >= 0 and h.base_sequence < 0:
        raise InvalidRecordError(f"invalid sequence number {h.base_sequence}")
    if h.is_transactional:
        # Kafka 3.6+ verifies that a transactional batch belongs to an ongoing transaction;
        # Gregor has no transactions yet, so none ever does.
        raise InvalidTxnStateError("the batch is not part of an ongoing transaction")
    section = _decompress(data, h, budget)
    if config.log_append_time:
        ts_min, ts_max = _INT64_MIN, _INT64_MAX
    else:
        before = config.message_timestamp_before_max_ms
        after = config.message_timestamp_after_max_ms
        ts_min, ts_max = max(now_ms - before, _INT64_MIN), min(now_ms + after, _INT64_MAX)
    outcome = walk_records(section, h, ts_min, ts_max, config.compact)
    if isinstance(outcome, int):
        if outcome != h.max_timestamp and not config.log_append_time:
            set_max_timestamp(data, h, outcome)  # Kafka rewrites a wrong max timestamp too
        return section
    kind, index, value, reason = outcome
    if kind == _FRAMING:
        raise InvalidRecordError(f"record {index} of the batch is invalid: {reason} ({value})")
    if kind == _NO_KEY:
        raise RecordKeyError(reason, index)
    raise RecordTimestampError(
        f"timestamp {value} of record {index} is out of range; it should be within "
        f"[{ts_min}, {ts_max}]",
        index,
    )


def _decompress(data: bytearray | memoryview, h: BatchHeader, budget: Budget) -> memoryview:
    if h.compression == NONE:
        return records_section(data, h)
    try:
        section = records_section(data, h, max_decompressed=budget.remaining)
    except CorruptRecordError as e:
        raise CorruptRecordError(
            f"{e}; a produce request may decompress to at most "
            f"{MAX_DECOMPRESSED_PER_REQUEST} bytes"
        ) from None
    budget.remaining -= len(section)
    return section


def _recompress(
    data: bytearray | memoryview,
    headers: list[BatchHeader],
    sections: list[memoryview | None],
    codec: int,
) -> bytearray:
    """Every batch not already in the topic's codec, rewritten in it (records unchanged)."""
    out = bytearray()
    for h, section in zip(headers, sections, strict=True):
        if h.compression == codec:
            out += memoryview(data)[h.position : h.position + h.size]
            continue
        if section is None:  # the broker's own batch, not walked
            section = records_section(data, h, max_decompressed=MAX_DECOMPRESSED_PER_REQUEST)
        out += rebuild_batch(data, h, codec, section)
    return out
