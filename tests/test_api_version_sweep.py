"""Every API Gregor advertises to clients, at every version it advertises, over raw frames.

This is the issue's check of "the Java client against every version Gregor advertises for
the APIs it uses": the Java client 4.3 negotiates the highest version both sides serve, so
it only ever sends the top of each range; older Java clients (2.x, 3.x), librdkafka, kcat,
kafka-python and aiokafka send the lower ones. Between them the Java client 4.3 uses:
Produce, Fetch, ListOffsets, Metadata, ApiVersions, OffsetForLeaderEpoch (producer and
consumer); FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
OffsetFetch (classic consumer groups, as Gregor advertises no ConsumerGroupHeartbeat);
InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit
(transactions); and in its Admin client CreateTopics, DeleteTopics, CreatePartitions,
DeleteRecords, DescribeConfigs, AlterConfigs, IncrementalAlterConfigs, ListConfigResources,
DescribeLogDirs, AlterReplicaLogDirs, ElectLeaders, AlterPartitionReassignments,
ListPartitionReassignments, DescribeGroups, ListGroups, DeleteGroups, OffsetDelete,
DescribeClientQuotas, AlterClientQuotas, DescribeUserScramCredentials,
AlterUserScramCredentials, DescribeAcls, CreateAcls, DeleteAcls,
DescribeCluster, DescribeProducers, DescribeTransactions, ListTransactions and
DescribeTopicPartitions: every client API Gregor advertises.

The ranges come from ``gregor.wire.versions`` (``advertised()`` where it exists, else
``SUPPORTED``), and ``test_api_versions_answer_is_the_table`` checks that the broker's
ApiVersions answer is that table. Each (API, version) is its own test: a minimal valid
request built from kio's entity for that version (``fill`` sets the fields the version
has), its response decoded with kio, and what it says checked (no UNSUPPORTED_VERSION, the
error codes a minimal request gets from Kafka, the data it must show). An advertised API
without a request here fails, so a new one cannot slip in untested.

Produce v0-v2 are advertised (Kafka 4 does so for librdkafka's sake, KAFKA-18659) but
refused, as Kafka 4 refuses them (KIP-896): the broker closes the connection.

Skipped: the ZooKeeper-mode inter-broker APIs only brokers send (LeaderAndIsr 4,
StopReplica 5, UpdateMetadata 6, ControlledShutdown 7, WriteTxnMarkers 27, AlterPartition
56); their own tests cover them.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
import struct
import time
import typing
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from compat_tests.broker import BrokerProcess
from compat_tests.process_pool import ProcessPool
from gregor.apis.context import nested
from gregor.wire import versions as v
from gregor.wire.records import build_batch
from gregor.wire.schema import request_type
from tests.kafka_wire import WireClient, create_topic, request_frame
from tests.test_share_group_offsets import alter_offsets, describe_offsets

INTER_BROKER = {
    v.LEADER_AND_ISR: "LeaderAndIsr",
    v.STOP_REPLICA: "StopReplica",
    v.UPDATE_METADATA: "UpdateMetadata",
    v.CONTROLLED_SHUTDOWN: "ControlledShutdown",
    v.WRITE_TXN_MARKERS: "WriteTxnMarkers",
    v.ALTER_PARTITION: "AlterPartition",
}
# Produce below this is advertised but refused (KIP-896).
PRODUCE_SERVED_FROM = 3
TOPIC = "sweep"
RECORDS = 3
COMMITTED_GROUP = "sweep-committed"
COMMITTED_OFFSET = 2
TRANSACTION_TIMEOUT = datetime.timedelta(seconds=60)
TIMEOUT = datetime.timedelta(seconds=30)
NONE = ErrorCode.none
SECURITY_DISABLED = ErrorCode.security_disabled


def advertised_table() -> dict[int, tuple[int, int]]:
    table = getattr(v, "advertised", None)
    return dict(table()) if table is not None else dict(v.SUPPORTED)


def api_name(api_key: int) -> str:
    names = {
        value: name
        for name, value in vars(v).items()
        if name.isupper() and isinstance(value, int) and not isinstance(value, bool)
    }
    name = names.get(api_key, f"API{api_key}")
    return "".join(part.title() for part in name.split("_"))


def cases() -> Iterator[Any]:
    for api_key, (low, high) in sorted(advertised_table().items()):
        if api_key in INTER_BROKER:
            continue
        for version in range(low, high + 1):
            yield pytest.param(api_key, version, id=f"{api_name(api_key)}-v{version}")


# ---- building requests ------------------------------------------------------------------


def _blank(f: dataclasses.Field) -> Any:
    """A zero value for a required field nobody set."""
    kind = f.metadata.get("kafka_type")
    args = typing.get_args(f.type)
    optional = type(None) in args
    origin = typing.get_origin(f.type)
    if origin is tuple or any(typing.get_origin(a) is tuple for a in args):
        return ()
    if kind is None:  # a nested entity
        entity = next((a for a in (f.type, *args) if dataclasses.is_dataclass(a)), None)
        return None if optional or entity is None else fill(entity)
    if optional:
        return None
    if kind == "bool":
        return False
    if kind == "bytes":
        return b""
    if kind == "string":
        return ""
    if kind == "uuid":
        return uuid.UUID(int=0)
    if kind.startswith("timedelta"):
        return datetime.timedelta(0)
    if kind == "float64":
        return f.type(0.0)
    if kind == "records":
        return None
    return f.type(0)


def fill(cls: type, **values: Any) -> Any:
    """An entity of ``cls`` with ``values`` for the fields this version has (others are
    dropped, as ``gregor.apis.context.build`` does) and a zero value for any other field that has
    no default."""
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in values:
            kwargs[f.name] = values[f.name]
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            kwargs[f.name] = _blank(f)
    return cls(**kwargs)


def has(cls: type, name: str) -> bool:
    return name in {f.name for f in dataclasses.fields(cls)}


class Case:
    """One (API, version) request context: the module's broker, a connection, and the
    topic and group state the module set up."""

    def __init__(self, state: State, client: WireClient, api_key: int, version: int) -> None:
        self.state, self.client, self.api_key, self.version = state, client, api_key, version

    @property
    def cls(self) -> type:
        """kio's request entity for this version (there is none for Produce v0-v2)."""
        return request_type(self.api_key, self.version)

    def n(self, name: str) -> type:
        """The nested entity ``name`` of this request version."""
        return nested(self.cls, name)

    def call(self, **values: Any) -> Any:
        return self.client.call(self.api_key, self.version, fill(self.cls, **values))

    def other(self, api_key: int, version: int, **values: Any) -> Any:
        """Another API's request, at a fixed version, on the same connection."""
        return self.client.call(api_key, version, fill(request_type(api_key, version), **values))

    def fresh(self, prefix: str) -> str:
        return f"{prefix}-{self.api_key}-{self.version}-{uuid.uuid4().hex[:6]}"


