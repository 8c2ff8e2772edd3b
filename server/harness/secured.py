"""Secured set-ups for the harness: the server properties of a broker or cluster with TLS,
SASL and the ACL authorizer, and the client configurations of its users in each client's
own style (Kafka's client properties, librdkafka's, kafka-python's).

Two users are handed out: ``admin``, a super user, and ``alice``, an ordinary one (the
authorizer allows her only what ACLs grant). Passwords are random per set-up; certificates
come from a new CA (``certs.py``) in the set-up's directory.

- ``BrokerSecurity``/``SecuredBroker``: one broker (the pytest plugin's), with TLS, SASL
  (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512) or both, the authorizer on or off. Over TLS alone
  users are told apart by client certificates (mutual TLS, ``CN=<user>`` mapped to the
  user). With SCRAM the listener enables PLAIN too, whose JAAS config names the admin
  alone: as in Kafka's documented set-up, the admin logs in first (the harness does) and
  creates the SCRAM credentials, which an embedded node cannot hold before it runs.
- ``ClusterSecurity``: a cluster's brokers (``cluster.py``, ``scripts/cluster --secure``):
  SASL_SSL for clients (``CLIENT``) and between brokers (``BROKER``). Brokers log in to each
  other with PLAIN as ``User:broker``, a super user: PLAIN's users are the listener's JAAS
  config, so nothing need exist before the brokers authenticate, where SCRAM's credentials
  would have to be written to ZooKeeper before the first broker starts (Kafka's
  ``kafka-configs.sh --zookeeper``); TLS keeps the password off the wire. Optionally an
  ``ANONYMOUS`` PLAINTEXT listener, to test what a client that authenticates not at all
  can do.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gregor.server.cli.client.connection import Client
from gregor.server.cli.user_configs import alter_scram
from gregor.server.harness.properties import write_properties

if TYPE_CHECKING:
    from gregor.server.harness.certs import Identity, Truststore

ADMIN = "admin"
USER = "alice"
BROKER_USER = "broker"
AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
# ssl.principal.mapping.rules: a certificate's CN=<user> is User:<user>.
_CN_RULE = "RULE:^CN=([^,]*)$/$1/,DEFAULT"


def login_jaas(mechanism: str, username: str, password: str) -> str:
    """A client's (or a broker's own) ``sasl.jaas.config``."""
    return f'{_LOGIN_MODULES[mechanism]} required username="{username}" password="{password}";'


def plain_users_jaas(users: dict[str, str], login: tuple[str, str] | None = None) -> str:
    """A listener's PLAIN ``sasl.jaas.config``: ``user_<name>="<password>"`` for each user,
    and the ``username``/``password`` the broker logs in with to other brokers."""
    parts = [_LOGIN_MODULES["PLAIN"], "required"]
    if login is not None:
        parts += [f'username="{login[0]}"', f'password="{login[1]}"']
    parts += [f'user_{name}="{password}"' for name, password in users.items()]
    return " ".join(parts) + ";"


@dataclass(frozen=True)
class ClientConfig:
    """How one user connects, in each client's configuration style. Each includes the
    bootstrap servers."""

    bootstrap: str
    protocol: str = "PLAINTEXT"
    truststore: Truststore | None = None
    mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    identity: Identity | None = None  # the client certificate of mutual TLS

    def properties(self) -> dict[str, str]:
        """Kafka's client properties: Java clients, ``gregor --command-config``, the harness.
        Stores are PKCS12, which every Java version reads."""
        props = {"bootstrap.servers": self.bootstrap, "security.protocol": self.protocol}
        if self.truststore is not None:
            props.update(
                {
                    "ssl.truststore.type": "PKCS12",
                    "ssl.truststore.location": str(self.truststore.pkcs12),
                    "ssl.truststore.password": self.truststore.password,
                }
            )
        if self.identity is not None:
            props.update(
                {
                    "ssl.keystore.type": "PKCS12",
                    "ssl.keystore.location": str(self.identity.pkcs12),
                    "ssl.keystore.password": self.identity.password,
                }
            )
        if self.mechanism is not None:
            assert self.username is not None and self.password is not None
            props["sasl.mechanism"] = self.mechanism
            props["sasl.jaas.config"] = login_jaas(self.mechanism, self.username, self.password)
        return props

    def confluent(self) -> dict[str, str]:
        """librdkafka's configuration (confluent-kafka, kcat's ``-X``)."""
        config = {"bootstrap.servers": self.bootstrap, "security.protocol": self.protocol}
        if self.truststore is not None:
            config["ssl.ca.location"] = str(self.truststore.pem)
        if self.identity is not None:
            config["ssl.certificate.location"] = str(self.identity.cert)
            config["ssl.key.location"] = str(self.identity.key)
            if self.identity.key_password is not None:
                config["ssl.key.password"] = self.identity.key_password
        if self.mechanism is not None:
            assert self.username is not None and self.password is not None
            config.update(
                {
                    "sasl.mechanism": self.mechanism,
                    "sasl.username": self.username,
                    "sasl.password": self.password,
                }
            )
        return config

    def kafka_python(self) -> dict[str, Any]:
        """kafka-python's keyword arguments (``KafkaProducer(**config)``)."""
        kwargs: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap,
            "security_protocol": self.protocol,
        }
        if self.truststore is not None:
            kwargs["ssl_cafile"] = str(self.truststore.pem)
        if self.identity is not None:
            kwargs["ssl_certfile"] = str(self.identity.cert)
            kwargs["ssl_keyfile"] = str(self.identity.key)
            kwargs["ssl_password"] = self.identity.key_password
        if self.mechanism is not None:
            kwargs["sasl_mechanism"] = self.mechanism
            kwargs["sasl_plain_username"] = self.username
            kwargs["sasl_plain_password"] = self.password
        return kwargs

    def write(self, path: Path) -> Path:
        """``properties()`` as a ``.properties`` file readable by its owner only."""
        return write_properties(path, self.properties())


