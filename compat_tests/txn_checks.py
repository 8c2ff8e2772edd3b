"""Shared pieces of the transaction tests: a Java transactional producer driven one operation
at a time, and what a consumer of either isolation level reads back."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable

from kafka import KafkaAdminClient

from compat_tests import java_client as java
from compat_tests.broker import BrokerProcess

READ_COMMITTED = {"isolation.level": "read_committed"}
READ_UNCOMMITTED = {"isolation.level": "read_uncommitted"}
# The coordinator looks for expired transactions every second instead of every 10 s, so a
# transaction.timeout.ms of a few seconds is acted on within the test's wait.
TXN_OVERRIDES = {
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
}
TIMEOUT = 60.0


class JavaTxnSession:
    """One txn-session driver process: a KafkaProducer with a transactional.id, whose calls
    the test makes one by one."""

    def __init__(
        self,
        broker: BrokerProcess,
        topic: str,
        transactional_id: str,
        configs: dict[str, str] | None = None,
    ) -> None:
        args = ["--transactional-id", transactional_id]
        for key, value in (configs or {}).items():
            args += ["--config", f"{key}={value}"]
        command = java._command("txn-session", broker.bootstrap, topic, None, None, None)
        self.proc = subprocess.Popen(
            command + args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def call(self, op: str, **fields: object) -> dict:
        """Run one operation; its answer: {"op", "ok": true} or {"op", "error", "causes"}."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"op": op, **fields}) + "\n")
        self.proc.stdin.flush()
        while True:
            line = self.proc.stdout.readline()
            if not line:
                stderr = self.proc.stderr.read() if self.proc.stderr else ""
                raise AssertionError(f"txn-session exited during {op}:\n{stderr[-3000:]}")
            if line.startswith("{"):
                return json.loads(line)

    def ok(self, op: str, **fields: object) -> None:
        answer = self.call(op, **fields)
        assert answer.get("ok"), answer

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def fenced(answer: dict) -> bool:
    """The answer is a failure whose error or cause is Kafka's ProducerFencedException."""
    return "ProducerFencedException" in [answer.get("error"), *answer.get("causes", [])]


def read_values(broker: BrokerProcess, topic: str, isolation: dict[str, str]) -> list[str]:
    """Every value a Java consumer of that isolation level reads from the beginning up to the
    end offsets (the LSO for read_committed), in partition then offset order."""
    lines = java.run(
        "consume",
        broker.bootstrap,
        topic,
        options={"count": "1000000", "until-end": "true", "timeout-ms": "60000"},
        configs=isolation,
    )
    records = java.parse_consumed(lines)
    records.sort(key=lambda r: (r.partition, r.offset))
    return [(r.value or b"").decode() for r in records]


def end_offsets(broker: BrokerProcess, topic: str, isolation: dict[str, str]) -> dict[int, int]:
    """ListOffsets latest per partition, as a consumer of that isolation level asks it."""
    lines = java.run(
        "list-offsets", broker.bootstrap, topic, options={"spec": "latest"}, configs=isolation
    )
    return {line["partition"]: line["offset"] for line in lines}


def group_offsets(broker: BrokerProcess, group: str) -> dict[int, int]:
    """The group's committed offsets (OffsetFetch), by partition."""
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        offsets = admin.list_group_offsets(group).get(group, {})
        return {tp.partition: meta.offset for tp, meta in offsets.items() if meta.offset >= 0}
    finally:
        admin.close()


def wait_for(check: Callable[[], object], what: str, timeout: float = TIMEOUT) -> object:
    """Until ``check`` returns something truthy; return it. Fails naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.2)


def wait_for_offsets(broker: BrokerProcess, group: str, expected: dict[int, int]) -> None:
    """Until the group's committed offsets are ``expected``: a commit's markers reach
    ``__consumer_offsets`` after EndTxn is answered, as in Kafka."""
    wait_for(lambda: group_offsets(broker, group) == expected, f"{group}'s offsets {expected}")
