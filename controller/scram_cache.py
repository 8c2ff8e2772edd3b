"""A broker's SCRAM credentials in memory (Kafka's CredentialCache), what its SASL/SCRAM
mechanisms authenticate against and DescribeUserScramCredentials answers from.

The controller feeds it: the embedded node from its metadata log, a cluster broker from
every user's ``/config/users/<user>`` znode and the change notifications after them. A user's
configs arrive as Kafka stores them, mechanism name -> ``ScramCredential.to_config()``; other
keys of the same map (the user's quotas) are not credentials and are skipped.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from gregor.controller.scram_credentials import MECHANISMS, ScramCredential

logger = logging.getLogger(__name__)


class CredentialCache:
    def __init__(self) -> None:
        self._users: dict[str, dict[str, ScramCredential]] = {}

    def lookup(self, user: str, mechanism: str) -> ScramCredential | None:
        """A ``ScramCredentialLookup``: the user's credential for the mechanism, if any."""
        return self._users.get(user, {}).get(mechanism)

    def update(self, user: str, configs: Mapping[str, str]) -> None:
        """Replace the user's credentials with those among ``configs`` (none: forget the
        user). An unreadable one is left out and logged, without its value."""
        credentials = {}
        for mechanism, value in configs.items():
            if mechanism not in MECHANISMS:
                continue
            try:
                credentials[mechanism] = ScramCredential.from_config(value)
            except ValueError as e:
                logger.error("Ignoring the %s credential of user %r: %s", mechanism, user, e)
        if credentials:
            self._users[user] = credentials
        else:
            self._users.pop(user, None)

    def replace(self, users: Mapping[str, Mapping[str, str]]) -> None:
        """Every user's configs at once (a start, or a fresh read)."""
        self._users.clear()
        for user, configs in users.items():
            self.update(user, configs)

    def iterations(self, user: str) -> dict[str, int]:
        """The user's mechanisms and their iterations: all a description may show."""
        return {m: c.iterations for m, c in self._users.get(user, {}).items()}

    def users(self) -> Iterable[str]:
        return sorted(self._users)
