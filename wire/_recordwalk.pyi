# The C record walker (wire/_recordwalk.c): its method table's signatures.
from _typeshed import ReadableBuffer

def walk(
    records: ReadableBuffer,
    count: int,
    base_timestamp: int,
    ts_min: int,
    ts_max: int,
    need_keys: bool,
    /,
) -> int | tuple[int, int, int, str]:
    """The largest record timestamp (-1 if none is larger), or (kind, record_index, value,
    reason) for the first problem: kind 1 framing, 2 a record without a key, 3 a timestamp."""

def bad_records(
    records: ReadableBuffer,
    count: int,
    base_timestamp: int,
    ts_min: int,
    ts_max: int,
    need_keys: bool,
    /,
) -> list[tuple[int, int | None]]:
    """(record_index, None for a missing key, else the timestamp out of range) of every bad
    record; ValueError if the records are not well framed."""
