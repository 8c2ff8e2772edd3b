"""Command line of scripts/bench: run the scenarios on each broker, print the table."""

from __future__ import annotations

import argparse
import json
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path
from typing import NoReturn

from .artifacts import REPO, ensure_java_driver, ensure_tansu
from .brokers import KINDS, Broker, BrokerError
from .drivers import MIB, DriverError, JavaDriver
from .procstats import DROP_PAGE_CACHE_HELP, settle_page_cache
from .profile import Profile
from .report import NOTE, markdown_table
from .scenarios import (
    BY_NAME,
    PARTITIONS,
    SCENARIOS,
    SIZES,
    Context,
    Scenario,
    ScenarioError,
    Sizes,
)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="scripts/bench",
        description="Gregor and Tansu side by side on this machine, with the same clients. "
        "`scripts/bench cluster --help`: the 3-broker cluster benchmarks; "
        "`scripts/bench security --help`: TLS, SASL and ACLs; "
        "`scripts/bench groups --help`: the group protocols.",
    )
    parser.add_argument(
        "--size",
        choices=sorted(SIZES),
        default="small",
        help="small: smoke run, seconds per scenario; full: README numbers (2 GiB produce)",
    )
    parser.add_argument("--only", choices=sorted(KINDS), help="run a single broker")
    parser.add_argument(
        "--scenarios",
        help="comma-separated subset of: " + ", ".join(s.name for s in SCENARIOS),
    )
    parser.add_argument("--json", type=Path, help="also write all measurements here")
    parser.add_argument("--drop-page-cache", action="store_true", help=DROP_PAGE_CACHE_HELP)
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="sample Gregor with py-spy and perf during each scenario; samples and a "
        "summary per scenario go to DIR (docs/profiling.md)",
    )
    parser.add_argument(
        "--metrics",
        type=float,
        metavar="SECONDS",
        help="Gregor serves Prometheus metrics, scraped every SECONDS during each scenario "
        "(0: never, the recording's cost alone)",
    )
    args = parser.parse_args(argv)
    if args.scenarios:
        unknown = set(args.scenarios.split(",")) - set(BY_NAME)
        if unknown:
            parser.error(f"unknown scenarios: {', '.join(sorted(unknown))}")
    return args


def _terminate(signum: int, _frame: object) -> NoReturn:
    raise KeyboardInterrupt(f"signal {signum}")


def _git_commit() -> str:
    out = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return out.stdout.strip()


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.machine()


def _log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _run_one(
    scenario: Scenario,
    broker_name: str,
    sizes: Sizes,
    java: JavaDriver | None,
    work: Path,
    scrape_every_s: float | None = None,
    profile: Path | None = None,
) -> dict:
    """One scenario on a fresh broker process, sampled into ``profile`` if given (Gregor
    only); a failure becomes {"error": text}."""
    kind = KINDS[broker_name]
    started = time.monotonic()
    broker = Broker(kind, work / f"{broker_name}-{scenario.name}", scrape_every_s)
    try:
        with broker:
            sampled = profile is not None and kind.command is None
            try:
                with Profile(broker.pid, profile / scenario.name) if sampled else nullcontext():
                    result: dict = scenario.run(Context(broker, sizes, java))
            except (BrokerError, DriverError, ScenarioError) as e:
                status = "running" if broker.alive() else f"exit status {broker.returncode}"
                tail = broker.log_tail(10)
                raise ScenarioError(f"{e}\n--- {kind.label} ({status}) log tail ---\n{tail}") from e
    except (BrokerError, ScenarioError) as e:
        _log(f"  {kind.label}: FAILED after {time.monotonic() - started:.0f}s: {e}")
        return {"error": str(e)}
    shown = ", ".join(f"{k}={v:.4g}" for k, v in result.items())
    _log(f"  {kind.label}: {time.monotonic() - started:.0f}s: {shown}")
    if broker.scrape_report:
        _log(f"  {kind.label} metrics: {broker.scrape_report}")
    return result


