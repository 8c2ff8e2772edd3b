"""LogManager: every partition log across the broker's log directories, their locks,
checkpoint files, clean-shutdown marker, and the periodic retention/flush/delete work."""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from pathlib import Path

from gregor.log.checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    DiskJob,
    add_atomic_write,
    checkpoint_bytes,
    fsync_path,
    read_checkpoint,
)
from gregor.log.config import LogConfig
from gregor.log.errors import KafkaStorageError
from gregor.log.future import (
    FUTURE_DIR_SUFFIX,
    copy_files,
    new_future_dir,
    segment_files,
)
from gregor.log.leader_epoch import LEADER_EPOCH_CHECKPOINT
from gregor.log.log import Log

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LOCK_FILE = ".lock"
DELETE_DIR_SUFFIX = "-delete"
# Directories of a stray replica: not ours to open.
_STRAY_DIR_SUFFIX = "-stray"
_DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000

TopicPartition = tuple[str, int]
DiskJobs = dict[Path, DiskJob]  # one job per log directory, so a failure names its directory

logger = logging.getLogger(__name__)
# How often a long load of logs logs its progress.
_LOAD_REPORT_S = 10.0

_PROCESS_LIMITS = (errno.EMFILE, errno.ENFILE)


class _Deleted:
    """Logs deleted together (between two flush rounds), waiting out file.delete.delay.ms:
    their directories, renamed `<topic>-<partition>.<token>-delete`, go at `due_ms`. Nothing
    per partition is kept (a Log is a few KB: a deleted topic of 10,000 partitions would
    hold tens of MB, and its descriptors, for the delay): a read in flight holds its segment,
    which reopens the renamed file until the directory goes."""

    __slots__ = ("token", "log_dirs", "names", "delay_ms", "due_ms")

    def __init__(self) -> None:
        self.token = uuid.uuid4().hex
        self.log_dirs: set[Path] = set()
        self.names: set[TopicPartition] | None = set()  # None once sealed
        self.delay_ms = 0
        self.due_ms: int | None = None

    def remove_dirs(self) -> None:
        suffix = f".{self.token}{DELETE_DIR_SUFFIX}"
        for log_dir in self.log_dirs:
            try:
                names = [e.name for e in os.scandir(log_dir) if e.name.endswith(suffix)]
            except OSError:
                continue
            for name in names:
                shutil.rmtree(log_dir / name, ignore_errors=True)


def parse_partition_dir(name: str) -> TopicPartition | None:
    """`<topic>-<partition>` → (topic, partition); topics may contain '-' and '.'."""
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        return None
    return topic, int(partition)


