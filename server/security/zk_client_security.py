"""A cluster broker's ZooKeeper security from Kafka's settings (docs/cluster.md, "ZooKeeper
security"): ``zookeeper.set.acl``, the ``zookeeper.ssl.*`` keys, and SASL credentials from
the JAAS file Kafka's JVM would read.

Kafka's broker takes its ZooKeeper credentials from the ``Client`` section of the JAAS file
that the JVM system property ``java.security.auth.login.config`` names, which operators set
in ``KAFKA_OPTS`` (``-Djava.security.auth.login.config=/etc/kafka/jaas.conf``). Gregor reads
the same variable and the same file, so a Kafka deployment's environment carries over as it
is: the ``-D`` options of ``KAFKA_OPTS`` are read as the JVM would, and
``zookeeper.sasl.clientconfig`` (the section's name) and ``zookeeper.sasl.client`` are
honoured as in Kafka. The section holds one DigestLoginModule (SASL DIGEST-MD5);
Kerberos is refused.
"""

from __future__ import annotations

import os
import shlex
import ssl
from collections.abc import Mapping
from pathlib import Path

from gregor.configdef import ConfigError
from gregor.controller.zookeeper.security import ZkClientSecurity
from gregor.server.config import BrokerConfig
from gregor.server.security.jaas_file import read_jaas_file
from gregor.server.security.sasl.jaas import JaasConfigError
from gregor.server.security.ssl_stores import SslConfigError
from gregor.server.security.tls import client_context

JAAS_FILE_PROPERTY = "java.security.auth.login.config"
CLIENT_SECTION_PROPERTY = "zookeeper.sasl.clientconfig"
DEFAULT_CLIENT_SECTION = "Client"
SASL_CLIENT_PROPERTY = "zookeeper.sasl.client"
DIGEST_LOGIN_MODULE = "org.apache.zookeeper.server.auth.DigestLoginModule"
KERBEROS_LOGIN_MODULE = "com.sun.security.auth.module.Krb5LoginModule"
# ZooKeeper's X509Util picks a store's type from its file name when none is given.
_STORE_TYPES_BY_SUFFIX = {".jks": "JKS", ".pem": "PEM", ".p12": "PKCS12", ".pkcs12": "PKCS12"}
# What an ssl_stores/tls error names, back to the zookeeper.ssl.* key it came from.
_ZOOKEEPER_KEYS = {
    "ssl.keystore.location": "zookeeper.ssl.keystore.location",
    "ssl.keystore.password": "zookeeper.ssl.keystore.password",
    "ssl.key.password": "zookeeper.ssl.keystore.password",
    "ssl.keystore.type": "zookeeper.ssl.keystore.type",
    "ssl.truststore.location": "zookeeper.ssl.truststore.location",
    "ssl.truststore.password": "zookeeper.ssl.truststore.password",
    "ssl.truststore.type": "zookeeper.ssl.truststore.type",
    "ssl.protocol": "zookeeper.ssl.protocol",
    "ssl.enabled.protocols": "zookeeper.ssl.enabled.protocols",
    "ssl.cipher.suites": "zookeeper.ssl.cipher.suites",
    "ssl.endpoint.identification.algorithm": "zookeeper.ssl.endpoint.identification.algorithm",
}


def zk_client_security(
    config: BrokerConfig, environ: Mapping[str, str] = os.environ
) -> ZkClientSecurity:
    """The broker's ZooKeeper session security; ConfigError for what Kafka would refuse
    (``zookeeper.set.acl`` with no identity to set ACLs for) or Gregor cannot do."""
    credentials = _sasl_credentials(java_system_properties(environ.get("KAFKA_OPTS", "")))
    context = None
    if config["zookeeper.ssl.client.enable"]:
        context = _tls_context(config)
    tls_identity = context is not None and bool(config["zookeeper.ssl.keystore.location"])
    if config["zookeeper.set.acl"] and credentials is None and not tls_identity:
        raise ConfigError(
            "zookeeper.set.acl is true, but ZooKeeper client TLS configuration identifying at "
            "least zookeeper.ssl.client.enable and zookeeper.ssl.keystore.location was not "
            "present and no JAAS login context 'Client' was found (set KAFKA_OPTS="
            f"-D{JAAS_FILE_PROPERTY}=<file> to a file with one)"
        )
    username, password = credentials or (None, None)
    return ZkClientSecurity(
        set_acl=config["zookeeper.set.acl"],
        sasl_username=username,
        sasl_password=password,
        ssl_context=context,
    )


