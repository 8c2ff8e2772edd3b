"""The ``__consumer_offsets`` records of consumer-protocol groups (KIP-848, record types 3-8
and 16): byte-for-byte against fixtures written by hand from Kafka 4.1's
ConsumerGroup*.json schemas, round trips, and a partition log holding them next to classic
records still loading."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gregor.coordinator.consumer_records import (
    ClassicMemberMetadata,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    ConsumerKey,
    ConsumerValue,
    TopicMetadata,
    decode_value,
    encode_key,
    encode_value,
)
from gregor.coordinator.group import Group
from gregor.coordinator.loader import PartitionLoader
from gregor.coordinator.record_format import RecordFormatError
from gregor.coordinator.records import (
    OFFSETS_TOPIC,
    GroupKey,
    GroupValue,
    MemberValue,
    OffsetKey,
    OffsetValue,
    decode_key,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
)
from gregor.coordinator.runtime import replay
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
FIXTURES: list[tuple[ConsumerKey, ConsumerValue, bytes, bytes]] = [
    (
        ConsumerGroupMetadataKey("g"),
        ConsumerGroupMetadataValue(epoch=5),
        i16(3) + key_string("g"),
        i16(0) + i32(5) + NO_TAGS,  # MetadataHash 0 is its default: not written
    ),
    (
        ConsumerGroupMetadataKey("g"),
        ConsumerGroupMetadataValue(epoch=5, metadata_hash=-2),
        i16(3) + key_string("g"),
        # one tagged field: tag 0, size 8, the int64
        i16(0) + i32(5) + b"\x01" + b"\x00" + b"\x08" + i64(-2),
    ),
    (
        ConsumerGroupMemberMetadataKey("g", "m-1"),
        ConsumerGroupMemberMetadataValue(
            instance_id=None,
            rack_id="r1",
            client_id="c",
            client_host="/h",
            subscribed_topic_names=("a", "bc"),
            subscribed_topic_regex=None,
            rebalance_timeout_ms=300_000,
            server_assignor="uniform",
            classic_member_metadata=None,
        ),
        i16(5) + key_string("g") + key_string("m-1"),
        i16(0)
        + NULL  # InstanceId
        + compact("r1")  # RackId
        + compact("c")  # ClientId
        + compact("/h")  # ClientHost
        + b"\x03"
        + compact("a")
        + compact("bc")  # SubscribedTopicNames
        + NULL  # SubscribedTopicRegex
        + i32(300_000)  # RebalanceTimeoutMs
        + compact("uniform")  # ServerAssignor
        + NO_TAGS,  # ClassicMemberMetadata null: its default, not written
    ),
    (
        ConsumerGroupMemberMetadataKey("g", "m-2"),
        ConsumerGroupMemberMetadataValue(
            instance_id="i",
            rack_id=None,
            client_id="",
            client_host="h",
            subscribed_topic_names=(),
            subscribed_topic_regex="t.*",
            rebalance_timeout_ms=-1,
            server_assignor=None,
            classic_member_metadata=ClassicMemberMetadata(45_000, (("range", b"\x01\x02"),)),
        ),
        i16(5) + key_string("g") + key_string("m-2"),
        i16(0)
        + compact("i")
        + NULL
        + compact("")
        + compact("h")
        + b"\x01"  # no topics
        + compact("t.*")
        + i32(-1)
        + NULL
        # tagged field 0, 17 bytes: the nullable struct's marker 1, SessionTimeoutMs,
        # SupportedProtocols[Name, Metadata (compact bytes), tags], the struct's tags
        + b"\x01"
        + b"\x00"
        + b"\x11"
        + b"\x01"
        + i32(45_000)
        + b"\x02"
        + compact("range")
        + b"\x03\x01\x02"
        + NO_TAGS
        + NO_TAGS,
    ),
    (
        ConsumerGroupTargetAssignmentMetadataKey("g"),
        ConsumerGroupTargetAssignmentMetadataValue(assignment_epoch=7),
        i16(6) + key_string("g"),
        i16(0) + i32(7) + NO_TAGS,
    ),
    (
        ConsumerGroupTargetAssignmentMemberKey("g", "m-1"),
        ConsumerGroupTargetAssignmentMemberValue(ASSIGNMENT),
        i16(7) + key_string("g") + key_string("m-1"),
        i16(0) + ASSIGNMENT_BYTES + NO_TAGS,
    ),
    (
        ConsumerGroupCurrentMemberAssignmentKey("g", "m-1"),
        ConsumerGroupCurrentMemberAssignmentValue(
            member_epoch=10,
            previous_member_epoch=9,
            state=1,
            assigned={T0: frozenset({0, 1})},
            pending_revocation={},
        ),
        i16(8) + key_string("g") + key_string("m-1"),
        i16(0)
        + i32(10, 9)
        + b"\x01"  # State int8
        + b"\x02"
        + T0.bytes
        + b"\x03"
        + i32(0, 1)
        + NO_TAGS  # AssignedPartitions
        + b"\x01"  # PartitionsPendingRevocation: empty
        + NO_TAGS,
    ),
    (
        ConsumerGroupRegularExpressionKey("g", "t.*"),
        ConsumerGroupRegularExpressionValue(topics=("t1",), version=42, timestamp_ms=NOW),
        i16(16) + key_string("g") + key_string("t.*"),
        i16(0) + b"\x02" + compact("t1") + i64(42) + i64(NOW) + NO_TAGS,
    ),
]


@pytest.mark.parametrize(("key", "value", "key_bytes", "value_bytes"), FIXTURES)
def test_records_match_kafkas_bytes_and_round_trip(
    key: ConsumerKey, value: ConsumerValue, key_bytes: bytes, value_bytes: bytes
) -> None:
    assert encode_key(key) == key_bytes
    assert encode_value(value) == value_bytes
    assert decode_key(key_bytes) == key
    assert decode_value(key, value_bytes) == value


def test_partition_metadata_decodes_and_is_never_written() -> None:
    """Kafka 4.0 wrote type 4 (4.1 keeps MetadataHash instead): read, racks read past."""
    key = ConsumerGroupPartitionMetadataKey("g")
    raw_key = i16(4) + key_string("g")
    raw = (
        i16(0)
        + b"\x02"  # Topics
        + T1.bytes
        + compact("ab")
        + i32(3)
        + b"\x02"  # PartitionMetadata
        + i32(0)
        + b"\x03"
        + compact("r1")
        + compact("r2")
        + NO_TAGS
        + NO_TAGS
        + NO_TAGS
    )
    assert decode_key(raw_key) == key
    assert decode_value(key, raw) == ConsumerGroupPartitionMetadataValue(
        (TopicMetadata(T1, "ab", 3),)
    )
    assert encode_key(key) == raw_key
    with pytest.raises(TypeError):
        encode_value(ConsumerGroupPartitionMetadataValue(()))


def test_tagged_fields_of_later_kafkas_are_skipped() -> None:
    # CreationTimeMs (tag 1, KIP-1282) after MetadataHash.
    metadata = i16(0) + i32(5) + b"\x02" + b"\x00\x08" + i64(9) + b"\x01\x08" + i64(NOW)
    assert decode_value(ConsumerGroupMetadataKey("g"), metadata) == ConsumerGroupMetadataValue(5, 9)
    # AssignmentEpochs (tag 0 of TopicPartitions, KIP-1251): a compact []int32 of one.
    epochs = b"\x01" + b"\x00\x05" + b"\x02" + i32(4)
    current = i16(0) + i32(4, 3) + b"\x00" + b"\x02" + T0.bytes + b"\x02" + i32(6) + epochs
    current += b"\x01" + NO_TAGS
    assert decode_value(
        ConsumerGroupCurrentMemberAssignmentKey("g", "m"), current
    ) == ConsumerGroupCurrentMemberAssignmentValue(4, 3, 0, {T0: frozenset({6})}, {})


def test_empty_partition_sets_are_not_kept() -> None:
    value = ConsumerGroupTargetAssignmentMemberValue({T0: frozenset(), T1: frozenset({3})})
    raw = encode_value(value)
    assert raw == i16(0) + b"\x02" + T1.bytes + b"\x02" + i32(3) + NO_TAGS + NO_TAGS
    # A topic with no partitions in a log (Kafka may write one) is dropped on read.
    empty = i16(0) + b"\x02" + T0.bytes + b"\x01" + NO_TAGS + NO_TAGS
    key = ConsumerGroupTargetAssignmentMemberKey("g", "m")
    assert decode_value(key, empty) == ConsumerGroupTargetAssignmentMemberValue({})


@pytest.mark.parametrize(
    ("key", "raw"),
    [
        (ConsumerGroupMetadataKey("g"), i16(1) + i32(5) + NO_TAGS),  # unknown value version
        (ConsumerGroupMetadataKey("g"), i16(0) + i32(5)),  # no tagged-field section
        (ConsumerGroupTargetAssignmentMetadataKey("g"), i16(0) + b"\x00\x00"),  # truncated
        (  # ClientId is not nullable
            ConsumerGroupMemberMetadataKey("g", "m"),
            i16(0) + NULL + NULL + NULL + compact("h") + b"\x01" + NULL + i32(1) + NULL + NO_TAGS,
        ),
        (ConsumerGroupRegularExpressionKey("g", "r"), i16(0) + NULL + i64(1) + i64(2) + NO_TAGS),
    ],
)
def test_bad_values_raise(key: ConsumerKey, raw: bytes) -> None:
    with pytest.raises(RecordFormatError):
        decode_value(key, raw)


@pytest.mark.parametrize(
    "raw",
    [
        i16(5) + key_string("g"),  # member key without its member id
        i16(3) + i16(-1),  # null group id
        i16(9) + key_string("g"),  # 4.0's ShareGroupPartitionMetadata: gone in 4.1
        i16(17) + key_string("g"),
    ],
)
def test_bad_and_unknown_keys_raise(raw: bytes) -> None:
    with pytest.raises(RecordFormatError):
        decode_key(raw)


def test_a_log_with_consumer_group_records_still_loads(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Classic records, the consumer group records and their tombstones in one
    __consumer_offsets partition: the classic state loads, nothing is skipped as unreadable,
    and every consumer group record reads back as written."""
    consumer = [(encode_key(k), encode_value(v)) for k, v, _, _ in FIXTURES]
    tombstones = [
        (encode_key(ConsumerGroupCurrentMemberAssignmentKey("g", "m-1")), None),
        (encode_key(ConsumerGroupMemberMetadataKey("g", "m-2")), None),
        (encode_key(ConsumerGroupPartitionMetadataKey("g")), None),
    ]
    partition_metadata = (
        encode_key(ConsumerGroupPartitionMetadataKey("g")),
        i16(0) + b"\x02" + T0.bytes + compact("t") + i32(1) + b"\x01" + NO_TAGS + NO_TAGS,
    )
    classic_value = GroupValue(
        "consumer",
        3,
        "range",
        "m",
        NOW,
        (MemberValue("m", None, "c", "/h", 300_000, 45_000, b"", b""),),
    )
    records: list[tuple[bytes, bytes | None]] = [
        (encode_offset_key("classic", "t", 0), encode_offset_value(OffsetValue(7, 1, "", NOW))),
        (encode_group_key("classic"), encode_group_value(classic_value)),
        partition_metadata,
        *consumer,
        # a consumer group's offsets are plain offset commits of its group id
        (encode_offset_key("g", "t", 1), encode_offset_value(OffsetValue(11, 2, "x", NOW))),
        *tombstones,
    ]
    log = Log.open(tmp_path / f"{OFFSETS_TOPIC}-0", LogConfig(), now_ms=NOW)
    log.append_as_follower(build_batch([(k, v, (), NOW) for k, v in records[:5]]))
    log.append_as_follower(build_batch([(k, v, (), NOW) for k, v in records[5:]], base_offset=5))
    partition = Partition(OFFSETS_TOPIC, 0, log, 1, 0, [1], [1], 1)

    groups: dict[str, Group] = {}
    read: list[tuple[object, object]] = []

    def replay_and_read(key: bytes, value: bytes | None) -> None:
        replay(groups, key, value)
        decoded = decode_key(key)
        if not isinstance(decoded, OffsetKey | GroupKey):
            read.append((decoded, None if value is None else decode_value(decoded, value)))

    loader = PartitionLoader(partition, replay_and_read, chunk_bytes=64)
    with caplog.at_level(logging.WARNING, logger="gregor.coordinator.loader"):
        while not loader.step():
            pass
    log.close()

    assert not caplog.records
    assert groups["classic"].generation == 3
    assert groups["classic"].offsets[("t", 0)].offset == 7
    assert groups["g"].offsets[("t", 1)].offset == 11
    expected = [
        (
            ConsumerGroupPartitionMetadataKey("g"),
            ConsumerGroupPartitionMetadataValue((TopicMetadata(T0, "t", 1),)),
        ),
        *((k, v) for k, v, _, _ in FIXTURES),
        *((decode_key(k), None) for k, _ in tombstones),
    ]
    assert read == expected
