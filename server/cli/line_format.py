"""The text formats of Kafka's console tools, set with ``--property key=value``: how
``kafka-console-producer.sh`` reads a line into a record (its LineMessageReader) for
``gregor produce``, and how ``kafka-console-consumer.sh`` prints a record (its
DefaultMessageFormatter) for ``gregor consume``. The keys, defaults and output are Kafka 4's;
a key Kafka's reader or formatter does not have is refused, not ignored."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gregor.server.cli.client.connection import ClientError
from gregor.wire.records import LOG_APPEND_TIME, Record

Headers = list[tuple[str, bytes | None]]
# Records are bytes here, and printed as they are: what Kafka's StringDeserializer shows.
_STRING_DESERIALIZER = "org.apache.kafka.common.serialization.StringDeserializer"


def _true(text: str) -> bool:
    """Kafka's reading of a boolean property: "true" in any case, anything else false."""
    return text.strip().lower() == "true"


@dataclass(slots=True)
class LineReader:
    """A line's headers, key and value: ``[headers DELIM][key SEP]value``."""

    parse_key: bool = False
    key_separator: bytes = b"\t"
    parse_headers: bool = False
    headers_delimiter: bytes = b"\t"
    headers_separator: re.Pattern[bytes] = field(default_factory=lambda: re.compile(b","))
    headers_key_separator: bytes = b":"
    ignore_error: bool = False
    null_marker: bytes | None = None

    @classmethod
    def from_properties(cls, properties: list[tuple[str, str]]) -> LineReader:
        reader = cls()
        texts = {"headers.separator": ",", **dict(properties)}
        for key, text in texts.items():
            value = text.encode()
            if key in ("parse.key", "parse.headers", "ignore.error"):
                setattr(reader, key.replace(".", "_"), _true(text))
            elif key in ("key.separator", "headers.delimiter", "headers.key.separator"):
                setattr(reader, key.replace(".", "_"), value)
            elif key == "headers.separator":
                try:
                    reader.headers_separator = re.compile(value)
                except re.error as e:
                    raise ClientError(f"--property headers.separator={text}: {e}") from None
            elif key == "null.marker":
                reader.null_marker = value
            else:
                raise ClientError(
                    f"--property {key}: kafka-console-producer.sh's line reader has no such "
                    "property (it takes parse.key, key.separator, parse.headers, "
                    "headers.delimiter, headers.separator, headers.key.separator, "
                    "ignore.error, null.marker)"
                )
        reader._check_separators(texts["headers.separator"].encode())
        return reader

    def _check_separators(self, headers_separator: bytes) -> None:
        """The pairs Kafka's reader refuses to be equal."""
        named = {
            "key.separator": self.key_separator,
            "headers.delimiter": self.headers_delimiter,
            "headers.separator": headers_separator,
            "headers.key.separator": self.headers_key_separator,
        }
        pairs = [
            ("headers.delimiter", "headers.separator"),
            ("headers.delimiter", "headers.key.separator"),
            ("headers.separator", "headers.key.separator"),
        ]
        for a, b in pairs:
            if named[a] == named[b]:
                raise ClientError(f"{a} and {b} may not be equal")
        for name in ("key.separator", "headers.separator", "headers.delimiter"):
            if named[name] == self.null_marker:
                raise ClientError(f"null.marker and {name} may not be equal")
        if self.headers_key_separator == self.null_marker:
            raise ClientError("null.marker and headers.key.separator may not be equal")

    def _split(self, line: bytes, start: int, mark: bytes, what: str, number: int) -> int | None:
        """Where ``mark`` is at or after ``start``; None when it is missing and errors are
        ignored (the part is then absent)."""
        at = line.find(mark, start)
        if at == -1 and not self.ignore_error:
            raise ClientError(f"No {what} found on line number {number}: '{line.decode()}'")
        return None if at == -1 else at

    def _null(self, part: bytes) -> bytes | None:
        return None if part == self.null_marker else part

    def parse(self, line: bytes, number: int) -> tuple[bytes | None, bytes | None, Headers]:
        """(key, value, headers) of one line without its newline."""
        start = 0
        headers: Headers = []
        if self.parse_headers:
            end = self._split(line, 0, self.headers_delimiter, "headers delimiter", number)
            if end is not None:
                if line[:end] != self.null_marker:
                    headers = self._headers(line[:end], number)
                start = end + len(self.headers_delimiter)
        key = None
        if self.parse_key:
            end = self._split(line, start, self.key_separator, "key separator", number)
            if end is not None:
                key = self._null(line[start:end])
                start = end + len(self.key_separator)
        return key, self._null(line[start:]), headers

    def _headers(self, text: bytes, number: int) -> Headers:
        pairs = self.headers_separator.split(text)
        while len(pairs) > 1 and not pairs[-1]:  # Java's split drops trailing empty strings
            pairs.pop()
        headers: Headers = []
        for pair in pairs:
            at = pair.find(self.headers_key_separator)
            if at == -1:
                if not self.ignore_error:
                    raise ClientError(
                        f"No header key separator found in pair '{pair.decode()}' on line "
                        f"number {number}"
                    )
                headers.append((pair.decode(), None))
                continue
            key = pair[:at]
            if key == self.null_marker:
                raise ClientError(
                    f"Header keys should not be equal to the null marker "
                    f"'{key.decode()}' as they can't be null"
                )
            headers.append((key.decode(), self._null(pair[at + len(self.headers_key_separator) :])))
        return headers


