"""AlterPartition (KIP-497, cluster mode, answered by the controller): a partition leader
asks to shrink or expand its ISR; the controller, the only writer of partition state,
commits it to ZooKeeper conditionally on the partition epoch the leader saw."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from gregor.apis.context import RequestContext, Services, build, later
from gregor.apis.inter_broker import cluster_action, cluster_member
from gregor.wire.schema import response_type
from gregor.wire.versions import ALTER_PARTITION


def handle(services: Services, ctx: RequestContext, request: Any) -> Any:
    refused = not cluster_action(services, ctx)
    controller = None if refused else cluster_member(services, "AlterPartition").active_controller
    if refused or controller is None:
        return build(
            response_type(ALTER_PARTITION, ctx.api_version),
            throttle_time=timedelta(0),
            error_code=ErrorCode.cluster_authorization_failed
            if refused
            else ErrorCode.not_controller,
            topics=(),
        )
    return later(controller.handle_alter_partition(request))
