"""The records of share groups (KIP-932): their ``__consumer_offsets`` records (types 10-15)
and the ``__share_group_state`` records (ShareSnapshot 0, ShareUpdate 1), byte-for-byte
against fixtures written by hand from Kafka 4.1's ShareGroup*.json and Share*.json schemas,
round trips, and partition logs holding them (next to classic and consumer group records)
still loading."""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from gregor.coordinator import consumer_records, share_state_records
from gregor.coordinator.consumer_group import ConsumerGroup
from gregor.coordinator.group import Group
from gregor.coordinator.loader import PartitionLoader
from gregor.coordinator.record_format import RecordFormatError
from gregor.coordinator.records import (
    OFFSETS_TOPIC,
    GroupValue,
    MemberValue,
    OffsetValue,
    decode_key,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
)
from gregor.coordinator.runtime import replay
from gregor.coordinator.share_records import (
    KEY_TYPES,
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupCurrentMemberAssignmentValue,
    ShareGroupMemberMetadataKey,
    ShareGroupMemberMetadataValue,
    ShareGroupMetadataKey,
    ShareGroupMetadataValue,
    ShareGroupStatePartitionMetadataKey,
    ShareGroupStatePartitionMetadataValue,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupTargetAssignmentMemberValue,
    ShareGroupTargetAssignmentMetadataKey,
    ShareGroupTargetAssignmentMetadataValue,
    ShareKey,
    ShareValue,
    TopicInfo,
    TopicPartitionsInfo,
    decode_value,
    encode_key,
    encode_value,
)
from gregor.coordinator.share_state_records import (
    SHARE_GROUP_STATE_TOPIC,
    ShareSnapshotKey,
    ShareSnapshotValue,
    ShareStateKey,
    ShareStateValue,
    ShareUpdateKey,
    ShareUpdateValue,
    StateBatch,
)
from gregor.log.config import LogConfig
from gregor.log.log import Log
from gregor.replica.partition import Partition
from gregor.wire.records import build_batch
from tests.record_bytes import (
    ASSIGNMENT,
    ASSIGNMENT_BYTES,
    NO_TAGS,
    NOW,
    NULL,
    T0,
    T1,
    compact,
    i16,
    i32,
    i64,
    key_string,
)

