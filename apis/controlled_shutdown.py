"""ControlledShutdown (cluster mode, answered by the controller): a stopping broker asks the
controller to move its leaderships away; the answer lists the partitions it still leads."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from gregor.apis.context import RequestContext, Services, later
from gregor.apis.inter_broker import cluster_action, cluster_member
from gregor.controller.zk_controller.controller import ControllerError
from gregor.wire.interbroker import ControlledShutdownResponse, RemainingPartition


def handle(services: Services, ctx: RequestContext, request: Any) -> Any:
    if not cluster_action(services, ctx):
        return ControlledShutdownResponse(
            error_code=ErrorCode.cluster_authorization_failed, remaining_partitions=()
        )
    controller = cluster_member(services, "ControlledShutdown").active_controller
    if controller is None:
        return ControlledShutdownResponse(
            error_code=ErrorCode.not_controller, remaining_partitions=()
        )
    return later(_shut_down(controller, request))


async def _shut_down(controller: Any, request: Any) -> ControlledShutdownResponse:
    try:
        remaining = await controller.handle_controlled_shutdown(
            request.broker_id, request.broker_epoch
        )
    except ControllerError as e:
        return ControlledShutdownResponse(error_code=e.code, remaining_partitions=())
    return ControlledShutdownResponse(
        error_code=ErrorCode.none,
        remaining_partitions=tuple(
            RemainingPartition(topic_name=topic, partition_index=index)
            for topic, index in sorted(remaining)
        ),
    )
