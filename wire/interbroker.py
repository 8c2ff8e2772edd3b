"""Inter-broker (controller) messages, in the style of kio's generated classes.

kio has no schemas for the ZooKeeper-era control plane, so these are written by hand
from Apache Kafka 3.9's ``LeaderAndIsrRequest.json``, ``StopReplicaRequest.json``,
``UpdateMetadataRequest.json``, ``ControlledShutdownRequest.json`` and their responses.
Only one version of each is defined: LeaderAndIsr (key 4) v7, StopReplica (5) v4,
UpdateMetadata (6) v8 and ControlledShutdown (7) v3, all flexible. Only Gregor brokers
speak them, to one another, so there is no older version to negotiate down to.

The field order, types, defaults and tags are those of the JSON at these versions, so
``gregor.wire.schema.encode`` and ``gregor.wire.schema.decode`` produce and read Kafka's bytes. The
partition states of LeaderAndIsr and UpdateMetadata, of which a controller sends tens of
thousands, are encoded by the struct-based ENCODERS below (kio's generic writer spent about
0.1 s on 10,000 of them); the tests hold them byte-equal to the generic writer. Those
per-partition classes (and LeaderAndIsr's per-partition error) are not frozen: a frozen
dataclass sets each field through ``object.__setattr__``, and building or decoding 50,000
of them took a third longer (a failover's controller builds them and every broker decodes
them, on busy cores). Nothing changes them once made.
"""

import dataclasses
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache, lru_cache
from typing import Any, ClassVar

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v1.header import ResponseHeader
from kio.schema.types import BrokerId, TopicName
from kio.static.constants import EntityType
from kio.static.primitive import i8, i16, i32, i64

from gregor.wire.varint import encode_uvarint

LEADER_AND_ISR = 4
STOP_REPLICA = 5
UPDATE_METADATA = 6
CONTROLLED_SHUTDOWN = 7


# --- LeaderAndIsr v7 ------------------------------------------------------------------


