"""`scripts/bench cluster-scale` at a tiny size against a real ZooKeeper and 3 Gregor
brokers (about 30 s): every round's figures come from real answers and log lines."""

import json
from pathlib import Path

import pytest
from benchmark.cluster_scale import main


def test_a_round_measures_shutdown_and_failover(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "scale.json"
    argv = ["--partitions", "60", "--topics", "3", "--rounds", "1", "--idle-seconds", "1"]
    assert main([*argv, "--work-dir", str(tmp_path / "cluster"), "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["partitions"] == 60 and result["create_s"] > 0
    assert set(result["idle"]) == {"1", "2", "3"}
    assert all(b["rss_mib"] > 0 and b["idle_cpu_percent"] >= 0 for b in result["idle"].values())
    shutdown, failover = result["controlled_shutdown"], result["controller_failover"]
    # Preferred leaders are restored first: the stopping broker and the controller led about
    # a third each (each topic's first replicas start at a random broker).
    assert 10 < shutdown["led_partitions"] < 30
    assert 10 < failover["controller_led_partitions"] < 30
    assert 0 < shutdown["shutdown_acknowledged_s"] <= shutdown["shutdown_exited_s"]
    assert 0 < shutdown["shutdown_leaders_moved_s"] <= shutdown["shutdown_exited_s"]
    assert 0 < failover["failover_elected_s"] < failover["failover_from_kill_s"]
    assert failover["failover_from_elected_s"] == pytest.approx(
        failover["failover_from_kill_s"] - failover["failover_elected_s"]
    )
    assert "| controller failover: new controller elected to every partition" in (
        capsys.readouterr().out
    )
