"""The ACL matrix: each client of the compatibility matrix, authenticated over SASL as the
ordinary user alice, against a broker with the authorizer on and
``allow.everyone.if.no.acl.found=false``. Every API the client uses (its admin API's topic
create, describe, configs and delete; produce; consume; its group's offsets, join and
commit; transactions) is refused with the client's own error until the super user admin
adds the one ACL it needs, and then works. Each test has its own topic, group and
transactional id, and so its own ACLs. One broker, single node: authorization is each
broker's own check, and the cluster's ACL propagation is tests/test_cluster_acls.py's."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import aiokafka.errors as aio_errors
import kafka.errors as kp_errors
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin import NewTopic as AioNewTopic
from aiokafka.admin.config_resource import ConfigResource as AioConfigResource
from aiokafka.admin.config_resource import ConfigResourceType as AioConfigResourceType
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient
from kafka.admin import NewTopic as KpNewTopic

from compat_tests import java_client as java
from compat_tests import security_clients as styles
from compat_tests.broker import BrokerProcess
from compat_tests.matrix import compat
from compat_tests.process_pool import ProcessPool
from compat_tests.records import Rec
from tests.test_tls_listeners import port_of

T = TypeVar("T")
TIMEOUT_S = 30.0
ADMIN, ADMIN_PASSWORD = "admin", "admin-secret"
USER, PASSWORD = "alice", "alice-secret"
LISTENER = "SASL_PLAINTEXT"
COUNT = 3
VALUES = [f"acl-{i}".encode() for i in range(COUNT)]
RETENTION = ("retention.ms", "3600000")  # the topic config each admin API alters
TOPIC, GROUP, TXN = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID


@dataclass(frozen=True)
class Secured:
    broker: BrokerProcess
    admin: AdminClient  # the super user's

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{port_of(self.broker, LISTENER)}"

    def login(self, mechanism: str = "PLAIN") -> styles.Login:
        return styles.Login(LISTENER, mechanism=mechanism, user=USER, password=PASSWORD)

    def grant(self, resource_type: ResourceType, name: str, operation: str) -> None:
        """ALLOW alice ``operation`` (an AclOperation name) on the LITERAL resource, from
        any host."""
        binding = AclBinding(
            resource_type,
            name,
            ResourcePatternType.LITERAL,
            f"User:{USER}",
            "*",
            AclOperation[operation],
            AclPermissionType.ALLOW,
        )
        for future in self.admin.create_acls([binding]).values():
            future.result(TIMEOUT_S)

    def create_topic(self, name: str) -> None:
        self.admin.create_topics([NewTopic(name, 1, 1)])[name].result(TIMEOUT_S)


@pytest.fixture(scope="module")
def secured(process_pool: ProcessPool) -> Secured:
    listener = f"listener.name.{LISTENER.lower()}"
    overrides = {
        "listeners": f"PLAINTEXT://127.0.0.1:0,{LISTENER}://127.0.0.1:0",
        f"{listener}.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        f"{listener}.plain.sasl.jaas.config": (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'user_{ADMIN}="{ADMIN_PASSWORD}" user_{USER}="{PASSWORD}";'
        ),
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": f"User:{ADMIN}",
        "allow.everyone.if.no.acl.found": "false",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "offsets.topic.replication.factor": "1",
        "group.initial.rebalance.delay.ms": "0",
    }
    broker = process_pool.broker(overrides)
    admin_login = styles.Login(LISTENER, mechanism="PLAIN", user=ADMIN, password=ADMIN_PASSWORD)
    conf: dict[str, Any] = {"bootstrap.servers": f"127.0.0.1:{port_of(broker, LISTENER)}"}
    admin = AdminClient(conf | styles.librdkafka(admin_login))
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
    upsertion = UserScramCredentialUpsertion(USER, info, PASSWORD.encode())
    for future in admin.alter_user_scram_credentials([upsertion]).values():
        future.result(TIMEOUT_S)
    return Secured(broker, admin)


def names() -> tuple[str, str, str]:
    """A new topic, group and transactional id: a test's own ACLs touch no other test."""
    base = f"acl-{uuid.uuid4().hex[:12]}"
    return base, f"{base}-group", f"{base}-txn"


