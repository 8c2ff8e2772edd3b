"""The security metrics of issue #19 (item 8) against a real broker: the TLS handshake time
histogram of each TLS listener, and Kafka's authorizer metrics counting what the
authorizer allowed and denied, with the number of ACLs it holds."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from prometheus_client.parser import text_string_to_metric_families

from gregor.server.harness.broker_process import BrokerProcess
from gregor.server.harness.certs import CertificateAuthority, broker_ssl_properties
from tests.test_tls_listeners import port_of, prefixed

HANDSHAKE = "gregor_socket_server_metrics_tls_handshake_time_ms"
AUTHORIZER = "kafka_server_authorizer_metrics_"
TIMEOUT_S = 30


def scrape(broker: BrokerProcess) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    url = f"http://127.0.0.1:{broker.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> CertificateAuthority:
    return CertificateAuthority(tmp_path_factory.mktemp("metrics-ca"))


@pytest.fixture(scope="module")
def broker(
    ca: CertificateAuthority, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    """PLAINTEXT and SSL, an authorizer that allows what no ACL covers."""
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        **prefixed("ssl", broker_ssl_properties(ca.server("broker"))),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "true",
        "metrics.prometheus.port": "0",
        "metrics.prometheus.host": "127.0.0.1",
    }
    with BrokerProcess(tmp_path_factory.mktemp("metrics-broker"), overrides) as b:
        yield b


def test_tls_handshakes_are_timed_per_listener(
    ca: CertificateAuthority, broker: BrokerProcess
) -> None:
    before = scrape(broker)
    count = (f"{HANDSHAKE}_count", frozenset({("listener", "SSL")}))
    for _ in range(2):
        admin = AdminClient(
            {
                "bootstrap.servers": f"127.0.0.1:{port_of(broker, 'SSL')}",
                "security.protocol": "SSL",
                "ssl.ca.location": str(ca.truststore.pem),
            }
        )
        assert admin.list_topics(timeout=TIMEOUT_S).brokers
    after = scrape(broker)
    # librdkafka connects to the bootstrap address and again to the advertised broker.
    assert after[count] - before.get(count, 0) >= 2
    infinite = (f"{HANDSHAKE}_bucket", frozenset({("listener", "SSL"), ("le", "+Inf")}))
    assert after[infinite] == after[count]
    assert after[(f"{HANDSHAKE}_sum", frozenset({("listener", "SSL")}))] > 0
    assert not any(
        name.startswith(HANDSHAKE) and ("listener", "PLAINTEXT") in labels for name, labels in after
    )


def test_the_authorizer_counts_what_it_allows_and_denies(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    deny = AclBinding(
        ResourceType.TOPIC,
        "secret",
        ResourcePatternType.LITERAL,
        "User:ANONYMOUS",
        "*",
        AclOperation.ALL,
        AclPermissionType.DENY,
    )
    for future in admin.create_acls([deny]).values():  # ALTER on the cluster: allowed
        future.result(TIMEOUT_S)
    before = scrape(broker)
    topic = admin.list_topics("secret", timeout=TIMEOUT_S).topics["secret"]
    assert topic.error is not None and topic.error.name() == "TOPIC_AUTHORIZATION_FAILED"
    after = scrape(broker)
    none = frozenset[tuple[str, str]]()
    denied = after[(f"{AUTHORIZER}authorization_denied_total", none)]
    allowed = after[(f"{AUTHORIZER}authorization_allowed_total", none)]
    assert denied - before[(f"{AUTHORIZER}authorization_denied_total", none)] >= 1
    assert allowed >= 1  # CreateAcls' ALTER on the cluster
    assert after[(f"{AUTHORIZER}authorization_request_total", none)] == allowed + denied
    assert after[(f"{AUTHORIZER}acls_total_count", none)] == 1
