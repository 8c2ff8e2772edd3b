"""The cluster harness reads Metadata answers straight from their bytes
(``server/harness/cluster.py: broker_view``); what it reads must be what the schema
decodes, and a cut or padded answer must be refused, not half read."""

from __future__ import annotations

import datetime
import struct
import uuid

import pytest
from kio.schema.metadata.v12 import response as v12

from gregor.server.harness.cluster import PartitionView, broker_view
from gregor.wire.schema import decode, encode


def _answer() -> v12.MetadataResponse:
    def partition(
        index: int, error: int, replicas: tuple[int, ...]
    ) -> v12.MetadataResponsePartition:
        return v12.MetadataResponsePartition(
            error_code=error,
            partition_index=index,
            leader_id=replicas[0] if replicas else -1,
            leader_epoch=index * 3,
            replica_nodes=replicas,
            isr_nodes=replicas[:2],
            offline_replicas=replicas[2:],
        )

    return v12.MetadataResponse(
        throttle_time=datetime.timedelta(milliseconds=5),
        brokers=(
            v12.MetadataResponseBroker(node_id=1, host="a.example", port=9092, rack="r1"),
            v12.MetadataResponseBroker(node_id=2, host="b", port=9093, rack=None),
        ),
        cluster_id="cluster-é",
        controller_id=2,
        topics=(
            v12.MetadataResponseTopic(
                error_code=0,
                name="orders",
                topic_id=uuid.uuid4(),
                is_internal=False,
                partitions=tuple(
                    partition(i, 9 if i == 5 else 0, (1, 2, 3)[: i % 4]) for i in range(200)
                ),
                topic_authorized_operations=-2147483648,
            ),
            v12.MetadataResponseTopic(
                error_code=3,
                name="gone",
                topic_id=uuid.UUID(int=0),
                is_internal=True,
                partitions=(),
                topic_authorized_operations=0,
            ),
        ),
    )


def _frame(answer: v12.MetadataResponse) -> bytes:
    return struct.pack(">i", 7) + b"\x00" + encode(answer)  # response header v1


def test_the_view_is_what_the_schema_decodes() -> None:
    frame = _frame(_answer())
    decoded = decode(v12.MetadataResponse, frame, 5)
    view = broker_view(frame)
    assert view.cluster_id == decoded.cluster_id == "cluster-é"
    assert view.controller_id == 2
    assert view.brokers == {1: ("a.example", 9092, "r1"), 2: ("b", 9093, None)}
    assert view.topic_errors == {"gone": 3}
    assert view.topics == {
        str(t.name): {
            p.partition_index: PartitionView(
                p.error_code,
                p.leader_id,
                p.leader_epoch,
                tuple(p.replica_nodes),
                tuple(p.isr_nodes),
                tuple(p.offline_replicas),
            )
            for p in t.partitions
        }
        for t in decoded.topics
    }
    assert view.topics["orders"][3] == PartitionView(0, 1, 9, (1, 2, 3), (1, 2), (3,))


def test_a_cut_or_padded_answer_is_refused() -> None:
    frame = _frame(_answer())
    for end in range(4, len(frame)):
        with pytest.raises(ValueError):
            broker_view(frame[:end])
    with pytest.raises(ValueError, match="1 bytes after"):
        broker_view(frame + b"\x00")
