"""Gregor advertises one Kafka release, 4.1, and serves every version it advertises.

Gregor's ApiVersions answer (from a real broker process, over a raw socket) is held against
Kafka 4.1's: every API Gregor advertises that 4.1 has is at exactly 4.1's range, the only
extra APIs are the ZooKeeper-era inter-broker ones of cluster mode, and every 4.1 API left
out is in NOT_SERVED with the issue that will bring it. A client that infers the release
from the ranges (kafka-python) must get 4.1, and then every version its 4.1 table picks
must be served: Metadata v13, ApiVersions v4, DescribeCluster v2, AlterPartitionReassignments
v1 and ListConfigResources v0-v1 are exercised here. Versions below the minimum (Produce
v0-v2, ListOffsets v0, Fetch v3) close the connection, as Kafka 4's SocketServer does,
with one log line per client, API and version.
"""

from __future__ import annotations

import datetime
import re
import struct
import time
from typing import Any

import pytest
from kafka.protocol.broker_version_data import (
    BROKER_API_VERSIONS,
    infer_broker_version_from_api_versions,
)
from kio.schema.errors import ErrorCode

from compat_tests.broker import BrokerProcess
from compat_tests.process_pool import ProcessPool
from gregor.apis.context import build, nested
from gregor.controller.configs import SET
from gregor.controller.metadata.config_resource import GROUP, TOPIC
from gregor.server.harness.cluster import Cluster
from gregor.wire import versions as v
from gregor.wire.schema import request_type
from tests.kafka_wire import WireClient, create_topic, request_frame
from tests.test_config_apis import incremental

# Kafka 4.1's ApiVersions answer, as a 4.1 broker gives it (with the default
# configuration: no telemetry reporter, so no GetTelemetrySubscriptions/PushTelemetry,
# and the streams group APIs 88-89 not yet enabled).
KAFKA_4_1: dict[int, tuple[int, int]] = {
    0: (0, 13), 1: (4, 18), 2: (1, 10), 3: (0, 13), 8: (2, 9), 9: (1, 9), 10: (0, 6),
    11: (0, 9), 12: (0, 4), 13: (0, 5), 14: (0, 5), 15: (0, 6), 16: (0, 5), 17: (0, 1),
    18: (0, 4), 19: (2, 7), 20: (1, 6), 21: (0, 2), 22: (0, 5), 23: (2, 4), 24: (0, 5),
    25: (0, 4), 26: (0, 5), 27: (1, 1), 28: (0, 5), 29: (1, 3), 30: (1, 3), 31: (1, 3),
    32: (1, 4), 33: (0, 2), 34: (1, 2), 35: (1, 4), 36: (0, 2), 37: (0, 3), 38: (1, 3),
    39: (1, 2), 40: (1, 2), 41: (1, 3), 42: (0, 2), 43: (0, 2), 44: (0, 1), 45: (0, 1),
    46: (0, 0), 47: (0, 0), 48: (0, 1), 49: (0, 1), 50: (0, 0), 51: (0, 0), 55: (0, 2),
    57: (0, 2), 60: (0, 2), 61: (0, 0), 64: (0, 0), 65: (0, 0), 66: (0, 2), 68: (0, 1),
    69: (0, 1), 74: (0, 1), 75: (0, 0), 76: (1, 1), 77: (1, 1), 78: (1, 1), 79: (1, 1),
    80: (0, 0), 81: (0, 0), 83: (0, 0), 84: (0, 0), 85: (0, 0), 86: (0, 0), 87: (0, 0),
    90: (0, 0), 91: (0, 0), 92: (0, 0),
}  # fmt: skip

TOKENS = "no issue yet: delegation tokens (KIP-48)"
KRAFT = "none: KRaft only (Gregor's cluster mode is ZooKeeper's)"
# The 4.1 APIs Gregor does not serve, and what will bring them.
NOT_SERVED: dict[int, str] = {
    38: f"{TOKENS} (CreateDelegationToken)",
    39: f"{TOKENS} (RenewDelegationToken)",
    40: f"{TOKENS} (ExpireDelegationToken)",
    41: f"{TOKENS} (DescribeDelegationToken)",
    55: f"{KRAFT} (DescribeQuorum)",
    64: f"{KRAFT} (UnregisterBroker)",
    80: f"{KRAFT} (AddRaftVoter)",
    81: f"{KRAFT} (RemoveRaftVoter)",
    # Gregor finalizes no feature (ApiVersions lists none, and nothing it serves is gated
    # on one), so there is nothing to update; it comes with the first feature-gated
    # protocol: group.version with #20, or transaction.version 2 (KIP-890 part 2).
    57: "the first feature-gated protocol (#20 or KIP-890 part 2) (UpdateFeatures)",
}
# Served beyond 4.1's table: the ZooKeeper-era inter-broker APIs of cluster mode, which
# only Gregor brokers send each other (4.1 answers WriteTxnMarkers 27 too).
INTER_BROKER = {
    v.LEADER_AND_ISR,
    v.STOP_REPLICA,
    v.UPDATE_METADATA,
    v.CONTROLLED_SHUTDOWN,
    v.ALTER_PARTITION,
}
TIMEOUT = datetime.timedelta(seconds=10)


