"""ZooKeeper security (docs/cluster.md, "ZooKeeper security"), against a real ZooKeeper with
SASL DIGEST-MD5 and a TLS port, and real broker processes.

With ``zookeeper.set.acl=true`` and the JAAS ``Client`` section (named by KAFKA_OPTS, as for
Kafka), every znode the brokers create carries Kafka's ACLs: all rights to the brokers'
identity, world READ except under the sensitive roots. A ZooKeeper client without the
brokers' credentials can read the cluster's layout but change nothing. Over TLS with a
client certificate, the identity is the certificate's subject.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import ACL, Id, Permissions

from gregor.configdef import ConfigError
from gregor.controller.acls.model import AclOperation as Op
from gregor.controller.acls.model import PatternType as Pat
from gregor.controller.acls.model import ResourceType as Res
from gregor.server.config import BrokerConfig
from gregor.server.harness.broker_process import BrokerProcess, BrokerProcessError
from gregor.server.harness.certs import CertificateAuthority, Identity
from gregor.server.harness.cluster import TEST_DEFAULTS
from gregor.server.harness.zookeeper import ZooKeeperProcess
from gregor.server.security.jaas_file import read_jaas_file
from gregor.server.security.sasl.jaas import JaasConfigError
from gregor.server.security.zk_client_security import java_system_properties, zk_client_security
from tests.kafka_wire import WireClient
from tests.test_acl_apis import allow
from tests.test_acl_apis import create as create_acls
from tests.test_scram_store import alter as alter_scram
from tests.test_scram_store import upsert_of

USER, PASSWORD = "kafka", "kafka-secret"
DIGEST = "org.apache.zookeeper.server.auth.DigestLoginModule"
SCRAM_SHA_256 = 1
BROKER_SUBJECT = "CN=gregor-broker"
AUTHORIZER = {
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "super.users": "User:ANONYMOUS",  # the harness's own client
}
WORLD_READ = ACL(Permissions.READ, Id("world", "anyone"))


class ZkSecureBroker(BrokerProcess):
    """A broker started with ``KAFKA_OPTS`` in its environment, as Kafka's scripts pass it."""

    def __init__(self, directory: Path, overrides: dict[str, str], kafka_opts: str = "") -> None:
        super().__init__(directory, {**TEST_DEFAULTS, **overrides})
        self.kafka_opts = kafka_opts

    def env(self) -> dict[str, str]:
        env = super().env()
        env["KAFKA_OPTS"] = self.kafka_opts
        return env


