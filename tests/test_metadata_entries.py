"""A flexible Metadata answer's partition entries are packed by struct
(``apis/metadata.py: flexible_partition_entry``); each must be kio's bytes for the same
entry, at every flexible version, and arrays too long for a one-byte length are left to
the schema's writer."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from gregor.apis.context import build, nested
from gregor.apis.metadata import flexible_partition_entry
from gregor.wire.schema import response_type
from gregor.wire.versions import METADATA
from tests.kio_examples import kio_encode

INT32 = st.integers(-(2**31), 2**31 - 1)
BROKERS = st.lists(INT32, max_size=6)
FLEXIBLE = [9, 10, 11, 12, 13]


@pytest.mark.parametrize("version", FLEXIBLE)
@settings(max_examples=60, deadline=None)
@given(
    code=st.sampled_from(
        [ErrorCode.none, ErrorCode.leader_not_available, ErrorCode.listener_not_found]
    ),
    index=INT32,
    leader=INT32,
    epoch=INT32,
    replicas=BROKERS,
    isr=BROKERS,
    offline=BROKERS,
)
def test_an_entry_is_kios_bytes(
    version: int,
    code: ErrorCode,
    index: int,
    leader: int,
    epoch: int,
    replicas: list[int],
    isr: list[int],
    offline: list[int],
) -> None:
    partition_cls = nested(response_type(METADATA, version), "MetadataResponsePartition")
    entity = build(
        partition_cls,
        error_code=code,
        partition_index=index,
        leader_id=leader,
        leader_epoch=epoch,
        replica_nodes=tuple(replicas),
        isr_nodes=tuple(isr),
        offline_replicas=tuple(offline),
    )
    packed = flexible_partition_entry(code, index, leader, epoch, replicas, isr, offline)
    assert packed == kio_encode(entity)


def test_an_array_of_127_or_more_is_left_to_the_schema() -> None:
    assert flexible_partition_entry(0, 0, 1, 0, list(range(126)), [1], []) is not None
    assert flexible_partition_entry(0, 0, 1, 0, list(range(127)), [1], []) is None
    assert flexible_partition_entry(0, 0, 1, 0, [1], [1], list(range(200))) is None
