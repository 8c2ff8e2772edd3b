"""Log appends, zero-copy read regions, indexes, rolling, timestamps, truncation."""

import os
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gregor.log import Log, LogConfig, ReadResult
from gregor.log.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    UnexpectedAppendOffsetError,
)
from gregor.wire.records import build_batch, decode_records, split_batches

NOW = 1_700_000_000_000


def batch(n: int = 1, ts: int = NOW, value: bytes = b"v", **kw: object) -> bytes:
    return build_batch([(b"k", value, [], ts + i) for i in range(n)], **kw)


def region(result: ReadResult) -> bytes:
    return os.pread(result.fd, result.size, result.position)


def offsets_in(result: ReadResult) -> list[tuple[int, int]]:
    data = region(result)
    return [(h.base_offset, h.last_offset) for h in split_batches(data)]


def open_log(path: Path, **cfg: object) -> Log:
    return Log.open(path / "topic-0", LogConfig(**cfg), now_ms=NOW)


def test_append_assigns_consecutive_offsets_and_read_round_trips(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    r1 = log.append_as_leader(batch(3), leader_epoch=7, now_ms=NOW)
    r2 = log.append_as_leader(batch(2) + batch(4), leader_epoch=7, now_ms=NOW)
    assert (r1.first_offset, r1.last_offset, r1.record_count) == (0, 2, 3)
    assert (r2.first_offset, r2.last_offset, r2.record_count) == (3, 8, 6)
    assert r1.log_append_time == -1 and not r1.duplicate
    assert log.log_end_offset == 9
    result = log.read(0, max_bytes=1 << 20, max_offset=9, min_one_batch=True)
    data = region(result)
    headers = split_batches(data)
    assert [(h.base_offset, h.record_count) for h in headers] == [(0, 3), (3, 2), (5, 4)]
    assert all(h.partition_leader_epoch == 7 for h in headers)
    records = [r for h in headers for r in decode_records(data, h)]
    assert [r.offset for r in records] == list(range(9))
    assert result.first_offset == 0 and result.log_end_offset == 9


def test_stored_batch_is_byte_identical_except_broker_fields(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW)
    sent = batch(5, value=b"payload")
    log.append_as_leader(sent, leader_epoch=3, now_ms=NOW)
    stored = region(log.read(1, max_bytes=1 << 20, max_offset=100, min_one_batch=False))
    # base offset (0..8) and partition leader epoch (12..16) are the broker's; rest unchanged
    assert struct.unpack(">q", stored[:8])[0] == 1
    assert struct.unpack(">i", stored[12:16])[0] == 3
    assert stored[8:12] == sent[8:12] and stored[16:] == sent[16:]


def test_read_mid_batch_starts_at_containing_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for _ in range(5):
        log.append_as_leader(batch(4), leader_epoch=0, now_ms=NOW)
    result = log.read(6, max_bytes=1 << 20, max_offset=20, min_one_batch=True)
    assert offsets_in(result)[0] == (4, 7)
    assert result.first_offset == 4


def test_read_respects_max_bytes_and_whole_batches(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    sizes = []
    for _ in range(6):
        b = batch(2)
        sizes.append(len(b))
        log.append_as_leader(b, leader_epoch=0, now_ms=NOW)
    limit = sizes[0] * 2 + sizes[0] // 2
    result = log.read(0, max_bytes=limit, max_offset=100, min_one_batch=True)
    assert offsets_in(result) == [(0, 1), (2, 3)]
    assert result.size == sizes[0] * 2


def test_read_min_one_batch_returns_exactly_the_oversized_first_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch(3, value=b"x" * 500), leader_epoch=0, now_ms=NOW)
    log.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW)
    big = log.read(0, max_bytes=100, max_offset=100, min_one_batch=True)
    assert offsets_in(big) == [(0, 2)]
    empty = log.read(0, max_bytes=100, max_offset=100, min_one_batch=False)
    assert empty.size == 0


