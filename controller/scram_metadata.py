"""SCRAM credentials on the embedded node: a table of its metadata (controller/metadata_log.py),
surviving restarts, and the broker's credential cache fed from it.

The snapshot's table ``"scram_credentials"`` maps a user name to their credentials as Kafka
stores them in ``/config/users/<user>``, mechanism name -> ``salt=...,stored_key=...,
server_key=...,iterations=N``. A log change is absolute, like the others: ``{"op": "scram",
"name": <user>, "value": <the user's whole map>}``, an empty map removing the user.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping

from kio.schema.errors import ErrorCode

from gregor.controller.metadata_log import Change
from gregor.controller.scram_alterations import Alteration, apply
from gregor.controller.scram_cache import CredentialCache
from gregor.wire.errors import KafkaError

logger = logging.getLogger(__name__)

CHANGE_OP = "scram"
TABLE = "scram_credentials"


class MetadataScramStore:
    def __init__(
        self,
        cache: CredentialCache,
        table: Mapping[str, Mapping[str, str]],
        commit: Callable[[list[Change]], Awaitable[None]],
    ) -> None:
        """``table``: the snapshot's, replayed; ``commit`` makes changes durable (raises
        OSError if it could not)."""
        self._users = {user: dict(configs) for user, configs in table.items()}
        self._cache = cache
        self._commit = commit
        self._lock = asyncio.Lock()
        cache.replace(self._users)

    def table(self) -> dict[str, dict[str, str]]:
        """The table as a snapshot holds it."""
        return {user: dict(configs) for user, configs in self._users.items()}

    async def alter(self, alterations: Mapping[str, Alteration]) -> dict[str, KafkaError | None]:
        """Each user's change, the valid ones committed together (one line of the log), then
        in the cache; each user's error or None."""
        async with self._lock:
            errors: dict[str, KafkaError | None] = {}
            changed: dict[str, dict[str, str]] = {}
            for user, alteration in alterations.items():
                try:
                    changed[user] = apply(self._users.get(user, {}), alteration)
                except KafkaError as e:
                    errors[user] = e
            if changed:
                await self._save(changed, errors)
            return {user: errors.get(user) for user in alterations}

    async def _save(
        self, changed: dict[str, dict[str, str]], errors: dict[str, KafkaError | None]
    ) -> None:
        try:
            await self._commit(
                [{"op": CHANGE_OP, "name": user, "value": c} for user, c in changed.items()]
            )
        except OSError as e:
            logger.error("Could not save SCRAM credentials: %s", e)
            message = f"Could not save the credentials: {e}"
            failed = KafkaError(ErrorCode.kafka_storage_error, message)
            errors.update(dict.fromkeys(changed, failed))
            return
        for user, configs in changed.items():
            if configs:
                self._users[user] = configs
            else:
                self._users.pop(user, None)
            self._cache.update(user, configs)
            logger.info("SCRAM credentials of user %r are now %s", user, sorted(configs))
