"""The cleaner's key -> latest offset map of a log's dirty section (Kafka's SkimpyOffsetMap).

Keys are stored as their MD5 digest, as Kafka does (a collision between two keys' digests
could make the cleaner drop a live record, which at 128 bits never happens in practice);
keys shorter than a digest are stored as they are, which is exact and spares the hashing
(they cannot equal a digest: those are 16 bytes).
The capacity is Kafka's: log.cleaner.dedupe.buffer.size / threads buys 24-byte slots (16-byte
digest, 8-byte offset), filled to log.cleaner.io.buffer.load.factor. A Python dict entry
costs about five times that, so the worker process's memory is some 5x the configured
buffer at most.
"""

from __future__ import annotations

from hashlib import md5

_DIGEST = 16
BYTES_PER_ENTRY = _DIGEST + 8


def map_capacity(buffer_bytes: int, threads: int, load_factor: float) -> int:
    """Entries the map takes before it counts as full."""
    slots = min(buffer_bytes // max(threads, 1), (1 << 31) - 1) // BYTES_PER_ENTRY
    return max(int(slots * load_factor), 1)


class OffsetMap:
    __slots__ = ("capacity", "latest_offset", "_offsets")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.latest_offset = -1  # the last offset the map accounts for
        self._offsets: dict[bytes, int] = {}

    def __len__(self) -> int:
        return len(self._offsets)

    def has_room_for(self, records: int) -> bool:
        """A batch goes in whole or not at all; an empty map takes any batch."""
        return not self._offsets or len(self._offsets) + records <= self.capacity

    def put(self, key: bytes, offset: int) -> None:
        self._offsets[key if len(key) < _DIGEST else md5(key).digest()] = offset

    def get(self, key: bytes) -> int:
        """The latest offset of `key` in the dirty section; -1 if it is not there."""
        return self._offsets.get(key if len(key) < _DIGEST else md5(key).digest(), -1)