def test_read_stops_at_max_offset_and_empty_at_end(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for _ in range(4):
        log.append_as_leader(batch(2), leader_epoch=0, now_ms=NOW)
    assert offsets_in(log.read(0, max_bytes=1 << 20, max_offset=4, min_one_batch=True)) == [
        (0, 1),
        (2, 3),
    ]
    assert log.read(4, max_bytes=1 << 20, max_offset=4, min_one_batch=True).size == 0
    at_end = log.read(8, max_bytes=1 << 20, max_offset=8, min_one_batch=True)
    assert at_end.size == 0 and at_end.log_end_offset == 8
    with pytest.raises(OffsetOutOfRangeError):
        log.read(9, max_bytes=100, max_offset=100, min_one_batch=True)


def test_read_never_crosses_segments_and_moves_to_next(tmp_path: Path) -> None:
    size = len(batch(2))
    log = open_log(tmp_path, segment_bytes=size * 2)
    for _ in range(5):
        log.append_as_leader(batch(2), leader_epoch=0, now_ms=NOW)
    assert [s.base_offset for s in log.segments] == [0, 4, 8]
    first = log.read(0, max_bytes=1 << 20, max_offset=100, min_one_batch=True)
    assert offsets_in(first) == [(0, 1), (2, 3)]
    second = log.read(4, max_bytes=1 << 20, max_offset=100, min_one_batch=True)
    assert offsets_in(second) == [(4, 5), (6, 7)]
    assert second.fd != first.fd


def test_read_skips_to_next_segment_when_offset_is_past_segment_data(tmp_path: Path) -> None:
    # A follower log with an offset gap at a segment boundary (as after compaction).
    size = len(batch(2))
    log = open_log(tmp_path, segment_bytes=size)
    log.append_as_follower(batch(2, base_offset=0))
    log.append_as_follower(batch(2, base_offset=10))
    assert [s.base_offset for s in log.segments] == [0, 10]
    result = log.read(5, max_bytes=1 << 20, max_offset=100, min_one_batch=True)
    assert offsets_in(result) == [(10, 11)]


def test_offset_index_lookup_and_sparse_entries(tmp_path: Path) -> None:
    log = open_log(tmp_path, index_interval_bytes=200)
    for _ in range(40):
        log.append_as_leader(batch(2), leader_epoch=0, now_ms=NOW)
    index = log.active_segment.offset_index
    assert 5 < index.entries < 40
    prev = (-1, -1)
    for n in range(index.entries):
        entry = index.entry(n)
        assert entry[0] > prev[0] and entry[1] > prev[1]
        prev = entry
    # every indexed position is a batch start whose last offset is the entry's offset
    for n in range(index.entries):
        rel, pos = index.entry(n)
        header = log.active_segment.read_header(pos)
        assert header.last_offset == rel
    off, pos = index.lookup(51)
    assert off <= 51
    for offset in range(80):
        result = log.read(offset, max_bytes=1, max_offset=100, min_one_batch=True)
        assert offsets_in(result) == [(offset - offset % 2, offset - offset % 2 + 1)]


def test_index_file_is_preallocated_and_trimmed_on_roll(tmp_path: Path) -> None:
    size = len(batch(1))
    log = open_log(
        tmp_path, segment_bytes=size * 10, index_interval_bytes=0, segment_index_bytes=4096
    )
    for _ in range(12):
        log.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW)
    first, active = log.segments
    assert first.offset_index.path.stat().st_size == 9 * 8  # one entry per batch but the first
    assert first.time_index.path.stat().st_size % 12 == 0
    # Sized to segment.index.bytes when its first entry is written, not before.
    assert active.offset_index.entries == 1
    assert active.offset_index.path.stat().st_size == 0
    log.flush()
    assert active.offset_index.path.stat().st_size == 4096
    log.close()
    assert active.offset_index.path.stat().st_size == 8


def test_an_active_segment_without_index_entries_is_never_resized(tmp_path: Path) -> None:
    """Most partitions of a large cluster are idle: loading and closing their logs must not
    size and trim two index files each (100,000 resizes at 50,000 partitions)."""
    log = open_log(tmp_path, segment_index_bytes=4096)
    log.close()
    log = open_log(tmp_path, segment_index_bytes=4096)
    index, time_index = log.active_segment.offset_index.path, log.active_segment.time_index.path
    inodes = (index.stat().st_ino, time_index.stat().st_ino)
    changed = (index.stat().st_mtime_ns, time_index.stat().st_mtime_ns)
    log.close()
    log = open_log(tmp_path, segment_index_bytes=4096)
    log.close()
    assert (index.stat().st_size, time_index.stat().st_size) == (0, 0)
    assert (index.stat().st_ino, time_index.stat().st_ino) == inodes
    assert (index.stat().st_mtime_ns, time_index.stat().st_mtime_ns) == changed


