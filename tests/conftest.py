"""Fixtures shared by the raw-protocol tests; each module starts its own ``broker``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from compat_tests.broker import BrokerProcess
from tests.kafka_wire import WireClient


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[WireClient]:
    """A raw-socket connection to the module's broker."""
    c = WireClient(broker.port)
    yield c
    c.close()
