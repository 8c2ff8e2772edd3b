"""Issue #7's exactly-once loop on a 3-broker cluster with RF=3: a consume-transform-produce
application (the Java driver's txn-copy, or confluent-kafka's in compat_tests/
txn_copy_confluent.py) copies an input topic to an output topic while the test kill -9s the
transaction coordinator's broker, a leader of an output partition and the application itself
(inside a transaction whose records are in the log), ROUNDS times each. Afterwards a
read_committed consumer reads every input record exactly once from the output (count, distinct
values, sum and CRC sum) and a read_uncommitted one also reads the aborted copies.

GREGOR_TXN_LOOP_RECORDS sets the record count (the issue's 1,000,000; 60,000 by default to
keep the suite's run time reasonable), GREGOR_TXN_LOOP_ROUNDS the rounds of kills (2).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaTimeoutError

from compat_tests import java_client as java
from compat_tests.broker import REPO_ROOT
from compat_tests.matrix import compat
from compat_tests.process_pool import ProcessPool
from compat_tests.txn_checks import TXN_OVERRIDES, wait_for
from gregor.server.harness.cluster import BrokerView, Cluster
from gregor.wire.schema import request_type
from tests.kafka_wire import WireClient

RECORDS = int(os.environ.get("GREGOR_TXN_LOOP_RECORDS", "60000"))
ROUNDS = int(os.environ.get("GREGOR_TXN_LOOP_ROUNDS", "2"))
PARTITIONS = 6
BROKERS = 3
FIND_COORDINATOR = 10
DESCRIBE_TRANSACTIONS = 65
TXN_KEY_TYPE = 1
OVERRIDES = {
    **TXN_OVERRIDES,
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    # A killed broker's partitions and coordinators move once its session expires: 4 s
    # instead of the harness's 6 s, still well above a loaded broker's pauses.
    "zookeeper.session.timeout.ms": "4000",
}
# A kill's effect must show within a broker restart (ZooKeeper session expiry and catch-up).
PROGRESS_TIMEOUT = 150.0
# An app silent for this long is hung and gets restarted, as a liveness probe would do. Longer
# than the app's API timeouts (10 s for confluent's, the Java client's 60 s defaults), so that
# a call that times out is not taken for a hang. librdkafka 2.16 hangs in
# send_offsets_to_transaction when its cached group coordinator is a broker that a Metadata
# answer dropped (confluentinc/librdkafka#5511, #5456: its timeout is never checked); Apache
# Kafka drops a dead broker at the same moment, so it hits Kafka too. It hit about one run in
# two: each hang costs this long.
HANG_S = {"confluent": 20.0, "java": 75.0}


class CopyApp:
    """The application under test, restarted whenever it exits short of its job (a kill, a
    fatal error) as a supervisor would. ``committed`` counts the records of every committed
    transaction over all its lives."""

    def __init__(self, cluster: Cluster, kind: str, source: str, sink: str, logs: Path) -> None:
        self.cluster = cluster
        self.logs = logs
        self.kind = kind
        self.source = source
        self.sink = sink
        self.group = f"copy-{uuid.uuid4().hex[:8]}"
        self.transactional_id = f"copy-{uuid.uuid4().hex[:8]}"
        self.hold_file = logs / "hold"
        self.holding = False
        self.committed = 0
        self.caught_up_end = -1
        self.lives = 0
        self.exits: list[int | str] = []
        self.last_event = time.monotonic()
        self._lock = threading.Lock()
        self.proc: subprocess.Popen[str] | None = None

    def _command(self) -> list[str]:
        bootstrap = self.cluster.bootstrap
        if self.kind == "confluent":
            module = "compat_tests.txn_copy_confluent"
            args = [bootstrap, self.source, self.sink, self.group, self.transactional_id]
            return [sys.executable, "-m", module, *args, str(self.hold_file)]
        configs = {"session.timeout.ms": "3000", "heartbeat.interval.ms": "500"}
        options = {
            "input": self.source,
            "group": self.group,
            "transactional-id": self.transactional_id,
            "hold-file": str(self.hold_file),
        }
        return java._command("txn-copy", bootstrap, self.sink, options, configs, None)

    def start(self) -> None:
        self.lives += 1
        self.holding = False
        self.last_event = time.monotonic()
        with open(self.logs / f"app-{self.lives}.log", "w") as stderr:
            self.proc = subprocess.Popen(
                self._command(),
                cwd=REPO_ROOT,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )
        threading.Thread(target=self._read, args=(self.proc,), daemon=True).start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if not line.startswith("{"):
                continue
            event = json.loads(line)
            with self._lock:
                self.last_event = time.monotonic()
                if event.get("event") == "committed":
                    self.committed += event["records"]
                elif event.get("event") == "caught-up":
                    self.caught_up_end = event["end"]
                elif event.get("event") == "holding":
                    self.holding = True

    def supervise(self) -> None:
        """Start it again if it exited, or kill -9 and start it again if it hangs."""
        assert self.proc is not None
        code = self.proc.poll()
        if code is not None:
            self.exits.append(code)
            self.start()
        elif time.monotonic() - self.last_event > HANG_S[self.kind]:
            self.exits.append("hung")
            self.kill()

    def kill(self) -> None:
        """kill -9, then a new life."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()
        self.start()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def wait(self, check: Callable[[], bool], what: str, timeout: float = PROGRESS_TIMEOUT) -> None:
        def holds() -> bool:
            self.supervise()
            with self._lock:
                return check()

        try:
            wait_for(holds, what, timeout)
        except AssertionError as e:
            raise AssertionError(f"{e} (app lives {self.lives}, exits {self.exits})") from None


