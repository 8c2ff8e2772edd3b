"""Benchmark scenarios. Each takes a running broker and returns named measurements;
the broker is only a parameter, so Gregor and Tansu go through exactly the same code."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from .brokers import Broker
from .drivers import (
    MIB,
    Client,
    ConfluentClient,
    DriverError,
    Endpoint,
    JavaClient,
    JavaDriver,
)
from .groups import (
    GROUP_MEMBERS,
    GROUP_PARTITIONS,
    JOIN_ROUNDS,
    commit_throughput,
    join_to_first_record,
)
from .procstats import cpu_seconds, memory_kib, minor_faults
from .spark import RECORD_SIZE as SPARK_RECORD_SIZE
from .spark import spark_batch_read
from .transactions import BIG_TXN, SMALL_TXN, transactional_throughput

GIB = 1 << 30
COMMIT_ROUNDS = 5
PARTITIONS = 1  # one partition: the per-partition append and fetch path, no client fan-out

TUNED = {"acks": "1", "linger.ms": "5", "batch.size": str(1 << 20)}
_TUNED = "acks=1 linger.ms=5 batch.size=1 MiB"
LATENCY_PRODUCER = {"acks": "1", "linger.ms": "0"}
LATENCY_RATE = 10_000
LATENCY_RECORD = 100


class ScenarioError(RuntimeError):
    """The run finished but its result is not usable (e.g. records missing)."""


@dataclass(frozen=True)
class Sizes:
    throughput_bytes: int  # per throughput scenario
    big_bytes: int  # the RSS scenario
    latency_seconds: float
    phase_seconds: float  # cap on one produce or consume phase
    big_seconds: float
    spark_records: int = 10_000_000  # the spark scenario's batch read


SIZES = {
    "small": Sizes(16 * MIB, 64 * MIB, 4, 30, 60, spark_records=1_000_000),
    "full": Sizes(256 * MIB, 2 * GIB, 30, 40, 240),
}


@dataclass
class Context:
    broker: Broker
    sizes: Sizes
    java: JavaDriver | None
    _topics: itertools.count = field(default_factory=itertools.count)

    def new_topic(self) -> str:
        name = f"bench-{next(self._topics)}"
        self.broker.create_topic(name, PARTITIONS)
        return name

    def java_client(self, producer: dict[str, str]) -> JavaClient:
        if self.java is None:
            raise DriverError("Java driver not prepared")
        return JavaClient(self.java, producer)


Measurements = dict[str, float]


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str  # "{big}" stands for the big volume of the chosen size
    kind: str  # which rows the report shows: throughput, big or latency
    uses_java: bool
    run: Callable[[Context], Measurements]
    # Runs alternating between the brokers, each on a fresh broker; the median is reported.
    # For the closest calls, so one slow moment of the machine does not decide them.
    rounds: int = 1


def _per_gib(cpu: float, nbytes: int) -> float:
    return cpu / (nbytes / GIB) if nbytes else float("nan")


def _throughput(ctx: Context, client: Client, size: int) -> Measurements:
    return throughput(ctx.broker.pid, ctx.broker.endpoint, ctx.new_topic(), client, size, ctx.sizes)


def throughput(
    pid: int, endpoint: Endpoint, topic: str, client: Client, size: int, sizes: Sizes
) -> Measurements:
    """Produce a fixed volume to ``topic``, then consume it all from the beginning, timing
    each phase and the CPU time of the broker process ``pid``."""
    records = sizes.throughput_bytes // size
    cpu0, faults0 = cpu_seconds(pid), minor_faults(pid)
    produced = client.produce(endpoint, topic, size, records, sizes.phase_seconds)
    cpu1, faults1 = cpu_seconds(pid), minor_faults(pid)
    consumed = client.consume(endpoint, topic, produced.records, sizes.phase_seconds)
    cpu2 = cpu_seconds(pid)
    if consumed.records != produced.records:
        raise ScenarioError(f"consumed {consumed.records} of {produced.records} records")
    return {
        "produced_mib": produced.bytes / MIB,
        "produce_mib_s": produced.mib_per_s,
        "produce_rec_s": produced.records_per_s,
        "consume_mib_s": consumed.mib_per_s,
        "consume_rec_s": consumed.records_per_s,
        "cpu_s_per_gib_produce": _per_gib(cpu1 - cpu0, produced.bytes),
        "cpu_s_per_gib_consume": _per_gib(cpu2 - cpu1, consumed.bytes),
        "cpu_s_per_gib": _per_gib(cpu2 - cpu0, produced.bytes + consumed.bytes),
        "faults_per_gib_produce": _per_gib(faults1 - faults0, produced.bytes),
        "peak_rss_mib": memory_kib(pid) / 1024,
    }


def _java(settings: dict[str, str], size: int) -> Callable[[Context], Measurements]:
    def run(ctx: Context) -> Measurements:
        return _throughput(ctx, ctx.java_client(settings), size)

    return run


def _confluent(size: int) -> Callable[[Context], Measurements]:
    return lambda ctx: _throughput(ctx, ConfluentClient(), size)


def _big(ctx: Context) -> Measurements:
    """Produce the big volume (2 GiB in full) and read the broker's peak RSS afterwards."""
    topic = ctx.new_topic()
    pid = ctx.broker.pid
    size = 1024
    records = ctx.sizes.big_bytes // size
    cpu0, faults0 = cpu_seconds(pid), minor_faults(pid)
    client = ctx.java_client(TUNED)
    produced = client.produce(ctx.broker.endpoint, topic, size, records, ctx.sizes.big_seconds)
    cpu1, faults1 = cpu_seconds(pid), minor_faults(pid)
    return {
        "produced_mib": produced.bytes / MIB,
        "produce_mib_s": produced.mib_per_s,
        "produce_rec_s": produced.records_per_s,
        "cpu_s_per_gib_produce": _per_gib(cpu1 - cpu0, produced.bytes),
        "faults_per_gib_produce": _per_gib(faults1 - faults0, produced.bytes),
        "peak_rss_mib": memory_kib(pid) / 1024,
        "rss_mib": memory_kib(pid, "VmRSS") / 1024,
    }


