"""Topic creation and deletion rules a client cannot get around, against a real broker process:
internal topics are the broker's own, names colliding once '.' and '_' are alike are refused,
and what was refused or committed stays so across a restart."""

from __future__ import annotations

import datetime
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType
from kafka.structs import OffsetAndMetadata
from kio.schema.errors import ErrorCode

from compat_tests.broker import BrokerProcess
from gregor.apis.context import build, nested
from gregor.wire import versions as v
from gregor.wire.schema import request_type
from tests.kafka_wire import WireClient, create_topics_request

TIMEOUT = datetime.timedelta(seconds=5)
OFFSETS = "__consumer_offsets"
TXN_STATE = "__transaction_state"
# A well-behaved client's round trip while another is refused; generous for a shared,
# loaded 2-core machine, yet far below any hang.
PROMPT_S = 5.0


def req(api: int, version: int, **fields: Any) -> Any:
    return build(request_type(api, version), **fields)


def create(client: WireClient, *specs: tuple[str, int, dict[str, str]]) -> list[Any]:
    return list(client.call(v.CREATE_TOPICS, 7, create_topics_request(*specs)).topics)


def create_one(client: WireClient, name: str, partitions: int = 1, **configs: str) -> Any:
    return create(client, (name, partitions, configs))[0]


def delete(client: WireClient, name: str | None, topic_id: uuid.UUID | None = None) -> Any:
    cls = request_type(v.DELETE_TOPICS, 6)
    state = nested(cls, "DeleteTopicState")
    request = cls(timeout=TIMEOUT, topics=(state(name=name, topic_id=topic_id),))
    return client.call(v.DELETE_TOPICS, 6, request).responses[0]


def metadata(client: WireClient, name: str, auto_create: bool = True) -> Any:
    cls = request_type(v.METADATA, 12)
    entry = nested(cls, "MetadataRequestTopic")(name=name, topic_id=None)
    request = build(
        cls,
        topics=(entry,),
        allow_auto_topic_creation=auto_create,
        include_topic_authorized_operations=False,
    )
    return client.call(v.METADATA, 12, request).topics[0]


def find_coordinator(client: WireClient, group: str) -> Any:
    return client.call(v.FIND_COORDINATOR, 3, req(v.FIND_COORDINATOR, 3, key=group, key_type=0))


def assert_prompt(port: int) -> None:
    """A second, well-behaved client is answered promptly."""
    started = time.monotonic()
    with_client = WireClient(port)
    try:
        versions = with_client.call(
            v.API_VERSIONS,
            3,
            req(v.API_VERSIONS, 3, client_software_name="t", client_software_version="1"),
        )
    finally:
        with_client.close()
    assert versions.error_code == ErrorCode.none
    assert time.monotonic() - started < PROMPT_S


def test_clients_cannot_create_or_delete_internal_topics(tmp_path: Path) -> None:
    overrides = {"offsets.topic.num.partitions": "3", "group.initial.rebalance.delay.ms": "0"}
    with BrokerProcess(tmp_path, overrides) as broker:
        client = WireClient(broker.port)
        # Created first by a client, with a shape that would break every group: refused.
        for name in (OFFSETS, TXN_STATE):
            refused = create_one(client, name, 1, **{"retention.ms": "1000"})
            assert refused.error_code == ErrorCode.invalid_topic_exception, name
            assert "internal topic" in refused.error_message
            assert_prompt(broker.port)
        # Names that would collide with an internal topic are refused too.
        refused = create_one(client, "__consumer.offsets")
        assert refused.error_code == ErrorCode.invalid_topic_exception
        assert refused.error_message == (
            "Topic '__consumer.offsets' collides with existing topic: __consumer_offsets"
        )
        # Metadata auto-creation does not create __transaction_state with default settings.
        assert metadata(client, TXN_STATE).error_code == ErrorCode.unknown_topic_or_partition

        # The coordinator still creates __consumer_offsets itself, with its own settings.
        assert find_coordinator(client, "g").error_code == ErrorCode.none
        offsets = metadata(client, OFFSETS)
        assert offsets.error_code == ErrorCode.none and offsets.is_internal
        assert len(offsets.partitions) == 3

        # Deletion is refused, by name and by topic id; the topic stays as it was.
        for by_name in (True, False):
            refused = delete(
                client, OFFSETS if by_name else None, None if by_name else offsets.topic_id
            )
            assert refused.error_code == ErrorCode.invalid_topic_exception
            assert refused.error_message == f"Cannot delete internal topic {OFFSETS}."
            assert_prompt(broker.port)
        assert delete(client, TXN_STATE).error_code == ErrorCode.invalid_topic_exception
        client.close()

        broker.restart()
        client = WireClient(broker.port)
        after = metadata(client, OFFSETS, auto_create=False)
        assert after.error_code == ErrorCode.none
        assert (after.topic_id, len(after.partitions)) == (offsets.topic_id, 3)
        assert metadata(client, TXN_STATE, False).error_code == (
            ErrorCode.unknown_topic_or_partition
        )
        client.close()


