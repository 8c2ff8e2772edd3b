"""What a cleaning pass knows of transactions (Kafka's CleanedTransactionMetadata).

The pass walks a log's batches in offset order with the aborted transactions of that range
(from the segments' `.txnindex`). An aborted transaction becomes ongoing for its producer
at the first batch reaching its first offset, and ends at its ABORT marker. A transactional
data batch of a producer with an ongoing aborted transaction is aborted data: it is never
mapped (an aborted write must not shadow a committed value of its key) and goes whole. A
transactional batch of any other producer opens a committed transaction of that producer.

A marker is discardable once nothing of its transaction is left to mark: an ABORT marker
when no batch of its transaction was met in this pass, a COMMIT marker likewise. An ABORT
marker that stays keeps its transaction in the cleaned segment's `.txnindex` (take_kept), so
read_committed consumers still learn to skip whatever of it is left.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gregor.log.txn_index import ABORT, COMMIT, AbortedTxn
from gregor.wire.records import BatchHeader


@dataclass(slots=True)
class _OngoingAbort:
    txn: AbortedTxn
    batch_seen: bool = False


class CleanedTransactions:
    def __init__(self, aborted: Iterable[AbortedTxn]) -> None:
        # Latest first offset first: the next one to start is popped from the end.
        self._pending = sorted(aborted, key=lambda txn: txn.first_offset, reverse=True)
        self._aborted: dict[int, _OngoingAbort] = {}  # by producer id
        self._committed: set[int] = set()  # producers with a committed transaction open
        self._kept: list[AbortedTxn] = []  # whose ABORT marker stays, in marker order

    def _start_up_to(self, offset: int) -> None:
        pending = self._pending
        while pending and pending[-1].first_offset <= offset:
            txn = pending.pop()
            self._aborted.setdefault(txn.producer_id, _OngoingAbort(txn))

    def on_data_batch(self, h: BatchHeader) -> bool:
        """Take the data batch ``h`` in; whether it is aborted data (to discard whole)."""
        self._start_up_to(h.last_offset)
        if not h.is_transactional:
            return False
        ongoing = self._aborted.get(h.producer_id)
        if ongoing is None:
            self._committed.add(h.producer_id)
            return False
        ongoing.batch_seen = True
        return True

    def on_marker(self, h: BatchHeader, control_type: int | None) -> bool:
        """Take the control batch ``h`` in (``control_type`` of its record, None when a
        pass emptied it already); whether it is discardable. A control type Kafka does not
        know is kept."""
        self._start_up_to(h.last_offset)
        if control_type is None:
            return True
        if control_type == ABORT:
            ongoing = self._aborted.pop(h.producer_id, None)
            if ongoing is not None and ongoing.batch_seen:
                self._kept.append(ongoing.txn)
                return False
            return True
        if control_type == COMMIT:
            if h.producer_id in self._committed:
                self._committed.discard(h.producer_id)
                return False
            return True
        return False

    def take_kept(self) -> list[AbortedTxn]:
        """The aborted transactions whose ABORT marker stayed since the last call."""
        kept, self._kept = self._kept, []
        return kept