@dataclasses.dataclass
class State:
    broker: BrokerProcess
    topic_id: uuid.UUID
    log_dir: Path


# ---- the module's broker and its state --------------------------------------------------


@pytest.fixture(scope="module")
def broker(process_pool: ProcessPool) -> BrokerProcess:
    return process_pool.broker(
        {
            "group.initial.rebalance.delay.ms": "0",
            "offsets.topic.num.partitions": "3",
            "transaction.state.log.num.partitions": "3",
            "share.coordinator.state.topic.num.partitions": "3",
            "group.share.enable": "true",
        }
    )


def batch(count: int = 1, **options: Any) -> bytes:
    now = int(time.time() * 1000)
    return build_batch([(b"k%d" % i, b"v%d" % i, (), now) for i in range(count)], **options)


def produce_v9(client: WireClient, topic: str, records: bytes, **values: Any) -> Any:
    cls = request_type(v.PRODUCE, 9)
    data = nested(cls, "PartitionProduceData")(index=0, records=records)
    request = fill(
        cls,
        transactional_id=None,
        acks=-1,
        timeout=TIMEOUT,
        topic_data=(nested(cls, "TopicProduceData")(name=topic, partition_data=(data,)),),
        **values,
    )
    return client.call(v.PRODUCE, 9, request).responses[0].partition_responses[0]


@pytest.fixture(scope="module")
def state(broker: BrokerProcess) -> State:
    client = WireClient(broker.port, timeout=30)
    try:
        assert create_topic(client, TOPIC).error_code == NONE
        answer = produce_v9(client, TOPIC, batch(RECORDS))
        assert (answer.error_code, answer.base_offset) == (NONE, 0)
        meta = client.call(
            v.METADATA,
            12,
            fill(
                request_type(v.METADATA, 12),
                topics=(
                    fill(nested(request_type(v.METADATA, 12), "MetadataRequestTopic"), name=TOPIC),
                ),
            ),
        )
        (topic,) = meta.topics
        # The offsets topic, and a group with a committed offset.
        found = client.call(
            v.FIND_COORDINATOR, 0, fill(request_type(v.FIND_COORDINATOR, 0), key=COMMITTED_GROUP)
        )
        assert found.error_code == NONE
        commit_cls = request_type(v.OFFSET_COMMIT, 8)
        partition = fill(
            nested(commit_cls, "OffsetCommitRequestPartition"),
            partition_index=0,
            committed_offset=COMMITTED_OFFSET,
            committed_leader_epoch=-1,
            committed_metadata="",
        )
        committed = client.call(
            v.OFFSET_COMMIT,
            8,
            fill(
                commit_cls,
                group_id=COMMITTED_GROUP,
                generation_id_or_member_epoch=-1,
                member_id="",
                group_instance_id=None,
                topics=(
                    fill(
                        nested(commit_cls, "OffsetCommitRequestTopic"),
                        name=TOPIC,
                        partitions=(partition,),
                    ),
                ),
            ),
        )
        assert committed.topics[0].partitions[0].error_code == NONE
        # The transaction coordinator: found (which creates its topic), then serving.
        found = client.call(
            v.FIND_COORDINATOR,
            1,
            fill(request_type(v.FIND_COORDINATOR, 1), key="sweep-txn", key_type=1),
        )
        assert found.error_code == NONE
        deadline = time.monotonic() + 30
        while True:
            init = client.call(
                v.INIT_PRODUCER_ID,
                4,
                fill(
                    request_type(v.INIT_PRODUCER_ID, 4),
                    transactional_id="sweep-txn",
                    transaction_timeout=TRANSACTION_TIMEOUT,
                    producer_id=-1,
                    producer_epoch=-1,
                ),
            )
            if init.error_code == NONE:
                break
            assert time.monotonic() < deadline, init
            time.sleep(0.05)
        return State(broker, topic.topic_id, broker.data_dir)
    finally:
        client.close()


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[WireClient]:
    c = WireClient(broker.port, timeout=30)
    yield c
    c.close()


# ---- one check per API ------------------------------------------------------------------


def produce(case: Case) -> None:
    if case.version < PRODUCE_SERVED_FROM:
        # No kio schema below v3: acks=1, timeout, one topic, partition 0, an empty
        # message set. Kafka 4 refuses these versions; so does Gregor, by closing.
        name = TOPIC.encode()
        body = struct.pack(">hii", 1, 1000, 1) + struct.pack(">h", len(name)) + name
        body += struct.pack(">iii", 1, 0, 0)
        client_id = f"sweep-produce-v{case.version}-{uuid.uuid4().hex[:6]}"
        case.client.send(request_frame(v.PRODUCE, case.version, 1, body, client_id))
        assert case.client.is_closed_by_peer()
        # Refused as a version it does not serve, not as a request it could not read.
        refused = [
            line
            for line in case.state.broker.log_path.read_text().splitlines()
            if client_id in line
        ]
        assert len(refused) == 1 and re.search(
            rf"unsupported.*\bkey 0\b.*\bversion {case.version}\b", refused[0], re.I
        ), refused
        return
    p = case.n("PartitionProduceData")(index=0, records=batch())
    t = fill(
        case.n("TopicProduceData"), name=TOPIC, topic_id=case.state.topic_id, partition_data=(p,)
    )
    r = case.call(transactional_id=None, acks=-1, timeout=TIMEOUT, topic_data=(t,))
    (topic,) = r.responses
    (answer,) = topic.partition_responses
    assert answer.error_code == NONE, answer
    assert answer.base_offset >= RECORDS
    if has(type(topic), "topic_id"):
        assert topic.topic_id == case.state.topic_id
    else:
        assert topic.name == TOPIC


def fetch(case: Case) -> None:
    p = fill(
        case.n("FetchPartition"),
        partition=0,
        current_leader_epoch=-1,
        fetch_offset=0,
        last_fetched_epoch=-1,
        log_start_offset=-1,
        partition_max_bytes=1 << 20,
    )
    t = fill(case.n("FetchTopic"), topic=TOPIC, topic_id=case.state.topic_id, partitions=(p,))
    values: dict[str, Any] = dict(
        replica_id=-1,
        max_wait=datetime.timedelta(0),
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(t,),
        forgotten_topics_data=(),
        rack_id="",
        cluster_id=None,
    )
    if has(case.cls, "replica_state"):
        values["replica_state"] = fill(case.n("ReplicaState"), replica_id=-1, replica_epoch=-1)
    r = case.call(**values)
    assert getattr(r, "error_code", NONE) == NONE
    (topic,) = r.responses
    (part,) = topic.partitions
    assert part.error_code == NONE, part
    assert part.high_watermark >= RECORDS
    # Whole batches from offset 0: the module's first batch, 3 records from offset 0.
    assert part.records and struct.unpack_from(">qi", part.records)[0] == 0


