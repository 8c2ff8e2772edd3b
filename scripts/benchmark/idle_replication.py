"""CPU of idle replication: one leader and one follower ReplicaManager in one process.

Builds the in-process two-broker harness of tests/test_replication.py (each broker its own
logs; the follower's fetches go through the leader's real request dispatcher as bytes),
gives it ``--partitions`` partitions led by broker 0 and followed by broker 1, lets the
fetchers settle, and reports the process CPU time spent over ``--seconds`` of idleness
(no produce), with the number of fetches: both sides of replication, long-polling with
replica.fetch.wait.max.ms=500 (Kafka's default).

    .venv/bin/python scripts/benchmark/idle_replication.py [--partitions 3000]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from gregor.replica.state import LeaderAndIsrState  # noqa: E402
from tests.test_replication import Cluster, run  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=3000)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()

    async def scenario(c: Cluster) -> None:
        states = [
            LeaderAndIsrState("idle", None, p, 0, 0, [0, 1], 0, [0, 1])
            for p in range(args.partitions)
        ]
        for node in c.nodes:
            node.replicas.become_leader_or_follower(1, states)
        await asyncio.sleep(2)
        fetches, cpu = len(c.fetches), time.process_time()
        await asyncio.sleep(args.seconds)
        fetches, cpu = len(c.fetches) - fetches, time.process_time() - cpu
        print(
            f"{args.partitions} idle partitions, leader and follower in one process: "
            f"{cpu:.2f} s CPU in {args.seconds:.0f} s ({100 * cpu / args.seconds:.0f} % of a "
            f"core), {fetches} fetches ({1000 * cpu / max(fetches, 1):.0f} ms CPU each)"
        )

    logging.disable(logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="idle-replication-") as tmp:
        run(Path(tmp), scenario, size=2, **{"replica.fetch.wait.max.ms": "500"})


if __name__ == "__main__":
    main()
