"""SCRAM credentials in cluster mode: AlterUserScramCredentials through one broker writes the
user's ``/config/users/<sanitized user>`` znode in Kafka's form, beside the user's quotas,
with a ``/config/changes`` notification, and every broker describes the change within a
second; a credential written into ZooKeeper as Kafka's own tools write it is taken up the
same way, and a broker that starts later reads them all."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from kazoo.client import KazooClient
from kio.schema.errors import ErrorCode

from compat_tests.process_pool import ProcessPool
from gregor.controller.scram_credentials import (
    ScramCredential,
    credential_from_password,
    credential_from_salted_password,
    salted_password,
)
from gregor.server.harness.cluster import Cluster
from tests.kafka_wire import WireClient
from tests.test_client_quotas import alter as alter_quotas
from tests.test_scram_store import SHA256, SHA512, alter, delete_of, describe, upsert_of

USER = "alice@example.com"
NODE = "/config/users/alice%40example.com"  # Kafka's Sanitizer: URL-encoding


@pytest.fixture(scope="module")
def cluster(process_pool: ProcessPool) -> Cluster:
    return process_pool.cluster()


def within_a_second(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 1.0
    while not condition():
        assert time.monotonic() < deadline, "not within a second"
        time.sleep(0.02)


def iterations_on(port: int, user: str) -> dict[int, int] | ErrorCode:
    """What the broker on ``port`` describes of the user: mechanism -> iterations, or the
    user's error."""
    client = WireClient(port)
    try:
        (result,) = describe(client, [user]).results
    finally:
        client.close()
    if result.error_code != ErrorCode.none:
        return result.error_code
    return {i.mechanism: i.iterations for i in result.credential_infos}


def on_every_broker(cluster: Cluster, user: str, expected: Any) -> None:
    for broker in cluster.brokers.values():
        within_a_second(lambda b=broker: iterations_on(b.port, user) == expected)


def config_of(zk: KazooClient, path: str) -> dict[str, Any]:
    data, _ = zk.get(path)
    parsed: dict[str, Any] = json.loads(data)
    return parsed


def last_change(zk: KazooClient) -> str:
    notices = sorted(zk.get_children("/config/changes"))
    entity_path: str = json.loads(zk.get(f"/config/changes/{notices[-1]}")[0])["entity_path"]
    return entity_path


def test_written_in_kafkas_form_and_seen_by_every_broker(cluster: Cluster, zk: KazooClient) -> None:
    first, second = cluster.brokers[1], cluster.brokers[2]
    one = WireClient(first.port)
    try:
        quota = [({"user": USER}, {"producer_byte_rate": 1024})]
        assert alter_quotas(one, quota) == [(ErrorCode.none, None)]
        assert alter(one, [], [upsert_of(USER, SHA256, 8192)]) == [(USER, ErrorCode.none, None)]
    finally:
        one.close()
    config = config_of(zk, NODE)
    assert config["version"] == 1
    assert set(config["config"]) == {"producer_byte_rate", "SCRAM-SHA-256"}
    assert config["config"]["producer_byte_rate"] == "1024"  # the quota is kept
    stored = config["config"]["SCRAM-SHA-256"]
    assert stored.startswith("salt=") and stored.endswith(",iterations=8192")
    assert ScramCredential.from_config(stored) == credential_from_salted_password(
        "SCRAM-SHA-256", b"s" * 16, b"p" * 32, 8192
    )  # what upsert_of sent
    assert last_change(zk) == "users/alice%40example.com"
    on_every_broker(cluster, USER, {SHA256: 8192})
    # Deleted through another broker: the quota stays, every broker forgets the credential.
    two = WireClient(second.port)
    try:
        assert alter(two, [delete_of(USER, SHA256)], []) == [(USER, ErrorCode.none, None)]
    finally:
        two.close()
    assert config_of(zk, NODE)["config"] == {"producer_byte_rate": "1024"}
    on_every_broker(cluster, USER, ErrorCode.resource_not_found)


def test_kafka_tools_writes_taken_up_and_read_at_start(cluster: Cluster, zk: KazooClient) -> None:
    # As kafka-configs.sh --zookeeper writes a credential: the node, then a notification.
    user = f"bob-{uuid.uuid4().hex[:8]}"
    salt = b"kafka-salt"
    credential = credential_from_password("SCRAM-SHA-512", "bob-secret", 4096, salt)
    salted = salted_password("SCRAM-SHA-512", b"bob-secret", salt, 4096)
    assert credential == credential_from_salted_password("SCRAM-SHA-512", salt, salted, 4096)
    node = {"version": 1, "config": {"SCRAM-SHA-512": credential.to_config()}}
    zk.create(f"/config/users/{user}", json.dumps(node).encode(), makepath=True)
    notice = {"version": 2, "entity_path": f"users/{user}"}
    zk.create("/config/changes/config_change_", json.dumps(notice).encode(), sequence=True)
    on_every_broker(cluster, user, {SHA512: 4096})
    cluster.restart(3)
    assert iterations_on(cluster.brokers[3].port, user) == {SHA512: 4096}
    assert iterations_on(cluster.brokers[3].port, USER) == ErrorCode.resource_not_found