def list_offsets(case: Case) -> None:
    latest = fill(
        case.n("ListOffsetsPartition"), partition_index=0, current_leader_epoch=-1, timestamp=-1
    )
    earliest = fill(
        case.n("ListOffsetsPartition"), partition_index=0, current_leader_epoch=-1, timestamp=-2
    )
    for p, check in ((latest, lambda o: o >= RECORDS), (earliest, lambda o: o == 0)):
        t = fill(case.n("ListOffsetsTopic"), name=TOPIC, partitions=(p,))
        r = case.call(replica_id=-1, isolation_level=0, topics=(t,), timeout=TIMEOUT)
        (answer,) = r.topics[0].partitions
        assert answer.error_code == NONE, answer
        assert check(answer.offset), answer


def metadata(case: Case) -> None:
    t = fill(case.n("MetadataRequestTopic"), name=TOPIC, topic_id=None)
    r = case.call(
        topics=(t,), allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )
    assert getattr(r, "error_code", NONE) == NONE
    (topic,) = r.topics
    assert (topic.error_code, topic.name) == (NONE, TOPIC), topic
    assert [p.partition_index for p in topic.partitions] == [0]
    assert topic.partitions[0].leader_id == 0
    assert [b.node_id for b in r.brokers] == [0]
    if has(type(topic), "topic_id"):
        assert topic.topic_id == case.state.topic_id


def offset_commit(case: Case) -> None:
    group = case.fresh("commit")
    p = fill(
        case.n("OffsetCommitRequestPartition"),
        partition_index=0,
        committed_offset=1,
        committed_leader_epoch=-1,
        commit_timestamp=-1,
        committed_metadata="m",
    )
    t = fill(case.n("OffsetCommitRequestTopic"), name=TOPIC, partitions=(p,))
    r = case.call(
        group_id=group,
        generation_id=-1,
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        retention_time=datetime.timedelta(milliseconds=-1),
        topics=(t,),
    )
    assert r.topics[0].partitions[0].error_code == NONE, r
    assert offset_fetch_v9(case, group) == 1


def offset_fetch_v9(case: Case, group: str) -> int:
    cls = request_type(v.OFFSET_FETCH, 9)
    topics = (fill(nested(cls, "OffsetFetchRequestTopics"), name=TOPIC, partition_indexes=(0,)),)
    g = fill(
        nested(cls, "OffsetFetchRequestGroup"),
        group_id=group,
        member_id=None,
        member_epoch=-1,
        topics=topics,
    )
    r = case.other(v.OFFSET_FETCH, 9, groups=(g,), require_stable=False)
    return r.groups[0].topics[0].partitions[0].committed_offset


def offset_fetch(case: Case) -> None:
    if has(case.cls, "groups"):
        topics = (fill(case.n("OffsetFetchRequestTopics"), name=TOPIC, partition_indexes=(0,)),)
        g = fill(
            case.n("OffsetFetchRequestGroup"),
            group_id=COMMITTED_GROUP,
            member_id=None,
            member_epoch=-1,
            topics=topics,
        )
        r = case.call(groups=(g,), require_stable=False)
        (group,) = r.groups
        assert group.error_code == NONE
        partitions = group.topics[0].partitions
    else:
        t = fill(case.n("OffsetFetchRequestTopic"), name=TOPIC, partition_indexes=(0,))
        r = case.call(group_id=COMMITTED_GROUP, topics=(t,), require_stable=False)
        assert getattr(r, "error_code", NONE) == NONE
        partitions = r.topics[0].partitions
    (p,) = partitions
    assert (p.error_code, p.committed_offset) == (NONE, COMMITTED_OFFSET), p


def find_coordinator(case: Case) -> None:
    if has(case.cls, "coordinator_keys"):
        r = case.call(key_type=0, coordinator_keys=(COMMITTED_GROUP, "another"))
        assert [(c.key, c.error_code, c.node_id) for c in r.coordinators] == [
            (COMMITTED_GROUP, NONE, 0),
            ("another", NONE, 0),
        ]
        return
    r = case.call(key=COMMITTED_GROUP, key_type=0)
    assert (r.error_code, r.node_id, r.port) == (NONE, 0, case.state.broker.port)


JOIN_VERSION, SYNC_VERSION = 5, 3


def join(case: Case, version: int, group: str) -> Any:
    """Join ``group`` as its only member at JoinGroup ``version``; the response that makes
    it a member (v4+ first answer MEMBER_ID_REQUIRED with the member id to use)."""
    cls = request_type(v.JOIN_GROUP, version)
    protocol = nested(cls, "JoinGroupRequestProtocol")(name="range", metadata=b"\x00\x00")

    def send(member: str) -> Any:
        return case.client.call(
            v.JOIN_GROUP,
            version,
            fill(
                cls,
                group_id=group,
                session_timeout=datetime.timedelta(seconds=10),
                rebalance_timeout=datetime.timedelta(seconds=10),
                member_id=member,
                group_instance_id=None,
                protocol_type="consumer",
                protocols=(protocol,),
                reason=None,
            ),
        )

    r = send("")
    if r.error_code == ErrorCode.member_id_required:
        assert version >= 4
        r = send(r.member_id)
    return r


def sync(case: Case, version: int, group: str, joined: Any) -> Any:
    cls = request_type(v.SYNC_GROUP, version)
    assignment = nested(cls, "SyncGroupRequestAssignment")(
        member_id=joined.member_id, assignment=b"\x00\x01"
    )
    return case.client.call(
        v.SYNC_GROUP,
        version,
        fill(
            cls,
            group_id=group,
            generation_id=joined.generation_id,
            member_id=joined.member_id,
            group_instance_id=None,
            protocol_type="consumer",
            protocol_name="range",
            assignments=(assignment,),
        ),
    )


def member(case: Case) -> tuple[str, Any]:
    """A fresh group with one member that joined and synced (JoinGroup v5, SyncGroup v3)."""
    group = case.fresh("group")
    joined = join(case, JOIN_VERSION, group)
    assert joined.error_code == NONE, joined
    assert sync(case, SYNC_VERSION, group, joined).error_code == NONE
    return group, joined


def join_group(case: Case) -> None:
    group = case.fresh("join")
    r = join(case, case.version, group)
    assert r.error_code == NONE, r
    assert r.generation_id >= 1 and r.member_id and r.leader == r.member_id
    assert [m.member_id for m in r.members] == [r.member_id]
    if has(type(r), "protocol_name"):
        assert r.protocol_name == "range"


def sync_group(case: Case) -> None:
    group = case.fresh("sync")
    joined = join(case, JOIN_VERSION, group)
    r = sync(case, case.version, group, joined)
    assert r.error_code == NONE, r
    assert r.assignment == b"\x00\x01"


def heartbeat(case: Case) -> None:
    group, joined = member(case)
    r = case.call(
        group_id=group,
        generation_id=joined.generation_id,
        member_id=joined.member_id,
        group_instance_id=None,
    )
    assert r.error_code == NONE, r


