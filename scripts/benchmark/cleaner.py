"""Log cleaner throughput: `scripts/bench cleaner [--mb 200] [--keys 10000] [--codec lz4]`.

Writes a compacted log of --mb MiB (batches of 200 records with 80-byte random values over
--keys keys, in 4 MiB segments) with Gregor's Log, then times one cleaning pass over all of it (the
worker's work: map the dirty section, recopy every segment) in this process, and reports
MB/s of dirty log and CPU seconds per GB. The swap itself is a few renames on the broker's
event loop and not part of the figure. `--latency SECONDS` instead measures produce round
trips on a broker whose cleaner is busy, against the same load with the cleaner off.

`--worker` cleans in a real cleaner worker process instead, pass after pass until nothing is
dirty, with the broker's log.cleaner.dedupe.buffer.size (`--buffer-mb`, 128 by default), and
reports the worker's peak resident set (VmHWM); `--records N` writes N records instead of
--mb, `--value-bytes` sets their size. `--records 6000000 --keys 6000000 --value-bytes 16
--worker`: 6 million distinct keys, more than one pass of the default map holds.
"""

from __future__ import annotations

import argparse
import os
import pickle
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from gregor.log.cleaner import CleanResult, SegmentFile, clean_log, frame, peak_rss  # noqa: E402
from gregor.log.cleaner_manager import CleanerConfig, LogCleaner  # noqa: E402
from gregor.log.config import LogConfig  # noqa: E402
from gregor.log.manager import LogManager  # noqa: E402
from gregor.wire.compression import CODEC_NAMES  # noqa: E402
from gregor.wire.records import build_batch  # noqa: E402

_CODECS = {name: codec for codec, name in CODEC_NAMES.items()}
_BATCH = 200


def _fill(
    manager: LogManager,
    mb: int,
    keys: int,
    codec: int,
    *,
    records_wanted: int = 0,
    value_bytes: int = 80,
    min_ratio: float = 0.5,
) -> int:
    config = LogConfig(
        cleanup_policy="compact", segment_bytes=4 << 20, min_cleanable_dirty_ratio=min_ratio
    )
    log = manager.get_or_create("bench", 0, config, now_ms=int(time.time() * 1000))
    now = int(time.time() * 1000)
    written = n = 0
    pool = random.Random(1).randbytes(1 << 16)  # values that do not compress away
    v = value_bytes
    while (n < records_wanted) if records_wanted else (written < mb << 20):
        records = [
            (b"key-%08d" % ((n + i) % keys), pool[(o := (n + i) * v % 65_000) : o + v], [], now)
            for i in range(_BATCH)
        ]
        batch = build_batch(records, compression=codec)
        log.append_as_leader(batch, leader_epoch=0, now_ms=now)
        written += len(batch)
        n += _BATCH
    log._roll(log.log_end_offset, now)  # the whole log becomes cleanable
    return n


