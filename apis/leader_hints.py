"""KIP-951 leader discovery for Produce v10+ and Fetch v16+: where a partition's current
leader is, for the answers of a broker that does not lead it."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from gregor.apis.context import Services
from gregor.wire.leader_hints import NodeEndpoint

# The errors Kafka names the current leader with.
LEADER_ERRORS = frozenset({ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch})


def leader_hint(
    services: Services, listener: str, topic: str, index: int
) -> tuple[tuple[int, int], NodeEndpoint] | None:
    """((leader id, leader epoch), the leader's endpoint on ``listener``), or None when the
    partition has no live leader reachable there."""
    info = services.metadata.partition(topic, index)
    if info is None:
        return None
    broker = services.metadata.live_leader(info)
    endpoint = broker.endpoint(listener) if broker is not None else None
    if broker is None or endpoint is None:
        return None
    return (info.leader, info.leader_epoch), (broker.node_id, *endpoint, broker.rack)
