"""Certificates for tests and throw-away secured clusters: a CA, and server and client
identities it signs, written as PEM files (keys encrypted) and password-protected PKCS12
keystores and truststores, with the Kafka ``ssl.*`` properties that use them::

    ca = CertificateAuthority(tmp_path / "tls")
    broker = ca.server("broker")                      # SANs localhost, 127.0.0.1
    alice = ca.client("alice", subject="CN=alice,O=Gregor")
    server_props = broker_ssl_properties(broker, form="PEM", client_auth="required")
    client_props = client_ssl_properties(ca.truststore, identity=alice)

Keys are EC P-256 (fast to make; every Kafka client supports them). Only ``cryptography``.
Encrypted PEM keys use PBES2 (AES-256), which Java before 21 cannot read the way Kafka reads
them (``EncryptedPrivateKeyInfo.getAlgName()`` says "PBES2"): give Java 17 clients the PKCS12
form, or ``encrypt_key=False``.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID

StoreForm = Literal["PEM", "PKCS12"]
_DAY = datetime.timedelta(days=1)


@dataclass(frozen=True)
class Truststore:
    pem: Path  # the CA certificate
    pkcs12: Path  # the same as a Java truststore (a trusted-certificate entry)
    password: str


@dataclass(frozen=True)
class Identity:
    name: str
    subject: str  # as given (RFC 4514)
    cert: Path  # PEM: this certificate, then the CA's
    key: Path  # PEM PKCS#8 private key, encrypted with key_password unless it is None
    key_password: str | None
    pem_keystore: Path  # key and chain in one file: ssl.keystore.type=PEM's location
    pkcs12: Path  # PKCS12 keystore: the key entry (alias = name) and the chain
    password: str  # of the PKCS12 keystore
    truststore: Truststore  # the issuing CA's


class CertificateAuthority:
    """A self-signed CA whose files live in ``directory`` (created if needed)."""

    def __init__(
        self, directory: Path | str, name: str = "Gregor test CA", days: int = 365
    ) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._days = days
        self._key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, name)])
        public = self._key.public_key()
        self.certificate = (
            _builder(subject, subject, public, days)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_key_usage(cert_sign=True), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        password = secrets.token_urlsafe(12)
        pem = self.directory / "ca.pem"
        pem.write_bytes(self.certificate.public_bytes(serialization.Encoding.PEM))
        store = self.directory / "truststore.p12"
        store.write_bytes(
            pkcs12.serialize_java_truststore(
                [pkcs12.PKCS12Certificate(self.certificate, b"ca")],
                serialization.BestAvailableEncryption(password.encode()),
            )
        )
        self.truststore = Truststore(pem, store, password)

    def server(
        self,
        name: str,
        hosts: Sequence[str] = ("localhost", "127.0.0.1"),
        subject: str | None = None,
        encrypt_key: bool = True,
        password: str | None = None,
    ) -> Identity:
        """A broker's identity: SANs for ``hosts`` (names or IP addresses), usable as TLS
        server and as client (brokers connect to each other)."""
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        usages = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
        return self._issue(name, subject or f"CN={name}", names, usages, encrypt_key, password)

    def client(
        self,
        name: str,
        subject: str | None = None,
        encrypt_key: bool = True,
        password: str | None = None,
    ) -> Identity:
        """A client's identity. ``subject`` is an RFC 4514 string, written as Java prints a
        DN (most specific first: ``CN=alice,O=Example``), which is then its principal."""
        usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
        return self._issue(name, subject or f"CN={name}", [], usages, encrypt_key, password)

    def _issue(
        self,
        name: str,
        subject: str,
        alt_names: list[x509.GeneralName],
        usages: list[x509.ObjectIdentifier],
        encrypt_key: bool,
        password: str | None,
    ) -> Identity:
        """``password`` (random if None) protects the PKCS12 keystore and the PEM key."""
        password = password or secrets.token_urlsafe(12)
        key = ec.generate_private_key(ec.SECP256R1())
        public = key.public_key()
        builder = (
            _builder(
                x509.Name.from_rfc4514_string(subject), self.certificate.subject, public, self._days
            )
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(cert_sign=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
        )
        if alt_names:
            builder = builder.add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        chain_pem = b"".join(
            c.public_bytes(serialization.Encoding.PEM) for c in (cert, self.certificate)
        )
        key_password = password if encrypt_key else None
        key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(key_password.encode())
            if key_password
            else serialization.NoEncryption(),
        )
        keystore = pkcs12.serialize_key_and_certificates(
            name.encode(),
            key,
            cert,
            [self.certificate],
            serialization.BestAvailableEncryption(password.encode()),
        )
        paths = {
            suffix: self.directory / f"{name}{suffix}"
            for suffix in (".pem", "-key.pem", "-keystore.pem", ".p12")
        }
        paths[".pem"].write_bytes(chain_pem)
        _write_private(paths["-key.pem"], key_pem)
        _write_private(paths["-keystore.pem"], key_pem + chain_pem)
        _write_private(paths[".p12"], keystore)
        return Identity(
            name=name,
            subject=subject,
            cert=paths[".pem"],
            key=paths["-key.pem"],
            key_password=key_password,
            pem_keystore=paths["-keystore.pem"],
            pkcs12=paths[".p12"],
            password=password,
            truststore=self.truststore,
        )


def broker_ssl_properties(
    identity: Identity, form: StoreForm = "PKCS12", client_auth: str = "none"
) -> dict[str, str]:
    """A broker's (or a listener's) ``ssl.*`` server.properties for ``identity``."""
    return {
        **_keystore_properties(identity, form),
        **_truststore_properties(identity.truststore, form),
        "ssl.client.auth": client_auth,
    }


def client_ssl_properties(
    truststore: Truststore, identity: Identity | None = None, form: StoreForm = "PKCS12"
) -> dict[str, str]:
    """A client's ``ssl.*`` properties: trust the CA, and present ``identity`` (mutual TLS)
    if given. Add ``security.protocol`` (SSL or SASL_SSL) yourself."""
    properties = _truststore_properties(truststore, form)
    if identity is not None:
        properties.update(_keystore_properties(identity, form))
    return properties


def _keystore_properties(identity: Identity, form: StoreForm) -> dict[str, str]:
    if form == "PKCS12":
        return {
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(identity.pkcs12),
            "ssl.keystore.password": identity.password,
        }
    properties = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(identity.pem_keystore)}
    if identity.key_password is not None:
        properties["ssl.key.password"] = identity.key_password
    return properties


def _truststore_properties(truststore: Truststore, form: StoreForm) -> dict[str, str]:
    if form == "PKCS12":
        return {
            "ssl.truststore.type": "PKCS12",
            "ssl.truststore.location": str(truststore.pkcs12),
            "ssl.truststore.password": truststore.password,
        }
    return {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(truststore.pem)}


def _builder(
    subject: x509.Name, issuer: x509.Name, public: ec.EllipticCurvePublicKey, days: int
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _DAY)  # tolerates a clock a little behind
        .not_valid_after(now + days * _DAY)
    )


def _key_usage(cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=not cert_sign,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _write_private(path: Path, data: bytes) -> None:
    """Written readable by the owner only (the file is created with that mode)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
