"""The request dispatcher: frame -> header -> handler -> encoded response.

Runs on a handler task of the socket server. A handler returns a kio response entity,
a ``RawResponse``, a future of either (the request was parked in the purgatory), or
None when no answer is due (acks=0).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import struct
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any, Protocol

from kio.static.protocol import Entity

from gregor.apis import (
    acls,
    alter_configs,
    alter_partition,
    alter_replica_log_dirs,
    api_versions,
    client_quotas,
    cluster,
    configs,
    consumer_groups,
    controlled_shutdown,
    delete_records,
    describe_producers,
    describe_topic_partitions,
    elections,
    fetch,
    groups,
    leader_and_isr,
    list_config_resources,
    list_offsets,
    log_dirs,
    metadata,
    offset_for_leader_epoch,
    offsets,
    produce,
    reassignments,
    sasl,
    scram_credentials,
    share_fetch,
    share_groups,
    share_offsets,
    share_state,
    stop_replica,
    topics,
    transactions,
    update_metadata,
    write_txn_markers,
)
from gregor.apis.context import CloseConnection, RawResponse, RequestContext, Services, field_names
from gregor.apis.timing import FOLLOWER_FETCH, LOCAL_DONE, SENT, THROTTLE_MS, RequestTiming
from gregor.ratelimit import RateLimitedLog
from gregor.wire import versions
from gregor.wire.fetch import decode_fetch_request
from gregor.wire.headers import (
    MalformedHeaderError,
    RequestHeader,
    decode_request_header,
    encode_response_header,
    peek_api,
)
from gregor.wire.interbroker_decode import DECODERS as INTERBROKER_DECODERS
from gregor.wire.offset_commit import decode_offset_commit_request
from gregor.wire.produce import decode_produce_request
from gregor.wire.schema import SchemaDecodeError, decode, encode, is_flexible, request_type

logger = logging.getLogger(__name__)
# A flood of bad frames must not flood the log: one line per kind per interval, with the
# count of those left out.
limited_log = RateLimitedLog(logger)

Handler = Callable[[Services, RequestContext, Any], Any]

HANDLERS: dict[int, Handler] = {
    versions.PRODUCE: produce.handle,
    versions.FETCH: fetch.handle,
    versions.SHARE_FETCH: share_fetch.handle_share_fetch,
    versions.SHARE_ACKNOWLEDGE: share_fetch.handle_share_acknowledge,
    versions.LIST_OFFSETS: list_offsets.handle,
    versions.METADATA: metadata.handle,
    versions.API_VERSIONS: api_versions.handle,
    versions.CREATE_TOPICS: topics.handle_create,
    versions.DELETE_TOPICS: topics.handle_delete,
    versions.INIT_PRODUCER_ID: cluster.handle_init_producer_id,
    versions.OFFSET_FOR_LEADER_EPOCH: offset_for_leader_epoch.handle,
    versions.DESCRIBE_CONFIGS: configs.handle,
    versions.ALTER_CONFIGS: alter_configs.handle_alter,
    versions.INCREMENTAL_ALTER_CONFIGS: alter_configs.handle_incremental,
    versions.DESCRIBE_CLUSTER: cluster.handle_describe_cluster,
    versions.LIST_CONFIG_RESOURCES: list_config_resources.handle,
    versions.CREATE_PARTITIONS: topics.handle_create_partitions,
    versions.DESCRIBE_LOG_DIRS: log_dirs.handle,
    versions.ELECT_LEADERS: elections.handle,
    versions.ALTER_PARTITION_REASSIGNMENTS: reassignments.handle_alter,
    versions.LIST_PARTITION_REASSIGNMENTS: reassignments.handle_list,
    versions.DELETE_RECORDS: delete_records.handle,
    versions.ALTER_REPLICA_LOG_DIRS: alter_replica_log_dirs.handle,
    versions.DESCRIBE_PRODUCERS: describe_producers.handle,
    versions.DESCRIBE_TOPIC_PARTITIONS: describe_topic_partitions.handle,
    versions.FIND_COORDINATOR: groups.handle_find_coordinator,
    versions.JOIN_GROUP: groups.handle_join,
    versions.SYNC_GROUP: groups.handle_sync,
    versions.HEARTBEAT: groups.handle_heartbeat,
    versions.LEAVE_GROUP: groups.handle_leave,
    versions.DESCRIBE_GROUPS: groups.handle_describe,
    versions.LIST_GROUPS: groups.handle_list,
    versions.DELETE_GROUPS: groups.handle_delete,
    versions.CONSUMER_GROUP_HEARTBEAT: consumer_groups.handle_heartbeat,
    versions.CONSUMER_GROUP_DESCRIBE: consumer_groups.handle_describe,
    versions.SHARE_GROUP_HEARTBEAT: share_groups.handle_heartbeat,
    versions.SHARE_GROUP_DESCRIBE: share_groups.handle_describe,
    versions.DESCRIBE_SHARE_GROUP_OFFSETS: share_offsets.handle_describe,
    versions.ALTER_SHARE_GROUP_OFFSETS: share_offsets.handle_alter,
    versions.DELETE_SHARE_GROUP_OFFSETS: share_offsets.handle_delete,
    versions.ADD_PARTITIONS_TO_TXN: transactions.handle_add_partitions,
    versions.ADD_OFFSETS_TO_TXN: transactions.handle_add_offsets,
    versions.END_TXN: transactions.handle_end_txn,
    versions.TXN_OFFSET_COMMIT: transactions.handle_txn_offset_commit,
    versions.DESCRIBE_TRANSACTIONS: transactions.handle_describe,
    versions.LIST_TRANSACTIONS: transactions.handle_list,
    versions.OFFSET_COMMIT: offsets.handle_commit,
    versions.OFFSET_FETCH: offsets.handle_fetch,
    versions.OFFSET_DELETE: offsets.handle_delete,
    versions.DESCRIBE_CLIENT_QUOTAS: client_quotas.handle_describe,
    versions.ALTER_CLIENT_QUOTAS: client_quotas.handle_alter,
    versions.SASL_HANDSHAKE: sasl.handle_handshake,
    versions.SASL_AUTHENTICATE: sasl.handle_authenticate,
    versions.DESCRIBE_USER_SCRAM_CREDENTIALS: scram_credentials.handle_describe,
    versions.ALTER_USER_SCRAM_CREDENTIALS: scram_credentials.handle_alter,
    versions.DESCRIBE_ACLS: acls.handle_describe,
    versions.CREATE_ACLS: acls.handle_create,
    versions.DELETE_ACLS: acls.handle_delete,
    versions.LEADER_AND_ISR: leader_and_isr.handle,
    versions.STOP_REPLICA: stop_replica.handle,
    versions.UPDATE_METADATA: update_metadata.handle,
    versions.CONTROLLED_SHUTDOWN: controlled_shutdown.handle,
    versions.ALTER_PARTITION: alter_partition.handle,
    versions.WRITE_TXN_MARKERS: write_txn_markers.handle,
    versions.INITIALIZE_SHARE_GROUP_STATE: share_state.handle_initialize,
    versions.READ_SHARE_GROUP_STATE: share_state.handle_read,
    versions.WRITE_SHARE_GROUP_STATE: share_state.handle_write,
    versions.DELETE_SHARE_GROUP_STATE: share_state.handle_delete,
    versions.READ_SHARE_GROUP_STATE_SUMMARY: share_state.handle_read_summary,
}
assert HANDLERS.keys() == versions.SUPPORTED.keys()

# Hot-path requests decoded by hand-written codecs instead of the generic schema walk.
FAST_DECODERS: dict[int, Callable[[int, bytes | bytearray, int], Any]] = {
    versions.PRODUCE: decode_produce_request,
    versions.FETCH: decode_fetch_request,
    versions.OFFSET_COMMIT: decode_offset_commit_request,
    **INTERBROKER_DECODERS,  # LeaderAndIsr and UpdateMetadata: every partition's state
}


class Channel(Protocol):
    """The connection a request came in on, as the network layer provides it. With
    metrics on, ``received_ns`` is when the request was handed over, and the dispatcher
    gives the connection the request's ``timing`` to finish once it ends."""

    peer: str
    listener: str
    principal: str  # "User:<name>" (User:ANONYMOUS unauthenticated)
    received_ns: int
    timing: RequestTiming | None

    def send(self, parts: Sequence[Any], size: int) -> None: ...
    def done(self) -> None: ...
    def close(self) -> None: ...
    def throttle(self, delay_ms: int) -> None: ...


