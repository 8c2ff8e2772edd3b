"""AlterConfigs, IncrementalAlterConfigs and authorized operations in raw frames: the
request shapes real clients never send (duplicates, nulls, unknown types, another broker's
id), AlterConfigs' whole-set semantics, and the authorized-operations bitfields; plus the
pure rules of controller/configs.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from compat_tests.broker import BrokerProcess
from gregor.apis.context import NO_AUTHORIZED_OPERATIONS, build, nested
from gregor.controller.configs import (
    APPEND,
    DELETE,
    SET,
    SUBTRACT,
    apply_operations,
    check_group_configs,
)
from gregor.controller.metadata.config_resource import BROKER, GROUP, TOPIC, ConfigResource
from gregor.controller.topics import TopicError
from gregor.wire.schema import request_type
from gregor.wire.versions import (
    ALTER_CONFIGS,
    DESCRIBE_CLUSTER,
    DESCRIBE_CONFIGS,
    DESCRIBE_GROUPS,
    INCREMENTAL_ALTER_CONFIGS,
    METADATA,
)
from tests.kafka_wire import WireClient, create_topic

# Bitfields of AclOperation codes: READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8,
# CLUSTER_ACTION 9, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12.
TOPIC_OPERATIONS = 0b1101_1111_1000  # 3-8, 10, 11: what Kafka 4 answers (3576)
GROUP_OPERATIONS = 0b1101_0100_1000  # 3, 6, 8, 10, 11 (3400)
CLUSTER_OPERATIONS = 0b1_1111_1010_0000  # 5, 7-12 (8096)


# A broker of its own (not process_pool's): the tests alter broker-wide configs.
@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("configs")) as b:
        yield b


Config = tuple[str, int, str | None]  # name, operation (incremental only), value


def incremental(client: WireClient, resources: list[tuple[int, str, list[Config]]]) -> list:
    cls = request_type(INCREMENTAL_ALTER_CONFIGS, 1)
    resource, config = nested(cls, "AlterConfigsResource"), nested(cls, "AlterableConfig")
    request = cls(
        validate_only=False,
        resources=tuple(
            resource(
                resource_type=t,
                resource_name=n,
                configs=tuple(config(name=k, config_operation=op, value=v) for k, op, v in cs),
            )
            for t, n, cs in resources
        ),
    )
    return list(client.call(INCREMENTAL_ALTER_CONFIGS, 1, request).responses)


def legacy(client: WireClient, resource_type: int, name: str, configs: dict[str, str]) -> Any:
    cls = request_type(ALTER_CONFIGS, 2)
    resource, config = nested(cls, "AlterConfigsResource"), nested(cls, "AlterableConfig")
    request = cls(
        validate_only=False,
        resources=(
            resource(
                resource_type=resource_type,
                resource_name=name,
                configs=tuple(config(name=k, value=v) for k, v in configs.items()),
            ),
        ),
    )
    return client.call(ALTER_CONFIGS, 2, request).responses[0]


def described(client: WireClient, resource_type: int, name: str) -> dict[str, tuple[str, int]]:
    cls = request_type(DESCRIBE_CONFIGS, 4)
    resource = nested(cls, "DescribeConfigsResource")
    request = cls(
        include_synonyms=False,
        include_documentation=False,
        resources=(
            resource(resource_type=resource_type, resource_name=name, configuration_keys=None),
        ),
    )
    (result,) = client.call(DESCRIBE_CONFIGS, 4, request).results
    assert result.error_code == ErrorCode.none, result.error_message
    return {c.name: (c.value, c.config_source) for c in result.configs}


def errors(responses: list) -> list[tuple[ErrorCode, str | None]]:
    return [(r.error_code, r.error_message) for r in responses]


def test_request_shapes_refused_as_kafka_does(client: WireClient) -> None:
    assert create_topic(client, "shapes").error_code == ErrorCode.none
    ok = ("retention.ms", SET, "1000")
    assert errors(
        incremental(
            client,
            [
                (TOPIC, "shapes", [ok]),
                (TOPIC, "shapes", [ok]),
                (TOPIC, "", [ok]),
                (7, "x", [ok]),
                (BROKER, "1", [("log.retention.ms", SET, "1")]),
                (BROKER, "zero", [("log.retention.ms", SET, "1")]),
                (GROUP, "g1", [("consumer.session.timeout.ms", SET, None)]),
                (GROUP, "g2", [ok, ok]),
            ],
        )
    ) == [
        (ErrorCode.invalid_request, "Each resource must appear at most once."),
        (ErrorCode.invalid_request, "Each resource must appear at most once."),
        (ErrorCode.invalid_request, "Default topic resources are not allowed."),
        (ErrorCode.invalid_request, "Unknown resource type 7"),
        (ErrorCode.invalid_request, "Unexpected broker id, expected 0, but received 1"),
        (ErrorCode.invalid_request, "Node id must be an integer, but it is: zero"),
        (ErrorCode.invalid_request, "Null value not supported for : consumer.session.timeout.ms"),
        (ErrorCode.invalid_request, "Error due to duplicate config keys"),
    ]
    unknown_op = incremental(client, [(TOPIC, "shapes", [("retention.ms", 9, "1")])])
    assert errors(unknown_op) == [(ErrorCode.invalid_request, "Unknown operations type 9")]
    assert described(client, TOPIC, "shapes")["retention.ms"][1] == 5  # nothing changed


def test_legacy_alter_configs_replaces_the_whole_set(client: WireClient) -> None:
    assert (
        create_topic(client, "whole", configs={"retention.ms": "1000"}).error_code == ErrorCode.none
    )
    assert legacy(client, TOPIC, "whole", {"segment.ms": "60000"}).error_code == ErrorCode.none
    configs = described(client, TOPIC, "whole")
    assert configs["segment.ms"] == ("60000", 1)
    assert configs["retention.ms"] == ("604800000", 5)
    refused = legacy(client, BROKER, "0", {"broker.id": "3"})
    assert (refused.error_code, refused.error_message) == (
        ErrorCode.invalid_request,
        "Cannot update these configs dynamically: Set(broker.id)",
    )


def test_group_and_default_broker_resources(client: WireClient) -> None:
    assert errors(
        incremental(
            client,
            [
                (GROUP, "grp", [("consumer.session.timeout.ms", SET, "55000")]),
                (BROKER, "", [("log.cleanup.policy", APPEND, "compact")]),
            ],
        )
    ) == [(ErrorCode.none, None), (ErrorCode.none, None)]
    assert described(client, GROUP, "grp")["consumer.session.timeout.ms"] == ("55000", 8)
    assert described(client, GROUP, "other")["consumer.session.timeout.ms"] == ("45000", 5)
    assert described(client, BROKER, "") == {"log.cleanup.policy": ("delete,compact", 3)}
    assert described(client, BROKER, "0")["log.cleanup.policy"] == ("delete,compact", 3)
    incremental(client, [(BROKER, "", [("log.cleanup.policy", DELETE, None)])])
    assert described(client, BROKER, "") == {}


def test_authorized_operations_when_asked_and_when_not(client: WireClient) -> None:
    assert create_topic(client, "authz").error_code == ErrorCode.none
    for asked in (True, False):
        cls = request_type(METADATA, 10)
        request = build(
            cls,
            topics=(nested(cls, "MetadataRequestTopic")(name="authz", topic_id=None),),
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=asked,
            include_topic_authorized_operations=asked,
        )
        response = client.call(METADATA, 10, request)
        expected = (
            (TOPIC_OPERATIONS, CLUSTER_OPERATIONS) if asked else (NO_AUTHORIZED_OPERATIONS,) * 2
        )
        assert (
            response.topics[0].topic_authorized_operations,
            response.cluster_authorized_operations,
        ) == expected

        cls = request_type(DESCRIBE_CLUSTER, 1)
        request = build(cls, include_cluster_authorized_operations=asked, endpoint_type=1)
        operations = client.call(DESCRIBE_CLUSTER, 1, request).cluster_authorized_operations
        assert operations == (CLUSTER_OPERATIONS if asked else NO_AUTHORIZED_OPERATIONS)

        cls = request_type(DESCRIBE_GROUPS, 5)
        request = cls(groups=("any-group",), include_authorized_operations=asked)
        (group,) = client.call(DESCRIBE_GROUPS, 5, request).groups
        # As Kafka: reported for a group described without error only.
        described = asked and group.error_code == ErrorCode.none
        assert group.authorized_operations == (
            GROUP_OPERATIONS if described else NO_AUTHORIZED_OPERATIONS
        )


def test_incremental_operations() -> None:
    current = {"cleanup.policy": "delete", "retention.ms": "5"}
    assert apply_operations(
        TOPIC,
        current,
        [
            ("cleanup.policy", APPEND, "compact,delete"),
            ("retention.ms", DELETE, None),
            ("segment.ms", SET, "100"),
        ],
    ) == {"cleanup.policy": "delete,compact", "segment.ms": "100"}
    # From the default when the key is unset; subtracting what is absent is no error.
    assert apply_operations(TOPIC, {}, [("cleanup.policy", SUBTRACT, "delete,compact")]) == {
        "cleanup.policy": ""
    }
    with pytest.raises(TopicError) as refused:
        apply_operations(BROKER, {}, [("log.retention.ms", APPEND, "1")])
    assert (refused.value.code, refused.value.message) == (
        ErrorCode.invalid_config,
        "Config value append is not allowed for config key: log.retention.ms",
    )


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        (
            {"consumer.session.timeout.ms": "44999"},
            "consumer.session.timeout.ms must be "
            "greater than or equal to group.consumer.min.session.timeout.ms",
        ),
        (
            {"consumer.heartbeat.interval.ms": "15001"},
            "consumer.heartbeat.interval.ms must be "
            "less than or equal to group.consumer.max.heartbeat.interval.ms",
        ),
        (
            {"share.auto.offset.reset": "none"},
            "Invalid value none for configuration "
            "share.auto.offset.reset: String must be one of: latest, earliest",
        ),
        (
            {"consumer.session.timeout.ms": "x"},
            "Invalid value x for configuration "
            "consumer.session.timeout.ms: Not a number of type INT",
        ),
        ({"session.timeout.ms": "1"}, "Unknown group config name: session.timeout.ms"),
    ],
)
def test_group_config_rules(configs: dict[str, str], message: str) -> None:
    with pytest.raises(TopicError) as refused:
        check_group_configs(configs)
    assert (refused.value.code, refused.value.message) == (ErrorCode.invalid_config, message)


def test_entity_paths_round_trip() -> None:
    for resource, path in [
        (ConfigResource(TOPIC, "t"), "topics/t"),
        (ConfigResource(BROKER, ""), "brokers/<default>"),
        (ConfigResource(BROKER, "2"), "brokers/2"),
        (ConfigResource(GROUP, "g"), "groups/g"),
        (ConfigResource(GROUP, "a/b c%"), "groups/a%2Fb%20c%25"),
        (ConfigResource(GROUP, ".."), "groups/%2E%2E"),
    ]:
        assert resource.entity_path == path
        assert ConfigResource.from_entity_path(path) == resource