def leave_group(case: Case) -> None:
    group, joined = member(case)
    if has(case.cls, "members"):
        who = fill(
            case.n("MemberIdentity"),
            member_id=joined.member_id,
            group_instance_id=None,
            reason=None,
        )
        r = case.call(group_id=group, members=(who,))
        assert [(m.member_id, m.error_code) for m in r.members] == [(joined.member_id, NONE)]
    else:
        r = case.call(group_id=group, member_id=joined.member_id)
    assert r.error_code == NONE, r


def describe_groups(case: Case) -> None:
    group, joined = member(case)
    r = case.call(groups=(group,), include_authorized_operations=False)
    (described,) = r.groups
    assert (described.error_code, described.group_id) == (NONE, group), described
    assert described.group_state == "Stable"
    assert [m.member_id for m in described.members] == [joined.member_id]


def list_groups(case: Case) -> None:
    group, _ = member(case)
    r = case.call(states_filter=(), types_filter=())
    assert r.error_code == NONE
    listed = {g.group_id for g in r.groups}
    assert {group, COMMITTED_GROUP} <= listed, listed


def api_versions(case: Case) -> None:
    r = case.call(client_software_name="sweep", client_software_version="1.0")
    assert r.error_code == NONE
    answered = {a.api_key: (a.min_version, a.max_version) for a in r.api_keys}
    assert answered == advertised_table()


def create_topics(case: Case) -> None:
    name = case.fresh("created")
    answer = create_topic(case.client, name, 2, {"retention.ms": "3600000"}, version=case.version)
    assert (answer.name, answer.error_code) == (name, NONE), answer
    if has(type(answer), "num_partitions"):
        assert answer.num_partitions == 2


def delete_topics(case: Case) -> None:
    name = case.fresh("deleted")
    assert create_topic(case.client, name).error_code == NONE
    r = case.call(
        topic_names=(name,),
        topics=(fill(case.n("DeleteTopicState"), name=name, topic_id=None),)
        if has(case.cls, "topics")
        else (),
        timeout=TIMEOUT,
    )
    assert [(t.name, t.error_code) for t in r.responses] == [(name, NONE)]


def delete_records(case: Case) -> None:
    name = case.fresh("records")
    assert create_topic(case.client, name).error_code == NONE
    assert produce_v9(case.client, name, batch(3)).error_code == NONE
    p = fill(case.n("DeleteRecordsPartition"), partition_index=0, offset=2)
    t = fill(case.n("DeleteRecordsTopic"), name=name, partitions=(p,))
    r = case.call(topics=(t,), timeout=TIMEOUT)
    (answer,) = r.topics[0].partitions
    assert (answer.error_code, answer.low_watermark) == (NONE, 2), answer


def init_producer_id(case: Case) -> None:
    for transactional_id in (None, case.fresh("txn")):
        r = case.call(
            transactional_id=transactional_id,
            transaction_timeout=TRANSACTION_TIMEOUT,
            producer_id=-1,
            producer_epoch=-1,
        )
        assert r.error_code == NONE, r
        assert r.producer_id >= 0 and r.producer_epoch >= 0


def offset_for_leader_epoch(case: Case) -> None:
    p = fill(
        case.n("OffsetForLeaderPartition"), partition=0, current_leader_epoch=-1, leader_epoch=0
    )
    t = fill(case.n("OffsetForLeaderTopic"), topic=TOPIC, partitions=(p,))
    r = case.call(replica_id=-1, topics=(t,))
    (answer,) = r.topics[0].partitions
    assert answer.error_code == NONE, answer
    assert answer.end_offset >= RECORDS


def transaction(case: Case) -> tuple[str, int, int]:
    """A transactional id with a producer id and epoch (InitProducerId v4)."""
    transactional_id = case.fresh("txn")
    r = case.other(
        v.INIT_PRODUCER_ID,
        4,
        transactional_id=transactional_id,
        transaction_timeout=TRANSACTION_TIMEOUT,
        producer_id=-1,
        producer_epoch=-1,
    )
    assert r.error_code == NONE, r
    return transactional_id, r.producer_id, r.producer_epoch


def add_partition_v3(case: Case, txn: tuple[str, int, int]) -> None:
    cls = request_type(v.ADD_PARTITIONS_TO_TXN, 3)
    r = case.other(
        v.ADD_PARTITIONS_TO_TXN,
        3,
        v3_and_below_transactional_id=txn[0],
        v3_and_below_producer_id=txn[1],
        v3_and_below_producer_epoch=txn[2],
        v3_and_below_topics=(nested(cls, "AddPartitionsToTxnTopic")(name=TOPIC, partitions=(0,)),),
    )
    assert r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == NONE


def add_partitions_to_txn(case: Case) -> None:
    txn = transaction(case)
    topic = case.n("AddPartitionsToTxnTopic")(name=TOPIC, partitions=(0,))
    if has(case.cls, "transactions"):
        # v4+: the batched form brokers send to verify (KIP-890); verify_only=False adds.
        entry = fill(
            case.n("AddPartitionsToTxnTransaction"),
            transactional_id=txn[0],
            producer_id=txn[1],
            producer_epoch=txn[2],
            verify_only=False,
            topics=(topic,),
        )
        r = case.call(transactions=(entry,))
        assert r.error_code == NONE, r
        (result,) = r.results_by_transaction
        partitions = result.topic_results[0].results_by_partition
    else:
        r = case.call(
            v3_and_below_transactional_id=txn[0],
            v3_and_below_producer_id=txn[1],
            v3_and_below_producer_epoch=txn[2],
            v3_and_below_topics=(topic,),
        )
        partitions = r.results_by_topic_v3_and_below[0].results_by_partition
    assert [(p.partition_index, p.partition_error_code) for p in partitions] == [(0, NONE)]


def add_offsets_to_txn(case: Case) -> None:
    txn = transaction(case)
    r = case.call(
        transactional_id=txn[0], producer_id=txn[1], producer_epoch=txn[2], group_id=COMMITTED_GROUP
    )
    assert r.error_code == NONE, r


def end_txn(case: Case) -> None:
    for committed in (True, False):
        txn = transaction(case)
        add_partition_v3(case, txn)
        r = case.call(
            transactional_id=txn[0], producer_id=txn[1], producer_epoch=txn[2], committed=committed
        )
        assert r.error_code == NONE, r


