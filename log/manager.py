"""LogManager: every partition log across the broker's log directories, their locks,
checkpoint files, clean-shutdown marker, and the periodic retention/flush/delete work."""

from __future__ import annotations

import fcntl
import os
import shutil
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from log.checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    read_checkpoint,
    write_atomically,
    write_checkpoint,
)
from log.config import LogConfig
from log.errors import KafkaStorageError
from log.log import Log

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LOCK_FILE = ".lock"
DELETE_DIR_SUFFIX = "-delete"
# Directories of an in-progress replica move or a stray replica: not ours to open.
_STRAY_DIR_SUFFIX = "-stray"
_SKIPPED_DIR_SUFFIXES = ("-future", _STRAY_DIR_SUFFIX)
_DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000

TopicPartition = tuple[str, int]


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
        self._lock_fds: list[int] = []
        self._deleting: list[tuple[Log, int | None]] = []
        self._now_ms = 0

    # -- lifecycle -------------------------------------------------------------------------
    def startup(self, now_ms: int, *, config_for: Callable[[str], LogConfig] | None = None) -> None:
        """Lock the directories and open every partition log in them. `config_for(topic)`
        supplies topic configs (default: the broker's); logs recover unless the directory
        holds the clean-shutdown marker, which is consumed."""
        self._now_ms = now_ms
        for log_dir in self.log_dirs:
            log_dir.mkdir(parents=True, exist_ok=True)
            self._lock(log_dir)
        for log_dir in self.log_dirs:
            marker = log_dir / CLEAN_SHUTDOWN_FILE
            clean = marker.exists()
            recovery_points = read_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT)
            start_offsets = read_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT)
            for child in sorted(log_dir.iterdir()):
                if not child.is_dir():
                    continue
                if child.name.endswith(DELETE_DIR_SUFFIX):
                    shutil.rmtree(child, ignore_errors=True)
                    continue
                if child.name.endswith(_SKIPPED_DIR_SUFFIXES):
                    continue
                tp = parse_partition_dir(child.name)
                if tp is None:
                    continue
                if tp in self._logs:
                    raise KafkaStorageError(
                        f"duplicate log directories for {tp}: {self._dir_of[tp]} and {log_dir}"
                    )
                config = config_for(tp[0]) if config_for else self.default_config
                self._logs[tp] = Log.open(
                    child,
                    config,
                    recovery_point=recovery_points.get(tp, 0),
                    log_start_offset=start_offsets.get(tp, 0),
                    clean_shutdown=clean,
                    now_ms=now_ms,
                )
                self._dir_of[tp] = log_dir
            marker.unlink(missing_ok=True)

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

    def shutdown(self, high_watermarks: Mapping[TopicPartition, int]) -> None:
        """Flush and close every log (writing producer snapshots), write the checkpoints and
        the clean-shutdown marker, and release the directory locks."""
        for log in self._logs.values():
            log.flush()
        self.checkpoint(high_watermarks)
        for log in self._logs.values():
            log.close()
        for log, _ in self._deleting:
            log.delete()
        self._deleting = []
        for log_dir in self.log_dirs:
            write_atomically(log_dir / CLEAN_SHUTDOWN_FILE, b'{"version":0,"brokerEpoch":-1}')
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
            if log.config != config:
                log.update_config(config)
            return log
        counts = {d: 0 for d in self.log_dirs}
        for d in self._dir_of.values():
            counts[d] += 1
        log_dir = min(self.log_dirs, key=lambda d: counts[d])
        log = Log.open(
            log_dir / f"{topic}-{partition}",
            config,
            now_ms=self._now_ms if now_ms is None else now_ms,
        )
        self._logs[tp] = log
        self._dir_of[tp] = log_dir
        return log

    def delete(self, topic: str, partition: int) -> None:
        """Rename the directory to `<topic>-<partition>.<uuid>-delete`; its files go after
        file.delete.delay.ms (run_flush), so fds handed out by reads stay valid meanwhile."""
        tp = (topic, partition)
        log = self._logs.pop(tp, None)
        if log is None:
            return
        log_dir = self._dir_of.pop(tp)
        log.rename_dir(log_dir / f"{topic}-{partition}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}")
        self._deleting.append((log, None))

    def discard(self, topic: str, partition: int) -> None:
        """Close and remove at once the log of a topic whose creation was not committed (no
        reader can hold its files), and the directory of one that failed to open."""
        tp = (topic, partition)
        log = self._logs.pop(tp, None)
        if log is not None:
            del self._dir_of[tp]
            log.delete()
        for log_dir in self.log_dirs:
            shutil.rmtree(log_dir / f"{topic}-{partition}", ignore_errors=True)

    def set_aside_stray(self, topic: str, partition: int) -> Path:
        """Close the log of a partition the metadata does not know and rename its directory
        to `<topic>-<partition>.<uuid>-stray`, kept for the operator as Kafka does."""
        tp = (topic, partition)
        log = self._logs.pop(tp)
        log_dir = self._dir_of.pop(tp)
        log.rename_dir(log_dir / f"{topic}-{partition}.{uuid.uuid4().hex}{_STRAY_DIR_SUFFIX}")
        log.close()
        return log.directory

    def all_logs(self) -> Iterable[tuple[TopicPartition, Log]]:
        return list(self._logs.items())

    def log_dir_of(self, topic: str, partition: int) -> Path | None:
        return self._dir_of.get((topic, partition))

    # -- periodic work (the caller schedules) ----------------------------------------------
    def run_retention(
        self, now_ms: int, high_watermarks: Mapping[TopicPartition, int] | None = None
    ) -> int:
        """Apply retention to every log (bounded by its high watermark when given) and
        expire idle producer ids. Returns the number of segments deleted."""
        self._now_ms = now_ms
        deleted = 0
        for tp, log in self._logs.items():
            hw = high_watermarks.get(tp) if high_watermarks is not None else None
            deleted += log.enforce_retention(now_ms, high_watermark=hw)
            log.remove_expired_producers(now_ms, self._producer_id_expiration_ms)
        return deleted

    def run_flush(self, now_ms: int) -> None:
        """flush.ms policy, owed flushes after rolls, and due file deletions."""
        self._now_ms = now_ms
        for log in self._logs.values():
            log.flush_if_due(now_ms)
            log.delete_pending_segments(now_ms)
        remaining = []
        for log, due in self._deleting:
            if due is None:
                due = now_ms + log.config.file_delete_delay_ms
            if now_ms >= due:
                log.delete()
            else:
                remaining.append((log, due))
        self._deleting = remaining

    # -- checkpoints -----------------------------------------------------------------------
    def checkpoint(self, high_watermarks: Mapping[TopicPartition, int]) -> None:
        """Write recovery points, high watermarks (from the replica layer) and log start
        offsets of each directory's logs, atomically."""
        for log_dir in self.log_dirs:
            logs = {tp: log for tp, log in self._logs.items() if self._dir_of[tp] == log_dir}
            write_checkpoint(
                log_dir / RECOVERY_POINT_CHECKPOINT,
                {tp: log.recovery_point for tp, log in logs.items()},
            )
            write_checkpoint(
                log_dir / REPLICATION_OFFSET_CHECKPOINT,
                {tp: hw for tp, hw in high_watermarks.items() if tp in logs},
            )
            write_checkpoint(
                log_dir / LOG_START_OFFSET_CHECKPOINT,
                {tp: log.log_start_offset for tp, log in logs.items()},
            )

    def read_high_watermarks(self) -> dict[TopicPartition, int]:
        result: dict[TopicPartition, int] = {}
        for log_dir in self.log_dirs:
            result.update(read_checkpoint(log_dir / REPLICATION_OFFSET_CHECKPOINT))
        return result
