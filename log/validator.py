"""Produce-side record rules that need the records themselves (Kafka's LogValidator part
that looks inside batches): broker-side recompression for a topic compression.type other than
"producer", and keys on compacted topics. Only these topics pay for decoding."""

from __future__ import annotations

from wire.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD
from wire.records import BatchHeader, InvalidRecordError, build_batch, decode_records, split_batches

CODEC_BY_NAME = {"uncompressed": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}
# Bound on a decompressed batch, so a compression bomb cannot exhaust memory.
MAX_DECOMPRESSED = 128 << 20


def needs_recompression(compression_type: str, headers: list[BatchHeader]) -> bool:
    codec = CODEC_BY_NAME.get(compression_type)
    return codec is not None and any(h.compression != codec for h in headers)


def recompress(
    data: bytearray | memoryview, headers: list[BatchHeader], compression_type: str
) -> tuple[bytearray, list[BatchHeader]]:
    """Rewrite every batch not already in the topic's codec, keeping producer id, epoch,
    sequence, transactional flag and record timestamps."""
    codec = CODEC_BY_NAME[compression_type]
    out = bytearray()
    for h in headers:
        if h.compression == codec:
            out += memoryview(data)[h.position : h.position + h.size]
            continue
        records = decode_records(data, h, max_decompressed=MAX_DECOMPRESSED)
        out += build_batch(
            [(r.key, r.value, r.headers, r.timestamp) for r in records],
            compression=codec,
            producer_id=h.producer_id,
            producer_epoch=h.producer_epoch,
            base_sequence=h.base_sequence,
            is_transactional=h.is_transactional,
            timestamp_type=h.timestamp_type,
        )
    return out, split_batches(out)


def check_keys_present(data: bytearray | memoryview, headers: list[BatchHeader]) -> None:
    """Compacted topics reject records without a key (INVALID_RECORD)."""
    for h in headers:
        for record in decode_records(data, h, max_decompressed=MAX_DECOMPRESSED):
            if record.key is None:
                raise InvalidRecordError("compacted topic cannot accept a record without a key")
