"""ListConfigResources (API key 74): the names of the resources that can carry configs.

v0 was KIP-714's ListClientMetricsResources and lists client-metrics subscriptions only;
v1 (KIP-1142) adds a ResourceTypes filter and lists topics, groups, brokers and broker
loggers too, as Kafka 4.1's KafkaApis.handleListConfigResources does:

- the types v1 lists are ListConfigResourcesRequest.supportedResourceTypes(): TOPIC (2),
  BROKER (4), BROKER_LOGGER (8), CLIENT_METRICS (16), GROUP (32); v0's is CLIENT_METRICS;
- an empty filter means every type the version lists;
- a filter naming any other type fails the whole request with UNSUPPORTED_VERSION and no
  resources;
- the rows come type by type in Kafka's fixed order: groups with dynamic configs (Kafka's
  GroupConfigManager.groupIds), client-metrics subscriptions, every live broker with an
  endpoint on the request's listener as a broker logger, the same brokers as brokers, every
  topic.

Gregor stores no client-metrics subscriptions (it has no telemetry, and IncrementalAlter-
Configs refuses CLIENT_METRICS resources), so that type is always empty and a v0 answer
has no resources. The request needs DESCRIBE_CONFIGS on the cluster, else
CLUSTER_AUTHORIZATION_FAILED and no resources.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from gregor.apis.acl import authorize_cluster
from gregor.apis.context import NO_THROTTLE, RequestContext, Services, build, nested
from gregor.controller.acls.model import AclOperation
from gregor.controller.metadata.config_resource import GROUP, TOPIC
from gregor.wire.schema import response_type
from gregor.wire.versions import LIST_CONFIG_RESOURCES

# ConfigResource.Type ids not in controller/configs.py (Gregor stores no configs for them).
BROKER = 4
BROKER_LOGGER = 8
CLIENT_METRICS = 16

_SUPPORTED = {
    0: frozenset({CLIENT_METRICS}),
    1: frozenset({TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP}),
}


def handle(services: Services, ctx: RequestContext, request: Any) -> Any:
    cls = response_type(LIST_CONFIG_RESOURCES, ctx.api_version)
    resource_cls = nested(cls, "ConfigResource")
    if not authorize_cluster(services, ctx, AclOperation.DESCRIBE_CONFIGS):
        return build(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.cluster_authorization_failed,
            config_resources=(),
        )
    supported = _SUPPORTED[min(ctx.api_version, 1)]
    wanted = set(getattr(request, "resource_types", ())) or supported
    if not wanted <= supported:
        return build(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.unsupported_version,
            config_resources=(),
        )
    cache = services.metadata
    rows: list[tuple[int, str]] = []
    if GROUP in wanted:
        rows.extend((GROUP, resource.name) for resource in cache.configs if resource.type == GROUP)
    # CLIENT_METRICS: none stored (see the module's docstring).
    brokers = sorted(b.node_id for b in cache.brokers.values() if b.endpoint(ctx.listener))
    if BROKER_LOGGER in wanted:
        rows.extend((BROKER_LOGGER, str(b)) for b in brokers)
    if BROKER in wanted:
        rows.extend((BROKER, str(b)) for b in brokers)
    if TOPIC in wanted:
        rows.extend((TOPIC, name) for name in cache.topics)
    return build(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        config_resources=tuple(
            build(resource_cls, resource_name=name, resource_type=kind) for kind, name in rows
        ),
    )
