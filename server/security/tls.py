"""TLS contexts for one listener (server) or one connection to a broker (client), built from
Kafka's ``ssl.*`` keys with Kafka's defaults, and the listener's certificate reload. The stores
are read by ``ssl_stores``.

Python's ``ssl`` only loads a private key from a file. Keys are decrypted with ``cryptography``,
re-encrypted under a random one-time password and handed to OpenSSL through an anonymous
in-memory file (``memfd_create``; where that is missing, a private 0700 directory removed at
once), so no private key ever reaches a disk unencrypted.

Cipher suites take Kafka's (IANA) names. TLS 1.2 suites map to OpenSSL's names. Python's ``ssl``
cannot choose among TLS 1.3 suites (it has no ``SSL_CTX_set_ciphersuites``): listing any of
them keeps all of OpenSSL's TLS 1.3 suites, with a warning when the list leaves some out; a list
with no TLS 1.3 suite disables TLS 1.3, and a list with only TLS 1.3 suites disables TLS 1.2.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import ssl
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from gregor.server.security.ssl_principal import distinguished_name
from gregor.server.security.ssl_stores import (
    Keystore,
    SslConfigError,
    invalid_setting,
    load_keystore,
    load_truststore,
)

__all__ = ["ServerTls", "SslConfigError", "client_context", "server_context"]

log = logging.getLogger(__name__)

# Kafka's defaults (SslConfigs, BrokerSecurityConfigs).
DEFAULT_PROTOCOL = "TLSv1.3"
DEFAULT_ENABLED_PROTOCOLS = "TLSv1.2,TLSv1.3"
DEFAULT_ENDPOINT_IDENTIFICATION = "https"

# Kafka's SslConfigs.RECONFIGURABLE_CONFIGS: what a dynamic update of a listener may change.
RECONFIGURABLE_KEYS = frozenset(
    {
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.keystore.password",
        "ssl.key.password",
        "ssl.keystore.certificate.chain",
        "ssl.keystore.key",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.truststore.password",
        "ssl.truststore.certificates",
    }
)

_VERSIONS = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
_ORDER = list(_VERSIONS)
_CONTEXT_PROTOCOLS = {"TLS", "TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3", "SSL"}
_CLIENT_AUTH = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}

# IANA name -> OpenSSL name, from `openssl ciphers -stdname` (OpenSSL 3.0) for TLS 1.2.
_TLS12_SUITES = {
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384": "DHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "DHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256": "DHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA384": "ECDHE-ECDSA-AES256-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384": "ECDHE-RSA-AES256-SHA384",
    "TLS_DHE_RSA_WITH_AES_256_CBC_SHA256": "DHE-RSA-AES256-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
    "TLS_DHE_RSA_WITH_AES_128_CBC_SHA256": "DHE-RSA-AES128-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_DHE_RSA_WITH_AES_256_CBC_SHA": "DHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_DHE_RSA_WITH_AES_128_CBC_SHA": "DHE-RSA-AES128-SHA",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_CBC_SHA256": "AES256-SHA256",
    "TLS_RSA_WITH_AES_128_CBC_SHA256": "AES128-SHA256",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
}
# OpenSSL's default TLS 1.3 suites, all of which stay enabled whatever the list says.
_TLS13_DEFAULT = (
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
    "TLS_AES_128_GCM_SHA256",
)
_TLS13_SUITES = frozenset({*_TLS13_DEFAULT, "TLS_AES_128_CCM_SHA256", "TLS_AES_128_CCM_8_SHA256"})


def server_context(settings: Mapping[str, str]) -> ssl.SSLContext:
    """The SSLContext of a TLS listener."""
    return _server_context(settings, _server_keystore(settings), load_truststore(settings))


def client_context(settings: Mapping[str, str]) -> ssl.SSLContext:
    """The SSLContext of a client: truststore (the system's CAs without one), keystore for
    mutual TLS, hostname verification per ``ssl.endpoint.identification.algorithm``."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _apply_protocols(context, settings, client=True)
    algorithm = settings.get(
        "ssl.endpoint.identification.algorithm", DEFAULT_ENDPOINT_IDENTIFICATION
    )
    if algorithm.lower() not in ("https", ""):
        raise invalid_setting(
            "ssl.endpoint.identification.algorithm",
            f"'{algorithm}' is not supported: use https or an empty value",
        )
    context.check_hostname = algorithm != ""
    truststore = load_truststore(settings)
    if truststore is None:
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    else:
        _load_trusted(context, truststore)
    keystore = load_keystore(settings)
    if keystore is not None:
        _load_key_pair(context, keystore)
    return context


class ServerTls:
    """A listener's TLS context, rebuilt when its keystore or truststore files change
    (``maybe_reload``) or on a dynamic config update (``update``), with Kafka's checks."""

    def __init__(self, settings: Mapping[str, str]) -> None:
        self._settings = dict(settings)
        self._keystore = _server_keystore(settings)
        self._truststore = load_truststore(settings)
        self.context = _server_context(settings, self._keystore, self._truststore)
        self._files = _file_state(settings)
        self._failed_files: tuple[object, ...] | None = None

    def maybe_reload(self) -> bool:
        """Swaps in a new context if the store files changed and hold valid material; a bad
        new file keeps the current context and logs one error (until the files change again)."""
        files = _file_state(self._settings)
        if files == self._files or files == self._failed_files:
            return False
        try:
            self._rebuild(self._settings, files)
        except SslConfigError as e:
            self._failed_files = files
            log.error(
                "Keeping the current TLS certificates: the changed files are not usable: %s", e
            )
            return False
        log.info("Reloaded TLS keystore/truststore from changed files")
        return True

    def update(self, settings: Mapping[str, str]) -> None:
        """Takes the listener's full resolved settings after a dynamic change: the
        reconfigurable ``ssl.*`` keys take their new values (a missing one is unset), the others
        keep the current ones, as in Kafka's SslFactory. Raises SslConfigError and keeps the
        current context if the new material is unusable or changes the certificate's identity."""
        merged = {k: v for k, v in self._settings.items() if k not in RECONFIGURABLE_KEYS}
        merged.update((k, v) for k, v in settings.items() if k in RECONFIGURABLE_KEYS)
        files = _file_state(merged)
        if merged == self._settings and files == self._files:
            return
        self._rebuild(merged, files)

    def _rebuild(self, settings: dict[str, str], files: tuple[object, ...]) -> None:
        keystore = _server_keystore(settings)
        truststore = load_truststore(settings)
        context = _server_context(settings, keystore, truststore)
        if self._truststore is None and truststore is not None:
            raise _update_failed(
                "ssl.truststore.location",
                "Cannot add SSL truststore to an existing listener for which no truststore "
                "was configured.",
            )
        _ensure_compatible(self._keystore, keystore, settings)
        self._settings, self._keystore, self._truststore, self._files = (
            settings,
            keystore,
            truststore,
            files,
        )
        self._failed_files = None
        self.context = context


def _update_failed(key: str, problem: str) -> SslConfigError:
    return invalid_setting(
        key, f"Validation of dynamic config update of SSLFactory failed: {problem}"
    )


def _ensure_compatible(old: Keystore, new: Keystore, settings: Mapping[str, str]) -> None:
    """Kafka's SslFactory check: the new certificate keeps the subject DN
    (``ssl.allow.dn.changes``) and every SubjectAltName (``ssl.allow.san.changes``)."""
    old_cert, new_cert = old.chain[0], new.chain[0]
    if not _flag(settings, "ssl.allow.dn.changes"):
        old_dn = distinguished_name(old_cert.public_bytes(serialization.Encoding.DER))
        new_dn = distinguished_name(new_cert.public_bytes(serialization.Encoding.DER))
        if old_dn.lower() != new_dn.lower():
            raise _update_failed(
                new.source_key,
                "Keystore DistinguishedName does not match:  "
                f"existing={{alias={old.alias}, DN={old_dn}}}, "
                f"new={{alias={new.alias}, DN={new_dn}}}",
            )
    if not _flag(settings, "ssl.allow.san.changes"):
        old_sans, new_sans = _subject_alt_names(old_cert), _subject_alt_names(new_cert)
        if not old_sans <= new_sans:
            raise _update_failed(
                new.source_key,
                "Keystore SubjectAltNames do not match:  "
                f"existing={{alias={old.alias}, SAN={_format_sans(old_sans)}}}, "
                f"new={{alias={new.alias}, SAN={_format_sans(new_sans)}}}",
            )


def _flag(settings: Mapping[str, str], key: str) -> bool:
    value = settings.get(key, "false").strip().lower()
    if value not in ("true", "false"):
        raise invalid_setting(key, f"'{value}' is not a boolean")
    return value == "true"


def _subject_alt_names(cert: x509.Certificate) -> frozenset[tuple[int, str]]:
    """As Java's getSubjectAlternativeNames(): (GeneralName tag, value) pairs."""
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return frozenset()
    out = set()
    for name in names:
        if isinstance(name, x509.DNSName):
            out.add((2, name.value))
        elif isinstance(name, x509.IPAddress):
            out.add((7, str(name.value)))
        elif isinstance(name, x509.RFC822Name):
            out.add((1, name.value))
        elif isinstance(name, x509.UniformResourceIdentifier):
            out.add((6, name.value))
        elif isinstance(name, x509.RegisteredID):
            out.add((8, name.value.dotted_string))
        elif isinstance(name, x509.DirectoryName):
            out.add((4, name.value.rfc4514_string()))
        elif isinstance(name, x509.OtherName):
            out.add((0, name.type_id.dotted_string + ":" + name.value.hex()))
    return frozenset(out)


def _format_sans(sans: Iterable[tuple[int, str]]) -> str:
    return "[" + ", ".join(f"[{tag}, {value}]" for tag, value in sorted(sans)) + "]"


def _file_state(settings: Mapping[str, str]) -> tuple[object, ...]:
    """What a cheap stat says of the store files: changes when a file is rewritten or replaced."""
    state: list[object] = []
    for key in ("ssl.keystore.location", "ssl.truststore.location"):
        path = settings.get(key, "")
        try:
            st = os.stat(path) if path else None
        except OSError:
            state.append((path, "missing"))
            continue
        state.append(None if st is None else (path, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(state)


# --- building contexts --------------------------------------------------------------------


def _server_keystore(settings: Mapping[str, str]) -> Keystore:
    keystore = load_keystore(settings)
    if keystore is None:
        raise invalid_setting(
            "ssl.keystore.location",
            "a TLS listener needs a keystore (ssl.keystore.location, or "
            "ssl.keystore.certificate.chain and ssl.keystore.key with ssl.keystore.type=PEM)",
        )
    return keystore


def _server_context(
    settings: Mapping[str, str], keystore: Keystore, truststore: list[x509.Certificate] | None
) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _apply_protocols(context, settings, client=False)
    client_auth = settings.get("ssl.client.auth", "none").strip().lower()
    if client_auth not in _CLIENT_AUTH:
        raise invalid_setting(
            "ssl.client.auth", f"'{client_auth}' is not one of required, requested, none"
        )
    context.verify_mode = _CLIENT_AUTH[client_auth]
    if truststore is not None:
        _load_trusted(context, truststore)
    elif client_auth != "none":
        context.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    _load_key_pair(context, keystore)
    return context


def _apply_protocols(context: ssl.SSLContext, settings: Mapping[str, str], *, client: bool) -> None:
    protocol = settings.get("ssl.protocol", DEFAULT_PROTOCOL).strip()
    if protocol not in _CONTEXT_PROTOCOLS:
        raise invalid_setting(
            "ssl.protocol", f"'{protocol}' is not supported: use TLSv1.3 or TLSv1.2"
        )
    enabled = _list(settings.get("ssl.enabled.protocols") or DEFAULT_ENABLED_PROTOCOLS)
    for name in enabled:
        if name not in _VERSIONS:
            raise invalid_setting(
                "ssl.enabled.protocols", f"'{name}' is not supported: use TLSv1.2 and/or TLSv1.3"
            )
    positions = sorted(_ORDER.index(name) for name in enabled)
    if positions != list(range(positions[0], positions[-1] + 1)):
        raise invalid_setting(
            "ssl.enabled.protocols",
            f"{','.join(enabled)} leaves a gap: Python's ssl enables a range of versions",
        )
    low, high = positions[0], positions[-1]
    # Kafka's doc: a client whose ssl.protocol is TLSv1.2 does not use TLSv1.3 even if enabled.
    if client and protocol in _VERSIONS:
        high = min(high, _ORDER.index(protocol))
    suites = _list(settings.get("ssl.cipher.suites", ""))
    if suites:
        low, high = _apply_cipher_suites(context, suites, low, high)
    if low > high:
        raise invalid_setting(
            "ssl.enabled.protocols", "no enabled protocol can use the configured ssl.cipher.suites"
        )
    context.minimum_version = _VERSIONS[_ORDER[low]]
    context.maximum_version = _VERSIONS[_ORDER[high]]


def _apply_cipher_suites(
    context: ssl.SSLContext, suites: list[str], low: int, high: int
) -> tuple[int, int]:
    tls13 = [s for s in suites if s in _TLS13_SUITES]
    unknown = [s for s in suites if s not in _TLS12_SUITES and s not in tls13]
    if unknown:
        raise invalid_setting(
            "ssl.cipher.suites", f"unsupported cipher suite(s): {', '.join(unknown)}"
        )
    tls12 = [_TLS12_SUITES[s] for s in suites if s in _TLS12_SUITES]
    tls13_index = _ORDER.index("TLSv1.3")
    if tls12:
        context.set_ciphers(":".join(tls12))
    else:
        low = max(low, tls13_index)
    if not tls13:
        high = min(high, tls13_index - 1)
    elif set(_TLS13_DEFAULT) - set(tls13):
        log.warning(
            "ssl.cipher.suites lists only some TLS 1.3 suites; Python's ssl cannot restrict "
            "them, so %s stay enabled",
            ", ".join(_TLS13_DEFAULT),
        )
    return low, high


def _list(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def _load_trusted(context: ssl.SSLContext, certificates: list[x509.Certificate]) -> None:
    pem = "".join(cert.public_bytes(serialization.Encoding.PEM).decode() for cert in certificates)
    context.load_verify_locations(cadata=pem)


def _load_key_pair(context: ssl.SSLContext, keystore: Keystore) -> None:
    """Hands the key and chain to OpenSSL encrypted under a one-time password, via memory."""
    password = secrets.token_hex(32)
    pem = b"".join(cert.public_bytes(serialization.Encoding.PEM) for cert in keystore.chain)
    pem += keystore.key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(password.encode()),
    )
    try:
        if hasattr(os, "memfd_create"):
            fd = os.memfd_create("gregor-tls-keystore", os.MFD_CLOEXEC)
            try:
                os.write(fd, pem)
                context.load_cert_chain(f"/proc/self/fd/{fd}", password=password)
            finally:
                os.close(fd)
        else:
            directory = tempfile.mkdtemp(prefix="gregor-tls-")  # mode 0700
            try:
                path = Path(directory, "keystore.pem")
                path.write_bytes(pem)
                context.load_cert_chain(path, password=password)
            finally:
                shutil.rmtree(directory, ignore_errors=True)
    except ssl.SSLError as e:
        raise invalid_setting(
            keystore.source_key, f"OpenSSL refused the key or certificate: {e}"
        ) from None
