"""Load generators: the Java client (BenchClient.java in a JVM) and confluent-kafka (in process).

Both expose the same produce/consume calls so a scenario is written once per client kind.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from dataclasses import dataclass
from typing import Any, Protocol

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

MIB = 1 << 20


class DriverError(RuntimeError):
    """The client failed; the message carries the client's own error text."""


@dataclass(frozen=True)
class Phase:
    """One timed produce or consume run."""

    records: int
    bytes: int
    seconds: float

    @property
    def mib_per_s(self) -> float:
        return self.bytes / MIB / self.seconds if self.seconds > 0 else 0.0

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0


class Client(Protocol):
    label: str

    def produce(
        self, bootstrap: str, topic: str, size: int, records: int, seconds: float
    ) -> Phase: ...

    def consume(self, bootstrap: str, topic: str, records: int, seconds: float) -> Phase: ...


class JavaDriver:
    """Runs BenchClient in a fresh JVM per call; its last stdout line is a JSON result."""

    def __init__(self, classpath: str) -> None:
        self.classpath = classpath

    def run(self, mode: str, options: dict[str, object], timeout: float) -> dict[str, Any]:
        cmd = ["java", "-Xmx2g", "-cp", self.classpath, "BenchClient", mode]
        cmd += [f"{key}={value}" for key, value in options.items()]
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            raise DriverError(f"java {mode} timed out after {timeout:.0f}s\n{_tail(err)}") from None
        finally:
            if proc.poll() is None:  # Ctrl-C while waiting
                proc.kill()
                proc.wait()
        lines = out.decode(errors="replace").strip().splitlines()
        try:
            result = json.loads(lines[-1])
        except (IndexError, ValueError):
            raise DriverError(f"java {mode} exited {proc.returncode}:\n{_tail(err)}") from None
        if result.get("error") or proc.returncode != 0:
            raise DriverError(f"java {mode}: {result.get('error')}\n{_tail(err)}")
        return result


def _tail(stderr: bytes, lines: int = 15) -> str:
    return "\n".join(stderr.decode(errors="replace").splitlines()[-lines:])


class JavaClient:
    """The Java client with a fixed set of producer settings (empty = the client's defaults)."""

    def __init__(self, driver: JavaDriver, label: str, producer: dict[str, str]) -> None:
        self.driver = driver
        self.label = label
        self.producer = producer

    def produce(self, bootstrap: str, topic: str, size: int, records: int, seconds: float) -> Phase:
        options: dict[str, object] = {"bootstrap": bootstrap, "topic": topic, "size": size}
        options |= {"records": records, "seconds": seconds}
        options |= {f"p.{key}": value for key, value in self.producer.items()}
        return _phase(self.driver.run("produce", options, timeout=seconds + 180))

    def consume(self, bootstrap: str, topic: str, records: int, seconds: float) -> Phase:
        options = {"bootstrap": bootstrap, "topic": topic, "records": records, "seconds": seconds}
        return _phase(self.driver.run("consume", options, timeout=seconds + 120))


def _phase(result: dict[str, Any]) -> Phase:
    return Phase(int(result["records"]), int(result["bytes"]), float(result["seconds"]))


class ConfluentClient:
    """confluent-kafka (librdkafka) with its default settings, driven from this process."""

    label = "confluent-kafka"

    def produce(self, bootstrap: str, topic: str, size: int, records: int, seconds: float) -> Phase:
        errors: list[KafkaError] = []

        def on_delivery(err: KafkaError | None, _msg: object) -> None:
            if err is not None:
                errors.append(err)

        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "delivery.report.only.error": True,  # no Python callback per record
                "on_delivery": on_delivery,
                "log_level": 3,
            }
        )
        producer.list_topics(topic, timeout=30)  # metadata outside the timed section
        value = os.urandom(size)
        start = time.perf_counter()
        deadline = start + seconds
        sent = 0
        while sent < records and not errors:
            try:
                producer.produce(topic, value)
                sent += 1
            except BufferError:
                producer.poll(0.01)  # local queue full: let librdkafka drain it
                if time.perf_counter() > deadline:
                    break
        remaining = producer.flush(60)
        elapsed = time.perf_counter() - start
        if errors or remaining:
            first = errors[0] if errors else f"{remaining} records unsent after flush"
            raise DriverError(f"confluent-kafka produce: {first}")
        return Phase(sent, sent * size, elapsed)

    def consume(self, bootstrap: str, topic: str, records: int, seconds: float) -> Phase:
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"bench-{uuid.uuid4().hex}",  # required by the API; never joined
                "enable.auto.commit": False,
                "enable.partition.eof": False,
                "log_level": 3,
            }
        )
        try:
            meta = consumer.list_topics(topic, timeout=30).topics[topic]
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in meta.partitions])
            count = size = 0
            start = time.perf_counter()
            deadline = start + seconds
            while count < records and time.perf_counter() < deadline:
                for message in consumer.consume(num_messages=10_000, timeout=0.5):
                    if message.error():
                        raise DriverError(f"confluent-kafka consume: {message.error()}")
                    count += 1
                    size += len(message)
            return Phase(count, size, time.perf_counter() - start)
        finally:
            consumer.close()
