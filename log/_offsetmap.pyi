# The log cleaner's offset map in C (log/_offsetmap.c): its type's and module's signatures.
from typing import final

from _typeshed import ReadableBuffer

@final
class OffsetMap:
    """A key -> latest offset map in one preallocated table of 24-byte entries."""

    latest_offset: int  # the last offset the map accounts for, -1 at first
    def __init__(self, slots: int, capacity: int) -> None: ...
    @property
    def slots(self) -> int: ...
    @property
    def capacity(self) -> int: ...
    def __len__(self) -> int: ...
    def put(self, key: ReadableBuffer, offset: int, /) -> bool:
        """False (nothing stored) when the key is new and the map is full."""
    def put_records(
        self, records: ReadableBuffer, count: int, base_offset: int, first_dirty: int, /
    ) -> int:
        """-1 when every keyed record at or after first_dirty went in, else the offset of the
        first that did not fit."""
    def get(self, key: ReadableBuffer, /) -> int:
        """The key's latest offset, -1 if it is not in the map."""
    def has_room_for(self, n: int, /) -> bool:
        """n more keys fit (an empty map takes any number)."""

def md5(data: ReadableBuffer, /) -> bytes:
    """The 16-byte digest the map keys on."""
