"""ACLs in ZooKeeper, read and written as Kafka's ZooKeeper AclAuthorizer does (paths and JSON
in ``zk_format.py``).

Any broker may write: a resource pattern's node is rewritten by a versioned update (created
if absent, deleted once empty) computed from what the node holds, read again and retried on
a conflict with another writer; a change notification naming the pattern follows each
update that changed something. Notifications older than ``CHANGE_EXPIRATION_MS`` are purged
by the brokers that read them.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable

from gregor.controller.acls.model import (
    AccessControlEntry,
    PatternType,
    ResourcePattern,
    ResourceType,
    parse_name,
)
from gregor.controller.acls.zk_format import (
    CHANGE_SEQUENCE_PREFIX,
    change_node,
    decode_acls,
    decode_change,
    encode_acls,
    paths_to_create,
    resource_path,
    resource_type_path,
    store_path,
)
from gregor.controller.zookeeper.client import (
    AsyncZk,
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    Watch,
)

logger = logging.getLogger(__name__)

Entries = frozenset[AccessControlEntry]
# Kafka's ZkNodeChangeNotificationListener default: notifications live 15 minutes.
CHANGE_EXPIRATION_MS = 15 * 60 * 1000
# AclAuthorizer's retries of a conflicting update, each after 500-999 ms.
MAX_UPDATE_RETRIES = 10
_STORES = (PatternType.LITERAL, PatternType.PREFIXED)


class AclUpdateError(Exception):
    """An update kept conflicting with other writers (Kafka's IllegalStateException)."""


class ZkAclStore:
    def __init__(self, zk: AsyncZk) -> None:
        self.zk = zk

    async def ensure_paths(self) -> None:
        """The stores, their resource-type nodes and the change roots (createAclPaths)."""
        await asyncio.gather(*(self.zk.ensure_path(p) for p in paths_to_create()))

    async def load(self) -> dict[ResourcePattern, Entries]:
        """Every pattern's ACLs (AclAuthorizer.loadCache); unknown resource types are
        skipped with a warning."""
        patterns: list[ResourcePattern] = []
        for pattern_type in _STORES:
            for type_name in await self.zk.get_children(store_path(pattern_type)):
                resource_type = parse_name(ResourceType, type_name)
                if resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
                    logger.warning("Ignoring unknown ResourceType: %s", type_name)
                    continue
                path = resource_type_path(pattern_type, resource_type)
                names = await self.zk.get_children(path)
                patterns += [ResourcePattern(resource_type, n, pattern_type) for n in names]
        found = await self.zk.get_many([resource_path(p) for p in patterns])
        return {
            pattern: decode_acls(node[0])
            for pattern, node in zip(patterns, found, strict=True)
            if node is not None
        }

    async def read(self, pattern: ResourcePattern) -> tuple[Entries, int | None]:
        """A pattern's ACLs and its node's version (None: no node)."""
        try:
            data, stat = await self.zk.get(resource_path(pattern))
        except NoNodeError:
            return frozenset(), None
        return decode_acls(data), stat.version

    async def update(
        self, pattern: ResourcePattern, change: Callable[[Entries], Entries]
    ) -> tuple[Entries, Entries]:
        """Rewrite a pattern's ACLs as ``change`` makes them from the stored ones, and notify
        the brokers if they changed; (before, after). ``change`` may run more than once.
        Raises ValueError for a name ZooKeeper cannot hold, AclUpdateError when the update
        conflicted every time."""
        path = resource_path(pattern)
        for attempt in range(MAX_UPDATE_RETRIES + 1):
            if attempt:
                await asyncio.sleep(random.uniform(0.5, 1.0))
            current, version = await self.read(pattern)
            new = change(current)
            if new == current:
                return current, new
            try:
                if not new:
                    await self.zk.delete(path, -1 if version is None else version)
                elif version is None:
                    await self.zk.create(path, encode_acls(new), makepath=True)
                else:
                    await self.zk.set(path, encode_acls(new), version)
            except NoNodeError:
                if new:
                    continue
            except (BadVersionError, NodeExistsError):
                continue
            change_path, data = change_node(pattern)
            await self.zk.create(change_path, data, sequence=True)
            logger.info("Updated ACLs for %s: %d ACL(s)", pattern, len(new))
            return current, new
        raise AclUpdateError(
            f"Failed to update ACLs for {pattern} after trying a maximum of "
            f"{MAX_UPDATE_RETRIES} times"
        )

    async def changes(self, root: str, watch: Watch | None = None) -> list[tuple[int, str]]:
        """The change notifications under ``root`` as (sequence, node name), in order;
        ``watch`` fires when one is added."""
        names = await self.zk.get_children(root, watch)
        size = len(CHANGE_SEQUENCE_PREFIX)
        return sorted(
            (int(n[size:]), n)
            for n in names
            if n.startswith(CHANGE_SEQUENCE_PREFIX) and n[size:].isdigit()
        )

    async def changed_pattern(self, root: str, name: str) -> ResourcePattern | None:
        """The pattern a notification names (None: gone meanwhile, or unreadable)."""
        try:
            data, _ = await self.zk.get(f"{root}/{name}")
            return decode_change(root, data)
        except NoNodeError:
            return None
        except ValueError as e:
            logger.warning("Ignoring the unreadable ACL change %s/%s: %s", root, name, e)
            return None

    async def purge_changes(self, root: str, names: list[str], older_than_ms: int) -> None:
        """Delete the notifications created before ``older_than_ms`` (epoch ms)."""
        for name in names:
            path = f"{root}/{name}"
            stat = await self.zk.exists(path)
            if stat is not None and stat.ctime < older_than_ms:
                try:
                    await self.zk.delete(path)
                except NoNodeError:
                    pass  # another broker purged it first