def first_error(answer: Any) -> int:
    """The first non-zero ``error_code`` anywhere in a response object's fields (kafka-python's
    and aiokafka's admin calls that hand back the response)."""
    if isinstance(answer, dict):
        code = answer.get("error_code", 0)
        return code or next((c for v in answer.values() if (c := first_error(v))), 0)
    if isinstance(answer, list | tuple):
        return next((c for v in answer if (c := first_error(v))), 0)
    return 0


def refused_then_allowed(
    attempt: Callable[[], T],
    error: type[BaseException],
    match: str | None,
    grant: Callable[[], None],
) -> T:
    """``attempt`` fails with the client's own ``error`` (its text matching ``match``);
    once ``grant`` adds the ACL, the same attempt succeeds."""
    with pytest.raises(error, match=match):
        attempt()
    grant()
    return attempt()


# -- Java kafka-clients ------------------------------------------------------------------


@compat("java", "security")
@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_java(secured: Secured, mechanism: str) -> None:
    topic, group, txn = names()
    configs = styles.java(secured.login(mechanism))

    def run(command: str, **kwargs: Any) -> list[dict[str, Any]]:
        """A driver command; a failure reported in its output lines raises as an exit does."""
        lines = java.run(command, secured.bootstrap, topic, configs=configs, **kwargs)
        if any(line.get("error") for line in lines):
            raise java.JavaClientError(json.dumps(lines))
        return lines

    def step(attempt: Callable[[], T], exception: str, *acl: Any) -> T:
        return refused_then_allowed(
            attempt, java.JavaClientError, exception, lambda: secured.grant(*acl)
        )

    topic_denied, group_denied = "TopicAuthorizationException", "GroupAuthorizationException"
    create = {"partitions": "1", "replication-factor": "1"}
    step(lambda: run("create-topic", options=create), topic_denied, TOPIC, topic, "CREATE")
    step(lambda: run("describe-topics"), topic_denied, TOPIC, topic, "DESCRIBE")
    now = int(time.time() * 1000)
    records = java.produce_input([Rec(0, None, v, (), now) for v in VALUES])
    # The idempotent producer sends InitProducerId beside its first Produce: with WRITE on
    # no topic at all (KIP-679: any topic's WRITE stands for IDEMPOTENT_WRITE) it is
    # CLUSTER_AUTHORIZATION_FAILED, the Produce TOPIC_AUTHORIZATION_FAILED; either comes first.
    produce = lambda: run("produce", stdin=records)  # noqa: E731
    step(produce, "(Cluster|Topic)AuthorizationException", TOPIC, topic, "WRITE")
    consume = {"count": str(COUNT)}
    lines = step(lambda: run("consume", options=consume), topic_denied, TOPIC, topic, "READ")
    assert [r.value for r in java.parse_consumed(lines)] == VALUES
    offsets = lambda: run("group-offsets", options={"group": group})  # noqa: E731
    assert step(offsets, group_denied, GROUP, group, "DESCRIBE") == []
    commit = {"group": group, "count": str(COUNT)}
    step(lambda: run("group-commit", options=commit), group_denied, GROUP, group, "READ")
    assert offsets() == [{"partition": 0, "offset": COUNT}]
    ops = ["init", "begin", "send", "commit"]
    session = "".join(json.dumps({"op": op, "partition": 0, "value": "txn"}) + "\n" for op in ops)
    transaction = {"transactional-id": txn}
    step(
        lambda: run("txn-session", options=transaction, stdin=session),
        "TransactionalIdAuthorizationException",
        TXN,
        txn,
        "WRITE",
    )
    resource = {"resource": f"topic:{topic}", "key": RETENTION[0]}
    step(
        lambda: run("describe-configs", options=resource),
        topic_denied,
        TOPIC,
        topic,
        "DESCRIBE_CONFIGS",
    )
    alter = {"resource": f"topic:{topic}", "set": "=".join(RETENTION)}
    step(lambda: run("alter-configs", options=alter), topic_denied, TOPIC, topic, "ALTER_CONFIGS")
    [entry] = run("describe-configs", options=resource)
    assert entry["value"] == RETENTION[1]
    step(lambda: run("delete-topic"), topic_denied, TOPIC, topic, "DELETE")


# -- confluent-kafka ----------------------------------------------------------------------