@pytest.fixture(scope="module")
def broker(process_pool: ProcessPool) -> BrokerProcess:
    return process_pool.broker()


def api_versions(client: WireClient, version: int) -> Any:
    cls = request_type(v.API_VERSIONS, version)
    request = build(cls, client_software_name="release-test", client_software_version="1")
    response = client.call(v.API_VERSIONS, version, request)
    assert response.error_code == ErrorCode.none
    return response


def advertised(client: WireClient, version: int = 3) -> dict[int, tuple[int, int]]:
    response = api_versions(client, version)
    return {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}


def test_the_copied_table_is_kafka_python_s() -> None:
    assert BROKER_API_VERSIONS[(4, 1)] == KAFKA_4_1


@pytest.mark.parametrize("version", [3, 4])
def test_advertised_versions_are_kafka_4_1_s(client: WireClient, version: int) -> None:
    ours = advertised(client, version)
    mismatched = {
        key: (ours[key], KAFKA_4_1[key])
        for key in ours.keys() & KAFKA_4_1.keys()
        if ours[key] != KAFKA_4_1[key]
    }
    assert mismatched == {}, "advertised (ours, Kafka 4.1's) ranges differ"
    assert ours.keys() - KAFKA_4_1.keys() == INTER_BROKER
    assert KAFKA_4_1.keys() - ours.keys() == NOT_SERVED.keys()
    assert not NOT_SERVED.keys() & ours.keys()


def test_kafka_python_infers_4_1(client: WireClient) -> None:
    assert infer_broker_version_from_api_versions(advertised(client)) == (4, 1)


# --- the versions 4.1 brought ------------------------------------------------------------


def test_api_versions_v4_is_v3_s_answer(client: WireClient) -> None:
    v3, v4 = api_versions(client, 3), api_versions(client, 4)
    ranges = [[(k.api_key, k.min_version, k.max_version) for k in r.api_keys] for r in (v3, v4)]
    assert ranges[0] == ranges[1]
    # No feature is advertised, so v4's one change (a SupportedFeatures MinVersion of 0,
    # KAFKA-17011) has nothing to show.
    assert v4.supported_features == v3.supported_features == ()
    assert v4.finalized_features == ()


