from benchmark.main import median_result
from benchmark.report import markdown_table

SCENARIOS = [("t", "Java tuned", "throughput"), ("lat", "Latency", "latency")]
GOOD = {
    "produce_mib_s": 50.0,
    "produce_rec_s": 524288.0,
    "consume_mib_s": 100.0,
    "consume_rec_s": 1.5e6,
    "cpu_s_per_gib": 4.0,
    "faults_per_gib_produce": 2500.0,
}


def test_two_brokers_show_ratio_of_the_row_metric() -> None:
    results = {
        "gregor": {"t": GOOD, "lat": {"p50_ms": 3.0, "p99_ms": 9.0}},
        "tansu": {"t": {**GOOD, "produce_mib_s": 100.0, "cpu_s_per_gib": 2.0}},
    }
    lines = markdown_table(SCENARIOS, results, {"gregor": "Gregor", "tansu": "Tansu"}).splitlines()
    assert lines[0] == "| scenario | metric | Gregor | Tansu | Gregor/Tansu |"
    assert lines[1] == "|---|---|---:|---:|---:|"
    assert lines[2] == (
        "| Java tuned | produce | 50.0 MiB/s (524 k rec/s) | 100.0 MiB/s (524 k rec/s) | 0.50× |"
    )
    assert lines[3].endswith("| 1.00× |")
    assert lines[4] == "|  | broker CPU s per GiB moved | 4.00 | 2.00 | 2.00× |"
    assert lines[5] == "|  | broker page faults per GiB produced | 2 k | 2 k | 1.00× |"
    # Tansu has no latency result: the cell says so and there is no ratio.
    assert lines[6] == "| Latency | p50 ms | 3.00 | not run | – |"


def test_failed_run_shows_failed_and_no_ratio() -> None:
    results = {"gregor": {"t": {"error": "boom"}}, "tansu": {"t": GOOD}}
    table = markdown_table(SCENARIOS[:1], results, {"gregor": "Gregor", "tansu": "Tansu"})
    assert "| Java tuned | produce | failed | 50.0 MiB/s (524 k rec/s) | – |" in table


def test_single_broker_has_no_ratio_column() -> None:
    table = markdown_table(SCENARIOS[:1], {"tansu": {"t": GOOD}}, {"tansu": "Tansu"})
    assert table.splitlines()[0] == "| scenario | metric | Tansu |"
    assert "1.50 M rec/s" in table


def test_rounds_report_the_median_of_each_measurement() -> None:
    runs = [{"commits_s": 3000.0}, {"commits_s": 3600.0}, {"commits_s": 3300.0}]
    merged = median_result(runs)
    assert merged["commits_s"] == 3300.0
    assert merged["rounds"] == runs


def test_a_failed_round_fails_the_scenario() -> None:
    assert median_result([{"commits_s": 1.0}, {"error": "boom"}]) == {"error": "boom"}
    assert median_result([{"commits_s": 2.0}]) == {"commits_s": 2.0}
