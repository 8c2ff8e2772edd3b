"""``gregor acls`` against a real broker process with an authorizer, each side checked by
the other through confluent-kafka's AdminClient: kafka-acls.sh's options, its --producer /
--consumer / --idempotent expansions, --remove with and without --force, its refusals, and
its output."""

from __future__ import annotations

from collections.abc import Iterator

import confluent_kafka.admin as ck
import pytest

from compat_tests.process_pool import ProcessPool
from gregor.server.harness.broker_process import BrokerProcess
from tests.cli_run import CliResult, gregor, ok

ANY_FILTER = ck.AclBindingFilter(
    ck.ResourceType.ANY,
    None,
    ck.ResourcePatternType.ANY,
    None,
    None,
    ck.AclOperation.ANY,
    ck.AclPermissionType.ANY,
)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    overrides = {
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS",
    }
    with BrokerProcess(tmp_path_factory.mktemp("cli-acls"), overrides) as proc:
        yield proc


@pytest.fixture
def admin(broker: BrokerProcess) -> Iterator[ck.AdminClient]:
    client = ck.AdminClient({"bootstrap.servers": broker.bootstrap})
    yield client
    client.delete_acls([ANY_FILTER], request_timeout=15)[ANY_FILTER].result()


def acls(broker: BrokerProcess, *args: str, stdin: bytes = b"") -> CliResult:
    return gregor("acls", "--bootstrap-server", broker.bootstrap, *args, stdin=stdin)


def seen(admin: ck.AdminClient) -> set[tuple[str, str, str, str, str, str, str]]:
    """Every ACL as (type, name, pattern type, principal, host, operation, permission)."""
    return {
        (
            b.restype.name,
            b.name,
            b.resource_pattern_type.name,
            b.principal,
            b.host,
            b.operation.name,
            b.permission_type.name,
        )
        for b in admin.describe_acls(ANY_FILTER, request_timeout=15).result()
    }


def test_add_expands_producer_and_consumer_as_kafka_acls_does(
    broker: BrokerProcess, admin: ck.AdminClient
) -> None:
    producer = acls(
        broker,
        "--add",
        "--allow-principal",
        "User:alice",
        "--producer",
        "--topic",
        "orders",
        "--transactional-id",
        "tx",
        "--idempotent",
    )
    assert producer.code == 0, producer.err
    assert (
        "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, "
        "patternType=LITERAL)`: \n"
        " \t(principal=User:alice, host=*, operation=CREATE, permissionType=ALLOW)\n"
        "\t(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW)\n"
        "\t(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW) \n"
    ) in producer.out
    # The listing after the change names the resources of the command.
    assert "Current ACLs for resource `ResourcePattern(resourceType=CLUSTER" in producer.out
    ok(
        "acls",
        "--bootstrap-server",
        broker.bootstrap,
        "--add",
        "--allow-principal",
        "User:bob",
        "--allow-host",
        "10.0.0.7",
        "--consumer",
        "--topic",
        "orders-",
        "--group",
        "app-",
        "--resource-pattern-type",
        "prefixed",
    )
    alice = ("User:alice", "*")
    bob = ("User:bob", "10.0.0.7")
    assert seen(admin) == {
        ("TOPIC", "orders", "LITERAL", *alice, "WRITE", "ALLOW"),
        ("TOPIC", "orders", "LITERAL", *alice, "DESCRIBE", "ALLOW"),
        ("TOPIC", "orders", "LITERAL", *alice, "CREATE", "ALLOW"),
        ("TRANSACTIONAL_ID", "tx", "LITERAL", *alice, "WRITE", "ALLOW"),
        ("TRANSACTIONAL_ID", "tx", "LITERAL", *alice, "DESCRIBE", "ALLOW"),
        ("BROKER", "kafka-cluster", "LITERAL", *alice, "IDEMPOTENT_WRITE", "ALLOW"),
        ("TOPIC", "orders-", "PREFIXED", *bob, "READ", "ALLOW"),
        ("TOPIC", "orders-", "PREFIXED", *bob, "DESCRIBE", "ALLOW"),
        ("GROUP", "app-", "PREFIXED", *bob, "READ", "ALLOW"),
    }


