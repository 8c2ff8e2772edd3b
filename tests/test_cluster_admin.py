"""The cluster administration APIs on the embedded node, over raw sockets against a real
broker process: CreatePartitions, DescribeLogDirs, ElectLeaders and the partition
reassignment APIs answer as Kafka does for a one-broker cluster."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from compat_tests.broker import BrokerProcess
from compat_tests.process_pool import ProcessPool
from gregor.apis.context import build, nested
from gregor.wire import versions as v
from gregor.wire.schema import request_type
from tests.kafka_wire import WireClient, create_topic
from tests.test_api_behaviour import fetch, produce, records
from tests.test_storage_full_disk import incompressible, small_fs  # noqa: F401 (a fixture)

TIMEOUT = datetime.timedelta(seconds=5)
BROKER_ID = 0  # BrokerProcess's broker.id


@pytest.fixture(scope="module")
def broker(process_pool: ProcessPool) -> BrokerProcess:
    return process_pool.broker()


def partition_count(client: WireClient, topic: str) -> int:
    cls = request_type(v.METADATA, 12)
    request = build(
        cls,
        topics=(nested(cls, "MetadataRequestTopic")(name=topic, topic_id=None),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    (entry,) = client.call(v.METADATA, 12, request).topics
    return len(entry.partitions)


def create_partitions(
    client: WireClient,
    *topics: tuple[str, int, list[list[int]] | None],
    validate_only: bool = False,
    version: int = 3,
) -> dict[str, Any]:
    cls = request_type(v.CREATE_PARTITIONS, version)
    topic_cls = nested(cls, "CreatePartitionsTopic")
    assignment_cls = nested(cls, "CreatePartitionsAssignment")
    request = cls(
        topics=tuple(
            topic_cls(
                name=name,
                count=count,
                assignments=None
                if assignments is None
                else tuple(assignment_cls(broker_ids=tuple(a)) for a in assignments),
            )
            for name, count, assignments in topics
        ),
        timeout=TIMEOUT,
        validate_only=validate_only,
    )
    return {r.name: r for r in client.call(v.CREATE_PARTITIONS, version, request).results}


@pytest.mark.parametrize("version", range(4))
def test_create_partitions(client: WireClient, version: int) -> None:
    topic = f"grow-{version}"
    assert create_topic(client, topic).error_code == ErrorCode.none
    checked = create_partitions(client, (topic, 3, None), validate_only=True, version=version)
    assert checked[topic].error_code == ErrorCode.none
    assert partition_count(client, topic) == 1  # validate_only changed nothing

    grown = create_partitions(client, (topic, 3, [[BROKER_ID], [BROKER_ID]]), version=version)
    assert grown[topic].error_code == ErrorCode.none and grown[topic].error_message is None
    assert partition_count(client, topic) == 3
    produced = produce(client, topic, records(2), partition=2)
    assert produced.error_code == ErrorCode.none
    assert fetch(client, topic, 0, partition=2).high_watermark == 2


def test_create_partitions_errors(client: WireClient) -> None:
    assert create_topic(client, "fixed", partitions=2).error_code == ErrorCode.none
    results = create_partitions(
        client,
        ("fixed", 2, None),
        ("no-such-topic", 4, None),
    )
    assert results["fixed"].error_code == ErrorCode.invalid_partitions
    assert results["no-such-topic"].error_code == ErrorCode.unknown_topic_or_partition
    fewer = create_partitions(client, ("fixed", 1, None))["fixed"]
    assert fewer.error_code == ErrorCode.invalid_partitions
    assert fewer.error_message == (
        "The topic fixed currently has 2 partition(s); 1 would not be an increase."
    )
    for assignments in ([[BROKER_ID]], [[BROKER_ID], [7]], [[BROKER_ID, BROKER_ID]] * 2, [[], []]):
        wrong = create_partitions(client, ("fixed", 4, assignments))["fixed"]
        assert wrong.error_code == ErrorCode.invalid_replica_assignment, assignments
    repeated = create_partitions(client, ("fixed", 3, None), ("fixed", 4, None))
    assert list(repeated) == ["fixed"]
    assert repeated["fixed"].error_code == ErrorCode.invalid_request
    assert partition_count(client, "fixed") == 2  # no refused request added a partition


def test_created_partitions_survive_a_restart(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path) as broker:
        client = WireClient(broker.port)
        create_topic(client, "kept")
        assert create_partitions(client, ("kept", 2, None))["kept"].error_code == ErrorCode.none
        assert produce(client, "kept", records(3), partition=1).error_code == ErrorCode.none
        client.close()
        broker.restart()
        client = WireClient(broker.port)
        assert partition_count(client, "kept") == 2
        assert fetch(client, "kept", 0, partition=1).high_watermark == 3
        client.close()


def test_create_topics_with_manual_assignments(client: WireClient) -> None:
    cls = request_type(v.CREATE_TOPICS, 7)
    topic_cls = nested(cls, "CreatableTopic")
    assignment_cls = nested(cls, "CreatableReplicaAssignment")

    def create_assigned(name: str, assignment: list[tuple[int, list[int]]]) -> Any:
        topic = topic_cls(
            name=name,
            num_partitions=-1,
            replication_factor=-1,
            assignments=tuple(
                assignment_cls(partition_index=p, broker_ids=tuple(b)) for p, b in assignment
            ),
            configs=(),
        )
        request = cls(timeout=TIMEOUT, validate_only=False, topics=(topic,))
        return client.call(v.CREATE_TOPICS, 7, request).topics[0]

    made = create_assigned("assigned", [(0, [BROKER_ID]), (1, [BROKER_ID])])
    assert made.error_code == ErrorCode.none and made.num_partitions == 2
    for name, assignment in [
        ("gap", [(0, [BROKER_ID]), (2, [BROKER_ID])]),
        ("twice", [(0, [BROKER_ID]), (0, [BROKER_ID])]),
        ("stranger", [(0, [5])]),
        ("repeated-broker", [(0, [BROKER_ID, BROKER_ID])]),
    ]:
        refused = create_assigned(name, assignment)
        assert refused.error_code == ErrorCode.invalid_replica_assignment, name
        assert partition_count(client, name) == 0


def describe_log_dirs(
    client: WireClient, topics: dict[str, list[int]] | None, version: int = 4
) -> Any:
    cls = request_type(v.DESCRIBE_LOG_DIRS, version)
    topic_cls = nested(cls, "DescribableLogDirTopic")
    request = cls(
        topics=None
        if topics is None
        else tuple(topic_cls(topic=t, partitions=tuple(p)) for t, p in topics.items())
    )
    return client.call(v.DESCRIBE_LOG_DIRS, version, request)


@pytest.mark.parametrize("version", range(1, 5))
def test_describe_log_dirs(broker: BrokerProcess, client: WireClient, version: int) -> None:
    topic = f"sized-{version}"
    create_topic(client, topic, partitions=2)
    assert produce(client, topic, records(4)).error_code == ErrorCode.none
    response = describe_log_dirs(client, {topic: [0, 1, 9]}, version)
    (result,) = response.results
    assert result.error_code == ErrorCode.none
    assert result.log_dir == str(broker.data_dir.absolute())
    (described,) = result.topics
    sizes = {p.partition_index: p.partition_size for p in described.partitions}
    assert described.name == topic and sizes.keys() == {0, 1}
    assert sizes[0] == len(records(4)) and sizes[1] == 0
    assert all(p.offset_lag == 0 and not p.is_future_key for p in described.partitions)
    if version >= 4:
        assert result.total_bytes >= result.usable_bytes > 0
    everything = describe_log_dirs(client, None, version).results[0].topics
    assert topic in {t.name for t in everything}


def test_describe_log_dirs_reports_an_offline_dir(tmp_path: Path, small_fs: Path) -> None:  # noqa: F811
    healthy, doomed = tmp_path / "healthy", small_fs / "data"
    with BrokerProcess(tmp_path, {"log.dirs": f"{healthy},{doomed}"}) as broker:
        client = WireClient(broker.port, timeout=30)
        assert create_topic(client, "spread", partitions=2).error_code == ErrorCode.none
        placed = {
            result.log_dir: {p.partition_index for t in result.topics for p in t.partitions}
            for result in describe_log_dirs(client, None).results
        }
        assert placed.keys() == {str(healthy), str(doomed)}
        (filled,) = placed[str(doomed)]
        for i in range(10_000):
            if produce(client, "spread", incompressible(30_000, i), filled).error_code:
                break
        else:
            pytest.fail("a 4 MiB file system never filled up")
        results = {r.log_dir: r for r in describe_log_dirs(client, None).results}
        assert results[str(doomed)].error_code == ErrorCode.kafka_storage_error
        assert results[str(doomed)].topics == ()
        assert results[str(healthy)].error_code == ErrorCode.none
        (topic,) = results[str(healthy)].topics
        assert [p.partition_index for p in topic.partitions] == [1 - filled]
        client.close()


def elect(
    client: WireClient, partitions: dict[str, list[int]] | None, election: int, version: int
) -> Any:
    cls = request_type(v.ELECT_LEADERS, version)
    topic_cls = nested(cls, "TopicPartitions")
    request = build(
        cls,
        election_type=election,
        topic_partitions=None
        if partitions is None
        else tuple(topic_cls(topic=t, partitions=tuple(p)) for t, p in partitions.items()),
        timeout=TIMEOUT,
    )
    return client.call(v.ELECT_LEADERS, version, request)


@pytest.mark.parametrize(("version", "election"), [(0, 0), (1, 0), (1, 1), (2, 0), (2, 1)])
def test_elect_leaders(client: WireClient, version: int, election: int) -> None:
    topic = f"elected-{version}-{election}"
    create_topic(client, topic, partitions=2)
    response = elect(client, {topic: [0, 1, 5], "no-such-topic": [0]}, election, version)
    if version >= 1:
        assert response.error_code == ErrorCode.none
    outcomes = {
        (r.topic, p.partition_id): p.error_code
        for r in response.replica_election_results
        for p in r.partition_result
    }
    assert outcomes == {
        (topic, 0): ErrorCode.election_not_needed,
        (topic, 1): ErrorCode.election_not_needed,
        (topic, 5): ErrorCode.unknown_topic_or_partition,
        ("no-such-topic", 0): ErrorCode.unknown_topic_or_partition,
    }
    # Electing every partition answers only the partitions whose leader changed: none.
    assert elect(client, None, election, version).replica_election_results == ()


def test_elect_leaders_of_an_unknown_type(client: WireClient) -> None:
    """Kafka cannot parse the type and answers its generic error for every partition."""
    create_topic(client, "typed")
    response = elect(client, {"typed": [0]}, 7, 2)
    assert response.error_code == ErrorCode.unknown_server_error
    (result,) = response.replica_election_results
    assert [p.error_code for p in result.partition_result] == [ErrorCode.unknown_server_error]


def alter_reassignments(
    client: WireClient, targets: dict[tuple[str, int], list[int] | None]
) -> dict[tuple[str, int], int]:
    cls = request_type(v.ALTER_PARTITION_REASSIGNMENTS, 0)
    topic_cls = nested(cls, "ReassignableTopic")
    partition_cls = nested(cls, "ReassignablePartition")
    topics: dict[str, list[Any]] = {}
    for (topic, index), replicas in targets.items():
        topics.setdefault(topic, []).append(
            partition_cls(
                partition_index=index, replicas=None if replicas is None else tuple(replicas)
            )
        )
    request = cls(
        timeout=TIMEOUT,
        topics=tuple(topic_cls(name=t, partitions=tuple(p)) for t, p in topics.items()),
    )
    response = client.call(v.ALTER_PARTITION_REASSIGNMENTS, 0, request)
    assert response.error_code == ErrorCode.none
    return {
        (t.name, p.partition_index): p.error_code for t in response.responses for p in t.partitions
    }


def list_reassignments(client: WireClient, topics: dict[str, list[int]] | None) -> Any:
    cls = request_type(v.LIST_PARTITION_REASSIGNMENTS, 0)
    topic_cls = nested(cls, "ListPartitionReassignmentsTopics")
    request = cls(
        timeout=TIMEOUT,
        topics=None
        if topics is None
        else tuple(topic_cls(name=t, partition_indexes=tuple(p)) for t, p in topics.items()),
    )
    return client.call(v.LIST_PARTITION_REASSIGNMENTS, 0, request)


def test_partition_reassignments(client: WireClient) -> None:
    create_topic(client, "moved", partitions=2)
    outcomes = alter_reassignments(
        client,
        {
            ("moved", 0): [BROKER_ID],  # the replicas already: done at once
            ("moved", 1): [BROKER_ID, 3],  # broker 3 is not registered
            ("moved", 7): [BROKER_ID],
            ("no-such-topic", 0): [BROKER_ID],
        },
    )
    assert outcomes == {
        ("moved", 0): ErrorCode.none,
        ("moved", 1): ErrorCode.invalid_replica_assignment,
        ("moved", 7): ErrorCode.unknown_topic_or_partition,
        ("no-such-topic", 0): ErrorCode.unknown_topic_or_partition,
    }
    cancelled = alter_reassignments(client, {("moved", 0): None})
    assert cancelled == {("moved", 0): ErrorCode.no_reassignment_in_progress}
    # A topic that names no partition is answered, with none.
    cls = request_type(v.ALTER_PARTITION_REASSIGNMENTS, 0)
    empty = nested(cls, "ReassignableTopic")(name="moved", partitions=())
    request = cls(timeout=TIMEOUT, topics=(empty,))
    (answered,) = client.call(v.ALTER_PARTITION_REASSIGNMENTS, 0, request).responses
    assert answered.name == "moved" and answered.partitions == ()
    for topics in (None, {"moved": [0, 1]}, {"no-such-topic": [0]}):
        listed = list_reassignments(client, topics)
        assert listed.error_code == ErrorCode.none and listed.topics == ()
    assert partition_count(client, "moved") == 2


def test_excessive_partition_counts_are_refused_before_anything_is_built(
    broker: BrokerProcess, client: WireClient
) -> None:
    """More than 10,000 new partitions in one request: POLICY_VIOLATION for each topic, as
    Kafka's controller answers, before any partition exists in memory (a count of 2^31-1
    once took the broker to 23 GB and the OOM killer)."""
    huge = 2**31 - 1
    assert create_topic(client, "huge", partitions=huge).error_code == ErrorCode.policy_violation
    assert create_topic(client, "huge", partitions=10_001).error_code == ErrorCode.policy_violation
    assert create_topic(client, "grows").error_code == ErrorCode.none
    result = create_partitions(client, ("grows", huge, None))["grows"]
    assert result.error_code == ErrorCode.policy_violation
    assert result.error_message == "Excessively large number of partitions per request."
    assert partition_count(client, "grows") == 1
    status = Path(f"/proc/{broker.pid}/status").read_text()
    peak_kib = next(int(x.split()[1]) for x in status.splitlines() if x.startswith("VmHWM"))
    assert peak_kib < 300 * 1024
