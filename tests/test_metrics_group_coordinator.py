"""Kafka's group coordinator metrics (group-coordinator-metrics) on a real broker's
Prometheus endpoint, while raw requests drive a consumer-protocol group (KIP-848) and a
simple classic group, and a share group (KIP-932): groups by protocol and state, the offsets
held, and the counters of consumer and share group rebalances and of offsets committed and
deleted."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from kio.schema.errors import ErrorCode

from compat_tests.broker import BrokerProcess
from gregor.apis.context import build, nested
from gregor.wire import versions as v
from gregor.wire.schema import request_type
from tests.kafka_wire import WireClient, create_topic
from tests.prometheus_scrape import Scrape
from tests.test_consumer_group_commits_and_configs import TOPIC, commit
from tests.test_consumer_group_protocol import heartbeat, join
from tests.test_metrics_hostile import start_with_metrics
from tests.test_share_group_membership import heartbeat as share_heartbeat

M = "kafka_server_group_coordinator_metrics_"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = start_with_metrics(tmp_path_factory.mktemp("group-metrics"))
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def client(broker: BrokerProcess) -> Iterator[WireClient]:
    c = WireClient(broker.port)
    assert create_topic(c, TOPIC, 2).error_code == ErrorCode.none
    find = build(request_type(v.FIND_COORDINATOR, 0), key="any")
    assert c.call(v.FIND_COORDINATOR, 0, find).error_code == ErrorCode.none
    yield c
    c.close()


def delete_offset(client: WireClient, group: str) -> ErrorCode:
    cls = request_type(v.OFFSET_DELETE, 0)
    topic = nested(cls, "OffsetDeleteRequestTopic")
    partition = nested(cls, "OffsetDeleteRequestPartition")(partition_index=0)
    body = cls(group_id=group, topics=(topic(name=TOPIC, partitions=(partition,)),))
    code: ErrorCode = client.call(v.OFFSET_DELETE, 0, body).error_code
    return code


def test_groups_by_protocol_and_state_and_the_coordinator_counters(
    broker: BrokerProcess, client: WireClient
) -> None:
    before = Scrape(broker)
    assert before.types[f"{M}consumer_group_rebalance"] == "counter"
    assert before.value(f"{M}group_count", protocol="consumer") == 0

    first, joined = join(client, "cg-metrics", topics=(TOPIC,))
    assert joined.error_code == ErrorCode.none
    second, _ = join(client, "cg-metrics", topics=(TOPIC,))  # the first must now give partitions up
    s = Scrape(broker)
    assert s.value(f"{M}group_count", protocol="consumer") == 1
    assert s.value(f"{M}consumer_group_count", state="Reconciling") == 1
    assert s.value(f"{M}consumer_group_count", state="Stable") == 0
    assert s.value(f"{M}consumer_group_rebalance_total") == 2  # the two joins bumped the epoch

    assert commit(client, 9, "cg-metrics", first, joined.member_epoch) == ErrorCode.none
    for member_id in (first, second):
        assert heartbeat(client, "cg-metrics", member_id, -1).error_code == ErrorCode.none
    assert commit(client, 9, "simple", "", -1) == ErrorCode.none  # a simple (classic) group
    assert delete_offset(client, "cg-metrics") == ErrorCode.none

    s = Scrape(broker)
    assert s.value(f"{M}consumer_group_count", state="Empty") == 1
    assert s.value(f"{M}consumer_group_count", state="Reconciling") == 0
    assert s.value(f"{M}group_count", protocol="classic") == 1
    assert s.value(f"{M}classic_group_count", state="Empty") == 1
    assert s.value(f"{M}offset_count") == 1  # the simple group's; the other was deleted
    assert s.value(f"{M}offset_commit_total") == 2
    assert s.value(f"{M}offset_deletion_total") == 1
    assert s.value(f"{M}offset_expiration_total") == 0
    # Leaving bumps the group epoch too, but Kafka counts only its heartbeats' bumps.
    assert s.value(f"{M}consumer_group_rebalance_total") == 2


def test_share_groups_by_state_and_their_rebalances(
    broker: BrokerProcess, client: WireClient
) -> None:
    before = Scrape(broker)
    assert before.types[f"{M}share_group_rebalance"] == "counter"
    assert before.value(f"{M}group_count", protocol="share") == 0

    member = str(uuid.uuid4())
    joined = share_heartbeat(client, "sg-metrics", member, 0, (TOPIC,))
    assert joined.error_code == ErrorCode.none
    s = Scrape(broker)
    assert s.value(f"{M}group_count", protocol="share") == 1
    assert s.value(f"{M}share_group_count", state="Stable") == 1
    assert s.value(f"{M}share_group_rebalance_total") == 1  # the join bumped the epoch

    assert share_heartbeat(client, "sg-metrics", member, -1).error_code == ErrorCode.none
    s = Scrape(broker)
    assert s.value(f"{M}share_group_count", state="Empty") == 1
    assert s.value(f"{M}share_group_count", state="Stable") == 0
    assert s.value(f"{M}share_group_rebalance_total") == 1  # leaving is not counted
