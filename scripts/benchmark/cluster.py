"""Cluster benchmarks (`scripts/bench cluster`): one local ZooKeeper and 3 Gregor brokers
(server/harness/cluster.py), measured with the single-node benchmark's clients.

- throughput: the Java client produces into a replication-factor-3 topic with acks=all and
  with acks=1, and into a single embedded node (no ZooKeeper) with acks=all; the three
  alternate run by run (A B C A B C ...) and the ratios are taken within each round.
- failover: a confluent-kafka and a Java producer each write a record every few
  milliseconds with acks=all while the leader of their partition is killed (kill -9), 10
  times; measured from the kill to each one's first successful write, with ZooKeeper's and
  the controller's logs and every surviving broker's Metadata to break the time down.
- shutdown: the same with a controlled shutdown (SIGTERM) of the leader: failed writes and
  the longest write.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from gregor.server.harness.cluster import TEST_DEFAULTS, Cluster, metadata

from .artifacts import ensure_java_driver
from .brokers import GREGOR, Broker
from .drivers import QUIET, Endpoint, JavaClient, JavaDriver
from .procstats import DROP_PAGE_CACHE_HELP, cpu_seconds, settle_page_cache
from .scenarios import SIZES, TUNED, Sizes

PARTS = ("throughput", "failover", "shutdown")
BROKERS = 3
REPLICATION = 3
RECORD = 1024
# The harness cluster's default (Kafka's is 18000): a dead broker is noticed in 6 s.
SESSION_TIMEOUT_MS = int(TEST_DEFAULTS["zookeeper.session.timeout.ms"])
# The writers' producer settings: each client's defaults (both: linger.ms=5, retries without
# limit, retry.backoff.ms=100 growing to retry.backoff.max.ms=1000; Java: idempotent,
# delivery.timeout.ms=120000; librdkafka: message.timeout.ms=300000), acks=all said out loud.
WRITER = {"acks": "all"}
WRITE_INTERVAL_S = 0.005
POLL_S = 0.02  # how often the surviving brokers' Metadata is read during a failover
OUTAGE_LIMIT_S = 60.0
# No preferred-leader moves behind the benchmark's back (Kafka's first check runs 5 s after
# a controller failover): a killed broker's partition keeps its new leader after the restart.
FAILOVER_OVERRIDES = {"auto.leader.rebalance.enable": "false"}


def _failover_cluster(work: Path, session_timeout_ms: int) -> Cluster:
    timeout = {"zookeeper.session.timeout.ms": str(session_timeout_ms)}
    return Cluster(work, BROKERS, FAILOVER_OVERRIDES | timeout)


def _log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# --- throughput ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    name: str
    title: str
    acks: str
    on_cluster: bool


VARIANTS = (
    Variant("rf3-acks-all", f"{BROKERS} brokers, RF={REPLICATION}, acks=all", "all", True),
    Variant("rf3-acks-1", f"{BROKERS} brokers, RF={REPLICATION}, acks=1", "1", True),
    Variant("single-acks-all", "single embedded node, RF=1, acks=all", "all", False),
)


def create_replicated_topic(cluster: Cluster, name: str) -> None:
    """A 1-partition topic on all 3 brokers, once every broker sees its full ISR."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **QUIET})
    future = admin.create_topics(
        [NewTopic(name, num_partitions=1, replication_factor=REPLICATION)], operation_timeout=30
    )[name]
    future.result(timeout=60)
    cluster.wait_for_topic(name, 1, isr=REPLICATION)


def _cluster_endpoint(cluster: Cluster) -> Endpoint:
    return Endpoint(cluster.bootstrap, lambda: len(cluster.running()) == BROKERS)


