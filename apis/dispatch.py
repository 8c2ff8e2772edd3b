"""The request dispatcher: frame -> header -> handler -> encoded response.

Runs on a handler task of the socket server. A handler returns a kio response entity,
a ``RawResponse``, a future of either (the request was parked in the purgatory), or
None when no answer is due (acks=0).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from apis import (
    alter_partition,
    api_versions,
    cluster,
    configs,
    controlled_shutdown,
    elections,
    fetch,
    groups,
    leader_and_isr,
    list_offsets,
    log_dirs,
    metadata,
    offset_for_leader_epoch,
    offsets,
    produce,
    reassignments,
    stop_replica,
    topics,
    update_metadata,
)
from apis.context import CloseConnection, RawResponse, RequestContext, Services
from wire import versions
from wire.fetch import decode_fetch_request
from wire.headers import (
    MalformedHeaderError,
    decode_request_header,
    encode_response_header,
    peek_api,
)
from wire.offset_commit import decode_offset_commit_request
from wire.produce import decode_produce_request
from wire.schema import SchemaDecodeError, decode, encode, is_flexible, request_type

logger = logging.getLogger(__name__)

Handler = Callable[[Services, RequestContext, Any], Any]

HANDLERS: dict[int, Handler] = {
    versions.PRODUCE: produce.handle,
    versions.FETCH: fetch.handle,
    versions.LIST_OFFSETS: list_offsets.handle,
    versions.METADATA: metadata.handle,
    versions.API_VERSIONS: api_versions.handle,
    versions.CREATE_TOPICS: topics.handle_create,
    versions.DELETE_TOPICS: topics.handle_delete,
    versions.INIT_PRODUCER_ID: cluster.handle_init_producer_id,
    versions.OFFSET_FOR_LEADER_EPOCH: offset_for_leader_epoch.handle,
    versions.DESCRIBE_CONFIGS: configs.handle,
    versions.DESCRIBE_CLUSTER: cluster.handle_describe_cluster,
    versions.CREATE_PARTITIONS: topics.handle_create_partitions,
    versions.DESCRIBE_LOG_DIRS: log_dirs.handle,
    versions.ELECT_LEADERS: elections.handle,
    versions.ALTER_PARTITION_REASSIGNMENTS: reassignments.handle_alter,
    versions.LIST_PARTITION_REASSIGNMENTS: reassignments.handle_list,
    versions.FIND_COORDINATOR: groups.handle_find_coordinator,
    versions.JOIN_GROUP: groups.handle_join,
    versions.SYNC_GROUP: groups.handle_sync,
    versions.HEARTBEAT: groups.handle_heartbeat,
    versions.LEAVE_GROUP: groups.handle_leave,
    versions.DESCRIBE_GROUPS: groups.handle_describe,
    versions.LIST_GROUPS: groups.handle_list,
    versions.DELETE_GROUPS: groups.handle_delete,
    versions.OFFSET_COMMIT: offsets.handle_commit,
    versions.OFFSET_FETCH: offsets.handle_fetch,
    versions.OFFSET_DELETE: offsets.handle_delete,
    versions.LEADER_AND_ISR: leader_and_isr.handle,
    versions.STOP_REPLICA: stop_replica.handle,
    versions.UPDATE_METADATA: update_metadata.handle,
    versions.CONTROLLED_SHUTDOWN: controlled_shutdown.handle,
    versions.ALTER_PARTITION: alter_partition.handle,
}
assert HANDLERS.keys() == versions.SUPPORTED.keys()

# Hot-path requests decoded by hand-written codecs instead of the generic schema walk.
FAST_DECODERS: dict[int, Callable[[int, bytes, int], Any]] = {
    versions.PRODUCE: decode_produce_request,
    versions.FETCH: decode_fetch_request,
    versions.OFFSET_COMMIT: decode_offset_commit_request,
}


class Channel(Protocol):
    """The connection a request came in on, as the network layer provides it."""

    peer: str
    listener: str

    def send(self, parts: Sequence[Any], size: int) -> None: ...
    def done(self) -> None: ...
    def close(self) -> None: ...


class Dispatcher:
    def __init__(self, services: Services) -> None:
        self.services = services

    def __call__(self, conn: Channel, frame: bytes | bytearray) -> None:
        try:
            api_key, version, correlation_id = peek_api(frame)
        except MalformedHeaderError as e:
            logger.warning("Closing connection from %s: %s", conn.peer, e)
            conn.close()
            return
        if not versions.is_supported(api_key, version):
            if api_key == versions.API_VERSIONS:
                # Answer in v0 with our range so the client can pick a version we serve.
                self._send(conn, correlation_id, False, api_versions.unsupported_version_response())
                return
            logger.warning(
                "Closing connection from %s: unsupported API key %d version %d",
                conn.peer,
                api_key,
                version,
            )
            conn.close()
            return
        flexible = is_flexible(api_key, version)
        try:
            header = decode_request_header(frame, flexible)
            fast = FAST_DECODERS.get(api_key)
            if fast is not None:
                body = fast(version, frame, header.body_offset)
            else:
                # A large frame arrives as a bytearray; kio's entities want bytes fields.
                frame = bytes(frame) if isinstance(frame, bytearray) else frame
                body = decode(request_type(api_key, version), frame, header.body_offset)
        except (MalformedHeaderError, SchemaDecodeError) as e:
            logger.warning(
                "Closing connection from %s: malformed %s v%d request: %s",
                conn.peer,
                request_type(api_key, version).__name__,
                version,
                e,
            )
            conn.close()
            return
        ctx = RequestContext(
            api_key, version, correlation_id, header.client_id, conn.listener, conn.peer
        )
        try:
            result = HANDLERS[api_key](self.services, ctx, body)
        except CloseConnection as e:
            logger.info("Closing connection from %s: %s", conn.peer, e)
            conn.close()
            return
        # ApiVersions responses always use header v0, whatever the request version.
        flexible_response = flexible and api_key != versions.API_VERSIONS
        if result is None:
            conn.done()
        elif isinstance(result, asyncio.Future):
            result.add_done_callback(
                lambda f: self._complete(conn, correlation_id, flexible_response, f)
            )
        else:
            self._send(conn, correlation_id, flexible_response, result)

    def _complete(
        self, conn: Channel, correlation_id: int, flexible: bool, future: asyncio.Future
    ) -> None:
        """Answer a handler's future as `handle` answers a plain result."""
        try:
            response = future.result()
        except CloseConnection as e:
            logger.info("Closing connection from %s: %s", conn.peer, e)
            conn.close()
            return
        except Exception:  # a parked operation that failed: its purgatory logged why
            conn.close()
            return
        if response is None:
            conn.done()
        else:
            self._send(conn, correlation_id, flexible, response)

    @staticmethod
    def _send(conn: Channel, correlation_id: int, flexible: bool, response: Any) -> None:
        head = encode_response_header(correlation_id, flexible)
        if isinstance(response, RawResponse):
            conn.send([head, *response.parts], len(head) + response.size)
        else:
            body = encode(response)
            conn.send([head, body], len(head) + len(body))