def median_result(runs: list[dict]) -> dict:
    """The median of each measurement over a scenario's rounds, the rounds kept alongside;
    the first failure if any round failed."""
    for run in runs:
        if "error" in run:
            return run
    if len(runs) == 1:
        return runs[0]
    merged: dict = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
    merged["rounds"] = runs
    return merged


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGHUP, _terminate)
    if argv[:1] == ["cluster"]:
        from .cluster import main as cluster_main  # needs the repo's packages on the path

        return cluster_main(argv[1:])
    if argv[:1] == ["cleaner"]:
        from .cleaner import main as cleaner_main

        return cleaner_main(argv[1:])
    if argv[:1] == ["metrics-cost"]:
        from .metrics_cost import main as metrics_cost

        return metrics_cost(argv[1:])
    if argv[:1] == ["security"]:
        from .security import main as security

        return security(argv[1:])
    if argv[:1] == ["groups"]:
        from .group_protocols import main as group_protocols

        return group_protocols(argv[1:])
    if argv[:1] == ["cluster-scale"]:
        from .cluster_scale import main as cluster_scale

        return cluster_scale(argv[1:])
    args = _parse(argv)
    sizes = SIZES[args.size]
    chosen = [BY_NAME[n] for n in args.scenarios.split(",")] if args.scenarios else SCENARIOS
    brokers = [args.only] if args.only else ["gregor", "tansu"]
    big = f"{sizes.big_bytes / (1 << 30):g} GiB" if sizes.big_bytes >= 1 << 30 else None
    big = big or f"{sizes.big_bytes // MIB} MiB"

    java = JavaDriver(ensure_java_driver()) if any(s.uses_java for s in chosen) else None
    if "tansu" in brokers:
        ensure_tansu()
    results: dict[str, dict[str, dict]] = {b: {} for b in brokers}
    settled = args.drop_page_cache
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="gregor-bench-") as tmp:
            # Scenario-major order: both brokers see the same machine state, drift hits both.
            for scenario in chosen:
                _log(f"{scenario.name}: {scenario.title.format(big=big)}")
                runs: dict[str, list[dict]] = {name: [] for name in brokers}
                for _ in range(scenario.rounds):
                    for name in brokers:
                        if settled and not settle_page_cache():
                            _log("the page cache cannot be dropped (needs root); measuring anyway")
                            settled = False
                        runs[name].append(
                            _run_one(
                                scenario, name, sizes, java, Path(tmp), args.metrics, args.profile
                            )
                        )
                for name in brokers:
                    results[name][scenario.name] = median_result(runs[name])
    except KeyboardInterrupt:
        _log("interrupted; brokers stopped and temporary files removed")
        return 130
    _log(f"total {time.monotonic() - started:.0f}s")

    labels = {b: KINDS[b].label for b in brokers}
    rows = [(s.name, s.title.format(big=big), s.kind) for s in chosen]
    print(markdown_table(rows, results, labels))
    print()
    storage = "; ".join(f"{KINDS[b].label} storage: {KINDS[b].storage}" for b in brokers)
    if args.metrics is not None and "gregor" in brokers:
        storage += f"; Gregor metrics on, scraped every {args.metrics:g} s"
    print(
        f"{NOTE} Topics: {PARTITIONS} partition, replication factor 1; "
        f"clients and broker share one machine ({_cpu_model()}). {storage}. "
        f"Size: {args.size}; the page cache {'dropped' if settled else 'not dropped'} before "
        "each run."
    )
    if args.json:
        meta = {
            "size": args.size,
            "metrics_scrape_s": args.metrics,
            "sizes": vars(sizes),
            "partitions": PARTITIONS,
            "page_cache_dropped": settled,
            "commit": _git_commit(),
            "cpu": _cpu_model(),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        args.json.write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
    failures = [
        f"{KINDS[b].label} {name}: {r['error'].splitlines()[0]}"
        for b, per in results.items()
        for name, r in per.items()
        if "error" in r
    ]
    if failures:
        _log("failed runs (details above):\n  " + "\n  ".join(failures))
    return 1 if failures else 0