@dataclass(frozen=True)
class BrokerSecurity:
    """A secured broker: TLS, a SASL mechanism (None: none), the authorizer. At least one
    of ``tls`` and ``sasl_mechanism``."""

    tls: bool = True
    sasl_mechanism: str | None = "SCRAM-SHA-512"
    authorizer: bool = True

    def __post_init__(self) -> None:
        if self.sasl_mechanism not in (None, *MECHANISMS):
            raise ValueError(f"sasl_mechanism must be one of {MECHANISMS} or None")
        if not self.tls and self.sasl_mechanism is None:
            raise ValueError("a secured broker needs TLS, a SASL mechanism or both")

    @property
    def protocol(self) -> str:
        if self.sasl_mechanism is None:
            return "SSL"
        return "SASL_SSL" if self.tls else "SASL_PLAINTEXT"


class SecuredBroker:
    """One broker's secured set-up, its files in ``directory``: ``overrides()`` for the
    broker, ``harness_config()`` for the launcher's probe, ``after_start`` to create the
    SCRAM credentials, ``client(user, bootstrap)`` to hand out."""

    def __init__(self, directory: Path, security: BrokerSecurity) -> None:
        self.security = security
        self.passwords = {ADMIN: secrets.token_urlsafe(16), USER: secrets.token_urlsafe(16)}
        # Loaded here, not with the module: the pytest plugin imports this module in every
        # session of every project that installs Gregor, and cryptography takes ~60 ms.
        from gregor.server.harness.certs import CertificateAuthority

        self.ca = CertificateAuthority(directory) if security.tls else None
        self.identities: dict[str, Identity] = {}
        if self.ca is not None and security.sasl_mechanism is None:
            self.identities = {u: self.ca.client(u, subject=f"CN={u}") for u in self.passwords}

    @property
    def listener(self) -> str:
        return self.security.protocol

    def overrides(self) -> dict[str, str]:
        security = self.security
        overrides = {"listeners": f"{self.listener}://127.0.0.1:0"}
        if self.ca is not None:
            from gregor.server.harness.certs import broker_ssl_properties  # see __init__

            mutual = security.sasl_mechanism is None
            overrides.update(
                broker_ssl_properties(
                    self.ca.server("broker"), client_auth="required" if mutual else "none"
                )
            )
            if mutual:
                overrides["ssl.principal.mapping.rules"] = _CN_RULE
        mechanism = security.sasl_mechanism
        if mechanism is not None:
            plain = self.passwords if mechanism == "PLAIN" else {ADMIN: self.passwords[ADMIN]}
            overrides["sasl.enabled.mechanisms"] = ",".join(dict.fromkeys(["PLAIN", mechanism]))
            jaas_key = f"listener.name.{self.listener.lower()}.plain.sasl.jaas.config"
            overrides[jaas_key] = plain_users_jaas(plain)
        if security.authorizer:
            overrides["authorizer.class.name"] = AUTHORIZER
            overrides["super.users"] = f"User:{ADMIN}"
        return overrides

    def harness_config(self) -> dict[str, str]:
        """The admin's client properties (with PLAIN, which needs no credential stored)."""
        config = self._client(ADMIN, "", "PLAIN").properties()
        del config["bootstrap.servers"]
        return config

    def after_start(self, bootstrap: str) -> None:
        """Create both users' SCRAM credentials (if SCRAM): the broker keeps them."""
        mechanism = self.security.sasl_mechanism
        if mechanism is None or mechanism == "PLAIN":
            return
        with Client(bootstrap, "gregor-harness", config=self.harness_config()) as client:
            for user, password in self.passwords.items():
                alter_scram(client, user, {mechanism: f"password={password}"}, [])

    def client(self, user: str, bootstrap: str) -> ClientConfig:
        """How ``user`` (``ADMIN`` or ``USER``) connects."""
        return self._client(user, bootstrap, self.security.sasl_mechanism)

    def _client(self, user: str, bootstrap: str, mechanism: str | None) -> ClientConfig:
        sasl = self.security.sasl_mechanism is not None
        return ClientConfig(
            bootstrap,
            self.security.protocol,
            truststore=None if self.ca is None else self.ca.truststore,
            mechanism=mechanism if sasl else None,
            username=user if sasl else None,
            password=self.passwords[user] if sasl else None,
            identity=self.identities.get(user),
        )


