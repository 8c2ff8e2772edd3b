"""A bounds-checked reader for request bodies decoded by hand on the hot path."""

from __future__ import annotations

import struct
import uuid
from typing import Any

from gregor.wire.headers import MalformedHeaderError, read_uvarint, skip_tagged_fields
from gregor.wire.schema import SchemaDecodeError

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class BodyDecodeError(SchemaDecodeError):
    """A request body that does not match its schema."""


class Reader:
    """A bounds-checked cursor over a request body (classic or flexible encoding)."""

    __slots__ = ("buf", "pos", "flexible")

    def __init__(self, buf: bytes | bytearray, pos: int, flexible: bool) -> None:
        self.buf, self.pos, self.flexible = buf, pos, flexible

    def _take(self, size: int) -> int:
        start = self.pos
        end = start + size
        if size < 0 or end > len(self.buf):
            raise BodyDecodeError(f"need {size} bytes at {start}, have {len(self.buf) - start}")
        self.pos = end
        return start

    def unpack(self, codec: struct.Struct) -> tuple[Any, ...]:
        return codec.unpack_from(self.buf, self._take(codec.size))

    def int8(self) -> int:
        return _I8.unpack_from(self.buf, self._take(1))[0]

    def int16(self) -> int:
        return _I16.unpack_from(self.buf, self._take(2))[0]

    def int32(self) -> int:
        return _I32.unpack_from(self.buf, self._take(4))[0]

    def int64(self) -> int:
        return _I64.unpack_from(self.buf, self._take(8))[0]

    def uuid(self) -> uuid.UUID:
        start = self._take(16)
        return uuid.UUID(int=int.from_bytes(self.buf[start : self.pos]))

    def _length(self) -> int:
        """A length prefix; -1 means null."""
        if not self.flexible:
            return self.int16()
        buf, pos = self.buf, self.pos
        if pos < len(buf) and buf[pos] < 0x80:  # a one-byte varint: nearly every length
            self.pos = pos + 1
            return buf[pos] - 1
        try:
            n, self.pos = read_uvarint(buf, pos)
        except MalformedHeaderError as e:
            raise BodyDecodeError(str(e)) from None
        return n - 1

    def string(self, nullable: bool) -> str | None:
        n = self._length()
        if n <= 0:
            if n == 0:
                return ""
            if nullable and n == -1:
                return None
            raise BodyDecodeError(f"invalid string length {n}")
        start = self._take(n)
        try:
            return self.buf[start : self.pos].decode()
        except UnicodeDecodeError:
            raise BodyDecodeError("string is not UTF-8") from None

    def records(self) -> memoryview | None:
        """A view into the request, not a copy: the log copies it once, to patch offsets."""
        if self.flexible:
            n = self._length()
        else:
            n = self.int32()
        if n < 0:
            if n == -1:
                return None
            raise BodyDecodeError(f"invalid records length {n}")
        start = self._take(n)
        return memoryview(self.buf)[start : self.pos]

    def count(self, min_element_size: int) -> int:
        n = self._length() if self.flexible else self.int32()
        if n < 0 or n * min_element_size > len(self.buf) - self.pos:
            raise BodyDecodeError(f"invalid array length {n}")
        return n

    def tagged_field_spans(self) -> dict[int, tuple[int, int]]:
        """The tagged fields here, as tag -> (start, end) of its bytes; the cursor moves past
        them (flexible versions only)."""
        spans: dict[int, tuple[int, int]] = {}
        if self.pos < len(self.buf) and self.buf[self.pos] == 0:  # none: the usual case
            self.pos += 1
            return spans
        try:
            count, pos = read_uvarint(self.buf, self.pos)
            for _ in range(count):
                tag, pos = read_uvarint(self.buf, pos)
                size, pos = read_uvarint(self.buf, pos)
                if pos + size > len(self.buf):
                    raise BodyDecodeError("truncated tagged field")
                spans[tag] = (pos, pos + size)
                pos += size
        except MalformedHeaderError as e:
            raise BodyDecodeError(str(e)) from None
        self.pos = pos
        return spans

    def tagged_fields(self) -> None:
        if self.flexible:
            pos = self.pos
            if pos < len(self.buf) and self.buf[pos] == 0:  # none: the usual case
                self.pos = pos + 1
                return
            try:
                self.pos = skip_tagged_fields(self.buf, self.pos)
            except MalformedHeaderError as e:
                raise BodyDecodeError(str(e)) from None