# Never throttled by client quotas: requests between brokers (Kafka's cluster actions).
_INTER_BROKER = frozenset(
    {
        versions.LEADER_AND_ISR,
        versions.STOP_REPLICA,
        versions.UPDATE_METADATA,
        versions.CONTROLLED_SHUTDOWN,
        versions.ALTER_PARTITION,
        versions.WRITE_TXN_MARKERS,
        versions.INITIALIZE_SHARE_GROUP_STATE,
        versions.READ_SHARE_GROUP_STATE,
        versions.WRITE_SHARE_GROUP_STATE,
        versions.DELETE_SHARE_GROUP_STATE,
        versions.READ_SHARE_GROUP_STATE_SUMMARY,
    }
)
_I32 = struct.Struct(">i")
# Refused requests (unsupported API or version) are logged once per client, API and version
# in this many seconds; the table of them is emptied past this many entries.
_REFUSED_LOG_INTERVAL_S = 600.0
_REFUSED_LOG_KEYS = 4096
# Request time is recorded as a percentage of one handler per second (Kafka's unit).
_NANOS_TO_PERCENTAGE = 100 / 1e9
# Requests this large, of APIs without a hand-written decoder, are decoded on a thread of
# their own (about 10 ms of the schema walk; a mega request takes seconds).
_THREAD_DECODE_BYTES = 256 * 1024
_DECODER = ThreadPoolExecutor(1, thread_name_prefix="gregor-decode")