def test_names_colliding_on_dot_and_underscore_are_refused(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path) as broker:
        client = WireClient(broker.port)
        assert create_one(client, "a.b").error_code == ErrorCode.none
        refused = create_one(client, "a_b")
        assert refused.error_code == ErrorCode.invalid_topic_exception
        assert refused.error_message == "Topic 'a_b' collides with existing topic: a.b"
        # The same name is not a collision but an existing topic.
        assert create_one(client, "a.b").error_code == ErrorCode.topic_already_exists
        # Auto-creation refuses it the same way.
        auto = metadata(client, "a_b")
        assert auto.error_code == ErrorCode.invalid_topic_exception
        # Within one request, the later of two colliding names is refused.
        first, second = create(client, ("x_y.z", 1, {}), ("x.y_z", 1, {}))
        assert first.error_code == ErrorCode.none
        assert second.error_code == ErrorCode.invalid_topic_exception
        assert second.error_message == "Topic 'x.y_z' collides with existing topic: x_y.z"
        assert_prompt(broker.port)
        client.close()

        broker.restart()  # the rule holds against topics loaded from the metadata file
        client = WireClient(broker.port)
        assert create_one(client, "a_b").error_code == ErrorCode.invalid_topic_exception
        assert metadata(client, "a_b", auto_create=False).error_code == (
            ErrorCode.unknown_topic_or_partition
        )
        # Once the first is deleted, the other name is free.
        assert delete(client, "a.b").error_code == ErrorCode.none
        assert create_one(client, "a_b").error_code == ErrorCode.none
        client.close()


def test_admin_client_sees_internal_topics_refused(tmp_path: Path) -> None:
    """librdkafka's AdminClient surfaces Kafka's error, and keeps working afterwards."""
    with BrokerProcess(tmp_path) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for future in (
            admin.create_topics([NewTopic(OFFSETS, 1, 1)], operation_timeout=10)[OFFSETS],
            admin.delete_topics([OFFSETS], operation_timeout=10)[OFFSETS],
        ):
            with pytest.raises(KafkaException) as refused:
                future.result(timeout=30)
            assert refused.value.args[0].code() == KafkaError.TOPIC_EXCEPTION
        admin.create_topics([NewTopic("fine", 1, 1)])["fine"].result(timeout=30)
        assert "fine" in admin.list_topics(timeout=10).topics
        del admin  # before the broker stops, or librdkafka logs its reconnects


def test_offsets_topic_configs_change_as_in_kafka(tmp_path: Path) -> None:
    """Kafka lets a client with ALTER_CONFIGS on the topic change __consumer_offsets'
    configs, cleanup.policy=delete included, and so does Gregor. Retention then deletes
    committed offsets from the log; the coordinator keeps serving them from memory until
    it loads the partition again (a restart, a leadership move), and then they are gone,
    as in Kafka."""
    overrides = {"log.retention.check.interval.ms": "200", "offsets.topic.num.partitions": "1"}
    with BrokerProcess(tmp_path, overrides) as broker:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        create_one(WireClient(broker.port), "t")
        tp = TopicPartition("t", 0)
        groups = [f"g{i}" for i in range(5)]
        for group in groups:
            consumer = KafkaConsumer(
                bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False
            )
            consumer.assign([tp])
            consumer.commit({tp: OffsetAndMetadata(7, "", -1)})
            consumer.close()
        changed = {"cleanup.policy": "delete", "retention.ms": "100"}
        resource = ConfigResource(ConfigResourceType.TOPIC, OFFSETS, configs=changed)
        assert admin.alter_configs([resource]) == {"topic": {OFFSETS: "OK"}}

        offsets_tp = TopicPartition(OFFSETS, 0)
        reader = KafkaConsumer(bootstrap_servers=broker.bootstrap)
        deadline = time.monotonic() + 30
        while reader.beginning_offsets([offsets_tp])[offsets_tp] == 0:
            assert time.monotonic() < deadline, "retention never deleted __consumer_offsets"
            time.sleep(0.1)
        reader.close()

        def committed() -> list[int]:
            return [
                offsets[tp].offset if tp in offsets else -1
                for group in groups
                for offsets in admin.list_group_offsets(group).values()
            ]

        assert committed() == [7] * len(groups)  # still in the coordinator's memory
        admin.close()
        broker.restart()
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        assert committed() == [-1] * len(groups)  # the log no longer has them
        admin.close()
