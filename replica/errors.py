"""The Kafka error codes of the exceptions a partition's read or append raises."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from gregor.log.errors import (
    CorruptRecordError,
    InvalidRecordError,
    LogError,
    UnsupportedCompressionError,
)

STORAGE_ERRORS = (LogError, CorruptRecordError, InvalidRecordError, UnsupportedCompressionError)


def error_code(exc: Exception) -> ErrorCode:
    if isinstance(exc, LogError):
        return exc.code
    if isinstance(exc, CorruptRecordError):
        return ErrorCode.corrupt_message
    if isinstance(exc, InvalidRecordError):
        return ErrorCode.invalid_record
    if isinstance(exc, UnsupportedCompressionError):
        return ErrorCode.unsupported_compression_type
    raise exc
