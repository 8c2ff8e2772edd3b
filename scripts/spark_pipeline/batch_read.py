"""Time a Spark batch read of a whole topic:
``python -m scripts.spark_pipeline.batch_read BOOTSTRAP TOPIC [--master local[2]]``.

Prints a JSON line once the session is up (``{"ready": true}``, so a caller can start
measuring the broker there), then ``{"records", "bytes", "seconds"}``: how many records the
read returned, the sum of their value sizes, and the read's wall-clock time. Counting and
summing value lengths makes Spark fetch and decode every record without shipping any to
Python.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from .session import new_session


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.spark_pipeline.batch_read")
    parser.add_argument("bootstrap")
    parser.add_argument("topic")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args(argv)
    spark = new_session("batch-read", args.master, log_level="ERROR")
    try:
        print(json.dumps({"ready": True}), flush=True)
        started = time.monotonic()
        totals = (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", args.bootstrap)
            .option("subscribe", args.topic)
            .load()
            .selectExpr("count(*) AS records", "coalesce(sum(length(value)), 0) AS bytes")
            .collect()[0]
        )
        seconds = time.monotonic() - started
    finally:
        spark.stop()
    result = {"records": totals.records, "bytes": totals.bytes, "seconds": seconds}
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
