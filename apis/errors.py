"""Mapping of storage-layer exceptions to Kafka error codes."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from log.errors import (
    CorruptRecordError,
    InvalidRecordError,
    LogError,
    UnsupportedCompressionError,
)


def error_code(exc: Exception) -> ErrorCode:
    if isinstance(exc, LogError):
        return ErrorCode(exc.error_code)
    if isinstance(exc, CorruptRecordError):
        return ErrorCode.corrupt_message
    if isinstance(exc, InvalidRecordError):
        return ErrorCode.invalid_record
    if isinstance(exc, UnsupportedCompressionError):
        return ErrorCode.unsupported_compression_type
    raise exc


STORAGE_ERRORS = (LogError, CorruptRecordError, InvalidRecordError, UnsupportedCompressionError)