def txn_offset_commit(case: Case) -> None:
    txn = transaction(case)
    group = case.fresh("txn-group")
    added = case.other(
        v.ADD_OFFSETS_TO_TXN,
        3,
        transactional_id=txn[0],
        producer_id=txn[1],
        producer_epoch=txn[2],
        group_id=group,
    )
    assert added.error_code == NONE
    p = fill(
        case.n("TxnOffsetCommitRequestPartition"),
        partition_index=0,
        committed_offset=1,
        committed_leader_epoch=-1,
        committed_metadata="",
    )
    t = fill(case.n("TxnOffsetCommitRequestTopic"), name=TOPIC, partitions=(p,))
    r = case.call(
        transactional_id=txn[0],
        group_id=group,
        producer_id=txn[1],
        producer_epoch=txn[2],
        generation_id=-1,
        member_id="",
        group_instance_id=None,
        topics=(t,),
    )
    assert r.topics[0].partitions[0].error_code == NONE, r
    ended = case.other(
        v.END_TXN,
        3,
        transactional_id=txn[0],
        producer_id=txn[1],
        producer_epoch=txn[2],
        committed=True,
    )
    assert ended.error_code == NONE
    deadline = time.monotonic() + 10
    while offset_fetch_v9(case, group) != 1:  # visible once the commit marker is written
        assert time.monotonic() < deadline, "the transactional offset never became visible"
        time.sleep(0.05)


TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4


def describe_configs(case: Case) -> None:
    resources = (
        fill(
            case.n("DescribeConfigsResource"),
            resource_type=TOPIC_RESOURCE,
            resource_name=TOPIC,
            configuration_keys=None,
        ),
        fill(
            case.n("DescribeConfigsResource"),
            resource_type=BROKER_RESOURCE,
            resource_name="0",
            configuration_keys=("log.dirs",),
        ),
    )
    r = case.call(resources=resources, include_synonyms=False, include_documentation=False)
    topic, node = r.results
    assert (topic.error_code, topic.resource_name) == (NONE, TOPIC), topic
    assert "retention.ms" in {c.name for c in topic.configs}
    assert node.error_code == NONE, node
    assert [(c.name, c.value) for c in node.configs] == [("log.dirs", str(case.state.log_dir))]


def alter_configs(case: Case) -> None:
    name = case.fresh("altered")
    assert create_topic(case.client, name).error_code == NONE
    config = case.n("AlterableConfig")(name="retention.ms", value="7200000")
    resource = fill(
        case.n("AlterConfigsResource"),
        resource_type=TOPIC_RESOURCE,
        resource_name=name,
        configs=(config,),
    )
    r = case.call(resources=(resource,), validate_only=False)
    assert [(x.error_code, x.resource_name) for x in r.responses] == [(NONE, name)]
    assert topic_config(case, name, "retention.ms") == "7200000"


def topic_config(case: Case, topic: str, key: str) -> str | None:
    cls = request_type(v.DESCRIBE_CONFIGS, 4)
    resource = fill(
        nested(cls, "DescribeConfigsResource"),
        resource_type=TOPIC_RESOURCE,
        resource_name=topic,
        configuration_keys=(key,),
    )
    r = case.other(
        v.DESCRIBE_CONFIGS,
        4,
        resources=(resource,),
        include_synonyms=False,
        include_documentation=False,
    )
    (config,) = r.results[0].configs
    return config.value


def incremental_alter_configs(case: Case) -> None:
    name = case.fresh("incremental")
    assert create_topic(case.client, name).error_code == NONE
    config = fill(
        case.n("AlterableConfig"), name="retention.ms", config_operation=0, value="5400000"
    )
    resource = fill(
        case.n("AlterConfigsResource"),
        resource_type=TOPIC_RESOURCE,
        resource_name=name,
        configs=(config,),
    )
    r = case.call(resources=(resource,), validate_only=False)
    assert [(x.error_code, x.resource_name) for x in r.responses] == [(NONE, name)]
    assert topic_config(case, name, "retention.ms") == "5400000"


def alter_replica_log_dirs(case: Case) -> None:
    """Moving a replica to the log dir it is in is a no-op that succeeds (Kafka)."""
    t = fill(case.n("AlterReplicaLogDirTopic"), name=TOPIC, partitions=(0,))
    d = fill(case.n("AlterReplicaLogDir"), path=str(case.state.log_dir), topics=(t,))
    r = case.call(dirs=(d,))
    assert [
        (x.topic_name, [(p.partition_index, p.error_code) for p in x.partitions]) for x in r.results
    ] == [(TOPIC, [(0, NONE)])]


def describe_log_dirs(case: Case) -> None:
    t = fill(case.n("DescribableLogDirTopic"), topic=TOPIC, partitions=(0,))
    r = case.call(topics=(t,))
    assert getattr(r, "error_code", NONE) == NONE
    (result,) = r.results
    assert (result.error_code, result.log_dir) == (NONE, str(case.state.log_dir)), result
    (topic,) = result.topics
    assert topic.name == TOPIC and topic.partitions[0].partition_size > 0


def create_partitions(case: Case) -> None:
    name = case.fresh("grown")
    assert create_topic(case.client, name).error_code == NONE
    t = fill(case.n("CreatePartitionsTopic"), name=name, count=3, assignments=None)
    r = case.call(topics=(t,), timeout=TIMEOUT, validate_only=False)
    assert [(x.name, x.error_code) for x in r.results] == [(name, NONE)]


def commit_offset_one(case: Case, group: str) -> None:
    """Commit offset 1 of TOPIC's partition 0 for ``group`` (no members: a simple commit)."""
    cls = request_type(v.OFFSET_COMMIT, 8)
    p = fill(
        nested(cls, "OffsetCommitRequestPartition"),
        partition_index=0,
        committed_offset=1,
        committed_leader_epoch=-1,
        committed_metadata="",
    )
    t = fill(nested(cls, "OffsetCommitRequestTopic"), name=TOPIC, partitions=(p,))
    committed = case.other(
        v.OFFSET_COMMIT,
        8,
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        topics=(t,),
    )
    assert committed.topics[0].partitions[0].error_code == NONE


def delete_groups(case: Case) -> None:
    group = case.fresh("deleted-group")
    commit_offset_one(case, group)
    r = case.call(groups_names=(group,))
    assert [(x.group_id, x.error_code) for x in r.results] == [(group, NONE)]
    assert offset_fetch_v9(case, group) == -1


def elect_leaders(case: Case) -> None:
    """A preferred election where the preferred replica already leads: Kafka answers
    ELECTION_NOT_NEEDED for the partition (v0 has no election type: preferred)."""
    t = fill(case.n("TopicPartitions"), topic=TOPIC, partitions=(0,))
    r = case.call(election_type=0, topic_partitions=(t,), timeout=TIMEOUT)
    assert getattr(r, "error_code", NONE) == NONE
    (result,) = r.replica_election_results
    assert result.topic == TOPIC
    assert [(p.partition_id, p.error_code) for p in result.partition_result] == [
        (0, ErrorCode.election_not_needed)
    ]


def alter_partition_reassignments(case: Case) -> None:
    """Reassigning a partition to the replicas it has (here the one broker) is accepted."""
    p = fill(case.n("ReassignablePartition"), partition_index=0, replicas=(0,))
    t = fill(case.n("ReassignableTopic"), name=TOPIC, partitions=(p,))
    r = case.call(timeout=TIMEOUT, allow_replication_factor_change=True, topics=(t,))
    assert r.error_code == NONE, r
    assert [
        (x.name, [(p.partition_index, p.error_code) for p in x.partitions]) for x in r.responses
    ] == [(TOPIC, [(0, NONE)])]


