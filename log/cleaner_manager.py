"""The log cleaner (Kafka's LogCleaner and LogCleanerManager): picks the dirtiest compacted
log, has a worker process clean it, swaps the cleaned segments in, and remembers in each log
directory's `cleaner-offset-checkpoint` where every log's dirty section starts.

Why worker processes and not threads: a pass walks every record in Python, which holds the
GIL; a thread doing that takes turns with the event loop every 5 ms (sys.getswitchinterval),
adding that much to produce and fetch latency and halving the loop's throughput, where a
process runs on the other core untouched. The worker only reads inactive segments (which
never change) and writes `.cleaned` files; the swap, a handful of renames, happens here on
the event loop between two requests, so readers see either the old segment list or the new
one, and sendfile() of a replaced segment keeps working on its renamed `.deleted` file until
file.delete.delay.ms. log.cleaner.threads workers run at once, on different logs.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import anyio

from gregor._paths import set_child_pythonpath
from gregor.configdef import LONG_MAX
from gregor.log.checkpoint import read_checkpoint, write_checkpoint
from gregor.log.cleaner import (
    CleanResult,
    CleanTask,
    SegmentFile,
    cleaned_paths,
    crash_point,
    frame,
)
from gregor.log.errors import KafkaStorageError
from gregor.log.log import Log, largest_timestamp
from gregor.log.manager import LogManager, TopicPartition
from gregor.log.offset_map import map_capacity, map_slots
from gregor.log.segment import LogSegment

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """The broker's log.cleaner.* keys, Kafka's defaults."""

    enable: bool = True
    threads: int = 1
    dedupe_buffer_size: int = 128 * 1024 * 1024
    io_buffer_load_factor: float = 0.9
    io_max_bytes_per_second: float = 1.7976931348623157e308
    backoff_ms: int = 15_000


@dataclass(slots=True)
class LogToClean:
    tp: TopicPartition
    log: Log
    log_dir: Path
    first_dirty: int
    first_uncleanable: int
    segments: list[LogSegment]  # the log's segments below first_uncleanable
    truncations: int
    cleanable_ratio: float


def cleanable_offsets(
    log: Log, checkpoint: int | None, now_ms: int, high_watermark: int
) -> tuple[int, int, bool]:
    """(first dirty offset, first uncleanable offset, must clean now) as Kafka computes them:
    the dirty section starts at the checkpoint (the log start if it is below it or past the
    log end) and stops at the active segment, the last stable offset (so every transaction
    the pass meets is decided: an open one is never cleaned), and the first segment holding
    a record younger than min.compaction.lag.ms, snapped down to a segment base.
    A dirty section older than max.compaction.lag.ms must be cleaned whatever its ratio."""
    config = log.config
    segments = log.segments
    first_dirty = checkpoint if checkpoint is not None else log.log_start_offset
    if not log.log_start_offset <= first_dirty <= log.log_end_offset:
        first_dirty = log.log_start_offset
    active_base = segments[-1].base_offset
    uncleanable = min(active_base, log.last_stable_offset(high_watermark))
    dirty = [
        s
        for i, s in enumerate(segments[:-1])
        if segments[i + 1].base_offset > first_dirty and s.base_offset < active_base
    ]
    if config.min_compaction_lag_ms > 0:
        for segment in dirty:
            if largest_timestamp(segment) > now_ms - config.min_compaction_lag_ms:
                uncleanable = min(uncleanable, segment.base_offset)
                break
    # Down to the base of the segment holding it: only whole segments are cleaned.
    bases = [s.base_offset for s in segments if s.base_offset <= uncleanable]
    first_uncleanable = bases[-1] if bases else segments[0].base_offset
    must_clean = (
        bool(dirty)
        and config.max_compaction_lag_ms < LONG_MAX
        and 0 <= dirty[0].first_batch_timestamp() < now_ms - config.max_compaction_lag_ms
    )
    return first_dirty, first_uncleanable, must_clean


class LogCleaner:
    def __init__(
        self,
        logs: LogManager,
        config: CleanerConfig,
        high_watermarks: Callable[[], Mapping[TopicPartition, int]],
    ) -> None:
        self.logs = logs
        self.config = config
        self.high_watermarks = high_watermarks
        self.checkpoints: dict[TopicPartition, int] = {}
        self.in_progress: set[TopicPartition] = set()
        self.uncleanable: set[TopicPartition] = set()  # a pass failed: skipped until restart
        self._workers: list[asyncio.subprocess.Process] = []
        # The log each checkpoint belongs to: a deleted and re-created partition starts over.
        self._owners: dict[TopicPartition, Log] = {}

    def load_checkpoints(self) -> None:
        for log_dir in self.logs.log_dirs:
            try:
                self.checkpoints.update(read_checkpoint(log_dir / CLEANER_OFFSET_CHECKPOINT))
            except KafkaStorageError as exc:
                # Cleaning those logs from their start again is slower, never wrong.
                logger.error("Ignoring %s: %s", CLEANER_OFFSET_CHECKPOINT, exc)

    # -- choosing ---------------------------------------------------------------------------
    def grab_filthiest(self, now_ms: int) -> LogToClean | None:
        """The compacted log with the largest cleanable ratio above its
        min.cleanable.dirty.ratio (or past max.compaction.lag.ms), marked in progress."""
        hws = self.high_watermarks()
        best: LogToClean | None = None
        for tp, log in self.logs.all_logs():
            if (
                not log.config.compact
                or log.offline
                or tp in self.in_progress
                or tp in self.uncleanable
            ):
                continue
            if self._owners.setdefault(tp, log) is not log:
                self._owners[tp] = log
                self.checkpoints.pop(tp, None)
            first_dirty, first_uncleanable, must_clean = cleanable_offsets(
                log, self.checkpoints.get(tp), now_ms, hws.get(tp, log.log_end_offset)
            )
            clean = cleanable = 0
            below: list[LogSegment] = []
            for i, segment in enumerate(log.segments):
                if segment.base_offset >= first_uncleanable:
                    break
                below.append(segment)
                if log.segments[i + 1].base_offset <= first_dirty:
                    clean += segment.size
                else:
                    cleanable += segment.size
            if not cleanable:
                continue
            ratio = cleanable / (clean + cleanable)
            if not (must_clean or ratio > log.config.min_cleanable_dirty_ratio):
                continue
            if best is None or ratio > best.cleanable_ratio:
                log_dir = self.logs.log_dir_of(*tp)
                assert log_dir is not None
                best = LogToClean(
                    tp,
                    log,
                    log_dir,
                    first_dirty,
                    first_uncleanable,
                    below,
                    log.truncations,
                    ratio,
                )
        if best is not None:
            self.in_progress.add(best.tp)
        return best

    def task_for(self, ltc: LogToClean, now_ms: int) -> CleanTask:
        config = ltc.log.config
        threads = max(self.config.threads, 1)
        producers = ltc.log.producer_state.producers
        last_offsets = {pid: e.last_offset for pid, e in producers.items() if e.last_offset >= 0}
        marker_epochs = {
            pid: e.producer_epoch
            for pid, e in producers.items()
            if e.last_offset < 0 and e.producer_epoch >= 0
        }
        return CleanTask(
            directory=str(ltc.log.directory),
            segments=tuple(
                SegmentFile(
                    s.base_offset,
                    s.size,
                    s.offset_index.size_bytes,
                    s.time_index.size_bytes,
                    os.stat(s.log_path).st_mtime_ns,
                )
                for s in ltc.segments
            ),
            first_dirty=ltc.first_dirty,
            first_uncleanable=ltc.first_uncleanable,
            now_ms=now_ms,
            delete_retention_ms=config.delete_retention_ms,
            segment_bytes=config.segment_bytes,
            segment_index_bytes=config.segment_index_bytes,
            index_interval_bytes=config.index_interval_bytes,
            map_slots=map_slots(self.config.dedupe_buffer_size, threads),
            map_capacity=map_capacity(
                self.config.dedupe_buffer_size, threads, self.config.io_buffer_load_factor
            ),
            producer_last_offsets=last_offsets,
            producer_marker_epochs=marker_epochs,
            aborted_txns=tuple(
                ltc.log.collect_aborted_transactions(
                    ltc.segments[0].base_offset, ltc.first_uncleanable
                )
            ),
            io_bytes_per_second=self.config.io_max_bytes_per_second / threads,
            broker_pid=os.getpid(),
        )

    # -- swapping in -------------------------------------------------------------------------
    def swap_in(self, ltc: LogToClean, result: CleanResult, now_ms: int) -> int:
        """Replace each group by its cleaned segment, unless the log changed under the pass
        (truncated, deleted, or a group's segments no longer all there, e.g. retention took
        some): then that cleaned output is dropped. Returns the groups swapped in."""
        log = ltc.log
        current = self.logs.get(*ltc.tp) is log and not log.offline
        unchanged = current and log.truncations == ltc.truncations
        by_base = {s.base_offset: s for s in ltc.segments}
        swapped = 0
        for bases in result.groups:
            old = [by_base[b] for b in bases]
            if unchanged and _consecutive_in(log.segments, old):
                log.replace_segments(old, now_ms)
                swapped += 1
            else:
                for path in cleaned_paths(log.directory, bases[0]):
                    path.unlink(missing_ok=True)
        if unchanged:
            self.checkpoints[ltc.tp] = result.end_offset
        else:
            self.checkpoints.pop(ltc.tp, None)
        return swapped

    def checkpoint_data(self, log_dir: Path) -> dict[TopicPartition, int]:
        """The checkpoints of the logs still in `log_dir`."""
        return {
            tp: offset
            for tp, offset in self.checkpoints.items()
            if self.logs.log_dir_of(*tp) == log_dir
        }

    # -- running -----------------------------------------------------------------------------
    async def run(self, now_ms: Callable[[], int]) -> None:
        """log.cleaner.threads cleaners, each cleaning the dirtiest log in turn and backing
        off log.cleaner.backoff.ms when none is dirty enough; runs until cancelled."""
        self.load_checkpoints()
        try:
            async with anyio.create_task_group() as tg:
                for _ in range(self.config.threads):
                    tg.start_soon(self._cleaner_loop, now_ms)
        finally:
            self.stop()

    def stop(self) -> None:
        for worker in self._workers:
            if worker.returncode is None:
                worker.kill()
        self._workers = []

    async def _cleaner_loop(self, now_ms: Callable[[], int]) -> None:
        worker: asyncio.subprocess.Process | None = None
        while True:
            ltc = self.grab_filthiest(now_ms())
            if ltc is None:
                await anyio.sleep(self.config.backoff_ms / 1000)
                continue
            try:
                task = self.task_for(ltc, now_ms())
                if worker is None or worker.returncode is not None:
                    worker = await self._start_worker()
                await self._clean(worker, ltc, task, now_ms)
            except (OSError, EOFError, asyncio.IncompleteReadError) as exc:
                logger.error("Log cleaner worker failed while cleaning %s: %s", ltc.log, exc)
                if worker is not None and worker.returncode is None:
                    worker.kill()
                worker = None
                await anyio.sleep(self.config.backoff_ms / 1000)
            except Exception:
                # A bug must not take the broker down: this log is left alone until a restart.
                logger.exception("Cleaning %s failed; it is not cleaned again", ltc.log)
                self.uncleanable.add(ltc.tp)
            finally:
                self.in_progress.discard(ltc.tp)

    async def _start_worker(self) -> asyncio.subprocess.Process:
        env = dict(os.environ)
        set_child_pythonpath(env)
        worker = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            "import sys; from gregor.log.cleaner import serve; serve(int(sys.argv[1]))",
            str(os.getpid()),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=env,
        )
        self._workers.append(worker)
        return worker

    async def _clean(
        self,
        worker: asyncio.subprocess.Process,
        ltc: LogToClean,
        task: CleanTask,
        now_ms: Callable[[], int],
    ) -> None:
        assert worker.stdin is not None and worker.stdout is not None
        topic, partition = ltc.tp
        logger.info(
            "Cleaning log %s-%d: dirty section [%d, %d)",
            topic,
            partition,
            ltc.first_dirty,
            ltc.first_uncleanable,
        )
        worker.stdin.write(frame(task))
        await worker.stdin.drain()
        length = int.from_bytes(await worker.stdout.readexactly(4), "big")
        answer: CleanResult | str = pickle.loads(await worker.stdout.readexactly(length))
        if isinstance(answer, str):
            logger.error(
                "Cleaning log %s-%d failed, it is not cleaned again until a restart: %s",
                topic,
                partition,
                answer,
            )
            self.uncleanable.add(ltc.tp)
            return
        swapped = self.swap_in(ltc, answer, now_ms())
        crash_point("swapped")
        log_dir = ltc.log_dir
        await anyio.to_thread.run_sync(
            write_checkpoint, log_dir / CLEANER_OFFSET_CHECKPOINT, self.checkpoint_data(log_dir)
        )
        mb = answer.bytes_read / 1e6
        logger.info(
            "Cleaned log %s-%d up to offset %d: %d of %d segment groups swapped in, "
            "%.1f MB read, %.1f MB written (%.0f%% of records kept) in %.2f s (%.1f MB/s, "
            "%.2f CPU s), %d dirty MB mapped into %d keys (map of %d slots), worker peak RSS "
            "%.0f MB",
            topic,
            partition,
            answer.end_offset,
            swapped,
            len(answer.groups),
            mb,
            answer.bytes_written / 1e6,
            100 * answer.records_kept / max(answer.records_read, 1),
            answer.elapsed_s,
            mb / max(answer.elapsed_s, 1e-9),
            answer.cpu_s,
            answer.dirty_bytes // 1_000_000,
            answer.map_entries,
            answer.map_slots,
            answer.peak_rss / 1e6,
        )


def _consecutive_in(segments: list[LogSegment], run: list[LogSegment]) -> bool:
    for i, segment in enumerate(segments):
        if segment is run[0]:
            return len(segments) - i > len(run) and all(
                a is b for a, b in zip(segments[i : i + len(run)], run, strict=True)
            )
    return False
