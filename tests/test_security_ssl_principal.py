"""Certificate principals: the subject DN as Java prints it, Kafka's ssl.principal.mapping.rules,
and the principal of a TLS peer."""

from __future__ import annotations

import datetime

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.name import _ASN1Type
from cryptography.x509.oid import NameOID

from gregor.server.security.ssl_principal import (
    ANONYMOUS,
    NoMatchingRule,
    distinguished_name,
    parse_mapping_rules,
    principal_from_ssl,
)

A = x509.NameAttribute
RDN = x509.RelativeDistinguishedName


def _name(*rdns: x509.NameAttribute | x509.RelativeDistinguishedName) -> x509.Name:
    return x509.Name([r if isinstance(r, RDN) else RDN([r]) for r in rdns])


# Subjects in encoding order, and what X500Principal.getName() printed for a certificate with
# that subject: generated once with a throw-away Java program (Java 17.0.15 and Temurin 25
# print the same, except the BMPString, where 17.0.15 mis-decodes the UTF-16 bytes as ASCII and
# 25 prints the text, which is what these expect).
JAVA_GET_NAME = [
    (
        _name(
            A(NameOID.COUNTRY_NAME, "US"),
            A(NameOID.ORGANIZATION_NAME, "Acme, Inc."),
            A(NameOID.COMMON_NAME, "Doe, John"),
        ),
        "CN=Doe\\, John,O=Acme\\, Inc.,C=US",
    ),
    (
        _name(A(NameOID.COMMON_NAME, 'a+b "quoted" <x>;y=z\\w')),
        'CN=a\\+b \\"quoted\\" \\<x\\>\\;y\\=z\\\\w',
    ),
    (
        _name(A(NameOID.ORGANIZATION_NAME, "Jürgen Ω"), A(NameOID.COMMON_NAME, "日本 user")),
        "CN=日本 user,O=Jürgen Ω",
    ),
    (
        _name(A(NameOID.COMMON_NAME, "alice"), A(NameOID.EMAIL_ADDRESS, "alice@example.com")),
        "1.2.840.113549.1.9.1=#1611616c696365406578616d706c652e636f6d,CN=alice",
    ),
    (
        _name(
            A(NameOID.ORGANIZATIONAL_UNIT_NAME, "eng"),
            RDN([A(NameOID.COMMON_NAME, "bob"), A(NameOID.USER_ID, "bob123")]),
        ),
        "CN=bob+UID=bob123,OU=eng",
    ),
    (
        _name(
            A(NameOID.DOMAIN_COMPONENT, "com"),
            A(NameOID.DOMAIN_COMPONENT, "example"),
            A(NameOID.COMMON_NAME, "carol"),
        ),
        "CN=carol,DC=example,DC=com",
    ),
    (
        _name(
            A(NameOID.LOCALITY_NAME, " lead"),
            A(NameOID.STATE_OR_PROVINCE_NAME, "trail "),
            A(NameOID.COMMON_NAME, "#hash"),
        ),
        "CN=\\#hash,ST=trail\\ ,L=\\ lead",
    ),
    (
        _name(
            A(NameOID.SERIAL_NUMBER, "1234"),
            A(NameOID.TITLE, "boss"),
            A(NameOID.GIVEN_NAME, "Dave"),
            A(NameOID.STREET_ADDRESS, "1 Main St"),
            A(NameOID.COMMON_NAME, "dave"),
        ),
        "CN=dave,STREET=1 Main St,2.5.4.42=#0c0444617665,2.5.4.12=#0c04626f7373,"
        "2.5.4.5=#130431323334",
    ),
    (
        _name(
            A(NameOID.ORGANIZATION_NAME, "bmp é", _ASN1Type.BMPString),
            A(NameOID.COMMON_NAME, "t61 x", _ASN1Type.T61String),
        ),
        "CN=t61 x,O=bmp é",
    ),
    (x509.Name([]), ""),
    (
        _name(
            A(NameOID.COUNTRY_NAME, "US"),
            A(NameOID.ORGANIZATION_NAME, "Org"),
            A(NameOID.ORGANIZATIONAL_UNIT_NAME, "ServiceUsers"),
            A(NameOID.COMMON_NAME, "duke"),
        ),
        "CN=duke,OU=ServiceUsers,O=Org,C=US",
    ),
    (_name(A(NameOID.COMMON_NAME, "a\x00b\r")), "CN=a\\00b\\\r"),
]