class ClusterSecurity:
    """A secured cluster's set-up, its files in ``directory``: a CA, one certificate per
    broker, the PLAIN users of the ``BROKER`` and ``CLIENT`` listeners."""

    CLIENT = "CLIENT"
    BROKER = "BROKER"
    ANONYMOUS = "ANONYMOUS"

    def __init__(self, directory: Path, *, anonymous_listener: bool = False) -> None:
        self.directory = Path(directory)
        from gregor.server.harness.certs import CertificateAuthority  # see SecuredBroker

        self.ca = CertificateAuthority(self.directory)
        self.anonymous_listener = anonymous_listener
        self.broker_password = secrets.token_urlsafe(16)
        self.passwords = {ADMIN: secrets.token_urlsafe(16), USER: secrets.token_urlsafe(16)}

    def broker_overrides(
        self, broker_id: int, ports: dict[str, int] | None = None
    ) -> dict[str, str]:
        """Broker ``broker_id``'s security settings; ``ports`` by listener (0: any)."""
        names = [self.CLIENT, self.BROKER] + ([self.ANONYMOUS] if self.anonymous_listener else [])
        protocols = {self.CLIENT: "SASL_SSL", self.BROKER: "SASL_SSL", self.ANONYMOUS: "PLAINTEXT"}
        ports = ports or {}
        broker_jaas = plain_users_jaas(
            {BROKER_USER: self.broker_password}, login=(BROKER_USER, self.broker_password)
        )
        identity = self.ca.server(f"broker-{broker_id}")
        from gregor.server.harness.certs import broker_ssl_properties  # see SecuredBroker

        return {
            "listeners": ",".join(f"{n}://127.0.0.1:{ports.get(n, 0)}" for n in names),
            "listener.security.protocol.map": ",".join(f"{n}:{protocols[n]}" for n in names),
            "inter.broker.listener.name": self.BROKER,
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.broker.plain.sasl.jaas.config": broker_jaas,
            "listener.name.client.plain.sasl.jaas.config": plain_users_jaas(self.passwords),
            **broker_ssl_properties(identity),
            "authorizer.class.name": AUTHORIZER,
            "super.users": f"User:{BROKER_USER};User:{ADMIN}",
        }

    def harness_config(self) -> dict[str, str]:
        """The admin's client properties, without bootstrap servers."""
        config = self.client(ADMIN, "").properties()
        del config["bootstrap.servers"]
        return config

    def client(self, user: str, bootstrap: str) -> ClientConfig:
        """How ``user`` (``ADMIN`` or ``USER``) connects to the ``CLIENT`` listeners."""
        return ClientConfig(
            bootstrap,
            "SASL_SSL",
            truststore=self.ca.truststore,
            mechanism="PLAIN",
            username=user,
            password=self.passwords[user],
        )
