"""Records over the wire client, for the CLI's produce, consume, groups and perf commands:
where each partition's leader is, ListOffsets, Produce and Fetch at versions every broker
since Kafka 2.4 answers, and the records of a Fetch answer decoded with the repository's
own RecordBatch code (``gregor.wire.records``)."""

from __future__ import annotations

import datetime
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gregor.server.cli.client.connection import Client, ClientError, Connection, schema
from gregor.wire.records import (
    CorruptRecordError,
    Record,
    decode_records,
    split_batches,
)

PRODUCE, FETCH, LIST_OFFSETS = 0, 1, 2
PRODUCE_VERSION, FETCH_VERSION, LIST_OFFSETS_VERSION = 8, 11, 5
EARLIEST, LATEST = -2, -1  # ListOffsets timestamps
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
_RETRIES = 20
_BACKOFF_S = 0.1

TopicPartition = tuple[str, int]


def error_name(code: Any) -> str:
    return str(code.name).upper()


class ClusterView:
    """The partitions of some topics and a connection to each one's leader, refreshed when
    a leader moves (``refresh``)."""

    def __init__(self, client: Client, topics: Iterable[str], *, auto_create: bool = False) -> None:
        self.client = client
        self._topics = sorted(set(topics))
        self._auto_create = auto_create
        self._leaders: dict[TopicPartition, int] = {}
        self._brokers: Any = ()
        self.refresh()

    def refresh(self) -> None:
        """Metadata of the topics, waiting out partitions without a leader yet (a topic
        just created) for a few seconds."""
        for attempt in range(_RETRIES):
            meta = self.client.metadata(self._topics, auto_create=self._auto_create)
            waiting = False
            leaders = {}
            for topic in meta.topics:
                code = topic.error_code
                if code.value != 0:
                    # A missing topic is only worth waiting for while the broker creates it.
                    missing = code.name == "unknown_topic_or_partition" and not self._auto_create
                    if missing or not code.retriable or attempt == _RETRIES - 1:
                        raise ClientError(f"topic {topic.name!r}: {error_name(code)}")
                    waiting = True
                    continue
                for p in topic.partitions:
                    waiting |= p.leader_id < 0
                    leaders[(topic.name, p.partition_index)] = p.leader_id
            if not waiting:
                self._leaders, self._brokers = leaders, meta.brokers
                return
            time.sleep(_BACKOFF_S)
        raise ClientError(f"no leader for some partitions of {', '.join(self._topics)}")

    def partitions(self, topic: str) -> list[int]:
        return sorted(p for t, p in self._leaders if t == topic)

    def all_partitions(self) -> list[TopicPartition]:
        return sorted(self._leaders)

    def leader(self, tp: TopicPartition) -> Connection:
        if tp not in self._leaders:
            raise ClientError(f"topic {tp[0]!r} has no partition {tp[1]}")
        return self.node(self._leaders[tp])

    def node(self, node_id: int) -> Connection:
        return self.client.node(node_id, self._brokers)

    def by_leader(self, tps: Iterable[TopicPartition]) -> dict[int, list[TopicPartition]]:
        """The partitions grouped by the id of the broker leading them."""
        grouped: dict[int, list[TopicPartition]] = defaultdict(list)
        for tp in tps:
            self.leader(tp)  # unknown partitions fail here
            grouped[self._leaders[tp]].append(tp)
        return grouped


def by_topic(tps: Iterable[TopicPartition]) -> dict[str, list[int]]:
    topics: dict[str, list[int]] = defaultdict(list)
    for topic, partition in sorted(tps):
        topics[topic].append(partition)
    return topics


def list_offsets(
    view: ClusterView,
    wanted: dict[TopicPartition, int],
    isolation_level: int = READ_UNCOMMITTED,
) -> dict[TopicPartition, int]:
    """The offset for each partition's timestamp (EARLIEST, LATEST or milliseconds): the
    first offset whose timestamp is at least it, or -1 where no record is that late."""
    for attempt in range(_RETRIES):
        result: dict[TopicPartition, int] = {}
        stale = False
        for node, tps in view.by_leader(wanted).items():
            request = _list_offsets_request({tp: wanted[tp] for tp in tps}, isolation_level)
            answer = view.node(node).call(request)
            for topic in answer.topics:
                for p in topic.partitions:
                    code = p.error_code
                    if code.value != 0:
                        if not code.retriable or attempt == _RETRIES - 1:
                            raise ClientError(
                                f"{topic.name}-{p.partition_index}: {error_name(code)}"
                            )
                        stale = True
                    result[(topic.name, p.partition_index)] = p.offset
        if not stale:
            return result
        time.sleep(_BACKOFF_S)
        view.refresh()
    raise AssertionError("unreachable")


def _list_offsets_request(wanted: dict[TopicPartition, int], isolation_level: int) -> Any:
    v = LIST_OFFSETS_VERSION
    partition, topic = (
        schema(LIST_OFFSETS, v, "ListOffsetsPartition"),
        schema(LIST_OFFSETS, v, "ListOffsetsTopic"),
    )
    return schema(LIST_OFFSETS, v)(
        replica_id=-1,
        isolation_level=isolation_level,
        topics=tuple(
            topic(
                name=name,
                partitions=tuple(
                    partition(
                        partition_index=p, current_leader_epoch=-1, timestamp=wanted[(name, p)]
                    )
                    for p in partitions
                ),
            )
            for name, partitions in by_topic(wanted).items()
        ),
    )