def list_partition_reassignments(case: Case) -> None:
    t = fill(case.n("ListPartitionReassignmentsTopics"), name=TOPIC, partition_indexes=(0,))
    r = case.call(timeout=TIMEOUT, topics=(t,))
    assert r.error_code == NONE, r
    assert all(not topic.partitions for topic in r.topics)  # nothing is moving


def offset_delete(case: Case) -> None:
    group = case.fresh("offset-delete")
    commit_offset_one(case, group)
    dp = case.n("OffsetDeleteRequestPartition")(partition_index=0)
    dt = case.n("OffsetDeleteRequestTopic")(name=TOPIC, partitions=(dp,))
    r = case.call(group_id=group, topics=(dt,))
    assert r.error_code == NONE, r
    assert r.topics[0].partitions[0].error_code == NONE
    assert offset_fetch_v9(case, group) == -1


def describe_client_quotas(case: Case) -> None:
    component = fill(case.n("ComponentData"), entity_type="user", match_type=1, match=None)
    r = case.call(components=(component,), strict=False)
    assert r.error_code == NONE, r


def alter_client_quotas(case: Case) -> None:
    entity = case.n("EntityData")(entity_type="user", entity_name=case.fresh("user"))
    op = fill(case.n("OpData"), key="consumer_byte_rate", value=1048576.0, remove=False)
    entry = case.n("EntryData")(entity=(entity,), ops=(op,))
    r = case.call(entries=(entry,), validate_only=True)
    assert [e.error_code for e in r.entries] == [NONE], r


def describe_acls(case: Case) -> None:
    """The sweep's broker has no authorizer: Kafka's answer is SECURITY_DISABLED."""
    r = case.call(resource_type_filter=1, pattern_type_filter=1, operation=1, permission_type=1)
    assert (r.error_code, r.error_message) == (SECURITY_DISABLED, "No Authorizer is configured.")


def create_acls(case: Case) -> None:
    creation = fill(
        case.n("AclCreation"),
        resource_type=2,
        resource_name="t",
        resource_pattern_type=3,
        principal="User:a",
        host="*",
        operation=3,
        permission_type=3,
    )
    r = case.call(creations=(creation,))
    assert [c.error_code for c in r.results] == [SECURITY_DISABLED], r


def delete_acls(case: Case) -> None:
    flt = fill(
        case.n("DeleteAclsFilter"),
        resource_type_filter=1,
        pattern_type_filter=1,
        operation=1,
        permission_type=1,
    )
    r = case.call(filters=(flt,))
    assert [f.error_code for f in r.filter_results] == [SECURITY_DISABLED], r


def sasl_handshake(case: Case) -> None:
    """On the sweep's PLAINTEXT listener no SASL exchange is due: ILLEGAL_SASL_STATE."""
    r = case.call(mechanism="PLAIN")
    assert (r.error_code, tuple(r.mechanisms)) == (ErrorCode.illegal_sasl_state, ()), r


def sasl_authenticate(case: Case) -> None:
    r = case.call(auth_bytes=b"\0user\0password")
    assert r.error_code == ErrorCode.illegal_sasl_state, r


def alter_user_scram_credentials(case: Case) -> None:
    user = case.fresh("scram")
    upsertion = fill(
        case.n("ScramCredentialUpsertion"),
        name=user,
        mechanism=1,
        iterations=4096,
        salt=b"salt",
        salted_password=b"p" * 32,
    )
    r = case.call(deletions=(), upsertions=(upsertion,))
    assert [(u.user, u.error_code) for u in r.results] == [(user, NONE)], r


def describe_user_scram_credentials(case: Case) -> None:
    r = case.call(users=(fill(case.n("UserName"), name="nobody"),))
    assert [(u.user, u.error_code) for u in r.results] == [
        ("nobody", ErrorCode.resource_not_found)
    ], r


def describe_cluster(case: Case) -> None:
    r = case.call(
        include_cluster_authorized_operations=False, endpoint_type=1, include_fenced_brokers=False
    )
    assert r.error_code == NONE, r
    assert [(b.broker_id, b.port) for b in r.brokers] == [(0, case.state.broker.port)]
    assert r.controller_id == 0 and r.cluster_id


def describe_producers(case: Case) -> None:
    t = case.n("TopicRequest")(name=TOPIC, partition_indexes=(0,))
    r = case.call(topics=(t,))
    (p,) = r.topics[0].partitions
    assert (p.partition_index, p.error_code) == (0, NONE), p


def describe_transactions(case: Case) -> None:
    # Ongoing: an Empty one has no start time, which Kafka sends as -1 and kio's decoder of
    # the response's timestamp refuses.
    txn = transaction(case)
    add_partition_v3(case, txn)
    r = case.call(transactional_ids=(txn[0],))
    (described,) = r.transaction_states
    assert (described.error_code, described.transactional_id) == (NONE, txn[0]), described
    assert (described.transaction_state, described.producer_id) == ("Ongoing", txn[1])
    assert [(t.topic, t.partitions) for t in described.topics] == [(TOPIC, (0,))]


def list_transactions(case: Case) -> None:
    txn = transaction(case)
    r = case.call(
        state_filters=(), producer_id_filters=(), duration_filter=-1, transactional_id_pattern=None
    )
    assert r.error_code == NONE, r
    assert txn[0] in {t.transactional_id for t in r.transaction_states}


def list_config_resources(case: Case) -> None:
    """v0 (ListClientMetricsResources before KIP-1142) lists client-metrics resources,
    which Gregor has none of; v1 lists the resources of the types asked for."""
    r = case.call(resource_types=(TOPIC_RESOURCE,))
    assert r.error_code == NONE, r
    if case.version >= 1:
        assert (TOPIC, TOPIC_RESOURCE) in {
            (c.resource_name, c.resource_type) for c in r.config_resources
        }


def describe_topic_partitions(case: Case) -> None:
    t = case.n("TopicRequest")(name=TOPIC)
    r = case.call(topics=(t,), response_partition_limit=2000, cursor=None)
    (topic,) = r.topics
    assert (topic.error_code, topic.name, topic.topic_id) == (NONE, TOPIC, case.state.topic_id)
    assert [p.partition_index for p in topic.partitions] == [0]


def consumer_join(case: Case, version: int, group: str) -> Any:
    """Join ``group`` (consumer protocol) as its only member, subscribed to TOPIC."""
    return case.client.call(
        v.CONSUMER_GROUP_HEARTBEAT,
        version,
        fill(
            request_type(v.CONSUMER_GROUP_HEARTBEAT, version),
            group_id=group,
            member_id=str(uuid.uuid4()),
            member_epoch=0,
            rebalance_timeout=datetime.timedelta(seconds=10),
            subscribed_topic_names=(TOPIC,),
            topic_partitions=(),
        ),
    )