@dataclass(slots=True, kw_only=True)  # not frozen: see the module's note
class LeaderAndIsrPartitionState:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(7)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(LEADER_AND_ISR)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    partition_index: i32 = field(metadata={"kafka_type": "int32"})
    """The partition index."""
    controller_epoch: i32 = field(metadata={"kafka_type": "int32"})
    """The controller epoch."""
    leader: BrokerId = field(metadata={"kafka_type": "int32"})
    """The broker ID of the leader."""
    leader_epoch: i32 = field(metadata={"kafka_type": "int32"})
    """The leader epoch."""
    isr: tuple[BrokerId, ...] = field(metadata={"kafka_type": "int32"}, default=())
    """The in-sync replica IDs."""
    partition_epoch: i32 = field(metadata={"kafka_type": "int32"})
    """The partition epoch: the zk version of the partition's state znode."""
    replicas: tuple[BrokerId, ...] = field(metadata={"kafka_type": "int32"}, default=())
    """The replica IDs."""
    adding_replicas: tuple[BrokerId, ...] = field(metadata={"kafka_type": "int32"}, default=())
    """The replica IDs being added to this partition by a reassignment."""
    removing_replicas: tuple[BrokerId, ...] = field(metadata={"kafka_type": "int32"}, default=())
    """The replica IDs being removed from this partition by a reassignment."""
    is_new: bool = field(metadata={"kafka_type": "bool"}, default=False)
    """Whether the replica should have existed on the broker or not."""
    leader_recovery_state: i8 = field(metadata={"kafka_type": "int8"}, default=i8(0))
    """1 if the partition is recovering from an unclean leader election; 0 otherwise."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderAndIsrTopicState:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(7)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(LEADER_AND_ISR)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    topic_name: TopicName = field(metadata={"kafka_type": "string"})
    """The topic name."""
    topic_id: uuid.UUID | None = field(metadata={"kafka_type": "uuid"})
    """The unique topic ID (None is the all-zero id)."""
    partition_states: tuple[LeaderAndIsrPartitionState, ...]
    """The state of each partition."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderAndIsrLiveLeader:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(7)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(LEADER_AND_ISR)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    broker_id: BrokerId = field(metadata={"kafka_type": "int32"})
    """The leader's broker ID."""
    host_name: str = field(metadata={"kafka_type": "string"})
    """The leader's hostname."""
    port: i32 = field(metadata={"kafka_type": "int32"})
    """The leader's port."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderAndIsrRequest:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(7)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(LEADER_AND_ISR)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    controller_id: BrokerId = field(metadata={"kafka_type": "int32"})
    """The current controller ID."""
    is_kraft_controller: bool = field(metadata={"kafka_type": "bool"}, default=False)
    """If KRaft controller id is used during migration (KIP-866); always false here."""
    controller_epoch: i32 = field(metadata={"kafka_type": "int32"})
    """The current controller epoch."""
    broker_epoch: i64 = field(metadata={"kafka_type": "int64"}, default=i64(-1))
    """The current broker epoch."""
    type: i8 = field(metadata={"kafka_type": "int8"}, default=i8(0))
    """Whether all topics are included: 0 unknown, 1 incremental, 2 full."""
    topic_states: tuple[LeaderAndIsrTopicState, ...]
    """Each topic."""
    live_leaders: tuple[LeaderAndIsrLiveLeader, ...]
    """The current live leaders."""


@dataclass(slots=True, kw_only=True)  # not frozen: see the module's note
class LeaderAndIsrPartitionError:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(7)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(LEADER_AND_ISR)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    partition_index: i32 = field(metadata={"kafka_type": "int32"})
    """The partition index."""
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    """The partition error code, or 0 if there was no error."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderAndIsrTopicError:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(7)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(LEADER_AND_ISR)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    topic_id: uuid.UUID | None = field(metadata={"kafka_type": "uuid"})
    """The unique topic ID."""
    partition_errors: tuple[LeaderAndIsrPartitionError, ...]
    """Each partition."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderAndIsrResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(7)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(LEADER_AND_ISR)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    """The error code, or 0 if there was no error."""
    topics: tuple[LeaderAndIsrTopicError, ...]
    """Each topic."""


# --- StopReplica v4 -------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class StopReplicaPartitionState:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(4)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(STOP_REPLICA)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    partition_index: i32 = field(metadata={"kafka_type": "int32"})
    """The partition index."""
    leader_epoch: i32 = field(metadata={"kafka_type": "int32"}, default=i32(-1))
    """The leader epoch; -1 skips the epoch check, -2 is sent when deleting the topic."""
    delete_partition: bool = field(metadata={"kafka_type": "bool"})
    """Whether this partition should be deleted."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StopReplicaTopicState:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(4)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(STOP_REPLICA)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    topic_name: TopicName = field(metadata={"kafka_type": "string"})
    """The topic name."""
    partition_states: tuple[StopReplicaPartitionState, ...]
    """The state of each partition."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StopReplicaRequest:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(4)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(STOP_REPLICA)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    controller_id: BrokerId = field(metadata={"kafka_type": "int32"})
    """The controller id."""
    is_kraft_controller: bool = field(metadata={"kafka_type": "bool"}, default=False)
    """If KRaft controller id is used during migration (KIP-866); always false here."""
    controller_epoch: i32 = field(metadata={"kafka_type": "int32"})
    """The controller epoch."""
    broker_epoch: i64 = field(metadata={"kafka_type": "int64"}, default=i64(-1))
    """The broker epoch."""
    topic_states: tuple[StopReplicaTopicState, ...]
    """Each topic."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StopReplicaPartitionError:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(4)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(STOP_REPLICA)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    topic_name: TopicName = field(metadata={"kafka_type": "string"})
    """The topic name."""
    partition_index: i32 = field(metadata={"kafka_type": "int32"})
    """The partition index."""
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    """The partition error code, or 0 if there was no partition error."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StopReplicaResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(4)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(STOP_REPLICA)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    """The top-level error code, or 0 if there was no top-level error."""
    partition_errors: tuple[StopReplicaPartitionError, ...]
    """The responses for each partition."""


# --- UpdateMetadata v8 ----------------------------------------------------------------


@dataclass(slots=True, kw_only=True)  # not frozen: see the module's note
class UpdateMetadataPartitionState:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(8)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(UPDATE_METADATA)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    partition_index: i32 = field(metadata={"kafka_type": "int32"})
    """The partition index."""
    controller_epoch: i32 = field(metadata={"kafka_type": "int32"})
    """The controller epoch."""
    leader: BrokerId = field(metadata={"kafka_type": "int32"})
    """The ID of the broker which is the current partition leader."""
    leader_epoch: i32 = field(metadata={"kafka_type": "int32"})
    """The leader epoch of this partition."""
    isr: tuple[BrokerId, ...] = field(metadata={"kafka_type": "int32"}, default=())
    """The brokers which are in the ISR for this partition."""
    zk_version: i32 = field(metadata={"kafka_type": "int32"})
    """The zk version of the partition's state znode (the partition epoch)."""
    replicas: tuple[BrokerId, ...] = field(metadata={"kafka_type": "int32"}, default=())
    """All the replicas of this partition."""
    offline_replicas: tuple[BrokerId, ...] = field(metadata={"kafka_type": "int32"}, default=())
    """The replicas of this partition which are offline."""


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateMetadataTopicState:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(8)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(UPDATE_METADATA)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    topic_name: TopicName = field(metadata={"kafka_type": "string"})
    """The topic name."""
    topic_id: uuid.UUID | None = field(metadata={"kafka_type": "uuid"})
    """The topic id (None is the all-zero id)."""
    partition_states: tuple[UpdateMetadataPartitionState, ...]
    """The partitions that we would like to update."""


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateMetadataEndpoint:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(8)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(UPDATE_METADATA)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    port: i32 = field(metadata={"kafka_type": "int32"})
    """The port of this endpoint."""
    host: str = field(metadata={"kafka_type": "string"})
    """The hostname of this endpoint."""
    listener: str = field(metadata={"kafka_type": "string"})
    """The listener name."""
    security_protocol: i16 = field(metadata={"kafka_type": "int16"})
    """The security protocol type (0 PLAINTEXT, 1 SSL, 2 SASL_PLAINTEXT, 3 SASL_SSL)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateMetadataBroker:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(8)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(UPDATE_METADATA)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    id: BrokerId = field(metadata={"kafka_type": "int32"})
    """The broker id."""
    endpoints: tuple[UpdateMetadataEndpoint, ...]
    """The broker endpoints."""
    rack: str | None = field(metadata={"kafka_type": "string"})
    """The rack which this broker belongs to."""


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateMetadataRequest:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(8)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(UPDATE_METADATA)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    controller_id: BrokerId = field(metadata={"kafka_type": "int32"})
    """The controller id."""
    is_kraft_controller: bool = field(metadata={"kafka_type": "bool"}, default=False)
    """If KRaft controller id is used during migration (KIP-866); always false here."""
    type: i8 = field(metadata={"kafka_type": "int8", "tag": 0}, default=i8(0))
    """Tagged: a full snapshot (2), incremental (1) or unknown (0); KIP-866 migration."""
    controller_epoch: i32 = field(metadata={"kafka_type": "int32"})
    """The controller epoch."""
    broker_epoch: i64 = field(metadata={"kafka_type": "int64"}, default=i64(-1))
    """The broker epoch."""
    topic_states: tuple[UpdateMetadataTopicState, ...]
    """Each topic that we would like to update."""
    live_brokers: tuple[UpdateMetadataBroker, ...]
    """The live brokers."""


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateMetadataResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(8)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(UPDATE_METADATA)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    """The error code, or 0 if there was no error."""


# --- ControlledShutdown v3 ------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlledShutdownRequest:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(3)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(CONTROLLED_SHUTDOWN)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    broker_id: BrokerId = field(metadata={"kafka_type": "int32"})
    """The id of the broker for which controlled shutdown has been requested."""
    broker_epoch: i64 = field(metadata={"kafka_type": "int64"}, default=i64(-1))
    """The broker epoch."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RemainingPartition:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(3)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(CONTROLLED_SHUTDOWN)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    topic_name: TopicName = field(metadata={"kafka_type": "string"})
    """The name of the topic."""
    partition_index: i32 = field(metadata={"kafka_type": "int32"})
    """The index of the partition."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlledShutdownResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(3)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(CONTROLLED_SHUTDOWN)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    """The top-level error code."""
    remaining_partitions: tuple[RemainingPartition, ...]
    """The partitions that the broker still leads."""


# (api key, version) -> entity, for wire.schema's lookup.
REQUESTS: dict[tuple[int, int], type] = {
    (LEADER_AND_ISR, 7): LeaderAndIsrRequest,
    (STOP_REPLICA, 4): StopReplicaRequest,
    (UPDATE_METADATA, 8): UpdateMetadataRequest,
    (CONTROLLED_SHUTDOWN, 3): ControlledShutdownRequest,
}
RESPONSES: dict[tuple[int, int], type] = {
    (LEADER_AND_ISR, 7): LeaderAndIsrResponse,
    (STOP_REPLICA, 4): StopReplicaResponse,
    (UPDATE_METADATA, 8): UpdateMetadataResponse,
    (CONTROLLED_SHUTDOWN, 3): ControlledShutdownResponse,
}


# --- Fast encoding of the big requests --------------------------------------------------

_ZERO_UUID = bytes(16)


@cache
def _state_struct(shape: str, lengths: tuple[int, ...]) -> struct.Struct:
    """A state's layout once its arrays' lengths are known, all below 127 (so that each
    compact length takes one byte): in `shape`, `a` is a compact int32 array, other
    letters are struct codes; the empty tagged-field section ends it."""
    fmt = ">"
    arrays = iter(lengths)
    for code in shape:
        fmt += f"B{next(arrays)}i" if code == "a" else code
    return struct.Struct(fmt + "B")


def _pack_long_arrays(shape: str, values: tuple[Any, ...]) -> bytes:
    """A state with an array of 127 or more replicas (never, in practice)."""
    return (
        b"".join(
            encode_uvarint(len(v) + 1) + struct.pack(f">{len(v)}i", *v)
            if code == "a"
            else struct.pack(">" + code, v)
            for v, code in zip(values, shape, strict=True)
        )
        + b"\0"
    )


_LEADER_AND_ISR_STATE = "iiiiaiaaa?b"
_UPDATE_METADATA_STATE = "iiiiaiaa"


def _leader_and_isr_state(s: LeaderAndIsrPartitionState) -> bytes:
    isr, replicas, adding, removing = s.isr, s.replicas, s.adding_replicas, s.removing_replicas
    lengths = (len(isr), len(replicas), len(adding), len(removing))
    if max(lengths) >= 127:
        return _pack_long_arrays(
            _LEADER_AND_ISR_STATE,
            (s.partition_index, s.controller_epoch, s.leader, s.leader_epoch, isr,
             s.partition_epoch, replicas, adding, removing, s.is_new, s.leader_recovery_state),
        )  # fmt: skip
    return _state_struct(_LEADER_AND_ISR_STATE, lengths).pack(
        s.partition_index, s.controller_epoch, s.leader, s.leader_epoch,
        lengths[0] + 1, *isr, s.partition_epoch, lengths[1] + 1, *replicas,
        lengths[2] + 1, *adding, lengths[3] + 1, *removing,
        s.is_new, s.leader_recovery_state, 0,
    )  # fmt: skip


def _update_metadata_state(s: UpdateMetadataPartitionState) -> bytes:
    isr, replicas, offline = s.isr, s.replicas, s.offline_replicas
    lengths = (len(isr), len(replicas), len(offline))
    if max(lengths) >= 127:
        return _pack_long_arrays(
            _UPDATE_METADATA_STATE,
            (s.partition_index, s.controller_epoch, s.leader, s.leader_epoch, isr,
             s.zk_version, replicas, offline),
        )  # fmt: skip
    return _state_struct(_UPDATE_METADATA_STATE, lengths).pack(
        s.partition_index, s.controller_epoch, s.leader, s.leader_epoch,
        lengths[0] + 1, *isr, s.zk_version, lengths[1] + 1, *replicas,
        lengths[2] + 1, *offline, 0,
    )  # fmt: skip


def _topic_states(topics: Any, encode_state: Callable[[Any], bytes]) -> bytes:
    """A compact array of topic states: name, id, the partition states, no tags."""
    out = [encode_uvarint(len(topics) + 1)]
    for topic in topics:
        name = topic.topic_name.encode()
        out.append(encode_uvarint(len(name) + 1))
        out.append(name)
        out.append(topic.topic_id.bytes if topic.topic_id is not None else _ZERO_UUID)
        out.append(encode_uvarint(len(topic.partition_states) + 1))
        out.extend(map(encode_state, topic.partition_states))
        out.append(b"\0")
    return b"".join(out)


def _with_topic_states(
    generic: Callable[[Any], bytes], encode_state: Callable[[Any], bytes]
) -> Callable[[Any], bytes]:
    """An encoder of a request that writes its topic states fast and the rest (a few
    fields before them, the brokers after them) with `generic`, with the topics left out:
    their empty array is one byte, replaced by the real one."""

    def encode(request: Any) -> bytes:
        rest = generic(dataclasses.replace(request, topic_states=()))
        at = TOPIC_STATES_AT[type(request)]
        return rest[:at] + _topic_states(request.topic_states, encode_state) + rest[at + 1 :]

    return encode


# Where topic_states starts: after the fixed-size fields that precede it.
TOPIC_STATES_AT: dict[type, int] = {
    LeaderAndIsrRequest: 4 + 1 + 4 + 8 + 1,  # controller id, kraft, epoch, broker epoch, type
    UpdateMetadataRequest: 4 + 1 + 4 + 8,  # controller id, kraft, epoch, broker epoch
}


@lru_cache(maxsize=256)
def partition_errors_struct(count: int) -> struct.Struct:
    """`count` LeaderAndIsr partition errors: index, error code, empty tagged fields.
    Bounded: a count read from an answer only evicts."""
    return struct.Struct(">" + "ihB" * count)


def _leader_and_isr_response(response: LeaderAndIsrResponse) -> bytes:
    """The answer to a LeaderAndIsr, one entry per partition of the request."""
    out = [struct.pack(">h", response.error_code), encode_uvarint(len(response.topics) + 1)]
    for topic in response.topics:
        errors = topic.partition_errors
        out.append(topic.topic_id.bytes if topic.topic_id is not None else _ZERO_UUID)
        out.append(encode_uvarint(len(errors) + 1))
        flat = [v for e in errors for v in (e.partition_index, e.error_code, 0)]
        out.append(partition_errors_struct(len(errors)).pack(*flat))
        out.append(b"\0")
    out.append(b"\0")
    return b"".join(out)


def fast_encoders(generic: Callable[[Any], bytes]) -> dict[type, Callable[[Any], bytes]]:
    """Encoders for the messages that carry many partitions, given the generic writer."""
    return {
        LeaderAndIsrRequest: _with_topic_states(generic, _leader_and_isr_state),
        UpdateMetadataRequest: _with_topic_states(generic, _update_metadata_state),
        LeaderAndIsrResponse: _leader_and_isr_response,
    }
