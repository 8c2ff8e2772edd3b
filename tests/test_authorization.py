"""What each API checks with an authorizer configured, against one real broker process: mutual
TLS gives the clients distinct principals (User:admin, a super user; User:alice; User:bob),
``allow.everyone.if.no.acl.found=false``. Each API is refused without its ACL, with Kafka's
error code and nothing changed, and allowed with it; Metadata filters and reports authorized
operations; DENY wins over ALLOW; PREFIXED ACLs apply; the inter-broker APIs need
CLUSTER_ACTION. Raw frames, for exact codes."""

from __future__ import annotations

import datetime
import ssl
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from compat_tests.broker import BrokerProcess
from gregor.apis.acl import CLUSTER_OPERATIONS, TOPIC_OPERATIONS
from gregor.apis.context import build, nested
from gregor.controller.acls.model import AclOperation as Op
from gregor.controller.acls.model import AclPermissionType as Perm
from gregor.controller.acls.model import PatternType as Pat
from gregor.controller.acls.model import ResourceType as Res
from gregor.controller.acls.model import operations_bitfield
from gregor.server.harness.certs import CertificateAuthority, broker_ssl_properties
from gregor.wire import interbroker as ib
from gregor.wire import versions as v
from gregor.wire.schema import request_type
from tests.kafka_wire import WireClient, create_topic
from tests.test_acl_apis import Acl, allow, create, delete, filter_fields
from tests.test_client_quotas import produce_request
from tests.test_share_group_membership import heartbeat as share_heartbeat
from tests.test_share_group_offsets import alter_offsets, delete_offsets, describe_offsets
from tests.test_tls_listeners import RULES, TlsWireClient, port_of, prefixed

TAF = ErrorCode.topic_authorization_failed
GAF = ErrorCode.group_authorization_failed
CAF = ErrorCode.cluster_authorization_failed
TXN_AF = ErrorCode.transactional_id_authorization_failed
ALICE = "User:alice"
TOPIC = "orders"  # created by the admin; alice gets ACLs on it test by test
DEADLINE_S = 30.0
NO_OPERATIONS = -(2**31)  # authorized operations not reported


class Clients:
    def __init__(self, port: int, contexts: dict[str, Any]) -> None:
        self.admin = TlsWireClient(port, contexts["admin"])
        self.alice = TlsWireClient(port, contexts["alice"])

    def close(self) -> None:
        self.admin.close()
        self.alice.close()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, Any]]:
    ca = CertificateAuthority(tmp_path_factory.mktemp("authz-ca"))
    server = ca.server("broker")
    identities = {
        name: ca.client(name, subject=f"CN={name},O=Gregor") for name in ("admin", "alice")
    }
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,MTLS://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,MTLS:SSL",
        "ssl.principal.mapping.rules": RULES,
        **prefixed("mtls", broker_ssl_properties(server, "PEM", "required")),
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin",
        "allow.everyone.if.no.acl.found": "false",
    }
    contexts = {}
    for name, identity in identities.items():
        context = ssl.create_default_context(cafile=str(ca.truststore.pem))
        context.load_cert_chain(identity.cert, identity.key, identity.key_password)
        contexts[name] = context
    with BrokerProcess(tmp_path_factory.mktemp("authz"), overrides) as b:
        yield b, contexts


@pytest.fixture(scope="module")
def topic(broker: tuple[BrokerProcess, Any]) -> str:
    process, contexts = broker
    admin = TlsWireClient(port_of(process, "MTLS"), contexts["admin"])
    try:
        assert create_topic(admin, TOPIC, partitions=2).error_code == ErrorCode.none
    finally:
        admin.close()
    return TOPIC


@pytest.fixture
def c(broker: tuple[BrokerProcess, Any], topic: str) -> Iterator[Clients]:
    process, contexts = broker
    clients = Clients(port_of(process, "MTLS"), contexts)
    yield clients
    delete(clients.admin, [filter_fields()])  # every ACL: each test starts with none
    clients.close()


def grant(c: Clients, *acls: Acl) -> None:
    assert {code for code, _ in create(c.admin, list(acls))} == {ErrorCode.none}


def deny(rtype: Res, name: str, pattern: Pat, op: Op) -> Acl:
    return (rtype, name, pattern, ALICE, "*", op, Perm.DENY)


# -- requests -------------------------------------------------------------------------------
def produce(client: WireClient, topic: str = TOPIC) -> int:
    [t] = client.call(v.PRODUCE, 9, produce_request(9, topic, b"v")).responses
    return int(t.partition_responses[0].error_code)


