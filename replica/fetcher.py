"""Follower fetchers: copy the leaders' logs, byte for byte (Kafka's ReplicaFetcherThread).

``num.replica.fetchers`` fetchers per source broker, each an asyncio task owning the
partitions hashed to it and sending one Fetch (v12, with this broker's replica id) for
all of them, long-polled at the leader (replica.fetch.wait.max.ms / min.bytes). A fetch
asks from the follower's log end with the epoch of its last batch; when the leader finds
that the follower's log diverged from its own (KIP-320), it answers that epoch's end
offset instead of data and the follower truncates by the leader-epoch method (KIP-101,
KIP-279): to the end of the largest epoch both logs share, never below it. A partition
whose fetch failed waits replica.fetch.backoff.ms before it is fetched again. Each fetcher
fetches in an incremental fetch session (KIP-227): once the leader holds its partitions,
a request names only those whose fetch state changed.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import zlib
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as fetch_v12
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i32Timedelta, i64

from gregor.replica.partition import Partition
from gregor.replica.sampled import sampled
from gregor.replica.state import ReplicationConfig

if TYPE_CHECKING:
    from gregor.replica.manager import ReplicaManager

logger = logging.getLogger(__name__)

# (node id, request entity, api version) -> response entity; the inter-broker client's.
Send = Callable[[int, Any, int], Awaitable[Any]]
FETCH_VERSION = 12
TopicPartition = tuple[str, int]


def fetcher_id(topic: str, partition: int, num_fetchers: int) -> int:
    """Which of a source broker's fetchers owns a partition (Kafka's hash, with a stable
    string hash)."""
    return (31 * zlib.crc32(topic.encode()) + partition) % num_fetchers


# What a session holds of a partition: fetch offset, leader epoch, last fetched epoch and
# log start offset, as last sent.
_Fetched = tuple[int, int, int, int]
# A session the leader no longer knows, or out of step: a new one is started at once.
_SESSION_ERRORS = (ErrorCode.fetch_session_id_not_found, ErrorCode.invalid_fetch_session_epoch)
_LEADERSHIP_MOVING = (ErrorCode.unknown_leader_epoch, ErrorCode.not_leader_or_follower)


@dataclass(slots=True)
class _Session:
    """This fetcher's fetch session at its leader (id 0: none yet; epoch 0 asks for one)."""

    id: int = 0
    epoch: int = 0
    partitions: dict[TopicPartition, _Fetched] = field(default_factory=dict)

    def answered(
        self,
        session_id: int,
        fetched: dict[TopicPartition, _Fetched],
        forgotten: list[TopicPartition],
    ) -> None:
        """The leader answered a request holding ``fetched`` (every partition of a full
        request, the changed ones of an incremental one) and forgetting ``forgotten``."""
        if session_id != self.id or session_id == 0:
            # A new session (its next request is its epoch 1), or none: the leader declined
            # and each request is full, asking again.
            self.id, self.epoch = session_id, 1 if session_id else 0
            self.partitions = fetched
            return
        self.epoch += 1
        self.partitions.update(fetched)
        for tp in forgotten:
            self.partitions.pop(tp, None)


@dataclass(slots=True)
class _FetchState:
    partition: Partition
    leader_epoch: int  # the epoch this fetcher follows; a newer one re-adds the partition


