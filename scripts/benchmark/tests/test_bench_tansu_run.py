"""The shared scenario code against the real Tansu binary, and process cleanup."""

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from benchmark.artifacts import ensure_java_driver
from benchmark.brokers import TANSU, Broker, BrokerError, BrokerKind
from benchmark.drivers import MIB, ConfluentClient, DriverError, JavaClient, JavaDriver
from benchmark.main import main
from benchmark.procstats import descendants
from benchmark.scenarios import BY_NAME, Context, Sizes

BENCH = Path(__file__).resolve().parents[2] / "bench"
TINY = Sizes(
    throughput_bytes=MIB, big_bytes=2 * MIB, latency_seconds=2, phase_seconds=30, big_seconds=30
)


@pytest.fixture(scope="module")
def java() -> JavaDriver:
    return JavaDriver(ensure_java_driver())


@pytest.fixture
def tansu(tmp_path: Path) -> Iterator[Broker]:
    with Broker(TANSU, tmp_path / "tansu") as broker:
        yield broker


def test_throughput_big_and_latency_scenarios(tansu: Broker, java: JavaDriver) -> None:
    ctx = Context(tansu, TINY, java)
    for name in ("java-tuned-1kb", "confluent-100b"):
        m = BY_NAME[name].run(ctx)
        assert m["produced_mib"] == pytest.approx(1, rel=0.01)
        assert m["produce_mib_s"] > 0 and m["consume_mib_s"] > 0
        assert m["cpu_s_per_gib"] >= 0 and m["peak_rss_mib"] > 1
    big = BY_NAME["produce-2gb"].run(ctx)
    assert big["produced_mib"] == pytest.approx(2, rel=0.01)
    assert big["peak_rss_mib"] >= big["rss_mib"] > 1
    latency = BY_NAME["latency"].run(ctx)
    assert latency["records"] == 10_000  # 2 s at 10k/s minus the 1 s warm-up
    assert 0 < latency["p50_ms"] <= latency["p99_ms"] <= latency["max_ms"]


def test_clients_fail_fast_when_the_broker_dies(tansu: Broker, java: JavaDriver) -> None:
    topic = Context(tansu, TINY, java).new_topic()
    os.kill(tansu.pid, signal.SIGKILL)
    for client in (JavaClient(java, {}), ConfluentClient()):
        started = time.monotonic()
        with pytest.raises(DriverError, match="broker process died"):
            client.produce(tansu.endpoint, topic, 100, 10_000_000, seconds=60)
        assert time.monotonic() - started < 10  # not the clients' own delivery timeouts


def test_stop_ends_the_process_and_removes_data(tmp_path: Path) -> None:
    broker = Broker(TANSU, tmp_path / "tansu").__enter__()
    pid = broker.pid
    broker.stop()
    assert not Path(f"/proc/{pid}").exists()
    assert not (tmp_path / "tansu" / "data").exists()


def test_broker_that_dies_reports_its_output(tmp_path: Path) -> None:
    dying = BrokerKind("fake", "Fake", "none", lambda port, d: ["sh", "-c", "echo boom; exit 3"])
    with pytest.raises(BrokerError, match="(?s)Fake exited with 3.*boom"):
        with Broker(dying, tmp_path / "fake"):
            pass


def test_unknown_scenario_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--scenarios", "java-tuned-1kb,nope"])
    assert exc.value.code == 2


def test_sigterm_stops_broker_and_removes_temporary_files(tmp_path: Path) -> None:
    bench = subprocess.Popen(
        [str(BENCH), "--only", "tansu", "--scenarios", "latency"],
        env={**os.environ, "TMPDIR": str(tmp_path)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        broker = None
        while broker is None and time.monotonic() < deadline:
            for pid in descendants(bench.pid):
                try:
                    if os.readlink(f"/proc/{pid}/exe").endswith("/tansu"):
                        broker = pid
                except OSError:
                    pass
            time.sleep(0.05)  # no event tells us the broker was spawned
        assert broker is not None
        bench.send_signal(signal.SIGTERM)
        assert bench.wait(60) == 130
        assert not Path(f"/proc/{broker}").exists()
        assert list(tmp_path.iterdir()) == []
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()


def test_cli_prints_table_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    run = subprocess.run(
        [str(BENCH), "--only", "tansu", "--scenarios", "confluent-1kb", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("| scenario | metric | Tansu |\n|---|---|---:|\n")
    assert "| confluent-kafka, 1 KiB records | produce | " in run.stdout
    report = json.loads(out.read_text())
    assert report["meta"]["size"] == "small" and report["meta"]["partitions"] == 1
    measured = report["results"]["tansu"]["confluent-1kb"]
    assert measured["produced_mib"] == 16 and measured["consume_mib_s"] > 0
