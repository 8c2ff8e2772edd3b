"""Mapping of storage-layer exceptions to Kafka error codes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from gregor.log.errors import (
    CorruptRecordError,
    InvalidRecordError,
    LogError,
    UnsupportedCompressionError,
)

if TYPE_CHECKING:
    from gregor.apis.context import Services


def not_hosted(services: Services, topic: str, index: int) -> ErrorCode:
    """The error for a partition this broker has no replica of."""
    if services.metadata.partition(topic, index) is None:
        return ErrorCode.unknown_topic_or_partition
    return ErrorCode.not_leader_or_follower


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
