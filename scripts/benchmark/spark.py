"""The spark scenario (issue #8): Spark's batch read of 100 B records from a 1-partition
topic, with Spark's built-in Kafka source (PySpark 4.3, local[2], its own JVM), as
records/s; whether the read returned every record produced; and the broker's CPU time
during the read. The records are written first by the Java client (acks=1, linger.ms=5,
batch.size=1 MiB), so both brokers serve the same batches."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from .artifacts import REPO
from .drivers import MIB, DriverError
from .procstats import cpu_seconds

if TYPE_CHECKING:  # scenarios imports this module
    from .scenarios import Context

RECORD_SIZE = 100
PRODUCE_SECONDS = 900.0
READ_TIMEOUT_S = 1800.0

Measurements = dict[str, float]


def spark_batch_read(ctx: Context, producer: dict[str, str]) -> Measurements:
    records = ctx.sizes.spark_records
    topic = ctx.new_topic()
    client = ctx.java_client(producer)
    produced = client.produce(ctx.broker.endpoint, topic, RECORD_SIZE, records, PRODUCE_SECONDS)
    if produced.records != records:
        raise DriverError(f"produced {produced.records} of {records} records")
    result, broker_cpu = _read(ctx, topic, ctx.broker.workdir / "spark-read.log")
    seconds = float(result["seconds"])
    read = int(result["records"])
    right = read == records and int(result["bytes"]) == records * RECORD_SIZE
    return {
        "spark_rec_s": read / seconds,
        "spark_mib_s": int(result["bytes"]) / MIB / seconds,
        "spark_records": float(read),
        "spark_count_right": 1.0 if right else 0.0,
        "spark_seconds": seconds,
        "broker_cpu_s": broker_cpu,
        "broker_cpu_pct": 100 * broker_cpu / seconds,
    }


def _read(ctx: Context, topic: str, log_path: Path) -> tuple[dict[str, Any], float]:
    """Runs scripts/spark_pipeline/batch_read.py; the broker's CPU seconds are counted from
    its "ready" line (Spark session up) to its result."""
    command = [sys.executable, "-m", "scripts.spark_pipeline.batch_read", ctx.broker.bootstrap]
    lines: queue.Queue[str] = queue.Queue()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [*command, topic],
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
        )
    reader = threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True)
    reader.start()
    deadline = time.monotonic() + READ_TIMEOUT_S
    cpu_ready: float | None = None
    try:
        while True:
            try:
                message = json.loads(lines.get(timeout=1))
            except queue.Empty:
                ctx.broker.endpoint.check("spark batch read")
                if not reader.is_alive() and lines.empty():
                    raise DriverError(
                        f"spark batch read exited {proc.wait()}:\n{_tail(log_path)}"
                    ) from None
                if time.monotonic() > deadline:
                    raise DriverError(
                        f"spark batch read timed out after {READ_TIMEOUT_S:.0f}s"
                    ) from None
                continue
            if message.get("ready"):
                cpu_ready = cpu_seconds(ctx.broker.pid)
            elif "records" in message and cpu_ready is not None:
                broker_cpu = cpu_seconds(ctx.broker.pid) - cpu_ready
                proc.wait(60)  # the session is already stopped
                return message, broker_cpu
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _pump(stream: IO[bytes], lines: queue.Queue[str]) -> None:
    """The child's JSON lines (anything else on its stdout is skipped)."""
    for raw in stream:
        if raw.startswith(b"{"):
            lines.put(raw.decode())


def _tail(path: Path, lines: int = 15) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
