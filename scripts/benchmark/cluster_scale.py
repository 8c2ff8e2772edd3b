"""Scale of a 3-broker cluster holding many partitions: controller failover, controlled
shutdown, memory and idle CPU (`scripts/bench cluster-scale`).

One real ZooKeeper and three brokers (the harness's Cluster), topics of replication factor 3
whose partitions are led round-robin, so each broker leads a third. Then, per round:

- controlled shutdown: SIGTERM to a broker that is not the controller. Times from the signal
  to its log saying "Controlled shutdown request succeeded" (the controller answered with no
  partition left to move), and to the other brokers' Metadata naming none of its partitions
  as led by it. The broker is started again and preferred leaders restored.
- controller failover: kill -9 of the controller. Times from the kill, and from the moment a
  new controller holds /controller (seen by a ZooKeeper watch in this process: Kafka's
  figure starts there), to every partition having a live leader that every surviving broker
  names in its Metadata. From the kill includes the ZooKeeper session timeout, which is when
  ZooKeeper drops the dead broker's ephemeral znodes. The broker is started again.

Each poll asks every broker at once and times the arrival of the answers that show the
awaited state, before this process decodes them (a second per 50,000-partition answer).

Before the rounds, with no client traffic: each broker's resident memory and its CPU over
an idle interval (replica fetchers long-poll). Each figure is the median over the rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from .artifacts import REPO
from .procstats import cpu_seconds, memory_kib

sys.path.insert(0, str(REPO))

from gregor.server.cli.client.connection import ClientError, Connection  # noqa: E402
from gregor.server.harness.cluster import (  # noqa: E402
    BrokerView,
    Cluster,
    broker_view,
    metadata_request,
)

# Asking three brokers for the Metadata of 10,000 partitions costs this process about 0.1 s
# of CPU each time, taken from the brokers on a small machine: a poll every quarter second.
POLL_S = 0.25
WAIT_S = 300.0
# A broker holding thousands of partitions takes longer than the launcher's 30 s to load its
# logs when it starts again, and to close them when it stops (each broker's start_timeout_s
# and stop_timeout_s, set below).
SHUTDOWN_LOG_LINE = "Controlled shutdown request succeeded"


def _log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="scripts/bench cluster-scale",
        description="Controller failover and controlled shutdown of a 3-broker cluster "
        "holding many partitions (replication factor 3); per-broker memory and idle CPU.",
    )
    parser.add_argument("--partitions", type=int, default=10_000, help="in all (default 10000)")
    parser.add_argument("--topics", type=int, default=50, help="partitions spread evenly")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--session-timeout-ms", type=int, default=6000, help="zookeeper.session.timeout.ms"
    )
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--work-dir", type=Path, help="keep the cluster's files here")
    parser.add_argument("--json", type=Path, help="also write all measurements here")
    return parser.parse_args(argv)


class Scale:
    def __init__(self, cluster: Cluster, topics: dict[str, int]) -> None:
        self.cluster = cluster
        self.topics = topics
        self.total = sum(topics.values())

    # -- what the brokers say ----------------------------------------------------------------

    def views(self, broker_ids: list[int]) -> dict[int, BrokerView] | None:
        """Every listed broker's Metadata, or None if one did not answer."""
        polled = self.poll(broker_ids)
        return None if polled is None else polled[0]

    def poll(self, broker_ids: list[int]) -> tuple[dict[int, BrokerView], float] | None:
        """Every listed broker's Metadata, asked of all at once, and when the last answer
        arrived: decoding 50,000 partitions takes this process about a second an answer,
        which is not the brokers' time. None if one did not answer."""
        connections: dict[int, Connection] = {}
        try:
            for broker_id in broker_ids:
                port = self.cluster.brokers[broker_id].port
                connections[broker_id] = Connection("127.0.0.1", port, "cluster-scale", 30)
                connections[broker_id].send(metadata_request())
            frames = {i: c.receive_frame() for i, c in connections.items()}
            arrived = time.monotonic()
            return {i: broker_view(frame) for i, (_, frame) in frames.items()}, arrived
        except (OSError, ValueError, ClientError):
            return None
        finally:
            for connection in connections.values():
                connection.close()

    def wait(
        self,
        holds: Callable[[dict[int, BrokerView]], bool],
        awaited: str,
        brokers: list[int] | None = None,
    ) -> float:
        """Poll the Metadata of ``brokers`` (default: the running ones) until ``holds``;
        when the answers that showed it arrived."""
        deadline = time.monotonic() + WAIT_S
        while True:
            polled = self.poll(self.cluster.running() if brokers is None else brokers)
            if polled is not None and holds(polled[0]):
                return polled[1]
            if time.monotonic() > deadline:
                raise TimeoutError(f"not within {WAIT_S:.0f}s: {awaited}")
            time.sleep(POLL_S)

    def all_led(
        self,
        views: dict[int, BrokerView],
        *,
        isr: int | None = None,
        preferred: bool = False,
        only: str | None = None,
    ) -> bool:
        """Every partition (of topic ``only`` if given) known to every broker with the same
        leader, a running one (its first replica with ``preferred``), and ``isr`` in-sync
        replicas if given."""
        running = set(self.cluster.running())
        first = next(iter(views.values()))
        for name, count in self.topics.items():
            if only is not None and name != only:
                continue
            partitions = first.topics.get(name)
            if partitions is None or len(partitions) != count:
                return False
            for view in views.values():
                other = view.topics.get(name)
                if other is None:
                    return False
                for index, p in partitions.items():
                    q = other.get(index)
                    if q is None or q.error_code != 0 or q.leader != p.leader:
                        return False
                    if p.leader not in running or (preferred and p.leader != p.replicas[0]):
                        return False
                    if isr is not None and len(q.isr) != isr:
                        return False
        return True

    def led_by(self, views: dict[int, BrokerView], broker_id: int) -> int:
        first = next(iter(views.values()))
        return sum(p.leader == broker_id for parts in first.topics.values() for p in parts.values())

    def controller(self) -> int:
        views = self.views(self.cluster.running())
        assert views is not None
        (controller,) = {v.controller_id for v in views.values()}
        return controller

    # -- set-up --------------------------------------------------------------------------------

    def create_topics(self) -> float:
        """One topic at a time: a broker handles a LeaderAndIsr creating thousands of logs
        in one go, and the controller's request times out after 30 s."""
        from confluent_kafka.admin import AdminClient, NewTopic

        started = time.monotonic()
        client = AdminClient({"bootstrap.servers": self.cluster.bootstrap})
        for name, count in self.topics.items():
            futures = client.create_topics([NewTopic(name, count, 3)], operation_timeout=120)
            futures[name].result(timeout=240)
            self.wait(lambda v, n=name: self.all_led(v, isr=3, only=n), f"{name} replicated")
        return time.monotonic() - started

    def restore(self, broker_id: int) -> float:
        """Start a stopped or killed broker; wait until every partition has 3 in-sync
        replicas again and its preferred leader."""
        started = time.monotonic()
        self.cluster.restart(broker_id)
        self.balance()
        return time.monotonic() - started

    def balance(self) -> None:
        """Wait until every partition has 3 in-sync replicas, then give each its preferred
        leader (a broker whose ZooKeeper session expired under load lost its leaderships)."""
        from confluent_kafka import ElectionType
        from confluent_kafka.admin import AdminClient

        self.wait(lambda v: self.all_led(v, isr=3), "every partition with 3 in-sync replicas")
        client = AdminClient({"bootstrap.servers": self.cluster.bootstrap})
        client.elect_leaders(ElectionType.PREFERRED, None).result(timeout=120)
        self.wait(lambda v: self.all_led(v, isr=3, preferred=True), "preferred leaders back")

    # -- measurements --------------------------------------------------------------------------

    def idle(self, seconds: float) -> dict[int, dict[str, float]]:
        """Per broker: CPU share of one core over ``seconds`` without clients, and RSS."""
        pids = {i: b.pid for i, b in self.cluster.brokers.items()}
        before = {i: cpu_seconds(pid) for i, pid in pids.items()}
        time.sleep(seconds)
        return {
            i: {
                "idle_cpu_percent": 100 * (cpu_seconds(pid) - before[i]) / seconds,
                "rss_mib": memory_kib(pid, "VmRSS") / 1024,
            }
            for i, pid in pids.items()
        }

    def controlled_shutdown(self) -> dict[str, float]:
        controller = self.controller()
        broker_id = next(i for i in sorted(self.cluster.brokers) if i != controller)
        broker = self.cluster.brokers[broker_id]
        views = self.views(self.cluster.running())
        assert views is not None
        led = self.led_by(views, broker_id)
        log_start = broker.log_path.stat().st_size
        others = [i for i in self.cluster.running() if i != broker_id]
        wall0, t0 = time.time(), time.monotonic()
        os.kill(broker.pid, signal.SIGTERM)

        def moved_off(views: dict[int, BrokerView]) -> bool:
            return all(self.led_by({i: v}, broker_id) == 0 for i, v in views.items())

        moved = self.wait(moved_off, f"no partition led by broker {broker_id}", others)
        logged = None
        while logged is None and time.monotonic() < t0 + WAIT_S:
            logged = _logged_at(broker.log_path, log_start, SHUTDOWN_LOG_LINE)
            time.sleep(POLL_S)
        if logged is None:
            raise TimeoutError(f"broker {broker_id} did not log {SHUTDOWN_LOG_LINE!r}")
        acknowledged = t0 + logged - wall0
        broker.stop()  # waits for the exit
        exited = time.monotonic()
        _log(
            f"  controlled shutdown of broker {broker_id} (leading {led}): acknowledged "
            f"{acknowledged - t0:.2f} s, leaderships moved {moved - t0:.2f} s, "
            f"exited {exited - t0:.2f} s"
        )
        restored = self.restore(broker_id)
        _log(f"  broker {broker_id} back, preferred leaders restored in {restored:.1f} s")
        return {
            "led_partitions": led,
            "shutdown_acknowledged_s": acknowledged - t0,
            "shutdown_leaders_moved_s": moved - t0,
            "shutdown_exited_s": exited - t0,
        }

    def controller_failover(self) -> dict[str, float]:
        from kazoo.client import KazooClient

        old = self.controller()
        views = self.views(self.cluster.running())
        assert views is not None
        led = self.led_by(views, old)
        elected: list[float] = []
        seen = threading.Event()
        zk = KazooClient(hosts=self.cluster.zookeeper.connect, timeout=10)
        zk.start(10)
        try:

            @zk.DataWatch("/controller")
            def _watch(data: bytes | None, _stat: object) -> None:
                if data is not None and json.loads(data)["brokerid"] != old and not elected:
                    elected.append(time.monotonic())
                    seen.set()

            survivors = [i for i in self.cluster.running() if i != old]
            t0 = time.monotonic()
            self.cluster.kill(old)

            def done(views: dict[int, BrokerView]) -> bool:
                return (
                    set(views) == set(survivors)
                    and all(v.controller_id in survivors for v in views.values())
                    and self.all_led(views)
                )

            finished = self.wait(done, "a live leader for every partition on every broker")
            seen.wait(10)
        finally:
            zk.stop()
            zk.close()
        from_elected = finished - elected[0]
        _log(
            f"  kill -9 of controller {old} (leading {led}): new controller elected after "
            f"{elected[0] - t0:.2f} s, every partition led on every broker "
            f"{finished - t0:.2f} s after the kill, {from_elected:.2f} s after the election"
        )
        restored = self.restore(old)
        _log(f"  broker {old} back, preferred leaders restored in {restored:.1f} s")
        return {
            "controller_led_partitions": led,
            "failover_elected_s": elected[0] - t0,
            "failover_from_kill_s": finished - t0,
            "failover_from_elected_s": from_elected,
        }


