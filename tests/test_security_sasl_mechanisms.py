"""A listener's mechanisms from its settings (server/security/sasl/mechanisms.py): what is
built, and the start-up errors for what Kafka refuses or Gregor cannot run."""

from __future__ import annotations

from pathlib import Path

import pytest

from gregor.controller.scram_credentials import ScramCredential, credential_from_password
from gregor.server.security.sasl.jwks import Jwks
from gregor.server.security.sasl.mechanisms import jwks_sources, server_mechanisms

PLAIN_JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
    'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";'
)
OAUTH_JAAS = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
ALICE = credential_from_password("SCRAM-SHA-256", "alice-secret")


def lookup(user: str, mechanism: str) -> ScramCredential | None:
    return ALICE if (user, mechanism) == ("alice", "SCRAM-SHA-256") else None


def build(settings: dict[str, str]) -> dict[str, object]:
    return dict(server_mechanisms(settings, lookup, lambda: 0))


def test_each_enabled_mechanism_gets_a_factory_of_fresh_servers() -> None:
    factories = server_mechanisms(
        {
            "sasl.enabled.mechanisms": "PLAIN, SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
            "plain.sasl.jaas.config": PLAIN_JAAS,
            "oauthbearer.sasl.jaas.config": OAUTH_JAAS,
        },
        lookup,
        lambda: 0,
    )
    assert list(factories) == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
    first, second = factories["PLAIN"](), factories["PLAIN"]()
    assert first is not second
    first.evaluate(b"\0alice\0alice-secret")
    assert first.principal == "User:alice" and not second.complete
    scram = factories["SCRAM-SHA-256"]()
    assert scram.mechanism == "SCRAM-SHA-256"
    assert scram.evaluate(b"n,,n=alice,r=abc").startswith(b"r=abc")
    # The unsecured validator (Kafka's default) needs no JWKS.
    assert jwks_sources(factories) == []


def test_unprefixed_keys_serve_a_mapping_resolved_for_one_mechanism() -> None:
    factories = build({"sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": PLAIN_JAAS})
    assert list(factories) == ["PLAIN"]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({}, "sasl.enabled.mechanisms includes GSSAPI \\(Kafka's default when unset\\)"),
        ({"sasl.enabled.mechanisms": "PLAIN,GSSAPI"}, "sasl.enabled.mechanisms includes GSSAPI"),
        ({"sasl.enabled.mechanisms": " , "}, "sasl.enabled.mechanisms is empty"),
        ({"sasl.enabled.mechanisms": "DIGEST-MD5"}, "unsupported SASL mechanism 'DIGEST-MD5'"),
        ({"sasl.enabled.mechanisms": "PLAIN"}, "Could not find a 'KafkaServer' entry.*PLAIN"),
        ({"sasl.enabled.mechanisms": "OAUTHBEARER"}, "listener.name.<listener>.oauthbearer"),
        (
            {"sasl.enabled.mechanisms": "PLAIN", "plain.sasl.jaas.config": "x required"},
            "plain.sasl.jaas.config: JAAS config entry not terminated by semi-colon",
        ),
        (
            {"sasl.enabled.mechanisms": "PLAIN", "plain.sasl.jaas.config": OAUTH_JAAS},
            "login module .*OAuthBearerLoginModule is not supported for PLAIN",
        ),
        (
            {
                "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                "scram-sha-512.sasl.jaas.config": PLAIN_JAAS + PLAIN_JAAS,
            },
            "contains 2 login modules, should be 1 module",
        ),
        (
            {
                "sasl.enabled.mechanisms": "PLAIN",
                "plain.sasl.jaas.config": PLAIN_JAAS,
                "plain.sasl.server.callback.handler.class": "com.example.Custom",
            },
            "plain.sasl.server.callback.handler.class: com.example.Custom is not supported",
        ),
        (
            {
                "sasl.enabled.mechanisms": "OAUTHBEARER",
                "oauthbearer.sasl.jaas.config": OAUTH_JAAS,
                "oauthbearer.sasl.server.callback.handler.class": (
                    "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
                ),
            },
            "sasl.oauthbearer.jwks.endpoint.url is required",
        ),
        (
            {
                "sasl.enabled.mechanisms": "OAUTHBEARER",
                "oauthbearer.sasl.jaas.config": OAUTH_JAAS[:-1]
                + ' unsecuredValidatorAllowableClockSkewMs="soon";',
            },
            "unsecuredValidatorAllowableClockSkewMs: not an integer",
        ),
    ],
)
def test_start_up_errors_name_the_key(settings: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build(settings)


@pytest.mark.parametrize(
    "handler",
    [
        "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerValidatorCallbackHandler",
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
    ],
)
def test_kafkas_jwt_validator_names_select_jwks_validation(handler: str, tmp_path: Path) -> None:
    url = (tmp_path / "jwks.json").as_uri()
    settings = {
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        "oauthbearer.sasl.jaas.config": OAUTH_JAAS,
        "oauthbearer.sasl.server.callback.handler.class": handler,
        "sasl.oauthbearer.jwks.endpoint.url": url,
        "sasl.oauthbearer.jwks.endpoint.refresh.ms": "60000",
    }
    factories = server_mechanisms(settings, lookup, lambda: 0)
    (jwks,) = jwks_sources(factories)
    assert isinstance(jwks, Jwks)
    # Nothing is read at start-up: the broker calls refresh() off the event loop.
    assert (jwks.url, jwks.refresh_ms, jwks.loaded) == (url, 60000, False)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("sasl.oauthbearer.jwks.endpoint.url", "ftp://idp/jwks", 'only "http", "https"'),
        ("sasl.oauthbearer.jwks.endpoint.refresh.ms", "-1", "must be non-negative"),
        ("sasl.oauthbearer.clock.skew.seconds", "x", "clock.skew.seconds: not an integer"),
    ],
)
def test_jwt_settings_errors(key: str, value: str, message: str) -> None:
    settings = {
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        "oauthbearer.sasl.jaas.config": OAUTH_JAAS,
        "oauthbearer.sasl.server.callback.handler.class": (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
        ),
        "sasl.oauthbearer.jwks.endpoint.url": "https://idp/jwks",
        key: value,
    }
    with pytest.raises(ValueError, match=message):
        build(settings)
