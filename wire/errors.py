"""The base of every error that the broker answers with a Kafka error code and a message."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

__all__ = ["KafkaError"]


class KafkaError(Exception):
    """A failure answered with Kafka's error ``code`` and a ``message`` for the client (the
    response's error message, where the API has one)."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
