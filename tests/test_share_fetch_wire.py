"""ShareFetchResponse v1 as wire/share_fetch.py encodes it, read back by kio's schema."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from gregor.wire.schema import decode, response_type
from gregor.wire.share_fetch import SharePartitionData, encode_share_fetch_response
from gregor.wire.versions import SHARE_FETCH


@dataclass
class FakeRegion:
    data: bytes

    @property
    def size(self) -> int:
        return len(self.data)


def test_the_encoding_reads_back_as_kafkas_schema() -> None:
    topic = uuid.uuid4()
    records = b"\x01" * 70
    parts, size = encode_share_fetch_response(
        [
            (
                topic,
                [
                    SharePartitionData(0, records=FakeRegion(records), acquired=[(5, 9, 2)]),
                    SharePartitionData(
                        1,
                        error_code=ErrorCode.not_leader_or_follower,
                        acknowledge_error_code=ErrorCode.invalid_record_state,
                        current_leader=(3, 7),
                    ),
                ],
            )
        ],
        acquisition_lock_timeout_ms=15000,
        node_endpoints=[(3, "h", 9092, None)],
    )
    body = b"".join(p if isinstance(p, bytes) else p.data for p in parts)
    assert len(body) == size
    response = decode(response_type(SHARE_FETCH, 1), body, 0)
    assert response.acquisition_lock_timeout.total_seconds() == 15
    (answer,) = response.responses
    assert answer.topic_id == topic
    first, second = answer.partitions
    assert first.records == records
    assert [(a.first_offset, a.last_offset, a.delivery_count) for a in first.acquired_records] == [
        (5, 9, 2)
    ]
    assert second.error_code == ErrorCode.not_leader_or_follower
    assert second.acknowledge_error_code == ErrorCode.invalid_record_state
    assert (second.current_leader.leader_id, second.current_leader.leader_epoch) == (3, 7)
    assert [(n.node_id, n.host, n.port) for n in response.node_endpoints] == [(3, "h", 9092)]
