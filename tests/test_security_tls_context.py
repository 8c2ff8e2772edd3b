"""TLS contexts from Kafka's ssl.* keys, checked with real handshakes over loopback."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path

import pytest

from gregor.server.harness.certs import (
    CertificateAuthority,
    Identity,
    broker_ssl_properties,
    client_ssl_properties,
)
from gregor.server.security.tls import SslConfigError, client_context, server_context
from tests.tls_loopback import handshake

ALICE_DN = "CN=alice,OU=eng,O=Gregor"


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> CertificateAuthority:
    return CertificateAuthority(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def broker(ca: CertificateAuthority) -> Identity:
    return ca.server("broker")


@pytest.fixture(scope="module")
def alice(ca: CertificateAuthority) -> Identity:
    return ca.client("alice", subject=ALICE_DN)


def _inline_pem(identity: Identity) -> dict[str, str]:
    return {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.certificate.chain": identity.cert.read_text(),
        "ssl.keystore.key": identity.key.read_text(),
        "ssl.key.password": identity.key_password or "",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.certificates": identity.truststore.pem.read_text(),
    }


def _as_jks(properties: dict[str, str]) -> dict[str, str]:
    """A PKCS12 file under Kafka's default type, JKS, as Java 9+ reads it."""
    return {k: "JKS" if k.endswith(".type") else v for k, v in properties.items()}


def _without_types(properties: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in properties.items() if not k.endswith(".type")}


FORMS = {
    "PKCS12": lambda i: broker_ssl_properties(i, "PKCS12"),
    "PEM file": lambda i: broker_ssl_properties(i, "PEM"),
    "PEM inline": _inline_pem,
    "JKS type": lambda i: _as_jks(broker_ssl_properties(i, "PKCS12")),
    "default type": lambda i: _without_types(broker_ssl_properties(i, "PKCS12")),
}


@pytest.mark.parametrize("form", FORMS)
def test_every_keystore_form_serves_and_connects(
    form: str, broker: Identity, alice: Identity, ca: CertificateAuthority
) -> None:
    server = server_context({**FORMS[form](broker), "ssl.client.auth": "required"})
    client = client_context(FORMS[form](alice))
    outcome = handshake(server, client)
    assert outcome.ok, outcome
    assert outcome.version == "TLSv1.3"  # Kafka's default protocols, the best first
    assert outcome.principal == f"User:{ALICE_DN}"


def test_unencrypted_pem_key(ca: CertificateAuthority) -> None:
    plain = ca.server("plain", encrypt_key=False)
    assert plain.key_password is None
    assert b"ENCRYPTED" not in plain.key.read_bytes()
    settings = broker_ssl_properties(plain, "PEM")
    assert "ssl.key.password" not in settings
    assert handshake(server_context(settings), client_context(settings)).ok


def _refused(settings: dict[str, str], key: str, problem: str, *, client: bool = False) -> None:
    with pytest.raises(SslConfigError) as refused:
        (client_context if client else server_context)(settings)
    assert str(refused.value).startswith(f"{key}: ")
    assert problem in str(refused.value)


