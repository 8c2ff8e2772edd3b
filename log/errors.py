"""Errors raised by the log layer, each carrying the Kafka error code it maps to."""

from gregor.wire.records import CorruptRecordError, InvalidRecordError, UnsupportedCompressionError

__all__ = [
    "CorruptRecordError",
    "InvalidRecordError",
    "UnsupportedCompressionError",
    "LogError",
    "OffsetOutOfRangeError",
    "RecordTooLargeError",
    "OutOfOrderSequenceError",
    "InvalidProducerEpochError",
    "UnknownProducerIdError",
    "InvalidTimestampError",
    "KafkaStorageError",
    "UnexpectedAppendOffsetError",
    "PolicyViolationError",
    "InvalidTxnStateError",
    "TransactionCoordinatorFencedError",
]


class LogError(Exception):
    """Base class; `error_code` is the Kafka protocol error code."""

    error_code: int = -1


class OffsetOutOfRangeError(LogError):
    error_code = 1


class RecordTooLargeError(LogError):
    error_code = 10


class InvalidTimestampError(LogError):
    error_code = 32


class OutOfOrderSequenceError(LogError):
    error_code = 45


class InvalidProducerEpochError(LogError):
    error_code = 47


class PolicyViolationError(LogError):
    error_code = 44


class InvalidTxnStateError(LogError):
    error_code = 48


class TransactionCoordinatorFencedError(LogError):
    """A marker from a coordinator older than the one that wrote the producer's last."""

    error_code = 52


class KafkaStorageError(LogError):
    error_code = 56


class UnknownProducerIdError(LogError):
    error_code = 59


class UnexpectedAppendOffsetError(LogError):
    """A replicated append whose offsets are below the log end or not increasing."""
