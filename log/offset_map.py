"""The cleaner's key -> latest offset map of a log's dirty section (Kafka's SkimpyOffsetMap).

The map is one preallocated table (log/_offsetmap.c) of 24-byte entries, as Kafka's: the
MD5 digest of a key (16 bytes; a collision between two keys' digests could make the cleaner
drop a live record, which at 128 bits never happens in practice) and its latest offset (8
bytes). log.cleaner.dedupe.buffer.size / log.cleaner.threads buys the slots, filled to
log.cleaner.io.buffer.load.factor; a full map ends the pass, and the next one goes on from
there. So a worker's memory is that buffer plus a constant, whatever the number of keys (a
Python dict took about 140 bytes a key: 833 MB for 6 million keys).

A dirty section of fewer offsets than the map takes gets a table just big enough for them
(it cannot hold more keys than offsets), so a small pass neither allocates nor touches the
whole buffer.
"""

from __future__ import annotations

from gregor.log._offsetmap import OffsetMap, md5

__all__ = ["BYTES_PER_ENTRY", "OffsetMap", "map_capacity", "map_slots", "md5", "new_offset_map"]

BYTES_PER_ENTRY = 24
_MAX_BUFFER = (1 << 31) - 1  # Kafka's: the map is one Java array


def _is_prime(n: int) -> bool:
    if n < 4:
        return n >= 2
    if n % 2 == 0 or n % 3 == 0:
        return False
    i = 5
    while i * i <= n:
        if n % i == 0 or n % (i + 2) == 0:
            return False
        i += 6
    return True


def map_slots(buffer_bytes: int, threads: int) -> int:
    """The entries a worker's share of log.cleaner.dedupe.buffer.size holds: the largest
    prime that fits (double hashing visits every slot of a prime-sized table), at least 2."""
    n = min(buffer_bytes // max(threads, 1), _MAX_BUFFER) // BYTES_PER_ENTRY
    while n > 2 and not _is_prime(n):
        n -= 1
    return max(n, 2)


def _capacity(slots: int, load_factor: float) -> int:
    # At least one key, and one empty slot at least: a probe ends on one.
    return max(min(int(slots * load_factor), slots - 1), 1)


def map_capacity(buffer_bytes: int, threads: int, load_factor: float) -> int:
    """Keys the map takes before it counts as full."""
    return _capacity(map_slots(buffer_bytes, threads), load_factor)


def new_offset_map(slots: int, capacity: int, keys_at_most: int) -> OffsetMap:
    """A map of at most `slots` entries taking `capacity` keys; smaller when `keys_at_most`
    (the offsets of the dirty section) is below that capacity, with the same load factor."""
    if 0 <= keys_at_most < capacity:
        want = -(-keys_at_most * slots // capacity) + 1
        n = max(want, 2)
        while not _is_prime(n):
            n += 1
        if n < slots:
            return OffsetMap(n, max(min(capacity, n - 1), 1))
    return OffsetMap(slots, capacity)