def produce_request(topic: str, batches: dict[int, bytes], acks: int, timeout_ms: int) -> Any:
    """One Produce request carrying a record batch per partition."""
    v = PRODUCE_VERSION
    data = schema(PRODUCE, v, "PartitionProduceData")
    return schema(PRODUCE, v)(
        transactional_id=None,
        acks=acks,
        timeout=datetime.timedelta(milliseconds=timeout_ms),
        topic_data=(
            schema(PRODUCE, v, "TopicProduceData")(
                name=topic,
                partition_data=tuple(data(index=p, records=b) for p, b in batches.items()),
            ),
        ),
    )


@dataclass(frozen=True, slots=True)
class Produced:
    partition: int
    base_offset: int
    error: Any  # kio ErrorCode
    message: str | None


def produce_results(answer: Any) -> list[Produced]:
    return [
        Produced(p.index, p.base_offset, p.error_code, p.error_message)
        for topic in answer.responses
        for p in topic.partition_responses
    ]


def produce(
    view: ClusterView, topic: str, batches: dict[int, bytes], acks: int, timeout_ms: int = 30000
) -> list[Produced]:
    """Send each partition's batch to its leader and wait for the answers (none with
    acks=0); partitions whose leader moved are sent again to the new one."""
    pending = dict(batches)
    done: list[Produced] = []
    for attempt in range(_RETRIES):
        by_node = view.by_leader((topic, p) for p in pending)
        retry: dict[int, bytes] = {}
        for node, tps in by_node.items():
            part = {p: pending[p] for _, p in tps}
            connection = view.node(node)
            request = produce_request(topic, part, acks, timeout_ms)
            if acks == 0:
                connection.send(request, expect_response=False)
                done += [Produced(p, -1, None, None) for p in part]
                continue
            for result in produce_results(connection.call(request)):
                if result.error.value != 0 and result.error.retriable and attempt < _RETRIES - 1:
                    retry[result.partition] = part[result.partition]
                else:
                    done.append(result)
        if not retry:
            return done
        pending = retry
        time.sleep(_BACKOFF_S)
        view.refresh()
    raise AssertionError("unreachable")


def fetch_request(
    positions: dict[TopicPartition, int],
    *,
    max_wait_ms: int,
    max_bytes: int = 50 * 1024 * 1024,
    partition_max_bytes: int = 1024 * 1024,
    isolation_level: int = READ_UNCOMMITTED,
) -> Any:
    """A sessionless Fetch of each partition from its position."""
    v = FETCH_VERSION
    partition, topic = schema(FETCH, v, "FetchPartition"), schema(FETCH, v, "FetchTopic")
    return schema(FETCH, v)(
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=1,
        max_bytes=max_bytes,
        isolation_level=isolation_level,
        session_id=0,
        session_epoch=-1,
        topics=tuple(
            topic(
                topic=name,
                partitions=tuple(
                    partition(
                        partition=p,
                        current_leader_epoch=-1,
                        fetch_offset=positions[(name, p)],
                        log_start_offset=-1,
                        partition_max_bytes=partition_max_bytes,
                    )
                    for p in partitions
                ),
            )
            for name, partitions in by_topic(positions).items()
        ),
        forgotten_topics_data=(),
        rack_id="",
    )


def fetched_partitions(answer: Any) -> dict[TopicPartition, Any]:
    """Each partition's part of a Fetch answer; a whole-request error raises."""
    if answer.error_code.value != 0:
        raise ClientError(f"fetch failed: {error_name(answer.error_code)}")
    return {
        (topic.topic, p.partition_index): p for topic in answer.responses for p in topic.partitions
    }


def fetched_records(data: Any, position: int) -> tuple[list[tuple[Record, int]], int]:
    """The records of a fetched partition at or after ``position`` (control records and,
    under read_committed, aborted transactions' records left out), each with its batch's
    timestamp type (CREATE_TIME or LOG_APPEND_TIME), and the position after the last whole
    batch."""
    buf = data.records or b""
    try:
        headers = split_batches(buf, allow_partial_tail=True)
    except CorruptRecordError as e:
        raise ClientError(f"corrupt fetch answer: {e}") from e
    aborted = sorted((a.first_offset, a.producer_id) for a in (data.aborted_transactions or ()))
    open_aborts: set[int] = set()
    records: list[tuple[Record, int]] = []
    for header in headers:
        if header.next_offset <= position:
            continue
        position_before = position
        position = header.next_offset
        # A transaction listed as aborted starts being skipped at its first offset and
        # stops at its producer's abort marker (a control batch).
        while aborted and aborted[0][0] <= header.last_offset:
            open_aborts.add(aborted.pop(0)[1])
        if header.is_control:
            open_aborts.discard(header.producer_id)
            continue
        if header.is_transactional and header.producer_id in open_aborts:
            continue
        records += [
            (r, header.timestamp_type)
            for r in decode_records(buf, header)
            if r.offset >= position_before
        ]
    return records, position