def test_roll_when_index_full(tmp_path: Path) -> None:
    log = open_log(tmp_path, index_interval_bytes=0, segment_index_bytes=24)
    for _ in range(8):
        log.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW)
    assert len(log.segments) >= 2
    assert log.segments[0].offset_index.entries == 3


def test_roll_by_size(tmp_path: Path) -> None:
    size = len(batch(1))
    log = open_log(tmp_path, segment_bytes=size * 3)
    for _ in range(7):
        log.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW)
    assert [s.base_offset for s in log.segments] == [0, 3, 6]
    assert all(s.size <= size * 3 for s in log.segments)
    names = sorted(p.name for p in log.directory.iterdir())
    assert "00000000000000000003.log" in names and "00000000000000000006.snapshot" in names


def test_roll_by_time_uses_first_batch_timestamp(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_ms=1000)
    log.append_as_leader(batch(1, ts=NOW), leader_epoch=0, now_ms=NOW)
    log.append_as_leader(batch(1, ts=NOW + 500), leader_epoch=0, now_ms=NOW + 500)
    assert len(log.segments) == 1
    log.append_as_leader(batch(1, ts=NOW + 1500), leader_epoch=0, now_ms=NOW + 1500)
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.maybe_roll(NOW + 1600)
    assert len(log.segments) == 2
    log.maybe_roll(NOW + 2600)
    assert [s.base_offset for s in log.segments] == [0, 2, 3]
    log.maybe_roll(NOW + 99_999)  # an empty active segment is never rolled
    assert len(log.segments) == 3


def test_record_too_large_rejected_and_nothing_written(tmp_path: Path) -> None:
    log = open_log(tmp_path, max_message_bytes=200)
    with pytest.raises(RecordTooLargeError):
        log.append_as_leader(batch(1) + batch(1, value=b"x" * 300), leader_epoch=0, now_ms=NOW)
    assert log.log_end_offset == 0 and log.size_bytes == 0


def test_partial_batch_in_request_is_rejected(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(batch(2)[:-3], leader_epoch=0, now_ms=NOW)
    corrupt = bytearray(batch(2))
    corrupt[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(bytes(corrupt), leader_epoch=0, now_ms=NOW)
    assert log.log_end_offset == 0


def test_log_append_time(tmp_path: Path) -> None:
    log = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    result = log.append_as_leader(batch(3, ts=5), leader_epoch=0, now_ms=NOW + 42)
    assert result.log_append_time == NOW + 42
    data = region(log.read(0, max_bytes=1 << 20, max_offset=10, min_one_batch=True))
    (header,) = split_batches(data)
    assert header.max_timestamp == NOW + 42 and header.timestamp_type == 1
    assert [r.timestamp for r in decode_records(data, header)] == [NOW + 42] * 3
    assert log.max_timestamp() == (NOW + 42, 0)


def test_timestamp_bounds_for_create_time(tmp_path: Path) -> None:
    log = open_log(tmp_path, message_timestamp_before_max_ms=1000)
    with pytest.raises(InvalidTimestampError):
        log.append_as_leader(batch(1, ts=NOW - 5000), leader_epoch=0, now_ms=NOW)
    log.append_as_leader(batch(1, ts=NOW - 500), leader_epoch=0, now_ms=NOW)
    assert log.log_end_offset == 1


def test_offset_for_timestamp_and_max_timestamp(tmp_path: Path) -> None:
    size = len(batch(3))
    log = open_log(tmp_path, segment_bytes=size * 2, index_interval_bytes=0)
    assert log.max_timestamp() == (-1, -1)
    assert log.offset_for_timestamp(0) is None
    # timestamps: batch k holds NOW + 10k, +10k+1, +10k+2 ; batch 2 has an out-of-order max
    log.append_as_leader(batch(3, ts=NOW), leader_epoch=0, now_ms=NOW)
    log.append_as_leader(batch(3, ts=NOW + 10), leader_epoch=0, now_ms=NOW)
    log.append_as_leader(
        build_batch(
            [(None, b"a", [], NOW + 20), (None, b"b", [], NOW + 99), (None, b"c", [], NOW + 21)]
        ),
        leader_epoch=0,
        now_ms=NOW,
    )
    log.append_as_leader(batch(3, ts=NOW + 30), leader_epoch=0, now_ms=NOW)
    assert len(log.segments) == 2
    assert log.offset_for_timestamp(NOW) == (0, NOW)
    assert log.offset_for_timestamp(NOW + 3) == (3, NOW + 10)
    assert log.offset_for_timestamp(NOW + 11) == (4, NOW + 11)
    assert log.offset_for_timestamp(NOW + 22) == (7, NOW + 99)
    assert log.offset_for_timestamp(NOW + 99) == (7, NOW + 99)
    assert log.offset_for_timestamp(NOW + 100) is None
    assert log.max_timestamp() == (NOW + 99, 7)


def test_truncate_to_removes_containing_batch_and_rebuilds_state(tmp_path: Path) -> None:
    size = len(batch(2))
    log = open_log(tmp_path, segment_bytes=size * 2, index_interval_bytes=0)
    for i in range(6):
        log.append_as_leader(batch(2, ts=NOW + i), leader_epoch=0, now_ms=NOW)
    assert [s.base_offset for s in log.segments] == [0, 4, 8]
    log.truncate_to(5)  # offset 5 is inside batch 4..5
    assert log.log_end_offset == 4
    assert [s.base_offset for s in log.segments] == [0, 4]
    assert log.active_segment.size == 0
    assert log.max_timestamp() == (NOW + 1 + 1, 3)
    r = log.append_as_leader(batch(2), leader_epoch=1, now_ms=NOW)
    assert r.first_offset == 4
    assert offsets_in(log.read(4, max_bytes=1 << 20, max_offset=100, min_one_batch=True)) == [
        (4, 5)
    ]
    log.truncate_to(2)
    assert log.log_end_offset == 2 and [s.base_offset for s in log.segments] == [0]
    log.truncate_to(100)  # beyond the end: no-op
    assert log.log_end_offset == 2


def test_truncate_fully_and_start_at(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch(5), leader_epoch=0, now_ms=NOW)
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset) == (100, 100)
    assert [s.base_offset for s in log.segments] == [100]
    assert log.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW).first_offset == 100
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, max_bytes=100, max_offset=200, min_one_batch=True)