def jaas_options(directory: Path, password: str = PASSWORD) -> str:
    """KAFKA_OPTS naming a JAAS file whose Client section logs in as ``kafka``."""
    path = directory / "kafka_server_jaas.conf"
    path.write_text(
        "// the broker's listeners would have a KafkaServer section; only Client matters here\n"
        "KafkaServer {\n"
        '  org.apache.kafka.common.security.plain.PlainLoginModule required user_a="b";\n'
        "};\n"
        f'Client {{\n  {DIGEST} required\n  username="{USER}"\n  password="{password}";\n}};\n'
    )
    return f"-Xmx1G -Djava.security.auth.login.config={path}"


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> CertificateAuthority:
    return CertificateAuthority(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def zookeeper(
    tmp_path_factory: pytest.TempPathFactory, ca: CertificateAuthority
) -> Iterator[ZooKeeperProcess]:
    tls = ca.server("zookeeper")
    with ZooKeeperProcess(
        tmp_path_factory.mktemp("zookeeper"), sasl_users={USER: PASSWORD}, tls=tls
    ) as zk:
        yield zk


def kazoo(connect: str, *, authenticated: bool) -> KazooClient:
    options = (
        {"sasl_options": {"mechanism": "DIGEST-MD5", "username": USER, "password": PASSWORD}}
        if authenticated
        else {}
    )
    client = KazooClient(hosts=connect, timeout=10, **options)
    client.start(30)
    return client


def walk(zk: KazooClient, path: str = "/") -> Iterator[str]:
    yield path
    for child in zk.get_children(path):
        yield from walk(zk, f"{path.rstrip('/')}/{child}")


def sensitive(path: str) -> bool:
    return path.startswith(("/config/users", "/config/brokers"))


@pytest.fixture(scope="module")
def sasl_brokers(
    zookeeper: ZooKeeperProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[int, BrokerProcess]]:
    """Two brokers on chroot /secure, with zookeeper.set.acl=true and SASL DIGEST-MD5."""
    work = tmp_path_factory.mktemp("sasl-brokers")
    kafka_opts = jaas_options(work)
    brokers = {
        i: ZkSecureBroker(
            work / f"broker-{i}",
            {
                **AUTHORIZER,
                "broker.id": str(i),
                "zookeeper.connect": f"{zookeeper.connect}/secure",
                "zookeeper.set.acl": "true",
            },
            kafka_opts,
        )
        for i in (1, 2)
    }
    try:
        with ThreadPoolExecutor(len(brokers)) as pool:
            for future in [pool.submit(b.start) for b in brokers.values()]:
                future.result()
        yield brokers
    finally:
        for broker in brokers.values():
            broker.close()


def test_every_znode_carries_kafkas_acls_and_outsiders_change_nothing(
    zookeeper: ZooKeeperProcess, sasl_brokers: dict[int, BrokerProcess]
) -> None:
    broker = sasl_brokers[1]
    topic = f"orders-{uuid.uuid4().hex[:6]}"
    # The brokers serve and write every kind of znode: a topic (the controller's multis), a
    # SCRAM credential (/config/users, sensitive), an ACL (/kafka-acl with makepath).
    broker.create_topic(topic, partitions=2)
    client = WireClient(broker.port)
    try:
        assert alter_scram(client, [], [upsert_of("alice", SCRAM_SHA_256, 4096)]) == [
            ("alice", 0, None)
        ]
        read = allow(Res.TOPIC, topic, Pat.LITERAL, "User:alice", Op.READ)
        assert create_acls(client, [read]) == [(0, None)]
    finally:
        client.close()

    owner = ACL(Permissions.ALL, Id("sasl", USER))
    admin = kazoo(f"{zookeeper.connect}/secure", authenticated=True)
    outsider = kazoo(f"{zookeeper.connect}/secure", authenticated=False)
    try:
        paths = list(walk(admin))
        for expected in (
            "/brokers/ids/1",
            "/brokers/ids/2",
            "/controller",
            "/controller_epoch",
            "/cluster/id",
            f"/brokers/topics/{topic}/partitions/1/state",
            f"/config/topics/{topic}",
            "/config/users/alice",
            f"/kafka-acl/Topic/{topic}",
            "/admin/delete_topics",
        ):
            assert expected in paths
        assert any(p.startswith("/kafka-acl-changes/acl_changes_") for p in paths)
        wrong = {
            path: acls
            for path in paths
            if path != "/"  # the chroot itself is checked from the server's root below
            and (acls := admin.get_acls(path)[0])
            != ([owner] if sensitive(path) else [owner, WORLD_READ])
        }
        assert wrong == {}

        # Readable by anyone: the cluster's layout.
        assert sorted(outsider.get_children("/brokers/ids")) == ["1", "2"]
        outsider.get("/controller")
        outsider.get(f"/brokers/topics/{topic}")
        # Changed by nobody but the brokers.
        for attempt in (
            lambda: outsider.set("/controller", b'{"version":1,"brokerid":666}'),
            lambda: outsider.delete("/controller"),
            lambda: outsider.set("/brokers/ids/1", b"{}"),
            lambda: outsider.delete("/brokers/ids/2"),
            lambda: outsider.set(f"/brokers/topics/{topic}/partitions/0/state", b"{}"),
            lambda: outsider.create("/brokers/ids/666", b"{}"),
            lambda: outsider.create(f"/config/topics/{topic}-evil", b"{}"),
            lambda: outsider.set(f"/config/topics/{topic}", b"{}"),
            lambda: outsider.create("/config/changes/config_change_9999999999", b"{}"),
            lambda: outsider.set(f"/kafka-acl/Topic/{topic}", b'{"version":1,"acls":[]}'),
            lambda: outsider.create("/kafka-acl/Topic/evil", b"{}"),
            lambda: outsider.create("/admin/delete_topics/" + topic),
        ):
            with pytest.raises(NoAuthError):
                attempt()
        # Secrets are not even readable.
        for secret in ("/config/users/alice", "/config/users", "/config/brokers"):
            with pytest.raises(NoAuthError):
                outsider.get(secret)
    finally:
        for zk in (admin, outsider):
            zk.stop()
            zk.close()

    root = kazoo(zookeeper.connect, authenticated=False)
    try:
        assert root.get_acls("/secure")[0] == [owner, WORLD_READ]
    finally:
        root.stop()
        root.close()


def test_tls_to_zookeeper_with_a_client_certificate(
    zookeeper: ZooKeeperProcess, ca: CertificateAuthority, tmp_path: Path
) -> None:
    """Only the TLS port: the broker's identity for the ACLs is its certificate's subject."""
    identity = ca.client("gregor-broker", subject=BROKER_SUBJECT)
    overrides = {
        "broker.id": "1",
        "zookeeper.connect": f"{zookeeper.secure_connect}/tls",
        "zookeeper.set.acl": "true",
        "zookeeper.ssl.client.enable": "true",
        "zookeeper.clientCnxnSocket": "org.apache.zookeeper.ClientCnxnSocketNetty",
        **tls_keys(identity),
    }
    with ZkSecureBroker(tmp_path, overrides):
        outsider = kazoo(f"{zookeeper.connect}/tls", authenticated=False)
        try:
            owner = ACL(Permissions.ALL, Id("x509", BROKER_SUBJECT))
            assert outsider.get_acls("/brokers/ids/1")[0] == [owner, WORLD_READ]
            assert outsider.get_acls("/controller")[0] == [owner, WORLD_READ]
            with pytest.raises(NoAuthError):
                outsider.set("/controller", b"{}")
            with pytest.raises(NoAuthError):
                outsider.get_children("/config/users")
        finally:
            outsider.stop()
            outsider.close()


def tls_keys(identity: Identity) -> dict[str, str]:
    """A PKCS12 keystore and a PEM truststore whose type is told by its name, as ZooKeeper
    auto-detects it."""
    return {
        "zookeeper.ssl.keystore.location": str(identity.pkcs12),
        "zookeeper.ssl.keystore.password": identity.password,
        "zookeeper.ssl.keystore.type": "PKCS12",
        "zookeeper.ssl.truststore.location": str(identity.truststore.pem),
    }


def test_refused_credentials_stop_start_up(zookeeper: ZooKeeperProcess, tmp_path: Path) -> None:
    overrides = {
        "zookeeper.connect": f"{zookeeper.connect}/refused",
        "zookeeper.set.acl": "true",
        # The refusal comes when ZooKeeper gets to the SASL exchange: on a loaded machine
        # once after more than the tests' 6 s (a CI run), which ended the start-up first.
        "zookeeper.connection.timeout.ms": "60000",
    }
    broker = ZkSecureBroker(tmp_path, overrides, jaas_options(tmp_path, password="wrong"))
    with pytest.raises(BrokerProcessError, match="exited") as failure:
        broker.start()
    assert f"refused the SASL authentication of user '{USER}'" in str(failure.value)


def test_set_acl_without_an_identity_stops_start_up(
    zookeeper: ZooKeeperProcess, tmp_path: Path
) -> None:
    overrides = {"zookeeper.connect": zookeeper.connect, "zookeeper.set.acl": "true"}
    with pytest.raises(BrokerProcessError, match="exited") as failure:
        ZkSecureBroker(tmp_path, overrides).start()
    assert "zookeeper.set.acl is true, but ZooKeeper client TLS configuration" in str(failure.value)


@pytest.mark.cluster
def test_a_zookeeper_that_requires_sasl(tmp_path: Path) -> None:
    """enforce.auth: every request before authentication is refused, the chroot's creation
    included; the broker authenticates first (SASL without zookeeper.set.acl: open ACLs)."""
    with ZooKeeperProcess(tmp_path / "zk", sasl_users={USER: PASSWORD}, require_sasl=True) as zk:
        overrides = {"zookeeper.connect": f"{zk.connect}/enforced"}
        with ZkSecureBroker(tmp_path / "broker", overrides, jaas_options(tmp_path)):
            admin = kazoo(f"{zk.connect}/enforced", authenticated=True)
            try:
                assert admin.get_children("/brokers/ids") == ["0"]
                assert admin.get_acls("/brokers/ids/0")[0] == [
                    ACL(Permissions.ALL, Id("world", "anyone"))
                ]
            finally:
                admin.stop()
                admin.close()


# --- settings, without servers ------------------------------------------------------------


def cluster_config(**keys: str) -> BrokerConfig:
    return BrokerConfig({"zookeeper.connect": "127.0.0.1:2181", **keys})


def test_jaas_file_sections_and_kafka_opts(tmp_path: Path) -> None:
    kafka_opts = jaas_options(tmp_path)
    properties = java_system_properties(f"{kafka_opts} -Dzookeeper.sasl.clientconfig='Client'")
    assert properties["zookeeper.sasl.clientconfig"] == "Client"
    sections = read_jaas_file(Path(properties["java.security.auth.login.config"]))
    assert sorted(sections) == ["Client", "KafkaServer"]
    (client,) = sections["Client"]
    assert (client.name, client.options) == (DIGEST, {"username": USER, "password": PASSWORD})
    security = zk_client_security(cluster_config(), {"KAFKA_OPTS": kafka_opts})
    assert (security.sasl_username, security.sasl_password, security.set_acl) == (
        USER,
        PASSWORD,
        False,
    )
    assert PASSWORD not in repr(security)

    # Another section name, as zookeeper.sasl.clientconfig picks: no SASL without it.
    other = f"{kafka_opts} -Dzookeeper.sasl.clientconfig=ZkClient"
    assert zk_client_security(cluster_config(), {"KAFKA_OPTS": other}).sasl_username is None
    broken = tmp_path / "broken.conf"
    broken.write_text('Client {\n  x required a="b";\n')
    with pytest.raises(JaasConfigError, match="line 3: expected '}'"):
        read_jaas_file(broken)


@pytest.mark.parametrize(
    ("keys", "kafka_opts", "message"),
    [
        ({"zookeeper.set.acl": "true"}, "", "zookeeper.set.acl is true, but"),
        (
            {"zookeeper.ssl.client.enable": "true", "zookeeper.ssl.crl.enable": "true"},
            "",
            "zookeeper.ssl.crl.enable is true, but",
        ),
        (
            {"zookeeper.ssl.client.enable": "true", "zookeeper.ssl.truststore.location": "a.b"},
            "",
            "zookeeper.ssl.truststore.type: unable to auto-detect",
        ),
        (
            {"zookeeper.ssl.client.enable": "true", "zookeeper.ssl.protocol": "TLSv9"},
            "",
            "zookeeper.ssl.protocol: 'TLSv9' is not supported",
        ),
        ({}, "-Dzookeeper.sasl.client=false", "system property zookeeper.sasl.client is set"),
        ({}, "-Djava.security.auth.login.config=/nonexistent", "cannot read the JAAS file"),
    ],
)
def test_settings_gregor_or_kafka_refuse(
    tmp_path: Path, keys: dict[str, str], kafka_opts: str, message: str
) -> None:
    if "zookeeper.sasl.client=false" in kafka_opts:
        kafka_opts = f"{jaas_options(tmp_path)} {kafka_opts}"
    with pytest.raises(ConfigError, match=message):
        zk_client_security(cluster_config(**keys), {"KAFKA_OPTS": kafka_opts})


def test_kerberos_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "jaas.conf"
    path.write_text(
        "Client { com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true; };"
    )
    kafka_opts = f"-Djava.security.auth.login.config={path}"
    with pytest.raises(ConfigError, match="does not support Kerberos"):
        zk_client_security(cluster_config(), {"KAFKA_OPTS": kafka_opts})
