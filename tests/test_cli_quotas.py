"""``gregor quotas`` against a real broker process, each side checked by the other through
the Java AdminClient (kafka-clients 4.3: describeClientQuotas, alterClientQuotas). About
10 s, most of it two JVM starts."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from compat_tests import java_client
from gregor.server.harness.broker_process import BrokerProcess
from tests.cli_run import gregor, ok, table

MIB = 1048576.0


# A broker of its own (not process_pool's): the test sets default client quotas.
@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("cli-quotas")) as proc:
        yield proc


def quotas(broker: BrokerProcess, *args: str) -> str:
    return ok("quotas", "--bootstrap-server", broker.bootstrap, *args).out


def java_view(broker: BrokerProcess) -> list[dict]:
    described = java_client.run("describe-quotas", broker.bootstrap, "-")
    return sorted(
        described, key=lambda d: [d["entity"].get(k) or "" for k in ("user", "client-id")]
    )


def test_quotas_both_ways(broker: BrokerProcess) -> None:
    out = quotas(
        broker,
        "--alter",
        "--user",
        "alice",
        "--add-config",
        "producer_byte_rate=1048576,consumer_byte_rate=2097152",
    )
    assert out == "Completed updating quotas for user 'alice'.\n"
    quotas(broker, "--alter", "--client-default", "--add-config", "request_percentage=50")
    quotas(
        broker,
        "--alter",
        "--user",
        "alice",
        "--client-id",
        "app",
        "--add-config",
        "producer_byte_rate=1000",
    )
    java_client.run(
        "alter-quotas",
        broker.bootstrap,
        "-",
        options={"entity": "user=bob", "set": "consumer_byte_rate=5000"},
    )

    assert java_view(broker) == [
        {"entity": {"client-id": None}, "values": {"request_percentage": 50.0}},
        {
            "entity": {"user": "alice"},
            "values": {"producer_byte_rate": MIB, "consumer_byte_rate": 2 * MIB},
        },
        {"entity": {"user": "alice", "client-id": "app"}, "values": {"producer_byte_rate": 1000.0}},
        {"entity": {"user": "bob"}, "values": {"consumer_byte_rate": 5000.0}},
    ]
    assert table(quotas(broker, "--describe")) == [
        {
            "USER": "-",
            "CLIENT-ID": "<default>",
            "consumer_byte_rate": "-",
            "producer_byte_rate": "-",
            "request_percentage": "50",
        },
        {
            "USER": "alice",
            "CLIENT-ID": "-",
            "consumer_byte_rate": "2097152",
            "producer_byte_rate": "1048576",
            "request_percentage": "-",
        },
        {
            "USER": "alice",
            "CLIENT-ID": "app",
            "consumer_byte_rate": "-",
            "producer_byte_rate": "1000",
            "request_percentage": "-",
        },
        {
            "USER": "bob",
            "CLIENT-ID": "-",
            "consumer_byte_rate": "5000",
            "producer_byte_rate": "-",
            "request_percentage": "-",
        },
    ]
    # An entity named exactly: alice alone, not her (user, client-id) pair.
    assert ok(
        "quotas", "--bootstrap-server", broker.bootstrap, "--describe", "--user", "alice", "--json"
    ).json() == {
        "quotas": [
            {
                "entity": {"user": "alice"},
                "values": {"consumer_byte_rate": 2 * MIB, "producer_byte_rate": MIB},
            }
        ]
    }

    quotas(broker, "--alter", "--user", "alice", "--delete-config", "consumer_byte_rate")
    quotas(broker, "--alter", "--client-default", "--delete-config", "request_percentage")
    assert java_view(broker)[:2] == [
        {"entity": {"user": "alice"}, "values": {"producer_byte_rate": MIB}},
        {"entity": {"user": "alice", "client-id": "app"}, "values": {"producer_byte_rate": 1000.0}},
    ]

    fraction = gregor(
        "quotas",
        "--bootstrap-server",
        broker.bootstrap,
        "--alter",
        "--user",
        "carol",
        "--add-config",
        "consumer_byte_rate=10.5",
    )
    assert fraction.code == 1 and "INVALID_REQUEST" in fraction.err
    unknown = gregor(
        "quotas",
        "--bootstrap-server",
        broker.bootstrap,
        "--alter",
        "--user",
        "carol",
        "--add-config",
        "bytes_per_fortnight=1",
    )
    assert unknown.code == 1 and "INVALID_REQUEST" in unknown.err
    nobody = gregor(
        "quotas",
        "--bootstrap-server",
        broker.bootstrap,
        "--alter",
        "--add-config",
        "producer_byte_rate=1",
    )
    assert nobody.code == 1 and "--alter needs --user" in nobody.err
    not_a_number = gregor(
        "quotas",
        "--bootstrap-server",
        broker.bootstrap,
        "--alter",
        "--user",
        "carol",
        "--add-config",
        "producer_byte_rate=fast",
    )
    assert not_a_number.code == 1 and "must be a number" in not_a_number.err