def coordinator_of(cluster: Cluster, transactional_id: str) -> int:
    """The broker FindCoordinator (key type 1) names for the transactional id."""
    request = request_type(FIND_COORDINATOR, 4)(
        key_type=TXN_KEY_TYPE, coordinator_keys=(transactional_id,)
    )

    def ask() -> int | None:
        broker_id = cluster.running()[0]
        client = WireClient(cluster.brokers[broker_id].port)
        try:
            (answer,) = client.call(FIND_COORDINATOR, 4, request).coordinators
        finally:
            client.close()
        return int(answer.node_id) if answer.error_code == 0 else None

    return int(wait_for(ask, f"a coordinator for {transactional_id}"))  # type: ignore[arg-type]


def transaction_state(cluster: Cluster, transactional_id: str) -> str:
    """The state DescribeTransactions gives for the transactional id ("" if unknown)."""
    coordinator = coordinator_of(cluster, transactional_id)
    request = request_type(DESCRIBE_TRANSACTIONS, 0)(transactional_ids=(transactional_id,))
    client = WireClient(cluster.brokers[coordinator].port)
    try:
        (described,) = client.call(DESCRIBE_TRANSACTIONS, 0, request).transaction_states
    finally:
        client.close()
    return str(described.transaction_state) if described.error_code == 0 else ""


def fully_replicated(views: dict[int, BrokerView]) -> bool:
    """Every partition of every topic has all brokers in its ISR, as every broker sees it."""
    return all(
        len(p.isr) == BROKERS
        for view in views.values()
        for partitions in view.topics.values()
        for p in partitions.values()
    )


def restart_after(cluster: Cluster, broker_id: int, app: CopyApp, progress: int) -> None:
    """With ``broker_id`` dead, the app still commits ``progress`` more records; then the
    broker comes back and the cluster is whole again before the next kill."""
    mark = app.committed
    app.wait(lambda: app.committed >= mark + progress, f"progress without broker {broker_id}")
    cluster.restart(broker_id)
    cluster.wait_for_brokers(cluster.brokers, timeout=PROGRESS_TIMEOUT)
    cluster.wait_until(fully_replicated, "every ISR whole again", timeout=PROGRESS_TIMEOUT)


