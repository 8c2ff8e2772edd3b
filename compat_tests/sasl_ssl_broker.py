"""A broker as production runs it, for the JVM integrations (Kafka Connect, Spark's
connector): a SASL_SSL listener with SCRAM-SHA-512 users and the ACL authorizer, so that
what a worker does is authenticated, encrypted and authorized with only the ACLs it is
given. A PLAINTEXT listener beside it is the test's admin (``User:ANONYMOUS`` is a super
user there): topics, SCRAM credentials (AlterUserScramCredentials) and ACLs are made on it.

Modules of one test process share the certificate authority, hence the broker's overrides,
hence one pooled broker (``process_pool``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from compat_tests.broker import BrokerProcess
from compat_tests.process_pool import ProcessPool
from compat_tests.security_clients import Login, java
from gregor.server.harness.certs import CertificateAuthority, broker_ssl_properties

MECHANISM = "SCRAM-SHA-512"
TIMEOUT_S = 30.0
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


@dataclass(frozen=True)
class SaslSslBroker:
    """The broker, and the CA its SASL_SSL listener's certificate comes from."""

    broker: BrokerProcess  # its bootstrap is the PLAINTEXT (admin) listener's
    ca: CertificateAuthority

    @property
    def bootstrap(self) -> str:
        """The SASL_SSL listener's ``host:port``."""
        return f"127.0.0.1:{self.broker.listener_ports['SASL_SSL']}"

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.broker.bootstrap})

    def user(self, name: str, password: str) -> dict[str, str]:
        """Create (or update) the SCRAM user; return the Java client properties it connects
        with (security.protocol, sasl.*, a PKCS12 ssl.truststore.*)."""
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
        upsertion = UserScramCredentialUpsertion(name, info, password.encode())
        admin = self.admin()  # kept while its futures are pending
        for future in admin.alter_user_scram_credentials([upsertion]).values():
            future.result(TIMEOUT_S)
        return java(Login("SASL_SSL", self.ca.truststore, None, MECHANISM, name, password))

    def allow(
        self,
        user: str,
        resource: ResourceType,
        name: str,
        operations: list[AclOperation],
        pattern: ResourcePatternType = ResourcePatternType.LITERAL,
    ) -> None:
        """ALLOW ``operations`` on the resource to ``User:<user>`` from any host."""
        bindings = [
            AclBinding(resource, name, pattern, f"User:{user}", "*", op, AclPermissionType.ALLOW)
            for op in operations
        ]
        admin = self.admin()
        for future in admin.create_acls(bindings).values():
            future.result(TIMEOUT_S)


@functools.cache
def _configured(directory: Path) -> tuple[CertificateAuthority, tuple[tuple[str, str], ...]]:
    """A certificate authority in ``directory`` and the broker's overrides using it."""
    ca = CertificateAuthority(directory)
    sasl_ssl = {"sasl.enabled.mechanisms": MECHANISM, **broker_ssl_properties(ca.server("broker"))}
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "authorizer.class.name": AUTHORIZER,
        "super.users": "User:ANONYMOUS",
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "group.min.session.timeout.ms": "1000",  # the Connect workers' short sessions
        **{f"listener.name.sasl_ssl.{k}": v for k, v in sasl_ssl.items()},
    }
    return ca, tuple(overrides.items())


def secured_broker(
    process_pool: ProcessPool, tmp_path_factory: pytest.TempPathFactory
) -> SaslSslBroker:
    """The process's secured broker (started by the first module to ask)."""
    ca, overrides = _configured(tmp_path_factory.getbasetemp() / "sasl-ssl-ca")
    return SaslSslBroker(process_pool.broker(dict(overrides)), ca)
