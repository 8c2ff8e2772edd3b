"""What the handlers of the controller's requests share: the cluster member they act for,
the check that the sender may act for the cluster (CLUSTER_ACTION on the cluster, else
CLUSTER_AUTHORIZATION_FAILED and nothing changed, as Kafka's authorizeClusterOperation), and
the fencing of requests from a controller that is no longer the controller."""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode

from gregor.apis.acl import authorize_cluster
from gregor.apis.context import CloseConnection, RequestContext, Services
from gregor.controller.acls.model import AclOperation

logger = logging.getLogger(__name__)


def cluster_member(services: Services, api: str) -> Any:
    """This broker's cluster side (controller/zk_broker.py); an embedded node has no
    controller to take orders from."""
    if services.cluster is None:
        raise CloseConnection(f"{api} received, but this broker is not in a cluster")
    return services.cluster


def cluster_action(services: Services, ctx: RequestContext) -> bool:
    """Whether the sender may send inter-broker requests (a broker's principal)."""
    return authorize_cluster(services, ctx, AclOperation.CLUSTER_ACTION)


def stale_epoch(services: Services, member: Any, request: Any) -> ErrorCode | None:
    """STALE_CONTROLLER_EPOCH for a request from an older controller than one already
    heard (a zombie that lost its election), STALE_BROKER_EPOCH for one addressed to an
    earlier registration of this broker; None if it is to be applied. A newer controller
    epoch is remembered, so the older controller is fenced from then on."""
    replicas = services.replicas
    if request.controller_epoch < replicas.controller_epoch:
        logger.warning(
            "Ignoring %s from controller %d with epoch %d: the current controller epoch is %d",
            type(request).__name__,
            request.controller_id,
            request.controller_epoch,
            replicas.controller_epoch,
        )
        return ErrorCode.stale_controller_epoch
    if 0 <= request.broker_epoch < member.broker_epoch:
        logger.warning(
            "Ignoring %s for broker epoch %d: this broker registered with epoch %d",
            type(request).__name__,
            request.broker_epoch,
            member.broker_epoch,
        )
        return ErrorCode.stale_broker_epoch
    replicas.controller_epoch = request.controller_epoch
    return None