def _latency(ctx: Context) -> Measurements:
    """End-to-end latency at a fixed rate: one JVM produces nanoTime stamps and consumes them."""
    if ctx.java is None:
        raise DriverError("Java driver not prepared")
    topic = ctx.new_topic()
    seconds = ctx.sizes.latency_seconds
    options: dict[str, object] = {"topic": topic}
    options |= {"rate": LATENCY_RATE, "size": LATENCY_RECORD, "seconds": seconds, "warmup": 1}
    options |= {f"p.{key}": value for key, value in LATENCY_PRODUCER.items()}
    result = ctx.java.run("latency", ctx.broker.endpoint, options, timeout=seconds + 120)
    if result["received"] < result["sent"] or result["measured"] == 0:
        raise ScenarioError(f"received {result['received']} of {result['sent']} records")
    return {
        "p50_ms": result["p50_ms"],
        "p99_ms": result["p99_ms"],
        "max_ms": result["max_ms"],
        "records": result["measured"],
    }


_T = "throughput"
SCENARIOS = [
    Scenario("java-tuned-100b", f"Java, 100 B records, {_TUNED}", _T, True, _java(TUNED, 100)),
    Scenario("java-tuned-1kb", f"Java, 1 KiB records, {_TUNED}", _T, True, _java(TUNED, 1024)),
    Scenario("java-default-100b", "Java, 100 B records, defaults", _T, True, _java({}, 100)),
    Scenario("java-default-1kb", "Java, 1 KiB records, defaults", _T, True, _java({}, 1024)),
    Scenario("confluent-100b", "confluent-kafka, 100 B records", _T, False, _confluent(100)),
    Scenario("confluent-1kb", "confluent-kafka, 1 KiB records", _T, False, _confluent(1024)),
    Scenario("produce-2gb", f"Java, produce {{big}} of 1 KiB records, {_TUNED}", "big", True, _big),
    Scenario(
        "latency",
        f"Java end-to-end latency, {LATENCY_RATE} records/s of {LATENCY_RECORD} B, "
        "acks=1 linger.ms=0, consumer defaults",
        "latency",
        True,
        _latency,
    ),
    Scenario(
        "group-join",
        f"confluent-kafka, {GROUP_MEMBERS} consumers join a new group on "
        f"{GROUP_PARTITIONS} partitions (median of {JOIN_ROUNDS})",
        "group-join",
        False,
        lambda ctx: join_to_first_record(ctx.broker),
    ),
    Scenario(
        "group-commit",
        f"confluent-kafka, synchronous commits of {GROUP_PARTITIONS} offsets from one consumer "
        f"(median of {COMMIT_ROUNDS} alternating runs)",
        "group-commit",
        False,
        lambda ctx: commit_throughput(ctx.broker),
        rounds=COMMIT_ROUNDS,
    ),
    Scenario(
        "transactions",
        f"Java, 1 KiB records in transactions of {SMALL_TXN} and {BIG_TXN:,} (idempotent, "
        "acks=all), against idempotent produce; read_committed against read_uncommitted",
        "transactions",
        True,
        transactional_throughput,
    ),
    Scenario(
        "spark",
        f"Spark batch read (PySpark 4.3, local[2], built-in Kafka source) of "
        f"{SPARK_RECORD_SIZE} B records written by Java ({_TUNED}); 10,000,000 in full, "
        "1,000,000 in small",
        "spark",
        True,
        lambda ctx: spark_batch_read(ctx, TUNED),
    ),
]
BY_NAME = {s.name: s for s in SCENARIOS}
