"""One log line for many partitions: a failover or a returning broker changes tens of
thousands at once, and a line each cost the event loop seconds."""

from __future__ import annotations

from collections.abc import Sequence


def sampled(names: Sequence[str], shown: int = 3) -> str:
    """The first ``shown`` of ``names``, and how many more."""
    head = ", ".join(names[:shown])
    return head if len(names) <= shown else f"{head} and {len(names) - shown} more"