def _logged_at(path: Path, start: int, text: str) -> float | None:
    """The wall-clock time of the first log line after byte ``start`` holding ``text``
    (the broker's log lines begin with a local "[YYYY-MM-DD HH:MM:SS,mmm]")."""
    with open(path, "rb") as f:
        f.seek(start)
        for line in f.read().decode(errors="replace").splitlines():
            if text in line and line.startswith("["):
                stamp = datetime.strptime(line[1:24], "%Y-%m-%d %H:%M:%S,%f")
                return stamp.timestamp()
    return None


def _median(runs: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}


def run(args: argparse.Namespace, work: Path) -> dict:
    per_topic, extra = divmod(args.partitions, args.topics)
    topics = {f"scale-{t}": per_topic + (t < extra) for t in range(args.topics)}
    overrides = {
        "zookeeper.session.timeout.ms": str(args.session_timeout_ms),
        # Leaders return to their preferred brokers when the benchmark asks, not meanwhile.
        "auto.leader.rebalance.enable": "false",
    }
    with Cluster(work, 3, overrides) as cluster:
        for broker in cluster.brokers.values():
            broker.start_timeout_s = broker.stop_timeout_s = WAIT_S
        scale = Scale(cluster, topics)
        created = scale.create_topics()
        _log(
            f"{scale.total} partitions in {len(topics)} topics created and replicated "
            f"in {created:.1f} s"
        )
        scale.balance()
        time.sleep(10)  # the last topics' LeaderAndIsr, ISR changes and first fetches settle
        idle = scale.idle(args.idle_seconds)
        for broker_id, figures in idle.items():
            _log(
                f"  broker {broker_id}: RSS {figures['rss_mib']:.0f} MiB, idle CPU "
                f"{figures['idle_cpu_percent']:.1f} % of a core over {args.idle_seconds:g} s"
            )
        shutdowns, failovers = [], []
        for round_ in range(1, args.rounds + 1):
            _log(f"round {round_}/{args.rounds}")
            shutdowns.append(scale.controlled_shutdown())
            failovers.append(scale.controller_failover())
    return {
        "partitions": scale.total,
        "topics": len(topics),
        "session_timeout_ms": args.session_timeout_ms,
        "create_s": created,
        "idle": idle,
        "controlled_shutdown": _median(shutdowns),
        "controller_failover": _median(failovers),
        "rounds": {"controlled_shutdown": shutdowns, "controller_failover": failovers},
    }


