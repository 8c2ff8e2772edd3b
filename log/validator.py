"""Kafka's LogValidator for appends as leader: every batch header and every record of every
batch (compressed ones decompressed within a byte budget), then broker-side recompression for
a topic compression.type other than "producer".

`validate` touches no log state, so the produce path runs it in a worker thread for heavy
batches (the codecs and the C record walker release the GIL); offsets are assigned and bytes
written afterwards, on the event loop.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from types import TracebackType
from typing import NoReturn

from gregor.log.config import LogConfig
from gregor.log.errors import (
    InvalidRecordError,
    InvalidTimestampError,
    RecordTooLargeError,
)
from gregor.wire.compression import (
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
    CorruptRecordError,
    DecompressedSizeError,
)
from gregor.wire.records import (
    BatchHeader,
    bad_records_of,
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
# What requests may decompress side by side; a request that needs more takes _large first,
# so that bombs in every validation worker at once cost one request's budget of memory,
# not one per worker.
SHARED_DECOMPRESSED = 8 << 20
_large = threading.Lock()
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_FRAMING = 1  # the C walk's kind of problem for malformed records (2: a key, 3: a timestamp)


class RecordErrors:
    """Records of a batch refused one by one (KIP-467): Produce v8+ names each, as
    (batch index, message), so that clients fail exactly those records."""

    record_errors: list[tuple[int, str]]


class RecordKeyError(InvalidRecordError, RecordErrors):
    """Records without a key on a compacted topic."""

    def __init__(self, message: str, record_errors: list[tuple[int, str]]) -> None:
        super().__init__(message)
        self.record_errors = record_errors


class RecordTimestampError(InvalidTimestampError, RecordErrors):
    """Records with timestamps out of bounds (and maybe records without keys too)."""

    def __init__(self, message: str, record_errors: list[tuple[int, str]]) -> None:
        super().__init__(message)
        self.record_errors = record_errors


@dataclass(slots=True)
class Budget:
    """Decompressed bytes still allowed for the rest of one request; a context manager,
    as past SHARED_DECOMPRESSED it holds _large until the request's validation ends."""

    remaining: int = MAX_DECOMPRESSED_PER_REQUEST
    large: bool = False

    def __enter__(self) -> Budget:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self.large:
            self.large = False
            _large.release()

    def decompress(self, data: bytearray | memoryview, h: BatchHeader) -> memoryview:
        """The batch's records, decompressed within what is left."""
        shared_left = SHARED_DECOMPRESSED - (MAX_DECOMPRESSED_PER_REQUEST - self.remaining)
        if not self.large and shared_left > 0:
            try:
                return self._take(records_section(data, h, max_decompressed=shared_left))
            except DecompressedSizeError:
                pass  # more than requests may decompress side by side: again, alone
        if not self.large:
            _large.acquire()
            self.large = True
        return self._take(records_section(data, h, max_decompressed=self.remaining))

    def _take(self, section: memoryview) -> memoryview:
        self.remaining -= len(section)
        return section


@dataclass(slots=True)
class Validated:
    data: bytearray | memoryview  # writable: offsets are patched in place
    headers: list[BatchHeader]
    # False for batches the broker built itself (Kafka's append origin COORDINATOR): no
    # duplicate or sequence checks, as their sequences are not the producer's.
    origin_client: bool = True


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
    (RECORD_TOO_LARGE, INVALID_TIMESTAMP); RecordKeyError and
    RecordTimestampError name every bad record. ``origin_client=False``
    marks batches the broker built itself: only the header checks apply."""
    if budget is None:
        with Budget() as own:
            return validate(records, config, now_ms, origin_client=origin_client, budget=own)
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
            sections.append(_check_client_batch(data, h, config, now_ms, budget))
        else:
            sections.append(None)
    codec = CODEC_BY_NAME.get(config.compression_type)
    if codec is not None and any(h.compression != codec for h in headers):
        data = _recompress(data, headers, sections, codec)
        headers = split_batches(data)
        for h in headers:
            _check_size(h, config)
    return Validated(data, headers, origin_client)


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
    # A bad batch (rare): walked again, to name every bad record.
    _raise_record_errors(section, h, ts_min, ts_max, config.compact)


def _raise_record_errors(
    section: memoryview, h: BatchHeader, ts_min: int, ts_max: int, need_keys: bool
) -> NoReturn:
    """Kafka's LogValidator.validateRecord for each record: a missing key, else a timestamp
    out of bounds; then the batch's error (INVALID_TIMESTAMP if any record's timestamp is
    bad, else INVALID_RECORD) with every record error."""
    errors: list[tuple[int, str]] = []
    bad_timestamps = False
    for index, timestamp in bad_records_of(section, h, ts_min, ts_max, need_keys):
        if timestamp is None:
            errors.append((index, "Compacted topic cannot accept message without key."))
            continue
        bad_timestamps = True
        errors.append(
            (
                index,
                f"Timestamp {timestamp} of message with offset {h.base_offset + index} is out "
                f"of range. The timestamp should be within [{ts_min}, {ts_max}]",
            )
        )
    if bad_timestamps:
        raise RecordTimestampError(
            "One or more records have been rejected due to invalid timestamp", errors
        )
    shown = ", ".join(f"record {i}: {message}" for i, message in errors[:3])
    raise RecordKeyError(
        f"One or more records have been rejected due to {len(errors)} record errors in "
        f"total, and only showing the first three errors at most: [{shown}]",
        errors,
    )


def _decompress(data: bytearray | memoryview, h: BatchHeader, budget: Budget) -> memoryview:
    if h.compression == NONE:
        return records_section(data, h)
    try:
        return budget.decompress(data, h)
    except CorruptRecordError as e:
        raise CorruptRecordError(
            f"{e}; a produce request may decompress to at most {MAX_DECOMPRESSED_PER_REQUEST} bytes"
        ) from None


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
