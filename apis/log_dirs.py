"""DescribeLogDirs: each log directory of this broker, its partitions and its volume. It
needs DESCRIBE on the cluster, else the top-level CLUSTER_AUTHORIZATION_FAILED and no
directories."""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from gregor.apis.acl import authorize_cluster
from gregor.apis.context import NO_THROTTLE, RequestContext, Services, build, nested
from gregor.controller.acls.model import AclOperation
from gregor.log.log import Log
from gregor.log.segment import LOG_SUFFIX
from gregor.wire.schema import response_type
from gregor.wire.versions import DESCRIBE_LOG_DIRS


def handle(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(DESCRIBE_LOG_DIRS, ctx.api_version)
    result_cls = nested(cls, "DescribeLogDirsResult")
    topic_cls = nested(cls, "DescribeLogDirsTopic")
    partition_cls = nested(cls, "DescribeLogDirsPartition")
    if not authorize_cluster(services, ctx, AclOperation.DESCRIBE):
        return build(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.cluster_authorization_failed,
            results=(),
        )
    logs = services.replicas.logs
    wanted = (
        None
        if request.topics is None
        else {(t.topic, p) for t in request.topics for p in t.partitions}
    )
    # log dir -> topic -> its partitions there
    hosted: dict[Path, dict[str, list[Any]]] = defaultdict(lambda: defaultdict(list))
    for (topic, index), log in logs.all_logs():
        log_dir = logs.log_dir_of(topic, index)
        if log_dir is not None and (wanted is None or (topic, index) in wanted):
            hosted[log_dir][topic].append(
                partition_cls(
                    partition_index=index,
                    partition_size=log.size_bytes,
                    # This broker leads every partition it hosts: its log is the high
                    # watermark's reference, never behind it.
                    offset_lag=0,
                    is_future_key=False,
                )
            )
        moving = logs.future_of(topic, index)
        if moving is not None and (wanted is None or (topic, index) in wanted):
            hosted[moving[0]][topic].append(_future(partition_cls, index, log, moving[1]))
    results = []
    for log_dir in logs.log_dirs:
        path = str(log_dir.absolute())
        if log_dir in logs.offline_dirs:
            # As Kafka: the directory is named, with no topics and no volume figures.
            results.append(
                build(
                    result_cls,
                    error_code=ErrorCode.kafka_storage_error,
                    log_dir=path,
                    topics=(),
                )
            )
            continue
        try:
            volume = os.statvfs(log_dir)
        except OSError:
            results.append(
                build(result_cls, error_code=ErrorCode.kafka_storage_error, log_dir=path, topics=())
            )
            continue
        topics = tuple(
            topic_cls(name=name, partitions=tuple(partitions))
            for name, partitions in hosted.get(log_dir, {}).items()
        )
        results.append(
            build(
                result_cls,
                error_code=ErrorCode.none,
                log_dir=path,
                topics=topics,
                total_bytes=volume.f_blocks * volume.f_frsize,
                usable_bytes=volume.f_bavail * volume.f_frsize,
            )
        )
    return build(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, results=tuple(results))


def _future(partition_cls: type, index: int, log: Log, future: Path) -> Any:
    """A replica being moved here (AlterReplicaLogDirs): its future log's size, and how far
    its copied segments are behind the current log's end."""
    size = 0
    copied = set()
    try:
        for entry in os.scandir(future):
            size += entry.stat().st_size
            if entry.name.endswith(LOG_SUFFIX):
                copied.add(int(entry.name[: -len(LOG_SUFFIX)]))
    except OSError:
        pass
    end = next((s.base_offset for s in log.segments if s.base_offset not in copied), None)
    lag = 0 if end is None else log.log_end_offset - end
    return partition_cls(
        partition_index=index, partition_size=size, offset_lag=lag, is_future_key=True
    )