def throughput(
    work: Path, sizes: Sizes, java: JavaDriver, rounds: int, *, settle: bool = False
) -> dict:
    """Produce rate of each variant per round, their medians, and the within-round ratios;
    with ``settle``, the page cache is dropped before each run (see settle_page_cache)."""
    records = sizes.throughput_bytes // RECORD
    runs: dict[str, list[dict]] = {v.name: [] for v in VARIANTS}
    with Cluster(work / "throughput", BROKERS) as cluster, Broker(GREGOR, work / "single") as one:
        topics = itertools.count()
        for round_ in range(rounds):
            for variant in VARIANTS:
                topic = f"bench-{next(topics)}"
                if variant.on_cluster:
                    create_replicated_topic(cluster, topic)
                    endpoint = _cluster_endpoint(cluster)
                    leader = cluster.wait_for_leader(topic, 0).leader
                    pids = {b: cluster.brokers[b].pid for b in sorted(cluster.brokers)}
                else:
                    one.create_topic(topic, 1)
                    endpoint, leader, pids = one.endpoint, 0, {0: one.pid}
                client = JavaClient(java, {**TUNED, "acks": variant.acks})
                if settle and not settle_page_cache():
                    _log("  the page cache could not be dropped (needs root); measuring anyway")
                    settle = False
                cpu0 = {b: cpu_seconds(pid) for b, pid in pids.items()}
                phase = client.produce(endpoint, topic, RECORD, records, sizes.phase_seconds)
                gib = phase.bytes / (1 << 30)
                cpu = {b: (cpu_seconds(pid) - cpu0[b]) / gib for b, pid in pids.items()}
                followers = [c for b, c in cpu.items() if b != leader]
                run = {
                    "produce_mib_s": phase.mib_per_s,
                    "produce_rec_s": phase.records_per_s,
                    "cpu_s_per_gib": sum(cpu.values()),
                    "leader_cpu_s_per_gib": cpu[leader],
                }
                if followers:
                    run["follower_cpu_s_per_gib"] = statistics.mean(followers)
                runs[variant.name].append(run)
                _log(
                    f"  round {round_ + 1} {variant.title}: {phase.mib_per_s:.1f} MiB/s, "
                    f"CPU s/GiB: all brokers {run['cpu_s_per_gib']:.1f}, leader "
                    f"{cpu[leader]:.1f}"
                    + (f", a follower {run['follower_cpu_s_per_gib']:.1f}" if followers else "")
                )
    return summarize_throughput(runs) | {"page_cache_dropped": settle}


def summarize_throughput(runs: dict[str, list[dict]]) -> dict:
    """Medians per variant and the median of each round's paired ratios."""

    def paired(a: str, b: str, key: str = "produce_mib_s", key_b: str | None = None) -> float:
        pairs = zip(runs[a], runs[b], strict=True)
        return statistics.median(x[key] / y[key_b or key] for x, y in pairs)

    medians = {
        name: {key: statistics.median(r[key] for r in rs) for key in rs[0]}
        for name, rs in runs.items()
    }
    replicated = "rf3-acks-all"
    return {
        "variants": medians,
        "rounds": runs,
        "ratio_all_vs_1": paired(replicated, "rf3-acks-1"),
        "ratio_all_vs_single": paired(replicated, "single-acks-all"),
        "cpu_ratio_all_vs_single": paired(replicated, "single-acks-all", "cpu_s_per_gib"),
        "cpu_ratio_follower_vs_leader": paired(
            replicated, replicated, "follower_cpu_s_per_gib", "leader_cpu_s_per_gib"
        ),
    }


# --- failover ----------------------------------------------------------------------------------


Delivery = tuple[float, float, bool]  # sent, answered (time.monotonic()), failed


