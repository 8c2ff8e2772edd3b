"""Keystores and truststores from Kafka's ``ssl.*`` keys, as Kafka's DefaultSslEngineFactory
reads them (its rules and messages): ``PEM`` files or values (KIP-651), and ``PKCS12``, also
under Kafka's default type ``JKS`` (Java 9+ reads a PKCS12 file so); a real JKS file is refused
with the keytool command that converts it. Every problem is an SslConfigError naming its key.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.hazmat.primitives.serialization import pkcs12

DEFAULT_STORE_TYPE = "JKS"  # Kafka's default ssl.keystore.type and ssl.truststore.type
_PEM_PRIVATE_KEY = re.compile(
    r"-----BEGIN ([A-Z0-9 ]*PRIVATE KEY)-----.*?-----END \1-----", re.DOTALL
)

_PEM_KEYSTORE_PASSWORD = (
    "SSL key store password cannot be specified with PEM format, only key password may be "
    "specified."
)
_JKS_MAGIC = b"\xfe\xed\xfe\xed"
_JCEKS_MAGIC = b"\xce\xce\xce\xce"


class SslConfigError(ValueError):
    """A bad ``ssl.*`` setting; the message starts with the key it names."""


def invalid_setting(key: str, problem: str) -> SslConfigError:
    """The error for a bad value of ``key``."""
    return SslConfigError(f"{key}: {problem}")


@dataclass(frozen=True)
class Keystore:
    alias: str
    key: PrivateKeyTypes
    chain: tuple[x509.Certificate, ...]  # the entity's certificate first
    source_key: str  # the setting it came from, for error messages


def _setting(settings: Mapping[str, str], key: str) -> str | None:
    value = settings.get(key)
    return value if value else None


def _store_type(settings: Mapping[str, str], key: str) -> str:
    kind = (settings.get(key) or DEFAULT_STORE_TYPE).strip().upper()
    if kind not in ("PEM", "PKCS12", "JKS"):
        raise invalid_setting(key, f"'{kind}' is not supported: use PEM or PKCS12")
    return kind


def load_keystore(settings: Mapping[str, str]) -> Keystore | None:
    """Kafka's DefaultSslEngineFactory.createKeystore rules, and the material checked."""
    kind = _store_type(settings, "ssl.keystore.type")
    location = _setting(settings, "ssl.keystore.location")
    password = _setting(settings, "ssl.keystore.password")
    key_password = _setting(settings, "ssl.key.password")
    key_pem = _setting(settings, "ssl.keystore.key")
    chain_pem = _setting(settings, "ssl.keystore.certificate.chain")
    if key_pem is not None:
        if kind != "PEM":
            raise invalid_setting(
                "ssl.keystore.key",
                f"SSL private key can be specified only for PEM, but key store type is {kind}.",
            )
        if chain_pem is None:
            raise invalid_setting(
                "ssl.keystore.certificate.chain",
                "SSL private key is specified, but certificate chain is not specified.",
            )
        if location is not None:
            raise invalid_setting(
                "ssl.keystore.location",
                "Both SSL key store location and separate private key are specified.",
            )
        if password is not None:
            raise invalid_setting(
                "ssl.keystore.password",
                _PEM_KEYSTORE_PASSWORD,
            )
        return _pem_keystore(
            chain_pem, key_pem, key_password, "ssl.keystore.key", "the ssl.keystore.key value"
        )
    if chain_pem is not None:
        raise invalid_setting(
            "ssl.keystore.key",
            "SSL certificate chain is specified, but private key is not specified",
        )
    if location is None:
        if password is not None:
            raise invalid_setting(
                "ssl.keystore.location",
                "SSL key store is not specified, but key store password is specified.",
            )
        return None
    data = _read(location, "ssl.keystore.location")
    if kind == "PEM":
        if password is not None:
            raise invalid_setting(
                "ssl.keystore.password",
                _PEM_KEYSTORE_PASSWORD,
            )
        text = data.decode("ascii", errors="replace")
        return _pem_keystore(text, text, key_password, "ssl.keystore.location", location)
    if password is None:
        raise invalid_setting(
            "ssl.keystore.password",
            "SSL key store is specified, but key store password is not specified.",
        )
    return _pkcs12_keystore(data, location, password, key_password)


def _pem_keystore(
    chain_pem: str, key_pem: str, key_password: str | None, source: str, where: str
) -> Keystore:
    chain = _pem_certificates(chain_pem, source, where)
    key = _pem_private_key(key_pem, key_password, source, where)
    return _checked(Keystore("kafka", key, tuple(chain), source), where)


def _pem_certificates(pem: str, source: str, where: str) -> list[x509.Certificate]:
    try:
        certificates = x509.load_pem_x509_certificates(pem.encode())
    except ValueError as e:
        raise invalid_setting(source, f"no valid PEM certificate in {where}: {e}") from None
    return certificates


