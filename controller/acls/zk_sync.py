"""A cluster broker's ACLs: its authorizer kept equal to ZooKeeper's, and CreateAcls and
DeleteAcls written there (``zk_store.py``).

At start (and after a lost session) every ACL is read; from then on the two change roots are
watched, and each notification not seen yet makes the broker read the pattern it names
again (Kafka's AclAuthorizer with its ZkNodeChangeNotificationListener). This broker's own
writes apply to its authorizer at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from kio.schema.errors import ErrorCode

from gregor.controller.acls import changes
from gregor.controller.acls.authorizer import AclAuthorizer
from gregor.controller.acls.model import AclBinding, AclBindingFilter, ResourcePattern
from gregor.controller.acls.zk_format import EXTENDED_CHANGES_PATH, LITERAL_CHANGES_PATH
from gregor.controller.acls.zk_store import CHANGE_EXPIRATION_MS, AclUpdateError, ZkAclStore
from gregor.controller.zookeeper.client import SessionExpiredError
from gregor.wire.errors import KafkaError

logger = logging.getLogger(__name__)

Deleted = list[tuple[AclBinding, KafkaError | None]]
_ROOTS = (LITERAL_CHANGES_PATH, EXTENDED_CHANGES_PATH)


class ZkAcls:
    def __init__(
        self,
        store: ZkAclStore,
        authorizer: AclAuthorizer,
        spawn: Callable[[Awaitable[None]], None],
    ) -> None:
        """``spawn`` runs the work a watch starts (logging its failure)."""
        self.store = store
        self.authorizer = authorizer
        self._spawn = spawn
        self._last_change = dict.fromkeys(_ROOTS, -1)
        self._lock = asyncio.Lock()

    async def load(self) -> None:
        """Read every ACL, then follow the change notifications."""
        async with self._lock:
            await self.store.ensure_paths()
            for root in _ROOTS:
                found = await self.store.changes(root)
                self._last_change[root] = found[-1][0] if found else -1
            acls = await self.store.load()
            self.authorizer.replace(
                AclBinding(pattern, entry) for pattern, entries in acls.items() for entry in entries
            )
            logger.info("Loaded %d ACL(s) from ZooKeeper", self.authorizer.count())
        for root in _ROOTS:
            await self._follow(root)

    def _watch(self, root: str) -> Callable[[object], None]:
        return lambda _event: self._spawn(self._follow(root))

    async def _follow(self, root: str) -> None:
        """Read again each pattern that notifications not seen yet name; purge old ones."""
        async with self._lock:
            found = await self.store.changes(root, self._watch(root))
            for sequence, name in found:
                if sequence <= self._last_change[root]:
                    continue
                self._last_change[root] = sequence
                pattern = await self.store.changed_pattern(root, name)
                if pattern is not None:
                    entries, _ = await self.store.read(pattern)
                    self.authorizer.set_acls(pattern, entries)
                    logger.debug("ACLs of %s reloaded: %d ACL(s)", pattern, len(entries))
            expired = int(time.time() * 1000) - CHANGE_EXPIRATION_MS
            await self.store.purge_changes(root, [n for _, n in found], expired)

    async def create(self, bindings: Sequence[AclBinding]) -> list[KafkaError | None]:
        """Add each binding to its pattern's node."""
        failed: dict[AclBinding, KafkaError] = {}
        for pattern, entries in changes.grouped(bindings).items():
            add: Callable[[changes.Entries], changes.Entries] = entries.__or__
            try:
                async with self._lock:
                    _, now = await self.store.update(pattern, add)
                    self.authorizer.set_acls(pattern, now)
            except (ValueError, AclUpdateError, SessionExpiredError) as e:
                error = _error(e)
                failed.update((AclBinding(pattern, entry), error) for entry in entries)
        return [failed.get(b) for b in bindings]

    async def delete(self, filters: Sequence[AclBindingFilter]) -> list[Deleted]:
        """Remove what the filters match from each pattern's node; each filter's bindings."""
        results: list[Deleted] = [[] for _ in filters]
        for pattern in changes.candidates(self.authorizer.patterns(), filters):
            found, error = await self._delete_from(pattern, filters)
            for result, bindings in zip(results, found, strict=False):
                result.extend((b, error) for b in bindings)
        return results

    async def _delete_from(
        self, pattern: ResourcePattern, filters: Sequence[AclBindingFilter]
    ) -> tuple[list[list[AclBinding]], KafkaError | None]:
        """Each filter's bindings deleted from one pattern (none if it is not stored)."""
        found: list[list[AclBinding]] = []  # from the last attempt of the update

        def remaining(acls: changes.Entries) -> changes.Entries:
            left, found[:] = changes.delete(pattern, acls, filters)
            return left

        try:
            async with self._lock:
                _, now = await self.store.update(pattern, remaining)
                self.authorizer.set_acls(pattern, now)
        except ValueError:  # a name ZooKeeper cannot hold has no ACLs to delete
            return [], None
        except (AclUpdateError, SessionExpiredError) as e:
            return found, _error(e)
        return found, None


def _error(e: Exception) -> KafkaError:
    if isinstance(e, ValueError):
        return KafkaError(ErrorCode.invalid_request, str(e))
    return KafkaError(ErrorCode.unknown_server_error, str(e) or type(e).__name__)