def consumer_group_heartbeat(case: Case) -> None:
    r = consumer_join(case, case.version, case.fresh("cg"))
    assert (r.error_code, r.member_epoch) == (NONE, 1), r
    assert r.assignment is not None
    assert [(t.topic_id, t.partitions) for t in r.assignment.topic_partitions] == [
        (case.state.topic_id, (0,))
    ]


def consumer_group_describe(case: Case) -> None:
    group = case.fresh("cg")
    joined = consumer_join(case, 1, group)
    (described,) = case.call(group_ids=(group,), include_authorized_operations=False).groups
    assert (described.error_code, described.group_state, described.group_epoch) == (
        NONE,
        "Stable",
        1,
    )
    (member,) = described.members
    assert member.member_id == joined.member_id
    assert getattr(member, "member_type", 1) == 1


def share_join(case: Case, group: str) -> Any:
    """Join share group ``group`` as its only member, subscribed to TOPIC."""
    return case.other(
        v.SHARE_GROUP_HEARTBEAT,
        1,
        group_id=group,
        member_id=str(uuid.uuid4()),
        member_epoch=0,
        subscribed_topic_names=(TOPIC,),
    )


def share_group_heartbeat(case: Case) -> None:
    r = share_join(case, case.fresh("sg"))
    assert (r.error_code, r.member_epoch) == (NONE, 1), r
    assert r.assignment is not None
    assert [(t.topic_id, t.partitions) for t in r.assignment.topic_partitions] == [
        (case.state.topic_id, (0,))
    ]


def share_group_describe(case: Case) -> None:
    group = case.fresh("sg")
    joined = share_join(case, group)
    (described,) = case.call(group_ids=(group,), include_authorized_operations=False).groups
    assert (described.error_code, described.group_state, described.assignor_name) == (
        NONE,
        "Stable",
        "simple",
    )
    assert [m.member_id for m in described.members] == [joined.member_id]


def share_fetch(case: Case) -> None:
    # Without a share session: refused.
    answer = case.call(
        group_id=case.fresh("sg"), member_id=str(uuid.uuid4()), share_session_epoch=4
    )
    assert answer.error_code == ErrorCode.share_session_not_found
    assert answer.responses == ()


def share_acknowledge(case: Case) -> None:
    answer = case.call(
        group_id=case.fresh("sg"), member_id=str(uuid.uuid4()), share_session_epoch=0
    )
    assert answer.error_code == ErrorCode.invalid_share_session_epoch


# The topics entity of each share-group-state request (83-87, v0 only).
_STATE_TOPICS = {
    v.INITIALIZE_SHARE_GROUP_STATE: "InitializeStateData",
    v.READ_SHARE_GROUP_STATE: "ReadStateData",
    v.WRITE_SHARE_GROUP_STATE: "WriteStateData",
    v.DELETE_SHARE_GROUP_STATE: "DeleteStateData",
    v.READ_SHARE_GROUP_STATE_SUMMARY: "ReadStateSummaryData",
}


def share_state(case: Case, api_key: int, group: str, **partition: Any) -> Any:
    """A share-group-state request for partition 0 of TOPIC: its one partition result."""
    cls = request_type(api_key, 0)
    topic = fill(
        nested(cls, _STATE_TOPICS[api_key]),
        topic_id=case.state.topic_id,
        partitions=(fill(nested(cls, "PartitionData"), partition=0, **partition),),
    )
    (result,) = case.client.call(api_key, 0, fill(cls, group_id=group, topics=(topic,))).results
    (answer,) = result.partitions
    return answer


def initialize_share_group_state(case: Case) -> None:
    group = case.fresh("ss")
    answer = share_state(case, v.INITIALIZE_SHARE_GROUP_STATE, group, state_epoch=1, start_offset=2)
    assert answer.error_code == NONE
    read = share_state(case, v.READ_SHARE_GROUP_STATE, group, leader_epoch=0)
    assert (read.error_code, read.state_epoch, read.start_offset) == (NONE, 1, 2)


def read_share_group_state(case: Case) -> None:
    # Never initialized nor written: no state, as Kafka answers it.
    read = share_state(case, v.READ_SHARE_GROUP_STATE, case.fresh("ss"), leader_epoch=0)
    assert (read.error_code, read.start_offset, read.state_batches) == (NONE, -1, ())


def write_share_group_state(case: Case) -> None:
    group = case.fresh("ss")
    batch_cls = nested(case.cls, "StateBatch")
    batches = (batch_cls(first_offset=3, last_offset=4, delivery_state=2, delivery_count=1),)
    answer = share_state(
        case,
        v.WRITE_SHARE_GROUP_STATE,
        group,
        state_epoch=0,
        leader_epoch=0,
        start_offset=3,
        state_batches=batches,
    )
    assert answer.error_code == NONE
    read = share_state(case, v.READ_SHARE_GROUP_STATE, group, leader_epoch=0)
    assert (read.start_offset, [(b.first_offset, b.last_offset) for b in read.state_batches]) == (
        3,
        [(3, 4)],
    )


def delete_share_group_state(case: Case) -> None:
    group = case.fresh("ss")
    share_state(case, v.INITIALIZE_SHARE_GROUP_STATE, group, state_epoch=1, start_offset=2)
    assert share_state(case, v.DELETE_SHARE_GROUP_STATE, group).error_code == NONE
    read = share_state(case, v.READ_SHARE_GROUP_STATE, group, leader_epoch=0)
    assert read.start_offset == -1


def read_share_group_state_summary(case: Case) -> None:
    group = case.fresh("ss")
    share_state(case, v.INITIALIZE_SHARE_GROUP_STATE, group, state_epoch=4, start_offset=1)
    summary = share_state(case, v.READ_SHARE_GROUP_STATE_SUMMARY, group, leader_epoch=0)
    assert (summary.error_code, summary.state_epoch, summary.start_offset) == (NONE, 4, 1)


def empty_share_group(case: Case) -> str:
    """A share group that had a member subscribed to TOPIC, which left: Empty."""
    group = case.fresh("sg")
    joined = share_join(case, group)
    left = case.other(
        v.SHARE_GROUP_HEARTBEAT,
        1,
        group_id=group,
        member_id=joined.member_id,
        member_epoch=-1,
        subscribed_topic_names=None,
    )
    assert left.error_code == NONE, left
    return group


def describe_share_group_offsets(case: Case) -> None:
    group = empty_share_group(case)
    assert alter_offsets(case.client, group, TOPIC, {0: 0}).error_code == NONE
    for partitions in ((0,), None):  # TOPIC's partition 0, then every topic
        described = describe_offsets(case.client, group, TOPIC, partitions)
        assert described.error_code == NONE, described
        (topic,) = described.topics
        assert (topic.topic_name, topic.topic_id) == (TOPIC, case.state.topic_id)
        assert [(p.partition_index, p.start_offset) for p in topic.partitions] == [(0, 0)]
    unknown = describe_offsets(case.client, case.fresh("sg"), TOPIC, None)
    assert unknown.error_code == ErrorCode.group_id_not_found


