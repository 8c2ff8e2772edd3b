"""Share groups (KIP-932) with the Java client's KafkaShareConsumer (kafka-clients 4.3): a
topic read as a queue by 2 and 3 consumers, explicit RELEASE and REJECT, the delivery count
limit, and records redelivered after a consumer stops acknowledging or is killed (checks in
``compat_tests/share_checks.py``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from compat_tests import java_client as java
from compat_tests import share_checks as checks
from compat_tests.broker import BrokerProcess
from compat_tests.cluster import ClusterBroker
from compat_tests.group_checks import create_topic
from compat_tests.matrix import compat

pytestmark = compat("java", "share-groups")

BROKER_OVERRIDES = checks.BROKER_OVERRIDES


class JavaShareClient:
    def command(self, bootstrap: str, topic: str, group: str, options: list[str]) -> list[str]:
        args = ["share-consume", "--bootstrap", bootstrap, "--topic", topic, "--group", group]
        return ["java", *java.JVM_FLAGS, "-cp", java.classpath(), "GregorClient", *args, *options]

    def earliest(self, broker: BrokerProcess, group: str) -> None:
        """share.auto.offset.reset=earliest through Admin.incrementalAlterConfigs (GROUP)."""
        options: dict[str, str | list[str]] = {
            "resource": f"group:{group}",
            "set": "share.auto.offset.reset=earliest",
        }
        (outcome,) = java.run("alter-configs", broker.bootstrap, group, options=options)
        assert outcome["error"] is None, outcome


@pytest.fixture
def partitions() -> int:
    """The topic's partitions; a test parametrised with ``partitions`` overrides it."""
    return 1


@pytest.fixture
def members(
    broker: BrokerProcess, new_topic: Callable[[str], str], partitions: int
) -> Iterator[checks.Members]:
    topic = create_topic(broker, new_topic("java-share"), partitions)
    with checks.members_of(JavaShareClient(), broker, topic) as members:
        yield members


@pytest.mark.parametrize(("consumers", "partitions"), [(2, 1), (3, 1), (3, 4)])
def test_share_consumers_read_a_topic_as_a_queue(
    members: checks.Members, consumers: int, partitions: int
) -> None:
    checks.check_queue(members, consumers, partitions)


def test_explicit_release_redelivers_and_reject_does_not(members: checks.Members) -> None:
    checks.check_release_and_reject(members)


def test_a_record_released_past_the_delivery_count_limit_is_archived(
    members: checks.Members,
) -> None:
    checks.check_delivery_count_limit(members)


def test_held_records_are_redelivered_after_the_lock_duration(members: checks.Members) -> None:
    checks.check_held_records_redelivered_after_the_lock(members)


def test_a_killed_consumers_records_are_redelivered(members: checks.Members) -> None:
    checks.check_killed_consumer_records_redelivered(members)


@pytest.mark.parametrize("broker", ["cluster"], indirect=True)  # kills brokers of 3
def test_acknowledgements_survive_kill9_of_the_share_coordinator_and_the_leader(
    broker: ClusterBroker, members: checks.Members
) -> None:
    checks.check_acknowledgements_survive_kills(members, broker.cluster)