class Fetcher:
    """One fetcher: the partitions it copies from ``leader``, fetched in one request.

    In a session, a request costs per partition whose fetch state may have changed
    (``_dirty``: added, answered, back from a back-off, or its log start moved here), not
    per partition: an idle follower of thousands of partitions long-polls for nothing."""

    def __init__(
        self, replicas: ReplicaManager, send: Send, config: ReplicationConfig, leader: int
    ) -> None:
        self._replicas = replicas
        self._send = send
        self._config = config
        self.leader = leader
        self.partitions: dict[TopicPartition, _FetchState] = {}
        self._dirty: set[TopicPartition] = set()
        self._forget: set[TopicPartition] = set()  # removed or backing off: out of the session
        self._delayed: dict[TopicPartition, float] = {}  # loop time each back-off ends
        # The back-offs in the order they end (all last replica.fetch.backoff.ms), each
        # checked against _delayed when due: a failover backs off tens of thousands of
        # partitions, and a scan of them all per request was most of a fetcher's time.
        self._backoffs: deque[tuple[float, TopicPartition]] = deque()
        self._wake = asyncio.Event()
        self._failing = False
        self._session = _Session()
        self._task = asyncio.get_running_loop().create_task(self._run())

    def add(self, partition: Partition) -> None:
        tp = (partition.topic, partition.index)
        self.partitions[tp] = _FetchState(partition, partition.leader_epoch)
        self._delayed.pop(tp, None)
        self._dirty.add(tp)
        self._wake.set()

    def remove(self, tp: TopicPartition) -> None:
        if self.partitions.pop(tp, None) is not None:
            self._dirty.discard(tp)
            self._delayed.pop(tp, None)
            self._forget.add(tp)

    def touch(self, tp: TopicPartition) -> None:
        """The partition's log changed other than by this fetcher (its log start moved)."""
        if tp in self.partitions:
            self._dirty.add(tp)

    def stop(self) -> None:
        self._task.cancel()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        backoff_s = self._config.fetch_backoff_ms / 1000
        while True:
            now = loop.time()
            built = self._request(now)
            if built is None:
                self._wake.clear()
                until = self._next_backoff_end()
                try:
                    await asyncio.wait_for(
                        self._wake.wait(), None if until is None else until - now
                    )
                except TimeoutError:
                    pass
                continue
            request, fetched, forgotten = built
            try:
                response = await self._send(self.leader, request, FETCH_VERSION)
            except Exception as e:  # the leader unreachable: every partition backs off
                if not self._failing:
                    logger.warning("Fetching from broker %d failed: %s", self.leader, e)
                self._failing = True
                self._session = _Session()  # the next request starts a new one
                until = loop.time() + backoff_s
                self._delayed = dict.fromkeys(self.partitions, until)
                self._backoffs = deque((until, tp) for tp in self.partitions)
                self._dirty.clear()
                self._forget.clear()
                continue
            if self._failing:
                logger.info("Fetching from broker %d works again", self.leader)
                self._failing = False
            if response.error_code != ErrorCode.none:
                self._session = _Session()  # the next request is a full one
                if response.error_code not in _SESSION_ERRORS:  # those: a new session now
                    logger.warning(
                        "Fetch from broker %d failed: %s", self.leader, response.error_code.name
                    )
                    await asyncio.sleep(backoff_s)
                continue
            self._session.answered(response.session_id, fetched, forgotten)
            failed: dict[ErrorCode, list[TopicPartition]] = {}
            for topic in response.responses:
                for data in topic.partitions:
                    error = self._process(topic.topic, data, loop.time() + backoff_s)
                    if error is not None:
                        failed.setdefault(error, []).append((topic.topic, data.partition_index))
            for error, tps in failed.items():
                self._log_failed(error, tps)

    def _request(
        self, now: float
    ) -> tuple[Any, dict[TopicPartition, _Fetched], list[TopicPartition]] | None:
        """The next Fetch (None: nothing to fetch), the fetch state of each partition it
        holds, which the session holds once answered, and the partitions it forgets. A full
        request names every partition not backing off; in a session (KIP-227) only the
        partitions whose fetch state changed are named, and the ones no longer fetched
        are forgotten."""
        config = self._config
        session = self._session
        backoffs = self._backoffs
        while backoffs and backoffs[0][0] <= now:
            until, tp = backoffs.popleft()
            if self._delayed.get(tp) == until:
                del self._delayed[tp]
                self._dirty.add(tp)
        keys: Iterable[TopicPartition] = self._dirty if session.id else self.partitions
        self._dirty = set()
        topics: dict[str, list[fetch_v12.FetchPartition]] = {}
        fetched: dict[TopicPartition, _Fetched] = {}
        for tp in keys:
            state = self.partitions.get(tp)
            if state is None or tp in self._delayed:
                continue
            log = state.partition.log
            now_state = fetched[tp] = (
                log.log_end_offset,
                state.leader_epoch,
                log.leader_epochs.latest_epoch,
                log.log_start_offset,
            )
            if session.id and session.partitions.get(tp) == now_state:
                continue
            # Declared (cast), not checked as kio's phantom types would be: per partition the
            # checks would cost more than the rest, and a log's offsets and epochs are in range.
            topics.setdefault(tp[0], []).append(
                fetch_v12.FetchPartition(
                    partition=cast(i32, tp[1]),
                    current_leader_epoch=cast(i32, now_state[1]),
                    fetch_offset=cast(i64, now_state[0]),
                    last_fetched_epoch=cast(i32, now_state[2]),
                    log_start_offset=cast(i64, now_state[3]),
                    partition_max_bytes=cast(i32, config.fetch_max_bytes),
                )
            )
        forgotten = []
        if session.id:
            forgotten = [
                tp
                for tp in self._forget
                if tp in session.partitions and (tp not in self.partitions or tp in self._delayed)
            ]
        if not fetched and (not session.id or len(forgotten) == len(session.partitions)):
            return None  # nothing to fetch (what to forget keeps): a partition or back-off's end
        self._forget = set()
        by_topic: dict[str, list[i32]] = {}
        for topic, index in forgotten:
            by_topic.setdefault(topic, []).append(i32(index))
        request = fetch_v12.FetchRequest(
            replica_id=BrokerId(self._replicas.broker_id),
            max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=config.fetch_wait_max_ms)),
            min_bytes=i32(config.fetch_min_bytes),
            max_bytes=i32(config.fetch_response_max_bytes),
            isolation_level=i8(0),
            session_id=i32(session.id),
            session_epoch=i32(session.epoch),
            topics=tuple(
                fetch_v12.FetchTopic(topic=TopicName(t), partitions=tuple(ps))
                for t, ps in topics.items()
            ),
            forgotten_topics_data=tuple(
                fetch_v12.ForgottenTopic(topic=TopicName(t), partitions=tuple(ps))
                for t, ps in by_topic.items()
            ),
            rack_id="",
        )
        return request, fetched, forgotten

    def _process(self, topic: str, data: Any, retry_at: float) -> ErrorCode | None:
        """Apply one partition's answer; the error it failed with (it backs off), if any."""
        tp = (topic, data.partition_index)
        state = self.partitions.get(tp)
        sent = self._session.partitions.get(tp)
        if state is None or sent is None:
            return None
        self._dirty.add(tp)  # its next fetch state, named if it changed
        partition = state.partition
        fetch_offset, epoch = sent[0], sent[1]
        # The answer is stale if the partition changed while the fetch was out.
        if (
            state.leader_epoch != epoch
            or partition.leader_epoch != epoch
            or partition.log.log_end_offset != fetch_offset
        ):
            return None
        error: ErrorCode | None = data.error_code
        try:
            if error == ErrorCode.none:
                diverging = data.diverging_epoch
                if diverging.end_offset >= 0:
                    truncate_on_divergence(partition, diverging.epoch, diverging.end_offset)
                else:
                    partition.append_as_follower(data.records or b"", data.high_watermark)
                    start = min(data.log_start_offset, partition.high_watermark)
                    if start > partition.log.log_start_offset:
                        partition.log.advance_log_start_offset(start)
                self._replicas.on_follower_data(partition)
                return None
            if error == ErrorCode.offset_out_of_range:
                self._out_of_range(partition, fetch_offset, data)
                return None
        except Exception as e:  # a bad batch or a storage error: this partition backs off
            logger.error("Replicating %s-%d from broker %d failed: %s", *tp, self.leader, e)
            error = None
        self._delayed[tp] = retry_at
        self._backoffs.append((retry_at, tp))
        self._forget.add(tp)
        return error

    def _next_backoff_end(self) -> float | None:
        """When the next back-off ends (entries a later add or back-off replaced are
        dropped)."""
        backoffs = self._backoffs
        while backoffs:
            until, tp = backoffs[0]
            if self._delayed.get(tp) == until:
                return until
            backoffs.popleft()
        return None

    def _log_failed(self, error: ErrorCode, tps: list[TopicPartition]) -> None:
        """One line per error of an answer: a leadership change fails every partition it
        moves (tens of thousands in a failover, each retried after its back-off). The two
        answers of a change still spreading (the leader has not applied it yet, or has
        moved on) are expected, as Kafka's fetcher treats them: DEBUG."""
        logger.log(
            logging.DEBUG if error in _LEADERSHIP_MOVING else logging.INFO,
            "Fetch of %d partition(s) from broker %d failed: %s (%s); retrying after back-off",
            len(tps),
            self.leader,
            error.name,
            sampled(tps, lambda tp: f"{tp[0]}-{tp[1]}"),
        )

    @staticmethod
    def _out_of_range(partition: Partition, fetch_offset: int, data: Any) -> None:
        """Below the leader's log start: start over there. Past its end (only possible
        without leader epochs, which would have answered a diverging epoch): truncate to
        the leader's high watermark, which its log holds."""
        if fetch_offset < data.log_start_offset:
            logger.info(
                "%s-%d: offset %d is below the leader's log start %d; starting over there",
                partition.topic,
                partition.index,
                fetch_offset,
                data.log_start_offset,
            )
            partition.truncate_fully_and_start_at(data.log_start_offset)
        else:
            logger.warning(
                "%s-%d: offset %d is past the leader's log end; truncating to its high "
                "watermark %d",
                partition.topic,
                partition.index,
                fetch_offset,
                data.high_watermark,
            )
            partition.truncate_to(data.high_watermark)


