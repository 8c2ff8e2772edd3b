"""``gregor configs --entity-type users`` against a real broker: SCRAM credentials added
(salted by the tool: what the broker stores is what the password derives), described in
kafka-configs.sh's lines, seen the same way by confluent-kafka's admin client, deleted; user
quotas beside them; and kafka-configs.sh's refusals (quota and SCRAM in one command, SCRAM
for the default user, unknown keys, too few iterations) with the broker's own (too many)."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka.admin import AdminClient

from compat_tests.process_pool import ProcessPool
from gregor.controller.scram_credentials import ScramCredential, credential_from_password
from gregor.server.harness.broker_process import BrokerProcess
from tests.cli_run import gregor, ok
from tests.test_scram_store import stored


@pytest.fixture(scope="module")
def broker(process_pool: ProcessPool) -> BrokerProcess:
    return process_pool.broker()


def configs(broker: BrokerProcess, *args: str) -> str:
    base = ("configs", "--bootstrap-server", broker.bootstrap, "--entity-type", "users")
    return ok(*base, *args).out


def refused(broker: BrokerProcess, *args: str) -> str:
    base = ("configs", "--bootstrap-server", broker.bootstrap, "--entity-type", "users")
    result = gregor(*base, *args)
    assert result.code == 1 and result.out == ""
    return result.err


def new_user() -> str:
    return f"user-{uuid.uuid4().hex[:8]}"


def test_add_describe_delete_credentials(broker: BrokerProcess) -> None:
    user = new_user()
    add = "SCRAM-SHA-512=[iterations=8192,password=alice,secret],SCRAM-SHA-256=[password=pw]"
    out = configs(broker, "--alter", "--entity-name", user, "--add-config", add)
    assert out == f"Completed updating config for user {user}.\n"
    assert configs(broker, "--describe", "--entity-name", user) == (
        f"SCRAM credential configs for user-principal '{user}' are "
        "SCRAM-SHA-256=iterations=4096, SCRAM-SHA-512=iterations=8192\n"
    )
    # The password (with its comma) was salted by the tool; the broker stores Kafka's form.
    credential = ScramCredential.from_config(stored(broker)[user]["SCRAM-SHA-512"])
    expected = credential_from_password("SCRAM-SHA-512", "alice,secret", 8192, credential.salt)
    assert credential == expected
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    seen = admin.describe_user_scram_credentials([user])[user].result(10)
    assert {i.mechanism.name: i.iterations for i in seen.scram_credential_infos} == {
        "SCRAM_SHA_256": 4096,
        "SCRAM_SHA_512": 8192,
    }
    configs(broker, "--alter", "--entity-name", user, "--delete-config", "SCRAM-SHA-256")
    assert configs(broker, "--describe", "--entity-name", user) == (
        f"SCRAM credential configs for user-principal '{user}' are SCRAM-SHA-512=iterations=8192\n"
    )
    every = configs(broker, "--describe")
    assert f"SCRAM credential configs for user-principal '{user}' are " in every
    assert "secret" not in every


def test_quotas_beside_credentials(broker: BrokerProcess) -> None:
    user = new_user()
    configs(broker, "--alter", "--entity-name", user, "--add-config", "SCRAM-SHA-256=[password=p]")
    configs(broker, "--alter", "--entity-name", user, "--add-config", "producer_byte_rate=1024")
    assert configs(broker, "--describe", "--entity-name", user) == (
        f"Quota configs for user-principal '{user}' are producer_byte_rate=1024.0\n"
        f"SCRAM credential configs for user-principal '{user}' are SCRAM-SHA-256=iterations=4096\n"
    )
    configs(broker, "--alter", "--entity-name", user, "--delete-config", "producer_byte_rate")
    shown = gregor(
        "configs", "--bootstrap-server", broker.bootstrap, "--entity-type", "users",
        "--describe", "--entity-name", user, "--json",
    ).json()  # fmt: skip
    assert shown == {
        "entityType": "users",
        "entities": [
            {
                "entityName": user,
                "quotas": {},
                "scramCredentials": {"SCRAM-SHA-256": 4096},
            }
        ],
    }


def test_refusals_as_kafka_configs(broker: BrokerProcess) -> None:
    user = new_user()
    alter = ("--alter", "--entity-name", user, "--add-config")
    assert refused(broker, *alter, "SCRAM-SHA-256=[password=p],producer_byte_rate=1") == (
        "Error: Cannot alter both quota and SCRAM credential configs simultaneously for "
        "'users' using --bootstrap-server.\n"
    )
    assert "Unexpected config names: retention.ms" in refused(broker, *alter, "retention.ms=1")
    assert refused(
        broker, "--alter", "--entity-default", "--add-config", "SCRAM-SHA-256=[password=p]"
    ) == (
        "Error: The use of --entity-default or --user-defaults is not allowed with User "
        "SCRAM Credentials using --bootstrap-server.\n"
    )
    assert refused(broker, *alter, "SCRAM-SHA-256=[iterations=100,password=p]") == (
        "Error: Iterations 100 is less than the minimum 4096 required for SCRAM-SHA-256\n"
    )
    assert refused(broker, *alter, "SCRAM-SHA-256=[iterations=20000,password=p]") == (
        f"Error: user '{user}': UNACCEPTABLE_CREDENTIAL (Too many iterations)\n"
    )
    missing = ("--alter", "--entity-name", user, "--delete-config", "SCRAM-SHA-512")
    assert "RESOURCE_NOT_FOUND" in refused(broker, *missing)
    assert configs(broker, "--describe", "--entity-name", user) == ""
