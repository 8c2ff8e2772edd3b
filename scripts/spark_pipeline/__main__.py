"""Command line of the reference Spark pipeline: ``./scripts/spark-pipeline [COMMAND]``.

demo      (the default) append events, run the job until it has read them all, print the
          finalized windows, stop; run it again and it resumes from its checkpoints
generate  append events (``--rate`` paces them for a live run)
run       run the job until Ctrl-C or SIGTERM
show      print the results topic's windows (one per key) and the Parquet table's size
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

from pyspark.sql.streaming import StreamingQuery

from . import events, job, results
from .session import new_session

DEFAULTS = {
    "bootstrap": "127.0.0.1:9092",
    "events_topic": "events",
    "results_topic": "event-windows",
    "work_dir": Path("spark-pipeline-data"),
}
RUN_TRIGGER = {"processingTime": "1 second"}
STOP_WAIT_S = 30.0


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="scripts/spark-pipeline",
        description="Spark Structured Streaming over Kafka: events → windowed counts → a "
        "topic and Parquet, with checkpoints.",
    )
    parser.add_argument("--bootstrap", default=DEFAULTS["bootstrap"])
    parser.add_argument("--events-topic", default=DEFAULTS["events_topic"])
    parser.add_argument("--results-topic", default=DEFAULTS["results_topic"])
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=DEFAULTS["work_dir"],
        help="checkpoints and the Parquet table (default: %(default)s)",
    )
    commands = parser.add_subparsers(dest="command")
    demo = commands.add_parser("demo", help="generate, process all, show (the default)")
    demo.add_argument("--events", type=int, default=3000, help="events to append")
    generate = commands.add_parser("generate", help="append events")
    generate.add_argument("--events", type=int, default=3000)
    generate.add_argument("--rate", type=float, default=0, help="events/s (0: unpaced)")
    commands.add_parser("run", help="run the job until Ctrl-C or SIGTERM")
    commands.add_parser("show", help="print the results")
    args = parser.parse_args(argv)
    if args.command is None:
        args = parser.parse_args([*argv, "demo"])
    return args


def _config(args: argparse.Namespace) -> job.PipelineConfig:
    return job.PipelineConfig(
        args.bootstrap, args.events_topic, args.results_topic, args.work_dir.resolve()
    )


def _prepare_topics(config: job.PipelineConfig) -> None:
    events.ensure_topic(config.bootstrap, config.events_topic, events.EVENT_PARTITIONS, {})
    # Keyed by window: compaction keeps one record per window in the log itself.
    results_config = {"cleanup.policy": "compact"}
    events.ensure_topic(config.bootstrap, config.results_topic, 1, results_config)


def _generate(config: job.PipelineConfig, count: int, rate: float = 0) -> None:
    first = events.record_count(config.bootstrap, config.events_topic)
    events.produce_events(config.bootstrap, config.events_topic, first, count, rate)
    print(f"appended events {first}..{first + count - 1} to {config.events_topic}")


def _show(config: job.PipelineConfig) -> None:
    view = results.read_results(config.bootstrap, config.results_topic)
    by_window: dict[str, dict[str, object]] = {}
    for window in view.windows.values():
        by_window.setdefault(str(window["window_start"]), {})[str(window["kind"])] = window
    print(f"{'window start (UTC)':<22}" + "".join(f"{k:>10}" for k in events.KINDS) + "  amount")
    for start, kinds in sorted(by_window.items()):
        counts = "".join(f"{kinds[k]['events'] if k in kinds else 0:>10}" for k in events.KINDS)
        amount = sum(int(w["amount"]) for w in kinds.values())  # type: ignore[call-overload]
        print(f"{start:<22}{counts}{amount:>8}")
    print(
        f"{len(view.windows)} window results in {config.results_topic} "
        f"({view.records} records, {view.duplicates} repeated by a replayed batch"
        + (f", {len(view.conflicts)} CONFLICTING" if view.conflicts else "")
        + ")"
    )


def _run_until_signalled(config: job.PipelineConfig) -> None:
    spark = new_session("spark-pipeline")
    queries = job.start(spark, config, RUN_TRIGGER)
    stopping: list[int] = []
    # The handler only records the signal: a Py4J call from inside it could interleave
    # with the one the main thread is blocked in.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda s, _f: stopping.append(s))
    print(f"running; results to {config.results_topic} and {config.parquet_dir}; Ctrl-C stops")
    try:
        while not stopping and all(q.isActive for q in queries):
            spark.streams.awaitAnyTermination(1)  # raises a failed query's exception
    finally:
        _stop_between_batches(queries)
        spark.stop()


def _stop_between_batches(queries: list[StreamingQuery]) -> None:
    """Stop each query once no micro-batch of it runs, waiting STOP_WAIT_S at most: a stop
    interrupts a running batch's tasks, which Spark logs as a wall of errors (the batch
    re-runs at the next start either way). Spark offers no event for it: poll its status."""
    deadline = time.monotonic() + STOP_WAIT_S
    for q in queries:
        while q.isActive and q.status["isTriggerActive"] and time.monotonic() < deadline:
            time.sleep(0.1)
        q.stop()


def _demo(config: job.PipelineConfig, count: int) -> None:
    _generate(config, count)
    spark = new_session("spark-pipeline")
    try:
        queries = job.start(spark, config, RUN_TRIGGER)
        for q in queries:
            q.processAllAvailable()
        for q in queries:
            q.stop()
        rows = spark.read.parquet(str(config.parquet_dir)).count()
    finally:
        spark.stop()
    _show(config)
    print(f"{rows} window results in the Parquet table {config.parquet_dir}")


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    config = _config(args)
    _prepare_topics(config)
    if args.command == "generate":
        _generate(config, args.events, args.rate)
    elif args.command == "run":
        _run_until_signalled(config)
    elif args.command == "show":
        _show(config)
    else:
        _demo(config, args.events)
    return 0


if __name__ == "__main__":
    sys.exit(main())
