"""The ZooKeeper layer against a real ZooKeeper server: the process, AsyncZk and KafkaZk."""

from __future__ import annotations

from kazoo.client import KazooClient

from compat_tests.zookeeper import ZooKeeperProcess, four_letter_word

pytest_plugins = ["tests.zookeeper_fixture"]


def test_zookeeper_process_serves_and_keeps_its_data_across_restart(
    zookeeper: ZooKeeperProcess,
) -> None:
    client = KazooClient(hosts=zookeeper.connect, timeout=10)
    client.start(timeout=15)
    try:
        client.create("/restart-probe", b"kept", makepath=True)
    finally:
        client.stop()
        client.close()
    zookeeper.restart()
    assert four_letter_word(zookeeper.port, "ruok") == "imok"
    client = KazooClient(hosts=zookeeper.connect, timeout=10)
    client.start(timeout=15)
    try:
        assert client.get("/restart-probe")[0] == b"kept"
    finally:
        client.stop()
        client.close()
    assert "binding to port" in zookeeper.log_path.read_text()