def java_system_properties(java_options: str) -> dict[str, str]:
    """The ``-Dname=value`` options of a JVM command line such as ``KAFKA_OPTS``."""
    try:
        words = shlex.split(java_options)
    except ValueError as e:
        raise ConfigError(f"KAFKA_OPTS cannot be read as JVM options: {e}") from None
    properties = {}
    for word in words:
        if word.startswith("-D"):
            name, _, value = word[2:].partition("=")
            properties[name] = value
    return properties


def _sasl_credentials(properties: Mapping[str, str]) -> tuple[str, str] | None:
    """The Client section's username and password, or None without one (as ZooKeeper's
    client, which uses SASL exactly when the section exists)."""
    path = properties.get(JAAS_FILE_PROPERTY)
    if not path:
        return None
    section_name = properties.get(CLIENT_SECTION_PROPERTY, DEFAULT_CLIENT_SECTION)
    where = f"-D{JAAS_FILE_PROPERTY}={path}"
    try:
        sections = read_jaas_file(Path(path))
    except OSError as e:
        raise ConfigError(f"{where}: cannot read the JAAS file: {e.strerror}") from None
    except JaasConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    modules = sections.get(section_name)
    if modules is None:
        return None
    if properties.get(SASL_CLIENT_PROPERTY, "true").strip().lower() == "false":
        raise ConfigError(
            f"JAAS configuration is present, but system property {SASL_CLIENT_PROPERTY} is "
            "set to false, which disables SASL in the ZooKeeper client"
        )
    if len(modules) != 1 or modules[0].name != DIGEST_LOGIN_MODULE:
        names = ", ".join(m.name for m in modules)
        kerberos = " (Gregor does not support Kerberos)" if KERBEROS_LOGIN_MODULE in names else ""
        raise ConfigError(
            f"{where}: the JAAS login context {section_name} must hold one "
            f"{DIGEST_LOGIN_MODULE} (SASL DIGEST-MD5 to ZooKeeper), not {names}{kerberos}"
        )
    options = modules[0].options
    if not options.get("username") or "password" not in options:
        raise ConfigError(
            f"{where}: the JAAS login context {section_name} needs username and password"
        )
    return options["username"], options["password"]


def _tls_context(config: BrokerConfig) -> ssl.SSLContext:
    for key, what in (
        ("zookeeper.ssl.crl.enable", "certificate revocation lists"),
        ("zookeeper.ssl.ocsp.enable", "OCSP answers"),
    ):
        if config[key]:
            raise ConfigError(
                f"{key} is true, but Gregor's TLS (OpenSSL) does not fetch {what}; remove the key"
            )
    protocol = config["zookeeper.ssl.protocol"]
    settings = {
        "ssl.protocol": protocol,
        # ZooKeeper's default: the protocol alone.
        "ssl.enabled.protocols": ",".join(config["zookeeper.ssl.enabled.protocols"] or [protocol]),
        "ssl.cipher.suites": ",".join(config["zookeeper.ssl.cipher.suites"] or []),
        "ssl.endpoint.identification.algorithm": config[
            "zookeeper.ssl.endpoint.identification.algorithm"
        ],
    }
    for store in ("keystore", "truststore"):
        location = config[f"zookeeper.ssl.{store}.location"]
        if not location:
            continue
        kind = _store_type(config[f"zookeeper.ssl.{store}.type"], location, store)
        settings[f"ssl.{store}.location"] = location
        settings[f"ssl.{store}.type"] = kind
        password = config[f"zookeeper.ssl.{store}.password"]
        if password:
            # ZooKeeper decrypts a PEM key with the keystore password and reads no password
            # for a PEM truststore; Kafka's PEM rules put the former in ssl.key.password.
            if kind != "PEM":
                settings[f"ssl.{store}.password"] = password
            elif store == "keystore":
                settings["ssl.key.password"] = password
    try:
        return client_context(settings)
    except SslConfigError as e:
        key, _, problem = str(e).partition(": ")
        raise ConfigError(f"{_ZOOKEEPER_KEYS.get(key, key)}: {problem}") from None


def _store_type(kind: str | None, location: str, store: str) -> str:
    if kind:
        return kind
    found = _STORE_TYPES_BY_SUFFIX.get(Path(location).suffix.lower())
    if found is None:
        raise ConfigError(
            f"zookeeper.ssl.{store}.type: unable to auto-detect store file type from file name "
            f"{location}: set the type (PEM or PKCS12)"
        )
    return found
