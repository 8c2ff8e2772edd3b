"""The launcher's ports (gregor.server.harness): a broker started on port 0 advertises the
port it bound, the launcher reads it back and keeps it across a restart and a kill -9, and a
start whose port was taken meanwhile fails naming it; a server that must be told its port
(ZooKeeper) is given another when the one picked for it was taken before it bound it."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from gregor.server.cli.client.connection import Client
from gregor.server.harness import process
from gregor.server.harness.broker_process import BrokerProcess, BrokerProcessError
from gregor.server.harness.zookeeper import ZooKeeperError, ZooKeeperProcess


def advertised(bootstrap: str) -> list[tuple[int, str, int]]:
    with Client(bootstrap, "harness-test", timeout_s=5.0) as client:
        return [(b.node_id, b.host, b.port) for b in client.metadata([]).brokers]


@contextmanager
def taken(port: int) -> Iterator[None]:
    """Another process's listener on ``port`` for the block's duration."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen()
        yield


def test_a_broker_keeps_the_port_it_bound_on_port_0(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path) as broker:
        port = broker.port
        properties = (broker.directory / "server.properties").read_text()
        assert "listeners=PLAINTEXT://127.0.0.1:0\n" in properties
        assert advertised(broker.bootstrap) == [(0, "127.0.0.1", port)]
        broker.restart()
        assert advertised(broker.bootstrap) == [(0, "127.0.0.1", port)]
        broker.kill()  # kill -9 and a recovering start
        assert broker.port == port and advertised(broker.bootstrap) == [(0, "127.0.0.1", port)]
        broker.crash()
        with taken(port), pytest.raises(BrokerProcessError, match=f"could not bind port {port}"):
            broker.start()
        broker.start()  # free again
        assert advertised(broker.bootstrap) == [(0, "127.0.0.1", port)]


def test_zookeeper_gets_another_port_when_the_picked_one_is_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        busy = other.getsockname()[1]
        picks = iter([busy, process.free_port()])
        monkeypatch.setattr(process, "free_port", lambda: next(picks))
        with ZooKeeperProcess(tmp_path) as zookeeper:
            assert zookeeper.port != busy
            port = zookeeper.port
            zookeeper.stop()
            with taken(port), pytest.raises(ZooKeeperError, match=f"could not bind port {port}"):
                zookeeper.start()
            zookeeper.start()
            assert zookeeper.connect == f"127.0.0.1:{port}"