def test_list_filters_by_resource_pattern_type_and_principal(
    broker: BrokerProcess, admin: ck.AdminClient
) -> None:
    ok(
        "acls",
        "--bootstrap-server",
        broker.bootstrap,
        "--add",
        "--deny-principal",
        "User:mallory",
        "--operation",
        "Read",
        "--operation",
        "describe",
        "--topic",
        "*",
        "--topic",
        "pay",
        "--resource-pattern-type",
        "literal",
    )
    ok(
        "acls",
        "--bootstrap-server",
        broker.bootstrap,
        "--add",
        "--allow-principal",
        "User:carol",
        "--topic",
        "pay",
        "--resource-pattern-type",
        "prefixed",
    )
    assert len(seen(admin)) == 5
    match = acls(broker, "--list", "--topic", "payments", "--resource-pattern-type", "match")
    assert match.code == 0, match.err
    assert match.out.count("Current ACLs for resource") == 2  # the wildcard and the prefix
    assert "name=*, patternType=LITERAL" in match.out
    assert "name=pay, patternType=PREFIXED" in match.out
    assert "(principal=User:carol, host=*, operation=ALL, permissionType=ALLOW)" in match.out
    by_principal = acls(broker, "--list", "--principal", "User:carol")
    assert by_principal.out.startswith("ACLs for principal `User:carol`\n")
    assert "mallory" not in by_principal.out and "User:carol" in by_principal.out
    everything = acls(broker, "--list")
    assert everything.out.count("Current ACLs for resource") == 3
    assert everything.out.count("User:mallory") == 4


def test_remove_asks_unless_forced(broker: BrokerProcess, admin: ck.AdminClient) -> None:
    ok(
        "acls",
        "--bootstrap-server",
        broker.bootstrap,
        "--add",
        "--allow-principal",
        "User:dave",
        "--operation",
        "Describe",
        "--operation",
        "Read",
        "--group",
        "g",
        "--topic",
        "t",
    )
    declined = acls(
        broker, "--remove", "--allow-principal", "User:dave", "--operation", "Read", "--topic", "t"
    )
    assert "Are you sure you want to remove ACLs: \n" in declined.out
    assert "from resource filter `ResourcePattern(resourceType=TOPIC, name=t," in declined.out
    assert len(seen(admin)) == 4  # no answer read: nothing removed
    yes = acls(
        broker,
        "--remove",
        "--allow-principal",
        "User:dave",
        "--operation",
        "Read",
        "--topic",
        "t",
        stdin=b"y\n",
    )
    assert yes.code == 0, yes.err
    assert ("TOPIC", "t", "LITERAL", "User:dave", "*", "READ", "ALLOW") not in seen(admin)
    forced = acls(broker, "--remove", "--topic", "t", "--group", "g", "--force")
    assert forced.code == 0, forced.err
    assert "Are you sure" not in forced.out
    assert seen(admin) == set()


def test_refusals(broker: BrokerProcess, admin: ck.AdminClient) -> None:
    cases = [
        (
            ["--add", "--allow-principal", "User:a", "--operation", "Write", "--group", "g"],
            "ResourceType GROUP only supports operations",
        ),
        (["--add", "--topic", "t"], "You must specify one of: --allow-principal, --deny-principal"),
        (
            [
                "--add",
                "--allow-principal",
                "User:a",
                "--topic",
                "t",
                "--resource-pattern-type",
                "match",
            ],
            "A '--resource-pattern-type' value of 'MATCH' is not valid when adding acls.",
        ),
        (["--add", "--allow-principal", "User:a"], "You must provide at least one resource"),
        (["--add", "--allow-principal", "alice", "--topic", "t"], "principalType:principalName"),
        (["--add", "--allow-principal", "User:a", "--producer"], "With --producer you must"),
        (["--list", "--topic", "t", "--idempotent"], "only available if --producer is set"),
        (["--add", "--allow-principal", "User:a", "--consumer", "--topic", "t"], "--consumer"),
    ]
    for args, message in cases:
        result = acls(broker, *args)
        assert result.code == 1 and message in result.err, (args, result.err)
    assert seen(admin) == set()


def test_a_broker_without_authorizer_is_reported(process_pool: ProcessPool) -> None:
    plain = process_pool.broker()
    result = gregor("acls", "--bootstrap-server", plain.bootstrap, "--list")
    assert result.code == 1
    assert result.err == (
        "Error while executing ACL command: SECURITY_DISABLED (No Authorizer is configured.)\n"
    )