def truncate_on_divergence(partition: Partition, leader_epoch: int, leader_end: int) -> int:
    """Truncate a follower's log after the leader answered the end offset of the largest
    epoch it has at or below the follower's last (Kafka's getOffsetTruncationState);
    return the new log end. When the follower does not know that epoch, truncation stops
    at the end of its largest epoch below it, and the next fetch asks again."""
    log = partition.log
    end = log.log_end_offset
    if leader_epoch < 0:
        target = min(leader_end, end)
    else:
        epoch, epoch_end = log.end_offset_for_epoch(leader_epoch)
        if epoch_end < 0:
            target = min(leader_end, end)  # no epochs that old here: the leader's says
        elif epoch != leader_epoch:
            target = min(epoch_end, end)
        else:
            target = min(epoch_end, leader_end, end)
    if target < end:
        logger.info(
            "Truncating %s-%d from %d to %d (the leader's epoch %d ends at %d)",
            partition.topic,
            partition.index,
            end,
            target,
            leader_epoch,
            leader_end,
        )
    partition.truncate_to(target)  # at the log end too: it drops epochs starting there
    return partition.log.log_end_offset


class FetcherManager:
    """The fetchers of this broker, by (source broker, fetcher id)."""

    def __init__(self, replicas: ReplicaManager, send: Send, config: ReplicationConfig) -> None:
        self._replicas = replicas
        self._send = send
        self._config = config
        self._fetchers: dict[tuple[int, int], Fetcher] = {}
        self._owner: dict[TopicPartition, tuple[tuple[int, int], Fetcher]] = {}
        self.num_fetchers = config.num_fetchers  # per source broker; resize() changes it

    def add(self, leader: int, partitions: Iterable[Partition]) -> None:
        for partition in partitions:
            tp = (partition.topic, partition.index)
            self.remove([tp])
            key = (leader, fetcher_id(partition.topic, partition.index, self.num_fetchers))
            fetcher = self._fetchers.get(key)
            if fetcher is None:
                fetcher = self._fetchers[key] = Fetcher(
                    self._replicas, self._send, self._config, leader
                )
            fetcher.add(partition)
            self._owner[tp] = (key, fetcher)

    def touch(self, tp: TopicPartition) -> None:
        """A followed partition's log start moved here: its next fetch says so."""
        owner = self._owner.get(tp)
        if owner is not None:
            owner[1].touch(tp)

    def remove(self, tps: Iterable[TopicPartition]) -> None:
        """Stop fetching these partitions; a fetcher left with none stops."""
        for tp in tps:
            owner = self._owner.pop(tp, None)
            if owner is not None:
                key, fetcher = owner
                fetcher.remove(tp)
                if not fetcher.partitions:
                    fetcher.stop()
                    del self._fetchers[key]

    @property
    def count(self) -> int:
        """The fetchers running (at most num.replica.fetchers per source broker)."""
        return len(self._fetchers)

    def resize(self, num_fetchers: int) -> None:
        """num.replica.fetchers changed at run time (Kafka's resizeFetcherThreadPool): the
        partitions are spread over the new number of fetchers per source broker. A
        partition's fetch position is its log end, so moving it loses nothing; a response
        in flight to a stopped fetcher is dropped and its partitions fetched again."""
        if num_fetchers == self.num_fetchers:
            return
        self.num_fetchers = num_fetchers
        by_leader: dict[int, list[Partition]] = {}
        for tp, (_, fetcher) in self._owner.items():
            state = fetcher.partitions.get(tp)
            if state is not None:
                by_leader.setdefault(fetcher.leader, []).append(state.partition)
        self.shutdown()
        for leader, partitions in by_leader.items():
            self.add(leader, partitions)
        logger.info(
            "Resized the replica fetchers to %d per source broker (num.replica.fetchers): "
            "%d fetchers for %d partitions",
            num_fetchers,
            len(self._fetchers),
            len(self._owner),
        )

    def shutdown(self) -> None:
        for fetcher in self._fetchers.values():
            fetcher.stop()
        self._fetchers.clear()
        self._owner.clear()
