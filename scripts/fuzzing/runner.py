"""One fuzz run: a broker process, fuzzing worker processes, the canary, and a watcher
that restarts the broker if it dies and samples its peak RSS. A secured run
(``Plan.secured``) starts the broker of ``secured.py``, runs the families of
``secured_attacks.py`` against its listeners and has the canary authenticate on SASL_SSL."""

from __future__ import annotations

import dataclasses
import multiprocessing
import random
import socket
import time
from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from benchmark.procstats import cpu_seconds, memory_kib

from compat_tests.broker import BrokerProcess
from fuzzing import admin_mega, consumer_groups, metrics_http, secured, share_groups
from fuzzing.canary import TOPIC, Canary, CanaryState, Connect, create_topic, plaintext, verify
from fuzzing.frames import BOMB_TOPICS, FAMILIES, FUZZ_TOPICS, bomb_batches
from fuzzing.secured import Targets
from fuzzing.secured_attacks import SECURED_FAMILIES
from gregor.server.harness.broker_process import BrokerProcessError as BrokerError
from tests.kafka_wire import WireClient

CONNECT_TIMEOUT_S = 2.0
SEND_TIMEOUT_S = 2.0  # a muted connection stops accepting bytes; give up on it
DRAIN_S = 0.2  # wait this long for the broker to answer and close after our half-close
FLOOD_HOLD_S = 1.0  # a flood keeps its connection open, unread, this long
WATCH_EVERY_S = 0.25
WARMUP_ROUNDS = 100  # canary rounds before the fuzz: the baseline latency
CANARY_MAX_ROUNDS = 10**9
_MP = multiprocessing.get_context("fork")  # workers inherit the prebuilt bombs


@dataclass
class RunResult:
    frames: Counter[str] = field(default_factory=Counter)
    notes: Counter[str] = field(default_factory=Counter)  # what the secured families saw
    connections: int = 0
    seconds: float = 0.0
    broker_cpu_s: float = 0.0
    crashes: list[str] = field(default_factory=list)
    peak_rss_kib: int = 0
    baseline_ms: list[float] = field(default_factory=list)
    canary: CanaryState = field(default_factory=CanaryState)
    problems_after_fuzz: list[str] = field(default_factory=list)
    problems_after_restart: list[str] = field(default_factory=list)
    log_path: Path | None = None


def send_connection(port: int, family: str, frames: list[bytes]) -> int:
    """Write ``frames`` on one new connection within SEND_TIMEOUT_S; returns how many were
    written whole."""
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=CONNECT_TIMEOUT_S)
    except OSError:
        time.sleep(0.05)  # broker down or backlog full: let it breathe
        return 0
    sent = 0
    give_up = time.monotonic() + SEND_TIMEOUT_S
    with sock:
        try:
            for frame in frames:
                sock.settimeout(max(give_up - time.monotonic(), 0.001))
                sock.sendall(frame)
                sent += 1
            if family == "pipelining_flood":
                time.sleep(FLOOD_HOLD_S)  # never read: the broker must bound what it queues
                return sent
            sock.shutdown(socket.SHUT_WR)
            deadline = time.monotonic() + DRAIN_S
            sock.settimeout(DRAIN_S)
            while time.monotonic() < deadline and sock.recv(65536):
                pass
        except OSError:
            pass  # closed, reset or muted by the broker: all fine answers to garbage
    return sent


@dataclass(frozen=True)
class Plan:
    """What to send: ``frames`` frames of ``families`` from ``workers`` processes."""

    frames: int
    workers: int
    max_seconds: float
    seed: int
    families: tuple[str, ...] = tuple(FAMILIES)
    metrics_port: int = -1  # the /metrics endpoint's, when metrics_http is fuzzed
    secured: bool = False  # the secured broker and SECURED_FAMILIES
    targets: Targets | None = None  # its listeners, once started


def fuzz_worker(
    port: int, plan: Plan, index: int, quota: int, deadline: float, out: multiprocessing.Queue
) -> None:
    rng = random.Random(plan.seed * 1000 + index)
    names = list(plan.families)
    weights = [(SECURED_FAMILIES.get(name) or FAMILIES[name])[1] for name in names]
    frames: Counter[str] = Counter()
    notes: Counter[str] = Counter()
    connections = 0
    while frames.total() < quota and time.time() < deadline:
        family = rng.choices(names, weights)[0]
        if family in SECURED_FAMILIES:
            assert plan.targets is not None
            seen = SECURED_FAMILIES[family][0](plan.targets, rng)
            frames[family] += seen.pop(family, 0)
            notes.update(seen)
            connections += 1
            continue
        if family == metrics_http.FAMILY:
            frames[family] += metrics_http.attack(plan.metrics_port, rng)
            connections += 1
            continue
        if family == admin_mega.FAMILY:
            frames[family] += admin_mega.attack(port, rng)
            connections += 1
            continue
        generated = FAMILIES[family][0](rng)
        frames[family] += send_connection(port, family, generated[: quota - frames.total()])
        connections += 1
    out.put((frames, connections, notes))


