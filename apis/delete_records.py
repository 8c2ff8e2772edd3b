"""DeleteRecords (KIP-107): move partitions' log start offsets forward.

The leader moves its log start at once; the answer waits (up to the request's timeout,
in the DeleteRecords purgatory) until every in-sync follower has moved its own, which it
does when a fetch answer carries the leader's log start. The partition's low watermark,
the smallest log start among them, is what is answered. A topic without DELETE is
TOPIC_AUTHORIZATION_FAILED in each of its partitions, which keep their records.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from gregor.apis.acl import authorized_names
from gregor.apis.context import NO_THROTTLE, RequestContext, Services, build, nested
from gregor.controller.acls.model import AclOperation, ResourceType
from gregor.controller.metadata.topic_names import INTERNAL_TOPICS
from gregor.replica.errors import STORAGE_ERRORS, error_code
from gregor.replica.partition import Partition
from gregor.wire.schema import response_type
from gregor.wire.versions import DELETE_RECORDS


class _Deletion:
    """One partition of the request: its outcome so far."""

    __slots__ = ("index", "partition", "required", "low_watermark", "error")

    def __init__(self, index: int) -> None:
        self.index = index
        self.partition: Partition | None = None
        self.required = -1  # the log start every replica must reach
        self.low_watermark = -1
        self.error: ErrorCode | None = None  # None: waiting for the followers

    def check(self, services: Services, force: bool) -> bool:
        """Decide the outcome if it can be (at the deadline: REQUEST_TIMED_OUT); return
        whether it is decided."""
        if self.error is not None:
            return True
        partition = self.partition
        assert partition is not None
        if not services.replicas.is_current(partition) or not partition.is_leader:
            self.error = ErrorCode.not_leader_or_follower
            return True
        self.low_watermark = partition.low_watermark()
        if self.low_watermark >= self.required:
            self.error = ErrorCode.none
        elif force:
            self.error = ErrorCode.request_timed_out
        return self.error is not None


def handle(services: Services, ctx: RequestContext, request: Any) -> Any:
    topics: list[tuple[str, list[_Deletion]]] = []
    waiting: set[tuple[str, int]] = set()
    allowed = authorized_names(
        services, ctx, AclOperation.DELETE, ResourceType.TOPIC, (t.name for t in request.topics)
    )
    for topic in request.topics:
        deletions = []
        for p in topic.partitions:
            deletion = _Deletion(p.partition_index)
            if topic.name in allowed:
                _delete(services, topic.name, p.offset, deletion)
            else:
                deletion.error = ErrorCode.topic_authorization_failed
            if not deletion.check(services, False):
                waiting.add((topic.name, p.partition_index))
            deletions.append(deletion)
        topics.append((topic.name, deletions))

    def respond(force: bool) -> Any:
        decided = [d.check(services, force) for _, ds in topics for d in ds]
        return _response(ctx, topics) if all(decided) else None

    if not waiting:
        return respond(False)
    timeout_ms = int(request.timeout.total_seconds() * 1000)
    return services.replicas.delete_records_purgatory.park(waiting, timeout_ms, respond)


def _delete(services: Services, topic: str, offset: int, deletion: _Deletion) -> None:
    """Move the leader's log start, or set the partition's error."""
    if topic in INTERNAL_TOPICS:
        deletion.error = ErrorCode.invalid_topic_exception
        return
    partition = services.replicas.get(topic, deletion.index)
    if partition is None:
        deletion.error = services.replicas.not_hosted(topic, deletion.index)
        return
    if not partition.is_leader:
        deletion.error = ErrorCode.not_leader_or_follower
        return
    try:
        deletion.required = partition.delete_records(offset)
    except STORAGE_ERRORS as e:
        deletion.error = error_code(e)
        return
    services.replicas.on_log_start_moved(partition)  # followers' sessions answer it
    deletion.partition = partition


def _response(ctx: RequestContext, topics: list[tuple[str, list[_Deletion]]]) -> Any:
    cls = response_type(DELETE_RECORDS, ctx.api_version)
    topic_cls = nested(cls, "DeleteRecordsTopicResult")
    partition_cls = nested(cls, "DeleteRecordsPartitionResult")
    return build(
        cls,
        throttle_time=NO_THROTTLE,
        topics=tuple(
            topic_cls(
                name=name,
                partitions=tuple(
                    partition_cls(
                        partition_index=d.index,
                        low_watermark=d.low_watermark if d.error == ErrorCode.none else -1,
                        error_code=d.error,
                    )
                    for d in deletions
                ),
            )
            for name, deletions in topics
        ),
    )
