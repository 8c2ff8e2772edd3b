"""SCRAM credentials on the embedded node: AlterUserScramCredentials and
DescribeUserScramCredentials through confluent-kafka's admin client and the raw wire, each
user answered on its own as Kafka 4.1 answers, stored in the metadata log in Kafka's form
(so the password derives exactly what is stored), kept across a restart, and never shown: a
description carries mechanisms and iterations only, and neither DescribeConfigs nor the
broker's log holds a salt, a key or a password."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kio.schema.errors import ErrorCode

from gregor.apis.context import nested
from gregor.controller.metadata.config_resource import BROKER
from gregor.controller.scram_credentials import ScramCredential, credential_from_password
from gregor.server.harness.broker_process import BrokerProcess
from gregor.wire.schema import request_type
from gregor.wire.versions import ALTER_USER_SCRAM_CREDENTIALS, DESCRIBE_USER_SCRAM_CREDENTIALS
from tests.kafka_wire import WireClient
from tests.test_config_apis import described

SHA256, SHA512 = 1, 2  # the wire's mechanism codes
PASSWORD = "alice-secret"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    # Its own broker: the test restarts it.
    with BrokerProcess(tmp_path_factory.mktemp("scram-store")) as proc:
        yield proc


def admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def upsert(user: str, mechanism: Any, iterations: int, password: str) -> Any:
    info = ScramCredentialInfo(mechanism, iterations)
    return UserScramCredentialUpsertion(user, info, password.encode())


def describe_all(client: AdminClient) -> dict[str, dict[str, int]]:
    found = client.describe_user_scram_credentials().result(10)
    return {
        user: {i.mechanism.name: i.iterations for i in d.scram_credential_infos}
        for user, d in found.items()
    }


def alter(client: WireClient, deletions: list, upsertions: list) -> list[tuple[str, Any, Any]]:
    cls = request_type(ALTER_USER_SCRAM_CREDENTIALS, 0)
    request = cls(deletions=tuple(deletions), upsertions=tuple(upsertions))
    answer = client.call(ALTER_USER_SCRAM_CREDENTIALS, 0, request)
    return sorted((r.user, r.error_code, r.error_message) for r in answer.results)


def delete_of(user: str, mechanism: int) -> Any:
    cls = nested(request_type(ALTER_USER_SCRAM_CREDENTIALS, 0), "ScramCredentialDeletion")
    return cls(name=user, mechanism=mechanism)


def upsert_of(user: str, mechanism: int, iterations: int) -> Any:
    cls = nested(request_type(ALTER_USER_SCRAM_CREDENTIALS, 0), "ScramCredentialUpsertion")
    return cls(
        name=user, mechanism=mechanism, iterations=iterations, salt=b"s" * 16,
        salted_password=b"p" * 32,
    )  # fmt: skip


def describe(client: WireClient, users: list[str] | None) -> Any:
    cls = request_type(DESCRIBE_USER_SCRAM_CREDENTIALS, 0)
    name = nested(cls, "UserName")
    request = cls(users=None if users is None else tuple(name(name=u) for u in users))
    return client.call(DESCRIBE_USER_SCRAM_CREDENTIALS, 0, request)


def stored(broker: BrokerProcess) -> dict[str, dict[str, str]]:
    """The metadata's SCRAM table: the snapshot, with the log's changes after it."""
    data = broker.data_dir
    state = json.loads((data / "gregor-metadata.json").read_text())
    table = dict(state.get("scram_credentials", {}))
    log = data / f"gregor-metadata.{state['log_generation']}.log"
    for line in log.read_text().splitlines() if log.exists() else ():
        for change in json.loads(line.partition(" ")[2]):
            if change["op"] == "scram":
                table[change["name"]] = change["value"]
    return {user: value for user, value in table.items() if value}


def test_admin_client_alters_and_describes(broker: BrokerProcess) -> None:
    client = admin(broker)  # held: its futures fail once it is collected
    futures = client.alter_user_scram_credentials(
        [
            upsert("alice", ScramMechanism.SCRAM_SHA_256, 8192, PASSWORD),
            upsert("bob", ScramMechanism.SCRAM_SHA_512, 4096, "bob-secret"),
        ]
    )
    for future in futures.values():
        assert future.result(10) is None
    # Another mechanism for alice in a later request (one change per user per request).
    futures = client.alter_user_scram_credentials(
        [upsert("alice", ScramMechanism.SCRAM_SHA_512, 10000, PASSWORD)]
    )
    assert futures["alice"].result(10) is None
    assert describe_all(client) == {
        "alice": {"SCRAM_SHA_256": 8192, "SCRAM_SHA_512": 10000},
        "bob": {"SCRAM_SHA_512": 4096},
    }
    named = client.describe_user_scram_credentials(["bob", "nobody"])
    assert [i.iterations for i in named["bob"].result(10).scram_credential_infos] == [4096]
    with pytest.raises(KafkaException) as refused:
        named["nobody"].result(10)
    assert refused.value.args[0].code() == ErrorCode.resource_not_found.value
    deleted = client.alter_user_scram_credentials(
        [UserScramCredentialDeletion("bob", ScramMechanism.SCRAM_SHA_512)]
    )
    assert deleted["bob"].result(10) is None
    assert "bob" not in describe_all(client)


def test_each_user_answered_as_kafka_does(broker: BrokerProcess) -> None:
    client = WireClient(broker.port)
    try:
        results = alter(
            client,
            [delete_of("ghost", SHA256), delete_of("twice", SHA256), delete_of("odd", 9)],
            [
                upsert_of("", SHA256, 4096),
                upsert_of("few", SHA256, 4095),
                upsert_of("many", SHA512, 16385),
                upsert_of("twice", SHA512, 4096),
                upsert_of("carol", SHA256, 16384),
            ],
        )
        assert results == [
            ("", ErrorCode.unacceptable_credential, "Username must not be empty"),
            ("carol", ErrorCode.none, None),
            ("few", ErrorCode.unacceptable_credential, "Too few iterations"),
            (
                "ghost",
                ErrorCode.resource_not_found,
                "Attempt to delete a user credential that does not exist",
            ),
            ("many", ErrorCode.unacceptable_credential, "Too many iterations"),
            ("odd", ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"),
            (
                "twice",
                ErrorCode.duplicate_resource,
                "A user credential cannot be altered twice in the same request",
            ),
        ]
        answer = describe(client, ["carol", "carol", "ghost"])
        assert answer.error_code == ErrorCode.none
        shown = {r.user: (r.error_code, r.error_message) for r in answer.results}
        assert shown["carol"][0] == ErrorCode.duplicate_resource
        assert shown["ghost"] == (
            ErrorCode.resource_not_found,
            "Attempt to describe a user credential that does not exist: ghost",
        )
        (only,) = describe(client, ["carol"]).results
        assert [(i.mechanism, i.iterations) for i in only.credential_infos] == [(SHA256, 16384)]
    finally:
        client.close()


def test_stored_in_kafkas_form_kept_across_restart_and_never_shown(
    broker: BrokerProcess,
) -> None:
    client = admin(broker)
    futures = client.alter_user_scram_credentials(
        [upsert("dave", ScramMechanism.SCRAM_SHA_256, 4096, PASSWORD)]
    )
    assert futures["dave"].result(10) is None
    value = stored(broker)["dave"]["SCRAM-SHA-256"]
    credential = ScramCredential.from_config(value)
    # What the admin client salted is what the password derives: SCRAM logins will match.
    assert credential == credential_from_password("SCRAM-SHA-256", PASSWORD, 4096, credential.salt)
    secrets = [
        PASSWORD,
        base64.b64encode(credential.salt).decode(),
        base64.b64encode(credential.stored_key).decode(),
        base64.b64encode(credential.server_key).decode(),
    ]
    before = describe_all(client)
    broker.restart()
    assert describe_all(admin(broker)) == before
    assert before["dave"] == {"SCRAM_SHA_256": 4096}
    wire = WireClient(broker.port)
    try:
        configs = json.dumps(described(wire, BROKER, "0"))
    finally:
        wire.close()
    log = Path(broker.log_path).read_text()
    for secret in secrets:
        assert secret not in configs
        assert secret not in log
    assert "dave" in log  # the change is logged, by user


def test_refused_without_cluster_permissions(tmp_path: Path) -> None:
    overrides = {
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "allow.everyone.if.no.acl.found": "false",
    }
    with BrokerProcess(tmp_path, overrides) as proc:
        client = WireClient(proc.port)
        try:
            results = alter(client, [], [upsert_of("erin", SHA256, 4096), upsert_of("al", 1, 1)])
            refused = (ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
            assert results == [("al", *refused), ("erin", *refused)]
            answer = describe(client, ["erin"])
            assert (answer.error_code, answer.error_message) == refused
            assert [(r.user, r.error_code) for r in answer.results] == [("erin", refused[0])]
        finally:
            client.close()