@compat("confluent", "security")
@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_confluent(secured: Secured, mechanism: str) -> None:
    topic, group, txn = names()
    conf: dict[str, Any] = {
        "bootstrap.servers": secured.bootstrap,
        **styles.librdkafka(secured.login(mechanism)),
    }
    admin = AdminClient(conf)

    def step(attempt: Callable[[], T], error: str, *acl: Any) -> T:
        return refused_then_allowed(attempt, KafkaException, error, lambda: secured.grant(*acl))

    def produce() -> None:
        producer = Producer(conf)
        failed: list[KafkaError] = []

        def delivered(error: KafkaError | None, _: Message) -> None:
            if error is not None:
                failed.append(error)

        for value in VALUES:
            producer.produce(topic, value, on_delivery=delivered)
        assert producer.flush(TIMEOUT_S) == 0
        if failed:
            raise KafkaException(failed[0])

    def consume(**extra: str) -> list[bytes]:
        """``count`` values from the start (assigned); a group consumer if ``extra`` says."""
        consumer = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest", **extra})
        if extra:
            consumer.subscribe([topic])
        else:
            consumer.assign([TopicPartition(topic, 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT_S
        try:
            while len(got) < COUNT and time.monotonic() < deadline:
                message = consumer.poll(0.2)
                if message is not None and message.error() is not None:
                    raise KafkaException(message.error())
                if message is not None:
                    got.append(message.value() or b"")
            if extra:
                consumer.commit(asynchronous=False)
        finally:
            consumer.close()
        return got

    def committed() -> list[TopicPartition]:
        request = ConsumerGroupTopicPartitions(group)
        answer = admin.list_consumer_group_offsets([request])[group].result(TIMEOUT_S)
        return [tp for tp in answer.topic_partitions if tp.offset >= 0]

    def transaction() -> None:
        producer = Producer({**conf, "transactional.id": txn})
        producer.init_transactions(TIMEOUT_S)
        producer.begin_transaction()
        producer.produce(topic, b"txn")
        producer.commit_transaction(TIMEOUT_S)

    resource = ConfigResource(ResourceType.TOPIC, topic)
    retention = ConfigEntry(*RETENTION, incremental_operation=AlterConfigOpType.SET)
    altered = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[retention])
    topic_denied, group_denied = "TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED"
    step(
        lambda: admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(TIMEOUT_S),
        topic_denied,
        TOPIC,
        topic,
        "CREATE",
    )
    step(
        lambda: admin.describe_topics(TopicCollection([topic]))[topic].result(TIMEOUT_S),
        topic_denied,
        TOPIC,
        topic,
        "DESCRIBE",
    )
    step(produce, topic_denied, TOPIC, topic, "WRITE")
    assert step(committed, group_denied, GROUP, group, "DESCRIBE") == []
    assert step(consume, topic_denied, TOPIC, topic, "READ") == VALUES
    group_consume = lambda: consume(**{"enable.auto.commit": "false"})  # noqa: E731
    assert step(group_consume, group_denied, GROUP, group, "READ") == VALUES
    assert [tp.offset for tp in committed()] == [COUNT]
    step(transaction, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", TXN, txn, "WRITE")
    describe = lambda: admin.describe_configs([resource])[resource].result(TIMEOUT_S)  # noqa: E731
    step(describe, topic_denied, TOPIC, topic, "DESCRIBE_CONFIGS")
    alter = lambda: admin.incremental_alter_configs([altered])[altered].result(TIMEOUT_S)  # noqa: E731
    step(alter, topic_denied, TOPIC, topic, "ALTER_CONFIGS")
    assert describe()[RETENTION[0]].value == RETENTION[1]
    step(
        lambda: admin.delete_topics([topic])[topic].result(TIMEOUT_S),
        topic_denied,
        TOPIC,
        topic,
        "DELETE",
    )


# -- kcat -----------------------------------------------------------------------------------


@compat("kcat", "security")
def test_kcat(secured: Secured) -> None:
    """kcat has no admin API: metadata (-L), produce, consume, a group consumer (-G); the
    topic is the super user's."""
    topic, group, _ = names()
    secured.create_topic(topic)
    base = ["kcat", "-b", secured.bootstrap, *styles.kcat_options(secured.login()), "-t", topic]

    def run(*args: str, stdin: bytes = b"") -> bytes:
        done = subprocess.run([*base, *args], input=stdin, capture_output=True, timeout=TIMEOUT_S)
        if done.returncode != 0 or b"authorization failed" in done.stdout + done.stderr:
            raise RuntimeError((done.stdout + done.stderr).decode(errors="replace"))
        return done.stdout

    def step(args: list[str], error: str, *acl: Any, stdin: bytes = b"") -> bytes:
        return refused_then_allowed(
            lambda: run(*args, stdin=stdin), RuntimeError, error, lambda: secured.grant(*acl)
        )

    topic_denied = "Topic authorization failed"
    listed = step(["-L"], topic_denied, TOPIC, topic, "DESCRIBE")
    assert f'topic "{topic}" with 1 partitions'.encode() in listed
    lines = b"".join(v + b"\n" for v in VALUES)
    step(["-P"], topic_denied, TOPIC, topic, "WRITE", stdin=lines)
    consume = ["-C", "-o", "beginning", "-e", "-c", str(COUNT)]
    assert step(consume, topic_denied, TOPIC, topic, "READ").splitlines() == VALUES
    join = ["-X", "auto.offset.reset=earliest", "-G", group, topic, "-c", str(COUNT)]
    assert step(join, "Group authorization failed", GROUP, group, "READ").splitlines() == VALUES


# -- kafka-python -------------------------------------------------------------------------


@compat("kafka-python", "security")
def test_kafka_python(secured: Secured) -> None:
    topic, group, txn = names()
    options = {"bootstrap_servers": secured.bootstrap, **styles.kafka_python(secured.login())}
    admin = KafkaAdminClient(**options)

    def step(
        attempt: Callable[[], T], error: type[BaseException], *acl: Any, match: str | None = None
    ) -> T:
        return refused_then_allowed(attempt, error, match, lambda: secured.grant(*acl))

    def checked(answer: T) -> T:
        """kafka-python's error for the first error code in an admin answer."""
        if code := first_error(answer):
            raise kp_errors.for_code(code)()
        return answer

    def produce() -> None:
        producer = KafkaProducer(**options)
        try:
            for value in VALUES:
                producer.send(topic, value).get(TIMEOUT_S)
        finally:
            producer.close()

    def consume() -> list[bytes]:
        consumer = KafkaConsumer(consumer_timeout_ms=int(TIMEOUT_S * 1000), **options)
        consumer.assign([KpTopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        try:
            return [m.value for _, m in zip(range(COUNT), consumer, strict=False)]
        finally:
            consumer.close()

    def group_consume() -> list[bytes]:
        return styles.kafka_python_consume(
            options, topic, COUNT, group_id=group, enable_auto_commit=True
        )

    def transaction() -> None:
        producer = KafkaProducer(transactional_id=txn, **options)
        try:
            producer.init_transactions()
            producer.begin_transaction()
            producer.send(topic, b"txn")
            producer.commit_transaction()
        finally:
            producer.close()

    topic_denied = kp_errors.TopicAuthorizationFailedError
    group_denied = kp_errors.GroupAuthorizationFailedError
    step(
        lambda: admin.create_topics([KpNewTopic(topic, 1, 1)]), topic_denied, TOPIC, topic, "CREATE"
    )
    step(lambda: checked(admin.describe_topics([topic])), topic_denied, TOPIC, topic, "DESCRIBE")
    step(produce, topic_denied, TOPIC, topic, "WRITE")
    assert step(consume, topic_denied, TOPIC, topic, "READ") == VALUES
    offsets = lambda: admin.list_group_offsets(group)[group]  # noqa: E731
    assert step(offsets, group_denied, GROUP, group, "DESCRIBE") == {}
    assert step(group_consume, group_denied, GROUP, group, "READ") == VALUES
    assert [o.offset for o in offsets().values()] == [COUNT]
    step(transaction, kp_errors.TransactionalIdAuthorizationFailedError, TXN, txn, "WRITE")

    def describe() -> dict[str, Any]:
        resource = KpConfigResource(ConfigResourceType.TOPIC, topic)
        return dict(admin.describe_configs([resource], config_filter="all")["topic"][topic])

    def alter() -> None:
        altered = KpConfigResource(ConfigResourceType.TOPIC, topic, configs=dict([RETENTION]))
        result = admin.alter_configs([altered])["topic"][topic]
        if result != "OK":  # kafka-python's error, as text
            raise RuntimeError(result)

    # kafka-python's describe_configs drops a resource's error: refused, it lists nothing.
    assert describe() == {}
    secured.grant(TOPIC, topic, "DESCRIBE_CONFIGS")
    assert describe()
    step(alter, RuntimeError, TOPIC, topic, "ALTER_CONFIGS", match=topic_denied.__name__)
    assert describe()[RETENTION[0]]["value"] == RETENTION[1]
    step(lambda: admin.delete_topics([topic]), topic_denied, TOPIC, topic, "DELETE")
    admin.close()


# -- aiokafka -----------------------------------------------------------------------------


@compat("aiokafka", "security")
def test_aiokafka(secured: Secured) -> None:
    topic, group, txn = names()
    options = {"bootstrap_servers": secured.bootstrap, **styles.aiokafka(secured.login())}

    async def step(attempt: Callable[[], Awaitable[T]], error: type[BaseException], *acl: Any) -> T:
        with pytest.raises(error):
            await attempt()
        secured.grant(*acl)
        return await attempt()

    async def produce() -> None:
        producer = AIOKafkaProducer(**options)
        try:
            await producer.start()
            for value in VALUES:
                await producer.send_and_wait(topic, value)
        finally:
            await producer.stop()

    async def consume() -> list[bytes]:
        consumer = AIOKafkaConsumer(**options)
        try:
            await consumer.start()
            consumer.assign([AioTopicPartition(topic, 0)])
            await consumer.seek_to_beginning()
            got: list[bytes] = []
            async with asyncio.timeout(TIMEOUT_S):
                while len(got) < COUNT:
                    message = await consumer.getone()
                    assert message.value is not None
                    got.append(message.value)
            return got
        finally:
            await consumer.stop()

    async def group_consume() -> list[bytes]:
        return await styles.aiokafka_consume(options, topic, COUNT, group_id=group)

    async def transaction() -> None:
        producer = AIOKafkaProducer(transactional_id=txn, **options)
        try:
            await producer.start()
            async with producer.transaction():
                await producer.send_and_wait(topic, b"txn")
        finally:
            await producer.stop()

    async def scenario() -> None:
        admin = AIOKafkaAdminClient(**options)
        await admin.start()

        async def checked(call: Awaitable[Any]) -> Any:
            """aiokafka's error for the first error code in an admin answer."""
            answer = await call
            answers = answer if isinstance(answer, list) else [answer]
            objects = [a.to_object() if hasattr(a, "to_object") else a for a in answers]
            if code := first_error(objects):
                raise aio_errors.for_code(code)()
            return answer

        topic_denied = aio_errors.TopicAuthorizationFailedError
        group_denied = aio_errors.GroupAuthorizationFailedError
        new = AioNewTopic(topic, 1, 1)
        await step(
            lambda: checked(admin.create_topics([new])), topic_denied, TOPIC, topic, "CREATE"
        )
        await step(
            lambda: checked(admin.describe_topics([topic])), topic_denied, TOPIC, topic, "DESCRIBE"
        )
        await step(produce, topic_denied, TOPIC, topic, "WRITE")
        assert await step(consume, topic_denied, TOPIC, topic, "READ") == VALUES
        offsets = lambda: admin.list_consumer_group_offsets(group)  # noqa: E731
        assert await step(offsets, group_denied, GROUP, group, "DESCRIBE") == {}
        assert await step(group_consume, group_denied, GROUP, group, "READ") == VALUES
        assert [o.offset for o in (await offsets()).values()] == [COUNT]
        await step(transaction, aio_errors.TransactionalIdAuthorizationFailed, TXN, txn, "WRITE")
        resource = AioConfigResource(AioConfigResourceType.TOPIC, topic)
        describe = lambda: checked(admin.describe_configs([resource]))  # noqa: E731
        await step(describe, topic_denied, TOPIC, topic, "DESCRIBE_CONFIGS")
        configs = dict([RETENTION])
        altered = AioConfigResource(AioConfigResourceType.TOPIC, topic, configs)
        alter = lambda: checked(admin.alter_configs([altered]))  # noqa: E731
        await step(alter, topic_denied, TOPIC, topic, "ALTER_CONFIGS")
        await step(
            lambda: checked(admin.delete_topics([topic])), topic_denied, TOPIC, topic, "DELETE"
        )
        await admin.close()

    asyncio.run(scenario())
