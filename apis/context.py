"""What every handler receives: the request's context and the broker's services."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from datetime import timedelta
from functools import cache
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from kio.schema.errors import ErrorCode
from kio.static.protocol import Entity

if TYPE_CHECKING:
    from gregor.controller.acls.authorizer import AclAuthorizer
    from gregor.controller.base import Controller
    from gregor.controller.metadata.cache import MetadataCache
    from gregor.controller.zk_broker import ZkBroker
    from gregor.coordinator.coordinator import GroupCoordinator
    from gregor.coordinator.share_coordinator import ShareCoordinator
    from gregor.coordinator.txn_coordinator import TransactionCoordinator
    from gregor.replica.manager import ReplicaManager
    from gregor.replica.share_partition_manager import SharePartitionManager
    from gregor.replica.share_persister import SharePersister
    from gregor.server.config import BrokerConfig
    from gregor.server.metrics import BrokerMetrics
    from gregor.server.quotas import ClientQuotas

logger = logging.getLogger(__name__)
T = TypeVar("T")

NO_THROTTLE = timedelta(0)
# Authorized-operations fields when the client did not ask for them.
NO_AUTHORIZED_OPERATIONS = -(2**31)


@dataclass(slots=True)
class RawResponse:
    """A response body already encoded, possibly with file regions in it."""

    parts: list[Any]
    size: int
    throttle_at: int = -1  # where the throttle time's int32 is in parts[0] (-1: nowhere)


class CloseConnection(Exception):
    """Raised by a handler when the only correct answer is to close the connection."""


@dataclass(slots=True)  # not frozen: one per request, and frozen costs 4x to make
class RequestContext:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    listener: str
    peer: str
    size: int = 0  # the request's bytes
    principal: str = "User:ANONYMOUS"
    # The quota delay the handler found (ms): the dispatcher writes it into the response
    # and mutes the connection for it.
    throttle_ms: int = 0

    @property
    def user(self) -> str:
        """The principal's name, as quotas match it (ANONYMOUS without authentication)."""
        return self.principal.partition(":")[2]


class TxnVerifier(Protocol):
    """The transaction coordinator's check of KIP-890 part 1, for the partition side: is
    each partition part of the transactional id's ongoing transaction at this producer id
    and epoch? NONE lets a first transactional write to the partition in."""

    async def verify(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: list[tuple[str, int]],
    ) -> dict[tuple[str, int], ErrorCode]: ...

    async def verify_offset_commit(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partition: tuple[str, int],
    ) -> ErrorCode:
        """The same for a TxnOffsetCommit's ``__consumer_offsets`` partition, answered as
        a TxnOffsetCommit answers it."""
        ...


@dataclass(slots=True)
class Services:
    config: BrokerConfig
    metadata: MetadataCache
    controller: Controller
    replicas: ReplicaManager
    now_ms: Callable[[], int]  # the broker's wall clock, in milliseconds
    quotas: ClientQuotas
    groups: GroupCoordinator | None = None
    # In cluster mode, this broker's ZooKeeper side (controller/zk_broker.py), which the
    # controller's requests act through; None on an embedded node.
    cluster: ZkBroker | None = None
    # The transaction coordinator (coordinator/txn_coordinator.py).
    transactions: TransactionCoordinator | None = None
    # The transaction coordinator's verifier of first transactional writes (Produce and
    # TxnOffsetCommit); None until the coordinator is wired in (every such write is then
    # INVALID_TXN_STATE).
    txn: TxnVerifier | None = None
    # What the Prometheus endpoint reports (server/metrics.py); None when it is off, and
    # then nothing is recorded.
    metrics: BrokerMetrics | None = None
    # The broker's own check of its effective properties after a dynamic BROKER change
    # (a TLS listener's new keystore must load); raises TopicError(INVALID_CONFIG).
    check_broker_props: Callable[[Mapping[str, str]], None] | None = None
    # The authorizer authorizer.class.name selects (controller/acls/authorizer.py), holding
    # every ACL; None without one (the ACL APIs answer SECURITY_DISABLED).
    authorizer: AclAuthorizer | None = None
    # The share-partitions this broker leads and their share sessions (KIP-932).
    share_partitions: SharePartitionManager | None = None
    # The share coordinator (coordinator/share_coordinator.py) and the persister that reaches
    # the share coordinator of any share-partition (server/share_persister.py).
    share_coordinator: ShareCoordinator | None = None
    share_persister: SharePersister | None = None


@cache
def field_names(cls: type[Entity]) -> frozenset[str]:
    return frozenset(cls.__dataclass_fields__)


def build(cls: type, **values: Any) -> Any:
    """Instantiate a kio entity, dropping fields this version of the schema lacks."""
    names = field_names(cls)
    return cls(**{k: v for k, v in values.items() if k in names})


@cache
def nested(entity: type, name: str) -> type:
    """A nested entity class defined next to ``entity`` (same API version)."""
    cls: type = getattr(sys.modules[entity.__module__], name)
    return cls


def later(response: Coroutine[Any, Any, T]) -> asyncio.Future[T]:
    """A handler's response that needs the controller's asynchronous calls, as a future
    the dispatcher answers when it is done."""
    return asyncio.ensure_future(_logged(response))


async def _logged(response: Coroutine[Any, Any, T]) -> T:
    try:
        return await response
    except CloseConnection:
        raise
    except Exception:
        # The dispatcher closes the connection; this says why.
        logger.exception("Request failed")
        raise
