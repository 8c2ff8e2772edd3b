"""`scripts/bench cluster` at tiny sizes against a real ZooKeeper and 3 Gregor brokers."""

from pathlib import Path

import pytest
from benchmark.artifacts import ensure_java_driver
from benchmark.cluster import PARTS, failover, main, report, shutdown, throughput
from benchmark.drivers import MIB, JavaDriver
from benchmark.scenarios import Sizes

TINY = Sizes(
    throughput_bytes=MIB, big_bytes=MIB, latency_seconds=1, phase_seconds=30, big_seconds=30
)
# Short, so a kill is noticed soon; long enough that a loaded machine keeps live sessions.
SESSION_TIMEOUT_MS = 4000


def test_every_part_runs_and_reports(tmp_path: Path) -> None:
    classpath = ensure_java_driver()
    results = {
        "throughput": throughput(tmp_path, TINY, JavaDriver(classpath), rounds=1),
        "failover": failover(tmp_path, 1, classpath, SESSION_TIMEOUT_MS),
        "shutdown": shutdown(tmp_path, 1, classpath, SESSION_TIMEOUT_MS),
    }
    t = results["throughput"]
    assert set(t["variants"]) == {"rf3-acks-all", "rf3-acks-1", "single-acks-all"}
    assert all(m["produce_mib_s"] > 0 for m in t["variants"].values())
    assert t["ratio_all_vs_1"] > 0 and t["ratio_all_vs_single"] > 0
    # Each broker's CPU is counted once: the leader's and the followers' make up the whole.
    # (A follower copying 1 MiB may use less than one clock tick, so it may read 0.)
    for name in ("rf3-acks-all", "rf3-acks-1"):
        (run,) = t["rounds"][name]
        leader, follower = run["leader_cpu_s_per_gib"], run["follower_cpu_s_per_gib"]
        assert leader > 0 and follower >= 0
        assert run["cpu_s_per_gib"] == pytest.approx(leader + 2 * follower)
    assert t["cpu_ratio_all_vs_single"] > 1  # three brokers' work against one's

    (kill,) = results["failover"]["samples"]
    # No write succeeds before the controller learns of the death, when the session expires
    # (50 ms: the log's millisecond stamps against the monotonic clock).
    assert kill["noticed_s"] is not None and kill["metadata_s"] is not None
    for label in ("confluent-kafka", "Java"):
        assert kill[f"{label} write_s"] > kill["noticed_s"] - 0.05 > 0

    for label, w in results["shutdown"]["writers"].items():
        assert w["writes"] > 0, label
        assert w["failed"] == 0, label  # both clients retry NOT_LEADER_OR_FOLLOWER

    text = report(results)
    assert "RF=3 acks=all / RF=3 acks=1: " in text and "a follower / the leader: " in text
    assert "zookeeper.session.timeout.ms=4000" in text and "target <= 5 s" in text
    assert "- Java: 0 of " in text and "- confluent-kafka: 0 of " in text


def test_unknown_part_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--parts", "failover,nonsense"])
    assert exit_.value.code == 2
    assert ", ".join(PARTS) in capsys.readouterr().err