class LogManager:
    def __init__(self, log_dirs: list[Path], broker_props: Mapping[str, str]) -> None:
        if not log_dirs:
            raise ValueError("at least one log directory is required")
        self.log_dirs = [Path(d) for d in log_dirs]
        self.broker_props = dict(broker_props)
        self.default_config = LogConfig.from_properties(self.broker_props, {})
        self._producer_id_expiration_ms = int(
            self.broker_props.get("producer.id.expiration.ms", _DEFAULT_PRODUCER_ID_EXPIRATION_MS)
        )
        self._logs: dict[TopicPartition, Log] = {}
        self._dir_of: dict[TopicPartition, Path] = {}
        # Replicas being moved to another log directory: (that directory, the future log's).
        self._futures: dict[TopicPartition, tuple[Path, Path]] = {}
        self._partition_count = dict.fromkeys(self.log_dirs, 0)
        self._lock_fds: list[int] = []
        self._deleting: list[_Deleted] = []
        self._now_ms = 0
        self.offline_dirs: set[Path] = set()
        self._flush_wanted: set[Log] = set()
        # Logs whose leader-epoch checkpoint lags its cache: the flusher's next round writes them.
        self._epochs_unwritten: dict[TopicPartition, Log] = {}
        # Called when flush.messages wants a flush (the broker wakes its flusher).
        self.wake_flusher: Callable[[], None] = lambda: None

    # -- lifecycle -------------------------------------------------------------------------
    def startup(self, now_ms: int, *, config_for: Callable[[str], LogConfig] | None = None) -> None:
        """Lock the directories and open every partition log in them. `config_for(topic)`
        supplies topic configs (default: the broker's); logs recover unless the directory
        holds the clean-shutdown marker, which is consumed."""
        self._now_ms = now_ms
        for log_dir in self.log_dirs:
            log_dir.mkdir(parents=True, exist_ok=True)
            self._lock(log_dir)
        futures: list[tuple[TopicPartition, Path, Path]] = []
        for log_dir in self.log_dirs:
            marker = log_dir / CLEAN_SHUTDOWN_FILE
            clean = marker.exists()
            recovery_points = read_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT)
            start_offsets = read_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT)
            children = sorted(log_dir.iterdir())
            logger.info(
                "Loading logs from %s (%d entries, %s)",
                log_dir,
                len(children),
                "after a clean shutdown" if clean else "recovering what was not flushed",
            )
            started = report_at = time.monotonic()
            loaded = 0
            for child in children:
                if time.monotonic() >= report_at + _LOAD_REPORT_S:  # a long load shows life
                    report_at = time.monotonic()
                    logger.info("Loaded %d logs from %s so far", loaded, log_dir)
                if not child.is_dir():
                    continue
                if child.name.endswith(DELETE_DIR_SUFFIX):
                    shutil.rmtree(child, ignore_errors=True)
                    continue
                if child.name.endswith(FUTURE_DIR_SUFFIX):
                    future_of = parse_partition_dir(child.name.rpartition(".")[0])
                    if future_of is not None:
                        futures.append((future_of, log_dir, child))
                    continue
                if child.name.endswith(_STRAY_DIR_SUFFIX):
                    continue
                tp = parse_partition_dir(child.name)
                if tp is None:
                    continue
                if tp in self._logs:
                    raise KafkaStorageError(
                        f"duplicate log directories for {tp}: {self._dir_of[tp]} and {log_dir}"
                    )
                config = config_for(tp[0]) if config_for else self.default_config
                self._add(
                    tp,
                    log_dir,
                    Log.open(
                        child,
                        config,
                        recovery_point=recovery_points.get(tp, 0),
                        log_start_offset=start_offsets.get(tp, 0),
                        clean_shutdown=clean,
                        now_ms=now_ms,
                        on_io_error=self._log_io_error,
                    ),
                )
                loaded += 1
            marker.unlink(missing_ok=True)
            logger.info(
                "Loaded %d logs from %s in %.1f s", loaded, log_dir, time.monotonic() - started
            )
        for tp, log_dir, path in futures:
            self._settle_future(tp, log_dir, path, config_for)

    def _settle_future(
        self,
        tp: TopicPartition,
        log_dir: Path,
        path: Path,
        config_for: Callable[[str], LogConfig] | None,
    ) -> None:
        """A future log left by a stop during a replica move: dropped while the current log
        exists (the move is abandoned, as a restart cancels it here), else the swap was cut
        short after the current log was marked for deletion, and the future log, complete
        by then, becomes the partition's log (recovered in full). Deleting a partition, or
        setting it aside, drops its future log first, so nothing else leaves one alone."""
        if tp in self._logs:
            logger.info("Dropping the unfinished move of %s-%d to %s", *tp, log_dir)
            shutil.rmtree(path, ignore_errors=True)
            return
        final = log_dir / f"{tp[0]}-{tp[1]}"
        logger.info("Completing the move of %s-%d to %s", *tp, log_dir)
        os.rename(path, final)
        config = config_for(tp[0]) if config_for else self.default_config
        log = Log.open(final, config, now_ms=self._now_ms, on_io_error=self._log_io_error)
        self._add(tp, log_dir, log)

    def _lock(self, log_dir: Path) -> None:
        fd = os.open(log_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise KafkaStorageError(
                f"log directory {log_dir} is locked by another process"
            ) from None
        self._lock_fds.append(fd)

    def _add(self, tp: TopicPartition, log_dir: Path, log: Log) -> None:
        log.request_flush = self._request_flush
        log.leader_epochs.on_change = partial(self._epochs_changed, tp, log)
        self._logs[tp] = log
        self._dir_of[tp] = log_dir
        self._partition_count[log_dir] += 1

    def shutdown(self, high_watermarks: Mapping[TopicPartition, int]) -> None:
        """Close every log (writing producer snapshots and trimmed indexes), make each
        directory durable with one syncfs instead of ~5 fsyncs per partition (seconds for a
        thousand partitions), then write the checkpoints, every log's end as its recovery
        point, and the clean-shutdown marker; release the directory locks. A directory that
        fails (or had failed) goes without the marker: its logs are recovered at the next
        start."""
        for log_dir in self.log_dirs:
            if log_dir in self.offline_dirs:
                continue
            logs = self._logs_in(log_dir)
            try:
                for log in logs.values():
                    log.close()
                job = DiskJob()
                job.sync_filesystem(log_dir)  # first: the checkpoints claim it all durable
                ends = {tp: log.log_end_offset for tp, log in logs.items()}
                self._add_checkpoints(job, log_dir, logs, ends, high_watermarks)
                add_atomic_write(
                    job, log_dir / CLEAN_SHUTDOWN_FILE, b'{"version":0,"brokerEpoch":-1}'
                )
                job.run_here()
            except (OSError, KafkaStorageError) as exc:
                self.fail_dir(log_dir, exc)
        for log in self._logs.values():
            if log.offline:
                log.close()  # releases the descriptors only
        # Directories of deleted logs still waiting out file.delete.delay.ms stay renamed
        # `*-delete`: the next start removes them (as Kafka's does), so a shutdown after a big
        # deletion (30,000 partitions: 7 s on ext4) is not held up by it.
        self._deleting = []
        self._logs.clear()
        self._dir_of.clear()
        for fd in self._lock_fds:
            os.close(fd)
        self._lock_fds = []

    # -- partitions ------------------------------------------------------------------------
    def get(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def get_or_create(
        self, topic: str, partition: int, config: LogConfig, *, now_ms: int | None = None
    ) -> Log:
        """The partition's log, created in the directory holding the fewest partitions.
        An existing log takes `config` if it differs."""
        tp = (topic, partition)
        log = self._logs.get(tp)
        if log is not None:
            # Mostly the very object (a topic's partitions share theirs): comparing every
            # field of 50,000 partitions' configs showed in a failover.
            if log.config is not config and log.config != config:
                log.update_config(config)
            return log
        online = [d for d in self.log_dirs if d not in self.offline_dirs]
        if not online:
            raise KafkaStorageError(f"every log directory is offline: cannot create {tp}")
        log_dir = min(online, key=lambda d: self._partition_count[d])
        try:
            log = Log.open(
                log_dir / f"{topic}-{partition}",
                config,
                now_ms=self._now_ms if now_ms is None else now_ms,
                on_io_error=self._log_io_error,
            )
        except OSError as exc:
            self.fail_dir(log_dir, exc)
            raise KafkaStorageError(f"creating the log of {tp} failed: {exc}") from exc
        self._add(tp, log_dir, log)
        return log

    def delete(self, topic: str, partition: int) -> None:
        """Rename the directory to `<topic>-<partition>.<token>-delete`; its files go after
        file.delete.delay.ms (run_flush), so fds handed out by reads stay valid meanwhile.
        The Log itself is dropped at once (its per-partition state with it)."""
        tp = (topic, partition)
        self.abandon_future(topic, partition)
        self._epochs_unwritten.pop(tp, None)
        log = self._logs.pop(tp, None)
        if log is None:
            return
        self._flush_wanted.discard(log)
        log_dir = self._dir_of.pop(tp)
        self._partition_count[log_dir] -= 1
        deleted = self._deleting[-1] if self._deleting else None
        if deleted is None or deleted.names is None or tp in deleted.names:
            if deleted is not None:
                deleted.names = None  # a name repeats: the next ones take a new token
            deleted = _Deleted()
            self._deleting.append(deleted)
        assert deleted.names is not None
        deleted.names.add(tp)
        log.rename_dir(log_dir / f"{topic}-{partition}.{deleted.token}{DELETE_DIR_SUFFIX}")
        deleted.log_dirs.add(log_dir)
        deleted.delay_ms = max(deleted.delay_ms, log.config.file_delete_delay_ms)
        log.release_for_delete()

    def discard(self, topic: str, partitions: Iterable[int]) -> None:
        """Close and remove at once the logs of a topic whose creation was not committed (no
        reader can hold their files), and the directories of those that failed to open. All
        are closed before any is removed: removing takes descriptors, which may have run out."""
        for partition in partitions:
            tp = (topic, partition)
            self.abandon_future(topic, partition)
            log = self._logs.pop(tp, None)
            if log is not None:
                self._partition_count[self._dir_of.pop(tp)] -= 1
                log.release_files()
        for partition in partitions:
            for log_dir in self.log_dirs:
                shutil.rmtree(log_dir / f"{topic}-{partition}", ignore_errors=True)

    def set_aside_stray(self, topic: str, partition: int) -> Path:
        """Close the log of a partition the metadata does not know and rename its directory
        to `<topic>-<partition>.<uuid>-stray`, kept for the operator as Kafka does."""
        tp = (topic, partition)
        self.abandon_future(topic, partition)
        log = self._logs.pop(tp)
        log_dir = self._dir_of.pop(tp)
        log.rename_dir(log_dir / f"{topic}-{partition}.{uuid.uuid4().hex}{_STRAY_DIR_SUFFIX}")
        log.close()
        return log.directory

    # -- replica moves between log directories (AlterReplicaLogDirs) -----------------------
    def start_future(self, topic: str, partition: int, log_dir: Path) -> Path:
        """Create the future log's directory of a move of the partition to ``log_dir``."""
        tp = (topic, partition)
        self.abandon_future(topic, partition)
        path = new_future_dir(log_dir, topic, partition)
        self._futures[tp] = (log_dir, path)
        return path

    def future_of(self, topic: str, partition: int) -> tuple[Path, Path] | None:
        """(destination log directory, future log directory) of a move under way."""
        return self._futures.get((topic, partition))

    def abandon_future(self, topic: str, partition: int) -> None:
        moving = self._futures.pop((topic, partition), None)
        if moving is not None:
            shutil.rmtree(moving[1], ignore_errors=True)

    def swap_in_future(self, topic: str, partition: int) -> Log:
        """The last step of a move, on the event loop: the future log already holds every
        inactive segment; copy the rest (the active segment, small by then, without its
        indexes, which are rebuilt), the producer snapshot and the leader epochs, then mark
        the current log for deletion and rename the future log into place. A crash between
        the two renames leaves only the complete future log, which start-up promotes."""
        tp = (topic, partition)
        log = self._logs[tp]
        log_dir, future = self._futures.pop(tp)
        log.flush()
        log.producer_state.map_end_offset = log.log_end_offset
        snapshot = log.producer_state.take_snapshot(sync=True)
        wanted = {p.name for s in log.segments[:-1] for p in segment_files(s)}
        for child in future.iterdir():  # segments retention deleted since they were copied
            if child.name not in wanted:
                child.unlink()
        copy_files(
            [
                *segment_files(log.segments[-1], with_indexes=False),
                snapshot,
                log.directory / LEADER_EPOCH_CHECKPOINT,
            ],
            future,
        )
        source_dir = self._dir_of[tp]
        self.delete(topic, partition)
        fsync_path(source_dir)
        final = log_dir / f"{topic}-{partition}"
        os.rename(future, final)
        fsync_path(log_dir)
        moved = Log.open(
            final,
            log.config,
            log_start_offset=log.log_start_offset,
            clean_shutdown=True,
            now_ms=self._now_ms,
            on_io_error=self._log_io_error,
        )
        self._add(tp, log_dir, moved)
        return moved

    def all_logs(self) -> Iterable[tuple[TopicPartition, Log]]:
        return list(self._logs.items())

    def log_dir_of(self, topic: str, partition: int) -> Path | None:
        return self._dir_of.get((topic, partition))

    def _logs_in(self, log_dir: Path) -> dict[TopicPartition, Log]:
        return {tp: log for tp, log in self._logs.items() if self._dir_of[tp] == log_dir}

    # -- failures --------------------------------------------------------------------------
    def is_offline(self, topic: str, partition: int) -> bool:
        return self._dir_of.get((topic, partition)) in self.offline_dirs

    def _log_io_error(self, log: Log, exc: OSError) -> None:
        if log.directory.parent in self.log_dirs:
            self.fail_dir(log.directory.parent, exc)
        else:
            log.go_offline()

    def fail_dir(self, log_dir: Path, exc: Exception) -> None:
        """Take a log directory offline after an I/O error, as Kafka does: its partitions
        answer KAFKA_STORAGE_ERROR and it is no longer written until a restart."""
        if log_dir in self.offline_dirs:
            return
        if isinstance(exc, OSError) and exc.errno in _PROCESS_LIMITS:
            # The process ran out of descriptors, the disk did not fail: the operation fails
            # (KAFKA_STORAGE_ERROR) and the directory stays online.
            logger.error("Out of file descriptors under %s: %s", log_dir, exc)
            return
        self.offline_dirs.add(log_dir)
        logs = self._logs_in(log_dir)
        logger.error(
            "Log directory %s is offline after an I/O error (%s): its %d partition(s) answer "
            "KAFKA_STORAGE_ERROR until the broker restarts",
            log_dir,
            exc,
            len(logs),
        )
        for log in logs.values():
            log.go_offline()

    # -- periodic work (the caller schedules, and runs the DiskJobs on a worker thread) ------
    def run_retention(
        self, now_ms: int, high_watermarks: Mapping[TopicPartition, int] | None = None
    ) -> list[TopicPartition]:
        """Apply retention to every log (bounded by its high watermark when given) and
        expire idle producer ids. Returns the partitions whose log start moved (their
        segments are renamed: the files go in a later prepare_flush)."""
        self._now_ms = now_ms
        moved = []
        for tp, log in self._logs.items():
            if log.offline:
                continue
            hw = high_watermarks.get(tp) if high_watermarks is not None else None
            start = log.log_start_offset
            log.enforce_retention(now_ms, high_watermark=hw)
            if log.log_start_offset != start:
                moved.append(tp)
            log.remove_expired_producers(now_ms, self._producer_id_expiration_ms)
        return moved

    def _epochs_changed(self, tp: TopicPartition, log: Log) -> None:
        # Not worth waking the flusher (a pass over every log): its next round writes them.
        self._epochs_unwritten[tp] = log

    def _request_flush(self, log: Log) -> None:
        self._flush_wanted.add(log)
        self.wake_flusher()

    def prepare_flush(self, now_ms: int) -> DiskJobs:
        """Queue the fsyncs owed (flush.ms, flush.messages, rolled segments), the due file
        deletions and the writes of leader-epoch checkpoints that lag their caches; recovery
        points advance when the jobs finish (finish_jobs)."""
        self._now_ms = now_ms
        wanted, self._flush_wanted = self._flush_wanted, set()
        jobs: DiskJobs = {}
        for tp, log in self._logs.items():
            if log.offline or (log not in wanted and not log.has_disk_work(now_ms)):
                continue
            log_dir = self._dir_of[tp]
            job = jobs.get(log_dir)
            if job is None:
                job = jobs[log_dir] = DiskJob()
            try:
                if log in wanted:
                    log.flush(job=job)
                log.flush_if_due(now_ms, job)
            except KafkaStorageError:
                continue  # its directory just went offline
            log.delete_pending_segments(now_ms, job)
        unwritten, self._epochs_unwritten = self._epochs_unwritten, {}
        for tp, log in unwritten.items():
            if self._logs.get(tp) is log and not log.offline:
                log.leader_epochs.add_write(jobs.setdefault(self._dir_of[tp], DiskJob()))
        remaining = []
        for deleted in self._deleting:
            deleted.names = None  # sealed: the next deletions start a new batch
            if deleted.due_ms is None:
                deleted.due_ms = now_ms + deleted.delay_ms
            if now_ms >= deleted.due_ms:
                job = jobs.setdefault(min(deleted.log_dirs, default=self.log_dirs[0]), DiskJob())
                job.step(deleted.remove_dirs)
            else:
                remaining.append(deleted)
        self._deleting = remaining
        return {d: job for d, job in jobs.items() if job}

    def finish_jobs(self, jobs: DiskJobs) -> None:
        """On the loop thread, after the jobs ran: release their descriptors, complete them,
        and take the directory of a failed one offline."""
        for log_dir, job in jobs.items():
            error = job.finish()
            if error is not None and log_dir in self.log_dirs:
                self.fail_dir(log_dir, error)

    def run_flush(self, now_ms: int) -> None:
        """prepare_flush, run and finish, all on the calling thread."""
        jobs = self.prepare_flush(now_ms)
        for job in jobs.values():
            job.run()
        self.finish_jobs(jobs)

    # -- checkpoints -----------------------------------------------------------------------
    @staticmethod
    def _add_checkpoints(
        job: DiskJob,
        log_dir: Path,
        logs: Mapping[TopicPartition, Log],
        recovery_points: Mapping[TopicPartition, int],
        high_watermarks: Mapping[TopicPartition, int],
    ) -> None:
        hws = {tp: hw for tp, hw in high_watermarks.items() if tp in logs}
        for name, offsets in (
            (RECOVERY_POINT_CHECKPOINT, recovery_points),
            (REPLICATION_OFFSET_CHECKPOINT, hws),
            (LOG_START_OFFSET_CHECKPOINT, {tp: log.log_start_offset for tp, log in logs.items()}),
        ):
            add_atomic_write(job, log_dir / name, checkpoint_bytes(offsets))

    def prepare_checkpoint(self, high_watermarks: Mapping[TopicPartition, int]) -> DiskJobs:
        """Queue the writes of recovery points, high watermarks (from the replica layer) and
        log start offsets of each online directory's logs, atomically."""
        jobs: DiskJobs = {}
        for log_dir in self.log_dirs:
            if log_dir in self.offline_dirs:
                continue
            logs = self._logs_in(log_dir)
            recovery_points = {tp: log.recovery_point for tp, log in logs.items()}
            jobs[log_dir] = job = DiskJob()
            self._add_checkpoints(job, log_dir, logs, recovery_points, high_watermarks)
        return jobs

    def checkpoint(self, high_watermarks: Mapping[TopicPartition, int]) -> None:
        """prepare_checkpoint, run and finish, all on the calling thread."""
        jobs = self.prepare_checkpoint(high_watermarks)
        for job in jobs.values():
            job.run()
        self.finish_jobs(jobs)

    def read_high_watermarks(self) -> dict[TopicPartition, int]:
        result: dict[TopicPartition, int] = {}
        for log_dir in self.log_dirs:
            result.update(read_checkpoint(log_dir / REPLICATION_OFFSET_CHECKPOINT))
        return result