def kill_inside_transaction(cluster: Cluster, app: CopyApp, topic: str) -> None:
    """kill -9 the app while its transaction is open with records in the log, so that the
    kill leaves records to abort: asked to (its hold file), the app flushes its next
    transaction's records and waits there. Called before the input it is to copy arrives."""
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    bootstrap = cluster.bootstrap
    committed = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed")
    uncommitted = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_uncommitted")

    def end_offsets(consumer: KafkaConsumer) -> dict[TopicPartition, int] | None:
        """The partitions' end offsets as ``consumer`` sees them, None if a leader did not
        answer in time. Fresh metadata first: kafka-python 3.0 retries a ListOffsets that
        met NOT_LEADER_OR_FOLLOWER without refreshing its metadata, so once a leader moved
        (the preferred-leader rebalance after a restart) it asked the old one until its
        timeout."""
        consumer.topics()
        try:
            return consumer.end_offsets(tps, timeout_ms=10_000)
        except KafkaTimeoutError:
            return None

    def open_in_log() -> bool:
        lso = end_offsets(committed)
        hw = end_offsets(uncommitted)
        return lso is not None and hw is not None and any(hw[tp] > lso[tp] for tp in tps)

    try:
        app.wait(lambda: app.holding, "the app holding inside a transaction")
        app.hold_file.unlink()
        wait_for(open_in_log, "the held transaction's records in the log")
        assert transaction_state(cluster, app.transactional_id) == "Ongoing"
    finally:
        committed.close()
        uncommitted.close()
    app.kill()


def digest(bootstrap: str, topic: str, isolation: str) -> dict[str, int]:
    (line,) = java.run(
        "digest",
        bootstrap,
        topic,
        configs={"isolation.level": isolation},
        timeout=1200,
    )
    return line


def seq_produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    options = {"count": str(count), "from": str(start)}
    java.run("seq-produce", bootstrap, topic, options=options, configs={"acks": "all"}, timeout=600)


@pytest.mark.parametrize(
    "kind",
    [
        pytest.param("confluent", marks=compat("confluent", "transactions")),
        pytest.param("java", marks=compat("java", "transactions")),
    ],
)
def test_copy_exactly_once_through_kills(
    kind: str, tmp_path: Path, process_pool: ProcessPool
) -> None:
    # Both clients' runs share the cluster: each leaves every broker back and every ISR whole.
    cluster = process_pool.cluster(OVERRIDES, BROKERS)
    source = f"copy-in-{uuid.uuid4().hex[:8]}"
    sink = f"copy-out-{uuid.uuid4().hex[:8]}"
    for topic in (source, sink):
        options = {"partitions": str(PARTITIONS), "replication-factor": str(BROKERS)}
        java.run("create-topic", cluster.bootstrap, topic, options=options)
        cluster.wait_for_topic(topic, PARTITIONS, isr=BROKERS)
    # The input arrives in chunks, one per kill and a last one, so the app always has
    # work when a kill lands and cannot finish before the last.
    kills = ["coordinator", "leader", "app"] * ROUNDS
    chunk = RECORDS // (len(kills) + 1)
    app = CopyApp(cluster, kind, source, sink, tmp_path)
    app.start()
    try:
        for i, kill in enumerate(kills):
            if kill == "app":
                app.hold_file.touch()
                seq_produce(cluster.bootstrap, source, i * chunk, chunk)
                kill_inside_transaction(cluster, app, sink)
                continue
            seq_produce(cluster.bootstrap, source, i * chunk, chunk)
            mark = i * chunk + chunk // 4
            app.wait(lambda m=mark: app.committed >= m, f"{mark} records copied")
            victim = coordinator_of(cluster, app.transactional_id)
            if kill == "leader":
                leaders = {p.leader for p in cluster.wait_for_topic(sink, PARTITIONS).values()}
                victim = min(leaders - {victim} or leaders)
            cluster.kill(victim)
            restart_after(cluster, victim, app, chunk // 8)
        last = len(kills) * chunk
        seq_produce(cluster.bootstrap, source, last, RECORDS - last)
        app.wait(lambda: app.caught_up_end == RECORDS, f"all {RECORDS} records copied")
    finally:
        app.stop()

    expected = digest(cluster.bootstrap, source, "read_committed")
    assert expected["count"] == expected["distinct"] == RECORDS
    committed = digest(cluster.bootstrap, sink, "read_committed")
    assert committed == expected
    uncommitted = digest(cluster.bootstrap, sink, "read_uncommitted")
    assert uncommitted["distinct"] == RECORDS
    assert uncommitted["count"] > RECORDS, "no aborted record reached the log"
