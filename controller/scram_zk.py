"""SCRAM credentials on a cluster, where Kafka's ZooKeeper mode keeps them: in the user's entity
config ``/config/users/<sanitized user>`` (``{"version":1,"config":{"SCRAM-SHA-256":
"salt=...,stored_key=...,server_key=...,iterations=4096",...}}``), the znode that also holds
the user's quotas, whose other keys a change keeps. Each write is followed by a
``/config/changes/config_change_N`` notification naming ``users/<sanitized user>``, which
makes every broker read the node again into its credential cache (zk_broker.py follows them).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from kio.schema.errors import ErrorCode

from gregor.controller.quota_entities import desanitize, sanitize
from gregor.controller.scram_alterations import Alteration, apply
from gregor.controller.scram_cache import CredentialCache
from gregor.controller.zookeeper.client import ZookeeperError
from gregor.controller.zookeeper.data import USER_CONFIGS_PATH, KafkaZk
from gregor.wire.errors import KafkaError

logger = logging.getLogger(__name__)


def user_path(user: str) -> str:
    """The user's entity path under /config (Kafka's Sanitizer on the name)."""
    return f"users/{sanitize(user)}"


class ZkScramStore:
    def __init__(self, kafka_zk: KafkaZk, cache: CredentialCache) -> None:
        self.zk = kafka_zk
        self._cache = cache
        self._lock = asyncio.Lock()

    async def load(self) -> None:
        """Every user's credentials, read afresh into the cache."""
        users = await self.zk.zk.get_children(USER_CONFIGS_PATH)
        found = await asyncio.gather(*(self.zk.entity_configs(f"users/{u}") for u in users))
        self._cache.replace({desanitize(u): c for u, c in zip(users, found, strict=True)})

    async def changed(self, entity_path: str) -> None:
        """A change notification named ``entity_path``: a user's node is read again."""
        kind, _, name = entity_path.partition("/")
        if kind == "users" and name and "/" not in name:
            self._cache.update(desanitize(name), await self.zk.entity_configs(entity_path))

    async def alter(self, alterations: Mapping[str, Alteration]) -> dict[str, KafkaError | None]:
        """Each user's node rewritten with the change (its other keys kept) and a change
        notification, as Kafka's ZooKeeper-mode admin did; in this broker's cache at once."""
        async with self._lock:
            return {user: await self._alter(user, a) for user, a in alterations.items()}

    async def _alter(self, user: str, alteration: Alteration) -> KafkaError | None:
        path = user_path(user)
        try:
            configs = apply(await self.zk.entity_configs(path), alteration)
            await self.zk.set_entity_configs(path, configs)
        except KafkaError as e:
            return e
        except ZookeeperError as e:
            logger.error("Could not alter the SCRAM credentials of user %r: %r", user, e)
            return KafkaError(ErrorCode.unknown_server_error, f"ZooKeeper failed: {e!r}")
        self._cache.update(user, configs)
        logger.info("SCRAM credentials of user %r are now %s", user, sorted(configs))
        return None