def list_offsets(client: WireClient) -> Any:
    """ListOffsets v7 of TOPIC's partition 0, the latest offset: the partition's answer."""
    cls = request_type(v.LIST_OFFSETS, 7)
    part = nested(cls, "ListOffsetsPartition")(partition_index=0, timestamp=-1)
    request = build(
        cls,
        replica_id=-1,
        isolation_level=0,
        topics=(nested(cls, "ListOffsetsTopic")(name=TOPIC, partitions=(part,)),),
    )
    return client.call(v.LIST_OFFSETS, 7, request).topics[0].partitions[0]


def latest_offset(c: Clients) -> int:
    partition = list_offsets(c.admin)
    assert partition.error_code == ErrorCode.none
    return int(partition.offset)


def list_offsets_error(client: WireClient) -> int:
    return int(list_offsets(client).error_code)


def fetch(client: WireClient, replica_id: int = -1) -> list[int]:
    cls = request_type(v.FETCH, 12)
    fm = __import__(cls.__module__, fromlist=["x"])
    parts = tuple(
        fm.FetchPartition(partition=i, fetch_offset=0, partition_max_bytes=1 << 20) for i in (0, 1)
    )
    request = cls(
        replica_id=replica_id,
        max_wait=datetime.timedelta(0),
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        forgotten_topics_data=(),
        rack_id="",
        topics=(fm.FetchTopic(topic=TOPIC, partitions=parts),),
    )
    [t] = client.call(v.FETCH, 12, request).responses
    return [p.error_code for p in t.partitions]


def metadata(client: WireClient, topics: list[str] | None, auto_create: bool = False) -> Any:
    cls = request_type(v.METADATA, 10)
    entry = nested(cls, "MetadataRequestTopic")
    return client.call(
        v.METADATA,
        10,
        cls(
            topics=None if topics is None else tuple(entry(name=t, topic_id=None) for t in topics),
            allow_auto_topic_creation=auto_create,
            include_cluster_authorized_operations=True,
            include_topic_authorized_operations=True,
        ),
    )


def join(client: WireClient, group: str) -> int:
    cls = request_type(v.JOIN_GROUP, 5)
    protocol = nested(cls, "JoinGroupRequestProtocol")(name="range", metadata=b"")
    request = cls(
        group_id=group,
        session_timeout=datetime.timedelta(seconds=10),
        rebalance_timeout=datetime.timedelta(seconds=10),
        member_id="",
        group_instance_id=None,
        protocol_type="consumer",
        protocols=(protocol,),
    )
    return int(client.call(v.JOIN_GROUP, 5, request).error_code)


def find_coordinator(client: WireClient, group: str) -> int:
    cls = request_type(v.FIND_COORDINATOR, 4)
    [found] = client.call(
        v.FIND_COORDINATOR, 4, cls(key_type=0, coordinator_keys=(group,))
    ).coordinators
    return int(found.error_code)


