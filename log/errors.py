"""Errors raised by the log layer, each a KafkaError with the error code it maps to."""

from kio.schema.errors import ErrorCode

from gregor.wire.errors import KafkaError
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


class LogError(KafkaError):
    """Base class; each subclass is one Kafka error code, raised with its message only."""

    code = ErrorCode.unknown_server_error

    def __init__(self, message: str = "") -> None:
        super().__init__(type(self).code, message)


class OffsetOutOfRangeError(LogError):
    code = ErrorCode.offset_out_of_range


class RecordTooLargeError(LogError):
    code = ErrorCode.message_too_large


class InvalidTimestampError(LogError):
    code = ErrorCode.invalid_timestamp


class OutOfOrderSequenceError(LogError):
    code = ErrorCode.out_of_order_sequence_number


class InvalidProducerEpochError(LogError):
    code = ErrorCode.invalid_producer_epoch


class PolicyViolationError(LogError):
    code = ErrorCode.policy_violation


class InvalidTxnStateError(LogError):
    code = ErrorCode.invalid_txn_state


class TransactionCoordinatorFencedError(LogError):
    """A marker from a coordinator older than the one that wrote the producer's last."""

    code = ErrorCode.transaction_coordinator_fenced


class KafkaStorageError(LogError):
    code = ErrorCode.kafka_storage_error


class UnknownProducerIdError(LogError):
    code = ErrorCode.unknown_producer_id


class UnexpectedAppendOffsetError(LogError):
    """A replicated append whose offsets are below the log end or not increasing."""