def _certificate(subject: x509.Name) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    start = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(_name(A(NameOID.COMMON_NAME, "issuer")))
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(start)
        .not_valid_after(start + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.DER)


@pytest.mark.parametrize(("subject", "expected"), JAVA_GET_NAME, ids=range(len(JAVA_GET_NAME)))
def test_distinguished_name_is_javas(subject: x509.Name, expected: str) -> None:
    assert distinguished_name(_certificate(subject)) == expected


# Kafka's own SslPrincipalMapper cases, and a few of the corners of its grammar.
RULES = (
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,\n"
    "  RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U,"
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U,"
    "DEFAULT"
)


@pytest.mark.parametrize(
    ("rules", "dn", "name"),
    [
        (RULES, "CN=Duke,OU=ServiceUsers,O=Org,C=US", "Duke"),
        (RULES, "CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US", "duke@sme"),
        (RULES, "cn=duke,ou=sme,dc=mycp,dc=com", "DUKE@SME"),
        (RULES, "cN=duke,OU=JavaSoft,O=Sun Microsystems", "DUKE"),
        (RULES, "OU=JavaSoft,O=Sun Microsystems,C=US", "OU=JavaSoft,O=Sun Microsystems,C=US"),
        ("DEFAULT", "CN=a\\,b,O=x", "CN=a\\,b,O=x"),
        # an escaped backslash in the pattern; the comma inside the value does not split rules
        (
            "RULE:^CN=((\\\\, *|\\w)+)(,.*|$)/$1/,DEFAULT",
            "CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz",
            "Tkac\\, Adam",
        ),
        # $2 names no group: literal text, as in Kafka
        ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1$2/", "CN=Duke,OU=ServiceUsers,O=Org", "Duke$2"),
        # Java's named groups and escaped slash in the replacement
        ("RULE:^CN=(?<user>[^,]*),.*$/${user}\\/x/", "CN=Duke,OU=ServiceUsers", "Duke/x"),
        # Java's replaceAll also replaces the empty match at the end
        ("RULE:.*/x/", "abc", "xx"),
    ],
)
def test_mapping_rules(rules: str, dn: str, name: str) -> None:
    assert parse_mapping_rules(rules).name(dn) == name


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ("DEFAULT/L", "Invalid rule: `DEFAULT/L`, unmatched substring: `/L`"),
        ("DEFAUL", "Invalid rule: `DEFAUL`, unmatched substring: `DEFAUL`"),
        (
            "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
            "Invalid rule: `RULE:CN=(.*?)`, unmatched substring: `RULE:CN=(.*?)`",
        ),
        (
            "RULE:^CN=(.*),OU=ServiceUsers.*$/$1/LU",
            "Invalid rule: `RULE:^CN=(.*),OU=ServiceUsers.*$/$1/LU`, unmatched substring: `U`",
        ),
        ("RULE:(/x/", "Invalid rule: `RULE:(/x/`: bad pattern"),
        ("RULE:a/$/", "Invalid rule: `RULE:a/$/`: bad replacement `$`"),
    ],
)
def test_bad_rules_are_refused_with_kafkas_message(rules: str, message: str) -> None:
    with pytest.raises(ValueError) as refused:
        parse_mapping_rules(rules)
    assert str(refused.value).startswith(message)


def test_no_matching_rule() -> None:
    mapper = parse_mapping_rules("RULE:^CN=(.*?),.*$/$1/L")
    with pytest.raises(
        NoMatchingRule, match=r"No rules apply to O=x, rules \[RULE:\^CN=\(\.\*\?\),\.\*\$/\$1/L\]"
    ):
        mapper.name("O=x")


def test_no_tls_object_is_anonymous() -> None:
    assert principal_from_ssl(None, parse_mapping_rules("DEFAULT")) == ANONYMOUS == "User:ANONYMOUS"
