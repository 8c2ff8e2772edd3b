"""Rack-aware consumer group assignment (coordinator/assignors.py) on a 3-broker cluster whose
brokers are in racks a, b and c: the racks reach the assignor from ``broker.rack`` through the
metadata, and each member gets the partitions whose replica is in its rack. And KIP-1101: the
racks of the subscribed partitions' replicas are in the group's metadata hash, so a broker
back in another rack bumps the group epoch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from compat_tests.broker import BrokerProcess
from gregor.apis.context import build
from gregor.server.harness.cluster import Cluster
from gregor.wire import versions as v
from gregor.wire.schema import request_type
from tests.kafka_wire import WireClient, create_topic
from tests.test_consumer_group_protocol import (
    BROKER_OVERRIDES,
    PARTITIONS,
    TOPIC,
    Member,
    heartbeat,
    settle,
    topic_with_coordinator,
    wait_until,
)

RACKS = {1: "a", 2: "b", 3: "c"}


def test_members_get_the_partitions_of_their_rack(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 3, BROKER_OVERRIDES)
    for broker_id, broker in cluster.brokers.items():
        broker.overrides["broker.rack"] = RACKS[broker_id]
    with cluster:
        client = WireClient(cluster.brokers[1].port)
        created = create_topic(client, TOPIC, PARTITIONS, replication_factor=1)
        assert created.error_code == ErrorCode.none
        replicas = cluster.wait_for_topic(TOPIC, PARTITIONS)
        expected = {
            rack: {p for p, view in replicas.items() if RACKS[view.replicas[0]] == rack}
            for rack in RACKS.values()
        }
        assert sorted(len(ps) for ps in expected.values()) == [2, 2, 2]
        found = client.call(
            v.FIND_COORDINATOR, 0, build(request_type(v.FIND_COORDINATOR, 0), key="racks")
        )
        assert found.error_code == ErrorCode.none
        client.close()

        coordinator = WireClient(found.port)
        members = {rack: Member(coordinator, "racks", rack=rack) for rack in RACKS.values()}
        settle(list(members.values()))
        assert {rack: set(m.owned[created.topic_id]) for rack, m in members.items()} == expected
        coordinator.close()


def test_a_rack_change_bumps_the_group_epoch(tmp_path: Path) -> None:
    """As Kafka 4.1+ (Utils.computeTopicHash hashes each partition's replica racks): the
    broker restarted with another ``broker.rack`` changes the subscribed topic's metadata,
    and the member's next heartbeat finds a new group epoch and assignment epoch."""
    overrides = {
        **BROKER_OVERRIDES,
        "group.consumer.session.timeout.ms": "30000",
        "group.consumer.max.session.timeout.ms": "30000",
        "broker.rack": "a",
    }
    with BrokerProcess(tmp_path, overrides) as broker:
        topic_with_coordinator(broker, TOPIC, PARTITIONS)
        client = WireClient(broker.port)
        member = Member(client, "rack-change", rack="a")
        settle([member])
        epoch = member.epoch
        assert member.beat().member_epoch == epoch  # nothing changes while the racks stay
        client.close()

        broker.overrides["broker.rack"] = "b"
        broker.restart()
        client = WireClient(broker.port)
        answers: list[Any] = []

        def answered() -> bool:
            owned = member.owned
            answers.append(heartbeat(client, "rack-change", member.member_id, epoch, owned=owned))
            return answers[-1].error_code != ErrorCode.coordinator_load_in_progress

        wait_until(answered)
        assert (answers[-1].error_code, answers[-1].member_epoch) == (ErrorCode.none, epoch + 1)
        client.close()