def start_offset(case: Case, group: str) -> int:
    (topic,) = describe_offsets(case.client, group, TOPIC, (0,)).topics
    offset: int = topic.partitions[0].start_offset
    return offset


def alter_share_group_offsets(case: Case) -> None:
    group = case.fresh("sg")
    share_join(case, group)
    busy = alter_offsets(case.client, group, TOPIC, {0: 0})
    assert busy.error_code == ErrorCode.non_empty_group
    group = empty_share_group(case)
    r = alter_offsets(case.client, group, TOPIC, {0: 1, 7: 0})
    assert r.error_code == NONE, r
    (topic,) = r.responses
    assert [(p.partition_index, p.error_code) for p in topic.partitions] == [
        (0, NONE),
        (7, ErrorCode.unknown_topic_or_partition),
    ]
    assert start_offset(case, group) == 1


def delete_share_group_offsets(case: Case) -> None:
    group = empty_share_group(case)
    assert alter_offsets(case.client, group, TOPIC, {0: 0}).error_code == NONE
    topic_cls = case.n("DeleteShareGroupOffsetsRequestTopic")
    r = case.call(group_id=group, topics=(topic_cls(topic_name=TOPIC),))
    assert r.error_code == NONE, r
    assert [(t.topic_name, t.error_code) for t in r.responses] == [(TOPIC, NONE)]
    assert start_offset(case, group) == -1


CHECKS: dict[int, Callable[[Case], None]] = {
    v.PRODUCE: produce,
    v.FETCH: fetch,
    v.LIST_OFFSETS: list_offsets,
    v.METADATA: metadata,
    v.OFFSET_COMMIT: offset_commit,
    v.OFFSET_FETCH: offset_fetch,
    v.FIND_COORDINATOR: find_coordinator,
    v.JOIN_GROUP: join_group,
    v.HEARTBEAT: heartbeat,
    v.LEAVE_GROUP: leave_group,
    v.SYNC_GROUP: sync_group,
    v.DESCRIBE_GROUPS: describe_groups,
    v.LIST_GROUPS: list_groups,
    v.API_VERSIONS: api_versions,
    v.CREATE_TOPICS: create_topics,
    v.DELETE_TOPICS: delete_topics,
    v.DELETE_RECORDS: delete_records,
    v.INIT_PRODUCER_ID: init_producer_id,
    v.OFFSET_FOR_LEADER_EPOCH: offset_for_leader_epoch,
    v.ADD_PARTITIONS_TO_TXN: add_partitions_to_txn,
    v.ADD_OFFSETS_TO_TXN: add_offsets_to_txn,
    v.END_TXN: end_txn,
    v.TXN_OFFSET_COMMIT: txn_offset_commit,
    v.DESCRIBE_CONFIGS: describe_configs,
    v.ALTER_CONFIGS: alter_configs,
    v.ALTER_REPLICA_LOG_DIRS: alter_replica_log_dirs,
    v.DESCRIBE_LOG_DIRS: describe_log_dirs,
    v.CREATE_PARTITIONS: create_partitions,
    v.DELETE_GROUPS: delete_groups,
    v.ELECT_LEADERS: elect_leaders,
    v.INCREMENTAL_ALTER_CONFIGS: incremental_alter_configs,
    v.ALTER_PARTITION_REASSIGNMENTS: alter_partition_reassignments,
    v.LIST_PARTITION_REASSIGNMENTS: list_partition_reassignments,
    v.OFFSET_DELETE: offset_delete,
    v.DESCRIBE_CLIENT_QUOTAS: describe_client_quotas,
    v.ALTER_CLIENT_QUOTAS: alter_client_quotas,
    v.DESCRIBE_USER_SCRAM_CREDENTIALS: describe_user_scram_credentials,
    v.ALTER_USER_SCRAM_CREDENTIALS: alter_user_scram_credentials,
    v.SASL_HANDSHAKE: sasl_handshake,
    v.SASL_AUTHENTICATE: sasl_authenticate,
    v.DESCRIBE_ACLS: describe_acls,
    v.CREATE_ACLS: create_acls,
    v.DELETE_ACLS: delete_acls,
    v.DESCRIBE_CLUSTER: describe_cluster,
    v.DESCRIBE_PRODUCERS: describe_producers,
    v.DESCRIBE_TRANSACTIONS: describe_transactions,
    v.LIST_TRANSACTIONS: list_transactions,
    74: list_config_resources,  # ListConfigResources (v.LIST_CONFIG_RESOURCES once it exists)
    v.DESCRIBE_TOPIC_PARTITIONS: describe_topic_partitions,
    v.CONSUMER_GROUP_HEARTBEAT: consumer_group_heartbeat,
    v.CONSUMER_GROUP_DESCRIBE: consumer_group_describe,
    v.SHARE_GROUP_HEARTBEAT: share_group_heartbeat,
    v.SHARE_GROUP_DESCRIBE: share_group_describe,
    v.SHARE_FETCH: share_fetch,
    v.SHARE_ACKNOWLEDGE: share_acknowledge,
    v.DESCRIBE_SHARE_GROUP_OFFSETS: describe_share_group_offsets,
    v.ALTER_SHARE_GROUP_OFFSETS: alter_share_group_offsets,
    v.DELETE_SHARE_GROUP_OFFSETS: delete_share_group_offsets,
    v.INITIALIZE_SHARE_GROUP_STATE: initialize_share_group_state,
    v.READ_SHARE_GROUP_STATE: read_share_group_state,
    v.WRITE_SHARE_GROUP_STATE: write_share_group_state,
    v.DELETE_SHARE_GROUP_STATE: delete_share_group_state,
    v.READ_SHARE_GROUP_STATE_SUMMARY: read_share_group_state_summary,
}


@pytest.mark.parametrize(("api_key", "version"), list(cases()))
def test_api_version(state: State, client: WireClient, api_key: int, version: int) -> None:
    check = CHECKS.get(api_key)
    assert check is not None, (
        f"{api_name(api_key)} is advertised but this sweep has no request for it"
    )
    check(Case(state, client, api_key, version))


def test_api_versions_answer_is_the_table(client: WireClient) -> None:
    """The broker's own answer (ApiVersions v0, which every client can read) is the table
    the cases above were made from, and advertises Produce from v0 as Kafka 4 does."""
    r = client.call(v.API_VERSIONS, 0, fill(request_type(v.API_VERSIONS, 0)))
    answered = {a.api_key: (a.min_version, a.max_version) for a in r.api_keys}
    assert answered == advertised_table()
    assert answered[v.PRODUCE][0] == 0
