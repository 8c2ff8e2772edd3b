"""A second SIGTERM while the broker shuts down (a supervisor's, or a harness stopping what
it already signalled) must not cut the clean shutdown short: Kafka's shutdown hook runs to
its end, and a broker killed halfway recovers every log at its next start (209 s for
20,000 partitions in a cluster benchmark before this was fixed)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from kio.schema.errors import ErrorCode

from compat_tests.broker import BrokerProcess
from gregor.log.manager import CLEAN_SHUTDOWN_FILE
from tests.kafka_wire import WireClient, create_topic

# Enough logs that closing them outlasts the second signal's delivery.
PARTITIONS = 2_000
SHUTDOWN_LINE = "shutting down"


def test_a_second_sigterm_during_shutdown_is_logged_and_the_shutdown_completes(
    tmp_path: Path,
) -> None:
    with BrokerProcess(tmp_path, start_timeout_s=120) as broker:
        client = WireClient(broker.port, timeout=120)
        assert create_topic(client, "many", PARTITIONS).error_code == ErrorCode.none
        client.close()
        start = broker.log_path.stat().st_size
        os.kill(broker.pid, signal.SIGTERM)
        deadline = time.monotonic() + 60
        while SHUTDOWN_LINE not in broker.log_path.read_text()[start:]:
            assert time.monotonic() < deadline, "the broker did not begin its shutdown"
            time.sleep(0.005)
        os.kill(broker.pid, signal.SIGTERM)
        while broker.returncode is None:
            assert time.monotonic() < deadline, "the broker did not exit"
            time.sleep(0.01)
        log = broker.log_path.read_text()[start:]
        assert broker.returncode == 0, log[-2000:]
        assert "shut down completed" in log
        assert (broker.data_dir / CLEAN_SHUTDOWN_FILE).exists()