def canary_worker(canary: Canary, stop: multiprocessing.Event, out: multiprocessing.Queue) -> None:
    canary.state.latencies_ms.clear()
    canary.state.errors.clear()
    canary.run(CANARY_MAX_ROUNDS, stop.is_set)
    out.put(canary.state)


def _create_topics(port: int) -> None:
    client = WireClient(port)
    try:
        for name in (*FUZZ_TOPICS[:2], TOPIC):
            create_topic(client, name)
        for name, configs in BOMB_TOPICS.items():
            create_topic(client, name, configs)
        share_groups.prepare(client)
    finally:
        client.close()


def run(work_dir: Path, plan: Plan) -> RunResult:
    """Fuzz a fresh broker as planned (frames or max_seconds, whichever ends first)."""
    result = RunResult()
    overrides: dict[str, str] = {}
    targets = None
    if plan.secured:
        overrides, targets = secured.prepare(work_dir / "secured")
        plan = dataclasses.replace(plan, targets=targets)
    else:
        bomb_batches()  # built once here, shared with the forked workers
    if metrics_http.FAMILY in plan.families:
        overrides["metrics.prometheus.port"] = "0"
    broker = BrokerProcess(work_dir, overrides)
    broker.probe_listener = "PLAINTEXT"  # the secured broker's administration listener
    result.log_path = broker.log_path
    broker.start()
    if metrics_http.FAMILY in plan.families:
        plan = dataclasses.replace(plan, metrics_port=broker.metrics_port)
    connect = plaintext(broker.port)
    if targets is not None:
        secured.create_users(targets)
        connect = partial(secured.canary_client, targets)
    try:
        _create_topics(broker.port)
        if targets is not None:
            secured.wait_for_canary_login(targets)
        canary = Canary(connect)
        canary.setup()
        canary.run(WARMUP_ROUNDS)
        result.baseline_ms = list(canary.state.latencies_ms)
        _fuzz(broker, canary, result, plan)
        result.problems_after_fuzz = _verify(connect, result.canary)
        try:
            broker.restart()
            if targets is not None:
                secured.wait_for_canary_login(targets)
        except (BrokerError, OSError) as e:
            result.problems_after_restart = [f"clean restart failed: {e}"]
        else:
            result.problems_after_restart = _verify(connect, result.canary)
    finally:
        broker.kill()
    return result


def _fuzz(broker: BrokerProcess, canary: Canary, result: RunResult, plan: Plan) -> None:
    """The fuzz itself: workers send, the canary times, this process watches the broker."""
    start = time.time()
    cpu_start = cpu_seconds(broker.pid)
    results, canary_out, stop = _MP.Queue(), _MP.Queue(), _MP.Event()
    canary_proc = _MP.Process(target=canary_worker, args=(canary, stop, canary_out))
    canary_proc.start()
    frames, workers = plan.frames, plan.workers
    quotas = [frames // workers + (i < frames % workers) for i in range(workers)]
    procs = [
        _MP.Process(
            target=fuzz_worker,
            args=(broker.port, plan, i, quota, start + plan.max_seconds, results),
        )
        for i, quota in enumerate(quotas)
    ]
    for p in procs:
        p.start()
    while any(p.is_alive() for p in procs):
        _watch(broker, result)
        time.sleep(WATCH_EVERY_S)
    result.seconds = time.time() - start
    result.broker_cpu_s = cpu_seconds(broker.pid) - cpu_start
    stop.set()
    result.canary = canary_out.get(timeout=60)
    for p in procs:
        if p.exitcode == 0:
            worker_frames, connections, notes = results.get(timeout=10)
            result.frames.update(worker_frames)
            result.notes.update(notes)
            result.connections += connections
        else:
            result.crashes.append(f"fuzz worker exited with {p.exitcode}")
    canary_proc.join(10)
    _watch(broker, result)


def _verify(connect: Connect, state: CanaryState) -> list[str]:
    try:
        return verify(connect, state, consumer_groups.GROUPS, share_groups.GROUPS)
    except (OSError, ValueError) as e:
        return [f"could not read the data back: {type(e).__name__}: {e}"]


def _watch(broker: BrokerProcess, result: RunResult) -> None:
    """Restart a dead broker, recording the crash; keep the peak RSS seen so far."""
    if not broker.running:
        assert broker._proc is not None
        result.crashes.append(f"exit code {broker._proc.returncode}: {broker.log_tail(3)}")
        try:
            broker.start()
        except BrokerError as e:
            result.crashes.append(f"restart failed: {e}")
            return
    result.peak_rss_kib = max(result.peak_rss_kib, memory_kib(broker.pid))
