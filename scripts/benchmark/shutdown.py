"""Clean shutdown time: SIGTERM to exit of brokers holding many partitions.

Starts one embedded broker (or, with ``--cluster``, ZooKeeper and 3 brokers), creates a
topic of ``--partitions`` partitions, produces one record to each (acks=all), then sends each
broker SIGTERM in turn and reports how long it took to exit.

    .venv/bin/python scripts/benchmark/shutdown.py [--partitions 1000] [--cluster [--rf 3]]
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from confluent_kafka import Producer  # noqa: E402

from compat_tests.broker import BrokerProcess  # noqa: E402
from compat_tests.confluent_admin import create_topic  # noqa: E402
from gregor.server.harness.cluster import Cluster  # noqa: E402

TOPIC = "wide"
EXIT_TIMEOUT_S = 300


def fill(brokers: list[BrokerProcess], partitions: int, replication_factor: int) -> None:
    create_topic(brokers[0], TOPIC, partitions, replication_factor)
    bootstrap = ",".join(b.bootstrap for b in brokers)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    for p in range(partitions):
        producer.produce(TOPIC, value=b"v", partition=p)
    if producer.flush(120):
        raise RuntimeError("records still unacknowledged after 120 s")


def stop_timed(broker: BrokerProcess) -> float:
    proc = broker._proc
    assert proc is not None
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.wait(EXIT_TIMEOUT_S)
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--cluster", action="store_true", help="3 brokers and ZooKeeper")
    parser.add_argument("--rf", type=int, default=3, help="replication factor (cluster)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="shutdown-bench-") as tmp:
        if args.cluster:
            cluster = Cluster(Path(tmp), 3)
            cluster.start()
            try:
                brokers = list(cluster.brokers.values())
                cluster.wait_for_brokers(cluster.brokers)
                fill(brokers, args.partitions, args.rf)
                for broker_id, broker in cluster.brokers.items():
                    print(f"broker {broker_id}: exited {stop_timed(broker):.2f} s after SIGTERM")
            finally:
                cluster.stop_all()
        else:
            with BrokerProcess(Path(tmp), start_timeout_s=120) as broker:
                fill([broker], args.partitions, 1)
                print(f"embedded broker: exited {stop_timed(broker):.2f} s after SIGTERM")
    print(f"({args.partitions} partitions, one record each)")


if __name__ == "__main__":
    main()