def test_follower_append_keeps_offsets_and_rejects_regressions(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    sent = batch(3, base_offset=0, partition_leader_epoch=4)
    result = log.append_as_follower(sent)
    assert (result.first_offset, result.last_offset) == (0, 2)
    assert region(log.read(0, max_bytes=1 << 20, max_offset=3, min_one_batch=True)) == sent
    with pytest.raises(UnexpectedAppendOffsetError):
        log.append_as_follower(batch(1, base_offset=2))
    log.append_as_follower(batch(1, base_offset=3))
    assert log.log_end_offset == 4


def test_flush_advances_recovery_point_and_flush_messages(tmp_path: Path) -> None:
    log = open_log(tmp_path, flush_interval_messages=5)
    log.append_as_leader(batch(3), leader_epoch=0, now_ms=NOW)
    assert log.recovery_point == 0
    log.append_as_leader(batch(3), leader_epoch=0, now_ms=NOW)
    assert log.recovery_point == 6
    log2 = Log.open(tmp_path / "other-0", LogConfig(flush_interval_ms=1000), now_ms=NOW)
    log2.append_as_leader(batch(2), leader_epoch=0, now_ms=NOW)
    log2.flush_if_due(NOW + 999)
    assert log2.recovery_point == 0
    log2.flush_if_due(NOW + 1000)
    assert log2.recovery_point == 2


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    counts=st.lists(st.integers(1, 6), min_size=1, max_size=25),
    value_size=st.integers(0, 300),
    interval=st.sampled_from([0, 100, 700, 4096]),
    segment_batches=st.integers(2, 30),
    data=st.data(),
)
def test_read_region_matches_a_naive_scan(
    tmp_path_factory: pytest.TempPathFactory,
    counts: list[int],
    value_size: int,
    interval: int,
    segment_batches: int,
    data: st.DataObject,
) -> None:
    path = tmp_path_factory.mktemp("prop")
    batches = [batch(n, value=b"x" * value_size) for n in counts]
    log = Log.open(
        path / "t-0",
        LogConfig(index_interval_bytes=interval, segment_bytes=len(batches[0]) * segment_batches),
        now_ms=NOW,
    )
    for b in batches:
        log.append_as_leader(b, leader_epoch=0, now_ms=NOW)
    # naive model: (base, last, size, segment base) per batch
    model = []
    for segment in log.segments:
        model += [
            (h.base_offset, h.last_offset, h.size, segment.base_offset)
            for h in segment.iter_headers()
        ]
    end = log.log_end_offset
    offset = data.draw(st.integers(0, end))
    max_offset = data.draw(st.integers(0, end + 2))
    max_bytes = data.draw(st.integers(0, 3 * len(batches[0])))
    min_one = data.draw(st.booleans())
    result = log.read(offset, max_bytes=max_bytes, max_offset=max_offset, min_one_batch=min_one)
    expected = []
    if offset < min(max_offset, end):
        first = next(i for i, m in enumerate(model) if m[1] >= offset)
        total = 0
        for base, last, size, seg in model[first:]:
            if seg != model[first][3] or base >= max_offset:
                break
            if total + size > max_bytes and not (min_one and not expected):
                break
            expected.append((base, last))
            total += size
            if total > max_bytes:
                break
    assert offsets_in(result) == expected


