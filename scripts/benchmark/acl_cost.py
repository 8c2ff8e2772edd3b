"""What authorization costs a request with 10,000 ACLs in place (`scripts/bench security
--parts acls`).

Two Gregor brokers run side by side, as `scripts/bench metrics-cost` runs them: one with
the authorizer (``authorizer.class.name``) and 10,000 ACLs, one without, and one with the
authorizer and only the client's own 4 ACLs. One client sends the same raw Produce and
Fetch requests to each in turn, one at a time, as the anonymous
principal of their PLAINTEXT listener; each broker's CPU time over a workload divided by
its requests is its cost per request. The ACLs are made by a super user over a
SASL_PLAINTEXT listener (PLAIN), read back with DescribeAcls, and spread as a real
cluster's are: each of the two topics the requests use carries 23 (the client's WRITE and
READ, 20 other users' READ, a DENY of another user), and the rest are on other resources:
7,954 literal topic ACLs, 1,000 prefixed ones (prefixes of 5-7 characters) and 1,000
group ACLs. Each workload is checked to succeed on every broker first (a refused request
would be cheap and measure nothing).

The same ACLs are also loaded into an authorizer in this process, which times one
``authorize`` call of each kind a Produce or Fetch makes.
"""

from __future__ import annotations

import contextlib
import statistics
import struct
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from gregor.apis import produce
from gregor.apis.acl import authorize
from gregor.apis.context import RequestContext
from gregor.apis.dispatch import FAST_DECODERS
from gregor.controller.acls.authorizer import AclAuthorizer
from gregor.controller.acls.model import AccessControlEntry, PatternType, ResourcePattern
from gregor.controller.acls.model import AclBinding as GregorBinding
from gregor.controller.acls.model import AclOperation as Operation
from gregor.controller.acls.model import AclPermissionType as Permission
from gregor.controller.acls.model import ResourceType as Resource
from gregor.replica import fetch_messages
from gregor.wire.headers import decode_request_header, peek_api
from gregor.wire.schema import is_flexible
from tests.kafka_wire import WireClient

from .brokers import GREGOR, Broker
from .metrics_cost import KIB, NO_POLLING, RawConnection, alternate, fetch_frame, produce_frame

ACLS = 10_000
TOPIC_SMALL, TOPIC_BATCH = "small", "batch"
CLIENT = "User:ANONYMOUS"  # the PLAINTEXT listener's principal
HOST = "127.0.0.1"
ADMIN, ADMIN_PASSWORD = "admin", "admin-secret"
# A super user manages topics and ACLs over SASL_PLAINTEXT (listed first: the launcher's
# and the admin client's listener); the load goes to PLAINTEXT.
# The broker without an authorizer has the same listeners, so that only authorization differs.
LISTENERS = {
    "listeners": "SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
    "sasl.enabled.mechanisms": "PLAIN",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'user_{ADMIN}="{ADMIN_PASSWORD}";'
    ),
}
AUTHORIZER = {
    **LISTENERS,
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "super.users": f"User:{ADMIN}",
}
ADMIN_CONFIG = {
    "security.protocol": "SASL_PLAINTEXT",
    "sasl.mechanism": "PLAIN",
    "sasl.username": ADMIN,
    "sasl.password": ADMIN_PASSWORD,
}

# (resource type, name, pattern type, principal, operation, permission)
Acl = tuple[str, str, str, str, str, str]


def acls() -> Iterator[Acl]:
    """The 10,000 ACLs, in model-neutral names (see the module's docstring); the first 4
    are the client's own."""
    for topic in (TOPIC_SMALL, TOPIC_BATCH):
        for operation in ("WRITE", "READ"):
            yield ("TOPIC", topic, "LITERAL", CLIENT, operation, "ALLOW")
    for topic in (TOPIC_SMALL, TOPIC_BATCH):
        for i in range(20):
            yield ("TOPIC", topic, "LITERAL", f"User:reader-{i}", "READ", "ALLOW")
        yield ("TOPIC", topic, "LITERAL", "User:mallory", "WRITE", "DENY")
    for i in range(7_954):
        yield ("TOPIC", f"topic-{i}", "LITERAL", f"User:user-{i % 500}", "READ", "ALLOW")
    for i in range(1_000):
        yield ("TOPIC", f"svc{i}-", "PREFIXED", f"User:service-{i}", "ALL", "ALLOW")
    for i in range(1_000):
        yield ("GROUP", f"group-{i}", "LITERAL", f"User:user-{i % 500}", "READ", "ALLOW")


