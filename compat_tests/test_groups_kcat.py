"""kcat's balanced consumer (-C -G) in a group, seen through kafka-python's admin client."""

from __future__ import annotations

import signal
import subprocess
import threading
from collections.abc import Callable

from kafka import KafkaAdminClient
from kafka.errors import CoordinatorLoadInProgressError, CoordinatorNotAvailableError

from compat_tests import confluent_admin
from compat_tests.broker import BrokerProcess
from compat_tests.group_checks import SESSION_OVERRIDES, committed, end_offsets, wait_until
from compat_tests.matrix import compat

pytestmark = compat("kcat", "groups")

BROKER_OVERRIDES = SESSION_OVERRIDES
PARTITIONS = 4
PER_PARTITION = 10
TIMEOUT = 60


def test_balanced_consumer_group(broker: BrokerProcess, new_topic: Callable[[str], str]) -> None:
    topic = new_topic("kcat-group")
    group = f"{topic}-g"
    confluent_admin.create_topic(broker, topic, PARTITIONS)
    # Every partition gets records so that every partition has an offset to commit; a sticky
    # partitioner could otherwise put them all in one.
    for p in range(PARTITIONS):
        subprocess.run(
            ["kcat", "-b", broker.bootstrap, "-P", "-t", topic, "-p", str(p)],
            input=b"".join(b"v%d-%d\n" % (p, i) for i in range(PER_PARTITION)),
            check=True,
            timeout=60,
        )
    ends = end_offsets(broker.bootstrap, topic, PARTITIONS)
    assert ends == {p: PER_PARTITION for p in range(PARTITIONS)}

    listing = subprocess.run(
        ["kcat", "-b", broker.bootstrap, "-L", "-t", "__consumer_offsets"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert 'topic "__consumer_offsets" with 50 partitions' in listing

    consumer = subprocess.Popen(
        [
            "kcat",
            "-b",
            broker.bootstrap,
            "-C",
            "-u",
            "-G",
            group,
            "-X",
            "auto.offset.reset=earliest",
            "-f",
            "%p %o %s\n",
            topic,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert consumer.stdout is not None
    lines_out: list[bytes] = []
    reader = threading.Thread(
        target=lambda: lines_out.extend(iter(consumer.stdout.readline, b"")), daemon=True
    )
    reader.start()
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:

        def stable() -> bool:
            try:
                d = admin.describe_groups([group])[group]
            except (CoordinatorNotAvailableError, CoordinatorLoadInProgressError):
                # On a cluster kcat's first FindCoordinator creates __consumer_offsets; until
                # its partitions are led and loaded the coordinator is not available, as in
                # Kafka, and a client asks again.
                return False
            return d["group_state"] == "Stable" and len(d["members"]) == 1

        wait_until(stable, TIMEOUT, "kcat to join")
        described = admin.describe_groups([group])[group]
        assert described["protocol_type"] == "consumer"
        assert described["protocol_data"] in ("range", "roundrobin")
        (only,) = described["members"]
        assert only["client_id"] == "rdkafka"
        wait_until(
            lambda: len(lines_out) == PARTITIONS * PER_PARTITION,
            TIMEOUT,
            "kcat to consume everything",
        )
        consumer.send_signal(signal.SIGINT)  # kcat commits and leaves the group
        assert consumer.wait(TIMEOUT) == 0
        assert committed(admin, group) == ends
        wait_until(
            lambda: admin.describe_groups([group])[group]["group_state"] == "Empty",
            TIMEOUT,
            "the group to empty",
        )
        assert {
            "group_id": group,
            "protocol_type": "consumer",
            "group_state": "Empty",
            "group_type": "classic",
        } in admin.list_groups()
        assert admin.delete_groups([group]) == {group: "OK"}
        assert admin.list_group_offsets(group)[group] == {}
    finally:
        if consumer.poll() is None:
            consumer.kill()
            consumer.wait()
        admin.close()
