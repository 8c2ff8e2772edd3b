"""One log line for many partitions: a failover or a returning broker changes tens of
thousands at once, and a line each cost the event loop seconds."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def sampled(items: Sequence[T], name: Callable[[T], str], shown: int = 3) -> str:
    """The first ``shown`` of ``items`` by ``name`` (only those are formatted), and how many
    more."""
    head = ", ".join(name(item) for item in items[:shown])
    return head if len(items) <= shown else f"{head} and {len(items) - shown} more"
