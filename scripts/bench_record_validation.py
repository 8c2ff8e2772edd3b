"""In-process cost of produce validation per MB of records: the header-only checks (CRC,
counts) against the full check of every record (decompression included), per codec.

    .venv/bin/python scripts/bench_record_validation.py
"""

from __future__ import annotations

import random
import time

from gregor.log.config import LogConfig
from gregor.log.validator import validate
from gregor.wire.compression import CODEC_NAMES, GZIP, LZ4, NONE, SNAPPY, ZSTD
from gregor.wire.records import build_batch, parse_header, validate_batch

NOW = 1_700_000_000_000


def per_mb(fn, data: bytes, uncompressed: int) -> float:
    """Microseconds per MB of uncompressed records, best of a few runs of about 0.2 s."""
    best = float("inf")
    for _ in range(5):
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < 0.2:
            fn(data)
            n += 1
        best = min(best, (time.perf_counter() - start) / n)
    return best / (uncompressed / 1e6) * 1e6


def main() -> None:
    rng = random.Random(1)
    config = LogConfig(max_message_bytes=16 << 20)
    for record_size, count in ((100, 160), (100, 10_000), (1000, 1_000)):
        records = [(None, rng.randbytes(record_size // 2) * 2, [], NOW + i) for i in range(count)]
        raw = len(build_batch(records))
        print(f"{count} records of {record_size} B ({raw / 1e3:.0f} kB uncompressed):")
        for codec in (NONE, GZIP, SNAPPY, LZ4, ZSTD):
            batch = build_batch(records, compression=codec)
            header = parse_header(batch)
            headers_only = per_mb(lambda b, h=header: validate_batch(b, h), batch, raw)
            full = per_mb(lambda b: validate(b, config, NOW), batch, raw)
            print(
                f"  {CODEC_NAMES[codec]:>6}: header checks {headers_only:8.0f} us/MB,"
                f" every record {full:8.0f} us/MB"
            )


if __name__ == "__main__":
    main()