def test_wrong_passwords_and_bad_files_name_the_key(
    ca: CertificateAuthority, broker: Identity, alice: Identity, tmp_path: Path
) -> None:
    pkcs12 = broker_ssl_properties(broker, "PKCS12")
    pem = broker_ssl_properties(broker, "PEM")
    _refused(
        {**pkcs12, "ssl.keystore.password": "wrong"}, "ssl.keystore.password", "wrong password"
    )
    _refused(
        {**pkcs12, "ssl.truststore.password": "wrong"}, "ssl.truststore.password", "wrong password"
    )
    _refused({**pem, "ssl.key.password": "wrong"}, "ssl.key.password", "wrong password")
    without_password = {k: v for k, v in pem.items() if k != "ssl.key.password"}
    _refused(without_password, "ssl.key.password", "is encrypted and ssl.key.password is not set")
    _refused(
        {**pkcs12, "ssl.keystore.location": str(tmp_path / "missing.p12")},
        "ssl.keystore.location",
        "cannot read",
    )
    _refused(
        {**pkcs12, "ssl.keystore.password": ""},
        "ssl.keystore.password",
        "key store password is not",
    )
    _refused(
        {**pem, "ssl.keystore.password": "x"},
        "ssl.keystore.password",
        "SSL key store password cannot be specified with PEM format",
    )
    _refused({}, "ssl.keystore.location", "a TLS listener needs a keystore")
    mismatched = tmp_path / "mismatched.pem"
    mismatched.write_bytes(alice.key.read_bytes() + broker.cert.read_bytes())
    _refused(
        {
            **pem,
            "ssl.keystore.location": str(mismatched),
            "ssl.key.password": alice.key_password or "",
        },
        "ssl.keystore.location",
        "does not match the certificate",
    )
    chain_only = {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.certificate.chain": broker.cert.read_text(),
    }
    _refused(chain_only, "ssl.keystore.key", "private key is not specified")
    _refused({**pkcs12, "ssl.keystore.type": "BCFKS"}, "ssl.keystore.type", "not supported")
    _refused({**pkcs12, "ssl.client.auth": "sometimes"}, "ssl.client.auth", "not one of")


@pytest.mark.parametrize(
    ("client_auth", "with_certificate", "principal"),
    [
        ("required", True, f"User:{ALICE_DN}"),
        ("requested", True, f"User:{ALICE_DN}"),
        ("requested", False, "User:ANONYMOUS"),
        ("none", True, "User:ANONYMOUS"),  # not asked for, so not sent
        ("none", False, "User:ANONYMOUS"),
    ],
)
def test_client_auth(
    client_auth: str,
    with_certificate: bool,
    principal: str,
    broker: Identity,
    alice: Identity,
    ca: CertificateAuthority,
) -> None:
    server = server_context(broker_ssl_properties(broker, client_auth=client_auth))
    client = client_context(
        client_ssl_properties(ca.truststore, alice if with_certificate else None)
    )
    outcome = handshake(server, client)
    assert outcome.ok, outcome
    assert outcome.principal == principal


def test_required_client_auth_refuses_a_client_without_or_with_an_untrusted_certificate(
    broker: Identity, ca: CertificateAuthority, tmp_path: Path
) -> None:
    server = server_context(broker_ssl_properties(broker, client_auth="required"))
    anonymous = handshake(server, client_context(client_ssl_properties(ca.truststore)))
    assert anonymous.principal is None
    assert isinstance(anonymous.server_error, ssl.SSLError)
    assert anonymous.client_error is not None
    stranger = CertificateAuthority(tmp_path / "other").client("mallory")
    untrusted = handshake(server, client_context(client_ssl_properties(ca.truststore, stranger)))
    assert untrusted.principal is None
    assert isinstance(untrusted.server_error, ssl.SSLError)


def test_mapping_rules_apply_to_the_certificate(
    broker: Identity, alice: Identity, ca: CertificateAuthority
) -> None:
    server = server_context(broker_ssl_properties(broker, client_auth="required"))
    client = client_context(client_ssl_properties(ca.truststore, alice))
    outcome = handshake(server, client, mapping_rules="RULE:^CN=([^,]*),.*$/$1/U,DEFAULT")
    assert outcome.principal == "User:ALICE"


def test_hostname_verification(broker: Identity, ca: CertificateAuthority) -> None:
    server = server_context(broker_ssl_properties(broker))
    verifying = client_context(client_ssl_properties(ca.truststore))
    assert handshake(server, verifying, server_hostname="127.0.0.1").ok  # an IP SAN
    wrong = handshake(server, verifying, server_hostname="elsewhere.example")
    assert isinstance(wrong.client_error, ssl.SSLCertVerificationError)
    assert "elsewhere.example" in str(wrong.client_error)
    lax = client_context(
        {**client_ssl_properties(ca.truststore), "ssl.endpoint.identification.algorithm": ""}
    )
    assert handshake(server, lax, server_hostname="elsewhere.example").ok
    _refused(
        {"ssl.endpoint.identification.algorithm": "ldaps"},
        "ssl.endpoint.identification.algorithm",
        "not supported",
        client=True,
    )


