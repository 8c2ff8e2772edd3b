"""A tiny raw-socket Kafka client for protocol-level tests (bytes on a real socket)."""

from __future__ import annotations

import datetime
import socket
import struct
from typing import Any

from gregor.apis.context import build, nested
from gregor.wire.headers import skip_tagged_fields
from gregor.wire.schema import decode, encode, is_flexible, request_type, response_type
from gregor.wire.versions import CREATE_TOPICS, FETCH, is_supported


def request_frame(
    api_key: int, version: int, correlation_id: int, body: Any, client_id: str = "wire-test"
) -> bytes:
    cid = client_id.encode()
    header = struct.pack(">hhih", api_key, version, correlation_id, len(cid)) + cid
    if is_supported(api_key, version) and is_flexible(api_key, version):
        header += b"\x00"
    payload = header + (body if isinstance(body, bytes) else encode(body))
    return struct.pack(">i", len(payload)) + payload


def fetch_one(
    client: WireClient,
    topic: str,
    partition: int,
    fetch_offset: int,
    current_leader_epoch: int = -1,
) -> Any:
    """Fetch v12 of one partition without waiting; returns that partition's response."""
    cls = request_type(FETCH, 12)
    module = __import__(cls.__module__, fromlist=["x"])
    wanted = module.FetchPartition(
        partition=partition,
        current_leader_epoch=current_leader_epoch,
        fetch_offset=fetch_offset,
        partition_max_bytes=1 << 20,
    )
    request = cls(
        max_wait=datetime.timedelta(0),
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(module.FetchTopic(topic=topic, partitions=(wanted,)),),
        forgotten_topics_data=(),
        rack_id="",
    )
    return client.call(FETCH, 12, request).responses[0].partitions[0]


def create_topics_request(
    *specs: tuple[str, int, dict[str, str]],
    replication_factor: int = -1,
    validate_only: bool = False,
    version: int = 7,
) -> Any:
    """A CreateTopics request for (name, partitions, configs) specs."""
    cls = request_type(CREATE_TOPICS, version)
    topic, config = nested(cls, "CreatableTopic"), nested(cls, "CreatableTopicConfig")
    return build(
        cls,
        timeout=datetime.timedelta(seconds=30),
        validate_only=validate_only,
        topics=tuple(
            topic(
                name=name,
                num_partitions=partitions,
                replication_factor=replication_factor,
                assignments=(),
                configs=tuple(config(name=k, value=v) for k, v in configs.items()),
            )
            for name, partitions, configs in specs
        ),
    )


def create_topic(
    client: WireClient,
    name: str,
    partitions: int = 1,
    configs: dict[str, str] | None = None,
    **options: Any,
) -> Any:
    """CreateTopics for one topic; its result (``options`` as create_topics_request's)."""
    version = options.get("version", 7)
    request = create_topics_request((name, partitions, configs or {}), **options)
    return client.call(CREATE_TOPICS, version, request).topics[0]


class WireClient:
    def __init__(self, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self._next = 0

    def close(self) -> None:
        self.sock.close()

    def send(self, frame: bytes) -> None:
        self.sock.sendall(frame)

    def read_frame(self) -> bytes:
        size = struct.unpack(">i", self._recv(4))[0]
        return self._recv(size)

    def call(self, api_key: int, version: int, body: Any) -> Any:
        self._next += 1
        self.send(request_frame(api_key, version, self._next, body))
        return self.read_response(api_key, version, self._next)

    def read_response(self, api_key: int, version: int, correlation_id: int) -> Any:
        frame = self.read_frame()
        assert struct.unpack_from(">i", frame)[0] == correlation_id
        pos = 4
        if is_flexible(api_key, version) and api_key != 18:
            pos = skip_tagged_fields(frame, pos)
        return decode(response_type(api_key, version), frame, pos)

    def is_closed_by_peer(self) -> bool:
        """True once the broker has closed the connection (EOF or reset)."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def _recv(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("connection closed by broker")
            buf += chunk
        return bytes(buf)