class Dispatcher:
    def __init__(self, services: Services) -> None:
        self.services = services
        # (client host, client id, api key, version) of refused requests -> [when last
        # logged (monotonic s), how many refused since without a log line]
        self._refused: dict[tuple[str, str | None, int, int], list[Any]] = {}

    def __call__(self, conn: Channel, frame: bytes | bytearray) -> None:
        metrics = self.services.metrics
        dequeued = time.perf_counter_ns() if metrics is not None else 0
        try:
            api_key, version, correlation_id = peek_api(frame)
        except MalformedHeaderError as e:
            limited_log.log(
                "malformed-header", logging.WARNING, "Closing connection from %s: %s", conn.peer, e
            )
            conn.close()
            return
        if not versions.is_supported(api_key, version):
            if api_key == versions.API_VERSIONS:
                # Answer in v0 with our range so the client can pick a version we serve.
                self._send(conn, correlation_id, False, api_versions.unsupported_version_response())
                return
            self._refuse(conn, frame, api_key, version)
            return
        flexible = is_flexible(api_key, version)
        try:
            header = decode_request_header(frame, flexible)
            fast = FAST_DECODERS.get(api_key)
            if fast is None and len(frame) >= _THREAD_DECODE_BYTES:
                self._decode_in_thread(conn, frame, api_key, version, header, dequeued)
                return
            if fast is not None:
                body = fast(version, frame, header.body_offset)
            else:
                # A large frame arrives as a bytearray; kio's entities want bytes fields.
                frame = bytes(frame) if isinstance(frame, bytearray) else frame
                body = decode(request_type(api_key, version), frame, header.body_offset)
        except (MalformedHeaderError, SchemaDecodeError) as e:
            _malformed(conn, api_key, version, e)
            return
        self._handle(conn, api_key, version, header, body, len(frame), dequeued)

    def _decode_in_thread(
        self,
        conn: Channel,
        frame: bytes | bytearray,
        api_key: int,
        version: int,
        header: RequestHeader,
        dequeued: int,
    ) -> None:
        """Decode a large request on the decoding thread, then handle it: the schema walk
        costs about 40 ms per MiB, which the event loop would otherwise spend at once (the
        connection hands over no other request meanwhile, so order is kept)."""

        def decoded(future: asyncio.Future[Any]) -> None:
            try:
                self._handle(conn, api_key, version, header, future.result(), size, dequeued)
            except SchemaDecodeError as e:
                _malformed(conn, api_key, version, e)
            except Exception:  # as the network layer does for a request handled at once
                logger.exception(
                    "Unexpected error handling a request from %s; closing it", conn.peer
                )
                conn.close()

        size = len(frame)
        data = bytes(frame) if isinstance(frame, bytearray) else frame
        cls = request_type(api_key, version)
        loop = asyncio.get_running_loop()
        loop.run_in_executor(_DECODER, decode, cls, data, header.body_offset).add_done_callback(
            decoded
        )

    def _handle(
        self,
        conn: Channel,
        api_key: int,
        version: int,
        header: RequestHeader,
        body: Any,
        size: int,
        dequeued: int,
    ) -> None:
        metrics = self.services.metrics
        correlation_id = header.correlation_id
        flexible = is_flexible(api_key, version)
        ctx = RequestContext(
            api_key,
            version,
            correlation_id,
            header.client_id,
            conn.listener,
            conn.peer,
            size,
            conn.principal,
        )
        quotas = self.services.quotas
        timed = quotas.request.enabled and _request_time_counts(api_key, body)
        started = time.perf_counter_ns() if timed else 0
        try:
            result = HANDLERS[api_key](self.services, ctx, body)
        except CloseConnection as e:
            limited_log.log(
                "refused-request", logging.INFO, "Closing connection from %s: %s", conn.peer, e
            )
            conn.close()
            return
        if timed:
            delay = quotas.request.record(
                ctx.user,
                ctx.client_id,
                (time.perf_counter_ns() - started) * _NANOS_TO_PERCENTAGE,
                self.services.now_ms(),
            )
            ctx.throttle_ms = max(ctx.throttle_ms, delay)
        timing = None
        if metrics is not None:
            follower = api_key == versions.FETCH and body.replica_id >= 0
            kind = FOLLOWER_FETCH if follower else api_key
            timing = conn.timing = [kind, version, conn.received_ns, dequeued, 0, 0, 0, 0, metrics]
        # ApiVersions responses always use header v0, whatever the request version.
        flexible_response = flexible and api_key != versions.API_VERSIONS
        if result is None:
            self._no_answer(conn, ctx.throttle_ms, timing)
        elif isinstance(result, asyncio.Future):
            if timing is not None:
                timing[LOCAL_DONE] = time.perf_counter_ns()
            result.add_done_callback(
                lambda f: self._complete(conn, ctx, flexible_response, f, timing)
            )
        else:
            self._send(conn, correlation_id, flexible_response, result, ctx.throttle_ms, timing)

    def _refuse(self, conn: Channel, frame: bytes | bytearray, api_key: int, version: int) -> None:
        """An API or version we do not serve (e.g. Produce v0-v2, Fetch v0-v3, ListOffsets
        v0, all removed in Kafka 4): the connection is
        closed without an answer, as Kafka 4's SocketServer does (Processor.
        parseRequestHeader throws UnsupportedVersionException, or InvalidRequestException
        for an API the listener does not serve, and processChannelException closes the
        channel). A client that reconnects and retries would log a line per attempt, so
        one line per (client host, client id, api, version) per interval is logged, with
        the count of those left out since."""
        try:
            client_id = decode_request_header(frame, False).client_id
        except MalformedHeaderError:
            client_id = None
        if client_id is not None:
            client_id = client_id[:200]  # the table's and the line's size stay bounded
        host = conn.peer.rpartition(":")[0] or conn.peer
        key = (host, client_id, api_key, version)
        now = time.monotonic()
        seen = self._refused.get(key)
        if seen is not None and now - seen[0] < _REFUSED_LOG_INTERVAL_S:
            seen[1] += 1
        else:
            if len(self._refused) >= _REFUSED_LOG_KEYS:
                self._refused.clear()
            left_out = 0 if seen is None else seen[1]
            self._refused[key] = [now, 0]
            logger.warning(
                "Closing connection from %s (client id %r): unsupported API key %d version %d%s",
                conn.peer,
                client_id,
                api_key,
                version,
                f" ({left_out} more since the last such line)" if left_out else "",
            )
        conn.close()

    def _complete(
        self,
        conn: Channel,
        ctx: RequestContext,
        flexible: bool,
        future: asyncio.Future[Any],
        timing: RequestTiming | None = None,
    ) -> None:
        """Answer a handler's future as `handle` answers a plain result."""
        try:
            response = future.result()
        except CloseConnection as e:
            limited_log.log(
                "refused-request", logging.INFO, "Closing connection from %s: %s", conn.peer, e
            )
            conn.close()
            return
        except Exception:  # a parked operation that failed: its purgatory logged why
            conn.close()
            return
        if response is None:
            self._no_answer(conn, ctx.throttle_ms, timing)
        else:
            self._send(conn, ctx.correlation_id, flexible, response, ctx.throttle_ms, timing)

    @staticmethod
    def _no_answer(conn: Channel, throttle_ms: int, timing: RequestTiming | None) -> None:
        """A request that gets no answer (acks=0): the channel is muted all the same."""
        if throttle_ms:
            conn.throttle(throttle_ms)
            if timing is not None:
                timing[THROTTLE_MS] = throttle_ms
        conn.done()

    @staticmethod
    def _send(
        conn: Channel,
        correlation_id: int,
        flexible: bool,
        response: RawResponse | Entity,
        throttle_ms: int = 0,
        timing: RequestTiming | None = None,
    ) -> None:
        head = encode_response_header(correlation_id, flexible)
        if throttle_ms:
            response = _with_throttle(response, throttle_ms)
            conn.throttle(throttle_ms)  # before the send, which may hand the next request
        if isinstance(response, RawResponse):
            parts, size = [head, *response.parts], len(head) + response.size
        else:
            body = encode(response)
            parts, size = [head, body], len(head) + len(body)
        if timing is not None:
            timing[THROTTLE_MS] = throttle_ms
            timing[SENT] = time.perf_counter_ns()
        conn.send(parts, size)


def _malformed(conn: Channel, api_key: int, version: int, error: Exception) -> None:
    limited_log.log(
        "malformed-request",
        logging.WARNING,
        "Closing connection from %s: malformed %s v%d request: %s",
        conn.peer,
        request_type(api_key, version).__name__,
        version,
        error,
    )
    conn.close()


def _request_time_counts(api_key: int, body: Any) -> bool:
    """Request time counts toward request_percentage unless it is replication traffic."""
    if api_key == versions.FETCH:
        replica_id: int = body.replica_id
        return replica_id < 0
    return api_key not in _INTER_BROKER


def _with_throttle(response: RawResponse | Entity, delay_ms: int) -> RawResponse | Entity:
    """The response with its throttle time set (responses without one are left alone)."""
    if isinstance(response, RawResponse):
        at = response.throttle_at
        if at < 0:
            return response
        first = response.parts[0]
        patched = bytes(first[:at]) + _I32.pack(delay_ms) + bytes(first[at + 4 :])
        return RawResponse([patched, *response.parts[1:]], response.size, at)
    if "throttle_time" not in field_names(type(response)):
        return response
    return dataclasses.replace(response, throttle_time=timedelta(milliseconds=delay_ms))