# (key, value, the key's bytes, the value's bytes): each written from the JSON field list.
FIXTURES: list[tuple[ShareKey, ShareValue, bytes, bytes]] = [
    (
        ShareGroupMemberMetadataKey("g", "m-1"),
        ShareGroupMemberMetadataValue(
            rack_id=None, client_id="c", client_host="/h", subscribed_topic_names=("a", "bc")
        ),
        i16(10) + key_string("g") + key_string("m-1"),
        i16(0)
        + NULL  # RackId
        + compact("c")  # ClientId
        + compact("/h")  # ClientHost
        + b"\x03"
        + compact("a")
        + compact("bc")  # SubscribedTopicNames
        + NO_TAGS,
    ),
    (
        ShareGroupMemberMetadataKey("g", "m-2"),
        ShareGroupMemberMetadataValue("r1", "", "h", ()),
        i16(10) + key_string("g") + key_string("m-2"),
        i16(0) + compact("r1") + compact("") + compact("h") + b"\x01" + NO_TAGS,
    ),
    (
        ShareGroupMetadataKey("g"),
        ShareGroupMetadataValue(epoch=5, metadata_hash=-2),
        i16(11) + key_string("g"),
        i16(0) + i32(5) + i64(-2) + NO_TAGS,  # MetadataHash: a plain field, not tagged
    ),
    (
        ShareGroupTargetAssignmentMetadataKey("g"),
        ShareGroupTargetAssignmentMetadataValue(assignment_epoch=7),
        i16(12) + key_string("g"),
        i16(0) + i32(7) + NO_TAGS,
    ),
    (
        ShareGroupTargetAssignmentMemberKey("g", "m-1"),
        ShareGroupTargetAssignmentMemberValue(ASSIGNMENT),
        i16(13) + key_string("g") + key_string("m-1"),
        i16(0) + ASSIGNMENT_BYTES + NO_TAGS,
    ),
    (
        ShareGroupCurrentMemberAssignmentKey("g", "m-1"),
        ShareGroupCurrentMemberAssignmentValue(
            member_epoch=10, previous_member_epoch=9, state=0, assigned={T0: frozenset({1, 0})}
        ),
        i16(14) + key_string("g") + key_string("m-1"),
        i16(0)
        + i32(10, 9)
        + b"\x00"  # State int8
        + b"\x02"
        + T0.bytes
        + b"\x03"
        + i32(0, 1)
        + NO_TAGS  # AssignedPartitions; no PartitionsPendingRevocation in share groups
        + NO_TAGS,
    ),
    (
        ShareGroupStatePartitionMetadataKey("g"),
        ShareGroupStatePartitionMetadataValue(
            initializing_topics=(TopicPartitionsInfo(T1, "t1", frozenset({1, 0}), NOW),),
            initialized_topics=(TopicPartitionsInfo(T0, "t0", frozenset({0}), NOW - 1),),
            deleting_topics=(TopicInfo(T0, "old"),),
        ),
        i16(15) + key_string("g"),
        i16(0)
        # InitializingTopics[TopicId, TopicName, Partitions, CreateTimestamp]
        + b"\x02"
        + T1.bytes
        + compact("t1")
        + b"\x03"
        + i32(0, 1)
        + i64(NOW)
        + NO_TAGS
        # InitializedTopics
        + b"\x02"
        + T0.bytes
        + compact("t0")
        + b"\x02"
        + i32(0)
        + i64(NOW - 1)
        + NO_TAGS
        # DeletingTopics[TopicId, TopicName]
        + b"\x02"
        + T0.bytes
        + compact("old")
        + NO_TAGS
        + NO_TAGS,
    ),
    (
        ShareGroupStatePartitionMetadataKey("g2"),
        ShareGroupStatePartitionMetadataValue((), (), ()),
        i16(15) + key_string("g2"),
        i16(0) + b"\x01\x01\x01" + NO_TAGS,
    ),
]

STATE_FIXTURES: list[tuple[ShareStateKey, ShareStateValue, bytes, bytes]] = [
    (
        ShareSnapshotKey("g", T1, 3),
        ShareSnapshotValue(
            snapshot_epoch=1,
            state_epoch=2,
            leader_epoch=5,
            start_offset=100,
            create_timestamp=NOW,
            write_timestamp=NOW + 1,
            state_batches=(StateBatch(100, 109, 2, 1), StateBatch(110, 110, 0, 3)),
        ),
        i16(0) + key_string("g") + T1.bytes + i32(3),
        i16(0)
        + i32(1, 2, 5)  # SnapshotEpoch, StateEpoch, LeaderEpoch
        + i64(100)  # StartOffset
        + i64(NOW)  # CreateTimestamp
        + i64(NOW + 1)  # WriteTimestamp
        + b"\x03"  # StateBatches[FirstOffset, LastOffset, DeliveryState, DeliveryCount]
        + i64(100)
        + i64(109)
        + b"\x02"
        + i16(1)
        + NO_TAGS
        + i64(110)
        + i64(110)
        + b"\x00"
        + i16(3)
        + NO_TAGS
        + NO_TAGS,
    ),
    (
        ShareSnapshotKey("", T0, 0),
        ShareSnapshotValue(0, 0, -1, 0, NOW, NOW, ()),
        i16(0) + key_string("") + T0.bytes + i32(0),
        i16(0) + i32(0, 0, -1) + i64(0) + i64(NOW) + i64(NOW) + b"\x01" + NO_TAGS,
    ),
    (
        ShareUpdateKey("g", T1, 3),
        ShareUpdateValue(
            snapshot_epoch=1,
            leader_epoch=5,
            start_offset=-1,
            state_batches=(StateBatch(111, 120, 4, 5),),
        ),
        i16(1) + key_string("g") + T1.bytes + i32(3),
        i16(0)
        + i32(1, 5)  # SnapshotEpoch, LeaderEpoch
        + i64(-1)  # StartOffset: unchanged
        + b"\x02"
        + i64(111)
        + i64(120)
        + b"\x04"
        + i16(5)
        + NO_TAGS
        + NO_TAGS,
    ),
]


