"""A listener's certificates swapped without a restart: on file change (ServerTls.maybe_reload)
and on a dynamic config update (ServerTls.update), with Kafka's identity checks."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from gregor.server.harness.certs import (
    CertificateAuthority,
    Identity,
    broker_ssl_properties,
    client_ssl_properties,
)
from gregor.server.security.tls import ServerTls, SslConfigError, client_context
from tests.tls_loopback import handshake

PASSWORD = "broker-secret"  # kept by every reissued keystore, as the settings name it
SUBJECT = "CN=broker"


@pytest.fixture
def ca(tmp_path: Path) -> CertificateAuthority:
    return CertificateAuthority(tmp_path / "ca")


@pytest.fixture
def live(ca: CertificateAuthority, tmp_path: Path) -> Path:
    """The keystore file the listener's settings point at."""
    path = tmp_path / "live.p12"
    path.write_bytes(_issue(ca, "first").pkcs12.read_bytes())
    return path


def _issue(ca: CertificateAuthority, name: str, **options: Any) -> Identity:
    """Another keystore for the broker: the same subject and password unless told."""
    return ca.server(name, **{"subject": SUBJECT, "password": PASSWORD, **options})


def _settings(ca: CertificateAuthority, keystore: Path, **extra: str) -> dict[str, str]:
    properties = broker_ssl_properties(_issue(ca, "settings"), "PKCS12")
    return {**properties, "ssl.keystore.location": str(keystore), **extra}


def _rotate(identity: Identity, live: Path) -> None:
    """As certificate tooling does: write aside, then rename over the live file."""
    staged = live.with_suffix(".staged")
    staged.write_bytes(identity.pkcs12.read_bytes())
    os.replace(staged, live)


def _served_certificate(tls: ServerTls, ca: CertificateAuthority) -> x509.Certificate:
    outcome = handshake(tls.context, client_context(client_ssl_properties(ca.truststore)))
    assert outcome.ok, outcome
    assert outcome.server_certificate is not None
    return x509.load_der_x509_certificate(outcome.server_certificate)


def _der(identity: Identity) -> bytes:
    cert = x509.load_pem_x509_certificates(identity.cert.read_bytes())[0]
    return cert.public_bytes(serialization.Encoding.DER)


def _served(tls: ServerTls, ca: CertificateAuthority) -> bytes:
    return _served_certificate(tls, ca).public_bytes(serialization.Encoding.DER)


def test_a_changed_keystore_file_is_served_after_reload(
    ca: CertificateAuthority, live: Path
) -> None:
    tls = ServerTls(_settings(ca, live))
    assert not tls.maybe_reload()  # nothing changed
    before = tls.context
    renewed = _issue(ca, "renewed")  # same DN and SANs, new key
    _rotate(renewed, live)
    assert tls.maybe_reload()
    assert tls.context is not before
    assert _served(tls, ca) == _der(renewed)
    assert not tls.maybe_reload()


def test_a_keystore_with_another_dn_is_refused_and_logged_once(
    ca: CertificateAuthority, live: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tls = ServerTls(_settings(ca, live))
    before, served = tls.context, _served(tls, ca)
    _rotate(_issue(ca, "intruder", subject="CN=intruder"), live)
    with caplog.at_level(logging.ERROR, logger="gregor.server.security.tls"):
        assert not tls.maybe_reload()
        assert not tls.maybe_reload()
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert "Keystore DistinguishedName does not match" in errors[0].getMessage()
    assert "existing={alias=first, DN=CN=broker}, new={alias=intruder, DN=CN=intruder}" in (
        errors[0].getMessage()
    )
    assert tls.context is before
    assert _served(tls, ca) == served
    # a good file afterwards is taken
    renewed = _issue(ca, "renewed")
    _rotate(renewed, live)
    assert tls.maybe_reload()
    assert _served(tls, ca) == _der(renewed)


def test_a_broken_file_keeps_the_current_certificate(
    ca: CertificateAuthority, live: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tls = ServerTls(_settings(ca, live))
    served = _served(tls, ca)
    live.write_bytes(b"half a keystore")
    with caplog.at_level(logging.ERROR, logger="gregor.server.security.tls"):
        assert not tls.maybe_reload()
        assert not tls.maybe_reload()
    assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 1
    assert _served(tls, ca) == served


def test_allow_dn_changes(ca: CertificateAuthority, live: Path) -> None:
    tls = ServerTls(_settings(ca, live, **{"ssl.allow.dn.changes": "true"}))
    other = _issue(ca, "other", subject="CN=other")
    _rotate(other, live)
    assert tls.maybe_reload()
    assert _served(tls, ca) == _der(other)


def test_update_checks_subject_alt_names(ca: CertificateAuthority, live: Path) -> None:
    tls = ServerTls(_settings(ca, live))
    fewer = _issue(ca, "fewer", hosts=["localhost"])
    before = tls.context
    with pytest.raises(SslConfigError) as refused:
        tls.update({"ssl.keystore.location": str(fewer.pkcs12), "ssl.keystore.password": PASSWORD})
    message = str(refused.value)
    assert message.startswith(
        "ssl.keystore.location: Validation of dynamic config update of SSLFactory failed: "
        "Keystore SubjectAltNames do not match"
    )
    assert "SAN=[[2, localhost], [7, 127.0.0.1]]" in message
    assert tls.context is before
    more = _issue(ca, "more", hosts=["localhost", "127.0.0.1", "broker.example"])
    tls.update({"ssl.keystore.location": str(more.pkcs12), "ssl.keystore.password": PASSWORD})
    assert _served(tls, ca) == _der(more)


def test_update_validates_before_swapping(ca: CertificateAuthority, live: Path) -> None:
    tls = ServerTls(_settings(ca, live))
    before = tls.context
    renewed = _issue(ca, "renewed", password="another-secret")
    with pytest.raises(SslConfigError, match="ssl.keystore.password: wrong password"):
        tls.update(
            {"ssl.keystore.location": str(renewed.pkcs12), "ssl.keystore.password": PASSWORD}
        )
    assert tls.context is before
    # non-reconfigurable keys keep their value, as in Kafka's SslFactory
    tls.update(
        {
            "ssl.keystore.location": str(renewed.pkcs12),
            "ssl.keystore.password": "another-secret",
            "ssl.enabled.protocols": "TLSv9",
        }
    )
    assert tls.context is not before
    assert _served(tls, ca) == _der(renewed)


def test_update_cannot_add_a_truststore(ca: CertificateAuthority, live: Path) -> None:
    settings = {
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(live),
        "ssl.keystore.password": PASSWORD,
    }
    tls = ServerTls(settings)
    with pytest.raises(SslConfigError, match="Cannot add SSL truststore to an existing listener"):
        tls.update(
            {
                **settings,
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(ca.truststore.pem),
            }
        )
