"""AlterReplicaLogDirs (KIP-113): choose the log directory of replicas on this broker.

The checks and errors are Kafka's ReplicaManager.alterReplicaLogDirs: a directory not in
``log.dirs`` is LOG_DIR_NOT_FOUND, an offline one KAFKA_STORAGE_ERROR, a partition without
a replica here REPLICA_NOT_AVAILABLE. Otherwise the answer is at once: a replica already in
the directory stays; one in another directory is moved there in the background (a future
log copied, then swapped in: replica/log_mover.py), which DescribeLogDirs shows. It needs
ALTER on the cluster, else every partition named is CLUSTER_AUTHORIZATION_FAILED and none
moves.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from gregor.apis.acl import authorize_cluster
from gregor.apis.context import NO_THROTTLE, RequestContext, Services, nested
from gregor.controller.acls.model import AclOperation
from gregor.wire.schema import response_type
from gregor.wire.versions import ALTER_REPLICA_LOG_DIRS


def handle(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(ALTER_REPLICA_LOG_DIRS, ctx.api_version)
    topic_cls = nested(cls, "AlterReplicaLogDirTopicResult")
    partition_cls = nested(cls, "AlterReplicaLogDirPartitionResult")
    results: dict[str, list[Any]] = {}
    allowed = authorize_cluster(services, ctx, AclOperation.ALTER)
    for entry in request.dirs:
        for topic in entry.topics:
            for index in topic.partitions:
                error = (
                    _alter(services, entry.path, topic.name, index)
                    if allowed
                    else ErrorCode.cluster_authorization_failed
                )
                results.setdefault(topic.name, []).append(
                    partition_cls(partition_index=index, error_code=error)
                )
    return cls(
        throttle_time=NO_THROTTLE,
        results=tuple(
            topic_cls(topic_name=name, partitions=tuple(partitions))
            for name, partitions in results.items()
        ),
    )


def _alter(services: Services, path: str, topic: str, index: int) -> ErrorCode:
    logs = services.replicas.logs
    wanted = Path(path).absolute()
    destination = next((d for d in logs.log_dirs if d.absolute() == wanted), None)
    if destination is None:
        return ErrorCode.log_dir_not_found
    if destination in logs.offline_dirs:
        return ErrorCode.kafka_storage_error
    partition = services.replicas.get(topic, index)
    current = logs.log_dir_of(topic, index)
    if partition is None or current is None:
        return ErrorCode.replica_not_available
    if current in logs.offline_dirs:
        return ErrorCode.kafka_storage_error
    services.replicas.move_to_log_dir(partition, destination)
    return ErrorCode.none
