"""AlterPartition (KIP-497, cluster mode, answered by the controller): a partition leader
asks to shrink or expand its ISR; the controller, the only writer of partition state,
commits it to ZooKeeper conditionally on the partition epoch the leader saw."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from apis.context import RequestContext, Services, build, later, nested
from apis.inter_broker import cluster_member
from wire.schema import response_type
from wire.versions import ALTER_PARTITION


def handle(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(ALTER_PARTITION, ctx.api_version)
    member = cluster_member(services, "AlterPartition")
    controller = member.active_controller
    if controller is None:
        return build(
            cls, throttle_time=timedelta(0), error_code=ErrorCode.not_controller, topics=()
        )
    return later(_alter(cls, controller, request))


async def _alter(cls: type, controller: Any, request: Any) -> Any:
    topic_cls = nested(cls, "TopicData")
    partition_cls = nested(cls, "PartitionData")
    wanted = {
        (t.topic_id, p.partition_index): (p.leader_epoch, list(p.new_isr), p.partition_epoch)
        for t in request.topics
        for p in t.partitions
    }
    result = await controller.alter_partition(request.broker_id, request.broker_epoch, wanted)
    if isinstance(result, ErrorCode):  # e.g. STALE_BROKER_EPOCH for the whole request
        return build(cls, throttle_time=timedelta(0), error_code=result, topics=())

    def entry(topic_id: Any, index: int) -> Any:
        state = result[(topic_id, index)]
        if isinstance(state, ErrorCode):
            return partition_cls(
                partition_index=index,
                error_code=state,
                leader_id=-1,
                leader_epoch=-1,
                isr=(),
                leader_recovery_state=0,
                partition_epoch=-1,
            )
        return partition_cls(
            partition_index=index,
            error_code=ErrorCode.none,
            leader_id=state.leader,
            leader_epoch=state.leader_epoch,
            isr=tuple(state.isr),
            leader_recovery_state=state.leader_recovery_state,
            partition_epoch=state.partition_epoch,
        )

    return build(
        cls,
        throttle_time=timedelta(0),
        error_code=ErrorCode.none,
        topics=tuple(
            topic_cls(
                topic_id=t.topic_id,
                partitions=tuple(entry(t.topic_id, p.partition_index) for p in t.partitions),
            )
            for t in request.topics
        ),
    )