def _probe_latencies(cleaner: bool, seconds: float) -> tuple[list[float], int]:
    """Round trips (ms) of one-record acks=1 produces to a plain topic while another client
    keeps writing a compacted topic, on a broker with the cleaner on or off; and the number
    of cleaning passes meanwhile."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from compat_tests.broker import BrokerProcess

    overrides = {"log.cleaner.enable": str(cleaner).lower(), "log.cleaner.backoff.ms": "100"}
    with tempfile.TemporaryDirectory() as tmp, BrokerProcess(Path(tmp), overrides) as broker:
        compacted = {"cleanup.policy": "compact", "segment.bytes": str(4 << 20)}
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # outlives its futures
        futures = admin.create_topics(
            [NewTopic("compacted", 1, 1, config=compacted), NewTopic("probe", 1, 1)]
        )
        for future in futures.values():
            future.result(30)
        stop = threading.Event()

        def write() -> None:
            p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20})
            n = 0
            while not stop.is_set():
                try:
                    p.produce("compacted", b"v" * 80, b"key-%d" % (n % 10_000))
                    n += 1
                except BufferError:
                    p.poll(0.01)
            p.flush(30)

        writer = threading.Thread(target=write)
        writer.start()
        probe = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "acks": 1})
        latencies = []
        try:
            time.sleep(5)  # the compacted topic gets segments to clean
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                start = time.perf_counter()
                probe.produce("probe", b"x")
                probe.flush(10)
                latencies.append((time.perf_counter() - start) * 1000)
        finally:
            stop.set()
            writer.join()
        passes = broker.log_path.read_text().count("Cleaned log compacted-0")
    return latencies, passes


def _latency(seconds: float) -> None:
    for cleaner in (False, True):
        ms, passes = _probe_latencies(cleaner, seconds)
        q = statistics.quantiles(ms, n=100)
        print(
            f"produce round trip, cleaner {'on ' if cleaner else 'off'}: p50 {q[49]:.2f} ms, "
            f"p99 {q[98]:.2f} ms, max {max(ms):.1f} ms over {len(ms)} produces "
            f"({passes} cleaning passes meanwhile)"
        )


def _worker_passes(manager: LogManager, buffer_bytes: int) -> None:
    """Clean the log pass after pass in a cleaner worker process, as the broker does, until
    nothing is dirty; print each pass and the worker's peak RSS (VmHWM)."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    worker = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from gregor.log.cleaner import serve; serve(int(sys.argv[1]))",
        ]
        + [str(os.getpid())],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=dict(os.environ, PYTHONPATH=path),
    )
    assert worker.stdin is not None and worker.stdout is not None
    cleaner = LogCleaner(manager, CleanerConfig(dedupe_buffer_size=buffer_bytes), dict)
    start, passes = time.monotonic(), 0
    try:
        while (ltc := cleaner.grab_filthiest(now := int(time.time() * 1000))) is not None:
            worker.stdin.write(frame(cleaner.task_for(ltc, now)))
            worker.stdin.flush()
            answer = pickle.loads(worker.stdout.read(int.from_bytes(worker.stdout.read(4), "big")))
            assert isinstance(answer, CleanResult), answer
            cleaner.swap_in(ltc, answer, now)
            cleaner.in_progress.discard(ltc.tp)
            passes += 1
            print(
                f"  pass {passes}: [{ltc.first_dirty:,}, {answer.end_offset:,}) of "
                f"[.., {ltc.first_uncleanable:,}), {answer.map_entries:,} keys in a map of "
                f"{answer.map_slots:,} slots, {answer.cpu_s:.1f} s CPU, worker peak RSS "
                f"{answer.peak_rss / 2**20:.0f} MiB"
            )
        hwm = peak_rss(worker.pid)
    finally:
        worker.kill()
        worker.wait()
    print(
        f"worker: {passes} passes in {time.monotonic() - start:.1f} s, peak RSS (VmHWM) "
        f"{hwm / 2**20:.0f} MiB with log.cleaner.dedupe.buffer.size {buffer_bytes / 2**20:.0f} "
        f"MiB"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench cleaner", description=__doc__)
    parser.add_argument("--mb", type=int, default=200, help="size of the dirty log (MiB)")
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--codec", choices=sorted(_CODECS), default="none")
    parser.add_argument("--records", type=int, default=0, help="write this many (not --mb)")
    parser.add_argument("--value-bytes", type=int, default=80)
    parser.add_argument(
        "--worker",
        action="store_true",
        help="clean in a worker process until nothing is dirty; report its peak RSS",
    )
    parser.add_argument("--buffer-mb", type=float, default=128.0, help="with --worker")
    parser.add_argument(
        "--latency",
        type=float,
        metavar="SECONDS",
        help="instead: produce latency on a broker with the cleaner busy, against it off",
    )
    args = parser.parse_args(argv)
    if args.latency:
        _latency(args.latency)
        return 0
    with tempfile.TemporaryDirectory(prefix="gregor-cleaner-bench-") as tmp:
        manager = LogManager([Path(tmp)], {})
        manager.startup(int(time.time() * 1000))
        records = _fill(
            manager,
            args.mb,
            args.keys,
            _CODECS[args.codec],
            records_wanted=args.records,
            value_bytes=args.value_bytes,
            min_ratio=0.01 if args.worker else 0.5,
        )
        if args.worker:
            log = manager.get("bench", 0)
            assert log is not None
            mb = sum(s.size for s in log.segments) / 1e6
            print(f"{mb:.0f} MB of log, {records:,} records over {args.keys:,} keys")
            _worker_passes(manager, int(args.buffer_mb * 2**20))
            manager.shutdown({})
            return 0
        cleaner = LogCleaner(manager, CleanerConfig(), dict)
        now = int(time.time() * 1000)
        ltc = cleaner.grab_filthiest(now)
        assert ltc is not None
        task = cleaner.task_for(ltc, now)
        dirty = sum(s.size for s in task.segments)
        result = clean_log(task)
        cleaner.swap_in(ltc, result, now)
        manager.shutdown({})
    segments: tuple[SegmentFile, ...] = task.segments
    mb = dirty / 1e6
    print(
        f"cleaner pass ({args.codec}): {mb:.0f} MB of dirty log, {records:,} records over "
        f"{args.keys:,} keys, {len(segments)} segments -> {result.bytes_written / 1e6:.1f} MB"
    )
    print(
        f"  {mb / result.elapsed_s:.1f} MB/s of dirty log ({mb / result.cpu_s:.1f} MB per CPU "
        f"second), {result.cpu_s / (dirty / 1e9):.1f} CPU s per GB "
        f"({result.elapsed_s:.2f} s wall, {result.cpu_s:.2f} s CPU)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
