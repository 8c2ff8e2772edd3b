"""DescribeCluster and InitProducerId (idempotent producers, and transactional ones
through the transaction coordinator).

Authorization is Kafka's: DescribeCluster refuses nobody, its cluster authorized operations
(KIP-430) are none without DESCRIBE on the cluster; InitProducerId needs WRITE on the
transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), an idempotent producer
IDEMPOTENT_WRITE on the cluster or, since KIP-679, WRITE on any topic
(CLUSTER_AUTHORIZATION_FAILED)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from gregor.apis.acl import (
    authorize,
    authorize_by_resource_type,
    authorize_cluster,
    cluster_authorized_operations,
)
from gregor.apis.context import (
    NO_AUTHORIZED_OPERATIONS,
    NO_THROTTLE,
    RequestContext,
    Services,
    build,
    later,
    nested,
)
from gregor.controller.acls.model import AclOperation, ResourceType
from gregor.wire.schema import response_type
from gregor.wire.versions import DESCRIBE_CLUSTER, INIT_PRODUCER_ID

# Kafka's EndpointType ids (DescribeCluster v1+): which kind of endpoint the client thinks
# it is talking to. A Gregor broker is always a BROKER endpoint (there is no separate
# KRaft controller listener).
ENDPOINT_UNKNOWN = 0
ENDPOINT_BROKER = 1
ENDPOINT_CONTROLLER = 2
_ENDPOINT_NAMES = {ENDPOINT_BROKER: "BROKER", ENDPOINT_CONTROLLER: "CONTROLLER"}


def handle_describe_cluster(services: Services, ctx: RequestContext, request: Any) -> Any:
    """Kafka's AuthHelper.computeDescribeClusterResponse with the broker's nodes.

    v2 adds IncludeFencedBrokers and, per broker, IsFenced. Fencing is KRaft's: a broker
    registered with the controller but not yet (or no longer) heartbeating. In ZooKeeper
    mode, and on an embedded node, a broker is in the metadata only while its ephemeral
    registration lives, so there are no fenced brokers to include: the list is the same
    either way and every IsFenced is false (what Kafka 3.x ZooKeeper brokers answered too).
    """
    cls = response_type(DESCRIBE_CLUSTER, ctx.api_version)
    endpoint_type = getattr(request, "endpoint_type", ENDPOINT_BROKER)
    if endpoint_type != ENDPOINT_BROKER:
        # v0 has no EndpointType (always BROKER), so only v1+ get here; the v0 codes are
        # kept for the day a v0 request could.
        if endpoint_type not in _ENDPOINT_NAMES:
            code = ErrorCode.unsupported_endpoint_type
            message = f"Unsupported endpoint type {endpoint_type}"
        else:
            code = ErrorCode.mismatched_endpoint_type
            message = (
                "The request was sent to an endpoint of type BROKER, but we wanted an "
                f"endpoint of type {_ENDPOINT_NAMES[endpoint_type]}"
            )
        if ctx.api_version == 0:
            code = ErrorCode.invalid_request
        return build(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=code,
            error_message=message,
            cluster_id="",
            brokers=(),
        )
    broker_cls = nested(cls, "DescribeClusterBroker")
    brokers = []
    for broker in services.metadata.brokers.values():
        endpoint = broker.endpoint(ctx.listener)
        if endpoint is not None:
            brokers.append(
                build(
                    broker_cls,
                    broker_id=broker.node_id,
                    host=endpoint[0],
                    port=endpoint[1],
                    rack=broker.rack,
                    is_fenced=False,
                )
            )
    controller_id = services.metadata.controller_id
    if all(b.broker_id != controller_id for b in brokers):
        # As Kafka: a controller not among the nodes listed would confuse the client.
        controller_id = -1
    return build(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=ENDPOINT_BROKER,
        cluster_id=services.metadata.cluster_id,
        controller_id=controller_id,
        brokers=tuple(brokers),
        cluster_authorized_operations=cluster_authorized_operations(services, ctx)
        if request.include_cluster_authorized_operations
        else NO_AUTHORIZED_OPERATIONS,
    )


def handle_init_producer_id(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(INIT_PRODUCER_ID, ctx.api_version)
    refused = _refused(services, ctx, request.transactional_id)
    if refused is not None:
        return build(
            cls, throttle_time=NO_THROTTLE, error_code=refused, producer_id=-1, producer_epoch=-1
        )
    if request.transactional_id is not None:
        return later(_init_transactional(services, ctx, cls, request))
    return later(_allocate(services, cls))


def _refused(
    services: Services, ctx: RequestContext, transactional_id: str | None
) -> ErrorCode | None:
    if services.authorizer is None:
        return None
    if transactional_id is not None:
        if authorize(
            services, ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id
        ):
            return None
        return ErrorCode.transactional_id_authorization_failed
    if authorize_cluster(
        services, ctx, AclOperation.IDEMPOTENT_WRITE
    ) or authorize_by_resource_type(services, ctx, AclOperation.WRITE, ResourceType.TOPIC):
        return None
    return ErrorCode.cluster_authorization_failed


async def _allocate(services: Services, cls: type) -> Any:
    return build(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        producer_id=await services.controller.allocate_producer_id(),
        producer_epoch=0,
    )


async def _init_transactional(
    services: Services, ctx: RequestContext, cls: type, request: Any
) -> Any:
    """A transactional producer's id and epoch from the transaction coordinator; v3+ name
    the producer they were (KIP-360) to bump its epoch instead of being fenced."""
    assert services.transactions is not None
    producer_id = getattr(request, "producer_id", -1)
    expected = None if producer_id < 0 else (producer_id, request.producer_epoch)
    result = await services.transactions.init_producer_id(
        request.transactional_id,
        request.transaction_timeout // timedelta(milliseconds=1),
        expected,
    )
    error = result.error
    if error == ErrorCode.producer_fenced and ctx.api_version < 4:
        error = ErrorCode.invalid_producer_epoch  # PRODUCER_FENCED is KIP-588's (v4)
    return build(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=error,
        producer_id=result.producer_id,
        producer_epoch=result.producer_epoch,
    )