def _pem_private_key(pem: str, password: str | None, source: str, where: str) -> PrivateKeyTypes:
    blocks = [match.group(0) for match in _PEM_PRIVATE_KEY.finditer(pem)]
    if len(blocks) != 1:
        found = "no private key" if not blocks else f"{len(blocks)} private keys"
        raise invalid_setting(source, f"expected one PEM private key in {where}, found {found}")
    try:
        return serialization.load_pem_private_key(
            blocks[0].encode(), password.encode() if password else None
        )
    except TypeError:
        if password is None:
            raise invalid_setting(
                "ssl.key.password",
                f"the private key in {where} is encrypted and ssl.key.password is not set",
            ) from None
        raise invalid_setting(
            "ssl.key.password", f"is set but the private key in {where} is not encrypted"
        ) from None
    except ValueError:
        problem = "wrong password for" if password else "cannot read"
        raise invalid_setting(
            "ssl.key.password" if password else source, f"{problem} the private key in {where}"
        ) from None
    except UnsupportedAlgorithm as e:
        raise invalid_setting(source, f"unsupported private key in {where}: {e}") from None


def _pkcs12_keystore(
    data: bytes, location: str, password: str, key_password: str | None
) -> Keystore:
    # PKCS12 protects the key with the store password; Java's keytool refuses to make them differ.
    if key_password is not None and key_password != password:
        raise invalid_setting(
            "ssl.key.password",
            f"differs from ssl.keystore.password; a PKCS12 keystore ({location}) has one password",
        )
    store = _pkcs12(data, location, password, "ssl.keystore")
    if store.key is None or store.cert is None:
        raise invalid_setting("ssl.keystore.location", f"{location} holds no private key entry")
    alias = (store.cert.friendly_name or b"").decode(errors="replace")
    chain = (store.cert.certificate, *(c.certificate for c in store.additional_certs))
    return _checked(Keystore(alias, store.key, chain, "ssl.keystore.location"), location)


def _pkcs12(
    data: bytes, location: str, password: str | None, prefix: str
) -> pkcs12.PKCS12KeyAndCertificates:
    if data[:4] in (_JKS_MAGIC, _JCEKS_MAGIC):
        kind = "JKS" if data[:4] == _JKS_MAGIC else "JCEKS"
        raise invalid_setting(
            f"{prefix}.location",
            f"{location} is a {kind} keystore, which Gregor cannot read; convert it to PKCS12 with "
            f"`keytool -importkeystore -srckeystore {location} -srcstoretype {kind} "
            f"-destkeystore {location}.p12 -deststoretype PKCS12` and point {prefix}.location "
            "at the new file",
        )
    try:
        return pkcs12.load_pkcs12(data, password.encode() if password is not None else None)
    except ValueError:
        raise invalid_setting(
            f"{prefix}.password", f"wrong password for {location}, or it is not a PKCS12 keystore"
        ) from None
    except UnsupportedAlgorithm as e:  # e.g. the RC2-40 of Java 8's keytool
        raise invalid_setting(
            f"{prefix}.location", f"{location} uses encryption that cannot be read here: {e}"
        ) from None


def _checked(keystore: Keystore, where: str) -> Keystore:
    """The key must belong to the first certificate of the chain (OpenSSL's error is cryptic)."""
    if not keystore.chain:
        raise invalid_setting(keystore.source_key, f"no certificate in {where}")
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    cert_public = keystore.chain[0].public_key().public_bytes(serialization.Encoding.DER, spki)
    if keystore.key.public_key().public_bytes(serialization.Encoding.DER, spki) != cert_public:
        raise invalid_setting(
            keystore.source_key,
            f"the private key in {where} does not match the certificate it is stored with",
        )
    return keystore


def load_truststore(settings: Mapping[str, str]) -> list[x509.Certificate] | None:
    """Kafka's DefaultSslEngineFactory.createTruststore rules."""
    kind = _store_type(settings, "ssl.truststore.type")
    location = _setting(settings, "ssl.truststore.location")
    password = _setting(settings, "ssl.truststore.password")
    inline = _setting(settings, "ssl.truststore.certificates")
    if inline is not None:
        if kind != "PEM":
            raise invalid_setting(
                "ssl.truststore.certificates",
                "SSL trust store certs can be specified only for PEM, but trust store type is "
                f"{kind}.",
            )
        if location is not None:
            raise invalid_setting(
                "ssl.truststore.location",
                "Both SSL trust store location and separate trust certificates are specified.",
            )
        if password is not None:
            raise invalid_setting(
                "ssl.truststore.password",
                "SSL trust store password cannot be specified for PEM format.",
            )
        return _pem_certificates(
            inline, "ssl.truststore.certificates", "the ssl.truststore.certificates value"
        )
    if location is None:
        if password is not None:
            raise invalid_setting(
                "ssl.truststore.location",
                "SSL trust store is not specified, but trust store password is specified.",
            )
        return None
    data = _read(location, "ssl.truststore.location")
    if kind == "PEM":
        if password is not None:
            raise invalid_setting(
                "ssl.truststore.password",
                "SSL trust store password cannot be specified for PEM format.",
            )
        return _pem_certificates(
            data.decode("ascii", errors="replace"), "ssl.truststore.location", location
        )
    store = _pkcs12(data, location, password, "ssl.truststore")
    certificates = [c.certificate for c in store.additional_certs]
    if store.cert is not None:
        certificates.insert(0, store.cert.certificate)
    if not certificates:
        raise invalid_setting("ssl.truststore.location", f"{location} holds no certificate")
    return certificates


def _read(path: str, key: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise invalid_setting(key, f"cannot read {path}: {e.strerror}") from None
