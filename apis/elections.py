"""ElectLeaders: preferred or unclean leader elections, which the controller runs."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from kio.schema.errors import ErrorCode

from apis.context import NO_THROTTLE, RequestContext, Services, build, later, nested
from controller.base import ElectionType
from wire.schema import response_type
from wire.versions import ELECT_LEADERS


def handle(services: Services, ctx: RequestContext, request: Any) -> Any:
    return later(_elect(services, ctx, request))


async def _elect(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(ELECT_LEADERS, ctx.api_version)
    topic_cls = nested(cls, "ReplicaElectionResult")
    partition_cls = nested(cls, "PartitionResult")
    if ctx.api_version == 0 or request.election_type == ElectionType.PREFERRED:
        election = ElectionType.PREFERRED  # v0 elects preferred leaders only
    elif request.election_type == ElectionType.UNCLEAN:
        election = ElectionType.UNCLEAN
    else:
        return build(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.invalid_request,
            replica_election_results=(),
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