@pytest.mark.parametrize(("key", "value", "key_bytes", "value_bytes"), FIXTURES)
def test_share_group_records_match_kafkas_bytes_and_round_trip(
    key: ShareKey, value: ShareValue, key_bytes: bytes, value_bytes: bytes
) -> None:
    assert encode_key(key) == key_bytes
    assert encode_value(value) == value_bytes
    assert decode_key(key_bytes) == key
    assert decode_value(key, value_bytes) == value


@pytest.mark.parametrize(("key", "value", "key_bytes", "value_bytes"), STATE_FIXTURES)
def test_share_state_records_match_kafkas_bytes_and_round_trip(
    key: ShareStateKey, value: ShareStateValue, key_bytes: bytes, value_bytes: bytes
) -> None:
    assert share_state_records.encode_key(key) == key_bytes
    assert share_state_records.encode_value(value) == value_bytes
    assert share_state_records.decode_key(key_bytes) == key
    assert share_state_records.decode_value(key, value_bytes) == value


def test_share_group_record_types_do_not_overlap_consumer_ones() -> None:
    assert KEY_TYPES == frozenset(range(10, 16))
    assert not KEY_TYPES & consumer_records.KEY_TYPES


def test_tagged_fields_of_later_kafkas_are_skipped() -> None:
    unknown_tag = b"\x01" + b"\x05\x08" + i64(NOW)  # one field: tag 5, 8 bytes
    metadata = i16(0) + i32(5) + i64(9) + unknown_tag
    assert decode_value(ShareGroupMetadataKey("g"), metadata) == ShareGroupMetadataValue(5, 9)
    # a tagged field inside a TopicPartitionsInfo struct
    state = i16(0) + b"\x02" + T0.bytes + compact("t") + b"\x02" + i32(4) + i64(NOW)
    state += unknown_tag + b"\x01\x01" + NO_TAGS
    assert decode_value(
        ShareGroupStatePartitionMetadataKey("g"), state
    ) == ShareGroupStatePartitionMetadataValue(
        (TopicPartitionsInfo(T0, "t", frozenset({4}), NOW),), (), ()
    )
    # DeliveryCompleteCount (tag 0, int32, Kafka 4.2, KIP-1226) on both state values, and an
    # unknown tag inside a StateBatch.
    complete = b"\x01" + b"\x00\x04" + i32(7)
    batch = i64(5) + i64(6) + b"\x02" + i16(1) + unknown_tag
    snapshot = i16(0) + i32(1, 2, 3) + i64(5) + i64(NOW) + i64(NOW) + b"\x02" + batch + complete
    assert share_state_records.decode_value(
        ShareSnapshotKey("g", T0, 0), snapshot
    ) == ShareSnapshotValue(1, 2, 3, 5, NOW, NOW, (StateBatch(5, 6, 2, 1),))
    update = i16(0) + i32(1, 3) + i64(5) + b"\x02" + batch + complete
    assert share_state_records.decode_value(ShareUpdateKey("g", T0, 0), update) == ShareUpdateValue(
        1, 3, 5, (StateBatch(5, 6, 2, 1),)
    )


