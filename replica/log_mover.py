"""Moving a replica's log to another log directory (AlterReplicaLogDirs, KIP-113), Kafka's
ReplicaAlterLogDirsThread done by copying files: the inactive segments are copied into the
future log off the event loop, pass after pass, rolling the active segment while it is
larger than ``SWAP_ACTIVE_BYTES``; once every inactive segment is copied unchanged, the
rest is copied and the future log swapped in on the event loop, between two appends
(LogManager.swap_in_future). The partition keeps being served throughout.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path

from gregor.log.errors import KafkaStorageError
from gregor.log.future import Identity, copy_files, identity, segment_files
from gregor.log.manager import LogManager
from gregor.replica.partition import Partition

logger = logging.getLogger(__name__)

# The most of the active segment copied on the event loop when the future log is swapped
# in (about a millisecond of copying).
SWAP_ACTIVE_BYTES = 1 << 20


async def move_log(
    logs: LogManager, partition: Partition, future: Path, is_current: Callable[[Partition], bool]
) -> None:
    topic, index = partition.topic, partition.index
    log = partition.log
    copied: dict[Path, Identity] = {}

    def still_moving() -> bool:
        moving = logs.future_of(topic, index)
        return (
            moving is not None
            and moving[1] == future
            and is_current(partition)
            and partition.log is log
            and not log.offline
        )

    try:
        while still_moving():
            if log.active_segment.size > SWAP_ACTIVE_BYTES:
                log.roll(time.time_ns() // 1_000_000)
            pending = [
                path
                for segment in log.segments[:-1]
                for path in segment_files(segment)
                if path.exists() and copied.get(path) != identity(path)
            ]
            if not pending and log.active_segment.size <= SWAP_ACTIVE_BYTES:
                partition.replace_log(logs.swap_in_future(topic, index))
                logger.info("Moved %s-%d to %s", topic, index, logs.log_dir_of(topic, index))
                return
            copied.update(await asyncio.to_thread(copy_files, pending, future))
    except (OSError, KafkaStorageError) as e:
        logger.error("Moving %s-%d to another log directory failed: %s", topic, index, e)
    moving = logs.future_of(topic, index)
    if moving is not None and moving[1] == future:
        logs.abandon_future(topic, index)
