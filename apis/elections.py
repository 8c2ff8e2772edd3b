"""ElectLeaders: preferred or unclean leader elections, which the controller runs. It needs
ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED at the top and for every partition
named, and no election."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from kio.schema.errors import ErrorCode

from gregor.apis.acl import MESSAGES, authorize_cluster
from gregor.apis.context import NO_THROTTLE, RequestContext, Services, build, later, nested
from gregor.controller.acls.model import AclOperation
from gregor.controller.base import ElectionType
from gregor.wire.schema import response_type
from gregor.wire.versions import ELECT_LEADERS


def handle(services: Services, ctx: RequestContext, request: Any) -> Any:
    return later(_elect(services, ctx, request))


async def _elect(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(ELECT_LEADERS, ctx.api_version)
    topic_cls = nested(cls, "ReplicaElectionResult")
    partition_cls = nested(cls, "PartitionResult")
    if not authorize_cluster(services, ctx, AclOperation.ALTER):
        code = ErrorCode.cluster_authorization_failed
        return build(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=code,
            replica_election_results=tuple(
                topic_cls(
                    topic=t.topic,
                    partition_result=tuple(
                        partition_cls(partition_id=p, error_code=code, error_message=MESSAGES[code])
                        for p in t.partitions
                    ),
                )
                for t in request.topic_partitions or ()
            ),
        )
    if ctx.api_version == 0:
        election = ElectionType.PREFERRED  # v0 elects preferred leaders only
    elif request.election_type in (ElectionType.PREFERRED, ElectionType.UNCLEAN):
        election = ElectionType(request.election_type)
    else:
        # As Kafka answers a type it cannot parse: its generic error, for every partition.
        message = f"Value {request.election_type} must be one of [PREFERRED, UNCLEAN]"
        code = ErrorCode.unknown_server_error
        return build(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=code,
            replica_election_results=tuple(
                topic_cls(
                    topic=t.topic,
                    partition_result=tuple(
                        partition_cls(partition_id=p, error_code=code, error_message=message)
                        for p in t.partitions
                    ),
                )
                for t in request.topic_partitions or ()
            ),
        )
    partitions = (
        None
        if request.topic_partitions is None
        else list(
            dict.fromkeys((t.topic, p) for t in request.topic_partitions for p in t.partitions)
        )
    )
    outcomes = await services.controller.elect_leaders(election, partitions)
    by_topic: dict[str, list[Any]] = defaultdict(list)
    for (topic, index), error in outcomes.items():
        by_topic[topic].append(
            partition_cls(
                partition_id=index,
                error_code=ErrorCode.none if error is None else error.code,
                error_message=None if error is None else error.message,
            )
        )
    return build(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        replica_election_results=tuple(
            topic_cls(topic=topic, partition_result=tuple(results))
            for topic, results in by_topic.items()
        ),
    )