@pytest.mark.parametrize(
    ("key", "raw"),
    [
        (ShareGroupMetadataKey("g"), i16(1) + i32(5) + i64(0) + NO_TAGS),  # unknown version
        (ShareGroupMetadataKey("g"), i16(0) + i32(5) + i64(0)),  # no tagged-field section
        (ShareGroupMetadataKey("g"), i16(0) + i32(5) + NO_TAGS),  # 4.0's: no MetadataHash
        (  # ClientId is not nullable
            ShareGroupMemberMetadataKey("g", "m"),
            i16(0) + NULL + NULL + compact("h") + b"\x01" + NO_TAGS,
        ),
        (  # ten InitializingTopics claimed, none there
            ShareGroupStatePartitionMetadataKey("g"),
            i16(0) + b"\x0b" + b"\x01\x01" + NO_TAGS,
        ),
        (ShareGroupTargetAssignmentMetadataKey("g"), i16(0) + b"\x00\x00"),  # truncated
    ],
)
def test_bad_share_group_values_raise(key: ShareKey, raw: bytes) -> None:
    with pytest.raises(RecordFormatError):
        decode_value(key, raw)


@pytest.mark.parametrize(
    ("key", "raw"),
    [
        (ShareUpdateKey("g", T0, 0), i16(1) + i32(1, 2) + i64(0) + b"\x01" + NO_TAGS),
        # Kafka 4.0's snapshot: uint16 SnapshotEpoch, no timestamps
        (
            ShareSnapshotKey("g", T0, 0),
            i16(0) + struct.pack(">H", 1) + i32(2, 3) + i64(5) + b"\x01" + NO_TAGS,
        ),
        # three StateBatches claimed, one there
        (
            ShareUpdateKey("g", T0, 0),
            i16(0) + i32(1, 2) + i64(0) + b"\x04" + i64(1) + i64(1) + b"\x00" + i16(1) + NO_TAGS,
        ),
    ],
)
def test_bad_share_state_values_raise(key: ShareStateKey, raw: bytes) -> None:
    with pytest.raises(RecordFormatError):
        share_state_records.decode_value(key, raw)


@pytest.mark.parametrize(
    "raw",
    [
        i16(9) + key_string("g"),  # 4.0's ShareGroupPartitionMetadata: gone in 4.1
        i16(10) + key_string("g"),  # member key without its member id
        i16(11) + i16(-1),  # null group id
    ],
)
def test_bad_and_unknown_share_group_keys_raise(raw: bytes) -> None:
    with pytest.raises(RecordFormatError):
        decode_key(raw)


@pytest.mark.parametrize(
    "raw",
    [
        i16(2) + key_string("g") + T0.bytes + i32(0),  # unknown record type
        i16(0) + key_string("g") + T0.bytes,  # no partition
        i16(1) + i16(-1) + T0.bytes + i32(0),  # null group id
    ],
)
def test_bad_and_unknown_share_state_keys_raise(raw: bytes) -> None:
    with pytest.raises(RecordFormatError):
        share_state_records.decode_key(raw)


