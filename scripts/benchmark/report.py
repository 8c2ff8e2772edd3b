"""The markdown table: one row per (scenario, metric), both brokers side by side, and the ratio."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

# results[broker][scenario] is either measurements or {"error": text}.
Results = Mapping[str, Mapping[str, Mapping[str, object]]]


@dataclass(frozen=True)
class Row:
    metric: str
    key: str  # the measurement the ratio is taken of
    cell: Callable[[Mapping[str, object]], str]


def _count(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:.2f} M"
    if value >= 1e3:
        return f"{value / 1e3:.0f} k"
    return f"{value:.0f}"


def _rate(prefix: str) -> Callable[[Mapping[str, object]], str]:
    def cell(m: Mapping[str, object]) -> str:
        mib, rec = float(m[f"{prefix}_mib_s"]), float(m[f"{prefix}_rec_s"])  # type: ignore[arg-type]
        return f"{mib:.1f} MiB/s ({_count(rec)} rec/s)"

    return cell


def _records_read(m: Mapping[str, object]) -> str:
    right = "all" if float(m["spark_count_right"]) else "WRONG COUNT"  # type: ignore[arg-type]
    return f"{float(m['spark_records']):,.0f} ({right})"  # type: ignore[arg-type]


def _count_of(key: str) -> Callable[[Mapping[str, object]], str]:
    return lambda m: _count(float(m[key]))  # type: ignore[arg-type]


def _number(key: str, digits: int) -> Callable[[Mapping[str, object]], str]:
    return lambda m: f"{float(m[key]):.{digits}f}"  # type: ignore[arg-type]


ROWS: dict[str, tuple[Row, ...]] = {
    "throughput": (
        Row("produce", "produce_mib_s", _rate("produce")),
        Row("consume", "consume_mib_s", _rate("consume")),
        Row("broker CPU s per GiB moved", "cpu_s_per_gib", _number("cpu_s_per_gib", 2)),
        Row(
            "broker page faults per GiB produced",
            "faults_per_gib_produce",
            _count_of("faults_per_gib_produce"),
        ),
    ),
    "big": (
        Row("volume produced MiB", "produced_mib", _number("produced_mib", 0)),
        Row("produce", "produce_mib_s", _rate("produce")),
        Row("broker CPU s per GiB", "cpu_s_per_gib_produce", _number("cpu_s_per_gib_produce", 2)),
        Row(
            "broker page faults per GiB",
            "faults_per_gib_produce",
            _count_of("faults_per_gib_produce"),
        ),
        Row("broker peak RSS MiB (VmHWM)", "peak_rss_mib", _number("peak_rss_mib", 0)),
        Row("broker RSS MiB at the end (VmRSS)", "rss_mib", _number("rss_mib", 0)),
    ),
    "latency": (
        Row("p50 ms", "p50_ms", _number("p50_ms", 2)),
        Row("p99 ms", "p99_ms", _number("p99_ms", 2)),
    ),
    "group-join": (
        Row(
            "join to first record s, all members",
            "join_first_record_s",
            _number("join_first_record_s", 3),
        ),
    ),
    "group-commit": (Row("commits/s", "commits_s", _number("commits_s", 0)),),
    "transactions": (
        Row("idempotent produce", "idem_mib_s", _rate("idem")),
        Row("transactional produce, 100 per txn", "txn100_mib_s", _rate("txn100")),
        Row("… ratio to idempotent (target ≥ 0.5)", "txn100_ratio", _number("txn100_ratio", 2)),
        Row("… commit p50 ms", "txn100_commit_p50_ms", _number("txn100_commit_p50_ms", 2)),
        Row("… commit p99 ms", "txn100_commit_p99_ms", _number("txn100_commit_p99_ms", 2)),
        Row("transactional produce, 10,000 per txn", "txn10k_mib_s", _rate("txn10k")),
        Row("… ratio to idempotent (target ≥ 0.9)", "txn10k_ratio", _number("txn10k_ratio", 2)),
        Row("… commit p50 ms", "txn10k_commit_p50_ms", _number("txn10k_commit_p50_ms", 2)),
        Row("… commit p99 ms", "txn10k_commit_p99_ms", _number("txn10k_commit_p99_ms", 2)),
        Row("read_committed consume", "rc_mib_s", _rate("rc")),
        Row("read_uncommitted consume", "ru_mib_s", _rate("ru")),
        Row("… read_committed ratio (target ≥ 0.9)", "rc_ratio", _number("rc_ratio", 2)),
    ),
    "spark": (
        Row("Spark batch read", "spark_mib_s", _rate("spark")),
        Row("records read", "spark_records", _records_read),
        Row("broker CPU s during the read", "broker_cpu_s", _number("broker_cpu_s", 1)),
        Row("… as % of one core", "broker_cpu_pct", _number("broker_cpu_pct", 0)),
    ),
}

NOTE = (
    "Ratio = Gregor/Tansu: above 1 is better for throughput, below 1 is better for CPU, "
    "page faults, RSS, latency and group join time."
)


def _ratio(a: Mapping[str, object] | None, b: Mapping[str, object] | None, key: str) -> str:
    if not a or not b or key not in a or key not in b:
        return "–"
    num, den = float(a[key]), float(b[key])  # type: ignore[arg-type]
    if den == 0 or math.isnan(num) or math.isnan(den):
        return "–"
    return f"{num / den:.2f}×"


def _cell(result: Mapping[str, object] | None, row: Row) -> str:
    if result is None:
        return "not run"
    if "error" in result:
        return "failed"
    return row.cell(result)


def markdown_table(
    scenarios: list[tuple[str, str, str]], results: Results, labels: Mapping[str, str]
) -> str:
    """scenarios: (name, title, kind) in order; labels: broker name -> column title."""
    brokers = list(labels)
    head = ["scenario", "metric", *labels.values()]
    if len(brokers) == 2:
        head.append(f"{labels[brokers[0]]}/{labels[brokers[1]]}")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * 2 + "---:|" * (len(head) - 2)]
    for name, title, kind in scenarios:
        per_broker = [results.get(b, {}).get(name) for b in brokers]
        for i, row in enumerate(ROWS[kind]):
            cells = [title if i == 0 else "", row.metric]
            cells += [_cell(r, row) for r in per_broker]
            if len(brokers) == 2:
                cells.append(_ratio(per_broker[0], per_broker[1], row.key))
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
