"""ApiVersions: the versions this broker serves, with the v0 fallback.

v4 (KAFKA-17011) only lets the response carry a SupportedFeatures entry whose MinVersion
is 0, which a v3 response must not. Gregor advertises no features (it serves neither
UpdateFeatures nor a feature-gated protocol), so a v4 answer holds what a v3 one does.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from gregor.apis.context import NO_THROTTLE, RequestContext, Services, build, nested
from gregor.wire.schema import response_type
from gregor.wire.versions import API_VERSIONS, advertised

# Built once: the table does not change while the broker runs.
_ADVERTISED = sorted(advertised().items())


def response(version: int, error: ErrorCode = ErrorCode.none) -> Any:
    cls = response_type(API_VERSIONS, version)
    api = nested(cls, "ApiVersion")
    keys = tuple(api(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in _ADVERTISED)
    return build(cls, error_code=error, api_keys=keys, throttle_time=NO_THROTTLE)


def unsupported_version_response() -> Any:
    """A client asked for an ApiVersions version we lack: answer in v0 with our range."""
    return response(0, ErrorCode.unsupported_version)


def handle(services: Services, ctx: RequestContext, request: Any) -> Any:
    return response(ctx.api_version)
