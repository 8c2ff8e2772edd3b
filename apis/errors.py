"""The error of a partition this broker has no replica of."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from gregor.apis.context import Services


def not_hosted(services: Services, topic: str, index: int) -> ErrorCode:
    """The error for a partition this broker has no replica of."""
    return services.replicas.not_hosted(topic, index)