@dataclass(slots=True)
class MessageFormatter:
    """Prints a record as kafka-console-consumer.sh does: the chosen columns, then the value
    and the line separator; null keys and values as ``null.literal``."""

    print_timestamp: bool = False
    print_key: bool = False
    print_offset: bool = False
    print_partition: bool = False
    print_headers: bool = False
    print_value: bool = True
    key_separator: bytes = b"\t"
    line_separator: bytes = b"\n"
    headers_separator: bytes = b","
    null_literal: bytes = b"null"

    @classmethod
    def from_properties(cls, properties: list[tuple[str, str]]) -> MessageFormatter:
        formatter = cls()
        for key, text in properties:
            attribute = key.replace(".", "_")
            if key.startswith("print.") and hasattr(formatter, attribute):
                setattr(formatter, attribute, _true(text))
            elif key in ("key.separator", "line.separator", "headers.separator", "null.literal"):
                setattr(formatter, attribute, text.encode())
            elif key in ("key.deserializer", "value.deserializer", "headers.deserializer"):
                if text != _STRING_DESERIALIZER:
                    raise ClientError(
                        f"--property {key}: only {_STRING_DESERIALIZER} (bytes printed as they are)"
                    )
            else:
                raise ClientError(
                    f"--property {key}: kafka-console-consumer.sh's formatter has no such "
                    "property (it takes print.timestamp, print.key, print.offset, "
                    "print.partition, print.headers, print.value, key.separator, "
                    "line.separator, headers.separator, null.literal)"
                )
        return formatter

    def format(self, partition: int, record: Record, timestamp_type: int) -> bytes:
        columns: list[bytes] = []
        if self.print_timestamp:
            kind = "LogAppendTime" if timestamp_type == LOG_APPEND_TIME else "CreateTime"
            columns.append(f"{kind}:{record.timestamp}".encode())
        if self.print_partition:
            columns.append(b"Partition:%d" % partition)
        if self.print_offset:
            columns.append(b"Offset:%d" % record.offset)
        if self.print_headers:
            columns.append(
                self.headers_separator.join(
                    k.encode() + b":" + self._bytes(v) for k, v in record.headers
                )
                if record.headers
                else b"NO_HEADERS"
            )
        if self.print_key:
            columns.append(self._bytes(record.key))
        if self.print_value:
            columns.append(self._bytes(record.value))
        # Kafka ends the value with the line separator; without a value, the last column.
        return self.key_separator.join(columns) + self.line_separator if columns else b""

    def _bytes(self, data: bytes | None) -> bytes:
        return self.null_literal if data is None else data
