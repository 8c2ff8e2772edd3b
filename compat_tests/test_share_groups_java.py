"""Share groups (KIP-932) with the Java client's KafkaShareConsumer (kafka-clients 4.3): a
topic read as a queue by 2 and 3 consumers, explicit RELEASE and REJECT, the delivery count
limit, and records redelivered after a consumer stops acknowledging or is killed (the tests
of ``compat_tests/share_checks.py``)."""

from __future__ import annotations

import pytest

from compat_tests import java_client as java
from compat_tests.broker import BrokerProcess
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

pytestmark = compat("java", "share-groups")


class JavaShareClient:
    name = "java"

    def command(self, bootstrap: str, topic: str, group: str, options: list[str]) -> list[str]:
        args = ["share-consume", "--bootstrap", bootstrap, "--topic", topic, "--group", group]
        return [*java.driver_command(), *args, *options]

    def earliest(self, broker: BrokerProcess, group: str) -> None:
        """share.auto.offset.reset=earliest through Admin.incrementalAlterConfigs (GROUP)."""
        options: dict[str, str | list[str]] = {
            "resource": f"group:{group}",
            "set": "share.auto.offset.reset=earliest",
        }
        (outcome,) = java.run("alter-configs", broker.bootstrap, group, options=options)
        assert outcome["error"] is None, outcome


@pytest.fixture
def share_client() -> JavaShareClient:
    return JavaShareClient()
