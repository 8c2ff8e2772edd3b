"""The Java Admin client's share group calls (kafka-clients 4.3) on a share group a
KafkaShareConsumer reads: listGroups with GroupType.SHARE, describeShareGroups,
listShareGroupOffsets (DescribeShareGroupOffsets), alterShareGroupOffsets (refused while the
group has a member; a new member then reads from the new start offsets),
deleteShareGroupOffsets and deleteShareGroups."""

from __future__ import annotations

from collections.abc import Callable

from compat_tests import java_client as java
from compat_tests import share_checks as checks
from compat_tests.broker import BrokerProcess
from compat_tests.group_checks import create_topic, wait_until
from compat_tests.matrix import compat
from compat_tests.test_share_groups_java import JavaShareClient

pytestmark = compat("java", "share-groups")

BROKER_OVERRIDES = checks.BROKER_OVERRIDES


def share_admin(
    broker: BrokerProcess, topic: str, group: str, action: str, **options: str | list[str]
) -> list[dict]:
    options = {"group": group, "action": action, **options}
    return java.run("share-admin", broker.bootstrap, topic, options=options)


def described(broker: BrokerProcess, topic: str, group: str) -> tuple[dict, dict[int, int]]:
    """describeShareGroups' group and listShareGroupOffsets' start offsets by partition."""
    lines = share_admin(broker, topic, group, "describe")
    (group_line,) = [e for e in lines if e["event"] == "described"]
    offsets = {e["partition"]: e["start_offset"] for e in lines if e["event"] == "offset"}
    return group_line, offsets


def listed(broker: BrokerProcess, topic: str, group: str) -> dict[str, tuple[str, str]]:
    lines = share_admin(broker, topic, group, "list")
    return {e["group"]: (e["type"], e["state"]) for e in lines}


def test_the_admin_client_manages_a_share_groups_offsets(
    broker: BrokerProcess, new_topic: Callable[[str], str]
) -> None:
    topic = create_topic(broker, new_topic("java-share-admin"), 2)
    checks.produce(broker, topic, range(10), 2)  # partition 0: 0, 2, ..., 8; 1: 1, 3, ..., 9
    with checks.members_of(JavaShareClient(), broker, topic) as members:
        group = members.group
        first = members.start()
        wait_until(checks.all_received([first], range(10)), checks.TIMEOUT, "every record")
        wait_until(
            lambda: described(broker, topic, group)[1] == {0: 5, 1: 5},
            checks.TIMEOUT,
            "the start offsets past every record",
        )
        assert listed(broker, topic, group)[group] == ("SHARE", "STABLE")
        state, _ = described(broker, topic, group)
        assert (state["state"], state["assignment_epoch"]) == ("STABLE", state["group_epoch"])
        (member,) = state["members"]
        assert (member["partitions"], member["member_epoch"]) == ([0, 1], state["group_epoch"])

        # Offsets are altered only once the group is Empty.
        (busy, _) = share_admin(broker, topic, group, "alter", offset=["0=1", "1=0"])
        assert busy["error"] == "GroupNotEmptyException", busy
        first.close()
        wait_until(
            lambda: described(broker, topic, group)[0]["state"] == "EMPTY",
            checks.TIMEOUT,
            "the group Empty",
        )
        altered = share_admin(broker, topic, group, "alter", offset=["0=1", "1=0"])
        assert [(e["partition"], e["error"]) for e in altered] == [(0, None), (1, None)]
        assert described(broker, topic, group)[1] == {0: 1, 1: 0}

        # A new member reads from there: all but partition 0's first record.
        second = members.start()
        wait_until(checks.all_received([second], range(1, 10)), checks.TIMEOUT, "the records")
        second.close()
        assert sorted(checks.values_of(second.received())) == [str(i) for i in range(1, 10)]
        wait_until(
            lambda: described(broker, topic, group)[0]["state"] == "EMPTY",
            checks.TIMEOUT,
            "the group Empty again",
        )

    (deleted,) = share_admin(broker, topic, group, "delete-offsets")
    assert deleted["error"] is None, deleted
    assert described(broker, topic, group)[1] == {}
    (gone,) = share_admin(broker, topic, group, "delete-group")
    assert gone["error"] is None, gone
    assert group not in listed(broker, topic, group)
