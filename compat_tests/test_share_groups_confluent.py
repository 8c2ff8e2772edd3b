"""Share groups (KIP-932) with confluent-kafka's ShareConsumer (librdkafka 2.16: share
group APIs at v1): the tests of ``compat_tests/share_checks.py``, as the Java client's
``test_share_groups_java.py`` runs them, each consumer a process of its own
(``compat_tests/confluent_share_member.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from compat_tests.broker import BrokerProcess
from compat_tests.confluent_admin import admin
from compat_tests.matrix import compat
from compat_tests.share_checks import (
    BROKER_OVERRIDES,
    members,
    partitions,
    test_a_killed_consumers_records_are_redelivered,
    test_a_record_released_past_the_delivery_count_limit_is_archived,
    test_acknowledgements_survive_kill9_of_the_share_coordinator_and_the_leader,
    test_explicit_release_redelivers_and_reject_does_not,
    test_held_records_are_redelivered_after_the_lock_duration,
    test_share_consumers_read_a_topic_as_a_queue,
)

# compat_tests/share_checks.py's tests, their fixtures and broker keys, run with this client.
__all__ = [
    "BROKER_OVERRIDES",
    "members",
    "partitions",
    "test_a_killed_consumers_records_are_redelivered",
    "test_a_record_released_past_the_delivery_count_limit_is_archived",
    "test_acknowledgements_survive_kill9_of_the_share_coordinator_and_the_leader",
    "test_explicit_release_redelivers_and_reject_does_not",
    "test_held_records_are_redelivered_after_the_lock_duration",
    "test_share_consumers_read_a_topic_as_a_queue",
]

pytestmark = compat("confluent", "share-groups")
MEMBER = Path(__file__).resolve().parent / "confluent_share_member.py"


class ConfluentShareClient:
    name = "confluent"

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
def share_client() -> ConfluentShareClient:
    return ConfluentShareClient()