def metadata(client: WireClient, version: int, topics: list[str] | None) -> Any:
    cls = request_type(v.METADATA, version)
    topic_cls = nested(cls, "MetadataRequestTopic")
    request = build(
        cls,
        topics=None if topics is None else tuple(topic_cls(name=t, topic_id=None) for t in topics),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    return client.call(v.METADATA, version, request)


def test_metadata_v13(broker: BrokerProcess, client: WireClient) -> None:
    assert create_topic(client, "meta13", partitions=2).error_code == ErrorCode.none
    response = metadata(client, 13, ["meta13", "no-such-topic"])
    assert response.error_code == ErrorCode.none  # KIP-1102's top-level error: none
    assert [(b.node_id, b.port) for b in response.brokers] == [(0, broker.port)]
    known, unknown = response.topics
    assert (known.name, known.error_code, len(known.partitions)) == ("meta13", ErrorCode.none, 2)
    assert (unknown.name, unknown.error_code) == (
        "no-such-topic",
        ErrorCode.unknown_topic_or_partition,
    )
    everything = metadata(client, 13, None)
    assert everything.error_code == ErrorCode.none
    assert "meta13" in {t.name for t in everything.topics}


def describe_cluster(client: WireClient, version: int, **fields: Any) -> Any:
    cls = request_type(v.DESCRIBE_CLUSTER, version)
    request = build(
        cls,
        include_cluster_authorized_operations=False,
        **{"include_fenced_brokers": False, **fields},
    )
    return client.call(v.DESCRIBE_CLUSTER, version, request)


def test_describe_cluster_v2(broker: BrokerProcess, client: WireClient) -> None:
    for include_fenced in (False, True):
        response = describe_cluster(client, 2, include_fenced_brokers=include_fenced)
        assert response.error_code == ErrorCode.none
        assert response.endpoint_type == 1  # BROKER
        # No broker is ever fenced in ZooKeeper mode or on an embedded node.
        assert [(b.broker_id, b.port, b.is_fenced) for b in response.brokers] == [
            (0, broker.port, False)
        ]
        assert response.controller_id == 0
    for version in (1, 2):
        wrong = describe_cluster(client, version, endpoint_type=2)  # CONTROLLER
        assert wrong.error_code == ErrorCode.mismatched_endpoint_type
        assert wrong.error_message == (
            "The request was sent to an endpoint of type BROKER, "
            "but we wanted an endpoint of type CONTROLLER"
        )
        assert wrong.brokers == ()
        unknown = describe_cluster(client, version, endpoint_type=7)
        assert unknown.error_code == ErrorCode.unsupported_endpoint_type
        assert unknown.error_message == "Unsupported endpoint type 7"


def alter_reassignments(
    client: WireClient,
    targets: dict[tuple[str, int], list[int] | None],
    allow_rf_change: bool | None = None,
) -> tuple[bool | None, dict[tuple[str, int], tuple[int, str | None]]]:
    """(the response's AllowReplicationFactorChange, per partition (error, message)), in
    v1, or v0 when `allow_rf_change` is None."""
    version = 0 if allow_rf_change is None else 1
    cls = request_type(v.ALTER_PARTITION_REASSIGNMENTS, version)
    topic_cls = nested(cls, "ReassignableTopic")
    partition_cls = nested(cls, "ReassignablePartition")
    topics: dict[str, list[Any]] = {}
    for (topic, index), replicas in targets.items():
        topics.setdefault(topic, []).append(
            partition_cls(
                partition_index=index, replicas=None if replicas is None else tuple(replicas)
            )
        )
    request = build(
        cls,
        timeout=TIMEOUT,
        allow_replication_factor_change=allow_rf_change,
        topics=tuple(topic_cls(name=t, partitions=tuple(p)) for t, p in topics.items()),
    )
    response = client.call(v.ALTER_PARTITION_REASSIGNMENTS, version, request)
    assert response.error_code == ErrorCode.none
    return getattr(response, "allow_replication_factor_change", None), {
        (t.name, p.partition_index): (p.error_code, p.error_message)
        for t in response.responses
        for p in t.partitions
    }


def test_alter_partition_reassignments_v1_embedded(client: WireClient) -> None:
    create_topic(client, "rf-one")
    same = [0]
    grown = [0, 3]
    allowed, outcome = alter_reassignments(client, {("rf-one", 0): same}, allow_rf_change=False)
    assert allowed is False  # echoed
    assert outcome == {("rf-one", 0): (ErrorCode.none, None)}
    allowed, outcome = alter_reassignments(client, {("rf-one", 0): grown}, allow_rf_change=False)
    assert allowed is False
    assert outcome == {
        ("rf-one", 0): (
            ErrorCode.invalid_replication_factor,
            "The replication factor is changed from 1 to 2",
        )
    }
    # Allowed (v1 true, or v0): the target's other faults are what is answered.
    for allow in (True, None):
        allowed, outcome = alter_reassignments(client, {("rf-one", 0): grown}, allow)
        assert allowed is allow
        assert outcome[("rf-one", 0)][0] == ErrorCode.invalid_replica_assignment


def list_config_resources(client: WireClient, version: int, types: list[int] | None) -> Any:
    cls = request_type(v.LIST_CONFIG_RESOURCES, version)
    request = build(cls, resource_types=tuple(types or ()))
    return client.call(v.LIST_CONFIG_RESOURCES, version, request)


BROKER_LOGGER, BROKER, CLIENT_METRICS = 8, 4, 16


def test_list_config_resources(client: WireClient) -> None:
    assert create_topic(client, "listed").error_code == ErrorCode.none
    grouped = incremental(
        client, [(GROUP, "configured", [("consumer.session.timeout.ms", SET, "45000")])]
    )
    assert [r.error_code for r in grouped] == [ErrorCode.none]

    # v0 (ListClientMetricsResources): client-metrics subscriptions, of which Gregor has none.
    v0 = list_config_resources(client, 0, None)
    assert (v0.error_code, v0.config_resources) == (ErrorCode.none, ())

    def rows(types: list[int] | None) -> list[tuple[int, str]]:
        response = list_config_resources(client, 1, types)
        assert response.error_code == ErrorCode.none
        return [(r.resource_type, r.resource_name) for r in response.config_resources]

    # An empty filter is every type, in Kafka's order: groups with configs, client metrics,
    # broker loggers, brokers, topics.
    everything = rows(None)
    assert everything[:3] == [(GROUP, "configured"), (BROKER_LOGGER, "0"), (BROKER, "0")]
    assert (TOPIC, "listed") in everything[3:]
    assert {kind for kind, _ in everything[3:]} == {TOPIC}
    assert rows([TOPIC]) == everything[3:]
    assert rows([BROKER, BROKER_LOGGER]) == [(BROKER_LOGGER, "0"), (BROKER, "0")]
    assert rows([GROUP, GROUP]) == [(GROUP, "configured")]
    assert rows([CLIENT_METRICS]) == []
    # A type v1 does not list fails the whole request.
    for types in ([64], [TOPIC, 1]):
        refused = list_config_resources(client, 1, types)
        assert refused.error_code == ErrorCode.unsupported_version
        assert refused.config_resources == ()


# --- versions below the minimum ----------------------------------------------------------

# Produce v0-v2 are advertised (KAFKA-18659) but removed, ListOffsets v0 and Fetch v0-v3
# are removed in Kafka 4: Kafka's SocketServer closes the connection without an answer.
REMOVED = [(v.PRODUCE, 0), (v.PRODUCE, 1), (v.PRODUCE, 2), (v.LIST_OFFSETS, 0), (v.FETCH, 3)]


def test_removed_versions_close_the_connection_and_log_once(broker: BrokerProcess) -> None:
    start = broker.log_path.stat().st_size
    body = struct.pack(">hii", 1, 5000, 0)  # never read: the header is enough to refuse
    for api_key, version in REMOVED:
        for attempt in range(3):
            client = WireClient(broker.port)
            try:
                client.send(request_frame(api_key, version, attempt, body, "old-client"))
                assert client.is_closed_by_peer(), (api_key, version)
            finally:
                client.close()
    # The broker is still fine, and said so once per client, API and version.
    client = WireClient(broker.port)
    try:
        assert advertised(client)[v.PRODUCE] == (0, 13)
    finally:
        client.close()
    deadline = time.monotonic() + 10
    while True:
        with broker.log_path.open("rb") as f:
            f.seek(start)
            log = f.read().decode(errors="replace")
        lines = [line for line in log.splitlines() if "unsupported API key" in line]
        if len(lines) >= len(REMOVED) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    for api_key, version in REMOVED:
        pattern = re.compile(rf"'old-client'\): unsupported API key {api_key} version {version}\b")
        assert len([line for line in lines if pattern.search(line)]) == 1, (api_key, version)


# --- reassignment without a change of replication factor, in cluster mode -----------------


@pytest.fixture(scope="module")
def cluster(process_pool: ProcessPool) -> Cluster:
    return process_pool.cluster()


def test_alter_partition_reassignments_v1_cluster(cluster: Cluster) -> None:
    controller = cluster.wait_for_controller()
    client = WireClient(cluster.brokers[controller].port)
    try:
        assert create_topic(client, "moving", partitions=2, replication_factor=2).error_code == (
            ErrorCode.none
        )
        cluster.wait_for_topic("moving", 2, isr=2)
        replicas = {
            p: list(cluster.metadata(controller).topics["moving"][p].replicas) for p in (0, 1)
        }
        others = {p: [b for b in (1, 2, 3) if b not in replicas[p]] for p in (0, 1)}
        swapped = [replicas[0][0], others[0][0]]  # same count, one replica moved
        allowed, outcome = alter_reassignments(
            client,
            {("moving", 0): swapped, ("moving", 1): [1, 2, 3]},
            allow_rf_change=False,
        )
        assert allowed is False
        assert outcome == {
            ("moving", 0): (ErrorCode.none, None),
            ("moving", 1): (
                ErrorCode.invalid_replication_factor,
                "The replication factor is changed from 2 to 3",
            ),
        }
        allowed, outcome = alter_reassignments(client, {("moving", 1): [1, 2, 3]}, True)
        assert allowed is True
        assert outcome == {("moving", 1): (ErrorCode.none, None)}
        deadline = time.monotonic() + 60
        while True:
            view = cluster.metadata(controller).topics["moving"]
            if sorted(view[0].replicas) == sorted(swapped) and len(view[1].replicas) == 3:
                break
            assert time.monotonic() < deadline, view
            time.sleep(0.2)
        # Now headed for 3: a target of 3 is no change.
        allowed, outcome = alter_reassignments(client, {("moving", 1): [3, 2, 1]}, False)
        assert outcome == {("moving", 1): (ErrorCode.none, None)}
    finally:
        client.close()