def _load(
    tmp_path: Path,
    topic: str,
    records: list[tuple[bytes, bytes | None]],
    replay_record: Callable[[bytes, bytes | None], None],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Write ``records`` as two batches of a partition's log and replay them through the
    coordinator loader, a small chunk at a time."""
    log = Log.open(tmp_path / f"{topic}-0", LogConfig(), now_ms=NOW)
    half = len(records) // 2
    log.append_as_follower(build_batch([(k, v, (), NOW) for k, v in records[:half]]))
    rest = [(k, v, (), NOW) for k, v in records[half:]]
    log.append_as_follower(build_batch(rest, base_offset=half))
    partition = Partition(topic, 0, log, 1, 0, [1], [1], 1)
    loader = PartitionLoader(partition, replay_record, chunk_bytes=64)
    with caplog.at_level(logging.WARNING, logger="gregor.coordinator.loader"):
        while not loader.step():
            pass
    log.close()


def test_a_log_with_share_group_records_still_loads(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Classic records, a consumer group's, the share group records, their tombstones and
    a Kafka 4.0 type 9 record in one __consumer_offsets partition: the classic and consumer
    group state loads, only the type 9 record is skipped as unreadable, and every share
    group record reads back as written."""
    share = [(encode_key(k), encode_value(v)) for k, v, _, _ in FIXTURES]
    tombstones = [
        (encode_key(ShareGroupCurrentMemberAssignmentKey("g", "m-1")), None),
        (encode_key(ShareGroupMemberMetadataKey("g", "m-2")), None),
        (encode_key(ShareGroupStatePartitionMetadataKey("g2")), None),
    ]
    consumer = [
        (
            consumer_records.encode_key(consumer_records.ConsumerGroupMetadataKey("cg")),
            consumer_records.encode_value(consumer_records.ConsumerGroupMetadataValue(4, 8)),
        ),
        (
            consumer_records.encode_key(
                consumer_records.ConsumerGroupTargetAssignmentMetadataKey("cg")
            ),
            consumer_records.encode_value(
                consumer_records.ConsumerGroupTargetAssignmentMetadataValue(4)
            ),
        ),
    ]
    classic_value = GroupValue(
        "consumer",
        3,
        "range",
        "m",
        NOW,
        (MemberValue("m", None, "c", "/h", 300_000, 45_000, b"", b""),),
    )
    # Topics[TopicId, TopicName, NumPartitions, PartitionMetadata[] (empty), tags], tags
    partition_metadata_v40 = i16(0) + b"\x02" + T0.bytes + compact("t") + i32(1) + b"\x01"
    partition_metadata_v40 += NO_TAGS + NO_TAGS
    records: list[tuple[bytes, bytes | None]] = [
        (encode_offset_key("classic", "t", 0), encode_offset_value(OffsetValue(7, 1, "", NOW))),
        (encode_group_key("classic"), encode_group_value(classic_value)),
        *consumer,
        (i16(9) + key_string("g"), partition_metadata_v40),
        *share,
        (encode_offset_key("cg", "t", 1), encode_offset_value(OffsetValue(11, 2, "x", NOW))),
        *tombstones,
    ]
    groups: dict[str, Group] = {}
    consumer_groups: dict[str, ConsumerGroup] = {}
    read: list[tuple[object, object]] = []

    def replay_and_read(key: bytes, value: bytes | None) -> None:
        replay(groups, key, value, None, consumer_groups)
        decoded = decode_key(key)
        if isinstance(decoded, ShareKey):
            read.append((decoded, None if value is None else decode_value(decoded, value)))

    _load(tmp_path, OFFSETS_TOPIC, records, replay_and_read, caplog)

    assert [r.getMessage() for r in caplog.records] == [
        f"Skipping unreadable record at offset 4 of {OFFSETS_TOPIC}-0: "
        "unknown __consumer_offsets key version 9"
    ]
    assert groups["classic"].generation == 3
    assert groups["classic"].offsets[("t", 0)].offset == 7
    assert groups["cg"].offsets[("t", 1)].offset == 11
    assert consumer_groups["cg"].group_epoch == 4
    assert consumer_groups["cg"].metadata_hash == 8
    assert consumer_groups["cg"].assignment_epoch == 4
    expected = [
        *((k, v) for k, v, _, _ in FIXTURES),
        *((decode_key(k), None) for k, _ in tombstones),
    ]
    assert read == expected


def test_a_share_group_state_log_loads(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Snapshots, updates and a tombstone in a __share_group_state partition read back
    through the coordinator loader in log order, none skipped."""
    records: list[tuple[bytes, bytes | None]] = [
        (share_state_records.encode_key(k), share_state_records.encode_value(v))
        for k, v, _, _ in STATE_FIXTURES
    ]
    records.append((share_state_records.encode_key(ShareSnapshotKey("", T0, 0)), None))
    read: list[tuple[ShareStateKey, ShareStateValue | None]] = []

    def decode(key: bytes, value: bytes | None) -> None:
        decoded = share_state_records.decode_key(key)
        value_read = None if value is None else share_state_records.decode_value(decoded, value)
        read.append((decoded, value_read))

    _load(tmp_path, SHARE_GROUP_STATE_TOPIC, records, decode, caplog)

    assert not caplog.records
    assert read == [
        *((k, v) for k, v, _, _ in STATE_FIXTURES),
        (ShareSnapshotKey("", T0, 0), None),
    ]
