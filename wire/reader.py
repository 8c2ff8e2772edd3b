"""The bounds-checked byte reader: request bodies decoded by hand on the hot path, header
tagged fields, and the records of the internal topics (Kafka's classic and flexible forms)."""

from __future__ import annotations

import struct
import uuid
from typing import Any

from gregor.wire.schema import SchemaDecodeError
from gregor.wire.varint import VarintError, read_uvarint

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class BodyDecodeError(SchemaDecodeError):
    """A request body that does not match its schema."""


class Reader:
    """A bounds-checked cursor over bytes in Kafka's classic or (``flexible``) compact
    encoding; anything that does not decode raises ``error``, the caller's layer's own."""

    __slots__ = ("buf", "pos", "flexible", "error")

    def __init__(
        self,
        buf: bytes | bytearray,
        pos: int = 0,
        flexible: bool = False,
        error: type[ValueError] = BodyDecodeError,
    ) -> None:
        self.buf, self.pos, self.flexible, self.error = buf, pos, flexible, error

    def _take(self, size: int) -> int:
        start = self.pos
        end = start + size
        if size < 0 or end > len(self.buf):
            raise self.error(f"need {size} bytes at {start}, have {len(self.buf) - start}")
        self.pos = end
        return start

    def unpack(self, codec: struct.Struct) -> tuple[Any, ...]:
        return codec.unpack_from(self.buf, self._take(codec.size))

    def int8(self) -> int:
        value: int = _I8.unpack_from(self.buf, self._take(1))[0]
        return value

    def int16(self) -> int:
        value: int = _I16.unpack_from(self.buf, self._take(2))[0]
        return value

    def int32(self) -> int:
        value: int = _I32.unpack_from(self.buf, self._take(4))[0]
        return value

    def int64(self) -> int:
        value: int = _I64.unpack_from(self.buf, self._take(8))[0]
        return value

    def uuid(self) -> uuid.UUID:
        start = self._take(16)
        return uuid.UUID(int=int.from_bytes(self.buf[start : self.pos]))

    def _length(self) -> int:
        """A length prefix; -1 means null."""
        buf, pos = self.buf, self.pos
        if not self.flexible:
            length: int = _I16.unpack_from(buf, self._take(2))[0]
            return length
        if pos < len(buf) and buf[pos] < 0x80:  # a one-byte varint: nearly every length
            self.pos = pos + 1
            return buf[pos] - 1
        try:
            n, self.pos = read_uvarint(buf, pos)
        except VarintError as e:
            raise self.error(str(e)) from None
        return n - 1

    def string(self, nullable: bool) -> str | None:
        n = self._length()
        if n <= 0:
            if n == 0:
                return ""
            if nullable and n == -1:
                return None
            raise self.error(f"invalid string length {n}")
        start = self._take(n)
        try:
            return self.buf[start : self.pos].decode()
        except UnicodeDecodeError:
            raise self.error("string is not UTF-8") from None

    def _bytes_start(self) -> int | None:
        """Where a BYTES or RECORDS field starts (the cursor moves to its end); None if null."""
        n = self._length() if self.flexible else self.int32()
        if n < 0:
            if n == -1:
                return None
            raise self.error(f"invalid bytes length {n}")
        return self._take(n)

    def records(self) -> memoryview | None:
        """A view into the request, not a copy: the log copies it once, to patch offsets."""
        start = self._bytes_start()
        return None if start is None else memoryview(self.buf)[start : self.pos]

    def blob(self) -> bytes | None:
        """A BYTES field, as bytes."""
        start = self._bytes_start()
        return None if start is None else bytes(self.buf[start : self.pos])

    def count(self, min_element_size: int) -> int:
        n = self._length() if self.flexible else self.int32()
        if n < 0 or n * min_element_size > len(self.buf) - self.pos:
            raise self.error(f"invalid array length {n}")
        return n

    def tagged_field_spans(self) -> dict[int, tuple[int, int]]:
        """The tagged fields here, as tag -> (start, end) of its bytes; the cursor moves past
        them (flexible versions only)."""
        spans: dict[int, tuple[int, int]] = {}
        buf, pos = self.buf, self.pos
        if pos < len(buf) and buf[pos] == 0:  # none: the usual case
            self.pos = pos + 1
            return spans
        try:
            count, pos = read_uvarint(buf, pos)
            for _ in range(count):
                tag, pos = read_uvarint(buf, pos)
                size, pos = read_uvarint(buf, pos)
                if pos + size > len(buf):
                    raise self.error("truncated tagged field")
                spans[tag] = (pos, pos + size)
                pos += size
        except VarintError as e:
            raise self.error(str(e)) from None
        self.pos = pos
        return spans

    def tagged_fields(self) -> None:
        """Skip the tagged fields here (flexible versions only)."""
        if self.flexible:
            pos = self.pos
            if pos < len(self.buf) and self.buf[pos] == 0:  # none: the usual case
                self.pos = pos + 1
            else:
                self.tagged_field_spans()
