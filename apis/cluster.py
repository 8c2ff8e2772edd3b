"""DescribeCluster and InitProducerId (idempotent producers without a transactional id)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from apis.context import (
    NO_AUTHORIZED_OPERATIONS,
    NO_THROTTLE,
    RequestContext,
    Services,
    build,
    later,
    nested,
)
from wire.schema import response_type
from wire.versions import DESCRIBE_CLUSTER, INIT_PRODUCER_ID


def handle_describe_cluster(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(DESCRIBE_CLUSTER, ctx.api_version)
    broker_cls = nested(cls, "DescribeClusterBroker")
    brokers = []
    for broker in services.metadata.brokers.values():
        endpoint = broker.endpoint(ctx.listener)
        if endpoint is not None:
            brokers.append(
                broker_cls(
                    broker_id=broker.node_id, host=endpoint[0], port=endpoint[1], rack=broker.rack
                )
            )
    return build(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        cluster_id=services.metadata.cluster_id,
        controller_id=services.metadata.controller_id,
        brokers=tuple(brokers),
        cluster_authorized_operations=NO_AUTHORIZED_OPERATIONS,
    )


def handle_init_producer_id(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(INIT_PRODUCER_ID, ctx.api_version)
    if request.transactional_id is not None:
        # Transactions arrive with the transaction coordinator.
        return build(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.coordinator_not_available,
            producer_id=-1,
            producer_epoch=-1,
        )
    return later(_allocate(services, cls))


async def _allocate(services: Services, cls: type) -> Any:
    return build(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        producer_id=await services.controller.allocate_producer_id(),
        producer_epoch=0,
    )
