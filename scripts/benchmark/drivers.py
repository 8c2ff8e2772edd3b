"""Load generators: the Java client (BenchClient.java in a JVM) and confluent-kafka (in process).

Both expose the same produce/consume calls so a scenario is written once per client kind.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import TopicMetadata

MIB = 1 << 20
# Failures surface as exceptions and delivery errors; librdkafka's log line per reconnect
# attempt would only flood the progress output once a broker has died.
QUIET = {"log_level": 0}


class DriverError(RuntimeError):
    """The client failed; the message carries the client's own error text."""


@dataclass(frozen=True)
class Endpoint:
    """Where the clients connect, and how they notice the broker died under them (so a run
    fails at once instead of after the clients' own minutes-long delivery timeouts)."""

    bootstrap: str
    alive: Callable[[], bool]

    def check(self, what: str) -> None:
        if not self.alive():
            raise DriverError(f"{what}: the broker process died")


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
    def produce(
        self, endpoint: Endpoint, topic: str, size: int, records: int, seconds: float
    ) -> Phase: ...

    def consume(self, endpoint: Endpoint, topic: str, records: int, seconds: float) -> Phase: ...


class JavaDriver:
    """Runs BenchClient in a fresh JVM per call; its last stdout line is a JSON result."""

    def __init__(self, classpath: str) -> None:
        self.classpath = classpath

    def run(
        self, mode: str, endpoint: Endpoint, options: dict[str, object], timeout: float
    ) -> dict[str, Any]:
        cmd = ["java", "-Xmx2g", "-cp", self.classpath, "BenchClient", mode]
        cmd.append(f"bootstrap={endpoint.bootstrap}")
        cmd += [f"{key}={value}" for key, value in options.items()]
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    out, err = proc.communicate(timeout=1)
                    break
                except subprocess.TimeoutExpired:
                    endpoint.check(f"java {mode}")
                    if time.monotonic() > deadline:
                        raise DriverError(f"java {mode} timed out after {timeout:.0f}s") from None
        finally:
            if proc.poll() is None:  # broker died, timeout, or Ctrl-C while waiting
                proc.kill()
                proc.communicate()
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
    """The Java client with a fixed set of producer settings (empty = the client's defaults)
    and ``security``: properties both the producer and the consumer take (security.protocol,
    ssl.*, sasl.*)."""

    def __init__(
        self, driver: JavaDriver, producer: dict[str, str], security: dict[str, str] | None = None
    ) -> None:
        self.driver = driver
        self.producer = producer
        self.security = security or {}

    def produce(
        self, endpoint: Endpoint, topic: str, size: int, records: int, seconds: float
    ) -> Phase:
        options: dict[str, object] = {"topic": topic, "size": size, "records": records}
        options["seconds"] = seconds
        options |= {f"p.{key}": value for key, value in {**self.security, **self.producer}.items()}
        return _phase(self.driver.run("produce", endpoint, options, timeout=seconds + 180))

    def consume(self, endpoint: Endpoint, topic: str, records: int, seconds: float) -> Phase:
        options: dict[str, object] = {"topic": topic, "records": records, "seconds": seconds}
        options |= {f"c.{key}": value for key, value in self.security.items()}
        return _phase(self.driver.run("consume", endpoint, options, timeout=seconds + 120))


def _phase(result: dict[str, Any]) -> Phase:
    return Phase(int(result["records"]), int(result["bytes"]), float(result["seconds"]))


class ConfluentClient:
    """confluent-kafka (librdkafka) with its default settings, driven from this process;
    ``security``: librdkafka properties both ends take (security.protocol, ssl.*, sasl.*)."""

    def __init__(self, security: dict[str, str] | None = None) -> None:
        self.security = security or {}

    def produce(
        self, endpoint: Endpoint, topic: str, size: int, records: int, seconds: float
    ) -> Phase:
        try:
            return self._produce(endpoint, topic, size, records, seconds)
        except KafkaException as e:
            endpoint.check("confluent-kafka produce")
            raise DriverError(f"confluent-kafka produce: {e}") from e

    def consume(self, endpoint: Endpoint, topic: str, records: int, seconds: float) -> Phase:
        try:
            return self._consume(endpoint, topic, records, seconds)
        except KafkaException as e:
            endpoint.check("confluent-kafka consume")
            raise DriverError(f"confluent-kafka consume: {e}") from e

    def _produce(
        self, endpoint: Endpoint, topic: str, size: int, records: int, seconds: float
    ) -> Phase:
        errors: list[KafkaError] = []

        def on_delivery(err: KafkaError | None, _msg: object) -> None:
            if err is not None:
                errors.append(err)

        producer = Producer(
            {
                "bootstrap.servers": endpoint.bootstrap,
                "delivery.report.only.error": True,  # no Python callback per record
                "on_delivery": on_delivery,
                **self.security,
                **QUIET,
            }
        )
        _metadata(producer, topic, endpoint)  # outside the timed section
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
                endpoint.check("confluent-kafka produce")
                if time.perf_counter() > deadline:
                    break
        remaining = producer.flush(1)
        while remaining and time.perf_counter() < deadline + 60:
            endpoint.check("confluent-kafka produce")
            remaining = producer.flush(1)
        elapsed = time.perf_counter() - start
        if errors or remaining:
            first = errors[0] if errors else f"{remaining} records unsent after flush"
            raise DriverError(f"confluent-kafka produce: {first}")
        return Phase(sent, sent * size, elapsed)

    def _consume(self, endpoint: Endpoint, topic: str, records: int, seconds: float) -> Phase:
        consumer = Consumer(
            {
                "bootstrap.servers": endpoint.bootstrap,
                "group.id": f"bench-{uuid.uuid4().hex}",  # required by the API; never joined
                "enable.auto.commit": False,
                "enable.partition.eof": False,
                # librdkafka stops fetching for this long whenever its local queue passes
                # queued.max.messages.kbytes (64 MiB). On loopback a broker fills that faster
                # than this loop drains it, and the default 1 s pause, the client's own, made
                # a run's figure depend on whether the fetcher happened to hit it (200 or
                # 900 MiB/s for the same broker). 10 ms keeps the flow control.
                "fetch.queue.backoff.ms": 10,
                **self.security,
                **QUIET,
            }
        )
        try:
            meta = _metadata(consumer, topic, endpoint)
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in meta.partitions])
            count = nbytes = 0
            start = time.perf_counter()
            deadline = start + seconds
            while count < records and time.perf_counter() < deadline:
                # No more than remain: consume() waits its whole timeout for a full batch.
                batch = min(10_000, records - count)
                messages = consumer.consume(num_messages=batch, timeout=0.5)
                if not messages:
                    endpoint.check("confluent-kafka consume")
                for message in messages:
                    if message.error():
                        raise DriverError(f"confluent-kafka consume: {message.error()}")
                    count += 1
                    nbytes += len(message)
            return Phase(count, nbytes, time.perf_counter() - start)
        finally:
            consumer.close()


def _metadata(client: Producer | Consumer, topic: str, endpoint: Endpoint) -> TopicMetadata:
    """The topic's metadata, retried in short steps so a dead broker is noticed at once."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return client.list_topics(topic, timeout=1).topics[topic]
        except KafkaException:
            endpoint.check(f"metadata for {topic}")
            if time.monotonic() > deadline:
                raise
