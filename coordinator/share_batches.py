"""Combining a share-partition's state batches, as Kafka's PersisterStateBatchCombiner does:
batches below the start offset are dropped (one straddling it is cut at it), overlapping
batches leave each offset to the one of higher delivery count, then of higher delivery
state, and neighbouring batches of the same state and count become one."""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from gregor.coordinator.share_state_records import StateBatch

__all__ = ["combine"]


def combine(
    so_far: Iterable[StateBatch], new: Iterable[StateBatch], start_offset: int
) -> tuple[StateBatch, ...]:
    """The non-overlapping batches of ``so_far`` and ``new`` (start offset -1: no pruning)."""
    batches = sorted(
        (
            b
            if start_offset < 0 or b.first_offset >= start_offset
            else StateBatch(start_offset, b.last_offset, b.delivery_state, b.delivery_count)
            for b in (*so_far, *new)
            if start_offset < 0 or b.last_offset >= start_offset
        ),
        key=lambda b: b.first_offset,
    )
    out: list[StateBatch] = []
    # Sweep the offsets: at each boundary, the covering batch of highest priority wins.
    active: list[tuple[int, int, int]] = []  # (-count, -state, last offset), a max-heap
    i = 0
    offset = batches[0].first_offset if batches else 0
    while i < len(batches) or active:
        while active and active[0][2] < offset:
            heapq.heappop(active)
        if not active:
            if i == len(batches):
                break
            offset = max(offset, batches[i].first_offset)
        while i < len(batches) and batches[i].first_offset <= offset:
            b = batches[i]
            heapq.heappush(active, (-b.delivery_count, -b.delivery_state, b.last_offset))
            i += 1
        while active and active[0][2] < offset:
            heapq.heappop(active)
        if not active:
            continue
        count, state, last = -active[0][0], -active[0][1], active[0][2]
        # The winner holds until it ends or a batch starts that may outrank it.
        end = last if i == len(batches) else min(last, batches[i].first_offset - 1)
        previous = out[-1] if out else None
        if (
            previous is not None
            and previous.last_offset + 1 == offset
            and (previous.delivery_state, previous.delivery_count) == (state, count)
        ):
            out[-1] = StateBatch(previous.first_offset, end, state, count)
        else:
            out.append(StateBatch(offset, end, state, count))
        offset = end + 1
    return tuple(out)
