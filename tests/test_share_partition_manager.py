"""The share-partition manager (replica/share_partition_manager.py) over real logs and an
in-memory persister: first use and share.auto.offset.reset, acquisition of whole log
batches, writes before acknowledgements are answered, failed writes, leadership moves, the
log start moving, transaction markers and aborted transactions."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from gregor.controller.metadata.cache import MetadataCache, PartitionInfo, TopicInfo
from gregor.controller.metadata.config_resource import GROUP, ConfigResource
from gregor.log import LogManager
from gregor.log.txn_index import build_marker_batch
from gregor.replica.manager import ReplicaManager
from gregor.replica.share_partition import AcknowledgementBatch, AcquiredRecords, StateBatch
from gregor.replica.share_partition_manager import (
    ShareFetchSettings,
    SharePartitionManager,
    ShareWindow,
)
from gregor.replica.share_persister import ShareState
from gregor.wire.records import build_batch
from tests.share_memory_persister import MemoryPersister

NOW = 1_700_000_000_000
TOPIC = "t"
TOPIC_ID = uuid.uuid4()
KEY = ("g", TOPIC_ID, 0)
SETTINGS = ShareFetchSettings(delivery_count_limit=3, max_record_locks=100, max_share_sessions=10)
ACCEPT, RELEASE, REJECT = 1, 2, 3


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[ReplicaManager]:
    logs = LogManager([tmp_path], {})
    logs.startup(NOW)
    manager = ReplicaManager(0, logs, {}, now_ms=lambda: NOW)
    metadata = MetadataCache("c", 0)
    metadata.put_topic(TopicInfo(TOPIC, TOPIC_ID, {0: PartitionInfo(0, 0, 0, [0], [0])}))
    manager.metadata = metadata
    manager.become_leader(TOPIC, PartitionInfo(0, 0, 0, [0], [0]), {})
    partition = manager.get(TOPIC, 0)
    assert partition is not None
    partition.topic_id = TOPIC_ID
    yield manager
    logs.shutdown(manager.high_watermarks())


def produce(replicas: ReplicaManager, count: int, **batch: object) -> None:
    partition = replicas.get(TOPIC, 0)
    assert partition is not None
    records = [(None, b"v", (), NOW)] * count
    replicas.append(partition, build_batch(records, **batch), NOW)  # type: ignore[arg-type]


def run(replicas: ReplicaManager, persister: MemoryPersister, scenario) -> None:  # type: ignore[no-untyped-def]
    async def main() -> None:
        manager = SharePartitionManager(replicas, persister, SETTINGS)
        try:
            await scenario(manager)
        finally:
            manager.shutdown()

    asyncio.run(main())


async def loaded(manager: SharePartitionManager) -> ShareWindow:
    window, error = await manager.share_partition(KEY)
    assert error == ErrorCode.none and window is not None
    return window


def test_first_use_starts_at_latest_and_writes_that_state(replicas: ReplicaManager) -> None:
    persister = MemoryPersister()
    produce(replicas, 3)

    async def scenario(manager: SharePartitionManager) -> None:
        window = await loaded(manager)
        assert window.window.start_offset == 3
        assert persister.states[KEY].start_offset == 3
        assert manager.acquire(window, "m", 10, 1 << 20, True).acquired == []
        produce(replicas, 2)
        got = manager.acquire(window, "m", 10, 1 << 20, True)
        assert got.acquired == [AcquiredRecords(3, 4, 1)]

    run(replicas, persister, scenario)


def test_earliest_reset_and_whole_batches(replicas: ReplicaManager) -> None:
    persister = MemoryPersister()
    replicas.metadata.set_dynamic_configs(  # type: ignore[union-attr]
        ConfigResource(GROUP, "g"), {"share.auto.offset.reset": "earliest"}
    )
    produce(replicas, 3)
    produce(replicas, 3)

    async def scenario(manager: SharePartitionManager) -> None:
        window = await loaded(manager)
        partition = replicas.get(TOPIC, 0)
        assert partition is not None
        got = manager.acquire(window, "a", 2, 1 << 20, True)
        # max_records is rounded up to the batch's end; only that batch is sent
        assert got.acquired == [AcquiredRecords(0, 2, 1)]
        whole = partition.read(0, 1 << 20, True)
        assert 0 < got.size < whole.size
        other = manager.acquire(window, "b", 10, 1 << 20, True)
        assert other.acquired == [AcquiredRecords(3, 5, 1)]

    run(replicas, persister, scenario)


def test_acknowledgements_are_written_before_they_are_answered(replicas: ReplicaManager) -> None:
    persister = MemoryPersister()

    async def scenario(manager: SharePartitionManager) -> None:
        window = await loaded(manager)
        produce(replicas, 4)
        manager.acquire(window, "a", 10, 1 << 20, True)
        error = await manager.acknowledge(
            KEY, "a", [AcknowledgementBatch(0, 3, [ACCEPT, RELEASE, REJECT, ACCEPT])]
        )
        assert error == ErrorCode.none
        state = persister.states[KEY]
        assert state.start_offset == 1
        assert state.batches == (
            StateBatch(1, 1, 0, 1),
            StateBatch(2, 2, 4, 1),
            StateBatch(3, 3, 2, 1),
        )
        assert (
            await manager.acknowledge(KEY, "b", [AcknowledgementBatch(1, 1, [ACCEPT])])
            == ErrorCode.invalid_record_state
        )
        again = manager.acquire(window, "b", 10, 1 << 20, True)
        assert again.acquired == [AcquiredRecords(1, 1, 2)]

    run(replicas, persister, scenario)


def test_a_failed_write_errors_the_acknowledgement_and_reloads(replicas: ReplicaManager) -> None:
    persister = MemoryPersister()

    async def scenario(manager: SharePartitionManager) -> None:
        window = await loaded(manager)
        produce(replicas, 2)
        manager.acquire(window, "a", 10, 1 << 20, True)
        persister.fail = ErrorCode.fenced_state_epoch
        error = await manager.acknowledge(KEY, "a", [AcknowledgementBatch(0, 1, [ACCEPT])])
        assert error == ErrorCode.fenced_state_epoch
        persister.fail = None
        reloaded = await loaded(manager)
        assert reloaded is not window
        # the acceptance was not kept: the records go out again
        assert manager.acquire(reloaded, "a", 10, 1 << 20, True).acquired == [
            AcquiredRecords(0, 1, 1)
        ]

    run(replicas, persister, scenario)


def test_leadership_moving_drops_the_window(replicas: ReplicaManager) -> None:
    persister = MemoryPersister()

    async def scenario(manager: SharePartitionManager) -> None:
        window = await loaded(manager)
        replicas.become_leader(TOPIC, PartitionInfo(0, 0, 1, [0], [0]), {})
        again = await loaded(manager)
        assert again is not window and again.leader_epoch == 1
        assert persister.states[KEY].leader_epoch == 1

    run(replicas, persister, scenario)


def test_the_log_start_moving_archives_records_below_it(replicas: ReplicaManager) -> None:
    persister = MemoryPersister()
    replicas.metadata.set_dynamic_configs(  # type: ignore[union-attr]
        ConfigResource(GROUP, "g"), {"share.auto.offset.reset": "earliest"}
    )
    produce(replicas, 5)

    async def scenario(manager: SharePartitionManager) -> None:
        window = await loaded(manager)
        manager.acquire(window, "a", 10, 1 << 20, True)
        partition = replicas.get(TOPIC, 0)
        assert partition is not None
        produce(replicas, 1)
        partition.delete_records(5)
        replicas.on_log_start_moved(partition)
        assert window.window.start_offset == 5
        await manager.write(window)
        assert persister.states[KEY].start_offset == 5

    run(replicas, persister, scenario)


def test_markers_and_aborted_transactions_are_never_delivered(replicas: ReplicaManager) -> None:
    persister = MemoryPersister()
    replicas.metadata.set_dynamic_configs(  # type: ignore[union-attr]
        ConfigResource(GROUP, "g"),
        {"share.auto.offset.reset": "earliest", "share.isolation.level": "read_committed"},
    )
    partition = replicas.get(TOPIC, 0)
    assert partition is not None
    txn = {"producer_id": 7, "producer_epoch": 0, "is_transactional": True}
    produce(replicas, 2, base_sequence=0, **txn)
    replicas.append(partition, build_marker_batch(7, 0, False, 0, NOW), NOW, origin_client=False)
    produce(replicas, 1)

    async def scenario(manager: SharePartitionManager) -> None:
        window = await loaded(manager)
        got = manager.acquire(window, "a", 10, 1 << 20, True)
        assert got.acquired == [AcquiredRecords(3, 3, 1)]
        assert window.window.start_offset == 3

    run(replicas, persister, scenario)


@pytest.mark.parametrize(
    "state",
    [
        ShareState(0, -1, -(2**63)),  # a negative start offset
        ShareState(0, -1, 0, (StateBatch(0, 5, 0, 1), StateBatch(3, 7, 2, 1))),  # overlapping
        ShareState(0, -1, 0, (StateBatch(0, 5, 127, 1),)),  # an unknown delivery state
        ShareState(0, -1, 0, (StateBatch(0, 5, 1, 1),)),  # ACQUIRED, never persisted
    ],
)
def test_invalid_persisted_state_is_an_error_not_a_crash(
    replicas: ReplicaManager, state: ShareState
) -> None:
    """State no leader writes (a client may send WriteShareGroupState) fails the
    share-partition's load with UNKNOWN_SERVER_ERROR, as Kafka's initialization does."""
    persister = MemoryPersister(states={KEY: state})
    produce(replicas, 8)

    async def scenario(manager: SharePartitionManager) -> None:
        assert await manager.share_partition(KEY) == (None, ErrorCode.unknown_server_error)
        persister.states[KEY] = ShareState(0, -1, 2)  # repaired: the next use loads it
        window = await loaded(manager)
        assert manager.acquire(window, "m", 10, 1 << 20, True).acquired == [
            AcquiredRecords(2, 7, 1)
        ]

    run(replicas, persister, scenario)