class Writer:
    """A producer writing one small record every WRITE_INTERVAL_S with acks=all from its
    own thread or process; every answer is kept as a Delivery."""

    label: str

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.deliveries: list[Delivery] = []
        self.error: str | None = None

    def __enter__(self) -> Writer:
        self.start()
        try:
            self.wait_for_success_after(time.monotonic(), 60.0)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        """Stop writing, flush, and wait until every record is answered."""
        raise NotImplementedError

    def wait_for_success_after(self, since: float, timeout: float) -> float:
        """When the first record sent at or after ``since`` was written."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.error:
                raise RuntimeError(f"{self.label} writer failed: {self.error}")
            ok = [a for (s, a, failed) in self.deliveries if s >= since and not failed]
            if ok:
                return min(ok)
            time.sleep(0.01)  # answers come from another thread; nothing to await
        raise TimeoutError(f"{self.label}: no successful write within {timeout:.0f} s")

    def since(self, start: float) -> list[Delivery]:
        return [d for d in self.deliveries if d[0] >= start]


class ConfluentWriter(Writer):
    label = "confluent-kafka"

    def start(self) -> None:
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="writer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(60)

    def _run(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, **WRITER, **QUIET})
        try:
            while not self._stopping.is_set():
                sent = time.monotonic()
                producer.produce(self.topic, b"x" * 100, on_delivery=self._answer(sent))
                producer.poll(WRITE_INTERVAL_S)
            producer.flush(30)
        except Exception as e:  # noqa: BLE001 - reported by the measuring thread
            self.error = repr(e)

    def _answer(self, sent: float) -> Callable[[KafkaError | None, object], None]:
        def delivered(err: KafkaError | None, _msg: object) -> None:
            self.deliveries.append((sent, time.monotonic(), err is not None))

        return delivered


class JavaWriter(Writer):
    """BenchClient's writer mode in a JVM: a line per answer, stamped with System.nanoTime(),
    which is CLOCK_MONOTONIC as time.monotonic() is; it stops when its stdin closes."""

    label = "Java"

    def __init__(self, bootstrap: str, topic: str, classpath: str) -> None:
        super().__init__(bootstrap, topic)
        self.classpath = classpath

    def start(self) -> None:
        options = {"bootstrap": self.bootstrap, "topic": self.topic}
        options |= {"interval.ms": WRITE_INTERVAL_S * 1000}
        options |= {f"p.{key}": value for key, value in WRITER.items()}
        cmd = ["java", "-Xmx256m", "-cp", self.classpath, "BenchClient", "writer"]
        self._proc = subprocess.Popen(
            cmd + [f"{k}={v}" for k, v in options.items()],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, name="java-writer", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            if line.startswith("{"):
                self.error = json.loads(line)["error"] or self.error
                continue
            sent, answered, ok = line.split()
            self.deliveries.append((int(sent) / 1e9, int(answered) / 1e9, ok != "1"))
        if self._proc.wait() != 0:
            self.error = self.error or f"exit status {self._proc.returncode}"

    def stop(self) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.close()
        try:
            self._proc.wait(60)
        finally:
            self._proc.kill()
        self._reader.join(10)


# Broker lines start "[2026-11-23 14:35:08,790]", ZooKeeper's "2026-11-23 14:35:08,790".
_LOG_TIME = re.compile(r"^\[?(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})")
_SESSION_ID = re.compile(r"ZooKeeper session CONNECTED \(session id (0x[0-9a-f]+)\)")


def log_time(path: Path, needle: str, after: float) -> float | None:
    """The wall-clock time of the first line of a log containing ``needle`` and logged at
    or after ``after`` (time.time() seconds)."""
    for line in path.read_text(errors="replace").splitlines():
        match = _LOG_TIME.match(line)
        if match is None or needle not in line:
            continue
        stamp = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        if stamp >= after - 0.001:
            return stamp
    return None


def _session_id(path: Path) -> str | None:
    """The ZooKeeper session a broker last opened, from its log."""
    found = _SESSION_ID.findall(path.read_text(errors="replace"))
    return found[-1] if found else None


def _leader_everywhere(cluster: Cluster, topic: str, excluded: int) -> int | None:
    """The leader of partition 0 once every surviving broker names the same one, not
    ``excluded``; None while they do not."""
    leaders = set()
    for broker_id in cluster.running():
        try:
            view = metadata(cluster.brokers[broker_id].port, 1.0)
        except (OSError, ValueError):
            return None
        state = view.topics.get(topic, {}).get(0)
        leaders.add(None if state is None else state.leader)
    (leader,) = leaders if len(leaders) == 1 else (None,)
    return leader if leader is not None and leader >= 0 and leader != excluded else None


def _writers(stack: contextlib.ExitStack, cluster: Cluster, topic: str, java: str) -> list[Writer]:
    """Both clients writing to ``topic`` at once, for the whole ``stack``."""
    made = (ConfluentWriter(cluster.bootstrap, topic), JavaWriter(cluster.bootstrap, topic, java))
    return [stack.enter_context(writer) for writer in made]


def failover(
    work: Path, kills: int, java: str, session_timeout_ms: int = SESSION_TIMEOUT_MS
) -> dict:
    """kill -9 of the partition's leader, ``kills`` times, under both writers; each kill
    broken down into ZooKeeper expiring the broker's session, the controller noticing (its
    watch fired), every survivor naming the new leader in Metadata, and each writer's first
    successful write of a record sent after the kill."""
    topic = "failover"
    samples = []
    with (
        _failover_cluster(work / "failover", session_timeout_ms) as cluster,
        contextlib.ExitStack() as stack,
    ):
        create_replicated_topic(cluster, topic)
        writers = _writers(stack, cluster, topic, java)
        for i in range(kills):
            leader, controller = _leader_not_controller(cluster, topic)
            session = _session_id(cluster.brokers[leader].log_path)
            wall, start = time.time(), time.monotonic()
            cluster.kill(leader)
            metadata_at = None
            while metadata_at is None and time.monotonic() - start < OUTAGE_LIMIT_S:
                if _leader_everywhere(cluster, topic, leader) is not None:
                    metadata_at = time.monotonic()
                else:
                    time.sleep(POLL_S)
            sample = {"killed": leader, "controller": controller}
            expired = log_time(cluster.zookeeper.log_path, f"Expiring session {session}", wall)
            sample["expired_s"] = None if expired is None else expired - wall
            noticed = log_time(cluster.brokers[controller].log_path, f"left [{leader}]", wall)
            sample["noticed_s"] = None if noticed is None else noticed - wall
            sample["metadata_s"] = None if metadata_at is None else metadata_at - start
            for writer in writers:
                written = writer.wait_for_success_after(start, OUTAGE_LIMIT_S)
                sample[f"{writer.label} write_s"] = written - start
            samples.append(sample)
            _log(f"  kill {i + 1}/{kills}: " + _describe(sample))
            cluster.restart(leader)
            cluster.wait_for_topic(topic, 1, isr=REPLICATION)
    return summarize_failover(samples, [w.label for w in writers], session_timeout_ms)


def _leader_not_controller(cluster: Cluster, topic: str) -> tuple[int, int]:
    """The partition's leader and the controller, once they differ: a broker leading both
    is bounced cleanly first (controller failover with many partitions is measured by
    cluster_scale.py), so a kill measures a partition failover alone."""
    while True:
        leader = cluster.wait_for_topic(topic, 1, isr=REPLICATION)[0].leader
        controller = cluster.wait_for_controller()
        if controller != leader:
            return leader, controller
        cluster.stop(leader)
        cluster.wait_for_controller(not_in=[leader])
        cluster.restart(leader)


def _describe(sample: dict) -> str:
    parts = [f"broker {sample['killed']}"]
    for key, value in sample.items():
        if key.endswith("_s"):
            parts.append(f"{key[:-2]} {'?' if value is None else f'{value:.2f} s'}")
    return ", ".join(parts)


def summarize_failover(samples: list[dict], writers: list[str], session_timeout_ms: int) -> dict:
    def median(key: str) -> float | None:
        values = [s[key] for s in samples if s[key] is not None]
        return statistics.median(values) if values else None

    return {
        "kills": len(samples),
        "session_timeout_s": session_timeout_ms / 1000,
        "median_expired_s": median("expired_s"),
        "median_noticed_s": median("noticed_s"),
        "median_metadata_s": median("metadata_s"),
        "writers": {
            label: {
                "median_write_s": median(f"{label} write_s"),
                "max_write_s": max(s[f"{label} write_s"] for s in samples),
            }
            for label in writers
        },
        "samples": samples,
    }


def shutdown(
    work: Path, stops: int, java: str, session_timeout_ms: int = SESSION_TIMEOUT_MS
) -> dict:
    """SIGTERM (a controlled shutdown) of the partition's leader under both writers,
    ``stops`` times, each followed by the broker's restart and return to the ISR: per
    writer, the writes that failed and the longest write over the whole run."""
    topic = "shutdown"
    stop_s = []
    with (
        _failover_cluster(work / "shutdown", session_timeout_ms) as cluster,
        contextlib.ExitStack() as stack,
    ):
        create_replicated_topic(cluster, topic)
        writers = _writers(stack, cluster, topic, java)
        # When each shutdown began and each restart began: writes sent in between saw the
        # shutdown, the others the broker's return (registration, catching up, ISR).
        shutdowns, restarts = [], []
        for i in range(stops):
            leader = cluster.wait_for_topic(topic, 1, isr=REPLICATION)[0].leader
            shutdowns.append(time.monotonic())
            cluster.stop(leader)
            restarts.append(time.monotonic())
            stop_s.append(restarts[-1] - shutdowns[-1])
            _log(f"  stop {i + 1}/{stops}: broker {leader} stopped in {stop_s[-1]:.2f} s")
            cluster.restart(leader)
            cluster.wait_for_topic(topic, 1, isr=REPLICATION)
        stack.close()  # the writers flush: every write is answered
    result: dict = {"stops": stops, "median_stop_s": statistics.median(stop_s), "writers": {}}
    phases = list(zip(shutdowns, restarts, strict=True))
    for writer in writers:
        window = writer.since(shutdowns[0])
        in_shutdown = [d for d in window if any(a <= d[0] < b for a, b in phases)]
        result["writers"][writer.label] = {
            "writes": len(window),
            "failed": sum(1 for _, _, failed in window if failed),
            "max_write_ms": _longest_ms(window),
            "max_write_in_shutdown_ms": _longest_ms(in_shutdown),
        }
    return result


def _longest_ms(deliveries: list[Delivery]) -> float:
    return 1000 * max((answered - sent for sent, answered, _ in deliveries), default=0.0)


# --- report ------------------------------------------------------------------------------------


def _s(value: float | None) -> str:
    return "?" if value is None else f"{value:.2f} s"


def report(results: dict) -> str:
    lines = []
    if "throughput" in results:
        t = results["throughput"]
        lines += [
            f"Produce, Java client, {RECORD} B records, "
            + " ".join(f"{k}={v}" for k, v in TUNED.items() if k != "acks")
            + f", 1 partition, median of {len(t['rounds']['rf3-acks-all'])} alternating rounds:",
            "",
            "| setup | produce | CPU s per GiB produced: all brokers | leader | a follower |",
            "|---|---:|---:|---:|---:|",
        ]
        for v in VARIANTS:
            m = t["variants"][v.name]
            follower = m.get("follower_cpu_s_per_gib")
            lines.append(
                f"| {v.title} | {m['produce_mib_s']:.1f} MiB/s | {m['cpu_s_per_gib']:.1f} | "
                f"{m['leader_cpu_s_per_gib']:.1f} | "
                + ("-" if follower is None else f"{follower:.1f}")
                + " |"
            )
        lines += [
            "",
            f"Throughput: RF=3 acks=all / RF=3 acks=1: {t['ratio_all_vs_1']:.2f} (target >= "
            f"0.7); RF=3 acks=all / single node: {t['ratio_all_vs_single']:.2f}. CPU per GiB: "
            f"RF=3 acks=all, all brokers / single node: {t['cpu_ratio_all_vs_single']:.2f} "
            f"(target <= 2.5); a follower / the leader: "
            f"{t['cpu_ratio_follower_vs_leader']:.2f} (target <= 0.5). Medians of the ratios "
            "within each round; the page cache "
            + ("dropped before each run." if t["page_cache_dropped"] else "not dropped."),
            "",
        ]
    if "failover" in results:
        f = results["failover"]
        lines += [
            f"Failover after kill -9 of the partition leader ({f['kills']} kills, "
            f"zookeeper.session.timeout.ms={f['session_timeout_s'] * 1000:.0f}), medians: "
            f"ZooKeeper expires its session {_s(f['median_expired_s'])}, the controller "
            f"notices {_s(f['median_noticed_s'])}, every survivor names the new leader "
            f"{_s(f['median_metadata_s'])}; first successful acks=all write (target <= "
            f"{f['session_timeout_s'] + 1:g} s):",
            "",
        ]
        for label, w in f["writers"].items():
            lines.append(f"- {label}: median {_s(w['median_write_s'])}, max {_s(w['max_write_s'])}")
        lines.append("")
    if "shutdown" in results:
        s = results["shutdown"]
        lines += [
            f"Controlled shutdown (SIGTERM) of the partition leader, {s['stops']} times, each "
            f"followed by its restart (shutdown median {_s(s['median_stop_s'])}):",
            "",
        ]
        for label, w in s["writers"].items():
            lines.append(
                f"- {label}: {w['failed']} of {w['writes']} writes failed, longest write "
                f"{w['max_write_ms']:.0f} ms (of those sent while a broker shut down: "
                f"{w['max_write_in_shutdown_ms']:.0f} ms)"
            )
        lines.append("")
    if "failover" in results or "shutdown" in results:
        lines.append(
            f"Writers: confluent-kafka and the Java client at once, a record every "
            f"{WRITE_INTERVAL_S * 1000:.0f} ms each, "
            + " ".join(f"{k}={v}" for k, v in WRITER.items())
            + ", otherwise each client's defaults. All brokers, ZooKeeper and the clients share "
            "this machine's cores."
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/bench cluster",
        description="A 3-broker Gregor cluster on this machine: replicated produce "
        "throughput, failover after kill -9, and controlled shutdown.",
    )
    parser.add_argument(
        "--size",
        choices=sorted(SIZES),
        default="small",
        help="throughput volume per run: small 16 MiB, full 256 MiB (the README's)",
    )
    parser.add_argument("--parts", default=",".join(PARTS), help="comma-separated subset")
    parser.add_argument("--rounds", type=int, default=3, help="throughput rounds")
    parser.add_argument("--kills", type=int, default=10, help="kills (and controlled stops)")
    parser.add_argument(
        "--session-timeout-ms",
        type=int,
        default=SESSION_TIMEOUT_MS,
        help="zookeeper.session.timeout.ms of the failover and shutdown clusters",
    )
    parser.add_argument("--json", type=Path, help="also write all measurements here")
    parser.add_argument("--drop-page-cache", action="store_true", help=DROP_PAGE_CACHE_HELP)
    parser.add_argument(
        "--keep", type=Path, help="work in this (new) directory and keep the processes' logs"
    )
    args = parser.parse_args(argv)
    parts = args.parts.split(",")
    if set(parts) - set(PARTS):
        parser.error(f"--parts: choose from {', '.join(PARTS)}")
    results: dict = {}
    try:
        with contextlib.ExitStack() as stack:
            if args.keep:
                args.keep.mkdir(parents=True)
                work = args.keep
            else:
                work = Path(
                    stack.enter_context(tempfile.TemporaryDirectory(prefix="gregor-bench-"))
                )
            classpath = ensure_java_driver()
            if "throughput" in parts:
                _log("throughput")
                java = JavaDriver(classpath)
                results["throughput"] = throughput(
                    work, SIZES[args.size], java, args.rounds, settle=args.drop_page_cache
                )
            if "failover" in parts:
                _log("failover (kill -9)")
                results["failover"] = failover(work, args.kills, classpath, args.session_timeout_ms)
            if "shutdown" in parts:
                _log("controlled shutdown")
                results["shutdown"] = shutdown(work, args.kills, classpath, args.session_timeout_ms)
    except KeyboardInterrupt:
        _log("interrupted; processes stopped")
        return 130
    print(report(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0