def _confluent(acl: Acl) -> AclBinding:
    rtype, name, pattern, principal, operation, permission = acl
    return AclBinding(
        ResourceType[rtype],
        name,
        ResourcePatternType[pattern],
        principal,
        "*",
        AclOperation[operation],
        AclPermissionType[permission],
    )


def _gregor(acl: Acl) -> GregorBinding:
    rtype, name, pattern, principal, operation, permission = acl
    return GregorBinding(
        ResourcePattern(Resource[rtype], name, PatternType[pattern]),
        AccessControlEntry(principal, "*", Operation[operation], Permission[permission]),
    )


def _create_acls(broker: Broker, bindings: list[Acl]) -> int:
    """Create ``bindings`` (1,000 per request); the number DescribeAcls then lists."""
    admin = broker.admin
    confluent = [_confluent(acl) for acl in bindings]
    for start in range(0, len(confluent), 1_000):
        for future in admin.create_acls(confluent[start : start + 1_000]).values():
            future.result(60)
    everything = AclBindingFilter(  # None: any name, principal, host
        ResourceType.ANY,
        None,  # type: ignore[arg-type]
        ResourcePatternType.ANY,
        None,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    return len(admin.describe_acls(everything).result(60))


def _error_codes(value: object) -> Iterator[int]:
    """Every error_code in a decoded response, however deeply nested."""
    if isinstance(value, tuple | list):
        for item in value:
            yield from _error_codes(item)
    elif hasattr(value, "__dataclass_fields__"):
        for name in value.__dataclass_fields__:
            field = getattr(value, name)
            if name == "error_code":
                yield int(field.value)
            else:
                yield from _error_codes(field)


def _check_answered(port: int, frame: bytes, what: str) -> None:
    """The request succeeds (a refused one would be cheap and measure nothing)."""
    api_key, version = struct.unpack_from(">hh", frame, 4)
    client = WireClient(port)
    try:
        client.send(frame)
        codes = list(_error_codes(client.read_response(api_key, version, 1)))
    finally:
        client.close()
    if not codes or any(codes):
        raise RuntimeError(f"{what}: error codes {codes}")


def authorizer_with_acls() -> AclAuthorizer:
    """Gregor's authorizer holding the 10,000 ACLs (nothing allowed without an ACL)."""
    authorizer = AclAuthorizer([], allow_everyone_if_no_acl_found=False)
    authorizer.add(_gregor(acl) for acl in acls())
    return authorizer


def authorize_us(calls: int = 200_000) -> dict[str, dict[str, float]]:
    """Microseconds per ``authorize`` call, in this process, with the 10,000 ACLs, for a
    check made for the first time ("first": the ACLs are searched) and for one repeated
    (as every request of a client repeats it: the authorizer remembers its decision)."""
    authorizer = authorizer_with_acls()
    checks = {
        "produce: WRITE topic (allowed)": (CLIENT, Operation.WRITE, TOPIC_BATCH),
        "fetch: READ topic (allowed)": (CLIENT, Operation.READ, TOPIC_BATCH),
        "WRITE topic, denied (DENY ACL)": ("User:mallory", Operation.WRITE, TOPIC_BATCH),
        "READ topic-17 (no ACL of the user)": (CLIENT, Operation.READ, "topic-17"),
    }
    authorize = authorizer.authorize
    results = {}
    for label, (principal, operation, topic) in checks.items():
        first = 0.0
        for _ in range(calls // 100):
            authorizer._decisions.clear()  # what a first check costs
            started = time.perf_counter()
            authorize(principal, HOST, operation, Resource.TOPIC, topic)
            first += time.perf_counter() - started
        started = time.perf_counter()
        for _ in range(calls):
            authorize(principal, HOST, operation, Resource.TOPIC, topic)
        repeated = (time.perf_counter() - started) / calls
        results[label] = {"first": first / (calls // 100) * 1e6, "repeated": repeated * 1e6}
    return results


def _decoded(frame: bytes) -> tuple[RequestContext, Any]:
    """The request of a size-prefixed frame, as the broker's dispatcher decodes it."""
    body = frame[4:]
    api_key, version, correlation_id = peek_api(body)
    header = decode_request_header(body, is_flexible(api_key, version))
    request = FAST_DECODERS[api_key](version, body, header.body_offset)
    ctx = RequestContext(api_key, version, correlation_id, header.client_id, "PLAINTEXT",
                         f"{HOST}:40000", len(body), CLIENT)  # fmt: skip
    return ctx, request


def handler_checks_us(calls: int = 100_000) -> dict[str, float]:
    """Microseconds per request of the authorization work the Produce and Fetch handlers
    do (their checks and what they build around them, with the 10,000 ACLs), in this
    process: the part of a request's CPU that is authorization, precisely enough to hold
    against a few percent of ~100 µs, which brokers side by side cannot resolve. Calls the
    handlers' own steps (apis/produce.py, replica/fetch_messages.py)."""
    services: Any = types.SimpleNamespace(authorizer=authorizer_with_acls())
    ctx, request = _decoded(produce_frame(TOPIC_BATCH, 100, 1))

    def respond(*_: object) -> None:
        return None

    started = time.perf_counter()
    for _ in range(calls):
        produce._refused(services, ctx, request)
        produce._with_refused_topics(services, ctx, request, respond)
    results = {"produce": (time.perf_counter() - started) / calls * 1e6}
    ctx, request = _decoded(fetch_frame(TOPIC_BATCH, 1))
    started = time.perf_counter()
    for _ in range(calls):

        def readable(topic: str) -> bool:
            return authorize(services, ctx, Operation.READ, Resource.TOPIC, topic)

        fetch_messages._authorized(request.topics, readable)
    results["fetch"] = (time.perf_counter() - started) / calls * 1e6
    return results


# The brokers compared: ACLs each holds (None: no authorizer).
VARIANTS = {"none": None, "own": 4, "all": ACLS}


def request_cpu(work: Path, requests: int, rounds: int) -> dict[str, dict[str, Any]]:
    """Per workload, the median broker CPU µs per request of three brokers side by side:
    without an authorizer ("none"), with one holding only the client's 4 ACLs ("own"),
    and with all 10,000 ACLs ("all")."""
    workloads = {
        "produce 1 x 100 B": produce_frame(TOPIC_SMALL, 100, 1),
        "produce 16 x 1 KiB": produce_frame(TOPIC_BATCH, KIB, 16),
        "fetch 100 B": fetch_frame(TOPIC_SMALL, 1),
        "fetch 16 KiB": fetch_frame(TOPIC_BATCH, 16 * KIB),
    }
    costs: dict[str, dict[str, list[float]]] = {
        name: {variant: [] for variant in VARIANTS} for name in workloads
    }
    brokers = {
        variant: Broker(
            GREGOR,
            work / variant,
            None,
            {**NO_POLLING, **(LISTENERS if count is None else AUTHORIZER)},
            admin_config=ADMIN_CONFIG,
        )
        for variant, count in VARIANTS.items()
    }
    with contextlib.ExitStack() as stack:
        connections = {}
        for variant, broker in brokers.items():
            stack.enter_context(broker)
            broker.create_topic(TOPIC_SMALL, 1)
            broker.create_topic(TOPIC_BATCH, 1)
            count = VARIANTS[variant]
            if count is not None:
                listed = _create_acls(broker, list(acls())[:count])
                if listed != count:
                    raise RuntimeError(f"DescribeAcls lists {listed} ACLs, not {count}")
            port = int(broker.listener_endpoint("PLAINTEXT").bootstrap.rpartition(":")[2])
            for name, frame in workloads.items():
                _check_answered(port, frame, f"{name} ({variant})")
            connections[broker] = RawConnection(port)
        order = list(brokers.values())
        for round_ in range(rounds):
            order = order[1:] + order[:1]  # each broker first in turn
            pair = [(b, connections[b]) for b in order]
            for name, frame in workloads.items():
                cpu = dict(zip(order, alternate(pair, frame, requests), strict=True))
                for variant, broker in brokers.items():
                    costs[name][variant].append(cpu[broker])
            print(f"  acls: round {round_ + 1} of {rounds} done", file=sys.stderr, flush=True)
    return {
        name: {
            **{f"{variant}_us": statistics.median(runs) for variant, runs in by.items()},
            **{f"rounds_{variant}": runs for variant, runs in by.items()},
        }
        for name, by in costs.items()
    }