def main(argv: list[str]) -> int:
    args = _parse(argv)
    load = os.getloadavg()
    if args.work_dir:
        args.work_dir.mkdir(parents=True, exist_ok=True)
        result = run(args, args.work_dir)
    else:
        with tempfile.TemporaryDirectory(prefix="gregor-scale-") as tmp:
            result = run(args, Path(tmp))
    result["load_average_before"] = load
    result["load_average_after"] = os.getloadavg()
    shutdown, failover = result["controlled_shutdown"], result["controller_failover"]
    print(
        f"{result['partitions']} partitions (RF 3, 3 brokers), median of {args.rounds} "
        f"round(s), zookeeper.session.timeout.ms={args.session_timeout_ms}, load average "
        f"{load[0]:.2f} before, {result['load_average_after'][0]:.2f} after\n"
        f"| measurement | seconds |\n|---|---:|\n"
        f"| controlled shutdown ({shutdown['led_partitions']:.0f} leaders): SIGTERM to "
        f"ControlledShutdown acknowledged | {shutdown['shutdown_acknowledged_s']:.2f} |\n"
        f"| controlled shutdown: SIGTERM to leaderships moved on every broker "
        f"| {shutdown['shutdown_leaders_moved_s']:.2f} |\n"
        f"| controller failover: kill -9 to new controller elected "
        f"| {failover['failover_elected_s']:.2f} |\n"
        f"| controller failover: new controller elected to every partition led on every broker "
        f"| {failover['failover_from_elected_s']:.2f} |\n"
        f"| controller failover: kill -9 to every partition led on every broker "
        f"| {failover['failover_from_kill_s']:.2f} |"
    )
    for broker_id, figures in sorted(result["idle"].items()):
        print(
            f"broker {broker_id}: RSS {figures['rss_mib']:.0f} MiB, idle CPU "
            f"{figures['idle_cpu_percent']:.1f} % of a core"
        )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0
