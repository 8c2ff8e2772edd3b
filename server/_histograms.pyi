# The C request histogram counter (server/_histograms.c): its method table's signatures.
from array import array
from typing import Protocol, TypeVar

from gregor.apis.timing import RequestTiming

class _Histograms(Protocol):
    """What count() adds to (server/metrics.py's RequestStats): arrays of int64 ('q')."""

    versions: array[int]
    data: array[int]

_Stats = TypeVar("_Stats", bound=_Histograms)

def count(
    batch: list[RequestTiming],
    requests: dict[int, _Stats],
    unit_ns: int,
    buckets: int,
    slots: int,
    /,
) -> None:
    """Count finished requests into their histograms."""