def test_an_untrusted_server_is_refused(broker: Identity, tmp_path: Path) -> None:
    other = CertificateAuthority(tmp_path / "other")
    outcome = handshake(
        server_context(broker_ssl_properties(broker)),
        client_context(client_ssl_properties(other.truststore)),
    )
    assert isinstance(outcome.client_error, ssl.SSLCertVerificationError)


def test_enabled_protocols(broker: Identity, ca: CertificateAuthority) -> None:
    tls13_only = server_context(
        {**broker_ssl_properties(broker), "ssl.enabled.protocols": "TLSv1.3"}
    )
    tls12_client = client_context(
        {**client_ssl_properties(ca.truststore), "ssl.enabled.protocols": "TLSv1.2"}
    )
    refused = handshake(tls13_only, tls12_client)
    assert isinstance(refused.server_error, ssl.SSLError)
    assert isinstance(refused.client_error, ssl.SSLError)
    assert refused.principal is None
    default_server = server_context(broker_ssl_properties(broker))
    assert handshake(default_server, tls12_client).version == "TLSv1.2"
    # Kafka: a client whose ssl.protocol is TLSv1.2 does not use TLSv1.3
    capped = client_context({**client_ssl_properties(ca.truststore), "ssl.protocol": "TLSv1.2"})
    assert handshake(default_server, capped).version == "TLSv1.2"
    properties = broker_ssl_properties(broker)
    _refused({**properties, "ssl.enabled.protocols": "SSLv3"}, "ssl.enabled.protocols", "SSLv3")
    _refused(
        {**properties, "ssl.enabled.protocols": "TLSv1.1,TLSv1.3"}, "ssl.enabled.protocols", "gap"
    )
    _refused({**properties, "ssl.protocol": "TLSv9"}, "ssl.protocol", "TLSv9")


def test_cipher_suites_take_kafkas_names(broker: Identity, ca: CertificateAuthority) -> None:
    suite = "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"
    server = server_context({**broker_ssl_properties(broker), "ssl.cipher.suites": suite})
    outcome = handshake(server, client_context(client_ssl_properties(ca.truststore)))
    assert outcome.ok, outcome
    # no TLS 1.3 suite listed: TLS 1.3 is off, and TLS 1.2 uses the one suite
    assert (outcome.version, outcome.cipher) == ("TLSv1.2", "ECDHE-ECDSA-AES128-GCM-SHA256")
    only_tls13 = server_context(
        {**broker_ssl_properties(broker), "ssl.cipher.suites": "TLS_AES_256_GCM_SHA384"}
    )
    assert only_tls13.minimum_version == ssl.TLSVersion.TLSv1_3
    _refused(
        {**broker_ssl_properties(broker), "ssl.cipher.suites": "TLS_NOT_A_SUITE"},
        "ssl.cipher.suites",
        "TLS_NOT_A_SUITE",
    )


def test_keytool_stores(tmp_path: Path) -> None:
    def keytool(store: Path, store_type: str) -> None:
        subprocess.run(
            ["keytool", "-genkeypair", "-keystore", str(store), "-storetype", store_type,
             "-storepass", "secret12", "-keypass", "secret12", "-alias", "broker",
             "-keyalg", "EC", "-dname", "CN=localhost", "-validity", "2"],
            check=True,
            capture_output=True,
        )  # fmt: skip

    pkcs12 = tmp_path / "keytool.p12"
    keytool(pkcs12, "PKCS12")
    settings = {"ssl.keystore.location": str(pkcs12), "ssl.keystore.password": "secret12"}
    server = server_context(settings)  # JKS, Kafka's default type, holding a PKCS12 file
    lax = client_context({"ssl.endpoint.identification.algorithm": ""})
    lax.verify_mode = ssl.CERT_NONE  # only the server's loading is under test
    assert handshake(server, lax).ok
    jks = tmp_path / "keytool.jks"
    keytool(jks, "JKS")
    _refused(
        {**settings, "ssl.keystore.location": str(jks)},
        "ssl.keystore.location",
        f"is a JKS keystore, which Gregor cannot read; convert it to PKCS12 with `keytool "
        f"-importkeystore -srckeystore {jks} -srcstoretype JKS",
    )
