"""Share groups (KIP-932) with confluent-kafka's ShareConsumer (librdkafka 2.16: share
group APIs at v1): the checks of the Java client's ``test_share_groups_java.py``
(``compat_tests/share_checks.py``), each consumer a process of its own
(``compat_tests/confluent_share_member.py``)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from compat_tests import share_checks as checks
from compat_tests.broker import BrokerProcess
from compat_tests.cluster import ClusterBroker
from compat_tests.confluent_admin import admin
from compat_tests.group_checks import create_topic
from compat_tests.matrix import compat

pytestmark = compat("confluent", "share-groups")

BROKER_OVERRIDES = checks.BROKER_OVERRIDES
MEMBER = Path(__file__).resolve().parent / "confluent_share_member.py"


class ConfluentShareClient:
    def command(self, bootstrap: str, topic: str, group: str, options: list[str]) -> list[str]:
        return [sys.executable, str(MEMBER), bootstrap, topic, group, *options]

    def earliest(self, broker: BrokerProcess, group: str) -> None:
        """share.auto.offset.reset=earliest through incremental_alter_configs (GROUP)."""
        entry = ConfigEntry(
            "share.auto.offset.reset",
            "earliest",
            incremental_operation=AlterConfigOpType.SET,
        )
        resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])
        client = admin(broker)  # must outlive its futures
        client.incremental_alter_configs([resource])[resource].result(timeout=30)


@pytest.fixture
def partitions() -> int:
    """The topic's partitions; a test parametrised with ``partitions`` overrides it."""
    return 1


@pytest.fixture
def members(
    broker: BrokerProcess, new_topic: Callable[[str], str], partitions: int
) -> Iterator[checks.Members]:
    topic = create_topic(broker, new_topic("confluent-share"), partitions)
    with checks.members_of(ConfluentShareClient(), broker, topic) as members:
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