def await_coordinator(client: WireClient, group: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while (error := find_coordinator(client, group)) != ErrorCode.none:
        assert error == ErrorCode.coordinator_not_available and time.monotonic() < deadline
        time.sleep(0.05)  # the coordinator topic is being created: nothing to await but it


def commit(client: WireClient, group: str) -> list[int]:
    cls = request_type(v.OFFSET_COMMIT, 8)
    part = nested(cls, "OffsetCommitRequestPartition")(
        partition_index=0, committed_offset=0, committed_leader_epoch=-1, committed_metadata=""
    )
    request = cls(
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        topics=(nested(cls, "OffsetCommitRequestTopic")(name=TOPIC, partitions=(part,)),),
    )
    [t] = client.call(v.OFFSET_COMMIT, 8, request).topics
    return [p.error_code for p in t.partitions]


def offset_fetch_all(client: WireClient, group: str) -> Any:
    cls = request_type(v.OFFSET_FETCH, 7)
    return client.call(v.OFFSET_FETCH, 7, cls(group_id=group, topics=None, require_stable=False))


def init_producer_id(client: WireClient, transactional_id: str | None) -> int:
    cls = request_type(v.INIT_PRODUCER_ID, 4)
    request = cls(
        transactional_id=transactional_id,
        transaction_timeout=datetime.timedelta(seconds=60),
        producer_id=-1,
        producer_epoch=-1,
    )
    return int(client.call(v.INIT_PRODUCER_ID, 4, request).error_code)


def create_topics_error(client: WireClient, name: str) -> int:
    return int(create_topic(client, name).error_code)


def leader_epoch(c: Clients) -> int:
    [t] = metadata(c.admin, [TOPIC]).topics
    return int(t.partitions[0].leader_epoch)


# -- tests ----------------------------------------------------------------------------------
def test_produce_needs_write_on_the_topic_and_a_refusal_appends_nothing(c: Clients) -> None:
    before = latest_offset(c)
    assert produce(c.alice) == TAF
    assert latest_offset(c) == before
    grant(c, allow(Res.TOPIC, TOPIC, Pat.LITERAL, ALICE, Op.WRITE))
    assert produce(c.alice) == ErrorCode.none
    assert latest_offset(c) == before + 1
    # DENY wins over ALLOW, here through a prefix.
    grant(c, deny(Res.TOPIC, "ord", Pat.PREFIXED, Op.WRITE))
    assert produce(c.alice) == TAF
    assert latest_offset(c) == before + 1


def test_the_super_user_needs_no_acl(c: Clients) -> None:
    assert produce(c.admin) == ErrorCode.none
    assert fetch(c.admin) == [ErrorCode.none, ErrorCode.none]


def test_fetch_needs_read_and_a_follower_cluster_action(c: Clients) -> None:
    assert fetch(c.alice) == [TAF, TAF]
    grant(c, allow(Res.TOPIC, "or", Pat.PREFIXED, ALICE, Op.READ))
    assert fetch(c.alice) == [ErrorCode.none, ErrorCode.none]
    # A replica's fetch is refused without CLUSTER_ACTION, even with READ.
    assert fetch(c.alice, replica_id=1) == [TAF, TAF]


def test_list_offsets_needs_describe_which_read_implies(c: Clients) -> None:
    assert list_offsets_error(c.alice) == TAF
    grant(c, allow(Res.TOPIC, TOPIC, Pat.LITERAL, ALICE, Op.READ))
    assert list_offsets_error(c.alice) == ErrorCode.none


def test_metadata_filters_topics_and_reports_authorized_operations(c: Clients) -> None:
    answer = metadata(c.alice, None)
    assert [t.name for t in answer.topics] == []
    assert answer.cluster_authorized_operations == 0
    [named] = metadata(c.alice, [TOPIC]).topics
    assert (named.error_code, named.partitions) == (TAF, ())
    grant(
        c,
        allow(Res.TOPIC, TOPIC, Pat.LITERAL, ALICE, Op.READ),
        allow(Res.CLUSTER, "kafka-cluster", Pat.LITERAL, ALICE, Op.DESCRIBE),
    )
    answer = metadata(c.alice, None)
    [shown] = [t for t in answer.topics if t.name == TOPIC]
    assert shown.error_code == ErrorCode.none
    assert shown.topic_authorized_operations == operations_bitfield([Op.READ, Op.DESCRIBE])
    assert answer.cluster_authorized_operations == operations_bitfield([Op.DESCRIBE])
    # The super user may do everything the types support.
    answer = metadata(c.admin, [TOPIC])
    assert answer.topics[0].topic_authorized_operations == TOPIC_OPERATIONS
    assert answer.cluster_authorized_operations == CLUSTER_OPERATIONS


def test_auto_creation_needs_create(c: Clients) -> None:
    grant(c, allow(Res.TOPIC, "auto-", Pat.PREFIXED, ALICE, Op.DESCRIBE))
    [refused] = metadata(c.alice, ["auto-one"], auto_create=True).topics
    assert refused.error_code == TAF
    assert metadata(c.admin, ["auto-one"]).topics[0].error_code == (
        ErrorCode.unknown_topic_or_partition
    )
    grant(c, allow(Res.TOPIC, "auto-", Pat.PREFIXED, ALICE, Op.CREATE))
    [created] = metadata(c.alice, ["auto-one"], auto_create=True).topics
    assert created.error_code in (ErrorCode.none, ErrorCode.leader_not_available)
    assert metadata(c.admin, ["auto-one"]).topics[0].error_code != (
        ErrorCode.unknown_topic_or_partition
    )


def test_create_and_delete_topics_need_create_and_delete(c: Clients) -> None:
    assert create_topics_error(c.alice, "made-by-alice") == TAF
    assert metadata(c.admin, ["made-by-alice"]).topics[0].error_code == (
        ErrorCode.unknown_topic_or_partition
    )
    grant(c, allow(Res.CLUSTER, "kafka-cluster", Pat.LITERAL, ALICE, Op.CREATE))
    assert create_topics_error(c.alice, "made-by-alice") == ErrorCode.none
    cls = request_type(v.DELETE_TOPICS, 6)
    entry = nested(cls, "DeleteTopicState")(name="made-by-alice", topic_id=None)
    request = cls(topics=(entry,), timeout=datetime.timedelta(seconds=30))
    [result] = c.alice.call(v.DELETE_TOPICS, 6, request).responses
    assert result.error_code == TAF
    grant(c, allow(Res.TOPIC, "made-by-alice", Pat.LITERAL, ALICE, Op.DELETE))
    [result] = c.alice.call(v.DELETE_TOPICS, 6, request).responses
    assert result.error_code == ErrorCode.none


def test_group_apis_need_read_on_the_group_and_commits_read_on_the_topic(c: Clients) -> None:
    assert find_coordinator(c.alice, "g1") == GAF
    assert join(c.alice, "g1") == GAF
    assert commit(c.alice, "g1") == [GAF]
    grant(c, allow(Res.GROUP, "g1", Pat.LITERAL, ALICE, Op.READ))
    await_coordinator(c.alice, "g1")  # READ implies DESCRIBE
    assert commit(c.alice, "g1") == [TAF]
    grant(c, allow(Res.TOPIC, TOPIC, Pat.LITERAL, ALICE, Op.READ))
    assert commit(c.alice, "g1") == [ErrorCode.none]
    cls = request_type(v.DESCRIBE_GROUPS, 5)
    request = cls(groups=("g1", "g2"), include_authorized_operations=True)
    g1, g2 = c.alice.call(v.DESCRIBE_GROUPS, 5, request).groups
    assert (g1.error_code, g1.authorized_operations) == (
        ErrorCode.none,
        operations_bitfield([Op.READ, Op.DESCRIBE]),
    )
    assert (g2.error_code, g2.authorized_operations) == (GAF, NO_OPERATIONS)
    # The committed offset is listed to whom may DESCRIBE the topic only.
    grant(c, deny(Res.TOPIC, TOPIC, Pat.LITERAL, Op.DESCRIBE))
    answer = offset_fetch_all(c.alice, "g1")
    assert (answer.error_code, answer.topics) == (ErrorCode.none, ())
    assert [t.name for t in offset_fetch_all(c.admin, "g1").topics] == [TOPIC]


def test_init_producer_id_checks_the_transactional_id_or_idempotence(c: Clients) -> None:
    assert init_producer_id(c.alice, "tx-1") == TXN_AF
    assert init_producer_id(c.alice, None) == CAF
    # KIP-679: WRITE on any topic is enough for an idempotent producer.
    grant(c, allow(Res.TOPIC, "anything", Pat.LITERAL, ALICE, Op.WRITE))
    assert init_producer_id(c.alice, None) == ErrorCode.none


def test_cluster_admin_apis_need_their_cluster_operation(c: Clients) -> None:
    cls = request_type(v.DESCRIBE_LOG_DIRS, 4)
    assert c.alice.call(v.DESCRIBE_LOG_DIRS, 4, cls(topics=None)).error_code == CAF
    cls = request_type(v.DESCRIBE_CLIENT_QUOTAS, 1)
    answer = c.alice.call(v.DESCRIBE_CLIENT_QUOTAS, 1, cls(components=(), strict=False))
    assert answer.error_code == CAF
    grant(c, allow(Res.CLUSTER, "kafka-cluster", Pat.LITERAL, ALICE, Op.DESCRIBE_CONFIGS))
    answer = c.alice.call(v.DESCRIBE_CLIENT_QUOTAS, 1, cls(components=(), strict=False))
    assert answer.error_code == ErrorCode.none


def test_describe_configs_needs_describe_configs_per_resource(c: Clients) -> None:
    cls = request_type(v.DESCRIBE_CONFIGS, 4)
    resource = nested(cls, "DescribeConfigsResource")
    request = cls(
        resources=(
            resource(resource_type=2, resource_name=TOPIC, configuration_keys=None),
            resource(resource_type=4, resource_name="", configuration_keys=None),
            resource(resource_type=32, resource_name="g", configuration_keys=None),
        ),
        include_synonyms=False,
        include_documentation=False,
    )
    results = c.alice.call(v.DESCRIBE_CONFIGS, 4, request).results
    assert [(r.error_code, r.configs) for r in results] == [(TAF, ()), (CAF, ()), (GAF, ())]
    grant(c, allow(Res.TOPIC, TOPIC, Pat.LITERAL, ALICE, Op.ALTER_CONFIGS))
    results = c.alice.call(v.DESCRIBE_CONFIGS, 4, request).results
    assert results[0].error_code == ErrorCode.none and results[0].configs


def test_inter_broker_apis_need_cluster_action_and_change_nothing(c: Clients) -> None:
    epoch = leader_epoch(c)
    state = ib.LeaderAndIsrPartitionState(
        partition_index=0,
        controller_epoch=99,
        leader=7,
        leader_epoch=epoch + 10,
        isr=(7,),
        partition_epoch=99,
        replicas=(7,),
    )
    request = ib.LeaderAndIsrRequest(
        controller_id=7,
        controller_epoch=99,
        topic_states=(
            ib.LeaderAndIsrTopicState(topic_name=TOPIC, topic_id=None, partition_states=(state,)),
        ),
        live_leaders=(),
    )
    answer = c.alice.call(v.LEADER_AND_ISR, 7, request)
    assert answer.error_code == CAF
    assert [p.error_code for t in answer.topics for p in t.partition_errors] == [CAF]
    update = ib.UpdateMetadataRequest(
        controller_id=7, controller_epoch=99, topic_states=(), live_brokers=()
    )
    assert c.alice.call(v.UPDATE_METADATA, 8, update).error_code == CAF
    shutdown = ib.ControlledShutdownRequest(broker_id=1, broker_epoch=0)
    assert c.alice.call(v.CONTROLLED_SHUTDOWN, 3, shutdown).error_code == CAF
    assert leader_epoch(c) == epoch
    assert produce(c.admin) == ErrorCode.none  # still the leader


def test_share_group_offsets_need_describe_read_or_delete_and_the_topics(c: Clients) -> None:
    """Kafka's KafkaApis: Describe DESCRIBE on the group and the topics (topics denied are
    left out of "all"), Alter READ on both, Delete DELETE on the group and READ on topics."""
    group, member = "sg-authz", str(uuid.uuid4())

    def alter() -> Any:
        return alter_offsets(c.alice, group, TOPIC, {0: 0})

    def delete() -> Any:
        return delete_offsets(c.alice, group, TOPIC)

    await_coordinator(c.admin, group)
    assert share_heartbeat(c.admin, group, member, 0, (TOPIC,)).error_code == ErrorCode.none
    assert share_heartbeat(c.admin, group, member, -1).error_code == ErrorCode.none
    # Partition 0's state initialized now, not in the background.
    assert alter_offsets(c.admin, group, TOPIC, {0: 0}).error_code == ErrorCode.none

    assert describe_offsets(c.alice, group, TOPIC, (0,)).error_code == GAF
    assert (alter().error_code, delete().error_code) == (GAF, GAF)

    grant(c, allow(Res.GROUP, group, Pat.LITERAL, ALICE, Op.DESCRIBE))
    (topic,) = describe_offsets(c.alice, group, TOPIC, (0,)).topics
    assert [p.error_code for p in topic.partitions] == [TAF]
    assert describe_offsets(c.alice, group, TOPIC, None).topics == ()
    grant(c, allow(Res.TOPIC, TOPIC, Pat.LITERAL, ALICE, Op.DESCRIBE))
    (topic,) = describe_offsets(c.alice, group, TOPIC, None).topics
    assert (0, 0) in {(p.partition_index, p.start_offset) for p in topic.partitions}

    grant(c, allow(Res.GROUP, group, Pat.LITERAL, ALICE, Op.READ))
    altered = alter()
    assert altered.error_code == ErrorCode.none
    assert [p.error_code for t in altered.responses for p in t.partitions] == [TAF]
    assert delete().error_code == GAF  # READ is not DELETE
    grant(c, allow(Res.GROUP, group, Pat.LITERAL, ALICE, Op.DELETE))
    assert [t.error_code for t in delete().responses] == [TAF]
    grant(c, allow(Res.TOPIC, TOPIC, Pat.LITERAL, ALICE, Op.READ))
    assert [p.error_code for t in alter().responses for p in t.partitions] == [ErrorCode.none]
    assert [t.error_code for t in delete().responses] == [ErrorCode.none]