def test_segment_jitter_shortens_roll_time(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_ms=1000, segment_jitter_ms=1000)
    log.truncate_fully_and_start_at(7)
    log.append_as_leader(batch(1, ts=NOW), leader_epoch=0, now_ms=NOW)
    roll_ms = log._roll_ms(log.active_segment)
    assert 0 < roll_ms < 1000
    log.maybe_roll(NOW + roll_ms)
    assert len(log.segments) == 1
    log.maybe_roll(NOW + roll_ms + 1)
    assert len(log.segments) == 2


def test_topic_compression_type_recompresses_keeping_producer_fields(tmp_path: Path) -> None:
    log = open_log(tmp_path, compression_type="gzip")
    sent = build_batch(
        [(b"a", b"1", [("h", b"x")], NOW), (None, b"2", [], NOW + 5)],
        producer_id=9,
        producer_epoch=2,
        base_sequence=0,
    )
    result = log.append_as_leader(sent, leader_epoch=4, now_ms=NOW)
    assert (result.first_offset, result.last_offset) == (0, 1)
    data = region(log.read(0, max_bytes=1 << 20, max_offset=10, min_one_batch=True))
    (h,) = split_batches(data)
    assert (h.compression, h.producer_id, h.producer_epoch, h.base_sequence) == (1, 9, 2, 0)
    assert h.partition_leader_epoch == 4
    records = decode_records(data, h)
    assert [(r.offset, r.key, r.value, r.timestamp) for r in records] == [
        (0, b"a", b"1", NOW),
        (1, None, b"2", NOW + 5),
    ]
    assert records[0].headers == [("h", b"x")]
    assert log.append_as_leader(sent, leader_epoch=4, now_ms=NOW).duplicate


def test_compacted_topic_requires_keys(tmp_path: Path) -> None:
    log = open_log(tmp_path, cleanup_policy="compact")
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(build_batch([(None, b"v", [], NOW)]), leader_epoch=0, now_ms=NOW)
    assert log.append_as_leader(batch(2), leader_epoch=0, now_ms=NOW).last_offset == 1


def test_broker_built_batches_skip_client_checks_but_not_crc(tmp_path: Path) -> None:
    log = open_log(tmp_path, cleanup_policy="compact")
    keyless = build_batch([(None, b"v", [], NOW)])
    appended = log.append_as_leader(keyless, leader_epoch=0, now_ms=NOW, origin_client=False)
    assert appended.last_offset == 0
    corrupt = bytearray(batch(1))
    corrupt[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(bytes(corrupt), leader_epoch=0, now_ms=NOW, origin_client=False)
    assert log.log_end_offset == 1


def test_sequential_reads_follow_the_tail_across_appends_and_truncation(tmp_path: Path) -> None:
    log = open_log(tmp_path, index_interval_bytes=1 << 20)
    next_offset = 0
    for round_ in range(20):
        log.append_as_leader(batch(3, value=b"%d" % round_), leader_epoch=0, now_ms=NOW)
        result = log.read(
            next_offset, max_bytes=1 << 20, max_offset=log.log_end_offset, min_one_batch=True
        )
        assert offsets_in(result)[0][0] == next_offset
        next_offset = offsets_in(result)[-1][1] + 1
        # At the tail the next read is empty until more data arrives.
        assert (
            log.read(
                next_offset, max_bytes=1 << 20, max_offset=log.log_end_offset, min_one_batch=True
            ).size
            == 0
        )
    log.truncate_to(30)
    log.append_as_leader(batch(5, value=b"new"), leader_epoch=1, now_ms=NOW)
    result = log.read(30, max_bytes=1 << 20, max_offset=log.log_end_offset, min_one_batch=True)
    [header] = split_batches(region(result))
    assert (header.base_offset, header.record_count, header.partition_leader_epoch) == (30, 5, 1)
    log.close()
